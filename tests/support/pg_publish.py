"""A schema of its own, published to a pgoutput slot, on a test's PostgreSQL server."""


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
