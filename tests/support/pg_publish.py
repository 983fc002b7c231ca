"""A schema of its own, published to a pgoutput slot, on a test's PostgreSQL server."""

import contextlib

import pytest

from pgoutput_fast.local_server import find_bindir


def drop_published(cur, schema, slot, pub):
    """Drop the slot, the publication and the schema (CASCADE) if they are there: what an
    earlier run left, or this one at its end."""
    cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s", (slot,))
    cur.execute(f"DROP PUBLICATION IF EXISTS {pub}")
    cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def publish(cur, table, slot, pub):
    """Publish `table` (REPLICA IDENTITY FULL: updates carry the old row) and create a
    pgoutput slot, so that what is written after this is captured."""
    cur.execute(f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    cur.execute(f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


@contextlib.contextmanager
def fresh_schema(request, schema, slot, pub):
    """A module fixture's PostgreSQL session: skips without server binaries; yields
    (cur, cap), a cursor on one connection (the schema is dropped with any earlier run's
    slot and publication first) and a second connection for the capture; drops them all
    again and closes both connections at the end."""
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install -y postgresql, or set PGOUTPUT_FAST_PG_BIN)")
    pg = request.getfixturevalue("pg_server")
    conn = pg.connect()
    cap = pg.connect()
    cur = conn.cursor()
    try:
        drop_published(cur, schema, slot, pub)
        yield cur, cap
    finally:
        try:
            drop_published(cur, schema, slot, pub)
        finally:
            conn.close()
            cap.close()
