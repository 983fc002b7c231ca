"""A Spark standalone cluster on this machine: one Master and one Worker JVM, started
with PySpark's own ``bin/spark-class`` (``SPARK_HOME`` = the pyspark package), on free
ports, for the tests that run ``pgoutput-fast pipeline --master spark://...``.

The Worker starts its executors as separate JVMs (``CoarseGrainedExecutorBackend``),
and each executor starts its own Python workers: the driver (the test's subprocess)
runs none of the job's Python functions. The Worker's environment is this process's
without ``PYTHONPATH`` and without a sanitizer preload (``childenv.native_env``: a JVM
does not start under AddressSanitizer), so what an executor's Python can import is what
the node has, not what the driver had.

Both JVMs get small heaps (``SPARK_DAEMON_MEMORY``); the Worker offers one core and
``worker_memory`` to executors. ``stop()`` kills each JVM's process group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

__all__ = ["StandaloneCluster", "spark_home", "free_port"]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """``start()``: a Master and ``workers`` Workers, returned once every Worker is
    registered (the Master's ``/json/`` lists it ALIVE). ``url``: ``spark://127.0.0.1:P``."""

    def __init__(self, base_dir, *, workers: int = 1, cores: int = 1, worker_memory: str = "1g",
                 daemon_memory: str = "256m", timeout: float = 90.0):
        from pgoutput_fast.childenv import native_env

        self.base = str(base_dir)
        self.n_workers, self.cores, self.worker_memory = workers, cores, worker_memory
        self.timeout = timeout
        self.home = spark_home()
        env = native_env()                       # no sanitizer preload: a JVM
        for k in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR"):
            env.pop(k, None)
        conf_dir = os.path.join(self.base, "conf")   # empty: no spark-defaults, no log4j2
        os.makedirs(conf_dir, exist_ok=True)
        env.update(SPARK_HOME=self.home, SPARK_CONF_DIR=conf_dir, SPARK_DAEMON_MEMORY=daemon_memory,
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
        self.env = env
        self.port, self.webui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.json_url = f"http://127.0.0.1:{self.webui}/json/"
        self.procs: list[subprocess.Popen] = []
        self.logs: list[str] = []
        self.work_dirs: list[str] = []

    def _start(self, name, *args):
        log = os.path.join(self.base, f"{name}.log")
        self.logs.append(log)
        with open(log, "wb") as f:
            p = subprocess.Popen([os.path.join(self.home, "bin", "spark-class"), *args],
                                 env=self.env, cwd=self.base, stdin=subprocess.DEVNULL,
                                 stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def state(self) -> dict:
        with urllib.request.urlopen(self.json_url, timeout=5) as r:
            return json.load(r)

    def start(self) -> "StandaloneCluster":
        try:
            self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(self.port), "--webui-port", str(self.webui))
            for i in range(self.n_workers):
                wd = os.path.join(self.base, f"work{i}")
                os.makedirs(wd, exist_ok=True)
                self.work_dirs.append(wd)
                self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--cores", str(self.cores),
                            "--memory", self.worker_memory, "--webui-port", str(free_port()),
                            "--work-dir", wd)
            self._wait_registered()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_registered(self):
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited ({dead[0].returncode}) before the "
                                   f"cluster was up:\n{self.log_tail()}")
            try:
                last = self.state()
                alive = [w for w in last.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= self.n_workers:
                    return
            except (OSError, ValueError):
                # (not up yet; or the web UI up before its JSON page: the master answered
                # /json/ with its HTML page once, on a loaded machine)
                pass
            time.sleep(0.3)
        raise RuntimeError(f"no {self.n_workers} registered Spark worker(s) in {self.timeout:.0f} s "
                           f"(master said {last}):\n{self.log_tail()}")

    def pids(self) -> list[int]:
        """The JVMs' process ids: the Master's, then each Worker's (``spark-class``
        execs java, so the process started is the JVM)."""
        return [p.pid for p in self.procs]

    def log_tail(self, n=3000) -> str:
        out = []
        for log in self.logs:
            try:
                with open(log, errors="replace") as f:
                    out.append(f"--- {os.path.basename(log)}\n{f.read()[-n:]}")
            except OSError:
                pass
        return "\n".join(out)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        # executors a Worker started are in its process group; kill any left behind
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.procs = []
