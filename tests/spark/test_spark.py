"""``pgoutput_fast.spark`` end to end: real PostgreSQL, real capture, real local PySpark.

One workload (every type, replica identities, TOAST, truncates, schema changes, a
streamed transaction spanning segments with a savepoint rolled back, an aborted one,
two-phase) is captured in text and in binary mode into small segments, so that streamed
and prepared transactions span segments. For each mode:

* ``decode(table=...)`` of every table, mapped back to the decoder's Arrow types and
  replayed into a ``TableImage``, equals ``SELECT *``;
* ``apply_changes`` of every table gives a Delta table equal to ``SELECT *``, and
  applying the same segments again changes nothing (the LSN guard).

The workload adds ``races``: ADD COLUMN followed by two transactions committing in the
opposite order of their writes, and a streamed transaction that drops a column in its
middle. Native implementation only (``NATIVE_ONLY``), to keep CI's time:

* ``decode_udf`` over one committed message per row (``tests/support/msgrows.py``), shuffled,
  text and binary: events == ``decode()``'s, typed structs == ``decode(table=)``'s;
* ``apply_changes`` of the change-event DataFrame (binary capture) == ``SELECT *``;
* the typed decode on **Spark Connect** (a local Connect server in a subprocess) ==
  ``SELECT *``.
"""

from __future__ import annotations

import importlib
import os

import pyarrow as pa
import pytest

from pgoutput_fast import capture
from pgoutput_fast.arrow_values import column_values, freeze
from pgoutput_fast.capture import CaptureConfig
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload

SCHEMA = "pgo_spark"
MODES = [pytest.param(False, id="text"), pytest.param(True, id="binary")]
# The heaviest end-to-end tests (decode_udf, apply of change events, Spark Connect) run
# with the native implementation only, to keep CI's time: the suite runs twice, and the
# pure-Python reference decoder is held to the native one by the parity tests.
NATIVE_ONLY = pytest.mark.skipif(
    __import__("pgoutput_fast").IMPL != "native",
    reason="heavy Spark end-to-end test: native implementation only (see NATIVE_ONLY)")


@pytest.fixture(scope="module")
def world(pg_server, tmp_path_factory):
    from pgoutput_fast.demo.truth import PgCatalog, published_tables, table_truth

    conn = pg_server.connect()
    pub = workload.create_schema(conn, SCHEMA)
    proto = capture.max_protocol(pg_server.version_num)
    slots = {b: f"spark_{'b' if b else 't'}" for b in (False, True)}
    for b, slot in slots.items():
        workload.create_slot(conn, slot, two_phase=proto >= 3)
    workload.run_basic(conn, SCHEMA, seed=5)
    workload.run_bulk(conn, SCHEMA, rows=1500, seed=2)
    workload.run_streaming(conn, SCHEMA, rows=3000)
    workload.run_two_phase(conn, SCHEMA, rows=600)
    _run_schema_races(pg_server, conn)
    end = sqlcapture.wait_for_wal_flush(conn)
    dirs = {}
    for b, slot in slots.items():
        out = str(tmp_path_factory.mktemp(f"seg_{'b' if b else 't'}"))
        cfg = CaptureConfig(pg_server.dsn(), slot, pub, out, proto_version=str(proto), binary=b,
                            messages=True, streaming="on" if proto >= 2 else None,
                            two_phase=proto >= 3, until_lsn=end, segment_bytes=64 << 10,
                            segment_seconds=0.2, progress="off", max_reconnects=0)
        capture.run_capture(cfg)
        dirs[b] = out
    with conn.cursor() as cur:
        cat = PgCatalog(cur)
        truths = [table_truth(cur, s, t, cat) for s, t in published_tables(cur, pub) if s == SCHEMA]
    yield {"dirs": dirs, "truths": truths, "proto": proto}
    for slot in slots.values():
        workload.drop_slot(conn, slot)
    conn.close()


def _run_schema_races(pg_server, conn):
    """Schema changes where a row's own LSN does not tell its relation version:

    * after ADD COLUMN, a transaction writes first (lower LSN) but commits after another
      one: pgoutput sends the new Relation message in the one committed first, at a
      higher LSN than the other's change;
    * a streamed transaction (larger than logical_decoding_work_mem) that drops a
      column in its middle and keeps writing, updating and deleting."""
    s = f"{SCHEMA}.races"
    workload._exec(conn, f"CREATE TABLE {s} (id int4 PRIMARY KEY, a text, n int4)")
    workload._exec(conn, f"INSERT INTO {s} VALUES (1, 'a1', 1)")
    workload._exec(conn, f"ALTER TABLE {s} ADD COLUMN d int4")
    other = pg_server.connect()
    try:
        with other.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {s} VALUES (10, 'written first, committed last', 10, 10)")
            workload._exec(conn, f"INSERT INTO {s} VALUES (11, 'written last, committed first', 11, 11)")
            cur.execute("COMMIT")
    finally:
        other.close()
    with conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {s} SELECT g, md5(g::text) || repeat('x', 60), g, -g "
                    "FROM generate_series(100, 1600) g")
        cur.execute(f"ALTER TABLE {s} DROP COLUMN a")
        cur.execute(f"INSERT INTO {s} (id, n, d) SELECT g, g, g FROM generate_series(3000, 3800) g")
        cur.execute(f"UPDATE {s} SET n = n + 1 WHERE id % 7 = 0")
        cur.execute(f"DELETE FROM {s} WHERE id % 11 = 0")
        cur.execute("COMMIT")


def _defaults():
    from pgoutput_fast import demo

    return demo.added_column_defaults(SCHEMA)


def _typed_image(collected, catalog, binary):
    """Typed tables as collected from Spark (``{name: pa.Table}``), mapped back to the
    decoder's Arrow types and replayed into a ``TableImage``."""
    from pgoutput_fast.spark import from_spark_array, typed_schema
    from pgoutput_fast.demo.image import TableImage

    img = TableImage(_defaults())
    versions = []
    for name, raw in collected.items():
        schema = typed_schema(catalog, name, binary)
        t = pa.Table.from_arrays([from_spark_array(raw.column(f.name), f.type) for f in schema],
                                 schema=schema)
        for v in sorted({x for x in t.column("_version").to_pylist()}):
            part = t.filter(pa.compute.equal(t.column("_version"), v))
            version = next(x for x in catalog.by_name(name) if x.version == v)
            cols = [c for c in part.column_names if c != "_version"]
            keep = ["_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin"] + \
                list(version.column_names) + ["_before", "_before_kind", "_unchanged_toast", "_special"]
            part = part.select([c for c in keep if c in cols])
            md = {b"pgoutput_fast.key_columns": ",".join(version.key_columns).encode()}
            before = part.column("_before").combine_chunks()
            fields = [before.type.field(c) for c in version.column_names]
            sub = pa.StructArray.from_arrays([before.field(c) for c in version.column_names],
                                             fields=fields, mask=before.is_null()) \
                if fields else pa.nulls(len(before), pa.struct([]))
            part = part.set_column(part.column_names.index("_before"), "_before", sub)
            versions.append((version, part.replace_schema_metadata(md)))
    img.apply_table_versions(versions)
    return img


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_decode_typed_equals_postgres(world, spark, binary):
    """read_segments -> build_catalog -> decode(table=...) per table == SELECT *."""
    from pgoutput_fast import demo, spark as pgs
    from pgoutput_fast.demo.image import TableImage

    df = pgs.read_segments(spark, world["dirs"][binary])
    groups = pgs.segment_groups(world["dirs"][binary])
    assert len(groups) >= 2 and any(len(g["paths"]) > 1 for g in groups), \
        "the workload should give several groups, one spanning segments"
    catalog = pgs.build_catalog(df)
    img = _typed_image({name: pgs.decode(df, catalog, table=name).toArrow()
                        for name in pgs.tables_of(catalog)}, catalog, binary)
    events = pgs.decode(df, catalog)
    n_events = events.count()
    assert n_events == img.applied
    results = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad


def _by_position(t: pa.Table) -> pa.Table:
    """Rows in (commit_lsn, seq) order (a change's position in the stream: unique)."""
    import pyarrow.compute as pc

    return t.take(pc.sort_indices(t, [("_commit_lsn", "ascending"), ("_seq", "ascending")]))


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_decode_tables_equals_decode_per_table(world, spark, binary):
    """decode_tables: one decode for every table; each .table(name) has decode(table=name)'s
    Spark schema (field metadata included) and rows, value for value; a subset decodes
    only the tables asked for, and a table not asked for is refused by name."""
    from pgoutput_fast import spark as pgs

    df = pgs.read_segments(spark, world["dirs"][binary]).cache()
    catalog = pgs.build_catalog(df)
    names = pgs.tables_of(catalog)
    with pgs.decode_tables(df, catalog) as dt:
        assert dt.tables == names
        packed = dt.frame.toArrow()
        assert set(packed.column("table").to_pylist()) <= set(names)
        rows = 0
        for name in names:
            one = pgs.decode(df, catalog, table=name)
            got = dt.table(name)
            assert got.schema == one.schema, name          # (StructField compares metadata)
            a, b = _by_position(got.toArrow()), _by_position(one.toArrow())
            assert a.schema.equals(b.schema, check_metadata=True), name
            diff = [c for c in a.column_names           # (NaN == NaN under freeze)
                    if freeze(column_values(a.column(c))) != freeze(column_values(b.column(c)))]
            assert a.num_rows == b.num_rows and not diff, (name, diff)
            rows += a.num_rows
        assert rows > 1000
    # run_pipeline's choice: a decode per table for a few tables, one decode for many
    sd = importlib.import_module("pgoutput_fast.spark.decode")
    few = sd.table_source(df, catalog, names[:sd.DECODE_ONCE_TABLES - 1])
    assert not isinstance(few, pgs.DecodedTables) and few.tables == names[:sd.DECODE_ONCE_TABLES - 1]
    assert few.table(names[0]).schema == pgs.decode(df, catalog, table=names[0]).schema
    assert len(names) >= sd.DECODE_ONCE_TABLES
    many = sd.table_source(df, catalog, names + ["pgo_spark.no_such_table"])
    try:           # (one decode; a name the catalog lacks fails alone, as decode(table=))
        assert many.tables == names + ["pgo_spark.no_such_table"]
        assert many.decoded.tables == names
        with pytest.raises(KeyError, match="no such relation"):
            many.table("pgo_spark.no_such_table")
        assert _by_position(many.table(names[0]).toArrow()).num_rows == \
            pgs.decode(df, catalog, table=names[0]).count()
    finally:
        many.unpersist()
    some = names[:2]
    with pgs.decode_tables(df, catalog, tables=some) as dt:
        assert dt.tables == some
        assert set(dt.frame.toArrow().column("table").to_pylist()) == set(some)
        a = _by_position(dt.table(some[1]).toArrow())
        b = _by_position(pgs.decode(df, catalog, table=some[1]).toArrow())
        assert a.num_rows == b.num_rows > 0
        assert freeze([column_values(c) for c in a.columns]) == \
            freeze([column_values(c) for c in b.columns])
        with pytest.raises(KeyError, match=names[2].replace(".", r"\.")):
            dt.table(names[2])
    df.unpersist()


def test_pack_cuts_large_batches_and_reads_them_back():
    """A feed's rows over the packed row size are cut into slices that read back to the
    same rows, whatever the alignment of the bytes Spark hands over."""
    import importlib

    import numpy as np

    sd = importlib.import_module("pgoutput_fast.spark.decode")   # (the module, not the function)

    n = 200_000
    b = pa.record_batch({"id": pa.array(np.arange(n, dtype=np.int64)),
                         "s": pa.array([f"value {i}" * 8 for i in range(n)]),
                         "m": pa.array([[("k", str(i))] for i in range(n)],
                                       pa.map_(pa.string(), pa.string()))})
    assert b.nbytes > 2 * sd._PACK_BYTES
    blobs = list(sd._pack(b))
    assert len(blobs) >= 3 and all(len(x) <= 2 * sd._PACK_BYTES for x in blobs)
    back = []
    for pad, blob in enumerate(blobs):
        raw = (b"x" * (pad % 8 + 1) + blob)[pad % 8 + 1:]     # (any start in memory)
        r = pa.ipc.read_record_batch(pa.py_buffer(raw), b.schema)
        r.validate(full=True)
        back.append(r)
    assert pa.Table.from_batches(back).combine_chunks().equals(pa.Table.from_batches([b]))
    assert list(sd._pack(b.slice(0, 0))) == []


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_apply_delta_equals_postgres_and_replay_is_noop(world, spark, tmp_path, binary):
    """apply_changes per table: each Delta table == SELECT *; the same segments again:
    no commit, no change."""
    from pgoutput_fast import demo, spark as pgs

    target = str(tmp_path / "snap")
    df = pgs.read_segments(spark, world["dirs"][binary])
    catalog = pgs.build_catalog(df)
    names = pgs.tables_of(catalog)
    versions = {}
    for name in names:
        r = pgs.apply_changes(pgs.decode(df, catalog, table=name), target,
                              column_defaults=_defaults().get(name))
        assert r["version"] is not None and not r["skipped"], r
        versions[name] = r["version"]
    img = pgs.DeltaImage(target, catalog, binary)
    results = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad
    # a replay of the same segments (re-read, re-decoded): each table's position skips all
    df2 = pgs.read_segments(spark, world["dirs"][binary])
    for name in names:
        r = pgs.apply_changes(pgs.decode(df2, catalog, table=name), target,
                              column_defaults=_defaults().get(name))
        assert r["skipped"] and r["version"] == versions[name], r
    img2 = pgs.DeltaImage(target, catalog, binary)
    again = [demo.compare_with_truth(t, img2, binary) for t in world["truths"]]
    assert [(r.right_rows, r.right_sum) for r in again] == [(r.right_rows, r.right_sum) for r in results]
    assert all(r.ok for r in again)


@pytest.mark.postgres
def test_streaming_growing_directory_and_views(world, spark, tmp_path):
    """readStream + foreachBatch over a directory that grows in two steps: after each
    run the Delta tables hold exactly the closed groups; at the end == SELECT *. Then the
    Debezium and Delta CDF views of the change events."""
    import json
    import shutil

    from pgoutput_fast import demo, spark as pgs

    src = world["dirs"][True]
    grow, out = tmp_path / "grow", str(tmp_path / "snap")
    grow.mkdir()
    paths = capture.segment_paths(src)

    def publish(n):
        # the directory as capture leaves it after its n-th segment: the segments, the
        # first n manifest lines, and a checkpoint that vouches for them
        from pgoutput_fast.capture import store

        for p in paths[:n]:
            if not (grow / os.path.basename(p)).exists():
                shutil.copy(p, grow / os.path.basename(p))
        state = store.read_checkpoint(src)
        lines = open(os.path.join(src, store.MANIFEST), "rb").read().splitlines(keepends=True)[:n]
        with open(grow / store.MANIFEST, "wb") as f:
            f.write(b"".join(lines))
        state.last_segment = state.manifest_entries = n
        state.manifest_bytes = sum(map(len, lines))
        state.manifest_chain = json.loads(lines[-1])["chain"]
        store.write_checkpoint(str(grow), state)

    def run():
        q = pgs.start_stream(spark, str(grow), out, checkpoint=str(tmp_path / "ck"), available_now=True,
                             column_defaults=_defaults())
        q.awaitTermination()
        assert q.exception() is None

    publish(len(paths) // 2)
    run()
    first = json.load(open(os.path.join(out, pgs.streaming.STATE_FILE)))["last_segment"]
    assert 0 < first <= int(os.path.basename(paths[len(paths) // 2 - 1])[:10])
    publish(len(paths))
    run()
    catalog = pgs.build_catalog(pgs.read_segments(spark, src))
    img = pgs.DeltaImage(out, catalog, True)
    bad = [(r.name, r.problems[:3]) for r in (demo.compare_with_truth(t, img, True) for t in world["truths"])
           if not r.ok]
    assert not bad, bad

    events = pgs.decode(pgs.read_segments(spark, src), catalog)
    dbz = pgs.to_debezium(events)
    assert dbz.columns == ["before", "after", "source", "op", "ts_ms"]
    assert dbz.count() == events.count()
    cdf = pgs.to_delta_cdf(events).groupBy("_change_type").count().collect()
    counts = {r[0]: r[1] for r in cdf}
    ops = {r[0]: r[1] for r in events.groupBy("op").count().collect()}
    assert counts["insert"] == ops["c"] and counts["delete"] == ops["d"]
    assert counts["update_postimage"] == ops["u"]


def _norm(v):
    """A comparable form of a collected value (NaN == NaN, maps as item lists)."""
    return repr(v)


def _plain_type(t):
    """Temporal types as their integers (Python cannot hold ±infinity dates/timestamps)."""
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_timestamp(t) or pa.types.is_time64(t) or pa.types.is_date64(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    return t


def _plain(arr):
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    t = _plain_type(arr.type)
    return arr if t == arr.type else arr.cast(t)


@NATIVE_ONLY
@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_decode_udf_rows_in_any_order(world, spark, binary):
    """One committed message per row with its transaction context (an independent replay
    of the capture's transaction framing), shuffled: decode_udf's events equal decode()'s
    (tested against SELECT *) for every change, and its typed structs equal decode()'s
    typed rows for every table, across ADD/DROP COLUMN (inside a streamed transaction
    too) and a transaction that wrote before but committed after another one."""
    from pyspark.sql import functions as F

    from pgoutput_fast import decode_message, spark as pgs
    from tests.support.msgrows import message_rows

    src = world["dirs"][binary]
    rows_t = message_rows(src)
    rows = spark.createDataFrame(rows_t).repartition(3).sortWithinPartitions(F.xxhash64("data"))
    catalog = pgs.row_catalog(rows, position="ordinal")     # framings told from the bytes
    assert isinstance(catalog, pgs.RowCatalog)
    assert pgs.RowCatalog.from_messages(   # ... or given
        [(r["data"], r["commit_lsn"], r["ordinal"], r["in_stream"]) for r in rows_t.to_pylist()]) == catalog
    assert rows_t.column("in_stream").to_pylist().count(True) > 1000
    races = catalog.by_name(f"{SCHEMA}.races")
    assert [v.column_names for v in races] == [("id", "a", "n"), ("id", "a", "n", "d"), ("id", "n", "d")]
    # the race is in the capture: row 10 was written before row 11 (lower LSN) but
    # committed after it, and its transaction has no Relation message of its own
    ins = {}
    for r in rows_t.to_pylist():
        if r["data"][:1] == b"I" and not r["in_stream"] and \
                int.from_bytes(r["data"][1:5], "big") == races[0].relid:
            v = decode_message(r["data"]).new[0]
            ins[int(v.data) if v.format == "t" else int.from_bytes(v.data, "big")] = r
    assert ins[10]["lsn"] < ins[11]["lsn"] and ins[10]["commit_lsn"] > ins[11]["commit_lsn"]
    assert not [r for r in rows_t.to_pylist() if r["data"][:1] == b"R" and
                r["commit_lsn"] == ins[10]["commit_lsn"]]
    assert catalog.version_at(races[0].relid, ins[10]["commit_lsn"], ins[10]["ordinal"]) is races[1]

    # events
    df = pgs.read_segments(spark, src)
    segcat = pgs.build_catalog(df)
    expected = pgs.decode(df, segcat).select("commit_lsn", "seq", *pgs.EVENT_FIELDS).toArrow()
    udf = pgs.decode_udf(catalog)
    got = (rows.select("commit_lsn", "seq", F.posexplode(udf("data", "commit_lsn", "ordinal")).alias("k", "e"))
           .select("commit_lsn", (F.col("seq") + F.col("k")).alias("seq"), "e.*").toArrow())
    assert got.num_rows == expected.num_rows > 5000

    def keyed(t):
        d = {}
        for r in t.to_pylist():
            d[(r["commit_lsn"], r["seq"])] = _norm(r)
        return d
    exp, act = keyed(expected), keyed(got)
    assert len(exp) == expected.num_rows
    assert act == exp

    # typed: the tables with schema changes (also inside a streamed transaction), every
    # type, unchanged TOAST, a Truncate of several relations, full old rows: one job
    names = [f"{SCHEMA}.{t}" for t in ("races", "evolve", "alltypes", "toasty", "trunc_child",
                                       "ri_full")]
    assert set(names) <= set(pgs.tables_of(segcat))
    udfs = {n: pgs.decode_udf(catalog, table=n, binary_unknown=binary) for n in names}
    typed = rows.select("commit_lsn", "seq", "data", *[udfs[n]("data", "commit_lsn", "ordinal", "in_stream").alias(f"t{i}")
                                               for i, n in enumerate(names)]).toArrow()
    checked = 0
    for i, name in enumerate(names):
        exp_t = pgs.decode(df, segcat, table=name).toArrow()
        exp_t = pa.Table.from_arrays([_plain(c) for c in exp_t.columns], names=exp_t.column_names)
        col = _plain(typed.column(f"t{i}"))
        mask = col.is_valid()
        sub = typed.filter(mask)
        structs = col.filter(mask)
        assert len(structs) == exp_t.num_rows, name
        fields = [f.name for f in col.type if f.name != "_version"]
        want = {}
        for r in exp_t.to_pylist():
            want[(r["_commit_lsn"], r["_seq"])] = _norm({f: r[f] for f in fields if f != "_before"}) \
                + _norm(sorted((r["_before"] or {}).items()) if r["_before"] is not None else None)
        have = {}
        relids = {v.relid for v in catalog.by_name(name)}
        for c, q, data, r in zip(sub.column("commit_lsn").to_pylist(), sub.column("seq").to_pylist(),
                                 sub.column("data").to_pylist(), structs.to_pylist()):
            if r["_op"] == "t":  # a Truncate row: this table's place among its relations
                body = data if len(data) == 6 + 4 * int.from_bytes(data[1:5], "big") else data[:1] + data[5:]
                rels = [int.from_bytes(body[6 + 4 * k:10 + 4 * k], "big") for k in range((len(body) - 6) // 4)]
                q += next(k for k, x in enumerate(rels) if x in relids)
            have[(c, q)] = _norm({f: r[f] for f in fields if f != "_before"}) \
                + _norm(sorted((r["_before"] or {}).items()) if r["_before"] is not None else None)
        assert have == want, name
        checked += len(want)
    assert checked > 3000


@NATIVE_ONLY
@pytest.mark.postgres
def test_apply_events_equals_postgres(world, spark, tmp_path):
    """apply_changes of the change-event DataFrame (text values, typed by the catalog) of
    the binary capture (so unknown types come back from hex too): every Delta table
    == SELECT *; applying the events again changes nothing."""
    from pgoutput_fast import demo, spark as pgs

    binary = True
    target = str(tmp_path / "snap")
    df = pgs.read_segments(spark, world["dirs"][binary])
    catalog = pgs.build_catalog(df)
    events = pgs.decode(df, catalog)
    with pytest.raises(ValueError, match="catalog"):
        pgs.apply_changes(events, target)
    results = pgs.apply_changes(events, target, catalog=catalog, column_defaults=_defaults())
    assert sorted(results) == pgs.tables_of(catalog)
    assert all(r["version"] is not None and not r["skipped"] for r in results.values()), results
    img = pgs.DeltaImage(target, catalog, binary)
    checked = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in checked if not r.ok]
    assert not bad, bad
    assert sum(r.right_rows for r in checked) > 1000
    again = pgs.apply_changes(events, target, catalog=catalog, column_defaults=_defaults())
    assert all(r["skipped"] and r["version"] == results[n]["version"]
               for n, r in again.items()), again


@NATIVE_ONLY
@pytest.mark.postgres
def test_apply_in_bounded_parts_and_crash_between_parts(world, spark, tmp_path, monkeypatch):
    """``max_batch_changes``: a table with more changes than that after its position is
    applied in consecutive commits, each recording its own position: whole transactions,
    and a larger one (the streamed transaction of ``races``, with a column dropped in its
    middle) cut inside. A commit that fails after some parts (as a crash would leave the
    table) is continued by the rerun. Every Delta table == SELECT *; every commit's
    position grows along the table's history; no part reached the commit with more
    reduced rows than about the limit."""
    import json

    from deltalake import DeltaTable

    import pgoutput_fast.delta as D
    from pgoutput_fast import demo, spark as pgs
    from pgoutput_fast.delta.commit import POSITION_KEY

    binary, limit = True, 1000
    target = str(tmp_path / "parts")
    df = pgs.read_segments(spark, world["dirs"][binary])
    catalog = pgs.build_catalog(df)
    races = f"{SCHEMA}.races"
    # the tables with more than `limit` changes: every type (many transactions), the
    # streamed transaction with a savepoint rolled back, and races
    names = [f"{SCHEMA}.alltypes", f"{SCHEMA}.stream_t", races]
    assert set(names) <= set(pgs.tables_of(catalog))
    commit = D.commit_batch
    calls = []

    def commit_until_the_second_part_of_races(dt, uri, table, **kw):
        calls.append((table, kw["final"].num_rows))
        if table == races and sum(t == races for t, _ in calls) == 2:
            raise OSError("simulated crash before the commit")
        return commit(dt, uri, table, **kw)

    monkeypatch.setattr(D, "commit_batch", commit_until_the_second_part_of_races)
    with pytest.raises(OSError, match="simulated crash"):
        pgs.apply_changes(pgs.decode(df, catalog, table=races), target, max_batch_changes=limit)
    crashed = DeltaTable(D.table_uri(target, races))
    assert crashed.version() == 0     # the first part committed alone
    first = D.applied_position(crashed)
    monkeypatch.setattr(D, "commit_batch", commit)

    results = {name: pgs.apply_changes(pgs.decode(df, catalog, table=name), target,
                                       column_defaults=_defaults().get(name),
                                       max_batch_changes=limit)
               for name in names}
    img = pgs.DeltaImage(target, catalog, binary)
    checked = [demo.compare_with_truth(t, img, binary) for t in world["truths"]
               if t.name in names]
    assert len(checked) == len(names)
    bad = [(r.name, r.problems[:3]) for r in checked if not r.ok]
    assert not bad, bad
    # the rerun continued after the crashed run's first part, in parts again
    assert results[races]["parts"] >= 2 and results[races]["applied"] > list(first)
    many = [n for n, r in results.items() if r["parts"] > 1]
    assert many == names, {n: r["parts"] for n, r in results.items()}
    for name in many:
        r = results[name]
        assert 0 < r["reduced_rows"] <= limit * 1.1, (name, r["reduced_rows"])
        history = DeltaTable(D.table_uri(target, name)).history()
        positions = [json.loads(h[POSITION_KEY]) for h in reversed(history)
                     if h.get(POSITION_KEY)]
        assert len(positions) >= r["parts"]
        assert positions == sorted(positions) and len(set(map(tuple, positions))) == len(positions)
        assert positions[-1] == r["applied"]
    assert max(n for _, n in calls) <= limit * 1.1
    # applied again: every table's position skips everything
    again = {name: pgs.apply_changes(pgs.decode(df, catalog, table=name), target,
                                     max_batch_changes=limit) for name in names}
    assert all(r["skipped"] and r["version"] == results[n]["version"]
               for n, r in again.items()), again


_CONNECT_SCRIPT = r"""
import json, os, sys
import pyarrow as pa
from pgoutput_fast import spark as pgs

src, out = sys.argv[1], sys.argv[2]
spark = pgs.get_spark("local[2]", "pgoutput_fast-connect", connect=True)
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
df = pgs.read_segments(spark, src)
catalog = pgs.build_catalog(df)
names = pgs.tables_of(catalog)
for i, name in enumerate(names):
    t = pgs.decode(df, catalog, table=name).toArrow()
    with pa.OSFile(os.path.join(out, f"{i}.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        w.write_table(t)
n_events = pgs.decode(df, catalog).count()
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump({"names": names, "events": n_events, "catalog": catalog.to_dict()}, f)
spark.stop()
"""


@NATIVE_ONLY
@pytest.mark.postgres
def test_spark_connect_decode_equals_postgres(world, tmp_path):
    """The same pipeline on Spark Connect (a local Connect server, in a fresh process:
    no broadcast, the catalog travels in the closures): typed decode of every table
    == SELECT *, and the change-event count matches (binary capture)."""
    import json
    import subprocess
    import sys

    from pgoutput_fast import demo, spark as pgs

    for mod in ("grpc", "grpc_status", "zstandard", "google.rpc"):
        __import__(mod)  # the `connect` extra of pyspark: fail loudly when missing
    out = tmp_path / "connect"
    out.mkdir()
    env = dict(os.environ)
    # the subprocess imports this very copy of the package
    import_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(pgs.__file__))))
    env["PYTHONPATH"] = os.pathsep.join([import_root] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", _CONNECT_SCRIPT, world["dirs"][True], str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "result.json").read_text())
    catalog = pgs.SegmentCatalog.from_dict(res["catalog"])
    collected = {}
    for i, name in enumerate(res["names"]):
        with pa.OSFile(str(out / f"{i}.arrow"), "rb") as f:
            collected[name] = pa.ipc.open_file(f).read_all()
    img = _typed_image(collected, catalog, True)
    assert res["events"] == img.applied > 5000
    results = [demo.compare_with_truth(t, img, True) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad


_EVENT_KEYS = ["commit_lsn", "seq", "op", "lsn", "xid", "schema", "table"]


def _event_rows(df):
    """The change events of a messages DataFrame (``read_segments``), decoded on Spark:
    sorted tuples of their keys and images."""
    from pgoutput_fast import spark as pgs

    t = pgs.decode(df, pgs.build_catalog(df)).toArrow()
    return sorted(zip(*[t.column(c).to_pylist() for c in _EVENT_KEYS],
                      [str(x) for x in t.column("after").to_pylist()],
                      [str(x) for x in t.column("before").to_pylist()]))


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_split_groups_decode_as_one_decoder(world, spark, binary):
    """Groups spanning segments are decoded one segment per task, or in two runs of
    segments (``pgoutput_fast.split``): the change events equal one sequential Decoder's
    over all segments, seq included, and equal the unsplit read's."""
    import pgoutput_fast
    from pgoutput_fast import spark as pgs

    d = world["dirs"][binary]
    groups = pgs.segment_groups(d)
    pieces = [p for g in groups for p in g["pieces"]]
    assert len(pieces) > len(groups) and any(p["plan"] for p in pieces), \
        "the workload should have transactions open across segments"
    cols = _EVENT_KEYS
    rows = _event_rows

    got = rows(pgs.read_segments(spark, d, max_pieces=None))       # one task per segment
    whole = rows(pgs.read_segments(spark, d, split=False))
    assert rows(pgs.read_segments(spark, d, max_pieces=2)) == whole  # runs of segments
    dec = pgoutput_fast.Decoder(binary_unknown=binary, tables=False)
    ev = dec.feed(capture.read_segments(d).column("data"), capture.read_segments(d).column("lsn")).events
    want_keys = sorted(zip(*[ev.column(c).to_pylist() for c in cols[:5]]))
    assert [r[:5] for r in got] == want_keys
    assert got == whole


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_a_bulk_load_in_one_segment_is_cut_into_tasks(pg_server, spark, tmp_path, monkeypatch, binary):
    """One plain transaction of 11,800 changes (protocol 1: not streamed) between small
    ones, captured into one segment: read with 3 pieces, the segment is cut inside the
    transaction (each part fed copies of its Begin and Commit). The change events equal
    one Decoder's over the segment, seq included, and the unsplit read's; the typed
    rows, replayed by key, leave the ids ``SELECT`` gives."""
    import pgoutput_fast
    from pgoutput_fast import spark as pgs
    from pgoutput_fast.split import PiecePlan

    dmod = importlib.import_module("pgoutput_fast.spark.decode")
    monkeypatch.setattr(dmod, "MIN_SPLIT_BYTES", 1)       # (the test's segment is small)
    schema = f"pgo_bulk_{'b' if binary else 't'}"
    conn = pg_server.connect()
    workload._exec(conn, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    workload._exec(conn, f"CREATE SCHEMA {schema}")
    workload._exec(conn, f"CREATE TABLE {schema}.t (id int8 PRIMARY KEY, v text, n numeric(12,2), "
                         "ts timestamptz, f float8)")
    pub, slot = f"{schema}_pub", f"{schema}_slot"
    workload._exec(conn, f"CREATE PUBLICATION {pub} FOR TABLE {schema}.t")
    workload.create_slot(conn, slot)
    try:
        for i in range(5):
            workload._exec(conn, f"INSERT INTO {schema}.t VALUES ({i}, 'small', {i}.5, now(), {i})")
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {schema}.t SELECT g, md5(g::text), g / 7.0, "
                        f"'2026-01-01'::timestamptz + g * interval '1 min', g / 3.0 "
                        "FROM generate_series(100, 9099) g")
            cur.execute(f"UPDATE {schema}.t SET v = 'changed' WHERE id % 5 = 0 AND id >= 100")
            cur.execute(f"DELETE FROM {schema}.t WHERE id % 9 = 0 AND id >= 100")
            cur.execute("COMMIT")
        for i in range(5, 10):
            workload._exec(conn, f"INSERT INTO {schema}.t VALUES ({i}, 'small', {i}.5, now(), {i})")
        workload._exec(conn, f"DELETE FROM {schema}.t WHERE id = 3")
        end = sqlcapture.wait_for_wal_flush(conn)
        d = str(tmp_path / "seg")
        capture.run_capture(CaptureConfig(pg_server.dsn(), slot, pub, d, proto_version="1", binary=binary,
                                          until_lsn=end, progress="off", max_reconnects=0))
        want_ids = sorted(r[0] for r in workload._exec(conn, f"SELECT id FROM {schema}.t"))
    finally:
        workload.drop_slot(conn, slot)
        conn.close()

    groups = pgs.segment_groups(d, max_pieces=3)
    assert sum(len(g["paths"]) for g in groups) == 1, "the capture should be one segment"
    pieces = [p for g in groups for p in g["pieces"]]
    assert len(pieces) == 3
    plans = [PiecePlan.from_dict(p["plan"]) for p in pieces if p["plan"]]
    assert any(p.before for p in plans) and any(p.append for p in plans), \
        "the pieces should be cut inside the bulk transaction"
    cols = _EVENT_KEYS
    rows = _event_rows

    df = pgs.read_segments(spark, d, groups=groups)
    assert df.rdd.getNumPartitions() == 3
    got = rows(df)
    assert got == rows(pgs.read_segments(spark, d, split=False))
    seg = capture.read_segments(d)
    ev = pgoutput_fast.Decoder(binary_unknown=binary, tables=False).feed(
        seg.column("data"), seg.column("lsn")).events
    assert [r[:5] for r in got] == sorted(zip(*[ev.column(c).to_pylist() for c in cols[:5]]))
    assert len(got) == ev.num_rows > 11_000
    # the typed rows of the three pieces, replayed by key in commit order: SELECT's ids
    catalog = pgs.build_catalog(df)
    typed = pgs.decode(df, catalog, table=f"{schema}.t").toArrow().sort_by(
        [("_commit_lsn", "ascending"), ("_seq", "ascending")])
    assert typed.column("_seq").to_pylist().count(0) == 12       # one seq 0 per transaction
    live: set = set()
    for op, key in zip(typed.column("_op").to_pylist(), typed.column("id").to_pylist()):
        if op == "d":
            live.discard(key)
        elif op in ("c", "u"):
            live.add(key)
    assert sorted(live) == want_ids
