"""The stateful columnar Decoder: pgoutput messages in, typed Arrow tables out.

    dec = Decoder()
    for batch in batches:                     # pa.BinaryArray or list of bytes
        changes = dec.feed(batch, lsn=lsns)   # only committed transactions
        changes.tables["public.orders"]       # typed pa.Table
        changes.events                        # one change-event table for all relations

Transactions (docs/protocol.md §3): only work of committed transactions is emitted. A
transaction still open at the end of a batch is held and emitted by the feed() that
sees its Commit. Streamed transactions (protocol >= 2) are spooled per top-level xid,
subtransaction aborts discard by position, and they are emitted at Stream Commit with
its LSN and timestamp. Prepared transactions (two-phase) are held per GID until Commit
Prepared and dropped at Rollback Prepared. Spools larger than ``max_pending_bytes``
spill to temporary files.

Memory: held-back work is bounded by ``max_pending_bytes`` per transaction (plus one
feed's input and output). A plain Begin..Commit still open at the end of a feed keeps
its decoded rows and a raw copy of its messages; once that copy is larger than
``max_pending_bytes`` (checked at the end of each feed) the decoded rows are dropped,
the transaction is held as raw messages only (spilling to a file in ``spill_dir``),
its later changes are checked as they arrive and spooled, and its Commit decodes it
(the rows decoded before the switch are decoded a second time). A transaction that
begins and commits inside one feed is never copied. A streamed or prepared
transaction's changes are checked as they arrive; their change-event rows are kept
from that check and appended at the commit (the typed tables are decoded from the
spool then), until the spool's memory and those rows pass ``max_pending_bytes``: then
the rows are dropped and the commit decodes them again.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

from .catalog import RelationCatalog, RelationVersion
from .errors import DecodeError

__all__ = ["Decoder", "ChangeSet", "LogicalMessageEvent", "decode_changes", "EVENT_SCHEMA"]


class LogicalMessageEvent(NamedTuple):
    """A logical decoding message (``pg_logical_emit_message``) with its context.

    Transactional messages carry the commit metadata of their transaction; the others
    (emitted immediately, outside any transaction) have None there.
    """

    message: object  # pgoutput_fast.LogicalMessage
    lsn: int
    commit_lsn: int | None
    commit_ts: int | None  # µs since the Unix epoch (as in the tables), or None
    xid: int | None
    origin: str | None


class ChangeSet:
    """The committed output of one ``Decoder.feed``.

    Attributes:
        events: ``pa.Table`` with the change-event schema (one row per change of any
            relation; values as PostgreSQL text in ``map<string,string>``), or None when
            the decoder was created with ``events=False``.
        table_versions: ``[(RelationVersion, pa.Table)]``: typed rows grouped by the
            relation version (schema) they were sent with, in first-seen order.
        messages: list of LogicalMessageEvent.
    """

    __slots__ = ("events", "table_versions", "messages", "_tables")

    def __init__(self, events, table_versions, messages):
        self.events = events
        self.table_versions = table_versions
        self.messages = messages
        self._tables = None

    @property
    def tables(self) -> dict:
        """``{"schema.table": pa.Table}`` of typed rows.

        When a relation changed schema inside the batch, its versions are concatenated
        with permissive promotion (added columns are null in older rows); a type change
        that cannot be promoted raises, and ``table_versions`` has each version with the
        exact schema it was sent with.
        """
        if self._tables is None:
            grouped: dict[str, list] = {}
            for version, table in self.table_versions:
                grouped.setdefault(version.qualified_name, []).append(table)
            out = {}
            for name, tables in grouped.items():
                if len(tables) == 1:
                    out[name] = tables[0]
                else:
                    try:
                        out[name] = pa.concat_tables(
                            [t.replace_schema_metadata(None) for t in tables],
                            promote_options="permissive",
                        ).replace_schema_metadata(tables[-1].schema.metadata)
                    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                        raise ValueError(
                            f"{name} changed schema incompatibly inside this batch; use "
                            f"ChangeSet.table_versions ({exc})"
                        ) from exc
            self._tables = out
        return self._tables

    @property
    def num_changes(self) -> int:
        if self.events is not None:
            return self.events.num_rows
        return sum(t.num_rows for _, t in self.table_versions)

    def __repr__(self):
        names = sorted({v.qualified_name for v, _ in self.table_versions})
        return f"ChangeSet({self.num_changes} changes, tables={names}, messages={len(self.messages)})"


def _impl():
    from . import _impl as impl  # the implementation chosen at import (native or python)

    return impl


class Decoder:
    """Stateful decoder of a pgoutput message stream into typed Arrow tables.

    Args:
        catalog: a RelationCatalog to start from (e.g. built from earlier segments), its
            JSON (``RelationCatalog.to_json()``) or dict form, or None to start empty.
            The decoder updates its own copy.
        events: build the generic change-event table (``ChangeSet.events``).
        tables: build the typed per-table output (``ChangeSet.tables``).
        binary_unknown: columns of types the decoder does not know are ``binary`` when
            True; when False/None they are ``string`` unless a binary value was sent.
        max_pending_bytes: size of the held-back raw messages of one transaction
            (streamed, prepared, or a plain one open across feeds) above which they
            spill to a temporary file (in ``spill_dir``); a plain transaction past it
            is also no longer held decoded (module doc).
        spill_dir: directory of the temporary spill files (None: the system default).
        threads: the threads one ``feed()`` may use. With both outputs and 2 or more,
            the change-event rows are written on a helper thread while the calling
            thread writes the typed tables of the same changes (the same output; on two
            cores a feed then takes about the time of the slower output alone, where
            one core takes the sum). 1: everything on the calling thread. None (the
            default): 2 when this process may run on two CPUs or more, else 1, or what
            ``PGOUTPUT_FAST_DECODER_THREADS`` says. A feed whose hand-overs to the
            helper save nothing (the cores busy with other work) goes on without it.
            Give 1 where the cores are already busy with other decoders
            (``decode_parallel`` does so for its pieces; the Spark reader's Decoders
            build one output each and so never use it).
    """

    def __init__(self, catalog: RelationCatalog | str | dict | None = None, *, events: bool = True,
                 tables: bool = True, binary_unknown: bool | None = None,
                 max_pending_bytes: int = 256 << 20, spill_dir: str | None = None,
                 threads: int | None = None):
        impl = _impl()
        if isinstance(catalog, str):
            catalog = RelationCatalog.from_json(catalog)
        elif isinstance(catalog, dict):
            catalog = RelationCatalog.from_dict(catalog)
        self._catalog = catalog.copy() if catalog is not None else RelationCatalog()
        self._core = impl.DecoderCore(self._catalog, events=events, tables=tables,
                                      binary_unknown=binary_unknown,
                                      max_pending_bytes=max_pending_bytes, spill_dir=spill_dir,
                                      threads=threads)
        self._batch_cls = impl.MessageBatch

    @property
    def catalog(self) -> RelationCatalog:
        return self._catalog

    @property
    def threads(self) -> int:
        """The threads a ``feed()`` uses (see ``threads`` above; the reference: 1)."""
        return self._core.threads

    def feed(self, messages, lsn=None) -> ChangeSet:
        """Decode the next messages of the stream (in stream order).

        ``messages``: pa.BinaryArray, LargeBinaryArray, ChunkedArray, or a sequence of
        bytes-like. ``lsn``: optional int64 array-like of the same length (the LSN of
        each message; 0 = unknown, shown as null).

        On bad input raises DecodeError (with ``message_index`` into this batch); the
        committed changes before the bad message are attached as ``exc.changes``.
        """
        batch = self._batch_cls()
        try:
            batch.add(messages, lsn)        # a batch rejected here changes nothing
            batch.feed_into(self._core)
        except DecodeError as exc:
            exc.changes = self._export()
            raise
        return self._export()

    def _export(self) -> ChangeSet:
        tables, events, msgs = self._core.export()
        return ChangeSet(events, tables, [LogicalMessageEvent(*m) for m in msgs])

    def pending(self) -> dict:
        """Held-back work after the last feed.

        ``streams`` / ``prepared``: spool size in bytes per top-level xid / GID (each
        message plus an 18-byte record header; a streamed change is kept without its
        4-byte xid). ``open_transaction``: xid of the
        Begin..Commit still open, or None; ``open_changes``: its changes so far;
        ``open_bytes``: size of its raw copy (same units; 0 when none is open);
        ``open_spooled``: True once it passed ``max_pending_bytes`` and is held as raw
        messages only. ``spilled_bytes``: bytes currently in spill files, all spools.
        """
        return self._core.pending_summary()


def decode_changes(messages, lsn=None, **kwargs) -> ChangeSet:
    """One-shot form of ``Decoder(**kwargs).feed(messages, lsn)``."""
    return Decoder(**kwargs).feed(messages, lsn)


def __getattr__(name):
    if name == "EVENT_SCHEMA":
        return _impl().EVENT_SCHEMA
    raise AttributeError(name)
