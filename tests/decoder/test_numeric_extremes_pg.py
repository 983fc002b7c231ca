"""Unconstrained numerics at PostgreSQL's limits, against a real PostgreSQL.

A numeric holds up to 131,072 digits before the point and 16,383 after. Its binary form
(numeric_send) counts its base-10000 digits in an unsigned 16-bit field, and the largest
values have more than 32,767 of them (36,864 for the largest): a reader that takes that
field as signed rejects them. The table below holds such values, their negatives, values
just under and over 32,767 digit groups, the smallest positive one, and NaN and
±Infinity, captured with pgoutput in text and in binary mode. Ground truth is
PostgreSQL's own text of each value (``v::text``); the typed table (a string column for
an unconstrained numeric) and the change-event table must both hold exactly that.
"""

from __future__ import annotations

import pytest

import pgoutput_fast
from pgoutput_fast import sqlcapture
from tests.support.pg_publish import fresh_schema, publish

SCHEMA = "pgo_numx"
SLOT = "pgo_numx_slot"
PUB = "pgo_numx_pub"
TABLE = f"{SCHEMA}.t"

VALUES = {  # id -> SQL expression of the value
    1: "(repeat('9', 131072) || '.' || repeat('9', 16383))::numeric",   # 36,864 digit groups
    2: "('-' || repeat('9', 131072) || '.' || repeat('9', 16383))::numeric",
    3: "repeat('7', 131068)::numeric",                                   # 32,767 groups
    4: "repeat('7', 131069)::numeric",                                   # 32,768 groups
    5: "('1' || repeat('0', 131071))::numeric",                          # one group, weight 32,767
    6: "('0.' || repeat('0', 16382) || '1')::numeric",                   # the smallest positive
    7: "(repeat('1234', 32768) || '.5')::numeric",
    8: "'NaN'::numeric",
    9: "'Infinity'::numeric",
    10: "'-Infinity'::numeric",
    11: "NULL::numeric",
}


@pytest.fixture(scope="module")
def captured(request):
    with fresh_schema(request, SCHEMA, SLOT, PUB) as (cur, cap):
        cur.execute(f"CREATE SCHEMA {SCHEMA}")
        cur.execute(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, n int, v numeric)")
        publish(cur, TABLE, SLOT, PUB)
        for rid, expr in VALUES.items():
            cur.execute(f"INSERT INTO {TABLE} VALUES ({rid}, 0, {expr})")
        cur.execute(f"UPDATE {TABLE} SET n = n + 1")  # old and new row carry the value
        sqlcapture.session_settings(cap)
        captures = {binary: sqlcapture.peek_changes(cap, SLOT, proto_version=1, publication_names=PUB,
                                                     binary=binary)
                    for binary in (False, True)}
        ccur = cap.cursor()
        ccur.execute(f"SELECT id, v::text FROM {TABLE} ORDER BY id")
        truth = dict(ccur.fetchall())
        yield captures, truth


def _decode(rows, **kw):
    return pgoutput_fast.decode_changes([d for _, _, d in rows], [lsn for lsn, _, _ in rows], **kw)


def _short(v):
    return v if v is None or len(v) < 60 else f"{v[:25]}...{v[-25:]} ({len(v)} chars)"


@pytest.mark.postgres
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_numeric_extremes_equal_postgres(captured, binary):
    captures, truth = captured
    assert len(truth[1]) == 131072 + 1 + 16383 and len(truth[2]) == len(truth[1]) + 1
    cs = _decode(captures[binary])
    rows = cs.tables[TABLE].to_pylist()
    assert [r["_op"] for r in rows] == ["c"] * len(VALUES) + ["u"] * len(VALUES)
    problems = []
    for r in rows:
        for image, values in (("new", r), ("old", r["_before"])):
            if values is None:
                if r["_op"] == "u":
                    problems.append(f"typed, id {r['id']}: no old row in an update")
                continue
            if values["v"] != truth[values["id"]]:
                problems.append(f"typed, id {values['id']} {image}: decoded {_short(values['v'])!r}, "
                                f"PostgreSQL {_short(truth[values['id']])!r}")
        if r["_special"]:
            problems.append(f"typed, id {r['id']}: _special {r['_special']!r}")
    events = cs.events.to_pylist()
    assert len(events) == 2 * len(VALUES)
    for e in events:
        for image in ("after", "before"):
            m = dict(e[image] or ())
            if not m:
                if image == "after" or e["op"] == "u":
                    problems.append(f"events, {e['op']}: no {image} map")
                continue
            rid = int(m["id"])
            if m["v"] != truth[rid]:
                problems.append(f"events, id {rid} {image}: {_short(m['v'])!r}, PostgreSQL {_short(truth[rid])!r}")
    assert not problems, "\n".join(problems)
