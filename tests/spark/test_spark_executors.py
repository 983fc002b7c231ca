"""An executor whose Python cannot import pgoutput_fast (a cluster node the wheel was
not installed on): `pgoutput-fast pipeline` ends with one line that says so and what to
do, not with Spark's page of Java and Python stack traces."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.pythons import python_without_package
from tests.support.segdirs import write_fixture_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def test_executor_without_the_package_is_one_line(tmp_path):
    segments = write_fixture_dir(tmp_path / "segments", "v1_text")
    env = dict(os.environ, PYSPARK_PYTHON=python_without_package(tmp_path, "worker-python"))
    out = subprocess.run([sys.executable, "-m", "pgoutput_fast", "pipeline", "--segments",
                          segments, "--out", str(tmp_path / "tables")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("pgoutput-fast pipeline: ")]
    assert len(ours) == 1, out.stderr[-3000:]
    line = ours[0]
    assert "executors cannot import pgoutput_fast" in line and "install" in line, line
    assert not (tmp_path / "tables").exists() or not any((tmp_path / "tables").iterdir())
