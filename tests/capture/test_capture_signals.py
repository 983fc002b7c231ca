"""SIGTERM and SIGINT end ``pgoutput-fast capture`` cleanly (exit 0) from the first
moment: before its first connection, while it connects, and while it streams.

Each test waits for a line the process prints (``starting``, ``connected``) or for a
connection to arrive, never for a fixed time: a busy machine only makes them slower.
"""

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 180          # generous: a loaded 2-core machine


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Capture:
    """``python -m pgoutput_fast capture ... --progress log``, its stderr read line by
    line in a thread."""

    def __init__(self, args, block=None, env=None):
        def preexec():
            # SIGINT/SIGTERM as a terminal gives them, however pytest was started (a
            # background job inherits SIGINT ignored, and an ignored signal stays so)
            for s in (signal.SIGINT, signal.SIGTERM):
                signal.signal(s, signal.SIG_DFL)
            if block is not None:
                # the signal stays pending from before Python starts until the command
                # line has its handlers in place (and unblocks it)
                signal.pthread_sigmask(signal.SIG_BLOCK, {block})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgoutput_fast", "capture", *args, "--progress", "log"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=preexec, env=env)
        self.lines = []
        self.events = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "event" in rec:
                self.events.put(rec)
        self.events.put(None)

    def wait_event(self, name, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while True:
            try:
                rec = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"no {name!r} event within {timeout} s:\n{self.stderr()}")
            if rec is None:
                pytest.fail(f"capture exited ({self.proc.wait()}) before {name!r}:\n{self.stderr()}")
            if rec["event"] == name:
                return rec

    def signal(self, signum):
        self.proc.send_signal(signum)

    def finish(self, timeout=TIMEOUT):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"capture did not exit within {timeout} s:\n{self.stderr()}")
        self.reader.join(timeout)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stderr(self):
        return "".join(self.lines)

    def event_names(self):
        names = []
        for line in self.lines:
            try:
                names.append(json.loads(line)["event"])
            except (ValueError, KeyError, TypeError):
                pass
        return names


def _assert_clean_stop(cap, rc):
    err = cap.stderr()
    assert rc == 0, f"exit status {rc}:\n{err}"
    assert "Traceback" not in err
    names = cap.event_names()
    assert names[0] == "starting" and names[-1] == "done", names
    assert "captured " in err


def test_package_and_cli_import_light():
    """The handlers come before numpy, pyarrow, psycopg2 and the compiled extension:
    importing the package and its command line loads none of them."""
    code = ("import sys, pgoutput_fast, pgoutput_fast.cli, pgoutput_fast.signals; "
            "print(sorted(m for m in ('numpy', 'pyarrow', 'psycopg2', 'pgoutput_fast._native', "
            "'pgoutput_fast._reference', 'pgoutput_fast.decoder', 'pgoutput_fast.capture') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_before_python_starts_nothing_listening(tmp_path, signum):
    """The signal is sent before the interpreter runs (blocked, so pending): the handler
    gets it the moment it is installed, the capture never connects (nothing listens:
    a connection attempt would have ended with exit status 3) and exits 0."""
    port = _free_port()
    cap = Capture(["--dsn", f"host=127.0.0.1 port={port} connect_timeout=5", "--slot", "s1",
                   "--publication", "p1", "--out", str(tmp_path / "out")], block=signum)
    cap.signal(signum)
    rc = cap.finish()
    _assert_clean_stop(cap, rc)
    assert "disconnected" not in cap.event_names() and "connected" not in cap.event_names()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_at_starting_nothing_listening(tmp_path, signum):
    """The reported bug: a signal right after start (here: as soon as ``starting`` is
    printed) must not kill the process (-15). Nothing listens on the port, so two
    outcomes are correct and which one depends on the scheduler: the signal came
    before the first connection attempt (exit 0), or the attempt came first and was
    refused (exit 3, one line: connection refused is permanent at the first attempt)."""
    port = _free_port()
    cap = Capture(["--dsn", f"host=127.0.0.1 port={port}", "--slot", "s1", "--publication",
                   "p1", "--out", str(tmp_path / "out")])
    rec = cap.wait_event("starting")
    assert rec["pid"] == cap.proc.pid
    cap.signal(signum)
    rc = cap.finish()
    err = cap.stderr()
    assert "Traceback" not in err
    if rc == 0:
        _assert_clean_stop(cap, rc)
    else:
        assert rc == 3, f"exit status {rc}:\n{err}"
        errors = [ln for ln in cap.lines if ln.startswith("pgoutput-fast capture: ")]
        assert len(errors) == 1 and "connection refused" in errors[0], err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_connecting(tmp_path, signum):
    """Deterministic: a listener that accepts and says nothing holds the capture inside
    its first connection attempt; the signal is sent then, the listener hangs up
    (a transient failure: retry), and the capture sees the stop and exits 0."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(TIMEOUT)
    port = srv.getsockname()[1]
    cap = Capture(["--dsn", f"host=127.0.0.1 port={port} sslmode=disable gssencmode=disable "
                   "connect_timeout=120", "--slot", "s1", "--publication", "p1",
                   "--out", str(tmp_path / "out")])
    try:
        cap.wait_event("starting")
        conn, _ = srv.accept()          # the capture is inside its connection attempt
        conn.settimeout(TIMEOUT)
        conn.recv(1024)                 # its startup packet
        cap.signal(signum)              # pending in the process before it can see ...
        conn.close()                    # "server closed the connection unexpectedly"
        srv.settimeout(0.1)
        deadline = time.monotonic() + TIMEOUT
        while cap.proc.poll() is None and time.monotonic() < deadline:
            try:                        # hang up on any further attempt too
                c, _ = srv.accept()
                c.close()
            except OSError:
                pass
        rc = cap.finish()
    finally:
        cap.kill()
        srv.close()
    _assert_clean_stop(cap, rc)
    assert "connected" not in cap.event_names()


@pytest.fixture
def slot_world(pg_server):
    """A table, a publication and a logical slot of their own; dropped afterwards."""
    conn = pg_server.connect()
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS sig_t")
    cur.execute("CREATE TABLE sig_t (id int PRIMARY KEY, v text)")
    cur.execute("DROP PUBLICATION IF EXISTS sig_pub")
    cur.execute("CREATE PUBLICATION sig_pub FOR TABLE sig_t")
    slots = []

    def make_slot(name):
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        slots.append(name)
        return name

    try:
        yield pg_server, cur, make_slot
    finally:
        for name in slots:
            deadline = time.monotonic() + 60
            while True:       # the walsender may still be exiting
                cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,))
                row = cur.fetchone()
                if row is None or not row[0] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = %s", (name,))
        cur.execute("DROP PUBLICATION IF EXISTS sig_pub")
        cur.execute("DROP TABLE IF EXISTS sig_t")
        conn.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_at_starting_real_server(tmp_path, slot_world, signum):
    """Against a real server any moment of the start is a clean stop: before it
    connects, while it connects or sets up, once it streams."""
    pg, cur, make_slot = slot_world
    slot = make_slot(f"sig_start_{int(signum)}")
    cap = Capture(["--dsn", pg.dsn(), "--slot", slot, "--publication", "sig_pub",
                   "--out", str(tmp_path / "out")])
    cap.wait_event("starting")
    cap.signal(signum)
    rc = cap.finish()
    _assert_clean_stop(cap, rc)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_after_connected_real_server(tmp_path, slot_world, signum):
    """Streaming: the transaction committed before the signal is in a durable segment
    and confirmed; the exit status is 0."""
    pg, cur, make_slot = slot_world
    slot = make_slot(f"sig_conn_{int(signum)}")
    out = tmp_path / "out"
    cap = Capture(["--dsn", pg.dsn(), "--slot", slot, "--publication", "sig_pub",
                   "--out", str(out), "--segment-seconds", "0.2"])
    cap.wait_event("connected")
    cur.execute("INSERT INTO sig_t VALUES (1, 'before the signal')")
    cap.signal(signum)
    rc = cap.finish()
    _assert_clean_stop(cap, rc)
    done = [json.loads(ln) for ln in cap.lines if '"event": "done"' in ln][0]
    from pgoutput_fast.capture import read_segments

    # the insert may or may not have arrived before the stop; what arrived is durable
    table = read_segments(str(out))
    assert table.num_rows == done["messages"]


# -- the capture command line ------------------------------------------------------------

def test_publication_names():
    from pgoutput_fast.capture.cli import publications

    assert publications(["a"]) == ["a"]
    assert publications(["a,b", "c", " d , e "]) == ["a", "b", "c", "d", "e"]
    assert publications(['My "Pub" 1', "MixedCase", "a,a"]) == ['My "Pub" 1', "MixedCase", "a"]


def _run_capture_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pgoutput_fast", "capture", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def test_capture_options_end_to_end(tmp_path, slot_world):
    """--dsn-file, two --publication (one with spaces, quotes and capitals),
    --file-mode and --until-lsn, against the real server."""
    pg, cur, make_slot = slot_world
    cur.execute('DROP PUBLICATION IF EXISTS "My ""Pub"" 1"')
    cur.execute('CREATE PUBLICATION "My ""Pub"" 1" FOR TABLE sig_t')
    try:
        slot = make_slot("sig_options")
        cur.execute("INSERT INTO sig_t VALUES (1, 'one'), (2, 'two')")
        # the insert position: with synchronous_commit=off (the test server) the write
        # position pg_current_wal_lsn() can still be before these commits
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        until = cur.fetchone()[0]
        dsn_file = tmp_path / "dsn"
        dsn_file.write_text(pg.dsn() + "\n")
        out = tmp_path / "out"
        r = _run_capture_cli("--dsn-file", dsn_file, "--slot", slot, "--publication", "sig_pub",
                             "--publication", 'My "Pub" 1', "--out", out, "--until-lsn", until,
                             "--file-mode", "0640", "--progress", "off")
        assert r.returncode == 0, r.stderr
        from pgoutput_fast.capture import read_segments

        assert read_segments(str(out)).num_rows >= 4        # B, R, I, I, C
        assert os.stat(out).st_mode & 0o777 == 0o750
        files = [n for n in os.listdir(out) if not n.startswith(".")]
        assert files
        for name in files:
            assert os.stat(out / name).st_mode & 0o777 == 0o640, name
    finally:
        cur.execute('DROP PUBLICATION IF EXISTS "My ""Pub"" 1"')


def test_capture_refused_connection_is_one_line_without_password(tmp_path, pg_server):
    secret = "Sup3r-S3cret-pw"
    dsn = (f"host={pg_server.host} port={pg_server.port} user=no_such_role dbname=postgres "
           f"password={secret}")
    for extra in ([], ["--debug"]):
        r = _run_capture_cli("--dsn", dsn, "--slot", "s1", "--publication", "p1",
                             "--out", tmp_path / "out", "--progress", "off", *extra)
        assert r.returncode == 3, r.stderr
        assert secret not in r.stderr and secret not in r.stdout
        lines = r.stderr.splitlines()
        assert lines[-1].startswith("pgoutput-fast capture: cannot connect to ")
        assert 'role "no_such_role" does not exist' in lines[-1]
        if extra:
            assert "Traceback" in r.stderr
        else:
            assert len(lines) == 1, r.stderr
    # the same string from the environment variable
    env = dict(os.environ, PGOUTPUT_FAST_DSN=dsn)
    r = _run_capture_cli("--slot", "s1", "--publication", "p1", "--out", tmp_path / "out",
                         "--progress", "off", env=env)
    assert r.returncode == 3 and secret not in r.stderr and len(r.stderr.splitlines()) == 1


def test_ignored_sigint_stays_ignored(tmp_path):
    """A capture started with SIGINT ignored (``capture &`` in a script) keeps ignoring
    it: it ends on SIGTERM, exit 0, not on the pending SIGINT."""
    port = _free_port()
    args = [sys.executable, "-m", "pgoutput_fast", "capture", "--dsn",
            f"host=127.0.0.1 port={port}", "--slot", "s1", "--publication", "p1",
            "--out", str(tmp_path / "out"), "--progress", "log"]

    def preexec():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec)
    proc.send_signal(signal.SIGINT)      # ignored: the capture goes on to connect ...
    _, err = proc.communicate(timeout=TIMEOUT)
    # ... and nothing listens: refused at the first attempt, one line, exit 3
    assert proc.returncode == 3, err
    assert "connection refused" in err and "Traceback" not in err

    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=preexec)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)     # handled: a stop before connecting
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
