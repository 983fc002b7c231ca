"""The Spark pipeline with its segments and its Delta tables on an object store (a
local S3-compatible server, moto): the executors read the segments from the bucket,
verified, and the tables equal those of the same pipeline on local paths. The storage
options reach the tasks through their function, never the DataFrame's metadata."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pgoutput_fast import capture
from pgoutput_fast.delta import read_table
from pgoutput_fast.spark import read_segments, segment_groups
from pgoutput_fast.spark.pipeline import run_pipeline
from tests.support.s3 import s3, upload_dir  # noqa: F401
from tests.support.segdirs import write_fixture_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# v1_binary: two segment groups (two tasks); v2_stream_binary: streamed transactions
# across its eight segments, one group
NAMES = ["v1_binary", "v2_stream_binary"]
PER_SEGMENT = {"v1_binary": 100, "v2_stream_binary": 25}


@pytest.fixture(scope="module")
def segs(s3, tmp_path_factory):  # noqa: F811
    out = {}
    for name in NAMES:
        local = write_fixture_dir(tmp_path_factory.mktemp(name) / "cdc", name, PER_SEGMENT[name])
        out[name] = (local, upload_dir(s3, local, f"spark/{name}"))
    return out


@pytest.fixture
def seg(segs):
    return segs["v2_stream_binary"]


def _sorted(t):
    keys = [(c, "ascending") for c in t.column_names
            if not c.startswith("c_") and t.schema.field(c).type.num_fields == 0][:4]
    return t.sort_by(keys) if keys else t


def test_read_segments_from_s3(spark, s3, segs):  # noqa: F811
    local, uri = segs["v1_binary"]
    g_local, g_s3 = segment_groups(local), segment_groups(uri, storage_options=s3)
    assert [(g["first"], g["count"]) for g in g_s3] == [(g["first"], g["count"]) for g in g_local]
    assert len(g_s3) == 2
    df_s = read_segments(spark, uri, storage_options=s3)
    schema_json = df_s.schema.json()
    assert uri in schema_json
    for v in set(s3.values()) - {"true", "us-east-1"}:
        assert v not in schema_json.replace(uri, "")
    assert "AWS_" not in schema_json
    got = df_s.orderBy("ordinal").toArrow()
    want = capture.read_segments(local)
    for c in ("lsn", "data", "ordinal"):
        assert got.column(c).to_pylist() == want.column(c).to_pylist(), c
    assert got.column("segment").to_pylist() == \
        [e.seq for e in capture.segment_entries(local) for _ in range(e.messages)]


def test_pipeline_on_s3_equals_local(spark, s3, seg, tmp_path):  # noqa: F811
    local, uri = seg
    out_l, out_s = str(tmp_path / "tables"), f"s3://lake/{tmp_path.name}/tables"
    res_l = run_pipeline(spark, local, out_l)
    res_s = run_pipeline(spark, uri, out_s, storage_options=s3)
    assert res_s["messages"] == res_l["messages"] and res_s["changes"] == res_l["changes"] > 0
    assert sorted(res_s["tables"]) == sorted(res_l["tables"])
    for table in res_l["tables"]:
        want = _sorted(read_table(out_l, table))
        got = _sorted(read_table(out_s, table, s3))
        assert got.num_rows == want.num_rows, table
        assert got.equals(want), table


def test_pipeline_separate_segment_options(spark, s3, seg, tmp_path):  # noqa: F811
    """Segments on the bucket, tables local: ``segments_storage_options`` alone."""
    _local, uri = seg
    res = run_pipeline(spark, uri, str(tmp_path / "t"), segments_storage_options=s3)
    assert res["changes"] > 0


def test_cli_unreachable_bucket_is_one_line(tmp_path):
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDNOTSHOWN", AWS_SECRET_ACCESS_KEY="s3cr3t-NOT-SHOWN",
               AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true")
    out = subprocess.run([sys.executable, "-m", "pgoutput_fast", "pipeline", "--segments",
                          "s3://lake/cdc", "--out", "s3://lake/tables"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stderr.startswith("pgoutput-fast pipeline: s3://lake/cdc: cannot read it:"), out.stderr
    assert out.stderr.count("\n") == 1 and "s3cr3t" not in out.stderr, out.stderr


def test_stream_batch_on_s3_equals_pipeline(spark, s3, seg, tmp_path):  # noqa: F811
    """``process_new_segments`` (start_stream's micro-batch) with the segments, the
    tables and the state file on S3: the tables of the local pipeline; a second batch
    finds nothing new and commits nothing."""
    import json

    import pyarrow.fs as pafs

    from pgoutput_fast.spark.streaming import STATE_FILE, process_new_segments
    from pgoutput_fast.storage import Store

    local, uri = seg
    out_l, out_s = str(tmp_path / "tables"), f"s3://lake/{tmp_path.name}/stream"
    res_l = run_pipeline(spark, local, out_l)
    first = process_new_segments(spark, uri, out_s, storage_options=s3)
    assert first["changes"] == res_l["changes"] > 0 and first["groups"] >= 1
    store, _ = Store.of(out_s, s3)
    state = json.loads(store.read_bytes(out_s + "/" + STATE_FILE))
    assert state["last_segment"] == capture.segment_entries(local)[-1].seq
    assert not os.path.exists(os.path.join(ROOT, STATE_FILE))
    for table in res_l["tables"]:
        assert _sorted(read_table(out_s, table, s3)).equals(_sorted(read_table(out_l, table))), table
    assert process_new_segments(spark, uri, out_s, storage_options=s3) == {"groups": 0, "changes": 0}
    assert isinstance(store.fs, pafs.S3FileSystem)
