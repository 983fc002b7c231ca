"""Arrays of types the decoder does not know, against a real PostgreSQL.

A table with an enum[] column (NULL elements, an empty array, a 2-D array, an array with
lower bound 0, labels that array_out must quote: space, '"', '\\', ',', braces, a label
spelled NULL, non-ASCII), a composite[], a point[] (built-in, no kind of its own) and an
array of a domain over int4, captured with pgoutput in text and in binary mode (protocol
1, REPLICA IDENTITY FULL, so that updates carry the old row too).

Ground truth comes from PostgreSQL, never from the decoder: per element its output
text (``format('%s', e)`` over ``unnest``) and its send bytes (the element type's own
send function from ``pg_type.typsend``: ``enum_send``, ``record_send``, ``point_send``,
``int4send``); for the change-event table of a binary capture, PostgreSQL's own text of a
``bytea[]`` of those send bytes in the array's shape (``array_out`` of bytea: each
element ``"\\\\x..."``); for a 2-D array or one with a lower bound other than 1, the typed
value is null and ``_special`` holds that text.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import pgoutput_fast
from pgoutput_fast import sqlcapture
from tests.support.pg_publish import fresh_schema, publish
from pgoutput_fast.spark.apply import events_batch_to_typed

SCHEMA = "pgo_uarr"
SLOT = "pgo_uarr_slot"
PUB = "pgo_uarr_pub"
TABLE = f"{SCHEMA}.t"

LABELS = ["sad", "ok", "happy", "c d", 'x"y', "a\\b", "a,b", "NULL", "{br}", "é", "tab\tx"]

ROWS = {  # id -> (m mood[], c comp[], p point[], d posint[]) as SQL literals
    1: ("""'{happy,NULL,"c d","x\\"y","a\\\\b","a,b","NULL","{br}",é,"tab\tx"}'""",
        """ARRAY[ROW(1, 'a b')::{s}.comp, NULL, ROW(NULL, 'q"\\\\,(x)')::{s}.comp, ROW(NULL, NULL)::{s}.comp]""",
        "'{\"(1,2)\",NULL,\"(-0.5,1e+300)\"}'", "'{1,NULL,2147483647}'"),
    2: ("'{}'", "'{}'", "'{}'", "'{}'"),
    3: ("NULL", "NULL", "NULL", "NULL"),
    4: ("'{{sad,ok},{happy,NULL}}'", "NULL", "'{{\"(1,1)\"},{\"(2,2)\"}}'", "'{{1,2},{3,4}}'"),
    5: ("'[0:1]={sad,ok}'", "NULL", "'[3:3]={\"(0,0)\"}'", "'[-2:-1]={5,6}'"),
    6: ("'{NULL}'", "ARRAY[NULL::{s}.comp]", "'{NULL}'", "'{NULL}'"),
}
ARRAY_COLUMNS = ("m", "c", "p", "d")


def _pg_truth(cur):
    """{id: {column: dict(text, special, etext, esend, bytea_text)}} from PostgreSQL."""
    cur.execute(
        "SELECT a.attname, e.typsend::regproc::text FROM pg_attribute a "
        "JOIN pg_type t ON t.oid = a.atttypid JOIN pg_type e ON e.oid = t.typelem "
        "WHERE a.attrelid = %s::regclass AND a.attname = ANY (%s)", (TABLE, list(ARRAY_COLUMNS)))
    send = dict(cur.fetchall())
    exprs = ["id"]
    for c in ARRAY_COLUMNS:
        f = send[c]
        # (unnest in the select list: in FROM, a composite element is spread into columns;
        # a composite whose fields are all null IS NULL, yet is no NULL element: the strict
        # send function tells them apart)
        flat = f"ARRAY(SELECT {f}(e) FROM (SELECT unnest({c}) AS e) AS u)"
        two_d = (f"(SELECT array_agg(ARRAY(SELECT {f}({c}[i][j]) FROM generate_subscripts({c}, 2) j "
                 f"ORDER BY j) ORDER BY i) FROM generate_subscripts({c}, 1) i)")
        # PostgreSQL's text of a bytea[] of the element send bytes, in the array's shape
        bytea_text = (f"CASE WHEN {c} IS NULL THEN NULL WHEN cardinality({c}) = 0 THEN '{{}}' "
                      f"WHEN array_ndims({c}) = 2 THEN format('%s', {two_d}) "
                      f"ELSE format('%s', (array_dims({c}) || '=' || format('%s', {flat}))::bytea[]) END")
        exprs += [
            f"CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END",
            f"(array_ndims({c}) > 1 OR array_lower({c}, 1) <> 1)",
            f"ARRAY(SELECT CASE WHEN {f}(e) IS NULL THEN NULL ELSE format('%s', e) END "
            f"FROM (SELECT unnest({c}) AS e) AS u)",
            flat,
            bytea_text,
        ]
    cur.execute(f"SELECT {', '.join(exprs)} FROM {TABLE} ORDER BY id")
    out = {}
    for r in cur.fetchall():
        row, k = {}, 1
        for c in ARRAY_COLUMNS:
            text, special, etext, esend, btext = r[k:k + 5]
            k += 5
            row[c] = dict(text=text, special=bool(special), etext=etext,
                          esend=None if esend is None else [None if x is None else bytes(x) for x in esend],
                          bytea_text=btext)
        out[r[0]] = row
    return out


@pytest.fixture(scope="module")
def captured(request):
    with fresh_schema(request, SCHEMA, SLOT, PUB) as (cur, cap):
        cur.execute(f"CREATE SCHEMA {SCHEMA}")
        cur.execute(f"CREATE TYPE {SCHEMA}.mood AS ENUM ({', '.join(['%s'] * len(LABELS))})", LABELS)
        cur.execute(f"CREATE TYPE {SCHEMA}.comp AS (a int, b text)")
        cur.execute(f"CREATE DOMAIN {SCHEMA}.posint AS int4")
        cur.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, n int, m {SCHEMA}.mood[], "
                    f"c {SCHEMA}.comp[], p point[], d {SCHEMA}.posint[])")
        publish(cur, TABLE, SLOT, PUB)
        for rid, lits in ROWS.items():
            m, c, p, d = (x.replace("{s}", SCHEMA) for x in lits)
            cur.execute(f"INSERT INTO {TABLE} VALUES ({rid}, 0, {m}::{SCHEMA}.mood[], {c}::{SCHEMA}.comp[], "
                        f"{p}::point[], {d}::{SCHEMA}.posint[])".replace("%", "%%"))
        cur.execute(f"UPDATE {TABLE} SET n = n + 1")  # old and new row carry the arrays
        sqlcapture.session_settings(cap)
        captures = {binary: sqlcapture.peek_changes(cap, SLOT, proto_version=1, publication_names=PUB,
                                                     binary=binary)
                    for binary in (False, True)}
        truth = _pg_truth(cap.cursor())
        yield captures, truth


def _decode(rows, **kw):
    return pgoutput_fast.decode_changes([d for _, _, d in rows], [lsn for lsn, _, _ in rows], **kw)


def _expected_typed(t, binary):
    """(typed value, _special text or None) PostgreSQL says a value must decode to."""
    if t["text"] is None:
        return None, None
    if t["special"]:
        return None, t["bytea_text"] if binary else t["text"]
    return (t["esend"] if binary else t["etext"]), None


def _check_typed(table, truth, binary, problems, label):
    want_type = pa.list_(pa.binary() if binary else pa.string())
    for c in ARRAY_COLUMNS:
        if table.schema.field(c).type != want_type:
            problems.append(f"[{label}] {c}: Arrow type {table.schema.field(c).type}, want {want_type}")
    rows = table.to_pylist()
    assert [r["_op"] for r in rows] == ["c"] * len(ROWS) + ["u"] * len(ROWS), [r["_op"] for r in rows]
    for r in rows:
        specials = dict(r["_special"] or ())
        for image, values, prefix in (("new", r, ""), ("old", r["_before"], "_before.")):
            if values is None:
                if r["_op"] == "u":
                    problems.append(f"[{label}] id {r['id']}: no old row in an update")
                continue
            rid = values["id"]
            for c in ARRAY_COLUMNS:
                value, special = _expected_typed(truth[rid][c], binary)
                if values[c] != value:
                    problems.append(f"[{label}] id {rid} {image} {c}: decoded {values[c]!r}, "
                                    f"PostgreSQL {value!r}")
                if specials.get(prefix + c) != special:
                    problems.append(f"[{label}] id {rid} {image} {c}: _special "
                                    f"{specials.get(prefix + c)!r}, PostgreSQL {special!r}")


@pytest.mark.postgres
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_typed_lists_equal_postgres(captured, binary):
    captures, truth = captured
    cs = _decode(captures[binary])
    problems = []
    _check_typed(cs.tables[TABLE], truth, binary, problems, "typed table")
    assert not problems, "\n".join(problems)


@pytest.mark.postgres
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_event_text_equals_postgres(captured, binary):
    """The change-event table: PostgreSQL's text (text mode); the elements' send bytes as
    PostgreSQL prints a bytea[] of them (binary mode: there is no output function to port)."""
    captures, truth = captured
    cs = _decode(captures[binary], tables=False)
    problems = []
    for ev in cs.events.to_pylist():
        for image in ("before", "after"):
            m = dict(ev[image] or ())
            if not m:
                continue
            rid = int(m["id"])
            for c in ARRAY_COLUMNS:
                t = truth[rid][c]
                want = t["bytea_text"] if binary else t["text"]
                if m.get(c) != want:
                    problems.append(f"{ev['op']} id {rid} {image}.{c}: event {m.get(c)!r}, PostgreSQL {want!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.postgres
@pytest.mark.skipif(pgoutput_fast.IMPL != "native",
                    reason="events_batch_to_typed parses with the native core's parse_values "
                           "(the Spark path, native only)")
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_events_to_typed_equals_postgres(captured, binary):
    """spark.apply.events_batch_to_typed reads the event text back into the same lists."""
    captures, truth = captured
    dec = pgoutput_fast.Decoder(tables=False)
    rows = captures[binary]
    cs = dec.feed([d for _, _, d in rows], lsn=[lsn for lsn, _, _ in rows])
    batch = cs.events.combine_chunks().to_batches()[0]
    typed = events_batch_to_typed(batch, dec.catalog, TABLE, binary_unknown=binary, spark=False)
    problems = []
    _check_typed(pa.Table.from_batches([typed]), truth, binary, problems, "events_to_typed")
    assert not problems, "\n".join(problems)


@pytest.mark.postgres
def test_enum_array_binary_elements_are_the_labels(captured):
    """An enum's send form is its label: the binary lists are the text lists, encoded."""
    captures, _ = captured
    t = _decode(captures[False]).tables[TABLE].column("m").to_pylist()
    b = _decode(captures[True]).tables[TABLE].column("m").to_pylist()
    assert [None if x is None else [None if e is None else e.encode() for e in x] for x in t] == b
    assert any(x and "x\"y" in x for x in t)
