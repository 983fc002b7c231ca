"""Each feed's export, fed in small pieces: what the export keeps from feed to feed.

The export reuses what does not change between feeds (a relation's schema while its
columns' Arrow types stay the same; all-null columns sliced from one array per type;
empty unchanged-TOAST lists from one array). These tests feed the bundled captures in
pieces of 1, 3 and 7 messages and hold each piece's tables to the tables of one feed of
everything: same schemas (metadata included), same rows, valid in full, and the same
after an Arrow IPC round trip (how the Spark reader hands them over).
"""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

import pgoutput_fast
from pgoutput_fast import Decoder
from pgoutput_fast.arrow_values import column_values, freeze
from pgoutput_fast.parallel import _concat_tables, _unify
from tests.support.captures import FIXTURE_NAMES, load_fixture

OUTPUTS = {"both": {}, "typed": {"events": False}, "events": {"tables": False}}


def _ipc_round_trip(table):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def _same(a, b):
    """Same schema (metadata included) and the same values, compared under freeze
    (NaN == NaN: Table.equals of a table with a NaN is False)."""
    return a.schema.equals(b.schema, check_metadata=True) and all(
        freeze(column_values(x)) == freeze(column_values(y)) for x, y in zip(a.columns, b.columns))


def _by_version(changesets):
    out: dict = {}
    for cs in changesets:
        for v, t in cs.table_versions:
            out.setdefault((v.relid, v.version), []).append(t)
    return out


@pytest.mark.parametrize("step", [1, 3, 7])
@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_small_feeds_give_the_tables_of_one_feed(name, output, step):
    lsns, msgs = load_fixture(name)
    kwargs = OUTPUTS[output]
    whole = Decoder(**kwargs).feed(msgs, lsns)
    dec = Decoder(**kwargs)
    parts = [dec.feed(msgs[i:i + step], lsns[i:i + step]) for i in range(0, len(msgs), step)]

    want = {(v.relid, v.version): t for v, t in whole.table_versions}
    got = _by_version(parts)
    assert set(got) == set(want)
    for key, tables in got.items():
        for t in tables:
            t.validate(full=True)
            # a column of an unknown type is string in a piece that saw only text values
            # and binary once one saw a binary value (binary_unknown=None): the whole's
            # type is the widest of the pieces'
            assert _unify([t.schema, want[key].schema]).equals(want[key].schema, check_metadata=True), key
            assert t.schema.metadata == want[key].schema.metadata
            assert _same(_ipc_round_trip(t), t), key
        assert _same(_concat_tables(tables), want[key]), key

    if whole.events is not None:
        events = [cs.events for cs in parts]
        for e in events:
            e.validate(full=True)
            assert e.schema.equals(whole.events.schema, check_metadata=True)
            assert _same(_ipc_round_trip(e), e)
        assert _same(pa.concat_tables(events), whole.events)


def test_all_null_columns_of_growing_and_shrinking_feeds():
    """Feeds whose tables grow past the kept all-null arrays and shrink again: every
    column null in all rows of a feed (no old image, no origin) is as long as its
    table, and reads as nulls."""
    lsns, msgs = load_fixture("v1_text")
    dec = Decoder()
    at = 0
    for step in (2, 40, 5, 200, 1, 60):
        if at >= len(msgs):
            break
        cs = dec.feed(msgs[at:at + step], lsns[at:at + step])
        at += step
        for _, t in cs.table_versions:
            t.validate(full=True)
            for col in ("_before", "_before_kind", "_origin", "_special"):
                c = t.column(col)
                assert len(c) == t.num_rows
                if c.null_count == t.num_rows:
                    assert c.to_pylist() == [None] * t.num_rows
            toast = t.column("_unchanged_toast")
            assert len(toast) == t.num_rows and toast.null_count == 0      # (lists, maybe empty)


_CHILD = r"""
import json, sys
import pgoutput_fast
from pgoutput_fast.framing import read_capture
path, kwargs = json.loads(sys.argv[1])
lsns, msgs = read_capture(path)
dec = pgoutput_fast.Decoder(**kwargs)
first = dec.feed(msgs[:1], lsns[:1])           # one message: nothing committed yet
rest = dec.feed(msgs[1:], lsns[1:])
ev = lambda cs: cs.events.num_rows if cs.events is not None else -1
print(json.dumps([ev(first), sum(t.num_rows for _, t in first.table_versions),
                  ev(rest), sum(t.num_rows for _, t in rest.table_versions)]))
"""


@pytest.mark.parametrize("output", list(OUTPUTS))
def test_first_export_of_a_process_with_no_rows(output):
    """The first export of a fresh interpreter, of a feed that committed nothing (the
    kept arrays do not exist yet), then the rest."""
    from tests.support.captures import FIXTURES

    parent = os.path.dirname(os.path.dirname(os.path.abspath(pgoutput_fast.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    path = os.path.join(FIXTURES, "v1_text.pgoc")
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([path, OUTPUTS[output]])],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first_events, first_rows, rest_events, rest_rows = json.loads(out.stdout)
    lsns, msgs = load_fixture("v1_text")
    whole = Decoder(**OUTPUTS[output]).feed(msgs, lsns)
    assert first_rows == 0 and first_events in (0, -1)
    assert rest_rows == sum(t.num_rows for _, t in whole.table_versions)
    assert rest_events == (whole.events.num_rows if whole.events is not None else -1)


def test_a_column_whose_type_changes_between_feeds():
    """A column of an unknown type (an enum) is string in a feed of text values and
    binary in a feed with a binary one (binary_unknown=None): the kept schema follows,
    feed by feed, back and forth, with the _before struct's field."""
    from pgoutput_fast.messages import Insert, Relation, RelationColumn, Update, Value
    from tests.decoder.test_decoder import enc, t, txn

    rel = Relation(16600, "public", "u", "f", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "mood", 17001, -1)))
    text_feed = lambda xid, i: enc(*txn(xid, 100 * xid, Insert(16600, (t(i), t("happy"))),
                                        Update(16600, "O", (t(i), t("happy")), (t(i), t("sad")))))
    binary_feed = lambda xid, i: enc(*txn(xid, 100 * xid, Insert(16600, (Value("b", i.to_bytes(4, "big")),
                                                                         Value("b", b"glad")))))
    dec = Decoder()
    feeds = [enc(rel) + text_feed(1, 1), binary_feed(2, 2), text_feed(3, 3), binary_feed(4, 4), text_feed(5, 5)]
    for k, msgs in enumerate(feeds):
        table = dec.feed(msgs).tables["public.u"]
        table.validate(full=True)
        if k % 2:
            assert table.schema.field("mood").type == pa.binary()
            assert table.column("mood").to_pylist() == [b"glad"]
            assert table.column("_before").to_pylist() == [None]
        else:
            assert table.schema.field("mood").type == pa.string()
            assert table.schema.field("_before").type.field("mood").type == pa.string()
            assert table.column("mood").to_pylist() == ["happy", "sad"]
            assert table.column("_before").to_pylist() == [None, {"id": k + 1, "mood": "happy"}]
