"""Old images (``_before``) of every column layout, against a real PostgreSQL.

A REPLICA IDENTITY FULL table with a column of each layout the typed tables build (bits:
bool; fixed-width values: int4, numeric(10,2) as decimal128, uuid, float8, timestamptz,
interval; var-len bytes: text, bytea; a list: text[]) and NULLs in each, and a table
with the default replica identity whose key updates and deletes send key images ('K':
only the key column). One transaction interleaves inserts, updates and deletes, so
that the rows with an old image are spread among rows without one; the stream is
decoded in one feed and in feeds of a few messages (each feed's export spreads its own
old images over its rows), in text and in binary mode.

Ground truth comes from PostgreSQL: each row as it was before the transaction
(SELECT). The old image of an update or a delete must be that row, every other row's
``_before`` null.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from pgoutput_fast import sqlcapture
from pgoutput_fast.decoder import Decoder
from tests.support.pg_publish import fresh_schema

SCHEMA = "pgo_bimg"
SLOT = "pgo_bimg_slot"
PUB = "pgo_bimg_pub"
FULL = f"{SCHEMA}.full_t"
KEYED = f"{SCHEMA}.keyed_t"
COLUMNS = ("b", "i", "t", "ta", "n", "u", "by", "f", "ts", "iv")
N = 40


def _row_sql(k):
    """Row k's values as SQL; every column NULL in some rows."""
    def v(col, expr):
        return "NULL" if (k + COLUMNS.index(col)) % 7 == 0 else expr
    return ", ".join([
        str(k),
        v("b", "true" if k % 2 else "false"),
        v("i", str(k * 1000 - 7)),
        v("t", f"'text {k} é' || repeat('x', {k % 5 * 9})"),
        v("ta", f"ARRAY['a{k}', NULL, 'é{k % 3}']" if k % 4 else "'{}'::text[]"),
        v("n", f"{k}.{k % 100:02d}"),
        v("u", f"'{uuid.UUID(int=k * 7919)}'"),
        v("by", f"'\\x{bytes([k % 256, 0, 255]).hex()}'::bytea"),
        v("f", f"{k} / 3.0"),
        v("ts", f"'2026-01-{1 + k % 28:02d} 12:34:56.{k:06d}+00'"),
        v("iv", f"interval '{k} days {k % 24} hours {k} seconds'"),
    ])


@pytest.fixture(scope="module")
def captured(request):
    with fresh_schema(request, SCHEMA, SLOT, PUB) as (cur, cap):
        cur.execute(f"CREATE SCHEMA {SCHEMA}")
        cur.execute(f"CREATE TABLE {FULL} (id int PRIMARY KEY, b bool, i int4, t text, ta text[], "
                    "n numeric(10,2), u uuid, by bytea, f float8, ts timestamptz, iv interval)")
        cur.execute(f"ALTER TABLE {FULL} REPLICA IDENTITY FULL")   # (old rows whole)
        cur.execute(f"CREATE TABLE {KEYED} (id int PRIMARY KEY, v text)")
        for k in range(1, N + 1):
            cur.execute(f"INSERT INTO {FULL} VALUES ({_row_sql(k)})")
            cur.execute(f"INSERT INTO {KEYED} VALUES ({k}, 'v{k}')")
        truth = {}
        cur.execute(f"SELECT id, {', '.join(COLUMNS)} FROM {FULL}")
        for r in cur.fetchall():
            truth[r[0]] = dict(zip(("id",) + COLUMNS, r))
        # (not pg_publish.publish: the keyed table keeps its default replica identity)
        cur.execute(f"CREATE PUBLICATION {PUB} FOR TABLE {FULL}, {KEYED}")
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        cur.execute("BEGIN")
        for k in range(1, N + 1):
            cur.execute(f"INSERT INTO {FULL} VALUES ({_row_sql(N + k)})")
            if k % 3 == 0:
                cur.execute(f"UPDATE {FULL} SET i = coalesce(i, 0) + 1 WHERE id = {k}")
            elif k % 3 == 1:
                cur.execute(f"DELETE FROM {FULL} WHERE id = {k}")
            if k % 4 == 0:
                cur.execute(f"UPDATE {KEYED} SET id = id + 1000 WHERE id = {k}")   # a key image
            elif k % 4 == 1:
                cur.execute(f"DELETE FROM {KEYED} WHERE id = {k}")
            else:
                cur.execute(f"UPDATE {KEYED} SET v = v || '!' WHERE id = {k}")     # no old image
        cur.execute("COMMIT")
        sqlcapture.session_settings(cap)
        captures = {binary: sqlcapture.peek_changes(cap, SLOT, proto_version=1, publication_names=PUB,
                                                     binary=binary)
                    for binary in (False, True)}
        yield captures, truth


def _same(col, decoded, pg):
    """A typed value against psycopg2's value of the same column."""
    if pg is None or decoded is None:
        return pg is None and decoded is None
    if col == "u":
        return uuid.UUID(bytes=decoded) == uuid.UUID(str(pg))
    if col == "by":
        return decoded == bytes(pg)
    if col == "iv":
        return decoded.months == 0 and dt.timedelta(days=decoded.days,
                                                    microseconds=decoded.nanoseconds // 1000) == pg
    return decoded == pg


def _tables(rows, feed):
    msgs = [d for _, _, d in rows]
    lsns = [lsn for lsn, _, _ in rows]
    dec = Decoder()
    out = {FULL: [], KEYED: []}
    step = feed or len(msgs)
    for s in range(0, len(msgs), step):
        cs = dec.feed(msgs[s:s + step], lsns[s:s + step])
        for name, t in cs.tables.items():
            out[name] += t.to_pylist()
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("feed", [None, 3, 17], ids=["one-feed", "feeds-of-3", "feeds-of-17"])
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_old_images_of_every_layout_equal_postgres(captured, binary, feed):
    captures, truth = captured
    tables = _tables(captures[binary], feed)
    full = tables[FULL]
    assert [r["_op"] for r in full].count("c") == N
    assert [r["_op"] for r in full].count("u") == N // 3
    assert [r["_op"] for r in full].count("d") == (N + 2) // 3
    problems = []
    for r in full:
        old = r["_before"]
        if r["_op"] == "c":
            if old is not None or r["_before_kind"] is not None:
                problems.append(f"insert {r['id']}: _before {old!r}")
            continue
        if old is None or r["_before_kind"] != "O":
            problems.append(f"{r['_op']} of {r['id']}: _before {old!r}, kind {r['_before_kind']!r}")
            continue
        want = truth[old["id"]]
        for col in COLUMNS:
            if not _same(col, old[col], want[col]):
                problems.append(f"{r['_op']} of {old['id']}, {col}: decoded {old[col]!r}, "
                                f"PostgreSQL {want[col]!r}")
    keyed = tables[KEYED]
    kinds = {}
    for r in keyed:
        old = r["_before"]
        kinds[r["_before_kind"]] = kinds.get(r["_before_kind"], 0) + 1
        if r["_before_kind"] is None:
            if old is not None:
                problems.append(f"keyed {r['_op']} of {r['id']}: _before {old!r} without a kind")
        elif r["_before_kind"] != "K" or old is None or old["v"] is not None or old["id"] is None:
            problems.append(f"keyed {r['_op']}: _before {old!r}, kind {r['_before_kind']!r}")
        elif r["_op"] == "u" and r["id"] != old["id"] + 1000:
            problems.append(f"keyed update to {r['id']}: old key {old['id']}")
    assert kinds == {"K": N // 4 + (N + 3) // 4, None: N - N // 4 - (N + 3) // 4}, kinds
    assert not problems, "\n".join(problems[:20])
