"""The Delta sink on the changes that lose data when handled carelessly, on a real
PostgreSQL (15 and 17), text and binary mode. After each phase the whole stream so far
is decoded and applied again (each table's position skips what it holds) and every
table is compared with ``SELECT``:

* ``k``: a primary key and a TOASTed column: updates that leave the TOASTed value
  unchanged (it is not sent) with and without a key change, with the row written in an
  earlier batch (read back from the table) or in the same batch, key changes chained in
  one batch; then ALTER COLUMN TYPE int -> bigint (the table is widened) and ADD COLUMN
  with a DEFAULT;
* ``f``: REPLICA IDENTITY FULL with duplicate rows: a delete or update takes one copy;
* ``n``: no replica identity (inserts only), truncated and filled again.

Then: two appliers of one batch (the second conflicts, no double write), a batch
applied twice, data files left by a crash before the commit, Delta's change data feed,
and a type change Delta cannot take (one clear error, nothing written).
"""

import os
import random
import string
import uuid

import pyarrow as pa
import pytest

import pgoutput_fast
from pgoutput_fast import sqlcapture
from pgoutput_fast.delta import (DeltaApplyError, DeltaConflict, apply_changeset, read_table,
                                 table_uri)

pytestmark = pytest.mark.postgres

SERVERS = ["pg_server", "pg_server_16"]


def _big(seed: int) -> str:
    rng = random.Random(seed)     # incompressible: stored out of line (TOAST)
    return "".join(rng.choice(string.ascii_letters) for _ in range(9000))


class Db:
    def __init__(self, server, binary):
        self.server = server
        self.binary = binary
        self.schema = "dc_" + uuid.uuid4().hex[:8]
        self.slot = self.schema + "_slot"
        self.conn = server.connect()
        self.conn.autocommit = True
        self.cap = server.connect()
        sqlcapture.session_settings(self.cap)
        s = self.schema
        self.sql(f"CREATE SCHEMA {s}")
        self.sql(f"CREATE TABLE {s}.k (id int PRIMARY KEY, big text, small int)")
        self.sql(f"CREATE TABLE {s}.f (a int, b text)")
        self.sql(f"ALTER TABLE {s}.f REPLICA IDENTITY FULL")
        self.sql(f"CREATE TABLE {s}.n (a int, b text)")
        self.sql(f"CREATE PUBLICATION {s}_pub FOR TABLE {s}.k, {s}.f, {s}.n")
        self.sql(f"SELECT pg_create_logical_replication_slot('{self.slot}', 'pgoutput')")

    def sql(self, q, params=None):
        with self.conn.cursor() as cur:
            cur.execute(q, params)
            return cur.fetchall() if cur.description else None

    def changes(self):
        """Everything the slot holds (peeked, never consumed), decoded in one ChangeSet."""
        rows = sqlcapture.peek_changes(self.cap, self.slot, proto_version=1,
                                       publication_names=f"{self.schema}_pub",
                                       binary=self.binary)
        msgs, lsns = [d for _, _, d in rows], [lsn for lsn, _, _ in rows]
        return pgoutput_fast.Decoder().feed(msgs, lsns)

    def truth(self, table, cols):
        return sorted(map(tuple, self.sql(f"SELECT {', '.join(cols)} FROM {self.schema}.{table}")),
                      key=repr)

    def close(self):
        try:
            self.sql(f"SELECT pg_drop_replication_slot('{self.slot}')")
            self.sql(f"DROP SCHEMA {self.schema} CASCADE")
            self.sql(f"DROP PUBLICATION IF EXISTS {self.schema}_pub")
        finally:
            self.conn.close()
            self.cap.close()


@pytest.fixture(params=[(s, b) for s in SERVERS for b in (False, True)],
                ids=[f"{s.replace('pg_server', 'pg') or 'pg'}-{'binary' if b else 'text'}"
                     for s in SERVERS for b in (False, True)])
def db(request):
    server_fixture, binary = request.param
    d = Db(request.getfixturevalue(server_fixture), binary)
    yield d
    d.close()


def _stored(target, db, table, cols):
    t = read_table(target, f"{db.schema}.{table}")
    return sorted(zip(*[t.column(c).to_pylist() for c in cols]), key=repr)


def _check(target, db, tables=(("k", ("id", "big", "small")), ("f", ("a", "b")),
                                ("n", ("a", "b")))):
    for table, cols in tables:
        want = db.truth(table, cols)
        got = _stored(target, db, table, cols)
        if got != want:
            short = [tuple(v[:20] + "..." if isinstance(v, str) and len(v) > 20 else v
                           for v in r) for r in sorted(set(got) ^ set(want), key=repr)[:6]]
            raise AssertionError(f"{table}: {len(got)} rows in Delta, {len(want)} in "
                                 f"PostgreSQL; differing rows: {short}")


def _apply(db, target, cs, **kw):
    return apply_changeset(cs, target, binary=db.binary, **kw)


def test_toast_key_changes_full_duplicates_truncate_widening(db, tmp_path):
    s = db.schema
    target = tmp_path / "tables"
    # phase 1: rows to come back to
    for i in range(1, 6):
        db.sql(f"INSERT INTO {s}.k VALUES (%s, %s, %s)", (i, _big(i), i))
    db.sql(f"INSERT INTO {s}.f VALUES (1, 'x'), (1, 'x'), (1, 'x'), (2, 'y'), (2, 'y')")
    db.sql(f"INSERT INTO {s}.n VALUES (1, 'one'), (1, 'one')")
    first = _apply(db, target, db.changes())
    _check(target, db)
    # the reduced batch that reached the commit: one row per key touched
    assert first[f"{s}.k"]["reduced_rows"] == 5 and first[f"{s}.k"]["reduced_bytes"] > 0

    # phase 2: unchanged TOAST everywhere; the rows of phase 1 are read back from Delta
    db.sql(f"UPDATE {s}.k SET id = 101, small = 10 WHERE id = 1")     # key change, from the table
    db.sql(f"UPDATE {s}.k SET small = 20 WHERE id = 2")                # same key, from the table
    db.sql(f"INSERT INTO {s}.k VALUES (6, %s, 6)", (_big(6),))
    db.sql(f"UPDATE {s}.k SET id = 106 WHERE id = 6")                  # key change, same batch
    db.sql(f"UPDATE {s}.k SET id = 206, small = 60 WHERE id = 106")    # ... chained
    db.sql(f"UPDATE {s}.k SET small = 61 WHERE id = 206")
    db.sql(f"UPDATE {s}.k SET id = 303 WHERE id = 3")                  # from the table, chained
    db.sql(f"UPDATE {s}.k SET id = 304 WHERE id = 303")
    db.sql(f"DELETE FROM {s}.k WHERE id = 4")
    # one copy of a duplicate row: PostgreSQL deletes / updates by ctid
    db.sql(f"DELETE FROM {s}.f WHERE ctid = (SELECT ctid FROM {s}.f WHERE a = 1 LIMIT 1)")
    db.sql(f"UPDATE {s}.f SET b = 'z' WHERE ctid = (SELECT ctid FROM {s}.f WHERE a = 2 LIMIT 1)")
    db.sql(f"INSERT INTO {s}.f VALUES (2, 'y')")
    cs = db.changes()
    before = {t: _version(target, db, t) for t in ("k", "f", "n")}
    results = _apply(db, target, cs)
    assert results[f"{s}.n"]["skipped"] and _version(target, db, "n") == before["n"]
    assert results[f"{s}.k"]["missing"] == 0
    _check(target, db)
    # the same batch again: no commit anywhere, same rows
    after = {t: _version(target, db, t) for t in ("k", "f", "n")}
    again = _apply(db, target, cs)
    assert all(r["skipped"] for r in again.values()), again
    assert {t: _version(target, db, t) for t in ("k", "f", "n")} == after
    _check(target, db)

    # phase 3: truncate, widening, ADD COLUMN with a default
    db.sql(f"TRUNCATE {s}.n")
    db.sql(f"INSERT INTO {s}.n VALUES (2, 'two')")
    db.sql(f"ALTER TABLE {s}.k ALTER COLUMN small TYPE bigint")
    db.sql(f"UPDATE {s}.k SET small = 5000000000 WHERE id = 2")
    db.sql(f"ALTER TABLE {s}.k ADD COLUMN extra text DEFAULT 'dflt'")
    db.sql(f"UPDATE {s}.k SET extra = 'set' WHERE id = 5")
    _apply(db, target, db.changes(), column_defaults={f"{s}.k": {"extra": "dflt"}})
    _check(target, db, (("k", ("id", "big", "small", "extra")), ("f", ("a", "b")),
                        ("n", ("a", "b"))))
    t = read_table(target, f"{s}.k")
    assert t.schema.field("small").type == pa.int64()

    # RENAME COLUMN: the stream cannot tell it from DROP + ADD; stop until told
    db.sql(f"ALTER TABLE {s}.k RENAME COLUMN small TO tiny")
    db.sql(f"UPDATE {s}.k SET tiny = 7 WHERE id = 5")
    v0 = _version(target, db, "k")
    with pytest.raises(DeltaApplyError, match="'small' is gone and 'tiny' is new") as err:
        _apply(db, target, db.changes())
    assert "renames={" in str(err.value) and _version(target, db, "k") == v0
    renames = {f"{s}.k": {"small": "tiny"}}
    _apply(db, target, db.changes(), renames=renames)
    after_rename = (("k", ("id", "big", "tiny", "extra")), ("f", ("a", "b")), ("n", ("a", "b")))
    _check(target, db, after_rename)
    assert "small" not in read_table(target, f"{s}.k").column_names

    # everything from the start into a new target in one batch (the rename inside it)
    whole = tmp_path / "whole"
    _apply(db, whole, db.changes(), column_defaults={f"{s}.k": {"extra": "dflt"}},
           renames=renames)
    _check(whole, db, after_rename)

    # everything from the start into a new target, in batches of one transaction
    fresh = tmp_path / "fresh"
    rows = sqlcapture.peek_changes(db.cap, db.slot, proto_version=1,
                                   publication_names=f"{s}_pub", binary=db.binary)
    dec = pgoutput_fast.Decoder()
    for lsn, _, data in rows:
        _apply(db, fresh, dec.feed([data], [lsn]), column_defaults={f"{s}.k": {"extra": "dflt"}},
               renames=renames)
    _check(fresh, db, after_rename)


def _version(target, db, table):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(target, f"{db.schema}.{table}")).version()


@pytest.mark.parametrize("server", ["pg_server"])
def test_two_appliers_crash_leftovers_and_change_feed(server, request, tmp_path):
    db = Db(request.getfixturevalue(server), True)
    try:
        s = db.schema
        target = tmp_path / "tables"
        db.sql(f"INSERT INTO {s}.f VALUES (1, 'x'), (1, 'x')")
        for i in range(1, 4):
            db.sql(f"INSERT INTO {s}.k VALUES (%s, 'v', %s)", (i, i))
        _apply(db, target, db.changes(), change_data_feed=True)
        db.sql(f"INSERT INTO {s}.f VALUES (1, 'x')")
        db.sql(f"UPDATE {s}.k SET small = 99 WHERE id = 2")
        db.sql(f"DELETE FROM {s}.k WHERE id = 3")
        cs = db.changes()

        # a crash between writing data files and committing leaves files the log does
        # not name: the table ignores them, the rerun applies the batch once
        d = table_uri(target, f"{s}.f")
        for name in os.listdir(d):
            if name.endswith(".parquet"):
                with open(os.path.join(d, name), "rb") as src, \
                        open(os.path.join(d, "part-00000-crashed.parquet"), "wb") as dst:
                    dst.write(src.read())
                break

        # two appliers read the table's position, then both commit the same batch
        from pgoutput_fast.delta import commit as C
        from pgoutput_fast.delta import reduce as R
        from pgoutput_fast.storage_types import to_storage_table

        uri = table_uri(target, f"{s}.f")
        stale = C.open_table(uri)
        position = C.applied_position(stale)
        _apply(db, target, cs)                     # the first applier
        (version, t), = [(v, t) for v, t in cs.table_versions if v.relname == "f"]
        t = to_storage_table(t)
        from pgoutput_fast.delta import filter_after

        t = filter_after(t, position)
        final = R.reduce_full(R.full_events(t, ["a", "b"]), ["a", "b"])
        last = (int(t.column("_commit_lsn").to_pylist()[-1]), int(t.column("_seq").to_pylist()[-1]))
        with pytest.raises(DeltaConflict, match="another writer committed"):
            C.commit_batch(stale, uri, f"{s}.f", mode="full", keys=[], columns=["a", "b"],
                           final=final, carries=None, truncate=False, position=last, changes=1)
        _check(target, db, (("k", ("id", "big", "small")), ("f", ("a", "b"))))  # one x more

        # Delta's change data feed: the update's pre- and post-image, the delete
        from deltalake import DeltaTable

        cdf = pa.table(DeltaTable(table_uri(target, f"{s}.k")).load_cdf(starting_version=0)
                       .read_all())
        kinds = sorted(zip(cdf.column("_change_type").to_pylist(), cdf.column("id").to_pylist(),
                           cdf.column("small").to_pylist()))
        assert ("update_preimage", 2, 2) in kinds and ("update_postimage", 2, 99) in kinds
        assert ("delete", 3, 3) in kinds and ("insert", 1, 1) in kinds

        # a type Delta cannot change in place: one clear error, nothing written
        db.sql(f"ALTER TABLE {s}.k ALTER COLUMN small TYPE text")
        db.sql(f"UPDATE {s}.k SET small = 'abc' WHERE id = 1")
        v0 = _version(target, db, "k")
        db.sql(f"INSERT INTO {s}.f VALUES (3, 'w')")
        vf = _version(target, db, "f")
        with pytest.raises(DeltaApplyError, match="column 'small' changed type") as err:
            _apply(db, target, db.changes())
        assert _version(target, db, "k") == v0                 # nothing of it written
        assert _version(target, db, "f") == vf + 1             # the other table applied
        assert f"committed: {s}.f at [" in str(err.value)
        assert list(err.value.errors) == [f"{s}.k"]
    finally:
        db.close()
