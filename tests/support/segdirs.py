"""Capture directories made from the bundled fixture captures (``write_capture``), cut
into several segments at transaction boundaries (outside B..C, b..P and S..E)."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from tests.support.captures import FIXTURES, load_fixture


def fixture_segments(name, per_segment=25):
    """The capture ``name`` as segment tables of about ``per_segment`` messages each."""
    from pgoutput_fast import capture
    from pgoutput_fast.protocol import Grammar

    lsns, msgs = load_fixture(name)
    grammar = Grammar()
    cuts, start = [], 0
    for i, m in enumerate(msgs):
        grammar.step(m)
        if grammar.at_boundary and i + 1 - start >= per_segment:
            cuts.append((start, i + 1))
            start = i + 1
    if start < len(msgs):
        cuts.append((start, len(msgs)))
    return [pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                      pa.array(range(a, b), pa.int64())], schema=capture.SEGMENT_SCHEMA)
            for a, b in cuts]


def fixture_options(name) -> dict:
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        opts = json.load(f)["capture"]["options"]
    return {"binary": opts.get("binary") == "true", "proto_version": int(opts["proto_version"])}


def write_fixture_dir(directory, name, per_segment=25):
    """A capture directory at ``directory`` holding the fixture capture ``name``."""
    from pgoutput_fast import capture

    capture.write_capture(directory, fixture_segments(name, per_segment), fixture_options(name))
    return str(directory)
