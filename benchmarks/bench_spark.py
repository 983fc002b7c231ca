"""Spark throughput: decode inside ``mapInArrow`` vs an identity ``mapInArrow``, and apply.

One synthetic capture directory (no server needed): a 6-column table (int8 key, int4,
text, timestamptz, float8, numeric) in text mode, ROWS changes (80 % inserts, 15 %
updates, 5 % deletes) in transactions of 1000, cut into segments of 50 transactions.
On the same data, in the same run, with one SparkSession ``local[2]``:

* ``spark/identity``: ``read_segments(...).mapInArrow(identity)``: Spark's own cost of
  reading the segments and moving the raw messages through a Python worker;
* ``spark/decode-events``: ``decode(df, catalog)`` (the change-event table);
* ``spark/decode-typed``: ``decode(df, catalog, table=...)``;
* ``spark/decode-stream-one-task`` / ``spark/decode-stream-pieces``: the same changes as
  ONE streamed transaction spanning every segment, read as one task (``split=False``)
  and in pieces (``pgoutput_fast.split``, as many as the session's task slots);
* ``spark/decode-bulk-one-task`` / ``spark/decode-bulk-pieces``: the same changes as ONE
  plain transaction in ONE segment (a bulk load), read as one task and cut inside the
  transaction into as many pieces as the task slots (``split.cut_segment``);
* ``spark/apply``: ``apply_changes`` of the typed changes into a fresh snapshot (prints
  the reduced batch that reached the commit and the driver's Arrow peak);
* ``spark/apply-parts``: the same with ``max_batch_changes=ROWS // 6`` (commits of
  whole transactions, at most that many changes each): what the driver holds at once,
  and what the extra commits cost;
* ``spark/apply-events``: ``apply_changes`` of the change events (``catalog=``).

Every DataFrame is consumed with ``write.format("noop")``. The issue's bar: both decodes
reach >= 50 % of the identity's rows/s (``test_decode_keeps_up_with_identity``).
Run: ``pytest benchmarks/bench_spark.py --benchmark-only`` (PGOUTPUT_FAST_SPARK_ROWS
sets the size, default 600000).
"""

import os
import shutil
import tempfile

import pytest

from benchutil import RESULTS, record

ROWS = int(os.environ.get("PGOUTPUT_FAST_SPARK_ROWS", "600000"))
TXN = 1000
SEG_TXNS = 50
TABLE = "public.bench"


def _build(directory, streamed=False, bulk=False):
    """The capture; ``streamed=True``: the same changes as ONE streamed transaction (its
    blocks of TXN changes where the transactions were, a Stream Commit at the end);
    ``bulk=True``: as ONE plain transaction in ONE segment (a bulk load)."""
    import pyarrow as pa

    from pgoutput_fast import encode_message
    from pgoutput_fast.capture import SEGMENT_SCHEMA, write_capture
    from pgoutput_fast.messages import (Begin, Commit, Delete, Insert, Relation, RelationColumn,
                                        StreamCommit, StreamStart, StreamStop, Update, Value)

    rel = Relation(16400, "public", "bench", "d", (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "a", 23, -1), RelationColumn(0, "b", 25, -1),
        RelationColumn(0, "c", 1184, -1), RelationColumn(0, "d", 701, -1),
        RelationColumn(0, "e", 1700, (12 << 16) + 3 + 4)))

    def row(i):
        return (Value("t", str(i).encode()), Value("t", str(i * 7 % 100000).encode()),
                Value("t", f"row {i} some text payload".encode()),
                Value("t", f"2024-05-{1 + i % 28:02d} 12:{i % 60:02d}:00.123456+00".encode()),
                Value("t", repr(i / 7).encode()), Value("t", f"{i % 100000}.125".encode()))

    msgs, lsns = [encode_message(rel)], [0]
    lsn, i, live = 1 << 24, 0, []
    seg_bounds = [0]
    txn = 0
    sx = 999 if streamed else None
    if bulk:
        msgs.append(b"")                                         # (the Begin, once its final LSN is known)
        lsns.append(lsn)
    while i < ROWS:
        lsn += 64
        if not bulk:
            msgs.append(encode_message(StreamStart(sx, int(txn == 0)) if streamed
                                       else Begin(lsn + (TXN + 1) * 64, 0, 1000 + txn)))
            lsns.append(lsn)
        for _ in range(TXN):
            lsn += 64
            r = i % 20
            if r < 3 and live:
                k = live[(i * 31) % len(live)]
                msgs.append(encode_message(Update(16400, None, None, row(k), sx)))
            elif r == 3 and live:
                k = live.pop((i * 17) % len(live))
                msgs.append(encode_message(Delete(16400, "K", (Value("t", str(k).encode()),) + (None,) * 5,
                                                  sx)))
            else:
                live.append(i)
                msgs.append(encode_message(Insert(16400, row(i), sx)))
            lsns.append(lsn)
            i += 1
        txn += 1
        if bulk:
            continue
        lsn += 64
        msgs.append(encode_message(StreamStop() if streamed else Commit(0, lsn, lsn + 64, 0)))
        lsns.append(lsn)
        if txn % SEG_TXNS == 0:
            seg_bounds.append(len(msgs))
    if bulk:
        lsn += 64
        msgs.append(encode_message(Commit(0, lsn, lsn + 64, 0)))
        lsns.append(lsn)
        msgs[1] = encode_message(Begin(lsn, 0, 1000))          # (its final LSN: the Commit's)
    if streamed:
        lsn += 64
        msgs.append(encode_message(StreamCommit(sx, 0, lsn, lsn + 64, 0)))
        lsns.append(lsn)
    if seg_bounds[-1] != len(msgs):
        seg_bounds.append(len(msgs))
    write_capture(directory, (pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                                        pa.array(range(a, b), pa.int64())], schema=SEGMENT_SCHEMA)
                              for a, b in zip(seg_bounds, seg_bounds[1:])), {"binary": False})
    return len(msgs), ROWS


@pytest.fixture(scope="module")
def world():
    from pgoutput_fast import spark as pgs

    d = tempfile.mkdtemp(prefix="pgoutput_fast_bench_spark_")
    n_msgs, n_rows = _build(d)
    spark = pgs.get_spark("local[2]", "pgoutput_fast-bench")
    df = pgs.read_segments(spark, d)
    catalog = pgs.build_catalog(df)
    yield {"spark": spark, "dir": d, "df": df, "catalog": catalog, "messages": n_msgs, "rows": n_rows}
    spark.stop()
    shutil.rmtree(d, ignore_errors=True)


def _one_transaction_world(world, **build):
    """The same changes built again (``_build(**build)``), read in pieces and as one task."""
    from pgoutput_fast import spark as pgs

    d = tempfile.mkdtemp(prefix="pgoutput_fast_bench_spark_one_txn_")
    n_msgs, n_rows = _build(d, **build)
    spark = world["spark"]
    split = pgs.read_segments(spark, d)
    whole = pgs.read_segments(spark, d, split=False)
    return d, {"split": split, "whole": whole, "catalog": pgs.build_catalog(split),
               "messages": n_msgs, "rows": n_rows, "pieces": split.rdd.getNumPartitions()}


@pytest.fixture(scope="module")
def stream_world(world):
    """The same changes as one streamed transaction spanning every segment."""
    d, w = _one_transaction_world(world, streamed=True)
    yield w
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def bulk_world(world):
    """The same changes as one plain transaction in one segment."""
    d, w = _one_transaction_world(world, bulk=True)
    yield w
    shutil.rmtree(d, ignore_errors=True)


def _noop(df):
    df.write.format("noop").mode("overwrite").save()


def _run(benchmark, fn, rounds=3):
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def test_identity(benchmark, world):
    df = world["df"]
    _run(benchmark, lambda: _noop(df.mapInArrow(lambda it: it, df.schema)))
    record(benchmark, "spark/identity", rows=world["messages"], messages=world["messages"])


def test_decode_events(benchmark, world):
    from pgoutput_fast import spark as pgs

    _run(benchmark, lambda: _noop(pgs.decode(world["df"], world["catalog"])))
    record(benchmark, "spark/decode-events", messages=world["messages"], rows=world["rows"],
           baseline="spark/identity")


def test_decode_typed(benchmark, world):
    from pgoutput_fast import spark as pgs

    _run(benchmark, lambda: _noop(pgs.decode(world["df"], world["catalog"], table=TABLE)))
    record(benchmark, "spark/decode-typed", messages=world["messages"], rows=world["rows"],
           baseline="spark/identity")


def test_decode_stream_one_task(benchmark, stream_world):
    """One streamed transaction over every segment, read as one task (``split=False``:
    what every long streamed transaction did before pieces)."""
    from pgoutput_fast import spark as pgs

    w = stream_world
    _run(benchmark, lambda: _noop(pgs.decode(w["whole"], w["catalog"])))
    record(benchmark, "spark/decode-stream-one-task", messages=w["messages"], rows=w["rows"])


def test_decode_stream_pieces(benchmark, stream_world):
    """The same, one task per segment (``pgoutput_fast.split``)."""
    from pgoutput_fast import spark as pgs

    w = stream_world
    _run(benchmark, lambda: _noop(pgs.decode(w["split"], w["catalog"])))
    record(benchmark, "spark/decode-stream-pieces", messages=w["messages"], rows=w["rows"],
           baseline="spark/decode-stream-one-task")


def test_decode_bulk_one_task(benchmark, bulk_world):
    """One plain transaction in one segment, read as one task (``split=False``: what a
    bulk load did before cuts inside segments)."""
    from pgoutput_fast import spark as pgs

    w = bulk_world
    _run(benchmark, lambda: _noop(pgs.decode(w["whole"], w["catalog"])))
    record(benchmark, "spark/decode-bulk-one-task", messages=w["messages"], rows=w["rows"])


def test_decode_bulk_pieces(benchmark, bulk_world):
    """The same, the segment cut inside the transaction into as many pieces as the
    session's task slots (``split.cut_segment``)."""
    from pgoutput_fast import spark as pgs

    w = bulk_world
    assert w["pieces"] > 1, "the bulk segment should be cut into pieces"
    _run(benchmark, lambda: _noop(pgs.decode(w["split"], w["catalog"])))
    record(benchmark, "spark/decode-bulk-pieces", messages=w["messages"], rows=w["rows"],
           baseline="spark/decode-bulk-one-task")


def test_apply(benchmark, world):
    from pgoutput_fast import spark as pgs

    import pyarrow as pa

    seen = {}

    def once():
        target = tempfile.mkdtemp(prefix="pgoutput_fast_bench_snap_")
        try:
            r = pgs.apply_changes(pgs.decode(world["df"], world["catalog"], table=TABLE), target)
            assert r["changes"] == world["rows"]
            seen.update(r)
        finally:
            shutil.rmtree(target, ignore_errors=True)

    _run(benchmark, once, rounds=2)
    record(benchmark, "spark/apply", messages=world["messages"], rows=world["rows"])
    # how the reduced batch reaches the Delta commit: one Arrow table on the driver
    benchmark.extra_info["reduced rows"] = seen.get("reduced_rows")
    benchmark.extra_info["reduced MB"] = round(seen.get("reduced_bytes", 0) / 1e6, 1)
    benchmark.extra_info["driver Arrow peak MB"] = round(pa.default_memory_pool().max_memory() / 1e6, 1)
    print(f"spark/apply: {world['rows']:,} changes reduced to {seen.get('reduced_rows'):,} rows, "
          f"{seen.get('reduced_bytes', 0) / 1e6:.1f} MB on the driver; the driver's Arrow pool "
          f"peaked at {pa.default_memory_pool().max_memory() / 1e6:.1f} MB")


def test_apply_parts(benchmark, world):
    """``apply_changes`` with the driver's part bounded (``max_batch_changes``)."""
    from pgoutput_fast import spark as pgs

    seen = {}
    limit = max(1, world["rows"] // 6)

    def once():
        target = tempfile.mkdtemp(prefix="pgoutput_fast_bench_snap_")
        try:
            r = pgs.apply_changes(pgs.decode(world["df"], world["catalog"], table=TABLE), target,
                                  max_batch_changes=limit)
            assert r["changes"] == world["rows"] and r["parts"] > 1
            seen.update(r)
        finally:
            shutil.rmtree(target, ignore_errors=True)

    _run(benchmark, once, rounds=2)
    record(benchmark, "spark/apply-parts", messages=world["messages"], rows=world["rows"],
           baseline="spark/apply")
    benchmark.extra_info["parts"] = seen.get("parts")
    benchmark.extra_info["largest part's reduced rows"] = seen.get("reduced_rows")
    benchmark.extra_info["largest part's reduced MB"] = round(seen.get("reduced_bytes", 0) / 1e6, 1)
    print(f"spark/apply-parts: max_batch_changes={limit:,}: {seen.get('parts')} commits, the "
          f"largest reduced to {seen.get('reduced_rows'):,} rows, "
          f"{seen.get('reduced_bytes', 0) / 1e6:.1f} MB on the driver")


def test_apply_events(benchmark, world):
    """apply_changes of the change-event DataFrame (text values parsed with the catalog's types)."""
    from pgoutput_fast import spark as pgs

    def once():
        target = tempfile.mkdtemp(prefix="pgoutput_fast_bench_snap_")
        try:
            r = pgs.apply_changes(pgs.decode(world["df"], world["catalog"]), target,
                                  catalog=world["catalog"])
            assert r[TABLE]["changes"] == world["rows"]
        finally:
            shutil.rmtree(target, ignore_errors=True)

    _run(benchmark, once, rounds=2)
    record(benchmark, "spark/apply-events", messages=world["messages"], rows=world["rows"])


def test_decode_keeps_up_with_identity(world):
    """Messages/s of each decode >= 50 % of the identity mapInArrow's, same data, same run."""
    base = RESULTS.get("spark/identity")
    if base is None:
        pytest.skip("run with the benchmarks (--benchmark-only)")
    for name in ("spark/decode-events", "spark/decode-typed"):
        ratio = base["median"] / RESULTS[name]["median"]
        print(f"{name}: {ratio:.2f} of identity")
        assert ratio >= 0.5, (name, ratio)
