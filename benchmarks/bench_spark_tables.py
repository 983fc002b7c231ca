"""Spark, many tables: K decodes of one table each against one ``decode_tables``.

A job that applies every table of a capture needs each table's typed rows.
``decode(df, catalog, table=name)`` decodes every message for the one table it returns,
so K tables cost K decodes of the whole stream; ``decode_tables(df, catalog)`` decodes
once, keeps every table's rows (Arrow IPC, persisted), and ``.table(name)`` reads one
back. ``pgoutput-fast pipeline`` (``run_pipeline``) and ``process_new_segments`` use
the second.

One synthetic capture directory (no server needed), text mode: TABLES tables of 6
columns (int8 key, int4, text, timestamptz, float8, numeric), ROWS inserts and updates
in transactions of TXN changes, each transaction writing to every table in turn (as an
order, its lines, a payment... do), cut into segments of 2,000 transactions (about 50,000 messages). On the same
data, in the same run, one SparkSession ``local[2]``, every DataFrame consumed with
``write.format("noop")``:

* ``spark-tables/per-table``: ``decode(df, catalog, table=name)`` for each table;
* ``spark-tables/decode-tables``: ``decode_tables(df, catalog)`` persisted, then
  ``.table(name)`` for each table, then unpersisted (the decode is inside the timing).

Run: ``pytest benchmarks/bench_spark_tables.py --benchmark-only -s``
(PGOUTPUT_FAST_SPARK_ROWS sets the changes, default 400000; PGOUTPUT_FAST_SPARK_TABLES
the tables, default 8).
"""

import os
import shutil
import tempfile

import pytest

from benchutil import RESULTS, record

ROWS = int(os.environ.get("PGOUTPUT_FAST_SPARK_ROWS", "400000"))
TABLES = int(os.environ.get("PGOUTPUT_FAST_SPARK_TABLES", "8"))
TXN = 24                         # changes per transaction: 3 per table of 8 (at least 1 per table)
SEG_TXNS = 2000                  # segments of about 50,000 messages


def _build(directory):
    import pyarrow as pa

    from pgoutput_fast import encode_message
    from pgoutput_fast.capture import SEGMENT_SCHEMA, write_capture
    from pgoutput_fast.messages import (Begin, Commit, Insert, Relation, RelationColumn, Update,
                                        Value)

    rels = [Relation(16400 + k, "public", f"t{k}", "d", (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "a", 23, -1),
        RelationColumn(0, "b", 25, -1), RelationColumn(0, "c", 1184, -1),
        RelationColumn(0, "d", 701, -1), RelationColumn(0, "e", 1700, (12 << 16) + 3 + 4)))
        for k in range(TABLES)]

    def row(i):
        return (Value("t", str(i).encode()), Value("t", str(i * 7 % 100000).encode()),
                Value("t", f"row {i} some text payload".encode()),
                Value("t", f"2024-05-{1 + i % 28:02d} 12:{i % 60:02d}:00.123456+00".encode()),
                Value("t", repr(i / 7).encode()), Value("t", f"{i % 100000}.125".encode()))

    msgs = [encode_message(r) for r in rels]
    lsns = [0] * len(msgs)
    lsn, i, txn = 1 << 24, 0, 0
    seg_bounds = [0]
    per = max(1, TXN // TABLES)
    while i < ROWS:
        lsn += 64
        msgs.append(encode_message(Begin(lsn + (per * TABLES + 1) * 64, 0, 1000 + txn)))
        lsns.append(lsn)
        for k in range(TABLES):
            for _ in range(per):
                lsn += 64
                rel = 16400 + k
                if i % 5 == 4:
                    msgs.append(encode_message(Update(rel, None, None, row(i - 4))))
                else:
                    msgs.append(encode_message(Insert(rel, row(i))))
                lsns.append(lsn)
                i += 1
        lsn += 64
        msgs.append(encode_message(Commit(0, lsn, lsn + 64, 0)))
        lsns.append(lsn)
        txn += 1
        if txn % SEG_TXNS == 0:
            seg_bounds.append(len(msgs))
    if seg_bounds[-1] != len(msgs):
        seg_bounds.append(len(msgs))
    write_capture(directory, (pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                                        pa.array(range(a, b), pa.int64())], schema=SEGMENT_SCHEMA)
                              for a, b in zip(seg_bounds, seg_bounds[1:])), {"binary": False})
    return len(msgs), i


@pytest.fixture(scope="module")
def world():
    from pgoutput_fast import spark as pgs

    d = tempfile.mkdtemp(prefix="pgoutput_fast_bench_spark_tables_")
    n_msgs, n_rows = _build(d)
    spark = pgs.get_spark("local[2]", "pgoutput_fast-bench")
    df = pgs.read_segments(spark, d).cache()
    df.count()
    catalog = pgs.build_catalog(df)
    yield {"spark": spark, "df": df, "catalog": catalog, "messages": n_msgs, "rows": n_rows}
    df.unpersist()
    spark.stop()
    shutil.rmtree(d, ignore_errors=True)


def _noop(df):
    df.write.format("noop").mode("overwrite").save()


def test_per_table(benchmark, world):
    from pgoutput_fast import spark as pgs

    df, catalog = world["df"], world["catalog"]
    names = pgs.tables_of(catalog)
    assert len(names) == TABLES

    def once():
        for name in names:
            _noop(pgs.decode(df, catalog, table=name))

    benchmark.pedantic(once, rounds=2, iterations=1, warmup_rounds=1)
    record(benchmark, "spark-tables/per-table", messages=world["messages"], rows=world["rows"])


def test_decode_tables(benchmark, world):
    from pgoutput_fast import spark as pgs

    df, catalog = world["df"], world["catalog"]

    def once():
        with pgs.decode_tables(df, catalog) as dt:
            for name in dt.tables:
                _noop(dt.table(name))

    benchmark.pedantic(once, rounds=2, iterations=1, warmup_rounds=1)
    record(benchmark, "spark-tables/decode-tables", messages=world["messages"], rows=world["rows"])
    base = RESULTS.get("spark-tables/per-table")
    if base is not None:
        print(f"\n{TABLES} tables, {world['rows']:,} changes: decode_tables "
              f"{base['median'] / RESULTS['spark-tables/decode-tables']['median']:.2f}x "
              "the speed of one decode(table=) per table")
