"""``pgoutput-fast bench`` end to end on a small corpus captured from a private server."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.postgres
def test_bench_command_small_corpus(tmp_path):
    out = tmp_path / "bench.json"
    # bench measures the native implementation (and the reference on a slice) whatever
    # implementation this test run uses
    env = {**os.environ, "PGOUTPUT_FAST_CORPUS": str(tmp_path / "corpus"), "PGOUTPUT_FAST_IMPL": "native"}
    proc = subprocess.run(
        [sys.executable, "-m", "pgoutput_fast", "bench", "--rows", "3000", "--repeat", "1",
         "--slice", "500", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for w in ("narrow/text", "narrow/binary", "wide/text", "wide/binary"):
        assert f"{w:15s} typed (Decoder)" in text, text
    assert "cannot decode binary mode" in text or "not installed" in text
    data = json.loads(out.read_text())
    by = {(r["workload"], r["mode"]): r for r in data["results"]}
    # narrow: 3000 inserts, a third updated, a sixth deleted; wide: a fifth of the rows
    assert by[("narrow", "text")]["rows"] == 3000 + 1000 + 500
    assert by[("wide", "binary")]["rows"] == 1000
    for r in data["results"]:
        assert r["typed_s"] > 0 and r["bytes"] > 0 and r["peak_extra_bytes"] is not None
