"""The Spark decode task's function (``_decode_fn``), run in this process on Arrow
batches as ``mapInArrow`` hands them over, on every bundled real capture: the batches it
holds and feeds together (``FEED_MESSAGES``) give the same rows as one feed per batch
and as one sequential ``Decoder``, for the change events, the typed tables of
``decode(table=)`` and the packed rows of ``decode_tables``. No Spark needed."""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest

from pgoutput_fast import Decoder
from pgoutput_fast.arrow_values import column_values, freeze
from tests.support.captures import FIXTURE_NAMES, load_fixture

sd = importlib.import_module("pgoutput_fast.spark.decode")   # (the module, not the function)


def _batches(lsns, msgs, size):
    n = len(msgs)
    lsn = pa.array(np.asarray(lsns, np.int64))
    data = msgs if isinstance(msgs, pa.Array) else pa.array(msgs, pa.binary())
    ords = pa.array(np.arange(n, dtype=np.int64))
    return [pa.RecordBatch.from_arrays([lsn.slice(a, size), data.slice(a, size), ords.slice(a, size)],
                                       names=["lsn", "data", "ordinal"])
            for a in range(0, n, size)]


def _catalog(lsns, msgs, binary):
    data = msgs.to_pylist() if isinstance(msgs, pa.Array) else list(msgs)
    rows = [(i, int(lsns[i]), bytes(m)) for i, m in enumerate(data) if m[:1] in (b"R", b"Y", b"S", b"E")]
    return sd.SegmentCatalog.from_control(rows, binary=binary)


def _rows(out):
    t = pa.Table.from_batches(list(out)) if out else None
    return t


def _freeze_table(t):
    if t is None or t.num_rows == 0:
        return ()
    return freeze(sorted((freeze(r) for r in zip(*[column_values(c) for c in t.columns])),
                         key=repr))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("feed", [1, 3, 1_000_000])
def test_task_feeds_give_the_rows_of_one_decoder(name, feed, monkeypatch):
    lsns, msgs = load_fixture(name)
    binary = "binary" in name
    catalog = _catalog(lsns, msgs, binary)
    batches = _batches(lsns, msgs, 5)

    def run(table=None, schema=None, packed=None):
        fn = sd._decode_fn(catalog, [0], table, schema, binary, {}, packed=packed)
        return list(fn(iter(batches)))

    monkeypatch.setattr(sd, "FEED_MESSAGES", feed)
    dec = Decoder(binary_unknown=binary)
    want = dec.feed(msgs, lsns)
    # the change events
    got = run()
    assert _freeze_table(_rows(got)) == _freeze_table(want.events), name
    # each table, as decode(table=) and as decode_tables' packed rows
    names = sorted({v.qualified_name for v, t in want.table_versions if t.num_rows})
    schemas = {n: sd.typed_schema(catalog, n, binary) for n in names}
    packed = _rows(run(packed=schemas))
    for n in names:
        one = _rows(run(table=n, schema=schemas[n]))
        expect = pa.Table.from_batches([sd.conform_batch(t, v, schemas[n]) for v, t in want.table_versions
                                        if v.qualified_name == n and t.num_rows])
        assert _freeze_table(one) == _freeze_table(expect), (name, n)
        arrow_schema = sd._spark_arrow_schema(schemas[n])
        back = [pa.ipc.read_record_batch(pa.py_buffer(b), arrow_schema)
                for t_, b in zip(packed.column("table").to_pylist(), packed.column("rows").to_pylist())
                if t_ == n]
        assert _freeze_table(pa.Table.from_batches(back, schema=arrow_schema)) == _freeze_table(expect), \
            (name, n)
