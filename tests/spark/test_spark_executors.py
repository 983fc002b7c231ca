"""An executor whose Python cannot import pgoutput_fast (a cluster node the wheel was
not installed on): `pgoutput-fast pipeline` ends with one line that says so and what to
do, not with Spark's page of Java and Python stack traces."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pyarrow as pa

from pgoutput_fast import capture
from tests.support.captures import load_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: imported by the workers' Python at start-up: pgoutput_fast cannot be found there
_BLOCKER = '''
import sys

class _NoPgoutputFast:
    def find_spec(self, name, path=None, target=None):
        if name == "pgoutput_fast" or name.startswith("pgoutput_fast."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoPgoutputFast())
'''


def test_executor_without_the_package_is_one_line(tmp_path):
    lsns, msgs = load_fixture("v1_text")
    seg = pa.table([pa.array(lsns, pa.int64()), pa.array(msgs, pa.binary()),
                    pa.array(range(len(msgs)), pa.int64())], schema=capture.SEGMENT_SCHEMA)
    segments = tmp_path / "segments"
    capture.write_capture(segments, [seg], {"binary": False})

    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_BLOCKER)
    worker = tmp_path / "worker-python"
    worker.write_text(f'#!/bin/sh\nPYTHONPATH="{blocker}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec "{sys.executable}" "$@"\n')
    worker.chmod(worker.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PYSPARK_PYTHON=str(worker))
    out = subprocess.run([sys.executable, "-m", "pgoutput_fast", "pipeline", "--segments",
                          str(segments), "--out", str(tmp_path / "tables")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    ours = [ln for ln in out.stderr.splitlines() if ln.startswith("pgoutput-fast pipeline: ")]
    assert len(ours) == 1, out.stderr[-3000:]
    line = ours[0]
    assert "executors cannot import pgoutput_fast" in line and "install" in line, line
    assert not (tmp_path / "tables").exists() or not any((tmp_path / "tables").iterdir())
