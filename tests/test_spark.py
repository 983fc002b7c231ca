"""``pgoutput_fast.spark`` end to end: real PostgreSQL, real capture, real local PySpark.

One workload (every type, replica identities, TOAST, truncates, schema changes, a
streamed transaction spanning segments with a savepoint rolled back, an aborted one,
two-phase) is captured in text and in binary mode into small segments, so that streamed
and prepared transactions span segments. For each mode:

* ``decode(table=...)`` of every table, mapped back to the decoder's Arrow types and
  replayed into a ``TableImage``, equals ``SELECT *``;
* ``apply_changes`` of every table gives a Parquet snapshot equal to ``SELECT *``, and
  applying the same segments again changes nothing (the LSN guard).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from pgoutput_fast import capture
from pgoutput_fast.capture import CaptureConfig
from pgoutput_fast.testing import sqlcapture, workload

SCHEMA = "pgo_spark"
MODES = [pytest.param(False, id="text"), pytest.param(True, id="binary")]


@pytest.fixture(scope="module")
def world(pg_server, tmp_path_factory):
    from pgoutput_fast.testing.groundtruth import PgCatalog, published_tables, table_truth

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


def _defaults():
    from pgoutput_fast import demo

    return demo.added_column_defaults(SCHEMA)


def _arrow_typed(sdf, catalog, table, binary):
    """A typed Spark DataFrame collected and mapped back to the decoder's Arrow types."""
    from pgoutput_fast.spark import from_spark_array, typed_schema

    schema = typed_schema(catalog, table, binary)
    t = sdf.toArrow()
    cols = [from_spark_array(t.column(f.name), f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_decode_typed_equals_postgres(world, spark, binary):
    """read_segments -> build_catalog -> decode(table=...) per table == SELECT *."""
    from pgoutput_fast import demo, spark as pgs
    from pgoutput_fast.testing.image import TableImage

    df = pgs.read_segments(spark, world["dirs"][binary])
    groups = pgs.segment_groups(world["dirs"][binary])
    assert len(groups) >= 2 and any(len(g["paths"]) > 1 for g in groups), \
        "the workload should give several groups, one spanning segments"
    catalog = pgs.build_catalog(df)
    img = TableImage(_defaults())
    versions = []
    for name in pgs.tables_of(catalog):
        t = _arrow_typed(pgs.decode(df, catalog, table=name), catalog, name, binary)
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
    events = pgs.decode(df, catalog)
    n_events = events.count()
    assert n_events == img.applied
    results = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad


@pytest.mark.postgres
@pytest.mark.parametrize("binary", MODES)
def test_apply_snapshot_equals_postgres_and_replay_is_noop(world, spark, tmp_path, binary):
    """apply_changes per table: snapshot == SELECT *; the same segments again: no change."""
    from pgoutput_fast import demo, spark as pgs

    target = str(tmp_path / "snap")
    df = pgs.read_segments(spark, world["dirs"][binary])
    catalog = pgs.build_catalog(df)
    names = pgs.tables_of(catalog)
    for name in names:
        r = pgs.apply_changes(pgs.decode(df, catalog, table=name), target,
                              column_defaults=_defaults().get(name))
        assert r["version"] == 1 and not r["skipped"], r
    img = pgs.SnapshotImage(target, catalog, binary)
    results = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad
    # a replay of the same segments (re-read, re-decoded): the LSN guard skips everything
    df2 = pgs.read_segments(spark, world["dirs"][binary])
    for name in names:
        r = pgs.apply_changes(pgs.decode(df2, catalog, table=name), target,
                              column_defaults=_defaults().get(name))
        assert r["skipped"] and r["version"] == 1, r
    img2 = pgs.SnapshotImage(target, catalog, binary)
    again = [demo.compare_with_truth(t, img2, binary) for t in world["truths"]]
    assert [(r.right_rows, r.right_sum) for r in again] == [(r.right_rows, r.right_sum) for r in results]
    assert all(r.ok for r in again)


@pytest.mark.postgres
def test_streaming_growing_directory_and_views(world, spark, tmp_path):
    """readStream + foreachBatch over a directory that grows in two steps: after each
    run the snapshots hold exactly the closed groups; at the end == SELECT *. Then the
    Debezium and Delta CDF views of the change events."""
    import json
    import shutil

    from pgoutput_fast import demo, spark as pgs

    src = world["dirs"][True]
    grow, out = tmp_path / "grow", str(tmp_path / "snap")
    grow.mkdir()
    paths = capture.segment_paths(src)
    with open(os.path.join(src, "checkpoint.json")) as f:
        ckpt = json.load(f)

    def publish(n):
        for p in paths[:n]:
            if not (grow / os.path.basename(p)).exists():
                shutil.copy(p, grow / os.path.basename(p))
        with open(grow / "checkpoint.json", "w") as f:
            json.dump({**ckpt, "last_segment": int(os.path.basename(paths[n - 1])[:10])}, f)

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
    img = pgs.SnapshotImage(out, catalog, True)
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
