"""The capture's connection string: its sources, libpq's environment, malformed strings,
redaction and the classification of failed connections, against a real server that
asks a role for its password (scram-sha-256)."""

import os
import socket
import threading
import time

import psycopg2
import pytest

from pgoutput_fast.capture.dsn import (DSN_ENV, check_dsn, connect_error, describe, redact,
                                       resolve_dsn)
from pgoutput_fast.capture.errors import CaptureError, ConnectError, ServerRefused

PASSWORD = "S3cr3t-Pa55"
ROLE = "pwuser"
PG_ENV = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD",
          "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGSSLMODE", "PGCONNECT_TIMEOUT", DSN_ENV)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No PG* variable of the caller's environment, and no password file."""
    for name in PG_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-such-pgpass"))
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "20")
    return monkeypatch


@pytest.fixture(scope="module")
def pw_server(pg_server):
    """``pwuser`` with a password the server asks for over TCP (pg_hba scram-sha-256);
    ``hbareject`` rejected by pg_hba. The shared server's pg_hba.conf is restored
    afterwards."""
    path = os.path.join(pg_server.datadir, "pg_hba.conf")
    st = os.stat(path)
    with open(path, encoding="utf-8") as f:
        original = f.read()
    conn = pg_server.connect()
    cur = conn.cursor()
    cur.execute("SET password_encryption = 'scram-sha-256'")
    cur.execute(f"DROP ROLE IF EXISTS {ROLE}")
    cur.execute(f"CREATE ROLE {ROLE} LOGIN REPLICATION PASSWORD '{PASSWORD}'")
    cur.execute("DROP ROLE IF EXISTS hbareject")
    cur.execute("CREATE ROLE hbareject LOGIN")
    lines = (f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
             f"host replication {ROLE} 127.0.0.1/32 scram-sha-256\n"
             "host all hbareject 127.0.0.1/32 reject\n")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(lines + original)
        if pg_server._uid is not None:
            os.chown(path, pg_server._uid, pg_server._gid)
        os.chmod(path, st.st_mode & 0o7777)
        cur.execute("SELECT pg_reload_conf()")
        # the reload is asynchronous: wait until the server asks pwuser for a password
        deadline = time.monotonic() + 60
        while True:
            try:
                psycopg2.connect(f"host={pg_server.host} port={pg_server.port} user={ROLE} "
                                 "dbname=postgres password=wrong-on-purpose "
                                 "connect_timeout=10").close()
            except psycopg2.OperationalError as exc:
                if "password authentication failed" in str(exc):
                    break
            if time.monotonic() > deadline:
                pytest.fail("pg_hba.conf reload did not take effect within 60 s")
            time.sleep(0.1)
        yield pg_server
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(original)
        if pg_server._uid is not None:
            os.chown(path, pg_server._uid, pg_server._gid)
        os.chmod(path, st.st_mode & 0o7777)
        cur.execute("SELECT pg_reload_conf()")
        # wait for the trust rules again before other tests use the server
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                psycopg2.connect(f"host={pg_server.host} port={pg_server.port} user={ROLE} "
                                 "dbname=postgres connect_timeout=10").close()
                break
            except psycopg2.OperationalError:
                time.sleep(0.1)
        cur.execute(f"DROP ROLE IF EXISTS {ROLE}")
        cur.execute("DROP ROLE IF EXISTS hbareject")
        conn.close()


def _connect(dsn):
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user, current_database()")
            return cur.fetchone()
    finally:
        conn.close()


def _connect_error(dsn):
    with pytest.raises(psycopg2.OperationalError) as info:
        psycopg2.connect(dsn)
    return info.value, connect_error(info.value, dsn)


def _assert_one_clean_line(text, *secrets):
    assert "\n" not in text and text.strip() == text and text
    for s in secrets:
        assert s not in text, (s, text)


# -- sources ------------------------------------------------------------------------------

def test_resolve_order(tmp_path):
    f = tmp_path / "dsn"
    f.write_text("  host=from-file user=u\n\n")
    env = {DSN_ENV: "host=from-env"}
    assert resolve_dsn("host=from-option", None, env) == "host=from-option"
    assert resolve_dsn(None, str(f), env) == "host=from-file user=u"
    assert resolve_dsn(None, None, env) == "host=from-env"
    assert resolve_dsn(None, None, {}) == ""
    assert resolve_dsn(None, None, {DSN_ENV: ""}) == ""
    with pytest.raises(CaptureError, match="both --dsn and --dsn-file"):
        resolve_dsn("host=a", str(f), env)


def test_unreadable_dsn_file_names_the_path_not_the_content(tmp_path):
    missing = tmp_path / "missing.dsn"
    with pytest.raises(CaptureError) as info:
        resolve_dsn(None, str(missing), {})
    msg = str(info.value)
    assert str(missing) in msg and "No such file or directory" in msg
    _assert_one_clean_line(msg)
    assert info.value.exit_code == 2

    with pytest.raises(CaptureError) as info:
        resolve_dsn(None, str(tmp_path), {})     # a directory
    assert str(tmp_path) in str(info.value) and "directory" in str(info.value)

    binary = tmp_path / "binary.dsn"
    binary.write_bytes(b"password=" + PASSWORD.encode() + b"\xff\xfe")
    with pytest.raises(CaptureError) as info:
        resolve_dsn(None, str(binary), {})
    _assert_one_clean_line(str(info.value), PASSWORD, "Pa55")
    assert str(binary) in str(info.value)

    empty = tmp_path / "empty.dsn"
    empty.write_text(" \n")
    with pytest.raises(CaptureError, match="is empty"):
        resolve_dsn(None, str(empty), {})


def test_libpq_environment_fills_what_the_string_lacks(pw_server, clean_env):
    """PGPASSWORD with a DSN without password, and the empty DSN (all from PG*)."""
    host, port = pw_server.host, str(pw_server.port)
    partial = f"host={host} port={port} user={ROLE} dbname=postgres"
    # the server does ask for the password: without one the connection fails
    exc, err = _connect_error(partial)
    assert isinstance(err, ConnectError) and err.kind == "no_password"
    assert err.exit_code == 3
    _assert_one_clean_line(str(err))

    clean_env.setenv("PGPASSWORD", PASSWORD)
    assert check_dsn(partial)["user"] == ROLE
    assert _connect(partial) == (ROLE, "postgres")

    for name, value in (("PGHOST", host), ("PGPORT", port), ("PGUSER", ROLE),
                        ("PGDATABASE", "postgres")):
        clean_env.setenv(name, value)
    dsn = resolve_dsn(None, None)           # nothing given: libpq's environment
    assert dsn == ""
    assert check_dsn(dsn) == {}
    assert _connect(dsn) == (ROLE, "postgres")
    where = describe(dsn)
    assert f"host={host}" in where and f"port={port}" in where and f"user={ROLE}" in where
    assert PASSWORD not in where


def test_password_file_of_libpq(pw_server, clean_env, tmp_path):
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{pw_server.host}:{pw_server.port}:*:{ROLE}:{PASSWORD}\n")
    passfile.chmod(0o600)
    clean_env.setenv("PGPASSFILE", str(passfile))
    dsn = f"host={pw_server.host} port={pw_server.port} user={ROLE} dbname=postgres"
    assert _connect(dsn) == (ROLE, "postgres")


def test_dsn_file_connects(pw_server, clean_env, tmp_path):
    f = tmp_path / "capture.dsn"
    f.write_text(f"host={pw_server.host} port={pw_server.port} user={ROLE} dbname=postgres "
                 f"password={PASSWORD}\n")
    dsn = resolve_dsn(None, str(f), {DSN_ENV: "host=ignored"})
    assert _connect(dsn) == (ROLE, "postgres")
    assert PASSWORD not in describe(dsn)

    clean_env.setenv(DSN_ENV, dsn)          # the same from the environment variable
    assert _connect(resolve_dsn()) == (ROLE, "postgres")


# -- failures -----------------------------------------------------------------------------

def test_wrong_password_is_a_connect_error_without_the_password(pw_server, clean_env):
    wrong = "Wr0ng-S3cr3t-x"
    for dsn in (f"host={pw_server.host} port={pw_server.port} user={ROLE} dbname=postgres "
                f"password={wrong}",
                f"postgresql://{ROLE}:{wrong}@{pw_server.host}:{pw_server.port}/postgres"):
        exc, err = _connect_error(dsn)
        assert isinstance(err, ConnectError) and not isinstance(err, ServerRefused)
        assert err.exit_code == 3 and err.kind == "password"
        msg = str(err)
        _assert_one_clean_line(msg, wrong, "Wr0ng")
        assert "password authentication failed" in msg and ROLE in msg
        assert f"host={pw_server.host}" in msg and str(pw_server.port) in msg

    clean_env.setenv("PGPASSWORD", wrong)    # the environment's password is hidden too
    dsn = f"host={pw_server.host} port={pw_server.port} user={ROLE} dbname=postgres"
    exc, err = _connect_error(dsn)
    assert err.kind == "password"
    _assert_one_clean_line(str(err), wrong)


def test_permanent_failures_of_a_real_server(pw_server, clean_env):
    base = f"host={pw_server.host} port={pw_server.port}"
    exc, err = _connect_error(f"{base} user=no_such_role dbname=postgres")
    assert isinstance(err, ConnectError) and err.kind == "role" and err.exit_code == 3
    assert 'role "no_such_role" does not exist' in str(err)
    _assert_one_clean_line(str(err))

    exc, err = _connect_error(f"{base} user=postgres dbname=no_such_db")
    assert isinstance(err, ServerRefused) and err.kind == "database" and err.exit_code == 4
    assert 'database "no_such_db" does not exist' in str(err)
    _assert_one_clean_line(str(err))

    exc, err = _connect_error(f"{base} user=hbareject dbname=postgres")
    assert isinstance(err, ConnectError) and err.kind == "hba"
    assert "pg_hba.conf" in str(err)
    _assert_one_clean_line(str(err))

    port = _free_port()
    dsn = f"host=127.0.0.1 port={port} user=postgres password={PASSWORD}"
    exc, err = _connect_error(dsn)
    assert isinstance(err, ConnectError) and err.kind == "refused" and err.exit_code == 3
    assert f"port={port}" in str(err) and "connection refused" in str(err)
    _assert_one_clean_line(str(err), PASSWORD)

    exc, err = _connect_error(f"host=no-such-host.invalid password={PASSWORD}")
    assert isinstance(err, ConnectError) and err.kind == "host"
    assert "no-such-host.invalid" in str(err)
    _assert_one_clean_line(str(err), PASSWORD)


def test_server_closing_the_connection_is_transient(clean_env):
    """A listener that accepts and hangs up at once: libpq's "server closed the
    connection unexpectedly" is worth a retry."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    done = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not done.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            c.recv(1024)
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        exc, err = _connect_error(f"host=127.0.0.1 port={port} sslmode=disable "
                                  f"user=x password={PASSWORD}")
        assert "server closed the connection unexpectedly" in str(exc)
        assert err is None
    finally:
        done.set()
        t.join()
        srv.close()


@pytest.mark.parametrize("text", [
    "connection to server at \"10.0.0.1\", port 5432 failed: FATAL:  the database system is "
    "starting up\n",
    "connection to server at \"10.0.0.1\", port 5432 failed: FATAL:  the database system is "
    "shutting down\n",
    "connection to server at \"10.0.0.1\", port 5432 failed: FATAL:  the database system is "
    "in recovery mode\n",
    "connection to server at \"10.0.0.1\", port 5432 failed: FATAL:  the database system is "
    "not yet accepting connections\nDETAIL:  Consistent recovery state has not been yet "
    "reached.\n",
    "connection to server at \"10.0.0.1\", port 5432 failed: FATAL:  sorry, too many clients "
    "already\n",
    "connection to server at \"10.0.0.1\", port 5432 failed: timeout expired\n",
])
def test_transient_server_states(text):
    """libpq's and the server's exact texts (lc_messages C) for states a real test
    cannot hold still: each means retry."""
    assert connect_error(psycopg2.OperationalError(text), "host=10.0.0.1") is None


# -- malformed strings and redaction --------------------------------------------------------

@pytest.mark.parametrize("dsn, fragments, secret", [
    (f"host=127.0.0.1 password={PASSWORD} oops", [PASSWORD, "Pa55", "oops", "127.0.0.1"],
     PASSWORD),
    ("host=127.0.0.1 password=S3cr3t Pa55", ["S3cr3t", "Pa55", "127.0.0.1"], "S3cr3t"),
    (f"host=127.0.0.1 password='{PASSWORD}", [PASSWORD, "Pa55", "127.0.0.1"], PASSWORD),
    (f"host=127.0.0.1 {PASSWORD}=1", [PASSWORD, "Pa55", "127.0.0.1"], None),
    (f"postgresql://{ROLE}:S3cr%zzPa55@127.0.0.1/postgres", ["S3cr", "Pa55", "%zz", ROLE],
     "S3cr%zzPa55"),
])
def test_malformed_dsn_shows_no_fragment(dsn, fragments, secret):
    with pytest.raises(psycopg2.ProgrammingError):      # libpq's own message ...
        psycopg2.extensions.parse_dsn(dsn)
    with pytest.raises(CaptureError) as info:
        check_dsn(dsn)
    msg = str(info.value)
    assert "malformed" in msg and "key=value" in msg and "postgresql://" in msg
    _assert_one_clean_line(msg, *fragments)
    # no chained libpq message either (a --debug traceback would print it)
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert info.value.exit_code == 2
    where = describe(dsn)
    _assert_one_clean_line(where, *fragments)
    text = redact(f"failed with {dsn}", dsn)
    _assert_one_clean_line(text, *fragments)
    if secret is not None:       # the password of a malformed string, found by its key
        text = redact(f"libpq said: ... {secret} ...", dsn)
        assert secret not in text and "***" in text


def test_redact_uri_and_key_value_forms():
    pw = "p@ss/w0rd:x"
    enc = "p%40ss%2Fw0rd%3Ax"
    uri = f"postgresql://{ROLE}:{enc}@db.example:6543/app?sslmode=disable"
    assert check_dsn(uri)["password"] == pw
    text = redact(f"tried {uri}; server said {pw!r}; encoded {enc}; again "
                  f"postgres://{ROLE}:{enc}@other/x", uri)
    assert pw not in text and enc not in text and "w0rd" not in text
    assert "host=db.example port=6543 dbname=app user=pwuser" in text   # describe(uri)
    assert "***" in text

    kv = "host=db.example port=6543 dbname=app user=pwuser password='it\\'s s3cret'"
    assert check_dsn(kv)["password"] == "it's s3cret"
    text = redact(f"{kv} / raw it\\'s s3cret / plain it's s3cret / key password=zz9", kv)
    assert "s3cret" not in text and "zz9" not in text
    assert text.startswith("host=db.example port=6543 dbname=app user=pwuser ")

    # an unencoded '@' inside a URI's password: hidden up to the last '@'
    bad = "postgresql://pwuser:pa@ss@db.example/app"
    text = redact("connecting to db.example as pwuser with pa@ss", bad)
    assert "pa@ss" not in text and "db.example" in text

    # PGPASSWORD's value, with no password in the string
    text = redact("the password is Env-S3cret!", "host=a", environ={"PGPASSWORD": "Env-S3cret!"})
    assert "Env-S3cret" not in text

    # a password nested in dbname (libpq expands it)
    nested = f"dbname='postgresql://u:{PASSWORD}@h/db'"
    assert PASSWORD not in describe(nested)
    assert PASSWORD not in redact(f"x {PASSWORD} y", nested)
    assert redact("nothing secret here", "host=a password=zz") == "nothing secret here"


def test_describe_never_shows_the_password():
    assert describe("host=h port=5 dbname=d user=u password=secret1") == \
        "host=h port=5 dbname=d user=u"
    assert describe("postgresql://u:secret1@h:5/d", environ={}) == "host=h port=5 dbname=d user=u"
    env = {"PGHOST": "envhost", "PGUSER": "envuser", "PGPASSWORD": "secret1"}
    assert describe("", environ=env) == "host=envhost user=envuser"
    assert describe("user=me", environ=env) == "host=envhost user=me"
    assert "secret1" not in describe("", environ={})
    assert "malformed" in describe("password=secret1 x")
