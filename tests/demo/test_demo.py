"""``pgoutput-fast demo`` end to end: preload -> capture (snapshot + stream) -> decode ->
image == PostgreSQL.

The demo is the README's main job. These tests run it for real (a private server, or the
session's server through ``--dsn``), check that every table matches, that the check can
fail (a decoded row dropped on purpose), that ``--dsn`` leaves nothing behind and never
drops a schema it did not create, and the fallbacks without a server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import pgoutput_fast
from pgoutput_fast import capture, cli, demo
from pgoutput_fast.framing import read_capture
from pgoutput_fast.demo import workload
from pgoutput_fast.local_server import find_bindir

from tests.support.captures import FIXTURES, load_fixture

#: the published tables the demo compares (parted is published through its leaves)
DEMO_TABLES = sorted(
    f"{demo.SCHEMA}.{t}" for t in
    [t for t in workload.TABLES if t != "parted"] + ["parted_eu", "parted_us", "parted_other"]
)


def _need_server():
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install -y postgresql, or set PGOUTPUT_FAST_PG_BIN)")


def _table_lines(stdout):
    """{table: its summary line} from the demo's side-by-side table."""
    return {line.split()[0]: line for line in stdout.splitlines()
            if line.startswith(demo.SCHEMA + ".")}


def _demo_objects(pg):
    """What the demo may create on a server it is pointed at with --dsn."""
    conn = pg.connect()  # autocommit (not `with conn`: psycopg2 would open a transaction)
    with conn.cursor() as cur:
        cur.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'pgoutput_fast_demo%%'")
        slots = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT pubname FROM pg_publication WHERE pubname LIKE 'pgoutput_fast_demo%%'")
        pubs = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgoutput_fast_demo%%'")
        schemas = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT gid FROM pg_prepared_xacts")
        prepared = [r[0] for r in cur.fetchall()]
    conn.close()
    return {"slots": slots, "publications": pubs, "schemas": schemas, "prepared": prepared}


@pytest.mark.postgres
def test_demo_end_to_end():
    """`python -m pgoutput_fast demo --rows small`: a private server, every table matches."""
    _need_server()
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    r = subprocess.run([sys.executable, "-m", "pgoutput_fast", "demo", "--rows", "small"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = _table_lines(r.stdout)
    assert sorted(lines) == DEMO_TABLES, r.stdout
    for name, line in lines.items():
        assert line.rstrip().endswith("✓"), line
    assert f"all {len(DEMO_TABLES)} tables match" in r.stdout
    # the stream really holds what the demo claims to exercise
    counts = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("B "))
    kinds = {tok for tok in counts.split() if not tok.replace(",", "").isdigit()}
    assert set("BCORYIUDTM") <= kinds, counts
    assert {"S", "E", "c", "A"} <= kinds, counts        # streamed, with a subtransaction abort
    if "proto_version 3" in r.stdout or "proto_version 4" in r.stdout:
        assert {"b", "P", "K", "r", "p"} <= kinds, counts  # two-phase
    assert "binary" in r.stdout and "MB/s" in r.stdout and "rows/s" in r.stdout
    # the tables held rows before the slot: the snapshot copied them (op 'r'), and the
    # demo checked that they are exactly the decoded 'r' rows
    snap = next(line for line in r.stdout.splitlines() if line.startswith("snapshot "))
    copied = int(snap.split()[1].replace(",", ""))
    assert copied > 500 and "consistent point" in snap, snap
    ops = next(line for line in r.stdout.splitlines() if line.startswith("ops "))
    assert ops.split()[1:3] == ["r", f"{copied:,}"], ops
    assert "while the copy ran" in ops, ops
    # the Spark pipeline ran: segments -> decode -> apply -> snapshots compared above
    assert "Delta table (Spark)" in r.stdout and "decode (change events) in mapInArrow" in r.stdout


@pytest.mark.postgres
def test_demo_reports_a_dropped_row(pg_server, monkeypatch, capsys):
    """The check can fail: one decoded change dropped -> that table is flagged, exit 1."""
    victim = f"{demo.SCHEMA}.twophase_t"
    original_feed = pgoutput_fast.Decoder.feed
    dropped = []

    def feed(self, messages, lsn=None):
        cs = original_feed(self, messages, lsn)
        if not dropped:
            versions = []
            for version, table in cs.table_versions:
                if version.qualified_name == victim and table.num_rows and not dropped:
                    dropped.append(table.slice(table.num_rows - 1).to_pylist()[0])
                    table = table.slice(0, table.num_rows - 1)
                versions.append((version, table))
            cs.table_versions = versions
        return cs

    monkeypatch.setattr(pgoutput_fast.Decoder, "feed", feed)
    status = cli.main(["demo", "--dsn", pg_server.dsn(), "--rows", "small", "--no-spark"])
    out = capsys.readouterr().out
    assert dropped, "the workload produced no change to drop"
    assert status == 1, out
    lines = _table_lines(out)
    assert sorted(lines) == DEMO_TABLES, out
    assert not lines[victim].rstrip().endswith("✓"), out
    assert lines[victim].rstrip().endswith("✗"), out
    assert all(line.rstrip().endswith("✓") for name, line in lines.items() if name != victim), out
    assert f"1 of {len(DEMO_TABLES)} tables differ" in out
    assert f"✗ {victim}:" in out  # followed by what differs
    # the row dropped is the first of the table: one the snapshot copied
    assert dropped[0]["_op"] == "r", dropped
    assert f"snapshot: decoded op 'r' rows differ from what the snapshot copied: {victim}" in out
    assert _demo_objects(pg_server) == {"slots": [], "publications": [], "schemas": [], "prepared": []}


@pytest.mark.postgres
def test_demo_dsn_text_keep(pg_server, capsys):
    """--dsn --text --keep: matches, keeps the capture directory (inspectable), leaves
    nothing behind on the server (its slot included)."""
    status = cli.main(["demo", "--dsn", pg_server.dsn(), "--rows", "small", "--text", "--keep",
                       "--no-spark"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "text" in out and f"all {len(DEMO_TABLES)} tables match" in out
    path = next(line.split("capture kept:", 1)[1].strip() for line in out.splitlines()
                if line.startswith("capture kept:"))
    try:
        state = capture.load_state(path)
        assert state.snapshot["state"] == "done" and state.options["binary"] is False
        lsns, msgs = read_capture(path)
        # the snapshot's Inserts carry LSN 0, the stream's changes their WAL record's
        assert len(msgs) > 1000 and any(lsns) and not all(lsns)
        assert cli.main(["inspect", path, "--limit", "3"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 3
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    assert _demo_objects(pg_server) == {"slots": [], "publications": [], "schemas": [], "prepared": []}


@pytest.mark.postgres
def test_demo_keeps_foreign_schema(pg_server, capsys):
    """A schema named like the demo's but not made by it is never dropped."""
    conn = pg_server.connect()  # autocommit: the schema must be visible to the demo
    cur = conn.cursor()
    cur.execute(f"CREATE SCHEMA {demo.SCHEMA}")
    cur.execute(f"CREATE TABLE {demo.SCHEMA}.precious (id int)")
    try:
        status = cli.main(["demo", "--dsn", pg_server.dsn(), "--rows", "small"])
        err = capsys.readouterr().err
        assert status == 2
        assert "already exists and was not created by this demo" in err
        cur.execute(f"SELECT count(*) FROM {demo.SCHEMA}.precious")  # still there
    finally:
        cur.execute(f"DROP SCHEMA IF EXISTS {demo.SCHEMA} CASCADE")
        conn.close()


@pytest.mark.postgres
def test_demo_needs_wal_level_logical(capsys):
    _need_server()
    from pgoutput_fast.local_server import PostgresServer

    with PostgresServer(extra_conf={"wal_level": "replica"}) as pg:
        status = cli.main(["demo", "--dsn", pg.dsn()])
    err = capsys.readouterr().err
    assert status == 2
    assert "wal_level = replica" in err and "wal_level = logical" in err


@pytest.mark.postgres
def test_demo_capture_refused(capsys):
    """The server refuses capture's replication connection: one line that says what and
    what to check, exit 2, and nothing left behind (schemas, publication, slot)."""
    _need_server()
    from pgoutput_fast.local_server import PostgresServer

    with PostgresServer(extra_conf={"max_wal_senders": "0"}) as pg:
        status = cli.main(["demo", "--dsn", pg.dsn(), "--rows", "small", "--no-spark"])
        left = _demo_objects(pg)
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("pgoutput-fast demo: the capture failed before the slot's creation: ")
    assert "max_wal_senders" in lines[0] and "pg_hba.conf" in lines[0], err
    assert left == {"slots": [], "publications": [], "schemas": [], "prepared": []}


def test_demo_fixtures_fallback(capsys):
    """--fixtures (what the demo does without a server): text and binary captures agree."""
    # the tests' own copy: this also runs against an installed wheel, which has no tests/
    status = cli.main(["demo", "--fixtures", "--fixtures-dir", FIXTURES])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "tables agree between text and binary mode" in out
    assert "pgo.alltypes" in out and "pgo.stream_t" in out and "pgo.twophase_t" in out


def test_demo_without_server_or_fixtures(monkeypatch, tmp_path, capsys):
    """An installed wheel has no tests/fixtures: without a server the demo says so clearly."""
    import pgoutput_fast.local_server as postgres

    monkeypatch.delenv("PGOUTPUT_FAST_PG_BIN", raising=False)
    monkeypatch.setattr(postgres, "find_bindir", lambda required=True: None)
    monkeypatch.setattr(demo, "FIXTURES_DIR", str(tmp_path / "no-fixtures"))
    status = cli.main(["demo"])
    err = capsys.readouterr().err
    assert status == 2
    assert "no PostgreSQL server binaries found" in err
    assert "not part of an installed wheel" in err and "--dsn" in err


@pytest.mark.parametrize("name", ["v2_stream_binary", "v3_twophase_text", "v1_messages"])
def test_batches_end_at_transaction_boundaries(name):
    """plan_batches: the decoder holds nothing between feeds, and the output equals one feed."""
    lsns, msgs = load_fixture(name)
    batches = demo.plan_batches(msgs, 8)
    assert batches[0][0] == 0 and batches[-1][1] == len(msgs)
    assert all(a < b and b == c for (a, b), (c, _) in zip(batches, batches[1:]))
    assert len(batches) > 1
    dec = pgoutput_fast.Decoder(events=False)
    rows = 0
    for a, b in batches:
        rows += dec.feed(msgs[a:b], lsn=lsns[a:b]).num_changes
        assert dec.pending() == {"streams": {}, "prepared": {}, "open_transaction": None,
                                 "open_changes": 0, "open_bytes": 0, "open_spooled": False,
                                 "spilled_bytes": 0}, (name, a, b)
    assert rows == pgoutput_fast.decode_changes(msgs, lsns, events=False).num_changes


def test_rows_checksum_is_a_multiset_hash():
    a = [{"id": 1, "v": "x"}, {"id": 2, "v": None}, {"id": 2, "v": None}]
    assert demo.rows_checksum(a) == demo.rows_checksum(list(reversed(a)))
    assert demo.rows_checksum(a) != demo.rows_checksum(a[:2])  # duplicates count
    assert demo.rows_checksum([{"v": 0.0}]) != demo.rows_checksum([{"v": -0.0}])
    assert demo.rows_checksum([{"v": float("nan")}]) == demo.rows_checksum([{"v": float("nan")}])
    assert demo.rows_checksum([]) == 0
