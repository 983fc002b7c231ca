"""Capture pgoutput messages through the SQL interface (docs/protocol.md §1.5).

The demo captures this way, the benchmark corpus uses its session settings, and the
tests and fixtures capture with it too.

Each row of ``pg_logical_slot_{peek,get}_binary_changes`` is exactly one pgoutput
message (no XLogData header). These helpers return ``[(lsn, xid, data), ...]`` with
``lsn`` and ``xid`` as ints and ``data`` as bytes.

Text-format values depend on the *calling* session's settings: call
``session_settings(conn)`` on the capturing connection first.
"""

from __future__ import annotations

__all__ = [
    "peek_changes",
    "get_changes",
    "session_settings",
    "build_options",
    "parse_pg_lsn",
    "text_lsn",
    "wait_for_wal_flush",
    "SESSION_SETTINGS",
]

#: Settings applied by ``session_settings`` (what a decoder should also request).
from .protocol import SESSION_SETTINGS  # noqa: E402  (one source)


def parse_pg_lsn(text) -> int:
    """``'16/B374D848'`` -> int."""
    hi, sep, lo = str(text).strip().partition("/")
    if not sep:
        raise ValueError(f"not an LSN: {text!r}")
    return (int(hi, 16) << 32) | int(lo, 16)


def _bool_opt(v) -> str:
    if isinstance(v, str):
        return v
    return "true" if v else "false"


def build_options(
    *,
    proto_version,
    publication_names,
    binary=False,
    messages=False,
    streaming=None,
    two_phase=False,
):
    """The flat ``[name, value, name, value, ...]`` option list for pgoutput.

    Options left at their defaults are omitted, so that the list also works on servers
    that do not know them. ``publication_names`` may be a string or a sequence of
    names (joined with commas, quoted when needed). ``streaming`` may be a bool or a
    string (``'on'``, ``'off'``, ``'parallel'``); ``None`` leaves it out. A string for
    ``binary``/``messages``/``two_phase`` is passed through unchanged.
    """
    if not isinstance(publication_names, str):
        names = []
        for n in publication_names:
            if n == n.lower() and n.replace("_", "a").isalnum() and not n[:1].isdigit():
                names.append(n)
            else:
                names.append('"' + n.replace('"', '""') + '"')
        publication_names = ",".join(names)
    opts = ["proto_version", str(int(proto_version)), "publication_names", publication_names]
    if binary:
        opts += ["binary", _bool_opt(binary)]
    if messages:
        opts += ["messages", _bool_opt(messages)]
    if streaming is not None:
        opts += ["streaming", streaming if isinstance(streaming, str) else ("on" if streaming else "off")]
    if two_phase:
        opts += ["two_phase", "on" if two_phase is True else _bool_opt(two_phase)]
    return opts


def wait_for_wal_flush(conn, timeout: float = 30.0) -> int:
    """Wait until all WAL inserted so far is flushed; return that LSN.

    The SQL decoding functions only read WAL up to the *flush* position. With
    ``synchronous_commit=off`` (as ``PostgresServer`` configures) a just-committed
    transaction can still be unflushed for up to ~3 x ``wal_writer_delay``, and a capture
    taken right after a workload would silently miss its tail.
    """
    import time

    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        target = parse_pg_lsn(cur.fetchone()[0])
        deadline = time.monotonic() + timeout
        while True:
            cur.execute("SELECT pg_current_wal_flush_lsn()::text")
            if parse_pg_lsn(cur.fetchone()[0]) >= target:
                return target
            if time.monotonic() > deadline:
                raise TimeoutError(f"WAL not flushed up to {text_lsn(target)} after {timeout}s")
            time.sleep(0.005)


def text_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _changes(func, conn, slot, upto_nchanges, opts, wait_flush):
    if wait_flush:
        wait_for_wal_flush(conn)
    sql = (
        f"SELECT lsn::text, xid::text, data FROM {func}(%s, NULL, %s, VARIADIC %s::text[])"
    )
    with conn.cursor() as cur:
        cur.execute(sql, (slot, upto_nchanges, opts))
        rows = cur.fetchall()
    return [(parse_pg_lsn(lsn), int(xid), bytes(data)) for lsn, xid, data in rows]


def peek_changes(
    conn,
    slot,
    *,
    proto_version,
    publication_names,
    binary=False,
    messages=False,
    streaming=None,
    two_phase=False,
    upto_nchanges=None,
    wait_flush=True,
):
    """Rows of ``pg_logical_slot_peek_binary_changes`` as ``[(lsn, xid, data)]``.

    Does not advance the slot. Note (docs/protocol.md §3.11): passing ``two_phase=True``
    even once marks the slot two-phase for good. With ``wait_flush`` (default) it first
    waits until all WAL written so far is flushed (see ``wait_for_wal_flush``), so that
    everything committed before the call is decoded.
    """
    opts = build_options(
        proto_version=proto_version,
        publication_names=publication_names,
        binary=binary,
        messages=messages,
        streaming=streaming,
        two_phase=two_phase,
    )
    return _changes("pg_logical_slot_peek_binary_changes", conn, slot, upto_nchanges, opts, wait_flush)


def get_changes(
    conn,
    slot,
    *,
    proto_version,
    publication_names,
    binary=False,
    messages=False,
    streaming=None,
    two_phase=False,
    upto_nchanges=None,
    wait_flush=True,
):
    """Like ``peek_changes`` but with ``pg_logical_slot_get_binary_changes`` (advances the slot)."""
    opts = build_options(
        proto_version=proto_version,
        publication_names=publication_names,
        binary=binary,
        messages=messages,
        streaming=streaming,
        two_phase=two_phase,
    )
    return _changes("pg_logical_slot_get_binary_changes", conn, slot, upto_nchanges, opts, wait_flush)


def session_settings(conn):
    """Apply the deterministic text-output settings to ``conn``'s session."""
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS:
            cur.execute(f"SET {name} = %s", (value,))
    # psycopg2 caches the client encoding; keep it in step with the server session
    try:
        conn.set_client_encoding("UTF8")
    except Exception:
        pass
