import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.captures import FIXTURES, load_fixture


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "pgoutput_fast", *args],
                          capture_output=True, text=True)


def test_inspect_framed_capture():
    path = os.path.join(FIXTURES, "v3_twophase_text.pgoc")
    out = run_cli("inspect", path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    _, msgs = load_fixture("v3_twophase_text")
    assert len(lines) == len(msgs)
    text = out.stdout
    for word in ("Begin(", "Commit(", "Insert(", "StreamStart(", "BeginPrepare(",
                 "Prepare(", "CommitPrepared(", "RollbackPrepared(", "StreamPrepare("):
        assert word in text, word


def test_inspect_parquet_capture(tmp_path):
    lsns, msgs = load_fixture("v1_text")
    path = tmp_path / "seg.parquet"
    pq.write_table(pa.table({"lsn": pa.array(lsns, pa.int64()), "data": pa.array(msgs, pa.binary())}), path)
    out = run_cli("inspect", str(path), "--limit", "10")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 10


def test_inspect_reports_bad_message(tmp_path):
    from pgoutput_fast.framing import write_framed

    path = tmp_path / "bad.pgoc"
    write_framed(path, [b"B" + bytes(20), b"C\x00" + bytes(10)])
    out = run_cli("inspect", str(path))
    assert out.returncode == 1
    assert "ERROR" in out.stdout and "truncated" in out.stdout
