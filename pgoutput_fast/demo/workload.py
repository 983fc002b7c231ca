"""Deterministic workloads against a real PostgreSQL: the demo's, the tests' and fixtures'.

Every function takes a psycopg2 connection in autocommit mode (``PostgresServer.connect()``)
and works inside one schema (default ``pgo``). Typical use::

    create_schema(conn)                        # tables + publication "pgo_pub"
    slot = create_slot(conn, "s1")             # create slots *before* the workload
    run_basic(conn)                            # then any of the run_* functions
    peek_changes(...)                          # see pgoutput_fast.sqlcapture

Call each ``run_*`` function at most once per ``create_schema`` (they use fixed keys and
one of them alters a table). After the workloads, ``SELECT *`` of every table in
``TABLES`` gives the state that replaying the decoded changes must reproduce.
The data is fully determined by ``seed``; LSNs, XIDs, OIDs and commit times are not.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import ipaddress
import json
import random
import re
import uuid

__all__ = [
    "TABLES",
    "ALLTYPES_COLUMNS",
    "ORIGIN_NAME",
    "create_schema",
    "create_slot",
    "drop_slot",
    "publication_name",
    "run_basic",
    "run_origin",
    "origin_session",
    "run_streaming",
    "run_two_phase",
    "run_bulk",
    "run_preload",
    "run_preload_changes",
    "PRELOAD_BASE",
    "pg_array_literal",
]

ORIGIN_NAME = "pgo_origin"

#: (column, SQL type) of the ``alltypes`` table, in attribute order. ``{s}`` = schema.
ALLTYPES_COLUMNS = [
    ("id", "int4 PRIMARY KEY"),
    ("c_bool", "bool"),
    ("c_int2", "int2"),
    ("c_int4", "int4"),
    ("c_int8", "int8"),
    ("c_oid", "oid"),
    ("c_float4", "float4"),
    ("c_float8", "float8"),
    ("c_num", "numeric(12,3)"),
    ("c_numu", "numeric"),
    ("c_text", "text"),
    ("c_varchar", "varchar(20)"),
    ("c_bpchar", "char(5)"),
    ("c_name", "name"),
    ("c_char", '"char"'),
    ("c_bytea", "bytea"),
    ("c_json", "json"),
    ("c_jsonb", "jsonb"),
    ("c_date", "date"),
    ("c_time", "time"),
    ("c_timetz", "timetz"),
    ("c_ts", "timestamp"),
    ("c_tstz", "timestamptz"),
    ("c_interval", "interval"),
    ("c_uuid", "uuid"),
    ("c_inet", "inet"),
    ("c_cidr", "cidr"),
    ("c_macaddr", "macaddr"),
    ("c_mood", "{s}.mood"),
    ("c_posint", "{s}.posint"),
    ("c_int4arr", "int4[]"),
    ("c_textarr", "text[]"),
    ("c_moodarr", "{s}.mood[]"),
]

#: Tables created by ``create_schema`` (unqualified names). ``parted`` is the partitioned
#: parent; its leaves ``parted_eu``, ``parted_us`` and ``parted_other`` carry the changes.
TABLES = [
    "alltypes",
    "ri_default",
    "ri_full",
    "ri_index",
    "ri_nothing",
    "toasty",
    "toastkey",
    "nocols",
    "trunc_parent",
    "trunc_child",
    "parted",
    "evolve",
    "stream_t",
    "twophase_t",
]

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


def _q(ident: str) -> str:
    if _IDENT.match(ident):
        return ident
    return '"' + ident.replace('"', '""') + '"'


def publication_name(schema: str = "pgo") -> str:
    """The publication ``create_schema`` makes: ``<schema>_pub`` (``pgo_pub``)."""
    return f"{schema}_pub"


def _server_version(conn) -> int:
    return int(conn.server_version)


@contextlib.contextmanager
def _tx(conn):
    """BEGIN ... COMMIT on an autocommit connection (ROLLBACK if the block raises)."""
    cur = conn.cursor()
    cur.execute("BEGIN")
    try:
        yield cur
    except BaseException:
        try:
            cur.execute("ROLLBACK")
        except Exception:
            pass
        raise
    else:
        cur.execute("COMMIT")
    finally:
        cur.close()


def _exec(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        if cur.description is not None:
            return cur.fetchall()
    return None


# --------------------------------------------------------------------------------------
# value helpers
# --------------------------------------------------------------------------------------

_ARRAY_SPECIAL = re.compile(r'[{}",\\\s]')


def pg_array_literal(items) -> str:
    """A one-dimensional PostgreSQL array literal (``None`` = NULL)."""
    out = []
    for it in items:
        if it is None:
            out.append("NULL")
            continue
        s = str(it)
        if s == "" or s.upper() == "NULL" or _ARRAY_SPECIAL.search(s):
            s = '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(s)
    return "{" + ",".join(out) + "}"


def _cols(schema):
    return [(c, t.format(s=_q(schema))) for c, t in ALLTYPES_COLUMNS]


_UNICODE_POOL = "abcXYZ019 _-.,;:'\"\\{}()[]éüßñçøåæœ€☃✓日本語한국어🎉😀"


def _rand_text(rng, n):
    return "".join(rng.choice(_UNICODE_POOL) for _ in range(n))


def _rand_row(rng, rid):
    """A random, valid alltypes row (all values as text literals or None)."""

    def maybe(v, p=0.08):
        return None if rng.random() < p else v

    d0 = _dt.date(1900, 1, 1)
    date = d0 + _dt.timedelta(days=rng.randrange(0, 200 * 366))
    us = rng.randrange(0, 86_400_000_000)
    t = (_dt.datetime(2000, 1, 1) + _dt.timedelta(microseconds=us)).time()
    off_min = rng.choice([-12 * 60, -9 * 60 - 30, -5 * 60, 0, 60, 5 * 60 + 30, 5 * 60 + 45, 14 * 60])
    sign = "+" if off_min >= 0 else "-"
    off = f"{sign}{abs(off_min) // 60:02d}:{abs(off_min) % 60:02d}"
    ts = _dt.datetime(1970, 1, 1) + _dt.timedelta(microseconds=rng.randrange(-2 * 10**15, 4 * 10**15))
    if rng.random() < 0.5:
        net = ipaddress.ip_network(f"{ipaddress.IPv4Address(rng.getrandbits(32))}/{rng.randint(0, 32)}", strict=False)
        inet = f"{ipaddress.IPv4Address(rng.getrandbits(32))}/{rng.randint(0, 32)}"
    else:
        net = ipaddress.ip_network(f"{ipaddress.IPv6Address(rng.getrandbits(128))}/{rng.randint(0, 128)}", strict=False)
        inet = f"{ipaddress.IPv6Address(rng.getrandbits(128))}/{rng.randint(0, 128)}"
    moods = ["sad", "ok", "happy"]
    return [
        str(rid),
        maybe(rng.choice(["true", "false"])),
        maybe(str(rng.randint(-32768, 32767))),
        maybe(str(rng.randint(-(2**31), 2**31 - 1))),
        maybe(str(rng.randint(-(2**63), 2**63 - 1))),
        maybe(str(rng.randint(0, 2**32 - 1))),
        maybe(repr(rng.uniform(-1e6, 1e6))),
        maybe(repr(rng.uniform(-1e12, 1e12) * 10 ** rng.randint(-200, 200))),
        maybe(f"{rng.randint(-(10**12) + 1, 10**12 - 1) / 1000:.3f}"),
        maybe(f"{rng.randint(-(10**30), 10**30)}.{rng.randint(0, 10**rng.randint(1, 25))}"),
        maybe(_rand_text(rng, rng.randint(0, 40))),
        maybe(_rand_text(rng, rng.randint(0, 20))),
        maybe(_rand_text(rng, rng.randint(0, 5))),
        maybe("".join(rng.choice("abcdefghijklmnopqrstuvwxyz_0123456789") for _ in range(rng.randint(1, 63)))),
        maybe(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&")),
        maybe("\\x" + rng.randbytes(rng.randint(0, 24)).hex()),
        maybe(json.dumps({"k": rng.randint(0, 99), "s": _rand_text(rng, 5), "l": [1, None, True]})),
        maybe(json.dumps({"z": rng.random(), "a": {"n": rng.randint(-5, 5)}, "u": _rand_text(rng, 4)}, ensure_ascii=False)),
        maybe(date.isoformat()),
        maybe(t.isoformat()),
        maybe(t.isoformat() + off),
        maybe(ts.isoformat(sep=" ")),
        maybe(ts.isoformat(sep=" ") + off),
        maybe(f"{rng.randint(-30, 30)} years {rng.randint(-11, 11)} mons {rng.randint(-40, 40)} days "
              f"{rng.randint(0, 99)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"),
        maybe(str(uuid.UUID(int=rng.getrandbits(128)))),
        maybe(inet),
        maybe(str(net)),
        maybe(":".join(f"{b:02x}" for b in rng.randbytes(6))),
        maybe(rng.choice(moods)),
        maybe(str(rng.randint(1, 2**31 - 1))),
        maybe(pg_array_literal([None if rng.random() < 0.15 else rng.randint(-1000, 1000) for _ in range(rng.randint(0, 6))])),
        maybe(pg_array_literal([None if rng.random() < 0.15 else _rand_text(rng, rng.randint(0, 6)) for _ in range(rng.randint(0, 5))])),
        maybe(pg_array_literal([rng.choice(moods) for _ in range(rng.randint(0, 3))])),
    ]


def _special_rows():
    """Hand-written alltypes rows with edge-case values (text literals, None = NULL)."""
    uni = "héllo wörld ✓ 日本語 🎉"
    return [
        # 1: ordinary values
        ["1", "true", "1", "2", "3", "4", "1.5", "2.25", "1234.500",
         "3.14159265358979323846264338327950288", "hello", "varchar", "ab", "a_name", "x",
         "\\x00ff41", '{"b": 1,  "a": [1, 2], "a": null}',
         '{"b": 1, "a": {"c": [true, null]}, "aa": "x"}', "2024-02-29", "23:59:59.5",
         "12:34:56+05:30", "2024-01-01 10:00:00.123456", "2024-06-01 12:00:00+05:30",
         "1 year 2 mons 3 days 04:05:06.789", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
         "192.168.0.1/24", "10.0.0.0/8", "08:00:2b:01:02:03", "happy", "42", "{1,NULL,3}",
         pg_array_literal(["a b", "c", "", None, "NULL", 'q"uote', "back\\slash", "{x}", "é"]),
         "{sad,happy}"],
        # 2: NaN / +Infinity / minimums / empties
        ["2", "false", "-32768", "-2147483648", "-9223372036854775808", "4294967295", "NaN",
         "Infinity", "NaN", "NaN", "", "", "", "", "", "\\x", "[]", "{}", "infinity",
         "24:00:00", "00:00:00-15:59", "infinity", "infinity", "-1 days +02:03:00",
         "00000000-0000-0000-0000-000000000000", "::ffff:1.2.3.4", "2001:db8::/32",
         "ff:ff:ff:ff:ff:ff", "sad", "1", "{}", "{}", "{}"],
        # 3: -Infinity / maximums / unicode / -infinity
        ["3", "true", "32767", "2147483647", "9223372036854775807", "0", "-Infinity",
         "-Infinity", "-999999999.999", "Infinity", uni, "ünïcödé ✓", "é", "ñame_☃", "\\303",
         "\\x" + bytes(range(256)).hex(), '"snow ☃ \\u00e9"', '{"ü": "☃", "n": 1.50, "e": 1e3}',
         "-infinity", "00:00:00", "23:59:59.999999-05", "-infinity", "-infinity", "00:00:00",
         "ffffffff-ffff-ffff-ffff-ffffffffffff", "10.1.2.3", "10.1.2.3/32", "00:00:00:00:00:00",
         "ok", "2147483647", "[0:1]={1,2}", "{{a,b},{c,d}}", "{ok,NULL}"],
        # 4: negative zero, BC dates, numeric -Infinity, multi-dim arrays
        ["4", "false", "0", "0", "0", "1", "-0", "-0", "-0.001", "-Infinity",
         "line1\nline2\ttab \\ back 'quote' \"dq\"", " lead", "a    ", "Z", "A",
         "\\x0000", '  {"sp": "kept"}  ', '[1, "2", [3.0]]', "0044-03-15 BC",
         "00:00:00.000001", "00:00:00+14", "0100-01-01 12:00:00 BC",
         "1849-12-31 23:59:59.999999+00", "-2 years -3 mons +4 days -05:06:07.000008",
         "123e4567-e89b-12d3-a456-426614174000", "2001:db8::1/64", "::/0",
         "01:23:45:67:89:ab", "happy", "7", "{{1,2},{3,4}}", '{"",""}', "{happy,happy}"],
        # 5: all NULL but the key
        ["5"] + [None] * (len(ALLTYPES_COLUMNS) - 1),
        # 6: float extremes, huge/small numerics, far dates
        ["6", "true", "-1", "-1", "-1", "2147483648", "1e-45", "2.2250738585072014e-308",
         "999999999.999", "123456789012345678901234567890.123456789012345678901234567890",
         "x" * 100, "12345678901234567890", "abcde", "n" * 63, "~", "\\xdeadbeef",
         "{}", "null", "294276-12-31", "12:00:00", "12:00:00-00:30", "294276-12-31 23:59:59.999999",
         "4713-01-01 00:00:00+00 BC", "178000000 years", "5c8b1f1e-0000-4000-8000-000000000001",
         "0.0.0.0/0", "0.0.0.0/0", "12:34:56:78:9a:bc", "sad", "1000000",
         pg_array_literal(list(range(-5, 6))), pg_array_literal(["x" * 50, "\\", '"', " "]), None],
        # 7: more float text forms and tiny numerics
        ["7", None, "12", "34", "56", None, "3.4028235e38", "1.7976931348623157e308", "0.000",
         "0.000000000000000000000000000001", "NULL", "null", "     ", "", "0", "\\x7f80",
         '{"nested": {"deep": [[], {}]}}', '{"a": null, "b": false}', "2000-01-01",
         "12:00:00.000001", "00:00:00+00", "2000-01-01 00:00:00", "2000-01-01 00:00:00+00",
         "-00:00:00.000001", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12", "::", "::/128",
         "aa:bb:cc:dd:ee:ff", "ok", "2", "{NULL}", "{NULL,null}", "{sad}"],
    ]


# --------------------------------------------------------------------------------------
# schema
# --------------------------------------------------------------------------------------


def create_schema(conn, schema: str = "pgo", *, publication: str | None = None):
    """(Re)create ``schema`` with all test tables and the publication ``<schema>_pub``
    (or ``publication``, when given).

    Returns the publication name. On PostgreSQL 15+ the publication is
    ``FOR TABLES IN SCHEMA`` (so several schemas in one database stay independent); on
    older servers it is ``FOR ALL TABLES``. A second schema ``<schema>_priv`` holds the
    table ``unpublished``, which is left out of the publication on 15+.
    """
    s = _q(schema)
    pub = publication or publication_name(schema)
    cols = ",\n  ".join(f"{c} {t}" for c, t in _cols(schema))
    ver = _server_version(conn)
    stmts = [
        f"DROP PUBLICATION IF EXISTS {_q(pub)}",
        f"DROP SCHEMA IF EXISTS {s} CASCADE",
        f"CREATE SCHEMA {s}",
        f"CREATE TYPE {s}.mood AS ENUM ('sad', 'ok', 'happy')",
        f"CREATE DOMAIN {s}.posint AS int4 CHECK (VALUE > 0)",
        f"CREATE TABLE {s}.alltypes (\n  {cols}\n)",
        # replica identities
        f"CREATE TABLE {s}.ri_default (id int4 PRIMARY KEY, val text, n int4)",
        f"CREATE TABLE {s}.ri_full (id int4, val text, n int4)",
        f"ALTER TABLE {s}.ri_full REPLICA IDENTITY FULL",
        f"ALTER TABLE {s}.ri_full ALTER COLUMN val SET STORAGE EXTERNAL",
        f"CREATE TABLE {s}.ri_index (id int4, code text NOT NULL, val text)",
        f"CREATE UNIQUE INDEX ri_index_code ON {s}.ri_index (code)",
        f"ALTER TABLE {s}.ri_index REPLICA IDENTITY USING INDEX ri_index_code",
        f"CREATE TABLE {s}.ri_nothing (id int4, val text)",
        f"ALTER TABLE {s}.ri_nothing REPLICA IDENTITY NOTHING",
        # TOAST: values > 8 kB, EXTERNAL storage = out of line and uncompressed
        f"CREATE TABLE {s}.toasty (id int4 PRIMARY KEY, big text, small int4)",
        f"ALTER TABLE {s}.toasty ALTER COLUMN big SET STORAGE EXTERNAL",
        # a primary-key value stored out of line (K tuple on a non-key UPDATE)
        f"CREATE TABLE {s}.toastkey (k text PRIMARY KEY, v int4)",
        f"ALTER TABLE {s}.toastkey ALTER COLUMN k SET STORAGE EXTERNAL",
        f"CREATE TABLE {s}.nocols ()",
        f"CREATE TABLE {s}.trunc_parent (id serial PRIMARY KEY, v text)",
        f"CREATE TABLE {s}.trunc_child (id serial PRIMARY KEY, "
        f"parent_id int4 REFERENCES {s}.trunc_parent (id), v text)",
        f"CREATE TABLE {s}.parted (id int4, region text, val text, PRIMARY KEY (id, region)) "
        f"PARTITION BY LIST (region)",
        f"CREATE TABLE {s}.parted_eu PARTITION OF {s}.parted FOR VALUES IN ('eu')",
        f"CREATE TABLE {s}.parted_us PARTITION OF {s}.parted FOR VALUES IN ('us')",
        f"CREATE TABLE {s}.parted_other PARTITION OF {s}.parted DEFAULT",
        f"CREATE TABLE {s}.evolve (id int4 PRIMARY KEY, a text)",
        f"CREATE TABLE {s}.stream_t (id int4 PRIMARY KEY, grp int4, payload text)",
        f"CREATE TABLE {s}.twophase_t (id int4 PRIMARY KEY, payload text)",
        # not in the publication: changes to it are decoded but filtered out by pgoutput
        f"DROP SCHEMA IF EXISTS {_q(schema + '_priv')} CASCADE",
        f"CREATE SCHEMA {_q(schema + '_priv')}",
        f"CREATE TABLE {_q(schema + '_priv')}.unpublished (id int4, payload text)",
    ]
    if ver >= 150000:
        stmts.append(f"CREATE PUBLICATION {_q(pub)} FOR TABLES IN SCHEMA {s}")
    else:
        stmts.append(f"CREATE PUBLICATION {_q(pub)} FOR ALL TABLES")
    for st in stmts:
        _exec(conn, st)
    return pub


def create_slot(conn, name: str, *, two_phase: bool = False, temporary: bool = False) -> str:
    """``pg_create_logical_replication_slot(name, 'pgoutput', temporary, two_phase)``."""
    if two_phase:
        _exec(conn, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', %s, true)", (name, temporary))
    else:
        _exec(conn, "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', %s)", (name, temporary))
    return name


def drop_slot(conn, name: str) -> None:
    _exec(
        conn,
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (name,),
    )


# --------------------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------------------


def _insert_alltypes(cur, schema, rows):
    names = ", ".join(c for c, _ in ALLTYPES_COLUMNS)
    ph = ", ".join(["%s"] * len(ALLTYPES_COLUMNS))
    sql = f"INSERT INTO {_q(schema)}.alltypes ({names}) VALUES ({ph})"
    for r in rows:
        assert len(r) == len(ALLTYPES_COLUMNS), r[0]
        cur.execute(sql, r)


def _big(rng, n):
    # incompressible-looking printable text, deterministic
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(rng.choice(alphabet) for _ in range(n))


def run_basic(conn, schema: str = "pgo", seed: int = 0, *, origin: bool = True):
    """Inserts, updates, deletes, TOAST, TRUNCATE, ROLLBACK, DDL, messages, an origin.

    With ``origin=True`` (the default) the last transaction runs under the replication
    origin ``pgo_origin`` (see ``run_origin``), so an Origin message appears.
    """
    rng = random.Random(seed)
    s = _q(schema)

    # 1. hand-written edge-case rows, one transaction
    with _tx(conn) as cur:
        _insert_alltypes(cur, schema, _special_rows())

    # 2. random rows; a multi-row INSERT is one 'I' per row
    rows = [_rand_row(rng, 100 + i) for i in range(20)]
    with _tx(conn) as cur:
        _insert_alltypes(cur, schema, rows[:10])
    with _tx(conn) as cur:
        _insert_alltypes(cur, schema, rows[10:])

    # 3. one row in every other table
    big1, big2, big3 = _big(rng, 9000), _big(rng, 12000), _big(rng, 8500)
    key_big = "K" + _big(rng, 2400)
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.ri_default (id, val, n) VALUES (1, 'one', 1), (2, 'two', 2), (3, NULL, 3)")
        cur.execute(f"INSERT INTO {s}.ri_full (id, val, n) VALUES (1, 'f-one', 1), (2, 'f-two', NULL), (3, %s, 3)", (big3,))
        cur.execute(f"INSERT INTO {s}.ri_index (id, code, val) VALUES (1, 'A', 'a'), (2, 'B', 'b'), (3, 'C', NULL)")
        cur.execute(f"INSERT INTO {s}.ri_nothing (id, val) VALUES (1, 'only inserts'), (2, NULL)")
        cur.execute(f"INSERT INTO {s}.nocols DEFAULT VALUES")
        cur.execute(f"INSERT INTO {s}.nocols DEFAULT VALUES")
        cur.execute(f"INSERT INTO {s}.toasty (id, big, small) VALUES (1, %s, 1), (2, %s, 2), (3, 'short', 3)", (big1, big2))
        cur.execute(f"INSERT INTO {s}.toastkey (k, v) VALUES (%s, 1), ('short-key', 2)", (key_big,))
        cur.execute(f"INSERT INTO {s}.parted (id, region, val) VALUES (1, 'eu', 'e'), (2, 'us', 'u'), (3, 'xx', 'o')")
        cur.execute(f"INSERT INTO {s}.evolve (id, a) VALUES (1, 'a1')")

    # 4. updates: non-key, key-changing, to NULL, per replica identity, partitions
    with _tx(conn) as cur:
        cur.execute(f"UPDATE {s}.alltypes SET c_text = 'updated', c_int4 = c_int4 + 1 WHERE id = 1")
        cur.execute(f"UPDATE {s}.alltypes SET id = 1002 WHERE id = 2")
        cur.execute(f"UPDATE {s}.alltypes SET c_float8 = NULL, c_jsonb = NULL, c_textarr = NULL WHERE id = 3")
        cur.execute(f"UPDATE {s}.alltypes SET c_bool = NOT c_bool WHERE id BETWEEN 100 AND 104")
        cur.execute(f"UPDATE {s}.ri_default SET val = 'uno' WHERE id = 1")
        cur.execute(f"UPDATE {s}.ri_default SET id = 20, val = 'two->20' WHERE id = 2")
        cur.execute(f"UPDATE {s}.ri_full SET val = 'f-uno' WHERE id = 1")
        cur.execute(f"UPDATE {s}.ri_full SET n = 33 WHERE id = 3")
        cur.execute(f"UPDATE {s}.ri_index SET val = 'aa' WHERE code = 'A'")
        cur.execute(f"UPDATE {s}.ri_index SET code = 'BB' WHERE code = 'B'")
        cur.execute(f"UPDATE {s}.parted SET val = 'e2' WHERE id = 1")
        cur.execute(f"UPDATE {s}.parted SET region = 'us' WHERE id = 3")  # moves partition: D + I

    # 5. TOAST: unchanged external value ('u'), new big value, TOASTed key
    with _tx(conn) as cur:
        cur.execute(f"UPDATE {s}.toasty SET small = small + 10 WHERE id = 1")
        cur.execute(f"UPDATE {s}.toasty SET big = %s WHERE id = 2", (_big(rng, 10000),))
        cur.execute(f"UPDATE {s}.toasty SET big = repeat('z', 9000) WHERE id = 3")
        cur.execute(f"UPDATE {s}.toastkey SET v = v + 1")

    # 6. deletes
    with _tx(conn) as cur:
        cur.execute(f"DELETE FROM {s}.alltypes WHERE id IN (5, 105)")
        cur.execute(f"DELETE FROM {s}.ri_default WHERE id = 3")
        cur.execute(f"DELETE FROM {s}.ri_full WHERE id = 2")
        cur.execute(f"DELETE FROM {s}.ri_full WHERE id = 3")  # old row with an out-of-line value
        cur.execute(f"DELETE FROM {s}.ri_index WHERE code = 'C'")
        cur.execute(f"DELETE FROM {s}.toasty WHERE id = 1")
        cur.execute(f"DELETE FROM {s}.parted WHERE id = 2")

    # 7. TRUNCATE (plain, and RESTART IDENTITY CASCADE)
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.trunc_parent (v) VALUES ('p1'), ('p2')")
        cur.execute(f"INSERT INTO {s}.trunc_child (parent_id, v) VALUES (1, 'c1'), (2, 'c2')")
    _exec(conn, f"TRUNCATE {s}.trunc_parent RESTART IDENTITY CASCADE")
    with _tx(conn) as cur:
        cur.execute(f"TRUNCATE {s}.ri_nothing")
        cur.execute(f"INSERT INTO {s}.ri_nothing (id, val) VALUES (3, 'after truncate')")
        cur.execute(f"INSERT INTO {s}.trunc_parent (v) VALUES ('p-new')")

    # 8. an aborted transaction (nothing is sent for it)
    cur = conn.cursor()
    cur.execute("BEGIN")
    cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (999, 'rolled back')")
    cur.execute(f"UPDATE {s}.alltypes SET c_text = 'rolled back' WHERE id = 1")
    cur.execute("ROLLBACK")

    # 9. a savepoint rolled back in an ordinary (non-streamed) transaction
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (30, 'before savepoint')")
        cur.execute("SAVEPOINT sp1")
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (31, 'rolled back to savepoint')")
        cur.execute("ROLLBACK TO SAVEPOINT sp1")
        cur.execute("SAVEPOINT sp2")
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (32, 'released savepoint')")
        cur.execute("RELEASE SAVEPOINT sp2")

    # 10. schema changes, inside one transaction and between transactions
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.evolve (id, a) VALUES (2, 'a2')")
        cur.execute(f"ALTER TABLE {s}.evolve ADD COLUMN b int4 DEFAULT 7")
        cur.execute(f"INSERT INTO {s}.evolve (id, a, b) VALUES (3, 'a3', 3)")
        cur.execute(f"ALTER TABLE {s}.evolve DROP COLUMN a")
        cur.execute(f"INSERT INTO {s}.evolve (id, b) VALUES (4, 4)")
    _exec(conn, f"ALTER TABLE {s}.evolve ADD COLUMN c text")
    _exec(conn, f"ALTER TABLE {s}.evolve ALTER COLUMN b TYPE int8")
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.evolve (id, b, c) VALUES (5, 5000000000, 'c5')")
        cur.execute(f"UPDATE {s}.evolve SET c = 'c1' WHERE id = 1")
    _exec(conn, f"ALTER TABLE {s}.alltypes ADD COLUMN c_extra text DEFAULT 'dflt'")
    with _tx(conn) as cur:
        _insert_alltypes(cur, schema, [_rand_row(rng, 200)])
        cur.execute(f"UPDATE {s}.alltypes SET c_extra = 'set' WHERE id = 200")

    # 11. logical decoding messages
    _exec(conn, "SELECT pg_logical_emit_message(false, 'pgo_ntx', '\\x000102ff'::bytea)")
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (40, 'with message')")
        cur.execute("SELECT pg_logical_emit_message(true, 'pgo_tx', 'transactional ☃')")
        cur.execute("SELECT pg_logical_emit_message(false, 'pgo_ntx_in_tx', 'sent before Begin')")
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (41, 'after message')")
    _exec(conn, "SELECT pg_logical_emit_message(true, 'pgo_tx_only', 'a message-only transaction')")
    cur = conn.cursor()
    cur.execute("BEGIN")
    cur.execute("SELECT pg_logical_emit_message(true, 'pgo_aborted', 'never decoded')")
    cur.execute("ROLLBACK")

    # 12. COPY arrives as one 'I' per row
    import io

    with conn.cursor() as cur:
        cur.copy_expert(
            f"COPY {s}.ri_default (id, val, n) FROM STDIN",
            io.StringIO("50\tcopied\t5\n51\t\\N\t\\N\n"),
        )

    # 13. a transaction replayed under a replication origin -> 'O'
    if origin:
        run_origin(conn, schema)


@contextlib.contextmanager
def origin_session(conn, origin_name: str = ORIGIN_NAME):
    """Run the block with ``conn``'s session set up for replication origin ``origin_name``
    (created if missing). Inside a transaction, call
    ``pg_replication_origin_xact_setup(lsn, ts)`` to set the origin LSN and timestamp."""
    if not _exec(conn, "SELECT 1 FROM pg_replication_origin WHERE roname = %s", (origin_name,)):
        _exec(conn, "SELECT pg_replication_origin_create(%s)", (origin_name,))
    _exec(conn, "SELECT pg_replication_origin_session_setup(%s)", (origin_name,))
    try:
        yield conn
    finally:
        _exec(conn, "SELECT pg_replication_origin_session_reset()")


def run_origin(conn, schema: str = "pgo", origin_name: str = ORIGIN_NAME):
    """One transaction under a replication origin (``pg_replication_origin_xact_setup``).

    The origin LSN is 0/ABCDEF and the origin timestamp 2020-01-01 00:00:00+00, which
    also becomes the Begin/Commit timestamp (docs/protocol.md §3.2).
    """
    s = _q(schema)
    with origin_session(conn, origin_name):
        with _tx(conn) as cur:
            cur.execute("SELECT pg_replication_origin_xact_setup('0/ABCDEF', '2020-01-01 00:00:00+00')")
            cur.execute(f"INSERT INTO {s}.ri_default (id, val, n) VALUES (60, 'from origin', 60)")
            cur.execute(f"UPDATE {s}.ri_default SET n = 61 WHERE id = 60")


def _other_conn(conn):
    """A second connection with ``conn``'s parameters (``conn.dsn`` hides the password)."""
    import psycopg2

    params = dict(conn.info.dsn_parameters)
    if conn.info.password:
        params["password"] = conn.info.password
    c = psycopg2.connect(**params)
    c.autocommit = True
    return c


def run_streaming(conn, schema: str = "pgo", rows: int = 5000, *, origin: bool = True):
    """Large transactions that exceed ``logical_decoding_work_mem`` (64kB) and stream.

    1. One committed transaction: ``rows/2`` inserts, a savepoint with ``rows/4`` inserts
       that is rolled back (ROLLBACK TO SAVEPOINT, so a Stream Abort for the subxact), a
       released savepoint with ``rows/4`` inserts plus updates and deletes, a transactional
       message and a change to a second table. A small transaction from another session
       commits while it is open (it appears between two stream blocks).
    2. A second large transaction (``rows/2`` inserts) that is rolled back at the end;
       with ``origin=True`` it runs under the replication origin, so its first stream
       block carries an Origin message.
    3. A large transaction touching only an unpublished table: empty stream blocks and
       a Stream Commit without changes.
    4. A small ordinary transaction.
    """
    s = _q(schema)
    half, quarter = rows // 2, rows // 4
    payload = "md5(g::text) || repeat('p', g %% 7)"  # used with parameters: %% is %
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.stream_t SELECT g, g %% 10, {payload} FROM generate_series(1, %s) g", (half,))
        cur.execute("SAVEPOINT s1")
        cur.execute(
            f"INSERT INTO {s}.stream_t SELECT g, -1, {payload} FROM generate_series(%s, %s) g",
            (half + 1, half + quarter),
        )
        cur.execute("ROLLBACK TO SAVEPOINT s1")
        # interleave: another session commits while this one is open
        other = _other_conn(conn)
        try:
            _exec(other, f"INSERT INTO {s}.ri_default (id, val) VALUES (70, 'committed during stream')")
        finally:
            other.close()
        cur.execute("SAVEPOINT s2")
        cur.execute(
            f"INSERT INTO {s}.stream_t SELECT g, 2, {payload} FROM generate_series(%s, %s) g",
            (half + quarter + 1, half + 2 * quarter),
        )
        cur.execute(f"UPDATE {s}.stream_t SET grp = grp + 100 WHERE id % 50 = 0")
        cur.execute(f"DELETE FROM {s}.stream_t WHERE id % 97 = 0")
        cur.execute("RELEASE SAVEPOINT s2")
        cur.execute("SELECT pg_logical_emit_message(true, 'pgo_stream', 'inside a streamed transaction')")
        cur.execute(f"INSERT INTO {s}.ri_default (id, val) VALUES (71, 'last change of the streamed xact')")

    with origin_session(conn) if origin else contextlib.nullcontext():
        cur = conn.cursor()
        cur.execute("BEGIN")
        try:
            if origin:
                cur.execute("SELECT pg_replication_origin_xact_setup('0/BCDEF0', '2021-01-01 00:00:00+00')")
            cur.execute(
                f"INSERT INTO {s}.stream_t SELECT g, 9, {payload} FROM generate_series(%s, %s) g",
                (rows + 1, rows + half),
            )
            cur.execute(f"UPDATE {s}.stream_t SET payload = 'doomed' WHERE id <= 10")
        finally:
            cur.execute("ROLLBACK")
            cur.close()

    priv = _q(schema + "_priv")
    _exec(conn, f"INSERT INTO {priv}.unpublished SELECT g, md5(g::text) FROM generate_series(1, %s) g", (quarter,))

    _exec(conn, f"INSERT INTO {s}.ri_default (id, val) VALUES (72, 'after the streams')")


def run_two_phase(conn, schema: str = "pgo", rows: int = 2000, *, origin: bool = True):
    """Prepared transactions (needs ``max_prepared_transactions`` > 0).

    ``gid1``: PREPARE then COMMIT PREPARED (under the replication origin when ``origin``,
    so Begin Prepare is followed by Origin). ``gid2``: PREPARE then ROLLBACK PREPARED.
    ``gid_empty``: only touches an unpublished table (Begin Prepare/Prepare with no
    changes). ``gid3``: ``rows`` inserts (streams: Stream Prepare), then COMMIT PREPARED.
    Finally an ordinary transaction.
    """
    s = _q(schema)
    priv = _q(schema + "_priv")
    cur = conn.cursor()
    try:
        with origin_session(conn) if origin else contextlib.nullcontext():
            cur.execute("BEGIN")
            if origin:
                cur.execute("SELECT pg_replication_origin_xact_setup('0/CDEF01', '2022-01-01 00:00:00+00')")
            cur.execute(f"INSERT INTO {s}.twophase_t VALUES (1, 'p1'), (2, 'p2'), (3, 'p3')")
            cur.execute(f"UPDATE {s}.twophase_t SET payload = 'p2 updated' WHERE id = 2")
            cur.execute("SELECT pg_logical_emit_message(true, 'pgo_2pc', 'in gid1')")
            cur.execute("PREPARE TRANSACTION 'gid1'")
        cur.execute("COMMIT PREPARED 'gid1'")

        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {s}.twophase_t VALUES (10, 'will be rolled back')")
        cur.execute(f"DELETE FROM {s}.twophase_t WHERE id = 1")
        cur.execute("PREPARE TRANSACTION 'gid2'")
        cur.execute("ROLLBACK PREPARED 'gid2'")

        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {priv}.unpublished VALUES (-1, 'prepared, not published')")
        cur.execute("PREPARE TRANSACTION 'gid_empty'")
        cur.execute("COMMIT PREPARED 'gid_empty'")

        cur.execute("BEGIN")
        cur.execute(
            f"INSERT INTO {s}.twophase_t SELECT g, md5(g::text) FROM generate_series(100, %s) g",
            (99 + rows,),
        )
        cur.execute("SAVEPOINT s1")
        cur.execute(f"UPDATE {s}.twophase_t SET payload = 'sp' WHERE id % 100 = 0")
        cur.execute("RELEASE SAVEPOINT s1")
        cur.execute(f"DELETE FROM {s}.twophase_t WHERE id = 3")
        cur.execute("PREPARE TRANSACTION 'gid3'")
        cur.execute("COMMIT PREPARED 'gid3'")
    except BaseException:
        try:
            cur.execute("ROLLBACK")
        except Exception:
            pass
        for gid in ("gid1", "gid2", "gid_empty", "gid3"):
            try:
                if _exec(conn, "SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)):
                    _exec(conn, f"ROLLBACK PREPARED '{gid}'")
            except Exception:
                pass
        raise
    finally:
        cur.close()
    _exec(conn, f"INSERT INTO {s}.twophase_t VALUES (4, 'plain commit')")


def run_bulk(conn, schema: str = "pgo", rows: int = 10000, seed: int = 1, *,
             per_transaction: int = 100, distinct: int = 5000):
    """An OLTP-like load on ``alltypes``: many small transactions of random rows.

    Inserts ``rows`` random rows (ids from 1000000 up, every type, NULLs, Unicode) in
    transactions of ``per_transaction`` rows (multi-row INSERTs), then, in transactions of
    at most ``per_transaction`` rows each: updates a fifth of them (several types), changes
    the primary key of a fiftieth (old key sent), and deletes a twentieth. Small
    transactions stay below ``logical_decoding_work_mem`` (256kB or more), so they are
    sent as ordinary Begin ... Commit. Call it after ``run_basic`` or on its own.

    Making random rows in Python is the slow part: beyond ``distinct`` rows, the values
    (all but the id) repeat those of earlier rows.
    """
    from psycopg2.extras import execute_values

    rng = random.Random(seed)
    s = _q(schema)
    base, step = 1_000_000, max(1, int(per_transaction))
    names = ", ".join(c for c, _ in ALLTYPES_COLUMNS)
    pool = []

    def row(i):
        if i < distinct:
            pool.append(_rand_row(rng, base + i))
            return pool[-1]
        return [str(base + i)] + pool[i % distinct][1:]

    for start in range(0, rows, step):
        batch = [row(i) for i in range(start, min(rows, start + step))]
        with _tx(conn) as cur:
            execute_values(cur, f"INSERT INTO {s}.alltypes ({names}) VALUES %s", batch, page_size=step)
    # id ranges of ~per_transaction rows matching each predicate
    updates = (
        (5, f"UPDATE {s}.alltypes SET c_text = md5(id::text), c_int8 = c_int8 / 3, "
            f"c_num = round(c_num / 2, 3), c_float4 = -c_float4, c_bool = NOT c_bool, "
            f"c_tstz = c_tstz + interval '1 day 1 hour', c_interval = c_interval * 2, "
            f"c_int4arr = c_int4arr || 7 WHERE id %% 5 = 0"),
        (50, f"UPDATE {s}.alltypes SET id = id + 5000000 WHERE id %% 50 = 1 AND id < 5000000"),
        (20, f"DELETE FROM {s}.alltypes WHERE id %% 20 = 3"),
    )
    for every, sql in updates:
        span = step * every
        for lo in range(base, base + rows, span):
            _exec(conn, f"{sql} AND id >= %s AND id < %s", (lo, lo + span))


#: first id of the rows ``run_preload`` puts in ``alltypes``, ``stream_t`` and
#: ``twophase_t`` (the other workloads use smaller ids, and ``run_bulk`` 1,000,000 up
#: to 1,000,000 + rows, and 6,000,000 up for its key changes)
PRELOAD_BASE = 20_000_000


def run_preload(conn, schema: str = "pgo", rows: int = 2000, seed: int = 3, *,
                distinct: int = 1000) -> dict:
    """Rows the tables hold *before* a slot exists: what an initial snapshot copies.

    Every table of ``create_schema`` gets rows whose keys no other ``run_*`` function
    uses: ``alltypes`` the hand-written edge-value rows (``_special_rows``, ids from
    ``PRELOAD_BASE``) and ``rows`` random rows (every type, NULLs, Unicode; beyond
    ``distinct`` the values repeat); TOASTed values (``toasty``, ``ri_full``, an
    out-of-line key in ``toastkey``); each replica identity; each partition of
    ``parted``; ``nocols``; ``trunc_parent``/``trunc_child`` (``run_basic``'s TRUNCATE
    ... CASCADE empties them); ``evolve`` (``run_basic`` then adds and drops columns);
    ``stream_t`` and ``twophase_t`` (``run_streaming`` and ``run_two_phase`` update and
    delete some of them). A few large transactions. ``run_preload_changes`` then
    updates and deletes some of these rows. Returns ``{table: rows inserted}``.
    """
    from psycopg2.extras import execute_values

    rng = random.Random(seed)
    s = _q(schema)
    b = PRELOAD_BASE
    names = ", ".join(c for c, _ in ALLTYPES_COLUMNS)
    counts: dict = {}
    special = [[str(b + int(r[0]))] + r[1:] for r in _special_rows()]
    pool = [_rand_row(rng, 0) for _ in range(min(distinct, rows))]
    step = 1000
    with _tx(conn) as cur:
        _insert_alltypes(cur, schema, special)
        for start in range(0, rows, step):
            batch = [[str(b + 100 + i)] + pool[i % len(pool)][1:]
                     for i in range(start, min(rows, start + step))]
            execute_values(cur, f"INSERT INTO {s}.alltypes ({names}) VALUES %s", batch,
                           page_size=step)
    counts["alltypes"] = len(special) + rows
    big = [_big(rng, n) for n in (9500, 11000, 8200)]
    key_big = "P" + _big(rng, 2600)
    other = rows // 4
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.ri_default (id, val, n) SELECT g, 'pre ' || g, "
                    f"CASE WHEN g % 5 = 0 THEN NULL ELSE g END FROM generate_series(1001, 1100) g")
        cur.execute(f"INSERT INTO {s}.ri_full (id, val, n) VALUES (1001, 'pre-full', 1), "
                    f"(1002, NULL, NULL), (1003, %s, 3), (1004, %s, 4)", (big[0], big[1]))
        cur.execute(f"INSERT INTO {s}.ri_index (id, code, val) SELECT g, 'P' || g, "
                    f"CASE WHEN g % 3 = 0 THEN NULL ELSE 'v' || g END FROM generate_series(1, 20) g")
        cur.execute(f"INSERT INTO {s}.ri_nothing (id, val) VALUES (1001, 'pre'), (1002, NULL)")
        cur.execute(f"INSERT INTO {s}.toasty (id, big, small) VALUES (1001, %s, 1), "
                    f"(1002, %s, 2), (1003, %s, NULL), (1004, 'short', 4)", tuple(big))
        cur.execute(f"INSERT INTO {s}.toastkey (k, v) VALUES (%s, 1), ('pre-short-key', NULL)",
                    (key_big,))
        cur.execute(f"INSERT INTO {s}.nocols DEFAULT VALUES")
        cur.execute(f"INSERT INTO {s}.trunc_parent (v) VALUES ('pre1'), ('pre2'), (NULL)")
        cur.execute(f"INSERT INTO {s}.trunc_child (parent_id, v) VALUES (1, 'pre-c1'), (3, NULL)")
        cur.execute(f"INSERT INTO {s}.parted (id, region, val) SELECT g, "
                    f"(ARRAY['eu', 'us', 'zz'])[g % 3 + 1], 'pre' || g FROM generate_series(1001, 1030) g")
        cur.execute(f"INSERT INTO {s}.evolve (id, a) VALUES (1001, 'pre-a'), (1002, NULL)")
    with _tx(conn) as cur:
        cur.execute(f"INSERT INTO {s}.stream_t SELECT g, g %% 10, md5(g::text) "
                    f"FROM generate_series(%s, %s) g", (b + 1, b + other))
        cur.execute(f"INSERT INTO {s}.twophase_t SELECT g, md5(g::text) "
                    f"FROM generate_series(%s, %s) g", (b + 1, b + other))
    counts.update(ri_default=100, ri_full=4, ri_index=20, ri_nothing=2, toasty=4, toastkey=2,
                  nocols=1, trunc_parent=3, trunc_child=2, parted=30, evolve=2,
                  stream_t=other, twophase_t=other)
    return counts


def run_preload_changes(conn, schema: str = "pgo") -> None:
    """Changes to rows ``run_preload`` inserted (run after the snapshot): updates (of
    every type, a key, a TOASTed row left unchanged and one given a new value, a row
    moved to another partition), deletes under each replica identity, in a few
    transactions."""
    s = _q(schema)
    b = PRELOAD_BASE
    with _tx(conn) as cur:
        cur.execute(f"UPDATE {s}.alltypes SET c_text = 'pre updated', c_int8 = c_int8 / 2, "
                    f"c_jsonb = NULL, c_int4arr = c_int4arr || 9 WHERE id BETWEEN %s AND %s",
                    (b + 1, b + 3))
        cur.execute(f"UPDATE {s}.alltypes SET c_bool = NOT c_bool, c_num = -c_num "
                    f"WHERE id >= %s AND id %% 7 = 0", (b + 100,))
        cur.execute(f"UPDATE {s}.alltypes SET id = id + 1000000 WHERE id >= %s AND id %% 11 = 0",
                    (b + 100,))
        cur.execute(f"DELETE FROM {s}.alltypes WHERE id = %s OR (id >= %s AND id %% 13 = 0)",
                    (b + 5, b + 100))
    with _tx(conn) as cur:
        cur.execute(f"UPDATE {s}.ri_default SET val = val || ' upd' WHERE id % 10 = 1 AND id > 1000")
        cur.execute(f"UPDATE {s}.ri_default SET id = id + 1000 WHERE id = 1002")
        cur.execute(f"DELETE FROM {s}.ri_default WHERE id BETWEEN 1090 AND 1100")
        cur.execute(f"UPDATE {s}.ri_full SET n = 44 WHERE id = 1004")      # old row out of line
        cur.execute(f"DELETE FROM {s}.ri_full WHERE id IN (1002, 1003)")
        cur.execute(f"UPDATE {s}.ri_index SET code = 'Q' || id WHERE id % 4 = 0")
        cur.execute(f"DELETE FROM {s}.ri_index WHERE id = 5")
        cur.execute(f"UPDATE {s}.toasty SET small = 11 WHERE id = 1001")   # unchanged TOAST: 'u'
        cur.execute(f"UPDATE {s}.toasty SET big = repeat('y', 9100) WHERE id = 1002")
        cur.execute(f"DELETE FROM {s}.toasty WHERE id = 1004")
        cur.execute(f"UPDATE {s}.toastkey SET v = 2 WHERE k LIKE 'P%'")   # out-of-line key
        cur.execute(f"UPDATE {s}.parted SET region = 'eu' WHERE id = 1001")  # moves partition
        cur.execute(f"DELETE FROM {s}.parted WHERE id = 1002")
        cur.execute(f"UPDATE {s}.evolve SET a = 'pre-a2' WHERE id = 1001")
