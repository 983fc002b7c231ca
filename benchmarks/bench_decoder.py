"""Columnar Decoder throughput on the real-PostgreSQL corpus (benchmarks/corpus.py).

Paths: typed tables only, change-event table only, both; text and binary modes; a
plain memory copy of the same input bytes as the hardware baseline; the reference
decoder on a slice of the corpus for the native/reference ratio.
"""

import os

import numpy as np
import pytest

import corpus
from benchutil import NOTES, RESULTS, corpus_data, record, time_memcpy
from pgoutput_fast import _native
from pgoutput_fast.decoder import Decoder

ROWS = corpus.DEFAULT_ROWS
WORKLOADS = [(w, m) for w in ("narrow", "wide", "toast", "stream") for m in ("text", "binary")]


def changes_of(msgs):
    first = np.frombuffer(msgs.buffers()[2], np.uint8)[
        np.frombuffer(msgs.buffers()[1], np.int32 if msgs.type.id == 14 or str(msgs.type) == "binary" else np.int64)[:-1]]
    return int(np.isin(first, np.frombuffer(b"IUD", np.uint8)).sum())


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="memcpy")
def test_memcpy_baseline(benchmark, workload, mode):
    _, msgs, nbytes = corpus_data(workload, mode)
    time_memcpy(benchmark, msgs, rounds=9)
    record(benchmark, f"memcpy/{workload}/{mode}", bytes=nbytes)


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.parametrize("path", ["typed", "events", "both"])
@pytest.mark.benchmark(group="decoder")
def test_decoder_native(benchmark, workload, mode, path):
    lsns, msgs, nbytes = corpus_data(workload, mode)
    kw = {"typed": dict(events=False), "events": dict(tables=False), "both": {}}[path]

    def run():
        return Decoder(**kw).feed(msgs, lsns)

    cs = benchmark.pedantic(run, rounds=3, iterations=1)
    rows = cs.num_changes
    name = f"decoder/{path}/{workload}/{mode}"
    record(benchmark, name, bytes=nbytes, rows=rows)
    RESULTS[name]["baseline"] = f"memcpy/{workload}/{mode}"


SLICE = 20_000


@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.benchmark(group="decoder-vs-reference")
def test_decoder_slice(benchmark, mode):
    lsns, msgs, _ = corpus_data("narrow", mode)
    sl, ls = msgs.slice(0, SLICE), lsns[:SLICE]
    nbytes = sum(len(m) for m in sl.to_pylist())
    benchmark.pedantic(lambda: Decoder().feed(sl, ls), rounds=5, iterations=1)
    record(benchmark, f"slice/native/{mode}", bytes=nbytes)
    RESULTS[f"slice/native/{mode}"]["baseline"] = f"slice/reference/{mode}"


@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.benchmark(group="decoder-vs-reference")
def test_decoder_slice_reference(benchmark, mode):
    from pgoutput_fast import _reference

    if not hasattr(_reference, "DecoderCore"):
        pytest.skip("reference DecoderCore not available")
    lsns, msgs, _ = corpus_data("narrow", mode)
    sl, ls = msgs.slice(0, SLICE), lsns[:SLICE]
    nbytes = sum(len(m) for m in sl.to_pylist())

    def run():
        d = Decoder.__new__(Decoder)
        from pgoutput_fast.catalog import RelationCatalog

        d._catalog = RelationCatalog()
        d._core = _reference.DecoderCore(d._catalog)
        d._batch_cls = _reference.MessageBatch
        return d.feed(sl, ls)

    benchmark.pedantic(run, rounds=1, iterations=1)
    record(benchmark, f"slice/reference/{mode}", bytes=nbytes)


def _mixed_toast_stream(binary, n=20_000, seed=5):
    """One transaction of n changes of a 5-column table: updates, some of which leave a
    TOASTed text column unchanged ('u'), and deletes (old keys), interleaved at random,
    as on a table whose large values are rarely rewritten. With both outputs this was
    quadratic until 9b6336c (the event rows past each block of deletes written again):
    at ed5b1be, 20 k changes took 52-58 ms with both outputs against 14 ms for the two
    alone; at 9b6336c, 6-7 ms against 7."""
    import datetime
    import random
    import struct

    from pgoutput_fast import (Begin, Commit, Delete, Relation, RelationColumn,
                               UNCHANGED_TOAST, Update, Value, encode_message)

    rng = random.Random(seed)
    rel = Relation(16384, "public", "t", "d", (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "a", 23, -1),
        RelationColumn(0, "body", 25, -1), RelationColumn(0, "f", 701, -1),
        RelationColumn(0, "ts", 1184, -1)), None)

    def val(v, fmt):
        return Value("b", struct.pack(fmt, v)) if binary else Value("t", str(v).encode())

    msgs = [encode_message(rel), encode_message(Begin(1 << 30, 0, 900))]
    for r in range(n):
        key = val(r, ">q")
        if rng.random() < 0.3:
            msgs.append(encode_message(Delete(16384, "K", (key, None, None, None, None), None)))
            continue
        body = UNCHANGED_TOAST if rng.random() < 0.1 else (
            Value("b" if binary else "t", f"body-{r}".encode()))
        msgs.append(encode_message(Update(16384, None, None, (
            key, val(r * 3, ">i"), body, val(r / 7, ">d"),
            Value("b", struct.pack(">q", r * 10**6)) if binary else Value("t", (
                datetime.datetime(2000, 1, 1) + datetime.timedelta(seconds=r)).isoformat(" ").encode()
                + b"+00")), None)))
    msgs.append(encode_message(Commit(0, 1 << 30, (1 << 30) + 8, 0)))
    import pyarrow as pa

    return pa.array(msgs, pa.binary()), np.arange(len(msgs), dtype=np.uint64)


@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.parametrize("path", ["typed", "events", "both"])
@pytest.mark.benchmark(group="decoder-mixed-toast")
def test_decoder_mixed_toast(benchmark, mode, path):
    """Both outputs on updates with sparse unchanged TOAST values mixed with deletes
    (synthetic): the regression benchmark of the quadratic case. The note compares
    'both' with the two outputs alone."""
    msgs, lsns = _mixed_toast_stream(mode == "binary")
    kw = {"typed": dict(events=False), "events": dict(tables=False), "both": {}}[path]
    benchmark.pedantic(lambda: Decoder(**kw).feed(msgs, lsns), rounds=5, iterations=1)
    name = f"mixed-toast/{path}/{mode}"
    record(benchmark, name, bytes=msgs.buffers()[2].size, rows=len(msgs) - 3)
    alone = [RESULTS.get(f"mixed-toast/{p}/{mode}") for p in ("typed", "events")]
    if path == "both" and all(alone):
        NOTES.append(f"mixed-toast/{mode}: both outputs {RESULTS[name]['median'] * 1e3:.1f} ms, "
                     f"typed + events alone {(alone[0]['median'] + alone[1]['median']) * 1e3:.1f} ms")
