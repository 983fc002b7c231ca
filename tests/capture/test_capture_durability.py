"""Capture under faults, against a real PostgreSQL: it never confirms what is not durable,
its directory is its own, and a damaged capture is detected.

* A full file system (a small tmpfs filled up) and a read-only directory (an immutable
  directory, and a file system remounted read-only), while idle (for a plain, a
  streamed and a prepared transaction) and under load: capture exits non-zero within
  seconds with one line, the slot has confirmed nothing past the checkpoint, and after
  the cause is removed a restart captures every committed row exactly once (== SELECT).
* A second capture on the same directory is refused, naming the first one's pid.
* A deleted, older, corrupted or foreign checkpoint is refused and nothing is deleted.
* Bit flips at every region of a segment, a deleted last segment, swapped segments,
  a truncated segment or manifest: every reader raises ``SegmentError`` naming the file.
* Permanent errors (refused port, unknown database, missing publication, invalid slot
  name, a slot held by another process) end capture with their exit status, at once;
  names with capitals, spaces and quotes work with ``--create-slot``; a failed
  ``--create-slot`` removes what it created; the reconnect backoff starts again after a
  connection that made progress.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import pgoutput_fast
from pgoutput_fast import capture
from pgoutput_fast.capture import SegmentError
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload

from tests.support.procs import CliProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = "pgo_dur"
PUB = "pgo_dur_pub"

pytestmark = pytest.mark.skipif(os.environ.get("PGOUTPUT_FAST_IMPL") == "python",
                                reason="capture does not depend on the decoder implementation: "
                                       "these run once, under the native one")


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------

@contextlib.contextmanager
def _tmpfs(path, size="16m"):
    """A private tmpfs at ``path`` (root only; skipped with the reason where the kernel
    or the sandbox refuses the mount)."""
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"the kernel refused a tmpfs mount: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-R", "-i", path], capture_output=True)
        subprocess.run(["umount", "-l", path], capture_output=True)


def _fill(directory):
    """Fill the file system of ``directory`` with a ballast file; return its path."""
    path = os.path.join(os.path.dirname(directory.rstrip("/")), "ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (64 << 10, 512, 1):
            block = b"\0" * size
            try:
                while os.write(fd, block):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return path


def _cmd(pg, out, slot, *extra, publication=PUB):
    return [sys.executable, "-m", "pgoutput_fast", "capture", "--dsn", pg.dsn(), "--slot", slot,
            "--publication", publication, "--out", out, "--binary", "--messages",
            "--streaming", "on", "--two-phase", "--segment-seconds", "0.05",
            "--progress", "log", *extra]


def _error_line(proc: CliProcess) -> str:
    """The one line a failed capture printed last (JSON progress lines aside)."""
    text = proc.text()
    assert "Traceback" not in text, text[-3000:]
    plain = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("{")]
    assert plain, text[-2000:]
    return plain[-1]


def _confirmed(conn, slot):
    with conn.cursor() as cur:
        cur.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    return None if row is None or row[0] is None else pgoutput_fast.parse_lsn(row[0])


def _checkpoint(out):
    with open(os.path.join(out, "checkpoint.json"), encoding="utf-8") as f:
        return json.load(f)


def _transactions(out):
    """The checkpoint's transaction count; 0 before the first checkpoint (a new
    directory has none until its first segment is durable: "connected" comes first)."""
    try:
        return _checkpoint(out)["transactions"]
    except FileNotFoundError:
        return 0


def _tree(out):
    """name -> SHA-256 of every file (to prove nothing was changed)."""
    res = {}
    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                res[name] = hashlib.sha256(f.read()).hexdigest()
    return res


def _setup_db(conn, slot):
    workload._exec(conn, f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    workload._exec(conn, f"CREATE SCHEMA {SCHEMA}")
    workload._exec(conn, f"CREATE TABLE {SCHEMA}.t (id bigserial PRIMARY KEY, txn int, k int, pad text)")
    workload._exec(conn, f"DROP PUBLICATION IF EXISTS {PUB}")
    workload._exec(conn, f"CREATE PUBLICATION {PUB} FOR TABLES IN SCHEMA {SCHEMA}")
    _drop_slot(conn, slot)
    workload.create_slot(conn, slot, two_phase=True)


def _drop_slot(conn, slot):
    for _ in range(100):
        try:
            workload.drop_slot(conn, slot)
            return
        except Exception:
            time.sleep(0.2)


def _txn(conn, kind, i):
    """One transaction of ``kind`` (plain: 5 rows; streamed: 2,000 rows, over
    logical_decoding_work_mem; prepared: 4 rows, PREPARE then COMMIT PREPARED)."""
    cur = conn.cursor()
    cur.execute("BEGIN")
    if kind == "plain":
        cur.execute(f"INSERT INTO {SCHEMA}.t (txn, k) SELECT %s, g FROM generate_series(1, 5) g", (i,))
        cur.execute("COMMIT")
    elif kind == "streamed":
        cur.execute(f"INSERT INTO {SCHEMA}.t (txn, k, pad) SELECT %s, g, repeat('x', 60) "
                    "FROM generate_series(1, 2000) g", (i,))
        cur.execute("COMMIT")
    else:
        cur.execute(f"INSERT INTO {SCHEMA}.t (txn, k) SELECT %s, g FROM generate_series(1, 4) g", (i,))
        cur.execute(f"PREPARE TRANSACTION 'dur{i}'")
        cur.execute(f"COMMIT PREPARED 'dur{i}'")
    cur.close()


class _Load(threading.Thread):
    """Plain, streamed and prepared transactions in a loop until stopped."""

    def __init__(self, pg, start):
        super().__init__(daemon=True)
        self.pg, self.i, self.stop, self.error = pg, start, threading.Event(), None

    def run(self):
        try:
            conn = self.pg.connect()
            rng = random.Random(self.i)
            while not self.stop.is_set():
                self.i += 1
                r = rng.random()
                _txn(conn, "streamed" if r < 0.1 else "prepared" if r < 0.3 else "plain", self.i)
                time.sleep(0.005)
            conn.close()
        except BaseException as exc:  # reported by the test
            self.error = exc


def _rows_of_capture(out):
    """(id, txn, k) of every insert in the capture, decoded in order."""
    dec = pgoutput_fast.Decoder(events=False, tables=True)
    rows = []
    for table in capture.iter_segments(out):
        cs = dec.feed(table.column("data"), lsn=table.column("lsn"))
        t = cs.tables.get(f"{SCHEMA}.t")
        if t is not None:
            assert set(t.column("_op").to_pylist()) <= {"c"}   # inserts only
            rows += zip(t.column("id").to_pylist(), t.column("txn").to_pylist(),
                        t.column("k").to_pylist())
    return rows


def _assert_equals_select(conn, out):
    rows = _rows_of_capture(out)
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, txn, k FROM {SCHEMA}.t ORDER BY id")
        truth = [tuple(r) for r in cur.fetchall()]
    assert len(rows) == len(set(r[0] for r in rows)), "a row was captured twice"
    assert sorted(rows) == truth, (len(rows), len(truth))
    return len(truth)


def _finish(pg, conn, out, slot):
    """A last capture up to the server's current position: exit 0, then == SELECT."""
    end = sqlcapture.wait_for_wal_flush(conn)
    p = CliProcess(_cmd(pg, out, slot, "--until-lsn", sqlcapture.text_lsn(end)))
    rc = p.wait(180)
    assert rc == 0, p.text()[-3000:]
    return _assert_equals_select(conn, out)


# --------------------------------------------------------------------------------------
# a failed write is never confirmed
# --------------------------------------------------------------------------------------

FAULT_CASES = [(fault, when) for fault in ("full", "immutable")
               for when in ("idle-plain", "idle-streamed", "idle-prepared", "load")]
FAULT_CASES.append(("remount-ro", "idle-plain"))


@pytest.mark.postgres
@pytest.mark.parametrize("fault,when", FAULT_CASES, ids=[f"{f}-{w}" for f, w in FAULT_CASES])
def test_failed_write_is_never_confirmed(pg_server, tmp_path, fault, when):
    slot = "dur_" + (fault + "_" + when).replace("-", "_")
    conn = pg_server.connect()
    _setup_db(conn, slot)
    with _tmpfs(str(tmp_path / "mnt"), size="16m" if fault == "full" else "64m") as mnt:
        out = os.path.join(mnt, "cap")
        # some durable history first: a plain, a streamed and a prepared transaction
        p = CliProcess(_cmd(pg_server, out, slot))
        p.wait_for('"connected"')
        for i, kind in enumerate(("plain", "streamed", "prepared"), 1):
            _txn(conn, kind, i)
        deadline = time.monotonic() + 60
        while _transactions(out) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _checkpoint(out)["transactions"] >= 3
        assert oct(os.stat(out).st_mode & 0o777) == "0o700"
        assert all(os.stat(os.path.join(out, n)).st_mode & 0o077 == 0 for n in os.listdir(out))
        load = None
        if when == "load":
            load = _Load(pg_server, 1000)
            load.start()
            time.sleep(1.0)
        time.sleep(0.5)
        ballast = None
        t_fault = time.monotonic()
        if fault == "full":
            ballast = _fill(out)
        elif fault == "immutable":
            subprocess.run(["chattr", "+i", out], check=True)
        else:
            r = subprocess.run(["mount", "-o", "remount,ro", mnt], capture_output=True, text=True)
            assert r.returncode == 0, f"remount failed (capture holds a file open?): {r.stderr}"
        if when.startswith("idle-"):
            _txn(conn, when[5:], 100)
        rc = p.wait(60)
        took = time.monotonic() - t_fault
        if load is not None:
            load.stop.set()
            load.join(60)
            assert load.error is None, load.error
        line = _error_line(p)
        assert rc == 6, p.text()[-3000:]
        assert took < 30, took
        assert "nothing past the last checkpoint was confirmed" in line, line
        assert out in line or "capture.lock" in line or "checkpoint" in line, line
        ck = _checkpoint(out)
        confirmed = _confirmed(conn, slot)
        assert confirmed <= max(ck["acked_lsn"], ck["durable_lsn"]), (confirmed, ck)
        # the cause removed, a restart resumes with no row lost and none twice
        if ballast:
            os.unlink(ballast)
        elif fault == "immutable":
            subprocess.run(["chattr", "-i", out], check=True)
        else:
            subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
        n = _finish(pg_server, conn, out, slot)
        assert n >= 3 * 1 + 5
    _drop_slot(conn, slot)
    conn.close()


@pytest.mark.postgres
def test_create_slot_that_fails_removes_what_it_created(pg_server, tmp_path):
    """A --create-slot whose first checkpoint cannot be written (a full file system)
    exits 6 and leaves neither the slot nor the publication it created."""
    conn = pg_server.connect()
    slot = "dur_created"
    pub = 'Dur "New" Pub'
    _drop_slot(conn, slot)
    workload._exec(conn, 'DROP PUBLICATION IF EXISTS "Dur ""New"" Pub"')
    with _tmpfs(str(tmp_path / "mnt"), size="4m") as mnt:
        out = os.path.join(mnt, "cap")
        os.makedirs(out)
        _fill(out)
        p = CliProcess(_cmd(pg_server, out, slot, "--create-slot", publication=pub))
        rc = p.wait(60)
        assert rc == 6, p.text()[-2000:]
        _error_line(p)
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM pg_publication WHERE pubname = %s", (pub,))
        assert cur.fetchone()[0] == 0
    conn.close()


# --------------------------------------------------------------------------------------
# the directory is capture's own
# --------------------------------------------------------------------------------------

@pytest.fixture
def captured(pg_server, tmp_path):
    """A capture directory of a few segments, and its slot."""
    conn = pg_server.connect()
    slot = "dur_dir"
    _setup_db(conn, slot)
    out = str(tmp_path / "cap")
    for i in range(1, 7):
        _txn(conn, ("plain", "streamed", "prepared")[i % 3], i)
        end = sqlcapture.wait_for_wal_flush(conn)
        p = CliProcess(_cmd(pg_server, out, slot, "--until-lsn", sqlcapture.text_lsn(end)))
        assert p.wait(120) == 0, p.text()[-2000:]
    assert _checkpoint(out)["last_segment"] >= 4
    yield conn, out, slot
    _drop_slot(conn, slot)
    conn.close()


@pytest.mark.postgres
def test_second_capture_is_refused(pg_server, captured):
    conn, out, slot = captured
    first = CliProcess(_cmd(pg_server, out, slot))
    first.wait_for('"connected"')
    second = CliProcess(_cmd(pg_server, out, slot))
    assert second.wait(60) == 5
    line = _error_line(second)
    assert f"pid {first.p.pid}" in line and "in use by another capture" in line, line
    _txn(conn, "plain", 50)
    first.stop()
    assert first.p.returncode == 0, first.text()[-2000:]
    _finish(pg_server, conn, out, slot)


@pytest.mark.postgres
@pytest.mark.parametrize("damage", ["deleted", "older", "corrupted", "torn", "other-slot",
                                    "other-publication", "extra-segments"])
def test_unprovable_directory_is_refused(pg_server, captured, damage, tmp_path):
    conn, out, slot = captured
    ck = os.path.join(out, "checkpoint.json")
    if damage == "older":
        # a copy taken two segments ago, put back after more was captured and confirmed
        old = open(ck, "rb").read()
        for i in (20, 21, 22):
            _txn(conn, "plain", i)
            end = sqlcapture.wait_for_wal_flush(conn)
            p = CliProcess(_cmd(pg_server, out, slot, "--until-lsn", sqlcapture.text_lsn(end)))
            assert p.wait(120) == 0, p.text()[-2000:]
        open(ck, "wb").write(old)
    elif damage == "deleted":
        os.unlink(ck)
    elif damage == "corrupted":
        raw = bytearray(open(ck, "rb").read())
        i = raw.index(b'"durable_lsn"') + len(b'"durable_lsn": ') + 1
        raw[i] = ord("9") if raw[i] != ord("9") else ord("8")
        open(ck, "wb").write(bytes(raw))
    elif damage == "torn":
        raw = open(ck, "rb").read()
        open(ck, "wb").write(raw[: len(raw) // 2])
    elif damage == "extra-segments":
        last = _checkpoint(out)["last_segment"]
        for n in (last + 1, last + 2):
            shutil.copy(os.path.join(out, f"{last:010d}.parquet"), os.path.join(out, f"{n:010d}.parquet"))
    before = _tree(out)
    args = _cmd(pg_server, out, slot)
    if damage == "other-slot":
        workload.create_slot(conn, "dur_other", two_phase=True)
        args = _cmd(pg_server, out, "dur_other")
    elif damage == "other-publication":
        workload._exec(conn, "DROP PUBLICATION IF EXISTS dur_other_pub")
        workload._exec(conn, f"CREATE PUBLICATION dur_other_pub FOR TABLES IN SCHEMA {SCHEMA}")
        args = _cmd(pg_server, out, slot, publication="dur_other_pub")
    p = CliProcess(args)
    rc = p.wait(60)
    line = _error_line(p)
    if damage == "other-slot":
        _drop_slot(conn, "dur_other")
    assert rc == 5, p.text()[-2000:]
    assert "Nothing was changed" in line or "nothing was changed" in line.lower(), line
    after = _tree(out)
    after.pop("capture.lock", None)
    before.pop("capture.lock", None)
    assert after == before, "a refused start changed the directory"
    if damage in ("deleted", "corrupted", "torn"):
        with pytest.raises(SegmentError):
            capture.read_segments(out)


@pytest.mark.postgres
def test_crash_window_segment_is_removed_only_when_unconfirmed(pg_server, captured):
    """A segment renamed (with its manifest line) just before a crash, its checkpoint
    never written: removed at restart because the slot proves it unconfirmed, its rows
    come again, and the result equals SELECT. The same layout with the slot confirmed
    past the checkpoint is refused instead (the checkpoint is provably older)."""
    conn, out, slot = captured
    last = _checkpoint(out)["last_segment"]
    ck_path = os.path.join(out, "checkpoint.json")
    before = open(ck_path, "rb").read()
    # confirm late (1000 s): the slot stays behind while segment last+1 becomes durable
    p = CliProcess(_cmd(pg_server, out, slot), env={"PGOUTPUT_FAST_CAPTURE_ACK_DELAY": "1000"})
    p.wait_for('"connected"')
    _txn(conn, "plain", 77)
    deadline = time.monotonic() + 60
    while _checkpoint(out)["last_segment"] == last and time.monotonic() < deadline:
        time.sleep(0.05)
    p.p.send_signal(signal.SIGKILL)
    p.wait(30)
    assert _checkpoint(out)["last_segment"] == last + 1
    open(ck_path, "wb").write(before)          # as if the checkpoint write had not happened
    p = CliProcess(_cmd(pg_server, out, slot, "--until-lsn",
                   sqlcapture.text_lsn(sqlcapture.wait_for_wal_flush(conn))))
    assert p.wait(120) == 0, p.text()[-2000:]
    assert '"removed_unconfirmed"' in p.text() and f"{last + 1:010d}.parquet" in p.text()
    _assert_equals_select(conn, out)
    # now the slot has confirmed the new segment: the old checkpoint is refused
    newer = _checkpoint(out)["last_segment"]
    open(ck_path, "wb").write(before)
    p = CliProcess(_cmd(pg_server, out, slot))
    assert p.wait(60) == 5, p.text()[-2000:]
    assert "older than the slot" in _error_line(p) or "past its checkpoint" in _error_line(p)
    assert os.path.exists(os.path.join(out, f"{newer:010d}.parquet"))


# --------------------------------------------------------------------------------------
# segments prove their integrity
# --------------------------------------------------------------------------------------

def _synthetic_capture(directory, segments=4, rows=500):
    import pyarrow as pa

    from pgoutput_fast import encode_message
    from pgoutput_fast.messages import Begin, Commit, Insert, Relation, RelationColumn, Value

    rel = encode_message(Relation(1, "public", "t", "d", (RelationColumn(1, "id", 20, -1),
                                                          RelationColumn(0, "v", 25, -1))))
    msgs, lsns = [rel], [0]
    lsn = 1 << 24
    bounds = [0]
    for s in range(segments):
        for t in range(rows // 5):
            lsn += 100
            msgs.append(encode_message(Begin(lsn + 90, 0, 1000 + t)))
            lsns.append(lsn)
            for k in range(5):
                i = (s * rows) + t * 5 + k
                msgs.append(encode_message(Insert(1, (Value("t", str(i).encode()),
                                                      Value("t", f"value {i}".encode())))))
                lsns.append(lsn + k + 1)
            msgs.append(encode_message(Commit(0, lsn + 90, lsn + 95, 0)))
            lsns.append(lsn + 90)
        bounds.append(len(msgs))
    tables = [pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                        pa.array(range(a, b), pa.int64())], schema=capture.SEGMENT_SCHEMA)
              for a, b in zip(bounds, bounds[1:])]
    capture.write_capture(directory, tables, {"binary": False})
    return len(msgs)


def _readers(directory):
    """Every way to read a capture directory."""
    yield "read_segments", lambda: capture.read_segments(directory)
    yield "iter_segments", lambda: list(capture.iter_segments(directory))
    yield "segment_paths+read_segment", lambda: [capture.read_segment(e)
                                                 for e in capture.segment_entries(directory)]
    yield "spark segment_groups", lambda: __import__(
        "pgoutput_fast.spark.decode", fromlist=["segment_groups"]).segment_groups(directory)


def test_bit_flips_in_every_region_are_detected(tmp_path):
    """A flipped bit anywhere in a segment (magic, page headers, data, footer, its
    length) or in the manifest or checkpoint: every reader raises SegmentError naming
    the file."""
    d = str(tmp_path / "cap")
    n = _synthetic_capture(d)
    assert capture.read_segments(d).num_rows == n
    rng = random.Random(7)
    for target in ("0000000001.parquet", "0000000004.parquet", "manifest.jsonl", "checkpoint.json"):
        path = os.path.join(d, target)
        raw = open(path, "rb").read()
        size = len(raw)
        # every region: the first and last 16 bytes bit by bit, then 60 spread offsets
        offsets = sorted(set(list(range(16)) + list(range(size - 16, size))
                             + [rng.randrange(size) for _ in range(60)]))
        for off in offsets:
            bad = bytearray(raw)
            bad[off] ^= 1 << rng.randrange(8)
            if bytes(bad) == raw:
                continue
            open(path, "wb").write(bytes(bad))
            for name, read in _readers(d):
                try:
                    read()
                except SegmentError as exc:
                    assert target in str(exc) or "checkpoint" in str(exc), (name, str(exc))
                else:
                    raise AssertionError(f"{name}: a flip at byte {off} of {target} went unseen")
        open(path, "wb").write(raw)
    assert capture.read_segments(d).num_rows == n


@pytest.mark.parametrize("damage", ["delete-last", "delete-middle", "swap", "truncate",
                                    "truncate-manifest", "delete-manifest", "delete-checkpoint",
                                    "replace-with-other-capture"])
def test_missing_reordered_or_replaced_segments_are_detected(tmp_path, damage):
    d = str(tmp_path / "cap")
    _synthetic_capture(d)
    seg = lambda i: os.path.join(d, f"{i:010d}.parquet")  # noqa: E731
    if damage == "delete-last":
        os.unlink(seg(4))
        culprit = "0000000004.parquet"
    elif damage == "delete-middle":
        os.unlink(seg(2))
        culprit = "0000000002.parquet"
    elif damage == "swap":
        os.rename(seg(2), seg(9))
        os.rename(seg(3), seg(2))
        os.rename(seg(9), seg(3))
        culprit = "000000000"
    elif damage == "truncate":
        raw = open(seg(4), "rb").read()
        open(seg(4), "wb").write(raw[:-100])
        culprit = "0000000004.parquet"
    elif damage == "truncate-manifest":
        raw = open(os.path.join(d, "manifest.jsonl"), "rb").read()
        open(os.path.join(d, "manifest.jsonl"), "wb").write(raw[: raw.rindex(b"\n", 0, -1) + 1])
        culprit = "manifest.jsonl"
    elif damage == "delete-manifest":
        os.unlink(os.path.join(d, "manifest.jsonl"))
        culprit = "manifest.jsonl"
    elif damage == "delete-checkpoint":
        os.unlink(os.path.join(d, "checkpoint.json"))
        culprit = "no checkpoint.json"
    else:
        other = str(tmp_path / "other")
        _synthetic_capture(other, rows=505)      # another capture: other bytes
        shutil.copy(os.path.join(other, "0000000002.parquet"), seg(2))
        culprit = "0000000002.parquet"
    for name, read in _readers(d):
        with pytest.raises(SegmentError) as info:
            read()
        assert culprit in str(info.value), (name, str(info.value))


def test_page_checksums_are_written():
    """Segments carry Parquet page checksums (CRC32), which other Parquet readers can
    verify too: a flip inside a data page fails pyarrow's own verification."""
    import tempfile

    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as td:
        d = os.path.join(td, "cap")
        _synthetic_capture(d, segments=1, rows=2000)
        path = os.path.join(d, "0000000001.parquet")
        meta = pq.ParquetFile(path).metadata
        col = meta.row_group(0).column(1)          # data
        start = col.data_page_offset
        raw = bytearray(open(path, "rb").read())
        raw[start + col.total_compressed_size // 2] ^= 0x10
        open(path, "wb").write(bytes(raw))
        with pytest.raises(OSError, match="(?i)crc|checksum|corrupt"):
            pq.read_table(path, page_checksum_verification=True)


# --------------------------------------------------------------------------------------
# permanent errors stop, transient ones are retried
# --------------------------------------------------------------------------------------

def _free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.postgres
def test_permanent_errors_end_capture_at_once(pg_server, tmp_path):
    conn = pg_server.connect()
    slot = "dur_perm"
    _setup_db(conn, slot)
    out = str(tmp_path / "cap")
    base = pg_server.dsn()
    cases = [
        ("refused port", [f"host=127.0.0.1 port={_free_port()} dbname=postgres user=postgres", slot,
                          PUB], 3, "refused"),
        ("unknown database", [base.replace("dbname=postgres", "dbname=nosuchdb"), slot, PUB],
         None, "nosuchdb"),
        ("missing publication", [base, slot, "no_such_pub"], 4, "no_such_pub"),
        ("invalid slot name", [base, "Bad Slot", PUB], 2, "invalid slot name"),
        ("missing slot", [base, "no_such_slot", PUB], 4, "no_such_slot"),
    ]
    for what, (dsn, s, pub), code, needle in cases:
        args = [sys.executable, "-m", "pgoutput_fast", "capture", "--dsn", dsn, "--slot", s,
                "--publication", pub, "--out", out + "_" + what.replace(" ", "_"),
                "--progress", "log"]
        t0 = time.monotonic()
        p = CliProcess(args)
        rc = p.wait(60)
        line = _error_line(p)
        assert (rc in (3, 4) if code is None else rc == code), (what, rc, p.text()[-1500:])
        assert needle in line, (what, line)
        assert time.monotonic() - t0 < 30, what
    # a slot held by another process: a bounded wait, then exit 4 naming the pid
    holder = CliProcess(_cmd(pg_server, out, slot))
    holder.wait_for('"connected"')
    p = CliProcess(_cmd(pg_server, str(tmp_path / "cap2"), slot, "--slot-busy-timeout", "1"))
    rc = p.wait(60)
    line = _error_line(p)
    holder.stop()
    assert rc == 4, p.text()[-1500:]
    assert "in use by another process" in line, line
    _drop_slot(conn, slot)
    conn.close()


@pytest.mark.postgres
def test_names_with_capitals_spaces_and_quotes(pg_server, tmp_path):
    """--create-slot with a publication named 'My "Quoted" Pub': created as it is, and
    pgoutput finds it (the name is quoted in publication_names)."""
    conn = pg_server.connect()
    workload._exec(conn, "DROP SCHEMA IF EXISTS pgo_names CASCADE")
    workload._exec(conn, "CREATE SCHEMA pgo_names")
    workload._exec(conn, "CREATE TABLE pgo_names.t (id int PRIMARY KEY)")
    pub = 'My "Quoted" Pub'
    workload._exec(conn, 'DROP PUBLICATION IF EXISTS "My ""Quoted"" Pub"')
    slot = "dur_names"
    _drop_slot(conn, slot)
    out = str(tmp_path / "cap")
    p = CliProcess([sys.executable, "-m", "pgoutput_fast", "capture", "--dsn", pg_server.dsn(),
               "--slot", slot, "--publication", pub, "--out", out, "--create-slot",
               "--progress", "log", "--segment-seconds", "0.05"])
    p.wait_for('"connected"')
    workload._exec(conn, "INSERT INTO pgo_names.t SELECT generate_series(1, 10)")
    end = sqlcapture.wait_for_wal_flush(conn)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        c = _confirmed(conn, slot)
        if c is not None and c >= end:
            break
        time.sleep(0.1)
    p.stop()
    assert p.p.returncode == 0, p.text()[-2000:]
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_publication WHERE pubname = %s", (pub,))
        assert cur.fetchone()[0] == 1
    dec = pgoutput_fast.Decoder(events=False)
    ids = []
    for t in capture.iter_segments(out):
        cs = dec.feed(t.column("data"), lsn=t.column("lsn"))
        if "pgo_names.t" in cs.tables:
            ids += cs.tables["pgo_names.t"].column("id").to_pylist()
    assert sorted(ids) == list(range(1, 11))
    _drop_slot(conn, slot)
    workload._exec(conn, 'DROP PUBLICATION "My ""Quoted"" Pub"')
    workload._exec(conn, "DROP SCHEMA pgo_names CASCADE")
    conn.close()


@pytest.mark.postgres
def test_backoff_starts_again_after_progress(pg_server, tmp_path):
    """Five disconnects, each after a connection that received data: every reconnect
    waits the first backoff step again (0.5 s), not 1, 2, 4, 8 s."""
    conn = pg_server.connect()
    slot = "dur_backoff"
    _setup_db(conn, slot)
    out = str(tmp_path / "cap")
    p = CliProcess(_cmd(pg_server, out, slot))
    try:
        for i in range(5):
            p.wait_for('"connected"')
            n_conn = sum('"connected"' in ln for ln in p.lines)
            _txn(conn, "plain", 300 + i)
            deadline = time.monotonic() + 60
            while _transactions(out) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            with conn.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                            "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
            deadline = time.monotonic() + 60
            while sum('"connected"' in ln for ln in p.lines) == n_conn and time.monotonic() < deadline:
                time.sleep(0.05)
        waits = [json.loads(ln)["retry_in_s"] for ln in p.lines if '"disconnected"' in ln]
    finally:
        p.stop()
    assert len(waits) >= 5 and all(w == 0.5 for w in waits), waits
    _finish(pg_server, conn, out, slot)
    _drop_slot(conn, slot)
    conn.close()
