"""The capture's receive loop: the native ``CopyReader`` + ``MessageColumns``
(``src/capture_loop.pxi``) against their Python twins (the ctypes loop and
``capture/columns.py``) and against PostgreSQL itself.

* Message columns: the same appends, runs, fits and exports give the same Arrow
  arrays in both implementations (no server).
* Against a real walsender: two slots created at the same point, one read by each
  loop, give byte-identical messages, LSNs and control-message indices, and the
  messages ``pg_logical_slot_peek_binary_changes`` returns for a third slot.
* Keepalives (each loop): with ``wal_sender_timeout = 1s`` and no periodic status
  updates, the server's reply requests are answered (the walsender stays), and the
  flush position sent is only the one the caller set: the slot's
  ``confirmed_flush_lsn`` does not move past it while data is received, and moves
  when the caller sets it.
* A terminated walsender surfaces as ``ConnectionLost`` from each loop.

Under ``PGOUTPUT_FAST_IMPL=python`` the native loop is not used: its tests skip, the
ctypes loop's run.
"""

from __future__ import annotations

import random
import time

import pyarrow as pa
import pytest

import pgoutput_fast

from pgoutput_fast.capture import stream as stream_mod
from pgoutput_fast.capture.columns import MessageColumns as PyColumns
from pgoutput_fast.capture.stream import INSIDE_TYPES, ConnectionLost, ReplicationStream
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload
from pgoutput_fast.local_server import find_bindir

native = pytest.importorskip("pgoutput_fast._native")
NativeColumns = native.MessageColumns

SCHEMA = "pgo_loop"
NATIVE_SELECTED = pgoutput_fast.IMPL == "native"
LOOPS = [pytest.param(True, id="native", marks=pytest.mark.skipif(
             not NATIVE_SELECTED, reason="the native loop runs under PGOUTPUT_FAST_IMPL=native")),
         pytest.param(False, id="ctypes")]


def _need_server():
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries")


# --------------------------------------------------------------------------------------
# message columns, without a server
# --------------------------------------------------------------------------------------

def _random_messages(rng, n):
    return [(rng.getrandbits(64), bytes([rng.choice(b"BIUDCRY")]) + rng.randbytes(rng.randrange(0, 300)))
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_columns_native_equals_python(seed):
    rng = random.Random(seed)
    msgs = _random_messages(rng, 400)
    batches = {}
    for cls in (NativeColumns, PyColumns):
        b = cls()
        for lsn, data in msgs:
            b.append(lsn, data)
        assert len(b) == len(msgs) and b.nbytes == sum(len(d) for _, d in msgs)
        assert [(b.lsn(i), b.message(i)) for i in range(len(b))] == msgs
        assert b.message(-1) == msgs[-1][1]
        with pytest.raises(IndexError):
            b.message(len(msgs))
        batches[cls] = b
    # runs into chunks, bounded by a byte limit, exported: the same arrays
    out = {}
    for cls, b in batches.items():
        chunk = cls()
        chunk.append(0, b"A\0\0\0\x01\0\0\0\x01")        # a synthetic message first
        arrays = []
        a, limit = 0, 5000
        cuts = sorted(rng.sample(range(1, len(msgs)), 20)) + [len(msgs)]
        rng_state = rng.getstate()
        for stop in cuts:
            while a < stop:
                j = b.fit(a, stop, limit - (chunk.nbytes + chunk.MESSAGE_OVERHEAD * len(chunk)))
                assert a < j <= stop
                assert chunk.extend_from(b, a, j) == sum(len(d) for _, d in msgs[a:j])
                if chunk.nbytes + chunk.MESSAGE_OVERHEAD * len(chunk) >= limit:
                    arrays.append(chunk.take_arrays(sum(len(x[0]) for x in arrays)))
                    assert len(chunk) == 0 and chunk.nbytes == 0
                a = j
        rng.setstate(rng_state)
        arrays.append(chunk.take_arrays(sum(len(x[0]) for x in arrays)))
        for arrs in arrays:
            for arr in arrs:
                arr.validate(full=True)
        out[cls] = [pa.concat_arrays([x[k] for x in arrays]) for k in range(3)]
    nat, ref = out[NativeColumns], out[PyColumns]
    assert nat[0].type == pa.int64() and nat[1].type == pa.binary()
    for k in range(3):
        assert nat[k].equals(ref[k])
    assert nat[1].to_pylist() == [b"A\0\0\0\x01\0\0\0\x01"] + [d for _, d in msgs]
    assert nat[2].to_pylist() == list(range(len(msgs) + 1))
    # LSNs are stored as int64 bit patterns (>= 2**63 wraps alike in both)
    assert nat[0].to_pylist()[1:] == [lsn - (1 << 64) if lsn >= 1 << 63 else lsn for lsn, _ in msgs]


def test_columns_fit_and_errors():
    for cls in (NativeColumns, PyColumns):
        c = cls()
        for i in range(10):
            c.append(i, b"x" * 100)
        per = 100 + cls.MESSAGE_OVERHEAD
        assert c.fit(0, 10, 3 * per) == 3
        assert c.fit(0, 10, 3 * per - 1) == 2
        assert c.fit(2, 10, 0) == 3            # always at least one message
        assert c.fit(4, 4, 0) == 4
        assert c.fit(0, 10, 1 << 40) == 10
        with pytest.raises(IndexError):
            c.fit(0, 11, 10)
        with pytest.raises(IndexError):
            c.extend_from(cls(), 0, 1)
        with pytest.raises(ValueError):
            c.extend_from(c, 0, 1)
        c.clear()
        assert len(c) == 0
        lsn, data, ordinal = c.take_arrays(7)
        assert len(lsn) == len(data) == len(ordinal) == 0
        data.validate(full=True)


def test_reader_rejects_null_connection():
    with pytest.raises(ValueError):
        native.CopyReader(0, 1, 1, 1)
    assert native.CopyReader.INSIDE_TYPES == bytes(sorted(INSIDE_TYPES, key=b"IUDTORY".index))


# --------------------------------------------------------------------------------------
# against a real walsender
# --------------------------------------------------------------------------------------

@pytest.fixture()
def loop_world(pg_server):
    _need_server()
    conn = pg_server.connect()
    workload._exec(conn, f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    workload._exec(conn, f"CREATE SCHEMA {SCHEMA}")
    workload._exec(conn, f"CREATE TABLE {SCHEMA}.t (id int PRIMARY KEY, v text, b bytea)")
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_loop_pub")
    workload._exec(conn, f"CREATE PUBLICATION pgo_loop_pub FOR TABLE {SCHEMA}.t")
    slots = []

    def slot(name):
        workload.create_slot(conn, name)
        slots.append(name)
        return name

    yield conn, slot
    for name in slots:
        deadline = time.monotonic() + 30
        while workload._exec(conn, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                             (name,))[0][0]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        workload.drop_slot(conn, name)
    workload._exec(conn, "DROP PUBLICATION IF EXISTS pgo_loop_pub")
    workload._exec(conn, f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    conn.close()


def _open(pg, slot, native_loop, start=True):
    from pgoutput_fast.capture import choose_options

    s = ReplicationStream(pg.dsn(), native_loop=native_loop)
    s.open()
    if start:
        s.set_flush(s.slot_info(slot)[0])
        s.start(slot, choose_options(s.version_num, "pgo_loop_pub", proto_version=1))
    return s


def _read_until(s, end, batch=None, ctrl=None, timeout=60.0):
    batch = s.columns_type() if batch is None else batch
    ctrl = [] if ctrl is None else ctrl
    deadline = time.monotonic() + timeout
    while s.server_wal_end < end:
        assert time.monotonic() < deadline, "the stream did not reach the end"
        s.read_batch(0.1, batch, ctrl, 64 << 10)     # small reads: many rounds
    return batch, ctrl


@pytest.mark.postgres
def test_loops_read_what_postgres_sends(pg_server, loop_world):
    conn, slot = loop_world
    slots = {False: slot("loop_ctypes")}
    if NATIVE_SELECTED:
        slots[True] = slot("loop_native")
    sql_slot = slot("loop_sql")
    for i in range(30):   # small and large messages, several transactions
        workload._exec(conn, f"INSERT INTO {SCHEMA}.t SELECT g, repeat(md5(g::text), (g %% 50) + 1), "
                             "decode(md5(g::text), 'hex') FROM generate_series(%s, %s) g",
                       (i * 200, i * 200 + 199))
    workload._exec(conn, f"UPDATE {SCHEMA}.t SET v = 'x' WHERE id % 7 = 0")
    workload._exec(conn, f"DELETE FROM {SCHEMA}.t WHERE id % 11 = 0")
    end = sqlcapture.wait_for_wal_flush(conn)
    truth = sqlcapture.peek_changes(conn, sql_slot, proto_version=1, publication_names="pgo_loop_pub")
    got = {}
    for native_loop, name in slots.items():
        s = _open(pg_server, name, native_loop)
        try:
            assert s.native_loop is native_loop
            assert (s._reader is not None) is native_loop
            batch, ctrl = _read_until(s, end)
        finally:
            s.close()
        msgs = [(batch.lsn(i), batch.message(i)) for i in range(len(batch))]
        got[native_loop] = (msgs, ctrl)
    if NATIVE_SELECTED:
        assert got[True] == got[False]
    msgs, ctrl = got[False]
    assert len(msgs) == len(truth) > 6000
    assert [d for _, d in msgs] == [d for _, _, d in truth]
    # the walsender's dataStart is the SQL interface's lsn, but 0/0 for a Relation or
    # Type message (and a Begin before an Origin), which the SQL interface does not show
    assert all(lsn == t or (lsn == 0 and d[:1] in b"RYB") for (lsn, d), (t, _, _) in zip(msgs, truth))
    assert sum(lsn == t for (lsn, _), (t, _, _) in zip(msgs, truth)) > len(msgs) - 40
    assert ctrl == [i for i, (_, d) in enumerate(msgs) if d[0] not in INSIDE_TYPES]


@pytest.mark.postgres
@pytest.mark.parametrize("native_loop", LOOPS)
def test_loop_answers_keepalives_with_the_callers_flush(pg_server, loop_world, native_loop):
    conn, slot = loop_world
    name = slot(f"loop_ka_{int(native_loop)}")
    workload._exec(conn, "ALTER SYSTEM SET wal_sender_timeout = '1s'")
    workload._exec(conn, "SELECT pg_reload_conf()")
    try:
        s = _open(pg_server, name, native_loop)
        try:
            confirmed = s.slot_info(name)[0]
            s.status_interval = 1e6   # no periodic updates: only answers to the server
            replies0 = s.replies
            pid = workload._exec(conn, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                                 (name,))[0][0]
            assert pid
            batch = s.columns_type()
            t_end = time.monotonic() + 4.0
            i = 0
            while time.monotonic() < t_end:
                workload._exec(conn, f"INSERT INTO {SCHEMA}.t VALUES (%s, 'v', NULL)", (i,))
                i += 1
                s.read_batch(0.2, batch, [])
            assert len(batch) > 2 * i     # B, I, C per transaction (the last ones may be on their way)
            assert s.keepalives > 0 and s.replies - replies0 >= 2, (s.keepalives, s.replies)
            assert s.server_wal_end > confirmed
            row = workload._exec(conn, "SELECT active_pid, confirmed_flush_lsn::text FROM "
                                       "pg_replication_slots WHERE slot_name = %s", (name,))[0]
            assert row[0] == pid, "the walsender timed out"
            # received, answered, but never confirmed: only the caller's flush is sent
            assert sqlcapture.parse_pg_lsn(row[1]) == confirmed
            target = s.server_wal_end
            s.set_flush(target)
            s.send_status()
            deadline = time.monotonic() + 10
            while True:
                s.read_batch(0.1, batch, [])
                lsn = workload._exec(conn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                           "WHERE slot_name = %s", (name,))[0][0]
                if sqlcapture.parse_pg_lsn(lsn) == target:
                    break
                assert time.monotonic() < deadline, (lsn, target)
        finally:
            s.close()
    finally:
        workload._exec(conn, "ALTER SYSTEM RESET wal_sender_timeout")
        workload._exec(conn, "SELECT pg_reload_conf()")
    with open(pg_server.logfile, encoding="utf-8", errors="replace") as f:
        assert "replication timeout" not in f.read()


@pytest.mark.postgres
@pytest.mark.parametrize("native_loop", LOOPS)
def test_terminated_walsender_raises_connection_lost(pg_server, loop_world, native_loop):
    conn, slot = loop_world
    name = slot(f"loop_term_{int(native_loop)}")
    s = _open(pg_server, name, native_loop)
    try:
        workload._exec(conn, f"INSERT INTO {SCHEMA}.t VALUES (1, 'a', NULL)")
        end = sqlcapture.wait_for_wal_flush(conn)
        _read_until(s, end)
        pid = workload._exec(conn, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                             (name,))[0][0]
        workload._exec(conn, "SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(ConnectionLost):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                s.read_batch(0.2, s.columns_type(), [])
    finally:
        s.close()
    if native_loop:
        with pytest.raises(ValueError):
            s._reader.fill(s.columns_type(), [], 100)     # detached on close


def test_native_loop_follows_the_implementation(monkeypatch):
    assert ReplicationStream("").native_loop is (pgoutput_fast.IMPL == "native")
    assert ReplicationStream("", native_loop=False).columns_type is PyColumns
    monkeypatch.setattr(pgoutput_fast, "IMPL", "python")
    assert ReplicationStream("").native_loop is False
    with pytest.raises(stream_mod.CaptureError):
        ReplicationStream("", native_loop=True)
