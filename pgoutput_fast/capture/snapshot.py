"""The initial snapshot: the rows every published table held when the slot was made,
copied inside the slot's exported snapshot and written to the capture directory ahead
of the stream, as synthetic pgoutput transactions.

How it goes (``initial_snapshot``)
----------------------------------

1. A checkpoint saying ``snapshot.state = "creating"`` (with the slot's name) is made
   durable *before* the slot exists, so that a crash right after ``CREATE`` is seen.
2. The slot is created over the replication connection with an exported snapshot
   (``CREATE_REPLICATION_SLOT s LOGICAL pgoutput (SNAPSHOT 'export')``; the older
   ``EXPORT_SNAPSHOT`` before PostgreSQL 15). The reply gives the consistent point
   (the LSN from which the slot decodes) and the snapshot's name. The checkpoint then
   says ``"copying"`` with both. The replication connection stays idle until the copy
   is over: an exported snapshot lives only until its connection runs another command.
3. ``--snapshot-workers`` ordinary connections each run ``BEGIN ISOLATION LEVEL
   REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '...'`` (with capture's session
   settings, ``protocol.SESSION_SETTINGS``). The first reads, inside the snapshot, what
   the publications publish (``pg_publication_tables``: tables, column lists, row
   filters, as PostgreSQL's table-sync worker reads them; a partitioned table published
   through its root is copied leaf by leaf under the root's name). Tables larger than
   a range are split by physical blocks (``ctid >= '(a,0)' AND ctid < '(b,0)'``: TID
   range scans).
4. Each task runs ``COPY (SELECT cols FROM ONLY t WHERE filter [AND ctid range]) TO
   STDOUT``: ``FORMAT binary`` in binary mode (a field is the type's send bytes, exactly
   what a binary TupleData column carries; a column whose type has no send function is
   selected as its output text and sent as ``'t'``, as pgoutput does), text COPY in
   text mode (unescaped: a field is then the output function's text, as pgoutput sends
   it). Each row becomes one Insert message: in C with the GIL released (``CopyRows``,
   ``src/snapshot_copy.pxi``, on psycopg2's own libpq), or by ``RowSink`` through
   ``copy_expert`` with ``PGOUTPUT_FAST_IMPL=python``.
5. A chunk of rows (at most ``chunk_bytes``) becomes one synthetic transaction:
   ``Begin`` (xid 0), the ``Type`` messages of the table's non-built-in column types,
   its ``Relation``, the Inserts, ``Commit``. Chunk ``k`` commits at ``base + k``, below
   the consistent point (``base = consistent_point - LSN_SPAN``), so that every
   snapshot row sorts by ``(commit_lsn, seq)`` before every streamed change (the slot
   sends only transactions that commit at or after its consistent point), and the
   chunks' commit LSNs grow in segment order. A segment holds at most
   ``SEGMENT_BYTES`` (16 MB) of messages, a chunk a quarter of that. Segments are
   encoded by encoder threads (Parquet, LZ4 unless ``compression`` says otherwise)
   straight into their temp files, hashed on the way and fsynced, consecutive ones in
   parallel while the COPY goes on, and one writer thread makes them durable in order
   (rename, directory fsync, manifest line), each followed by its checkpoint (still
   ``copying``), as in capture (``_Pipeline``, ``store.SegmentEncoder``,
   ``DirectoryWriter.add_written_segment``).
6. After the last segment is durable the checkpoint says ``"done"`` with
   ``durable_lsn`` the end of the last chunk and ``acked_lsn`` the consistent point
   (what the slot already holds). Only then is ``START_REPLICATION`` sent: nothing of
   the stream is received, let alone confirmed, before the snapshot is durable.

The decoder gives the rows of a transaction whose Begin carries xid 0 (no real
transaction has it) the op ``'r'`` (read, as Debezium) instead of ``'c'``.

Crash and restart (the rule)
----------------------------

An exported snapshot dies with its connection, so a snapshot cut short cannot be
resumed. While the checkpoint says ``"creating"`` or ``"copying"``, readers
(``iter_segments`` ...) see no segment at all, and no stream was ever started. A
restart then starts the snapshot again from scratch: it drops the slot (only when it
is not in use and its ``confirmed_flush_lsn`` is still the consistent point the
checkpoint recorded, or the checkpoint says ``"creating"``: nothing was ever
confirmed), writes a fresh checkpoint, removes the partial snapshot's segments and
manifest (the checkpoint proves no reader was shown them), creates the slot again and
copies everything again. A slot that moved is refused (exit 5), nothing changed.
"""

from __future__ import annotations

import os
import queue
import re
import struct
import threading
import time

from ..lsn import format_lsn, parse_lsn
from ..protocol import SESSION_SETTINGS
from .errors import CaptureError, DirectoryRefused, DurabilityError, ServerRefused
from .state import CaptureState

__all__ = ["SNAPSHOT_MODES", "LSN_SPAN", "SnapshotTable", "published_tables",
           "initial_snapshot", "snapshot_needed", "SnapshotSummary"]

SNAPSHOT_MODES = ("initial", "never", "only")
#: chunk k of a snapshot commits at ``consistent_point - LSN_SPAN + k``
LSN_SPAN = 1 << 24
#: a table is split into block ranges of about this many blocks (8 kB each) when
#: there is more than one worker
RANGE_BLOCKS = 4096
#: snapshot segments hold at most this many bytes of messages (and at most
#: --segment-size); a chunk (one transaction, one row group) at most a quarter of it
SEGMENT_BYTES = 16 << 20
#: user-defined types start here (PostgreSQL's FirstGenbkiObjectId): pgoutput sends a
#: Type message for them
FIRST_USER_OID = 10000

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BIN_HEADER = b"PGCOPY\n\xff\r\n\x00"


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def snapshot_mode(cfg) -> str:
    mode = getattr(cfg, "snapshot", None)
    if mode is None:
        return "initial" if cfg.create_slot else "never"
    if mode not in SNAPSHOT_MODES:
        raise CaptureError(f"--snapshot {mode!r}: choose one of {', '.join(SNAPSHOT_MODES)}")
    return mode


def snapshot_needed(cfg, state: CaptureState | None) -> bool:
    """Whether this start must copy a snapshot: ``initial``/``only`` and a directory
    with no completed snapshot (new, or one cut short)."""
    mode = snapshot_mode(cfg)
    if mode == "never":
        return False
    if state is None:
        return True
    snap = state.snapshot
    return snap is not None and snap.get("state") != "done"


def snapshot_incomplete(state: CaptureState | None) -> bool:
    return (state is not None and state.snapshot is not None
            and state.snapshot.get("state") != "done")


# ======================================================================================
# what the publications publish
# ======================================================================================

class SnapshotTable:
    """One published table as the stream shows it: the relid and name its Relation
    message carries (the root's when published through it), its published columns,
    the row filter, and the relations whose rows make it up (``sources``)."""

    def __init__(self, relid, schema, name, replident):
        self.relid = relid
        self.schema = schema
        self.name = name
        self.replident = replident
        self.columns: list = []     # (name, type_oid, typmod, flags, fmt 't'|'b')
        self.types: list = []       # (oid, nspname, typname): Type messages
        self.rowfilter = None
        self.sources: list = []     # (oid, qualified name, blocks)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def blocks(self) -> int:
        return sum(s[2] for s in self.sources)

    def relation_message(self) -> bytes:
        from ..encode import encode_message
        from ..messages import Relation, RelationColumn

        return encode_message(Relation(
            self.relid, "" if self.schema == "pg_catalog" else self.schema, self.name,
            self.replident,
            tuple(RelationColumn(flags, name, oid, typmod)
                  for name, oid, typmod, flags, _fmt in self.columns)))

    def type_messages(self) -> list:
        from ..encode import encode_message
        from ..messages import Type

        return [encode_message(Type(oid, nsp, name)) for oid, nsp, name in self.types]

    def select_list(self, binary: bool) -> str:
        out = []
        for name, _oid, _tm, _flags, fmt in self.columns:
            c = _quote_ident(name)
            if binary and fmt == "t":
                # no send function: the output function's text, as pgoutput falls back to
                out.append(f"CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END")
            else:
                out.append(c)
        return ", ".join(out)     # empty for a table without columns (SELECT FROM t)

    def to_json(self) -> dict:
        return {"table": self.qualified, "relid": self.relid, "blocks": self.blocks,
                "sources": [s[1] for s in self.sources]}


def published_tables(cur, pubs: list, version_num: int, binary: bool) -> list:
    """The tables the publications publish, read in the current transaction (run it
    inside the exported snapshot: the catalog is then the snapshot's)."""
    if version_num >= 150000:
        cur.execute("SELECT DISTINCT schemaname, tablename, attnames, rowfilter "
                    "FROM pg_publication_tables WHERE pubname = ANY(%s)", (list(pubs),))
    else:
        cur.execute("SELECT DISTINCT schemaname, tablename, NULL::name[], NULL::text "
                    "FROM pg_publication_tables WHERE pubname = ANY(%s)", (list(pubs),))
    grouped: dict = {}
    for schema, table, attnames, rowfilter in cur.fetchall():
        g = grouped.setdefault((schema, table), {"cols": set(), "all": False, "filters": [],
                                                 "unfiltered": False})
        if attnames is None:
            g["all"] = True
        else:
            g["cols"].update(attnames)
        if rowfilter is None:
            g["unfiltered"] = True
        else:
            g["filters"].append(rowfilter)
    out = []
    for (schema, table), g in sorted(grouped.items()):
        cur.execute("SELECT c.oid, c.relkind, c.relreplident FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                    (schema, table))
        row = cur.fetchone()
        if row is None:
            continue
        oid, relkind, replident = row
        t = SnapshotTable(int(oid), schema, table, replident)
        if not g["unfiltered"] and g["filters"]:
            t.rowfilter = " OR ".join(f"({f})" for f in g["filters"])
        gen = "AND a.attgenerated = ''" if version_num >= 120000 else ""
        cur.execute(
            "SELECT a.attname, a.atttypid, a.atttypmod, tp.typsend::oid <> 0 FROM pg_attribute a "
            f"JOIN pg_type tp ON tp.oid = a.atttypid WHERE a.attrelid = %s AND a.attnum > 0 "
            f"AND NOT a.attisdropped {gen} ORDER BY a.attnum", (oid,))
        cols = cur.fetchall()
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s AND ((%s = 'd' AND i.indisprimary) "
            "OR (%s = 'i' AND i.indisreplident))", (oid, replident, replident))
        keys = {r[0] for r in cur.fetchall()}
        user_types = []
        for name, typoid, typmod, has_send in cols:
            if not g["all"] and name not in g["cols"]:
                continue
            flags = 1 if (replident == "f" or name in keys) else 0
            t.columns.append((name, int(typoid), int(typmod), flags, "b" if has_send else "t"))
            if typoid >= FIRST_USER_OID and typoid not in user_types:
                user_types.append(typoid)
        for typoid in user_types:
            # pgoutput's Type message: the column's type OID, the base type's name
            cur.execute("SELECT n.nspname, b.typname FROM pg_type t JOIN pg_type b ON b.oid = "
                        "CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END "
                        "JOIN pg_namespace n ON n.oid = b.typnamespace WHERE t.oid = %s", (typoid,))
            nsp, name = cur.fetchone()
            t.types.append((int(typoid), "" if nsp == "pg_catalog" else nsp, name))
        if relkind == "p":
            cur.execute("SELECT c.oid, format('%%I.%%I', n.nspname, c.relname), "
                        "pg_relation_size(c.oid) / current_setting('block_size')::int "
                        "FROM pg_partition_tree(%s) pt JOIN pg_class c ON c.oid = pt.relid "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE pt.isleaf AND c.relkind = 'r' ORDER BY 2", (oid,))
        else:
            cur.execute("SELECT c.oid, format('%%I.%%I', n.nspname, c.relname), "
                        "pg_relation_size(c.oid) / current_setting('block_size')::int "
                        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.oid = %s", (oid,))
        t.sources = [(int(o), q, int(b)) for o, q, b in cur.fetchall()]
        out.append(t)
    return out


def plan_tasks(tables: list, workers: int, range_blocks: int = RANGE_BLOCKS) -> list:
    """``[(table index, source name, first block or None, end block or None)]``,
    largest first (so that the last task to finish is a short one). A source is split
    into block ranges only with more than one worker; the last range is open-ended."""
    tasks: list = []
    for ti, t in enumerate(tables):
        for _oid, name, blocks in t.sources:
            if workers > 1 and blocks > range_blocks:
                lo = 0
                while lo < blocks:
                    hi = lo + range_blocks
                    tasks.append((ti, name, lo, hi if hi < blocks else None, min(hi, blocks) - lo))
                    lo = hi
            else:
                tasks.append((ti, name, None, None, blocks))
    tasks.sort(key=lambda x: -x[4])
    return [t[:4] for t in tasks]


def copy_sql(table: SnapshotTable, source: str, lo, hi, binary: bool) -> str:
    fmt = " (FORMAT binary)" if binary else ""
    if (not table.rowfilter and lo is None and table.columns
            and not (binary and any(c[4] == "t" for c in table.columns))):
        # the whole table: COPY t (cols), as the table-sync worker does (no executor;
        # COPY TO never reads inheritance children or partitions)
        cols = ", ".join(_quote_ident(c[0]) for c in table.columns)
        return f"COPY {source} ({cols}) TO STDOUT{fmt}"
    where = []
    if table.rowfilter:
        where.append(f"({table.rowfilter})")
    if lo is not None:
        where.append(f"ctid >= '({lo},0)'::tid")
        if hi is not None:
            where.append(f"ctid < '({hi},0)'::tid")
    sql = f"SELECT {table.select_list(binary)} FROM ONLY {source}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return f"COPY ({sql}) TO STDOUT{fmt}"


# ======================================================================================
# COPY rows -> Insert messages
# ======================================================================================

_UNESCAPE = {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}
_ESCAPE_RE = re.compile(rb"\\(.)", re.S)


def _unescape(m):
    c = m.group(1)
    return _UNESCAPE.get(c, c)


class RowSink:
    """The file object ``copy_expert`` writes to: turns COPY rows into Insert messages
    of one table and hands them on in chunks (``emit(table_index, messages, nbytes)``).
    Binary COPY (``binary=True``) or text COPY; rows may arrive split or joined in any
    way (they are buffered until whole)."""

    def __init__(self, table_index: int, table: SnapshotTable, binary: bool, chunk_bytes: int,
                 emit):
        self.table_index = table_index
        self.ncols = len(table.columns)
        self.prefix = b"I" + _U32.pack(table.relid) + b"N" + _I16.pack(self.ncols)
        self.fmts = [(b"t" if (not binary or c[4] == "t") else b"b") for c in table.columns]
        self.binary = binary
        self.chunk_bytes = chunk_bytes
        self.emit = emit
        self.pending = b""
        self.header_done = not binary
        self.finished = False
        self.rows = 0
        self.bytes = 0
        self.msgs: list = []
        self.msg_bytes = 0

    # file protocol
    def write(self, data):
        buf = self.pending + bytes(data) if self.pending else bytes(data)
        used = self._rows_binary(buf) if self.binary else self._rows_text(buf)
        self.pending = buf[used:]
        if self.msg_bytes >= self.chunk_bytes:
            self.flush()
        return len(data)

    def flush(self):
        if self.msgs:
            from .columns import MessageColumns

            cols = MessageColumns()
            cols.datas, self.msgs = self.msgs, []
            cols.lsns = [0] * len(cols.datas)
            n, self.msg_bytes = self.msg_bytes, 0
            self.emit(self.table_index, cols, n)

    def close(self):
        if self.pending.strip(b"\n") if not self.binary else self.pending:
            raise CaptureError(f"the COPY output ended inside a row ({len(self.pending)} bytes left)")
        if self.binary and not self.finished and self.header_done:
            raise CaptureError("the binary COPY output ended without its trailer")
        self.flush()

    def _rows_binary(self, buf) -> int:
        pos = 0
        n = len(buf)
        if not self.header_done:
            if n < 19:
                return 0
            if buf[:11] != _BIN_HEADER:
                raise CaptureError("the COPY output is not PostgreSQL's binary format")
            ext = _I32.unpack_from(buf, 15)[0]
            if n < 19 + ext:
                return 0
            pos = 19 + ext
            self.header_done = True
        unpack = _I32.unpack_from
        prefix = self.prefix
        fmts = self.fmts
        ncols = self.ncols
        out = self.msgs
        while pos + 2 <= n:
            nf = _I16.unpack_from(buf, pos)[0]
            if nf == -1:
                self.finished = True
                return pos + 2
            if nf != ncols:
                raise CaptureError(f"COPY sent a row of {nf} columns, the table has {ncols}")
            p = pos + 2
            parts = [prefix]
            ok = True
            for i in range(nf):
                if p + 4 > n:
                    ok = False
                    break
                ln = unpack(buf, p)[0]
                if ln < 0:
                    parts.append(b"n")
                    p += 4
                else:
                    if p + 4 + ln > n:
                        ok = False
                        break
                    parts.append(fmts[i])
                    parts.append(buf[p:p + 4 + ln])
                    p += 4 + ln
            if not ok:
                break
            msg = b"".join(parts)
            out.append(msg)
            self.msg_bytes += len(msg)
            self.rows += 1
            self.bytes += p - pos
            pos = p
        return pos

    def _rows_text(self, buf) -> int:
        end = buf.rfind(b"\n") + 1
        if end == 0:
            return 0
        prefix = self.prefix
        ncols = self.ncols
        pack = _I32.pack
        out = self.msgs
        sub = _ESCAPE_RE.sub
        for line in buf[:end - 1].split(b"\n"):
            if ncols == 0:
                fields = []
            else:
                fields = line.split(b"\t")
            if len(fields) != ncols:
                raise CaptureError(f"COPY sent a row of {len(fields)} columns, the table has {ncols}")
            parts = [prefix]
            for f in fields:
                if f == b"\\N":
                    parts.append(b"n")
                    continue
                if b"\\" in f:
                    f = sub(_unescape, f)
                parts.append(b"t")
                parts.append(pack(len(f)))
                parts.append(f)
            msg = b"".join(parts)
            out.append(msg)
            self.msg_bytes += len(msg)
            self.rows += 1
        self.bytes += end
        return end


# ======================================================================================
# the copy
# ======================================================================================

class SnapshotSummary:
    def __init__(self):
        self.tables: dict = {}      # name -> {"rows", "bytes", "seconds", "blocks"}
        self.rows = 0
        self.bytes = 0              # COPY bytes received
        self.message_bytes = 0      # Insert messages written
        self.chunks = 0
        self.segments = 0
        self.seconds = 0.0
        self.consistent_point = 0
        self.snapshot_name = None
        self.workers = 0
        self.encode_seconds = 0.0   # the encoder threads in Parquet encoding and hashing
        self.write_seconds = 0.0    # the writer thread in writing and fsyncing segments

    def to_json(self) -> dict:
        return {"consistent_point": format_lsn(self.consistent_point), "rows": self.rows,
                "copy_bytes": self.bytes, "message_bytes": self.message_bytes,
                "transactions": self.chunks, "segments": self.segments,
                "seconds": round(self.seconds, 3), "workers": self.workers,
                "encode_seconds": round(self.encode_seconds, 3),
                "write_seconds": round(self.write_seconds, 3),
                "rows_per_s": round(self.rows / self.seconds) if self.seconds else None,
                "tables": self.tables}


def _connect_worker(dsn, application_name):
    """A worker's connection with capture's session settings (not yet in the snapshot:
    ``_enter_snapshot``)."""
    import psycopg2

    conn = psycopg2.connect(dsn, application_name=application_name)
    try:
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("; ".join(f"SET {name} = '{value}'" for name, value in SESSION_SETTINGS))
    except BaseException:
        conn.close()
        raise
    return conn, cur


def _enter_snapshot(cur, snapshot_name):
    cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))


class _WorkerConnections:
    """The workers' connections, opened in a thread while the checkpoint and the slot
    are written and created (they join the exported snapshot afterwards: a connection
    takes as long as a few fsyncs); and the guard of the snapshot's horizon
    (``hold_horizon``)."""

    def __init__(self, dsn, n):
        self.conns: list = []
        self.error: BaseException | None = None
        self._dsn = dsn
        self._guard = None
        self._thread = threading.Thread(target=self._open, args=(dsn, n), daemon=True,
                                        name="pgoutput-fast-snapshot-connect")
        self._thread.start()

    def _open(self, dsn, n):
        try:
            for i in range(n):
                self.conns.append(_connect_worker(dsn, f"pgoutput-fast-snapshot-{i + 1}"))
        except BaseException as exc:
            self.error = exc

    def take(self) -> list:
        """The connections (the caller closes them); raises the first failure."""
        self._thread.join()
        conns, self.conns = self.conns, []
        if self.error is not None:
            for conn, _cur in conns:
                conn.close()
            raise self.error
        return conns

    def hold_horizon(self):
        """Before the slot is created: a transaction on a connection of its own that holds
        a snapshot (``REPEATABLE READ``, one statement), so that no backend can prune a
        row version the exported snapshot will need until the workers have imported it
        (``release_horizon``). The snapshot exported by ``CREATE_REPLICATION_SLOT`` is
        held by the walsender alone until then, and PostgreSQL 17 lets go of the slot's
        hold on the horizon (the slot's ``effective_xmin``) before it counts the
        walsender's own ``xmin`` again (``ReplicationSlotRelease`` clears
        ``PROC_IN_LOGICAL_DECODING`` last): a horizon computed by another backend in
        between may pass the snapshot's ``xmin`` and let it prune, for as long as it
        keeps that horizon, a row version that only the snapshot still sees. The guard's
        snapshot is older than the exported one, so its ``xmin`` is not later. Seen once
        in CI as a row missing from a snapshot's COPY (an updated row of a table under
        constant updates; neither its old nor its new version was copied)."""
        conn, cur = _connect_worker(self._dsn, "pgoutput-fast-snapshot-guard")
        try:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cur.execute("SELECT 1")           # takes the transaction's snapshot
        except BaseException:
            conn.close()
            raise
        self._guard = (conn, cur)

    def release_horizon(self):
        """The workers hold the exported snapshot now (or the copy is over): the guard
        goes."""
        guard, self._guard = self._guard, None
        if guard is not None:
            conn, cur = guard
            try:
                # the server lets go of the guard's xmin here (an autocommit connection's
                # conn.rollback() sends nothing; a closed one's backend exits later)
                cur.execute("ROLLBACK")
            except Exception:
                pass
            try:
                conn.close()
            except Exception:
                pass

    def close(self):
        self.release_horizon()
        self._thread.join()
        for conn, _cur in self.conns:
            try:
                conn.close()
            except Exception:
                pass
        self.conns = []


def create_slot_exported(stream, slot: str, two_phase: bool, temporary: bool = False) -> tuple:
    """Create ``slot`` over the replication connection with an exported snapshot;
    ``(consistent_point, snapshot_name)``. The connection must then stay idle until
    every worker has imported the snapshot. ``temporary``: the slot lives only as long
    as the connection (a backfill's)."""
    import psycopg2

    q = _quote_ident(slot) + (" TEMPORARY" if temporary else "")
    if stream.version_num >= 150000:
        opts = "SNAPSHOT 'export'" + (", TWO_PHASE true" if two_phase else "")
        sql = f"CREATE_REPLICATION_SLOT {q} LOGICAL pgoutput ({opts})"
    else:
        if two_phase:
            raise CaptureError("--two-phase needs PostgreSQL 15+")
        sql = f"CREATE_REPLICATION_SLOT {q} LOGICAL pgoutput EXPORT_SNAPSHOT"
    cur = stream.conn.cursor()
    try:
        cur.execute(sql)
        _name, point, snapshot_name, _plugin = cur.fetchone()
    except psycopg2.errors.DuplicateObject:
        raise ServerRefused(f"replication slot {slot!r} already exists: a snapshot needs a slot "
                            "created with it. Drop the slot (pg_drop_replication_slot), or pass "
                            "--snapshot never to stream without one") from None
    finally:
        cur.close()
    return parse_lsn(point), snapshot_name


def _reset_directory(out, state: CaptureState, file_mode, progress,
                     snapshot: dict | None = None) -> CaptureState:
    """Start a cut-short snapshot again: a fresh checkpoint (``creating``) first, then
    the partial snapshot's segments and manifest go (the checkpoint proved them never
    readable and nothing confirmed)."""
    from .store import MANIFEST, fsync_dir, segment_seq, write_checkpoint

    fresh = CaptureState()
    fresh.capture_id = state.capture_id
    fresh.system_identifier = state.system_identifier
    fresh.database = state.database
    fresh.slot = state.slot
    fresh.publications = state.publications
    fresh.options = state.options
    fresh.snapshot = snapshot or {"state": "creating", "slot": state.slot}
    write_checkpoint(out, fresh, file_mode)
    removed = []
    for name in sorted(os.listdir(out)):
        if segment_seq(name) is not None or name == MANIFEST or (
                name.startswith(".") and name.endswith(".parquet.tmp")):
            os.unlink(os.path.join(out, name))
            removed.append(name)
    fsync_dir(out)
    if removed:
        progress.event("snapshot_reset", removed=len(removed),
                       note="the snapshot was cut short; it starts again")
    return fresh


def _drop_stale_slot(stream, cfg, snap: dict, progress):
    """The rule for a snapshot cut short: drop the slot only when nothing was ever
    confirmed from it (its confirmed_flush_lsn is still the consistent point the
    checkpoint recorded; or the slot was being created)."""
    info = stream.slot_info(cfg.slot)
    if info is None:
        return
    confirmed, _tp, _plugin, _db, pid = info
    point = snap.get("consistent_point")
    # the walsender of a capture just killed may not have exited yet
    deadline = time.monotonic() + cfg.slot_busy_timeout
    while pid is not None and pid != stream.backend_pid and time.monotonic() < deadline:
        time.sleep(0.2)
        info = stream.slot_info(cfg.slot)
        if info is None:
            return
        confirmed, _tp, _plugin, _db, pid = info
    if pid is not None and pid != stream.backend_pid:
        raise ServerRefused(f"replication slot {cfg.slot!r} is in use by another process (pid "
                            f"{pid}); the snapshot this directory holds was cut short and must be "
                            "copied again with a new slot: stop that process and start capture again")
    if snap.get("state") != "creating" and (point is None or confirmed != point):
        raise DirectoryRefused(
            f"{cfg.out}: its snapshot was cut short, and slot {cfg.slot!r} has moved since "
            f"(confirmed {format_lsn(confirmed)}, created at {format_lsn(point or 0)}): it is not "
            "the slot this snapshot was taken with. Nothing was changed: drop the slot and "
            "capture into a new directory")
    stream.drop_slot(cfg.slot)
    progress.event("dropped_slot", slot=cfg.slot,
                   note="its exported snapshot died with the capture that copied it; "
                        "a new slot and snapshot follow")


def initial_snapshot(cfg, stream, rec, pubs, options, progress, stop_event, result,
                     created: dict):
    """Create the slot with an exported snapshot and copy every published table into
    the capture directory (module docstring). Returns the durable ``CaptureState``
    (``snapshot.state == "done"``), or None when stopped (nothing confirmed; the next
    start copies again)."""
    from .store import new_capture_id

    out = os.fspath(cfg.out)
    state = rec.state
    if state is None:
        if stream.slot_info(cfg.slot) is not None:
            raise ServerRefused(
                f"replication slot {cfg.slot!r} already exists, and --snapshot "
                f"{snapshot_mode(cfg)} needs a slot created with its snapshot: drop it "
                "(pg_drop_replication_slot), use another --slot, or pass --snapshot never "
                "(the existing rows are then not copied)")
        state = CaptureState()
        state.capture_id = new_capture_id()
    else:
        _drop_stale_slot(stream, cfg, state.snapshot or {}, progress)
    state.system_identifier, state.database = stream.system_identifier, stream.database
    state.slot = cfg.slot
    state.publications = list(pubs)
    state.options = options.as_dict()
    workers = _WorkerConnections(cfg.dsn, max(1, int(getattr(cfg, "snapshot_workers", 1) or 1)))
    try:
        return _create_and_copy(cfg, stream, state, out, options, progress, stop_event, result,
                                created, workers)
    finally:
        workers.close()


def _create_and_copy(cfg, stream, state, out, options, progress, stop_event, result, created,
                     workers):
    from .store import checkpoint_or_fail

    try:
        state = _reset_directory(out, state, cfg.file_mode, progress)
    except OSError as exc:
        raise DurabilityError(f"writing the checkpoint of {out} failed: {exc.strerror or exc}; "
                              "nothing was created on the server") from None
    workers.hold_horizon()
    point, snapshot_name = create_slot_exported(stream, cfg.slot, cfg.two_phase)
    created["slot"] = cfg.slot
    progress.event("snapshot_slot", slot=cfg.slot, consistent_point=format_lsn(point),
                   snapshot=snapshot_name)
    ok = False
    try:
        state.snapshot = {"state": "copying", "slot": cfg.slot, "consistent_point": point,
                          "snapshot_name": snapshot_name, "started": round(time.time(), 3)}
        state.acked_lsn = point
        checkpoint_or_fail(out, state, cfg.file_mode, "nothing was confirmed")
        done = _copy(cfg, stream, state, point, snapshot_name, options, progress, stop_event,
                     result, workers)
        ok = done is not None
        return done
    finally:
        if not ok:
            # the snapshot dies with this connection: drop the slot now (nothing was
            # confirmed from it), the next start copies again with a new one
            try:
                stream.drop_slot(cfg.slot)
                progress.event("dropped_slot", slot=cfg.slot,
                               note="the snapshot did not finish; the next start copies again")
                created.pop("slot", None)
            except Exception:
                pass


def _copy(cfg, stream, state, point, snapshot_name, options, progress, stop_event, result,
          workers, only_tables=None):
    """Copy the published tables (or ``only_tables``, qualified names, each of which must
    be published: a backfill, ``capture/backfill.py``) inside the exported snapshot, on
    ``workers``' connections (``_WorkerConnections``). With ``only_tables`` each table's
    rows are preceded by a synthetic Truncate of it, so that applying them replaces
    whatever the table held."""
    import pyarrow as pa

    from .columns import MessageColumns
    from .store import SNAPSHOT_COMPRESSION, DirectoryWriter
    from ..encode import encode_message
    from ..messages import Begin, Commit, Truncate
    from .stream import now_pg_us

    out = os.fspath(cfg.out)
    binary = bool(options.binary)
    nworkers = max(1, int(getattr(cfg, "snapshot_workers", 1) or 1))
    summary = SnapshotSummary()
    summary.consistent_point = point
    summary.snapshot_name = snapshot_name
    summary.workers = nworkers
    t0 = time.monotonic()
    conns = workers.take()
    try:
        for _conn, cur in conns:
            _enter_snapshot(cur, snapshot_name)
        workers.release_horizon()             # the workers' snapshots hold it now
        tables = published_tables(conns[0][1], state.publications, stream.version_num, binary)
        if only_tables is not None:
            tables = _only(tables, only_tables, state.publications)
    except BaseException:
        for conn, _cur in conns:
            conn.close()
        raise
    tasks = plan_tasks(tables, nworkers, getattr(cfg, "snapshot_range_blocks", None) or RANGE_BLOCKS)
    progress.event("snapshot_start", tables=len(tables), tasks=len(tasks), workers=nworkers,
                   blocks=sum(t.blocks for t in tables), consistent_point=format_lsn(point),
                   binary=binary)
    stats = {t.qualified: {"rows": 0, "bytes": 0, "blocks": t.blocks, "tasks": 0,
                           "tasks_done": 0, "seconds": None} for t in tables}
    for ti, *_rest in tasks:
        stats[tables[ti].qualified]["tasks"] += 1
    started: dict = {}
    # memory: at most 3 chunks per worker (2 queued, 1 being filled) plus the
    # transactions in the pipeline (``pending_bytes``: being encoded or written), about
    # --memory-budget in all. Segments and chunks are smaller than the stream's, so
    # that consecutive segments are encoded at the same time and the last ones, after
    # the COPY ends, are short
    encoders = max(1, min(os.cpu_count() or 1, nworkers + 1))
    pending_bytes = max(128 << 10, cfg.memory_bytes // 2)
    segment_bytes = max(64 << 10, min(cfg.segment_bytes, SEGMENT_BYTES,
                                      pending_bytes // (encoders + 1)))
    chunk_bytes = max(64 << 10, min(cfg.chunk_bytes, segment_bytes // 4,
                                    cfg.memory_bytes // (8 * nworkers)))
    chunks: queue.Queue = queue.Queue(maxsize=2 * nworkers)
    task_q: queue.Queue = queue.Queue()
    for t in tasks:
        task_q.put(t)
    errors: list = []
    abort = threading.Event()
    lock = threading.Lock()

    def emit(ti, msgs, nbytes):
        while True:
            if abort.is_set():
                raise _Aborted()
            try:
                chunks.put((ti, msgs, nbytes), timeout=0.2)
                return
            except queue.Full:
                continue

    import psycopg2

    native = _native_copy(stream)

    def worker(conn, cur):
        try:
            while not abort.is_set():
                try:
                    ti, source, lo, hi = task_q.get_nowait()
                except queue.Empty:
                    break
                table = tables[ti]
                with lock:
                    started.setdefault(table.qualified, time.monotonic())
                sql = copy_sql(table, source, lo, hi, binary)
                if native is not None:
                    rows, nbytes = _copy_native(native, conn, table, ti, sql, binary,
                                                chunk_bytes, emit)
                else:
                    sink = RowSink(ti, table, binary, chunk_bytes, emit)
                    try:
                        cur.copy_expert(sql, sink, size=1 << 16)
                    except psycopg2.Error as exc:
                        raise _copy_failed(table, str(exc), conn) from None
                    sink.close()
                    rows, nbytes = sink.rows, sink.bytes
                with lock:
                    st = stats[table.qualified]
                    st["rows"] += rows
                    st["bytes"] += nbytes
                    st["tasks_done"] += 1
                    if st["tasks_done"] == st["tasks"]:
                        st["seconds"] = round(time.monotonic() - started[table.qualified], 3)
                        chunks.put(("table_done", table.qualified, None))
        except _Aborted:
            pass
        except BaseException as exc:
            errors.append(exc)
            abort.set()
        finally:
            chunks.put(("worker_done", None, None))

    threads = [threading.Thread(target=worker, args=c, daemon=True,
                                name=f"pgoutput-fast-snapshot-{i + 1}")
               for i, c in enumerate(conns)]
    for th in threads:
        th.start()

    compression = cfg.compression or SNAPSHOT_COMPRESSION
    writer = DirectoryWriter(out, state, file_mode=cfg.file_mode, compression=compression,
                             metadata={"slot": cfg.slot, "options": options.as_dict(),
                                       "server_version_num": stream.version_num,
                                       "snapshot": {"consistent_point": point}})
    writer.note_confirmable(state.confirmable_lsn)
    pipe = _Pipeline(writer, compression, encoders, pending_bytes, abort, stop_event, errors,
                     summary)
    base = point - min(LSN_SPAN, point - 1)
    commit_ts = now_pg_us()
    rel_msgs = [None] * len(tables)
    seq = state.last_segment + 1
    seg_bytes = 0
    seg_open = False
    next_ordinal = state.next_ordinal
    chunk_no = 0
    live = len(threads)
    last_tick = time.monotonic()
    new_cols = native[0].MessageColumns if native is not None else MessageColumns
    delay = float(getattr(cfg, "snapshot_chunk_delay", 0) or 0)   # tests only
    try:
        if only_tables is not None:
            # a backfill: first, one transaction per table holding a Truncate of it (the
            # table's rows then replace what it held, also when it has none)
            for ti, t in enumerate(tables):
                lsn = base + chunk_no
                chunk_no += 1
                first = t.type_messages() + [t.relation_message()]
                rel_msgs[ti] = first
                txn = new_cols()
                txn.append(lsn, encode_message(Begin(lsn, commit_ts, 0)))
                for m in first:
                    txn.append(0, m)
                txn.append(0, encode_message(Truncate(0, (t.relid,))))
                txn.append(lsn, encode_message(Commit(0, lsn, lsn + 1, commit_ts)))
                n = len(txn)
                columns = [pa.chunked_array([a]) for a in txn.take_arrays(next_ordinal)]
                if not pipe.add(seq, columns, 0):
                    break     # aborted
                seg_open = True
                next_ordinal += n
                state.durable_lsn = lsn + 1
                state.transactions += 1
                summary.chunks += 1
        while live:
            if stop_event.is_set() and not abort.is_set():
                abort.set()
            try:
                item = chunks.get(timeout=0.2)
            except queue.Empty:
                continue
            ti, msgs, nbytes = item
            if ti == "worker_done":
                live -= 1
                continue
            if ti == "table_done":
                st = stats[msgs]
                progress.event("snapshot_table", table=msgs, rows=st["rows"], bytes=st["bytes"],
                               blocks=st["blocks"], seconds=st["seconds"])
                continue
            if abort.is_set():
                continue
            if chunk_no >= point - base:
                raise CaptureError("the snapshot needs more transactions than fit below the "
                                   "consistent point; raise --memory-budget")
            lsn = base + chunk_no
            chunk_no += 1
            if rel_msgs[ti] is None:
                t = tables[ti]
                rel_msgs[ti] = t.type_messages() + [t.relation_message()]
            # the transaction as three runs of arrays, the Inserts' without a copy (the
            # worker's buffers move to Arrow); the Inserts keep LSN 0 (no WAL record of
            # their own: _lsn is null)
            head = new_cols()
            head.append(lsn, encode_message(Begin(lsn, commit_ts, 0)))
            for m in rel_msgs[ti]:
                head.append(0, m)
            tail = new_cols()
            tail.append(lsn, encode_message(Commit(0, lsn, lsn + 1, commit_ts)))
            nh, n = len(head), len(head) + len(msgs) + 1
            parts = [head.take_arrays(next_ordinal), msgs.take_arrays(next_ordinal + nh),
                     tail.take_arrays(next_ordinal + n - 1)]
            del msgs
            columns = [pa.chunked_array([p[i] for p in parts]) for i in range(3)]
            del parts
            if not pipe.add(seq, columns, nbytes):
                continue      # aborted
            seg_open = True
            next_ordinal += n
            seg_bytes += nbytes
            summary.chunks += 1
            summary.message_bytes += nbytes
            state.durable_lsn = lsn + 1
            state.transactions += 1
            if delay:
                time.sleep(delay)
            if seg_bytes >= segment_bytes:
                state.next_ordinal = next_ordinal
                pipe.close(seq, state.copy())
                seq += 1
                seg_bytes = 0
                seg_open = False
            now = time.monotonic()
            if now - last_tick >= progress.interval:
                last_tick = now
                _tick(progress, stats, t0)
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        if abort.is_set():
            pipe.finish()
            writer.discard()
            progress.event("snapshot_stopped",
                           note="stopped before the snapshot was complete; nothing was "
                                "confirmed, the next start copies it again")
            return None
        if seg_open:
            state.next_ordinal = next_ordinal
            pipe.close(seq, state.copy())
        # every segment written, fsynced and in the (fsynced) manifest
        pipe.finish()
        if errors:
            raise errors[0]
        for conn, _cur in conns:
            try:
                conn.rollback()
            except Exception:
                pass
        summary.seconds = time.monotonic() - t0
        for name, st in stats.items():
            summary.tables[name] = {k: st[k] for k in ("rows", "bytes", "blocks", "seconds")}
            summary.rows += st["rows"]
            summary.bytes += st["bytes"]
        # the snapshot counts only now, with every segment durable
        state = state.copy()
        state.next_ordinal = next_ordinal
        state.acked_lsn = point
        snap = dict(state.snapshot)
        snap.update(state="done", finished=round(time.time(), 3),
                    summary=summary.to_json())
        state.snapshot = snap
        state = writer.checkpoint(state)
        result.segments += summary.segments
        result.messages += next_ordinal
        result.transactions = state.transactions
        result.snapshot = summary.to_json()
        progress.event("snapshot_done", **summary.to_json())
        return state
    except BaseException:
        abort.set()
        pipe.finish()
        writer.discard()
        raise
    finally:
        abort.set()
        # unblock workers waiting on a full queue, then close their connections
        while any(th.is_alive() for th in threads):
            try:
                chunks.get(timeout=0.05)
            except queue.Empty:
                pass
        for conn, _cur in conns:
            try:
                conn.close()
            except Exception:
                pass


def _only(tables: list, names, pubs) -> list:
    """The published tables named ``names`` (``schema.table``), in that order; a name
    the publications do not publish is refused."""
    by_name = {t.qualified: t for t in tables}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ServerRefused(
            f"{', '.join(missing)}: not published by {', '.join(pubs)} (as of the backfill's "
            "snapshot): add it first (ALTER PUBLICATION ... ADD TABLE ...), then take the "
            "backfill; a table published through its partitioned root is named by the root")
    return [by_name[n] for n in names]


class _Pipeline:
    """The snapshot's segments, encoded in parallel and written in order.

    The copy loop ``add``s each transaction (a row group) to segment ``seq`` and
    ``close``s the segment when it is full. Segment ``seq`` is encoded by encoder
    thread ``seq % encoders`` (``store.SegmentEncoder``: Parquet, page checksums,
    written to the segment's temp file as it is encoded and hashed on the way, fsynced
    when closed; pyarrow, hashlib and the writes run without the GIL), so consecutive
    segments are encoded and written at the same time, while the COPY goes on. One
    writer thread takes the closed segments in order and makes each durable
    (``DirectoryWriter.add_written_segment``: rename, directory fsync, manifest line
    fsynced) and then the checkpoint given to ``close`` (still ``copying``, as
    capture's after each segment; skipped when the next segment or the end is already
    queued: the next checkpoint vouches for both). ``finish()`` returns when every
    closed segment is durable (or the pipeline failed: the error is in ``errors``,
    ``abort`` is set). A temp file of a segment abandoned (abort, failure) is removed;
    one left by a crash is removed by the next start (the snapshot, never ``done``, is
    then copied again from scratch).

    Memory: the bytes of transactions added and not yet durable are bounded by
    ``max_pending`` (``add`` waits for room).
    """

    def __init__(self, writer, compression, encoders, max_pending, abort, stop, errors, summary):
        self.writer = writer
        self.compression = compression
        self.abort = abort
        self.stop = stop
        self.errors = errors
        self.summary = summary
        self.max_pending = max_pending
        self.pending = 0
        self.held: dict = {}            # seq -> bytes added, released when durable
        self._room = threading.Condition()
        self._enc_q: list = [queue.SimpleQueue() for _ in range(max(1, encoders))]
        self._write_q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._encode, args=(q,), daemon=True,
                                          name=f"pgoutput-fast-snapshot-encoder-{i + 1}")
                         for i, q in enumerate(self._enc_q)]
        self._threads.append(threading.Thread(target=self._write, daemon=True,
                                              name="pgoutput-fast-snapshot-writer"))
        for th in self._threads:
            th.start()
        self._finished = False

    def _spent(self, seconds):
        with self._room:
            self.summary.encode_seconds += seconds

    def _fail(self, exc):
        if not self.errors:
            self.errors.append(exc)
        self.abort.set()

    # the copy loop's side
    def add(self, seq, columns, nbytes) -> bool:
        """Queue one transaction for segment ``seq``; False when aborted."""
        with self._room:
            # wait for the segments closed before this one to be written (not for this
            # one's own transactions: only more of them can close it; a transaction
            # larger than the bound, one huge row, then goes alone)
            while (self.pending > self.held.get(seq, 0)
                   and self.pending + nbytes > self.max_pending):
                if self.stop.is_set():
                    self.abort.set()     # a stop while waiting for room
                if self.abort.is_set():
                    return False
                self._room.wait(0.2)
            if self.abort.is_set():
                return False
            self.pending += nbytes
            self.held[seq] = self.held.get(seq, 0) + nbytes
        self._enc_q[seq % len(self._enc_q)].put(("add", seq, columns))
        return True

    def close(self, seq, state):
        """Segment ``seq`` is complete; once it is durable, the writer thread writes the
        checkpoint ``state`` (still ``copying``: readers see no segment yet)."""
        from concurrent.futures import Future

        done: Future = Future()
        self._enc_q[seq % len(self._enc_q)].put(("close", seq, done))
        self._write_q.put((seq, done, state))

    def finish(self):
        if self._finished:
            return
        self._finished = True
        self._write_q.put(None)
        for q in self._enc_q:
            q.put(("stop", None, None))
        for th in self._threads:
            th.join()

    # encoder threads
    def _encode(self, q):
        from .store import SegmentEncoder, temp_name

        enc = None
        while True:
            kind, seq, payload = q.get()
            if kind == "stop":
                if enc is not None:
                    enc.discard()
                return
            try:
                if kind == "add":
                    if self.abort.is_set():
                        if enc is not None:
                            enc.discard()
                        enc = None
                        continue
                    if enc is None:
                        # straight to the segment's temp file, hashed on the way
                        enc = SegmentEncoder(
                            self.writer.schema, self.compression,
                            path=os.path.join(self.writer.directory, temp_name(seq)),
                            file_mode=self.writer.file_mode)
                    t = time.monotonic()
                    enc.write(payload)
                    payload = None
                    self._spent(time.monotonic() - t)
                elif kind == "close":
                    if enc is None or self.abort.is_set():
                        payload.set_exception(_Aborted())
                        if enc is not None:
                            enc.discard()
                        enc = None
                        continue
                    t = time.monotonic()
                    _none, digest = enc.finish()     # written and fsynced
                    self._spent(time.monotonic() - t)
                    payload.set_result((enc.nbytes, digest, enc.first_ordinal, enc.rows))
                    enc = None
            except BaseException as exc:
                if enc is not None:
                    enc.discard()
                enc = None
                if isinstance(exc, OSError):
                    exc = self.writer._fail("writing", os.path.join(
                        self.writer.directory, temp_name(seq)), exc)
                self._fail(exc)
                if kind == "close":
                    payload.set_exception(_Aborted())

    # the writer thread
    def _write(self):
        while True:
            item = self._write_q.get()
            if item is None:
                return
            seq, done, state = item
            try:
                nbytes, digest, first, rows = done.result()
                if self.abort.is_set():
                    _unlink_temp(self.writer.directory, seq)
                    continue
                t = time.monotonic()
                self.writer.add_written_segment(seq, nbytes, digest, first, rows)
                if self._write_q.empty():
                    # (when more is queued, the next checkpoint, or the final one,
                    # vouches for this segment too)
                    self.writer.checkpoint(state)
                self.summary.write_seconds += time.monotonic() - t
                self.summary.segments += 1
            except _Aborted:
                pass
            except BaseException as exc:
                self._fail(exc)
            finally:
                with self._room:
                    self.pending -= self.held.pop(seq, 0)
                    self._room.notify_all()


def _tick(progress, stats, t0):
    rows = sum(s["rows"] for s in stats.values())
    tables_done = sum(1 for s in stats.values() if s["seconds"] is not None)
    done_blocks = sum(s["blocks"] for s in stats.values() if s["seconds"] is not None)
    total_blocks = sum(s["blocks"] for s in stats.values()) or 1
    elapsed = time.monotonic() - t0
    frac = done_blocks / total_blocks
    eta = round(elapsed / frac - elapsed, 1) if frac > 0 else None
    progress.event("snapshot_progress", rows=rows, tables_done=tables_done,
                   tables=len(stats), seconds=round(elapsed, 1), eta_s=eta)


class _Aborted(Exception):
    pass


def _unlink_temp(directory, seq):
    """Remove segment ``seq``'s temp file (best effort: the next start removes what is
    left; a temp file is never part of the durable record)."""
    from .store import temp_name

    try:
        os.unlink(os.path.join(directory, temp_name(seq)))
    except OSError:
        pass


def _native_copy(stream):
    """``(pgoutput_fast._native, libpq function addresses)`` for ``CopyRows``, or None
    with ``PGOUTPUT_FAST_IMPL=python`` (then ``RowSink`` reads through psycopg2)."""
    from .stream import _address, _native_module

    mod = _native_module()
    lib = getattr(stream, "_lib", None)
    if mod is None or lib is None or not hasattr(mod, "CopyRows"):
        return None
    names = ("PQsendQuery", "PQgetResult", "PQresultStatus", "PQclear", "PQgetCopyData",
             "PQfreemem", "PQresultErrorMessage", "PQerrorMessage")
    try:
        funcs = {name: _address(getattr(lib, name)) for name in names}
    except AttributeError:
        return None
    return mod, funcs


def _copy_native(native, conn, table, ti, sql, binary, chunk_bytes, emit) -> tuple:
    """One COPY through ``CopyRows`` (GIL released while rows are read and converted);
    ``(rows, COPY bytes)``."""
    mod, funcs = native
    fmts = bytes((ord("t") if (not binary or c[4] == "t") else ord("b")) for c in table.columns)
    reader = mod.CopyRows(conn.pgconn_ptr, funcs, table.relid, fmts, binary)
    try:
        reader.start(sql.encode("utf-8"))
        while True:
            cols = mod.MessageColumns()
            more = reader.fill(cols, chunk_bytes)
            if len(cols):
                emit(ti, cols, cols.nbytes)
            if not more:
                return reader.rows, reader.copy_bytes
    except RuntimeError as exc:
        raise _copy_failed(table, str(exc), conn) from None


def _connection_gone(conn) -> bool:
    """The connection is closed or broken (libpq's status is not CONNECTION_OK): what a
    COPY cut by the server going away leaves, whatever its error says (psycopg2's
    "error with status PGRES_COPY_OUT and no message from the libpq")."""
    if conn is None:
        return False
    try:
        return bool(conn.closed) or conn.info.status != 0
    except Exception:
        return True


def _copy_failed(table, text, conn=None):
    """The error of a COPY that failed: the connection lost (the server restarting or
    shutting down, the network: the text says so, or the connection is broken) is
    transient, ``ConnectionLost``: the capture reconnects and copies the snapshot again
    with a new slot (nothing was confirmed from this one); anything else on a live
    connection (a permission, a missing table) is the server's refusal."""
    from .dsn import _TRANSIENT
    from .stream import ConnectionLost

    first = (text.strip().splitlines() or ["?"])[0]
    low = text.lower()
    if (any(needle in low for needle in _TRANSIENT) or "connection" in low and "closed" in low
            or _connection_gone(conn)):
        return ConnectionLost(f"copying {table.qualified} for the snapshot: {first}")
    return ServerRefused(f"copying {table.qualified} for the snapshot failed: {first}. Nothing "
                         "was confirmed; fix the cause (e.g. GRANT SELECT to the capture's role) "
                         "and start capture again: the snapshot is copied again")


__all__ += ["snapshot_mode", "snapshot_incomplete", "RowSink", "plan_tasks", "copy_sql",
            "create_slot_exported"]
