"""Adding a table to the publication later: ``pgoutput-fast snapshot --table`` (a
backfill) against real PostgreSQL 15 and 17.

A capture runs on table ``a``; table ``b`` already holds rows when it is added to
the publication; a writer inserts, updates and deletes both tables before, *during*
and after the backfill. The capture's directory is applied to Delta tables before the
backfill (``b`` then holds only the rows the stream touched) and again with the
backfill (``apply_changeset(..., backfills=[DIR])``): every table equals PostgreSQL's
``SELECT`` (text and binary), applying again changes nothing. The refusal: a table
whose stream changes were applied past the backfill's point refuses it (one line),
and a backfill taken again is accepted. Also the CLI's one-line refusals, and the
capture refusing a backfill directory. With a ``--two-phase`` capture: a transaction
prepared before the backfill (its slot waits for it) and one prepared before the
hand-over point and committed or rolled back after it: the applied table equals
``SELECT``.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest

import pgoutput_fast
from pgoutput_fast import capture, sqlcapture
from pgoutput_fast.capture import CaptureConfig
from pgoutput_fast.capture.backfill import BackfillConfig, read_backfill, run_backfill

from tests.support.procs import CliProcess, wait_until

pytestmark = pytest.mark.postgres

_TABLES = """
DROP PUBLICATION IF EXISTS {s}_pub;
DROP SCHEMA IF EXISTS {s} CASCADE;
CREATE SCHEMA {s};
CREATE TABLE {s}.a (id int PRIMARY KEY, v text, n numeric(12,2));
INSERT INTO {s}.a SELECT g, 'a' || g, g / 7.0 FROM generate_series(1, 500) g;
CREATE TABLE {s}.b (id int PRIMARY KEY, n int, t text, ts timestamptz, num numeric,
                    js jsonb, raw bytea, arr int[], big text);
INSERT INTO {s}.b SELECT g, g, E'tab\\there ' || g, '2024-01-01'::timestamptz + g * interval '1 min',
  g * 1.5, jsonb_build_object('g', g), decode(md5(g::text), 'hex'), ARRAY[g, -g],
  CASE WHEN g % 500 = 0 THEN repeat(md5(g::text), 400) END
  FROM generate_series(1, 4000) g;
CREATE PUBLICATION {s}_pub FOR TABLE {s}.a;
"""


@pytest.fixture(scope="module", params=["pg15", "pg17"])
def server(request):
    from pgoutput_fast.local_server import PostgresServer, find_bindir

    want = 150000 if request.param == "pg15" else 160000
    pg = PostgresServer(bindir=find_bindir(min_version=want))
    pg.start()
    assert pg.version_num >= want
    conn = pg.connect()
    yield {"pg": pg, "conn": conn}
    conn.close()
    pg.stop()


class _Writer(threading.Thread):
    """Small transactions on ``a`` and ``b`` until stopped; the time of each commit."""

    def __init__(self, pg, schema, seed):
        super().__init__(daemon=True)
        self.pg, self.s = pg, schema
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.hold = threading.Event()       # set: pause (the capture's end is then near)
        self.held = threading.Event()
        self.commits: list = []
        self.error = None
        self.next_id = 100_000

    def run(self):
        try:
            conn = self.pg.connect()
            cur = conn.cursor()
            while not self.stop.is_set():
                if self.hold.is_set():
                    self.held.set()
                    time.sleep(0.01)
                    continue
                self.held.clear()
                self._one(cur)
                self.commits.append(time.time())
                time.sleep(0.005)
            conn.close()
        except BaseException as exc:   # reported by the test
            self.error = exc

    def _one(self, cur):
        r, s = self.rng, self.s
        k = r.randrange(8)
        i = r.randrange(1, 4000)
        if k == 0:
            self.next_id += 1
            cur.execute(f"INSERT INTO {s}.b (id, n, t, arr) VALUES (%s, 0, 'new', '{{1}}')",
                        (self.next_id,))
        elif k == 1:
            cur.execute(f"DELETE FROM {s}.b WHERE id = %s", (i,))
        elif k == 2:
            cur.execute(f"UPDATE {s}.b SET n = n + 1, t = t || 'u', js = js || '{{\"u\": 1}}' "
                        "WHERE id = %s", (i,))
        elif k == 3:
            # the TOASTed column unchanged: the stream sends it as unchanged-TOAST
            cur.execute(f"UPDATE {s}.b SET n = -n WHERE id = %s", (r.randrange(1, 9) * 500,))
        elif k == 4:
            cur.execute(f"UPDATE {s}.a SET v = v || '+', n = n + 1 WHERE id = %s",
                        (r.randrange(1, 500),))
        elif k == 5:
            self.next_id += 1
            cur.execute(f"INSERT INTO {s}.a VALUES (%s, 'ins', 1)", (self.next_id,))
        elif k == 6:
            cur.execute(f"DELETE FROM {s}.a WHERE id = %s", (r.randrange(1, 500),))
        else:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {s}.a SET n = 0 WHERE id = %s", (r.randrange(1, 500),))
            cur.execute(f"UPDATE {s}.b SET ts = now() WHERE id = %s", (i,))
            cur.execute("COMMIT")


def _more_writes(writer, n):
    have = len(writer.commits)
    wait_until(lambda: len(writer.commits) >= have + n or writer.error, what="writes")
    assert writer.error is None, writer.error


def _capture_to_now(pg, conn, out, slot, pub, binary, writer=None, create=False):
    """Capture up to the WAL's end now (the writer paused meanwhile: a capture stops at
    --until-lsn once idle)."""
    if writer is not None and writer.is_alive():
        writer.hold.set()
        wait_until(lambda: writer.held.is_set() or writer.error, what="the writer to pause")
    try:
        end = sqlcapture.wait_for_wal_flush(conn)
        cfg = CaptureConfig(pg.dsn(), slot, [pub], out, create_slot=create, binary=binary,
                            segment_bytes=128 << 10, segment_seconds=0.2, progress="off",
                            max_reconnects=0, until_lsn=end)
        capture.run_capture(cfg)
    finally:
        if writer is not None:
            writer.hold.clear()


def _decode(out):
    seg = capture.read_segments(out)
    dec = pgoutput_fast.Decoder(events=False, tables=True)
    cs = dec.feed(seg.column("data"), lsn=seg.column("lsn"))
    return dec, cs


def _compare(conn, schema, target, catalog, binary, names=("a", "b")):
    from pgoutput_fast import demo
    from pgoutput_fast.delta import DeltaImage
    from pgoutput_fast.demo.truth import PgCatalog, table_truth

    img = DeltaImage(target, catalog, binary)
    with conn.cursor() as cur:
        cat = PgCatalog(cur)
        results = [demo.compare_with_truth(table_truth(cur, schema, n, cat), img, binary)
                   for n in names]
    return {r.name: r for r in results}


def _bad(results):
    return [(n, r.problems[:3]) for n, r in results.items() if not r.ok]


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_backfill_hand_over(server, tmp_path, binary):
    from pgoutput_fast.delta import ApplyError, BackfillRefused, apply_changeset

    pg, conn = server["pg"], server["conn"]
    s = f"bf_{'b' if binary else 't'}"
    pub, slot = f"{s}_pub", f"{s}_slot"
    with conn.cursor() as cur:
        cur.execute(_TABLES.format(s=s))
    out, bf_dir = str(tmp_path / "cap"), str(tmp_path / "backfill")
    target = str(tmp_path / "tables")
    writer = _Writer(pg, s, seed=binary)
    writer.start()
    try:
        _more_writes(writer, 20)
        # the capture of a (with its initial snapshot), then b is added to the publication
        _capture_to_now(pg, conn, out, slot, pub, binary, writer, create=True)
        with conn.cursor() as cur:
            cur.execute(f"ALTER PUBLICATION {pub} ADD TABLE {s}.b")
        _more_writes(writer, 40)
        _capture_to_now(pg, conn, out, slot, pub, binary, writer)
        # applied before the backfill: b holds only the rows the stream touched
        dec, cs = _decode(out)
        apply_changeset(cs, target, binary=binary)
        before = _compare(conn, s, target, dec.catalog, binary)
        assert f"{s}.b" in before and not before[f"{s}.b"].ok

        # the backfill, with the writer going (a pause per chunk: it lasts ~1 s)
        cfg = BackfillConfig(pg.dsn(), [pub], bf_dir, [f"{s}.b"], binary=binary,
                             snapshot_workers=2, snapshot_range_blocks=16,
                             chunk_bytes=64 << 10, segment_bytes=128 << 10, progress="off")
        cfg.snapshot_chunk_delay = 0.05
        n0 = len(writer.commits)
        result = run_backfill(cfg)
        assert len(writer.commits) > n0 + 5, "no write during the backfill"
        _more_writes(writer, 40)
    finally:
        writer.stop.set()
        writer.join()
    assert writer.error is None, writer.error
    _capture_to_now(pg, conn, out, slot, pub, binary)

    bf = read_backfill(bf_dir)
    summary = result.snapshot
    assert bf.tables == [f"{s}.b"] and bf.binary == binary
    assert summary["rows"] > 3000 and summary["transactions"] > 3, summary
    with conn.cursor() as cur:
        # the temporary slot went with its connection
        cur.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name <> %s", (slot,))
        assert cur.fetchall() == []
    # the backfill's rows: one Truncate, then op 'r', all below the hand-over point
    _d, bcs = _decode(bf_dir)
    ((_v, bt),) = bcs.table_versions
    ops = bt.column("_op").to_pylist()
    assert ops[0] == "t" and set(ops[1:]) == {"r"} and len(ops) == summary["rows"] + 1
    assert max(bt.column("_commit_lsn").to_pylist()) < bf.point
    # the capture holds changes of b on both sides of the point
    dec, cs = _decode(out)
    b_lsns = [c for v, t in cs.table_versions if v.qualified_name == f"{s}.b"
              for c in t.column("_commit_lsn").to_pylist()]
    assert min(b_lsns) < bf.point <= max(b_lsns), (len(b_lsns), bf)

    # the hand-over: the backfill replaces b's partial rows, the stream goes on at P
    res = apply_changeset(cs, target, binary=binary, backfills=[bf_dir])
    assert res[f"{s}.b"]["backfill"]["backfill"] == bf.point, res[f"{s}.b"]
    bad = _bad(_compare(conn, s, target, dec.catalog, binary))
    assert not bad, bad
    # for the Spark test (the tables change after this test)
    server["last"] = {"schema": s, "out": out, "backfill": bf_dir, "binary": binary,
                      "catalog": dec.catalog}
    again = apply_changeset(cs, target, binary=binary, backfills=[bf_dir])
    assert all(r["skipped"] for r in again.values()), again
    assert again[f"{s}.b"]["backfill"]["skipped"]

    # the refusal: b applied past the point without the backfill, then the backfill
    late = str(tmp_path / "late")
    apply_changeset(cs, late, binary=binary)
    with pytest.raises(ApplyError) as info:
        apply_changeset(cs, late, binary=binary, backfills=[bf_dir])
    err = info.value.errors[f"{s}.b"]
    assert isinstance(err, BackfillRefused) and "Take the backfill again" in str(err), err
    assert "\n" not in str(err)
    assert f"{s}.a" in info.value.results
    # ... and a backfill taken again is past the table's position
    bf2 = str(tmp_path / "backfill2")
    run_backfill(BackfillConfig(pg.dsn(), [pub], bf2, [f"{s}.b"], binary=binary,
                                progress="off"))
    assert read_backfill(bf2).point > bf.point
    apply_changeset(cs, late, binary=binary, backfills=[bf2])
    bad = _bad(_compare(conn, s, late, dec.catalog, binary))
    assert not bad, bad
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def _end_prepared(conn, gid):
    """Roll back the prepared transaction ``gid`` if it is still there (a prepared
    transaction holds every slot's creation on the server until it ends)."""
    with conn.cursor() as cur:
        cur.execute("SELECT gid FROM pg_prepared_xacts WHERE gid = %s", (gid,))
        if cur.fetchall():
            cur.execute(f"ROLLBACK PREPARED '{gid}'")


def _two_phase_capture(pg, conn, tmp_path, slot, pub):
    """(capture dir, backfill dir, Delta target, capture_to_now(**kw)) of a two-phase
    test: capture_to_now runs a binary, two-phase capture up to the WAL flushed now."""
    out = str(tmp_path / "cap")
    base = dict(create_slot=False, binary=True, two_phase=True, segment_bytes=128 << 10,
                segment_seconds=0.2, progress="off", max_reconnects=0)

    def capture_to_now(**kw):
        end = sqlcapture.wait_for_wal_flush(conn)
        capture.run_capture(CaptureConfig(pg.dsn(), slot, [pub], out,
                                          **dict(base, until_lsn=end, **kw)))

    return out, str(tmp_path / "backfill"), str(tmp_path / "tables"), capture_to_now


def _backfill_thread(pg, pub, bf_dir, table):
    """(a thread, not started, that backfills table; the dict its "result" or "error"
    lands in)."""
    done: dict = {}

    def backfill():
        try:
            done["result"] = run_backfill(BackfillConfig(pg.dsn(), [pub], bf_dir, [table],
                                                         binary=True, progress="off"))
        except BaseException as exc:     # reported by the test
            done["error"] = exc

    return threading.Thread(target=backfill, daemon=True), done


def _wal_lsn(cur) -> int:
    from pgoutput_fast.lsn import parse_lsn

    cur.execute("SELECT pg_current_wal_insert_lsn()::text")
    return parse_lsn(cur.fetchone()[0])


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_backfill_with_a_transaction_prepared_before_it(server, tmp_path, outcome):
    """A ``--two-phase`` capture; table ``b`` added to the publication; a transaction
    touching ``b`` (insert, update, delete) PREPAREd before the backfill starts and
    COMMIT PREPARED (or ROLLBACK PREPARED) while the backfill runs. PostgreSQL counts a
    prepared transaction as running: creating the backfill's slot waits for it to end,
    so its consistent point P is past the COMMIT/ROLLBACK PREPARED and the snapshot
    holds the committed rows (or never held the rolled-back ones); the stream's rows of
    the transaction carry the Commit Prepared's LSN (< P): skipped at apply, in the
    backfill already. Applied with the backfill, ``b`` equals PostgreSQL's ``SELECT``."""
    from pgoutput_fast.delta import apply_changeset

    pg, conn = server["pg"], server["conn"]
    s = f"bf_2pc_{outcome[0]}"
    pub, slot, gid = f"{s}_pub", f"{s}_slot", f"{s}_gid"
    with conn.cursor() as cur:
        cur.execute(_TABLES.format(s=s))
    out, bf_dir, target, capture_to_now = _two_phase_capture(pg, conn, tmp_path, slot, pub)
    capture_to_now(create_slot=True)
    with conn.cursor() as cur:
        cur.execute(f"ALTER PUBLICATION {pub} ADD TABLE {s}.b")
        cur.execute(f"UPDATE {s}.b SET n = -1 WHERE id = 3")     # a streamed change of b
    prep = pg.connect()
    try:
        prep.autocommit = True
        with prep.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {s}.b (id, n, t) VALUES (900001, 1, 'prepared')")
            cur.execute(f"UPDATE {s}.b SET n = 4242, t = 'prepared' WHERE id = 10")
            cur.execute(f"DELETE FROM {s}.b WHERE id = 11")
            cur.execute(f"PREPARE TRANSACTION '{gid}'")
            prepare_end = _wal_lsn(cur)
    finally:
        prep.close()
    capture_to_now()      # the capture has the Begin Prepare .. Prepare

    th, done = _backfill_thread(pg, pub, bf_dir, f"{s}.b")
    th.start()
    try:
        with conn.cursor() as cur:
            # the backfill's temporary slot exists, and stays in creation while the
            # transaction is prepared
            wait_until(lambda: th.is_alive() is False or (cur.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE temporary") or cur.fetchone()[0]),
                timeout=60, what="the backfill's slot")
            time.sleep(1.0)
            waited = th.is_alive()
            end_lsn = _wal_lsn(cur)
            cur.execute(f"{'COMMIT' if outcome == 'commit' else 'ROLLBACK'} PREPARED '{gid}'")
            finish_end = _wal_lsn(cur)
    finally:
        _end_prepared(conn, gid)       # (a failure above must not leave it holding slots)
        th.join(120)
    assert not th.is_alive(), "the backfill did not finish"
    assert "error" not in done, done.get("error")
    bf = read_backfill(bf_dir)
    assert prepare_end < bf.point
    # the slot's creation waited for the prepared transaction: P is past its end
    assert waited, "the backfill did not wait for the prepared transaction"
    assert end_lsn < bf.point and finish_end <= bf.point, (end_lsn, finish_end, bf)
    with conn.cursor() as cur:
        cur.execute(f"UPDATE {s}.b SET n = -2 WHERE id = 12")    # after P
        cur.execute(f"SELECT count(*) FROM {s}.b WHERE t = 'prepared'")
        assert cur.fetchone()[0] == (2 if outcome == "commit" else 0)
    capture_to_now()

    # the stream holds the prepared transaction's rows, committed before P
    dec, cs = _decode(out)
    prepared = [c for v, t in cs.table_versions if v.qualified_name == f"{s}.b"
                for c, txt in zip(t.column("_commit_lsn").to_pylist(),
                                  t.column("t").to_pylist() if "t" in t.column_names
                                  else [None] * t.num_rows) if txt == "prepared"]
    if outcome == "commit":
        assert prepared and all(prepare_end < c < bf.point for c in prepared), (prepared, bf)
    else:
        assert prepared == []
    apply_changeset(cs, target, binary=True, backfills=[bf_dir])
    bad = _bad(_compare(conn, s, target, dec.catalog, True))
    assert not bad, bad
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_backfill_point_between_prepare_and_commit_prepared(server, tmp_path, outcome):
    """The gap itself: a transaction PREPAREd before the backfill's point P and COMMIT
    PREPARED (or ROLLBACK PREPARED) after it. PostgreSQL lets this happen only to a
    transaction that began while the backfill's slot was being created, after its
    snapshot builder's "initial consistent point" (a transaction running before that
    holds the slot's creation until it ends, as above), so the test leads the builder
    through its states with two plain transactions and CHECKPOINTs (each logs the
    running transactions), following the server log. The snapshot does not hold the
    prepared transaction's rows; the stream's carry the Commit Prepared's LSN (>= P), so
    apply applies them after the backfill: ``b`` equals PostgreSQL's ``SELECT``."""
    from pgoutput_fast.delta import apply_changeset

    pg, conn = server["pg"], server["conn"]
    s = f"bf_2pg_{outcome[0]}"
    pub, slot, gid = f"{s}_pub", f"{s}_slot", f"{s}_gid"
    with conn.cursor() as cur:
        cur.execute(_TABLES.format(s=s))
        cur.execute(f"CREATE TABLE {s}.hold (i int)")       # not published
    out, bf_dir, target, capture_to_now = _two_phase_capture(pg, conn, tmp_path, slot, pub)
    capture_to_now(create_slot=True)
    with conn.cursor() as cur:
        cur.execute(f"ALTER PUBLICATION {pub} ADD TABLE {s}.b")
    log_start = os.path.getsize(pg.logfile)

    def logged(text):
        with open(pg.logfile, encoding="utf-8", errors="replace") as f:
            f.seek(log_start)
            return text in f.read()

    def session():
        c = pg.connect()
        c.autocommit = True
        return c, c.cursor()

    x1, c1 = session()
    x2, c2 = session()
    tx, ct = session()
    th, done = _backfill_thread(pg, pub, bf_dir, f"{s}.b")
    try:
        c1.execute("BEGIN")
        c1.execute(f"INSERT INTO {s}.hold VALUES (1)")       # x1: holds the builder
        th.start()
        wait_until(lambda: logged("found initial starting point") or not th.is_alive(),
              timeout=60, what="the builder's starting point")
        c2.execute("BEGIN")
        c2.execute(f"INSERT INTO {s}.hold VALUES (2)")       # x2: began after it
        c1.execute("COMMIT")
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
        wait_until(lambda: logged("found initial consistent point") or not th.is_alive(),
              timeout=60, what="the builder's initial consistent point")
        # the transaction: begins now (the builder decodes it whole), prepared before P
        ct.execute("BEGIN")
        ct.execute(f"INSERT INTO {s}.b (id, n, t) VALUES (900001, 1, 'prepared')")
        ct.execute(f"UPDATE {s}.b SET n = 4242, t = 'prepared' WHERE id = 10")
        ct.execute(f"DELETE FROM {s}.b WHERE id = 11")
        ct.execute(f"PREPARE TRANSACTION '{gid}'")
        prepare_end = _wal_lsn(ct)
        c2.execute("COMMIT")
        with conn.cursor() as cur:
            cur.execute("CHECKPOINT")
        th.join(120)
        assert not th.is_alive(), "the backfill did not finish"
        assert "error" not in done, done.get("error")
        bf = read_backfill(bf_dir)
        assert prepare_end < bf.point, (prepare_end, bf)      # prepared before P
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM pg_prepared_xacts WHERE gid = '{gid}'")
            assert cur.fetchone()[0] == 1
            finish_start = _wal_lsn(cur)
            cur.execute(f"{'COMMIT' if outcome == 'commit' else 'ROLLBACK'} PREPARED '{gid}'")
            assert bf.point <= finish_start                    # ... and finished after it
            cur.execute(f"UPDATE {s}.b SET n = -2 WHERE id = 12")
    finally:
        for c in (x1, x2, tx):
            c.close()
        _end_prepared(conn, gid)
        th.join(120)
    capture_to_now()

    # the snapshot has no row of the transaction, the stream has them at or after P
    _d, bcs = _decode(bf_dir)
    ((_v, bt),) = bcs.table_versions
    assert "prepared" not in bt.column("t").to_pylist()
    assert 11 in bt.column("id").to_pylist()
    dec, cs = _decode(out)
    prepared = [c for v, t in cs.table_versions if v.qualified_name == f"{s}.b"
                for c, txt in zip(t.column("_commit_lsn").to_pylist(), t.column("t").to_pylist())
                if txt == "prepared"]
    if outcome == "commit":
        assert len(prepared) == 2 and all(c >= bf.point for c in prepared), (prepared, bf)
    else:
        assert prepared == []
    apply_changeset(cs, target, binary=True, backfills=[bf_dir])
    bad = _bad(_compare(conn, s, target, dec.catalog, True))
    assert not bad, bad
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {s}.b WHERE t = 'prepared' OR id = 11")
        assert cur.fetchone()[0] == (2 if outcome == "commit" else 1)
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_backfill_through_spark(server, request, tmp_path):
    """The last hand-over test's capture and backfill through the Spark pipeline
    (``run_pipeline(..., backfills=[DIR])``, decoded on Spark): the backfilled table
    equals PostgreSQL's rows; run again, nothing changes."""
    from pgoutput_fast.spark.pipeline import run_pipeline

    if server["pg"].version_num < 160000:
        pytest.skip("run once, on the newer server")
    if "last" not in server:
        test_backfill_hand_over(server, tmp_path / "hand_over", True)
    spark = request.getfixturevalue("spark")      # (started only when it runs)
    last = server["last"]
    s, target = last["schema"], str(tmp_path / "tables")
    res = run_pipeline(spark, last["out"], target, tables=[f"{s}.b"],
                       backfills=[last["backfill"]])
    assert not res["backfills"][f"{s}.b"]["skipped"], res["backfills"]
    bad = _bad(_compare(server["conn"], s, target, last["catalog"], last["binary"], ["b"]))
    assert not bad, bad
    res = run_pipeline(spark, last["out"], target, tables=[f"{s}.b"],
                       backfills=[last["backfill"]])
    assert res["backfills"][f"{s}.b"]["skipped"] and res["changes"] == 0, res


def _cli(*args):
    return [sys.executable, "-m", "pgoutput_fast", *args]


def test_backfill_refusals(server, tmp_path):
    """One line each: a table the publication does not publish (exit 4, nothing
    readable left behind), a directory holding a capture (exit 5), a capture into a
    backfill directory (exit 5); a completed backfill directory is not taken again."""
    pg, conn = server["pg"], server["conn"]
    s = "bf_r"
    with conn.cursor() as cur:
        cur.execute(_TABLES.format(s=s))
    pub = f"{s}_pub"
    common = ["--dsn", pg.dsn(), "--publication", pub, "--progress", "off"]
    out = str(tmp_path / "bf")
    p = CliProcess(_cli("snapshot", *common, "--table", f"{s}.b", "--out", out))
    assert p.wait(60) == 4, "".join(p.lines)
    text = "".join(p.lines).strip()
    assert text.startswith("pgoutput-fast snapshot: ") and "not published" in text, text
    assert len(text.splitlines()) == 1, text
    assert capture.segment_paths(out) == []
    # the same directory again, once the table is published: it is reset and taken
    with conn.cursor() as cur:
        cur.execute(f"ALTER PUBLICATION {pub} ADD TABLE {s}.b")
    p = CliProcess(_cli("snapshot", *common, "--table", f"{s}.b", "--out", out, "--binary"))
    assert p.wait(60) == 0, "".join(p.lines)
    assert "hand-over point" in "".join(p.lines)
    bf = read_backfill(out)
    assert bf.binary and bf.summary["rows"] == 4000
    p = CliProcess(_cli("snapshot", *common, "--table", f"{s}.b", "--out", out))
    assert p.wait(60) == 5 and "completed backfill" in "".join(p.lines), "".join(p.lines)
    # a capture cannot run into a backfill directory, nor a backfill into a capture's
    p = CliProcess(_cli("capture", *common, "--slot", "bf_r_slot", "--create-slot",
                        "--out", out))
    assert p.wait(60) == 5 and "holds a backfill" in "".join(p.lines), "".join(p.lines)
    cap = str(tmp_path / "cap")
    capture.run_capture(CaptureConfig(pg.dsn(), "bf_r_slot", [pub], cap, create_slot=True,
                                      snapshot="only", progress="off"))
    p = CliProcess(_cli("snapshot", *common, "--table", f"{s}.b", "--out", cap))
    assert p.wait(60) == 5 and "holds a capture" in "".join(p.lines), "".join(p.lines)
    with pytest.raises(capture.DirectoryRefused, match="not a backfill"):
        read_backfill(cap)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot('bf_r_slot')")
