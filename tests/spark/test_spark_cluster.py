"""``pgoutput-fast pipeline --master spark://...`` on a Spark standalone cluster: a
Master and a Worker JVM started on this machine (``tests/support/spark_cluster.py``).

The executors are JVMs the Worker starts, and their Python workers are started by those
executors, with the Python the application names (``--conf spark.pyspark.python=...``)
and the Worker's environment, not the driver's. That Python is a "node's Python":

* ``node_python``: this test interpreter with this checkout on its ``PYTHONPATH``, set by
  the node itself (the wrapper), as a node where the wheel is installed. It records, for
  every start, its parent's command line (the executor JVM) and the ``PYTHONPATH`` the
  executor gave it, so that the test sees where the job's Python ran and that the
  driver's ``PYTHONPATH`` (``get_spark`` puts the checkout there) did not reach it.
* ``bare_python``: a node without the package (imports of ``pgoutput_fast`` fail):
  the pipeline ends with one line, exit status 2, that says what to install.

What this shows: the job's Python functions run in processes of the cluster's executors,
which import the package from the node's own Python, and the tables they produce equal
PostgreSQL's rows. What it does not: several machines (one machine, one file system: the
segments and the tables are on a path every process sees), nor the packed-virtualenv
route (``spark.archives``; documented in docs/delta.md, not tested).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pgoutput_fast import capture
from pgoutput_fast.capture import CaptureConfig
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload
from tests.support.pythons import python_without_package, wrapper
from tests.support.spark_cluster import StandaloneCluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = "pgo_cluster"
#: small executors: the Worker offers 1 core and 1g
EXECUTOR_CONF = ["--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
                 "--conf", "spark.driver.memory=512m", "--conf", "spark.task.maxFailures=1"]

def _java():
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not _java():
        pytest.skip("no Java (java on PATH or JAVA_HOME): a Spark standalone cluster needs a JVM")
    c = StandaloneCluster(tmp_path_factory.mktemp("spark_cluster"), workers=1, cores=1,
                          worker_memory="1g").start()
    yield c
    c.stop()


def _node_python(tmp_path):
    """A node's Python with the package: records its parent's command line and the
    PYTHONPATH it was given (tab-separated, one line per start), then puts this
    checkout first on its PYTHONPATH (the node's own installation) and runs Python."""
    log = tmp_path / "node_python.log"
    body = (f'printf "%s\\t%s\\n" "$(tr "\\000" " " < /proc/$PPID/cmdline)" "$PYTHONPATH" >> "{log}"\n'
            f'PYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    return wrapper(tmp_path / "node-python", body), log


def _pipeline(cluster, segments, out, python, timeout=300):
    env = dict(os.environ)
    env.pop("PYSPARK_PYTHON", None)
    return subprocess.run([sys.executable, "-m", "pgoutput_fast", "pipeline", "--segments", str(segments),
                           "--out", str(out), "--master", cluster.url,
                           "--conf", f"spark.pyspark.python={python}", *EXECUTOR_CONF],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def world(pg_server, tmp_path_factory):
    """A small workload (inserts, updates, key changes, deletes in many transactions,
    then a streamed transaction with a savepoint rolled back), captured in text mode;
    PostgreSQL's rows of every published table."""
    from pgoutput_fast.demo.truth import PgCatalog, published_tables, table_truth

    conn = pg_server.connect()
    pub = workload.create_schema(conn, SCHEMA)
    proto = capture.max_protocol(pg_server.version_num)
    slot = "spark_cluster"
    workload.create_slot(conn, slot)
    workload.run_bulk(conn, SCHEMA, rows=400, seed=3, per_transaction=50)
    workload.run_streaming(conn, SCHEMA, rows=1200)
    end = sqlcapture.wait_for_wal_flush(conn)
    out = str(tmp_path_factory.mktemp("seg_cluster"))
    cfg = CaptureConfig(pg_server.dsn(), slot, pub, out, proto_version=str(proto), binary=False,
                        messages=True, streaming="on" if proto >= 2 else None,
                        until_lsn=end, segment_bytes=64 << 10, segment_seconds=0.2,
                        progress="off", max_reconnects=0)
    capture.run_capture(cfg)
    with conn.cursor() as cur:
        cat = PgCatalog(cur)
        truths = [table_truth(cur, s, t, cat) for s, t in published_tables(cur, pub) if s == SCHEMA]
    yield {"dir": out, "truths": truths}
    workload.drop_slot(conn, slot)
    conn.close()


def _catalog(segments):
    """The relation catalog of a capture, decoded here (no Spark)."""
    from pgoutput_fast import Decoder

    t = capture.read_segments(segments)
    d = Decoder()
    d.feed(t.column("data"), t.column("lsn"))
    return d.catalog


@pytest.mark.postgres
def test_pipeline_on_standalone_cluster_equals_postgres(cluster, world, tmp_path):
    """The pipeline on the cluster: exit 0, every Delta table == SELECT *, and the job's
    Python ran in Python workers whose parent is an executor JVM of this cluster, with
    the node's Python and without the driver's PYTHONPATH."""
    from pgoutput_fast import demo
    from pgoutput_fast.delta import DeltaImage

    python, log = _node_python(tmp_path)
    out = tmp_path / "tables"
    r = _pipeline(cluster, world["dir"], out, python)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:], cluster.log_tail())
    assert "changes decoded and applied" in r.stdout, r.stdout

    img = DeltaImage(str(out), _catalog(world["dir"]), False)
    results = [demo.compare_with_truth(t, img, False) for t in world["truths"]]
    assert sum(res.left_rows for res in results) > 0
    bad = [(res.name, res.problems[:3]) for res in results if not res.ok]
    assert not bad, bad

    starts = [ln.split("\t") for ln in log.read_text().splitlines()]
    assert starts, "the node's Python was never started: the job's Python did not run on the executors"
    for parent, pythonpath in starts:
        # the executor JVM (started by the Worker) starts pyspark.daemon with this Python
        assert "org.apache.spark.executor.CoarseGrainedExecutorBackend" in parent, parent
        assert ROOT not in pythonpath.split(":"), pythonpath
    # the Worker ran the application's executor in its work directory
    apps = [d for d in os.listdir(cluster.work_dirs[0]) if d.startswith("app-")]
    assert apps, os.listdir(cluster.work_dirs[0])


def test_executor_without_the_package_on_cluster_is_one_line(cluster, tmp_path):
    """Executors whose Python cannot import pgoutput_fast: exit 2, one line that says
    what to install, no traceback, no table."""
    import pyarrow as pa
    from tests.support.captures import load_fixture

    lsns, msgs = load_fixture("v1_text")
    seg = pa.table([pa.array(lsns, pa.int64()), pa.array(msgs, pa.binary()),
                    pa.array(range(len(msgs)), pa.int64())], schema=capture.SEGMENT_SCHEMA)
    segments = tmp_path / "segments"
    capture.write_capture(segments, [seg], {"binary": False})

    out = tmp_path / "tables"
    r = _pipeline(cluster, segments, out, python_without_package(tmp_path))
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-4000:])
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    ours = [ln for ln in r.stderr.splitlines() if ln.startswith("pgoutput-fast pipeline: ")]
    assert len(ours) == 1, r.stderr[-4000:]
    assert "executors cannot import pgoutput_fast" in ours[0] and "install" in ours[0], ours[0]
    assert not out.exists() or not any(out.iterdir())
