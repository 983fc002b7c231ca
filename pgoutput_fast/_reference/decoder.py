"""Reference twin of the native decoder core (``src/decoder_core.pxi`` and the files it includes): plain Python.

``DecoderCore`` and ``MessageBatch`` here have the same API and observable behaviour as
the native ones: same transaction state machine, same typed tables (column order,
names, Arrow types, schema metadata) and change-event table, same ``DecodeError``
``message_index`` / ``offset`` / ``message_type``. ``pgoutput_fast.decoder.Decoder``
drives either implementation. This one is written to be read and trusted, not to be
fast: every row is a Python object, and each typed column is built at export with one
``values.parse_values`` call over the values of one relation version.

Transaction handling (docs/protocol.md §3, docs/design.md):

* ``B..C``: changes are checked and written as they arrive; Commit makes them
  visible. A transaction still open at the end of a batch stays open: export() hands
  over the committed rows and keeps the open transaction's rows for a later feed.
  It also gets a raw copy of its messages from its Begin (``txn_carry``, a Spool,
  filled at each batch end with that batch's part, each change with the relation
  version it was checked against). When the copy exceeds ``max_pending_bytes`` at a
  batch end the decoded rows are dropped (``txn_spooled``): later changes are checked
  on arrival and spooled, and the Commit replays the spool with the Begin's metadata.
  Origin messages are spooled too, so every replayed row gets the origin in effect
  where it arrived.
* ``S..E`` / ``c`` / ``A``: changes are spooled as raw messages per top-level xid, with
  the relation version they refer to (for a Truncate: of each relation it names). A
  subtransaction abort ``A(x, s)`` truncates the spool at the position where ``s``
  first appeared (any message carrying ``s``: DML, Relation, Type); later children and
  messages of other xids in that range go with it. ``A(x, x)`` drops the stream; an
  abort for an unknown xid is ignored. ``c`` replays the spool with the Stream
  Commit's LSN, timestamp and xid. Relation/Type messages in a block apply at once.
* ``b..P`` / ``p`` / ``K`` / ``r``: prepared work is spooled per GID (a re-sent
  ``b..P`` replaces the earlier copy), replayed at Commit Prepared, dropped at
  Rollback Prepared when its prepare_end_lsn matches (or is unknown).

Checks: every change is checked where it arrives, in wire order, with the checks and
offsets of a direct write (column count, ``'u'`` in an old tuple, typed values, event
text of binary values, Truncate relids), also inside ``S..E`` and ``b..P``: a bad change
fails at its own message index, not at the commit that would replay it.

Typed output details: a delete's typed row holds its old tuple; ``_special`` lists the
old image's entries (``_before.<col>``) before the row's own; an unknown-type column is
``binary`` when ``binary_unknown`` is set or a binary value of it (old or new image) is
exported, else ``string``.
"""

from __future__ import annotations

import re
import struct
import tempfile

import numpy as np
import pyarrow as pa

from ..errors import DecodeError, check_names_utf8
from ..messages import UNCHANGED_TOAST, Value
from ..types import K_CHAR
from .decode import _Reader, decode_message
from .textformat import format_binary_values
from .values import parse_values

__all__ = ["DecoderCore", "MessageBatch", "EVENT_SCHEMA"]

UNIX_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in µs since 1970-01-01
INT64_MAX = (1 << 63) - 1

MAP_TYPE = pa.map_(pa.string(), pa.string())

EVENT_SCHEMA = pa.schema([
    pa.field("lsn", pa.int64()),
    pa.field("commit_lsn", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("xid", pa.int64(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("op", pa.string(), nullable=False),
    pa.field("schema", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("relid", pa.int64(), nullable=False),
    pa.field("before", MAP_TYPE),
    pa.field("before_kind", pa.string()),
    pa.field("after", MAP_TYPE),
    pa.field("unchanged_toast", pa.list_(pa.string())),
    pa.field("origin", pa.string()),
    pa.field("truncate_options", pa.list_(pa.string())),
])

#: Truncate option bits (docs/protocol.md: bit 0 CASCADE, bit 1 RESTART IDENTITY) -> event names
TRUNCATE_OPTIONS = ((1, "cascade"), (2, "restart_identity"))

# transaction states
NONE, TXN, PREPARE, STREAM = "none", "txn", "prepare", "stream"
_STATE_WORDS = {
    NONE: "outside a transaction",
    TXN: "inside Begin..Commit",
    PREPARE: "inside Begin Prepare..Prepare",
    STREAM: "inside a stream block",
}
# messages that carry the stream XID inside S..E (docs/protocol.md §2.1)
from ..protocol import XID_FRAMED_CHARS as _STREAMABLE  # noqa: E402

_KIND_SUFFIX = re.compile(r" \([^()]* column\)$")

# TupleData entry of one column: None (SQL NULL), TOAST (unchanged TOAST 'u'), or a
# messages.Value('t' | 'b', bytes)
TOAST = UNCHANGED_TOAST


def _signed64(v: int) -> int:
    """An unsigned 64-bit value as the int64 the tables hold (two's complement)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def _unix_ts(pg_us: int, offset=None, mtype=None) -> int:
    """PostgreSQL-epoch µs -> Unix-epoch µs (must fit int64)."""
    if pg_us > INT64_MAX - UNIX_EPOCH_US:
        raise DecodeError(f"commit timestamp {pg_us} out of range", offset, mtype)
    return pg_us + UNIX_EPOCH_US


def _fail(reason, data, offset):
    raise DecodeError(reason, offset, chr(data[0]) if len(data) else None)


# -- the value layer -------------------------------------------------------------------

# (ColumnType, Value) -> None, or why parse_values rejects that value (a pure function
# of both, so the answer is shared by all decoders; short values only)
_VALUE_PROBLEMS = {}


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def format_binary(column_type, data: bytes) -> str:
    """PostgreSQL text form of one binary value (DecodeError when malformed)."""
    return format_binary_values(column_type, [data])[0]


# -- input -----------------------------------------------------------------------

class MessageBatch:
    """The messages of one feed(): a list of ``(lsn, bytes)`` in stream order."""

    def __init__(self):
        self.pairs = []

    def add(self, messages, lsn=None):
        """Messages as a binary Arrow array (or chunked) or a sequence of bytes-like."""
        start = len(self.pairs)
        if isinstance(messages, pa.ChunkedArray):
            for chunk in messages.chunks:
                self.add(chunk)
        elif isinstance(messages, pa.Array):
            t = messages.type
            if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)
                    or pa.types.is_string(t) or pa.types.is_large_string(t)):
                raise TypeError(f"messages must be a binary Arrow array, not {t}")
            for i, m in enumerate(messages.to_pylist()):
                if m is None:
                    raise DecodeError("a message is null", None, None, start + i)
                self.pairs.append((0, m.encode("utf-8") if isinstance(m, str) else m))
        else:
            for m in messages:
                if m is None:
                    raise DecodeError("a message is null", None, None, len(self.pairs))
                self.pairs.append((0, m if type(m) is bytes else bytes(memoryview(m))))
        if lsn is not None:
            if isinstance(lsn, (pa.Array, pa.ChunkedArray)):
                lsn = lsn.fill_null(0).to_numpy(zero_copy_only=False)
            arr = np.asarray(lsn).astype(np.uint64, copy=False)
            count = len(self.pairs) - start
            if arr.ndim != 1 or arr.shape[0] != count:
                raise ValueError(f"lsn has {arr.shape[0] if arr.ndim == 1 else arr.shape} values "
                                 f"for {count} messages")
            for i, v in enumerate(arr.tolist()):
                self.pairs[start + i] = (v, self.pairs[start + i][1])

    def __len__(self):
        return len(self.pairs)

    def feed_into(self, core):
        core.feed(self.pairs)


# -- pending transactions ----------------------------------------------------------

class Spool:
    """Raw messages of a streamed, prepared or spooled plain transaction, spilling to a temporary file.

    Each record is ``header + message``; the header (18 bytes, as in the native spool,
    so that ``size()`` agrees) is kind, in_stream, version, lsn, length. ``version`` is
    the id of the RelRows a DML refers to, or for a Truncate an index into
    ``truncate_targets`` (the RelRows of each of its relids when it arrived). A streamed
    change is kept without the xid after its type byte (as the native spool keeps it:
    that xid only places subtransaction aborts, which ``note_xid`` records on arrival),
    so every DML record is a plain I/U/D with the relid at byte 1.
    """

    HEAD = struct.Struct("<BBiQI")
    DML, TRUNCATE, MESSAGE, ORIGIN = 0, 1, 2, 3    # ORIGIN: plain transactions only

    def __init__(self, xid=None, gid=None):
        self.xid = xid
        self.gid = gid
        self.origin = None
        self.prepare_end_lsn = None
        self.prepare_ts = None
        self.mem = bytearray()
        self.file = None
        self.file_size = 0
        self.first_pos = {}          # subxid -> position of its first message
        self.truncate_targets = []

    def size(self) -> int:
        return self.file_size + len(self.mem)

    def append(self, kind, in_stream, version, lsn, data, limit, spill_dir):
        self.mem += self.HEAD.pack(kind, in_stream, version, lsn, len(data))
        self.mem += data
        if len(self.mem) > limit:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="pgoutput_fast-refspool-", dir=spill_dir)
            self.file.seek(0, 2)
            self.file.write(self.mem)
            self.file_size += len(self.mem)
            self.mem = bytearray()

    def note_xid(self, subxid):
        self.first_pos.setdefault(subxid, self.size())

    def abort_sub(self, subxid):
        """Discard everything from where subxid first appeared (positional, as PG does)."""
        pos = self.first_pos.get(subxid)
        if pos is None:
            return
        if pos >= self.file_size:
            del self.mem[pos - self.file_size:]
        else:
            self.file.truncate(pos)
            self.file_size = pos
            self.mem = bytearray()
        self.first_pos = {x: p for x, p in self.first_pos.items() if p < pos}

    def records(self):
        """Yield ``(kind, in_stream, version, lsn, message bytes)`` in order."""
        data = b""
        if self.file is not None and self.file_size:
            self.file.seek(0)
            data = self.file.read(self.file_size)
        data += bytes(self.mem)
        pos = 0
        while pos < len(data):
            kind, in_stream, version, lsn, n = self.HEAD.unpack_from(data, pos)
            pos += self.HEAD.size
            yield kind, bool(in_stream), version, lsn, data[pos:pos + n]
            pos += n

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None


# -- output of one relation version --------------------------------------------------

class RelRows:
    """Rows of one relation version: metadata, new image, old image."""

    def __init__(self, version, rel_id):
        self.version = version
        self.id = rel_id
        self.ncols = len(version.columns)
        self.is_key = [bool(c.flags & 1) for c in version.columns]
        self.rows = []            # dicts, see DecoderCore._emit_change
        self.committed = 0
        self.dirty = False

    def rollback(self):
        del self.rows[self.committed:]
        self.dirty = False

    def commit(self):
        self.committed = len(self.rows)
        self.dirty = False


class Ctx:
    """Metadata of the transaction whose changes are being written."""

    def __init__(self, commit_lsn=0, commit_ts=0, xid=0, origin=None, snapshot=False):
        self.commit_lsn = commit_lsn   # int64
        self.commit_ts = commit_ts     # Unix-epoch µs
        self.xid = xid
        self.seq = 0
        self.origin = origin
        #: a Begin..Commit whose Begin carries xid 0 (the initial snapshot's): its
        #: inserts are 'r' (set by Begin only: a replayed stream or prepared transaction
        #: with xid 0 stays 'c', as in the native core)
        self.snapshot = snapshot


class Change:
    """One checked I/U/D: TupleData entries plus the event-map text of binary values."""

    __slots__ = ("op", "old_kind", "old", "new", "old_text", "new_text")

    def __init__(self, op):
        self.op = op
        self.old_kind = self.old = self.new = self.old_text = self.new_text = None


# -- the core ----------------------------------------------------------------------

class DecoderCore:
    """Reference decoder state machine; see pgoutput_fast.decoder.Decoder for the API."""

    def __init__(self, catalog, *, events=True, tables=True, binary_unknown=None,
                 max_pending_bytes=256 << 20, spill_dir=None, threads=None):
        # threads: the native core's helper thread; the reference has none (checked
        # as the native core checks it)
        if threads is not None and int(threads) < 1:
            raise ValueError(f"threads must be 1 or more, not {threads!r}")
        self.threads = 1
        self.catalog = catalog
        self.want_events = bool(events)
        self.want_tables = bool(tables)
        self.binary_unknown = bool(binary_unknown)
        self.max_pending_bytes = max_pending_bytes
        self.spill_dir = spill_dir
        self.rel_current = {}       # relid -> RelRows
        self.rel_by_version = {}    # (relid, version) -> RelRows
        self.rel_all = []           # id -> RelRows, in first-seen order
        self.dirty = []             # RelRows touched by the open B..C
        self.state = NONE
        self.ctx = Ctx()
        self.txn_messages = []      # transactional logical messages of the open B..C
        self.out_messages = []
        self.streams = {}           # top-level xid -> Spool
        self.prepared = {}          # gid -> Spool
        self.cur = None             # Spool of the open S..E block or b..P (or spooled B..C)
        self.txn_carry = None       # raw copy of the open B..C once it crossed a batch end
        self.txn_spooled = False    # the open B..C is held as txn_carry only (not decoded)
        self.txn_part_start = 0     # index in this batch of the open B..C's first message
        self.txn_rel_log = []       # (relid, previous RelRows, new RelRows) per Relation there
        self.events = []            # change-event rows (dicts)
        self.events_committed = 0
        for v in catalog.versions():
            if catalog.current(v.relid) is v:
                self._rel_for(v)

    # -- catalog glue ----------------------------------------------------------------
    def _rel_for(self, version) -> RelRows:
        key = (version.relid, version.version)
        rel = self.rel_by_version.get(key)
        if rel is None:
            rel = RelRows(version, len(self.rel_all))
            self.rel_all.append(rel)
            self.rel_by_version[key] = rel
        self.rel_current[version.relid] = rel
        return rel

    # -- feeding -----------------------------------------------------------------------
    def feed(self, pairs):
        """Decode ``[(lsn, bytes)]``; export() gives the committed output."""
        index = 0
        if self.state == TXN:
            self.txn_part_start = 0         # the open transaction continues here
            self.txn_rel_log = []
        try:
            for index, (lsn, data) in enumerate(pairs):
                self._dispatch(data, lsn, index)
            if self.state == TXN and not self.txn_spooled:
                # a transaction still open stays open: its rows wait for a later feed,
                # and a raw copy of them in txn_carry
                self._carry_part(pairs, self.txn_part_start)
                if self.txn_carry.size() > self.max_pending_bytes:
                    self._rollback_open()
                    self.txn_spooled = True
                    self.cur = self.txn_carry
        except DecodeError as exc:
            exc.message_index = index
            self._reset_after_error()
            raise
        except BaseException:
            self._reset_after_error()
            raise

    def _carry_part(self, pairs, start):
        """Append the open B..C's messages pairs[start:] (all checked) to txn_carry, each
        change with the relation version in effect where it arrived."""
        sp = self.txn_carry
        if sp is None:
            sp = self.txn_carry = Spool()
        current = dict(self.rel_current)
        for relid, prev, _ in reversed(self.txn_rel_log):   # the map as it was at start
            if prev is None:
                current.pop(relid, None)
            else:
                current[relid] = prev
        log = iter(self.txn_rel_log)
        limit, spill_dir = self.max_pending_bytes, self.spill_dir
        for lsn, data in pairs[start:]:
            t = chr(data[0])
            if t in "IUD":
                relid = struct.unpack_from(">I", data, 1)[0]
                sp.append(Spool.DML, False, current[relid].id, lsn, data, limit, spill_dir)
            elif t == "T":
                sp.truncate_targets.append([current[r].id for r in decode_message(data).relids])
                sp.append(Spool.TRUNCATE, False, len(sp.truncate_targets) - 1, lsn, data, limit, spill_dir)
            elif t == "M":
                if decode_message(data).transactional:
                    sp.append(Spool.MESSAGE, False, -1, lsn, data, limit, spill_dir)
            elif t == "O":
                sp.append(Spool.ORIGIN, False, -1, lsn, data, limit, spill_dir)
            elif t == "R":
                relid, _, rel = next(log)
                current[relid] = rel
        self.txn_rel_log = []

    def _reset_after_error(self):
        self._rollback_open()
        self._drop_carry()
        self.state = NONE
        self.cur = None

    def _drop_carry(self):
        if self.txn_carry is not None:
            self.txn_carry.close()
        self.txn_carry = None
        self.txn_spooled = False
        self.txn_rel_log = []

    def _rollback_open(self):
        for rel in self.dirty:
            rel.rollback()
        self.dirty = []
        del self.events[self.events_committed:]
        self.txn_messages = []

    def _dispatch(self, data, lsn, index):
        if len(data) == 0:
            raise DecodeError("empty message", 0, None)
        t = chr(data[0])
        pos = 1
        xid = None
        if self.state == STREAM and t in _STREAMABLE:
            r = _Reader(data, t)
            xid = r.u32("stream xid")
            pos = r.pos
        if t in "IUD":
            self._on_dml(data, lsn, t, pos, xid)
        elif t == "B":
            self._on_begin(data, index)
        elif t == "C":
            self._on_commit(data)
        elif t in "RY":
            self._on_catalog(data, lsn, t, xid)
        elif t == "T":
            self._on_truncate(data, lsn, xid)
        elif t == "M":
            self._on_logical_message(data, lsn, xid)
        elif t == "O":
            self._on_origin(data)
        elif t in "SEcA":
            self._on_stream(data, t)
        elif t in "bPpKr":
            self._on_two_phase(data, t)
        else:
            decode_message(data)  # raises the precise DecodeError
            raise DecodeError(f"unexpected message type {t!r}", 0, t)

    # -- transaction boundaries ----------------------------------------------------------
    def _require(self, state, data, what):
        if self.state != state:
            _fail(f"{what} {_STATE_WORDS[self.state]}", data, 0)

    def _on_begin(self, data, index):
        msg = decode_message(data)
        self._require(NONE, data, "Begin")
        self.state = TXN
        self.ctx = Ctx(_signed64(msg.final_lsn), _unix_ts(msg.commit_ts, 9, "B"), msg.xid,
                       snapshot=msg.xid == 0)
        self.txn_messages = []
        self._drop_carry()
        self.txn_part_start = index + 1

    def _on_commit(self, data):
        msg = decode_message(data)
        self._require(TXN, data, "Commit")
        if _signed64(msg.commit_lsn) != self.ctx.commit_lsn:
            _fail(f"Commit LSN {msg.commit_lsn:X} does not match its Begin's final LSN "
                  f"{self.ctx.commit_lsn & ((1 << 64) - 1):X}", data, 2)
        self.state = NONE
        if self.txn_spooled:
            sp = self.txn_carry
            self.txn_carry = None
            self._drop_carry()
            self.cur = None
            c = self.ctx
            self.ctx = Ctx(c.commit_lsn, c.commit_ts, c.xid, snapshot=c.snapshot)
            self._replay_records(sp)
        else:
            self._drop_carry()
            self._commit_rows()

    def _commit_rows(self):
        for rel in self.dirty:
            rel.commit()
        self.dirty = []
        self.events_committed = len(self.events)
        self.out_messages.extend(self.txn_messages)
        self.txn_messages = []

    def _on_origin(self, data):
        msg = decode_message(data)
        check_names_utf8(msg)
        if self.state == TXN:
            self.ctx.origin = msg.name
            if self.txn_spooled:
                self._spool(Spool.ORIGIN, -1, 0, data, None)
        elif self.state in (STREAM, PREPARE):
            self.cur.origin = msg.name
        else:
            _fail("Origin outside a transaction", data, 0)

    def _on_catalog(self, data, lsn, t, xid):
        msg = decode_message(data, in_stream=self.state == STREAM)
        check_names_utf8(msg)
        if self.state == STREAM:
            self.cur.note_xid(xid)
        if t == "Y":
            self.catalog.apply_type(msg)
        elif self.state == TXN and not self.txn_spooled:
            prev = self.rel_current.get(msg.relid)
            self.txn_rel_log.append((msg.relid, prev, self._rel_for(self.catalog.apply_relation(msg, lsn))))
        else:
            self._rel_for(self.catalog.apply_relation(msg, lsn))

    def _on_stream(self, data, t):
        msg = decode_message(data)
        if t == "S":
            self._require(NONE, data, "Stream Start")
            sp = self.streams.get(msg.xid)
            if sp is None:
                if not msg.first_segment:
                    _fail(f"Stream Start continues transaction {msg.xid} whose first "
                          "segment was not seen", data, 5)
                sp = self.streams[msg.xid] = Spool(xid=msg.xid)
            self.cur = sp
            self.state = STREAM
        elif t == "E":
            self._require(STREAM, data, "Stream Stop")
            self.cur = None
            self.state = NONE
        elif t == "c":
            self._require(NONE, data, "Stream Commit")
            sp = self.streams.pop(msg.xid, None)
            if sp is None:
                _fail(f"Stream Commit for transaction {msg.xid} that was never streamed", data, 1)
            self._replay(sp, msg.commit_lsn, msg.commit_ts, msg.xid, 22, "c")
        else:  # A
            self._require(NONE, data, "Stream Abort")
            if msg.xid == msg.subxid:
                sp = self.streams.pop(msg.xid, None)   # a stray abort is ignored
                if sp is not None:
                    sp.close()
            else:
                sp = self.streams.get(msg.xid)
                if sp is not None:
                    sp.abort_sub(msg.subxid)

    def _on_two_phase(self, data, t):
        msg = decode_message(data)
        if t == "b":
            self._require(NONE, data, "Begin Prepare")
            self.cur = Spool(xid=msg.xid, gid=msg.gid)
            self.state = PREPARE
        elif t == "P":
            self._require(PREPARE, data, "Prepare")
            sp = self.cur
            if sp.gid != msg.gid or sp.xid != msg.xid:
                _fail(f"Prepare {msg.gid!r} (xid {msg.xid}) does not match Begin Prepare "
                      f"{sp.gid!r} (xid {sp.xid})", data, 0)
            sp.prepare_end_lsn = msg.end_lsn
            sp.prepare_ts = msg.prepare_ts
            self.prepared[msg.gid] = sp           # a re-sent b..P replaces the earlier copy
            self.cur = None
            self.state = NONE
        elif t == "p":
            self._require(NONE, data, "Stream Prepare")
            sp = self.streams.pop(msg.xid, None)
            if sp is None:
                _fail(f"Stream Prepare for transaction {msg.xid} that was never streamed", data, 0)
            sp.gid = msg.gid
            sp.prepare_end_lsn = msg.end_lsn
            sp.prepare_ts = msg.prepare_ts
            self.prepared[msg.gid] = sp
        elif t == "K":
            self._require(NONE, data, "Commit Prepared")
            sp = self.prepared.pop(msg.gid, None)
            if sp is None:
                _fail(f"Commit Prepared for unknown GID {msg.gid!r} (its Begin Prepare.."
                      "Prepare was not seen)", data, 0)
            self._replay(sp, msg.commit_lsn, msg.commit_ts, msg.xid, 18, "K")
        else:  # r
            self._require(NONE, data, "Rollback Prepared")
            sp = self.prepared.get(msg.gid)
            if sp is not None and sp.prepare_end_lsn in (msg.prepare_end_lsn, None):
                del self.prepared[msg.gid]
                sp.close()

    def _replay(self, sp, commit_lsn, commit_ts, xid, ts_offset, mtype):
        """Emit a spooled transaction as committed with the given metadata."""
        self.ctx = Ctx(_signed64(commit_lsn), _unix_ts(commit_ts, ts_offset, mtype), xid, sp.origin)
        self._replay_records(sp)

    def _replay_records(self, sp):
        """Write the spooled records with the metadata in ctx, and commit them."""
        self.txn_messages = []
        for kind, in_stream, version, lsn, data in sp.records():
            if kind == Spool.DML:
                rel = self.rel_all[version]
                change = self._scan_dml(data, 1, chr(data[0]), rel)
                self._emit_change(change, rel, lsn)
            elif kind == Spool.TRUNCATE:
                options = decode_message(data, in_stream=in_stream).options
                self._emit_truncate([self.rel_all[i] for i in sp.truncate_targets[version]], lsn, options)
            elif kind == Spool.ORIGIN:
                self.ctx.origin = decode_message(data).name
            else:
                self.txn_messages.append(self._message_event(decode_message(data, in_stream=in_stream), lsn))
        sp.close()
        self._commit_rows()

    def _message_event(self, msg, lsn):
        c = self.ctx
        return (msg, lsn, c.commit_lsn, c.commit_ts, c.xid, c.origin)

    # -- changes ---------------------------------------------------------------------------
    def _spool(self, kind, version, lsn, data, xid):
        if self.state == STREAM:
            self.cur.note_xid(xid)
            if kind == Spool.DML:        # without its xid (see Spool)
                self.cur.append(kind, False, version, lsn, data[:1] + data[5:],
                                self.max_pending_bytes, self.spill_dir)
                return
        self.cur.append(kind, self.state == STREAM, version, lsn, data,
                        self.max_pending_bytes, self.spill_dir)

    def _on_dml(self, data, lsn, t, pos, xid):
        r = _Reader(data, t)
        r.pos = pos
        relid = r.u32("relid")
        rel = self.rel_current.get(relid)
        if rel is None:
            _fail(f"change for relation {relid} before any Relation message for it", data, pos)
        if self.state == NONE:
            _fail("change outside a transaction", data, 0)
        change = self._scan_dml(data, pos, t, rel)
        if self.state == TXN and not self.txn_spooled:
            self._emit_change(change, rel, lsn)
        else:
            self._spool(Spool.DML, rel.id, lsn, data, xid)
            if self.state == TXN:
                self.ctx.seq += 1               # open_changes of pending()

    def _on_truncate(self, data, lsn, xid):
        msg = decode_message(data, in_stream=self.state == STREAM)
        if self.state == NONE:
            _fail("Truncate outside a transaction", data, 0)
        targets = []
        for relid in msg.relids:
            rel = self.rel_current.get(relid)
            if rel is None:
                _fail(f"Truncate of relation {relid} before any Relation message for it", data, 0)
            targets.append(rel)
        if self.state == TXN and not self.txn_spooled:
            self._emit_truncate(targets, lsn, msg.options)
        else:
            self.cur.truncate_targets.append([rel.id for rel in targets])
            self._spool(Spool.TRUNCATE, len(self.cur.truncate_targets) - 1, lsn, data, xid)
            if self.state == TXN:
                self.ctx.seq += len(targets)

    def _on_logical_message(self, data, lsn, xid):
        msg = decode_message(data, in_stream=self.state == STREAM)
        if not msg.transactional:
            self.out_messages.append((msg, lsn, None, None, None, None))
        elif self.state == TXN and not self.txn_spooled:
            self.txn_messages.append(self._message_event(msg, lsn))
        elif self.state in (STREAM, PREPARE, TXN):
            self._spool(Spool.MESSAGE, -1, lsn, data, xid)
        else:
            _fail("transactional Message outside a transaction", data, 0)

    # -- scanning one I/U/D ------------------------------------------------------------------
    def _scan_dml(self, data, pos, t, rel) -> Change:
        """Check an I/U/D against its relation version, in wire order.

        ``pos`` is the offset of the relid. Each TupleData gets the passes the native
        scanner makes over it (typed columns, then the event map) and the first problem
        in that order wins, with the same offset.
        """
        r = _Reader(data, t)
        r.pos = pos + 4
        change = Change({"I": "c", "U": "u", "D": "d"}[t])
        at = r.pos
        marker = chr(r.u8("tuple marker"))
        if t == "I":
            if marker != "N":
                _fail("Insert: expected 'N' before the new tuple", data, at)
            change.new, change.new_text = self._scan_tuple(r, rel, False, False)
        elif t == "U":
            if marker in "KO":
                change.old_kind = marker
                change.old, change.old_text = self._scan_tuple(r, rel, True, marker == "K")
                at = r.pos
                if chr(r.u8("new tuple marker")) != "N":
                    _fail("Update: expected 'N' after the old tuple", data, at)
            elif marker != "N":
                _fail(f"Update: expected 'K', 'O' or 'N', got 0x{ord(marker):02x}", data, at)
            change.new, change.new_text = self._scan_tuple(r, rel, False, False)
        else:
            if marker not in "KO":
                _fail(f"Delete: expected 'K' or 'O', got 0x{ord(marker):02x}", data, at)
            change.old_kind = marker
            change.old, change.old_text = self._scan_tuple(r, rel, True, marker == "K")
        if r.pos != len(data):
            _fail("trailing bytes after the end of the message", data, r.pos)
        return change

    def _scan_tuple(self, r, rel, is_old, key_only):
        """(entries, event texts) of one TupleData; raises the first problem in it."""
        data = r.buf
        at = r.pos
        ncols = r.i16("TupleData column count")
        if ncols != rel.ncols:
            v = rel.version
            _fail(f"TupleData has {ncols} columns but relation {v.qualified_name} "
                  f"(relid {v.relid}) has {rel.ncols}", data, at)
        # read the columns; a structural problem is raised after the columns before it
        # have been checked (the native scanner checks each value as it reads it)
        cols = []      # (entry, offset of its kind byte)
        broken = None
        try:
            for i in range(ncols):
                kat = r.pos
                kind = r.u8("TupleData column kind")
                if kind == 0x74 or kind == 0x62:          # 't' / 'b'
                    lpos = r.pos
                    n = r.i32("value length")
                    if n < 0:
                        _fail(f"negative value length {n} in column {i}", data, lpos)
                    cols.append((Value(chr(kind), r.raw(n, "value")), kat))
                elif kind == 0x6E:                        # 'n'
                    cols.append((None, kat))
                elif kind == 0x75:                        # 'u'
                    cols.append((TOAST, kat))
                else:
                    _fail(f"unknown TupleData column kind byte 0x{kind:02x} in column {i}", data, kat)
        except DecodeError as exc:
            broken = exc
        texts = [None] * ncols
        passes = []
        if self.want_tables:
            passes.append("typed")
        if self.want_events:
            passes.append("events")
        for kind in passes or ["structure"]:
            for i, (entry, kat) in enumerate(cols):
                if entry is TOAST:
                    if is_old:
                        _fail(f"unchanged-TOAST marker 'u' in an old tuple (column "
                              f"{rel.version.column_names[i]!r})", data, kat)
                elif entry is not None:
                    if kind == "typed":
                        self._check_value(rel, i, entry, data, kat)
                    elif kind == "events" and not (key_only and not rel.is_key[i]):
                        if entry.format == "b":
                            texts[i] = self._format_value(rel, i, entry, data, kat)
                        elif (len(entry.data) == 1 and entry.data[0] >= 0x80
                              and rel.version.column_types[i].kind == K_CHAR):
                            # "char" from PostgreSQL 14: the raw byte; 15's \ooo, as typed
                            texts[i] = b"\\%03o" % entry.data[0]
                        elif not _is_utf8(entry.data):   # map<string,string> values
                            self._value_fail(rel, i, entry, "invalid UTF-8 in a text value", data, kat)
            if broken is not None:
                raise broken
        return tuple(entry for entry, _ in cols), texts

    def _check_value(self, rel, i, value, data, at):
        """DecodeError (at the value's kind byte) when its typed column rejects the value."""
        ct = rel.version.column_types[i]
        key = (ct, value)
        problem = _VALUE_PROBLEMS.get(key, False)
        if problem is False:
            problem = None
            try:
                parse_values(ct, [value])
            except DecodeError as exc:
                # parse_values names the column kind at the end; the decoder names the column
                problem = _KIND_SUFFIX.sub("", exc.reason)
            except (ValueError, TypeError, OverflowError, ArithmeticError, pa.ArrowException) as exc:
                problem = str(exc)
            if len(value.data) <= 64:
                if len(_VALUE_PROBLEMS) > 100_000:
                    _VALUE_PROBLEMS.clear()
                _VALUE_PROBLEMS[key] = problem
        if problem is not None:
            self._value_fail(rel, i, value, problem, data, at)

    def _format_value(self, rel, i, value, data, at) -> bytes:
        try:
            text = format_binary(rel.version.column_types[i], value.data)
        except DecodeError as exc:
            self._value_fail(rel, i, value, exc.reason, data, at)
        except (ValueError, TypeError, OverflowError) as exc:
            self._value_fail(rel, i, value, str(exc), data, at)
        return text.encode("utf-8", "surrogateescape")

    def _value_fail(self, rel, i, value, reason, data, at):
        v = rel.version
        _fail(f"{reason or 'bad value'}: column {v.column_names[i]!r} of {v.qualified_name} "
              f"(type oid {v.columns[i].type_oid}, {'text' if value.format == 't' else 'binary'}) "
              f"value {value.data[:60]!r}", data, at)

    # -- writing rows --------------------------------------------------------------------
    def _touch(self, rel):
        if not rel.dirty:
            rel.dirty = True
            self.dirty.append(rel)

    def _meta(self, op, lsn):
        c = self.ctx
        if op == "c" and c.snapshot:
            op = "r"        # a snapshot row: its transaction's Begin carries xid 0
        return {"op": op, "lsn": _signed64(lsn), "commit_lsn": c.commit_lsn,
                "commit_ts": c.commit_ts, "xid": c.xid, "seq": c.seq, "origin": c.origin}

    def _emit_change(self, ch, rel, lsn):
        self._touch(rel)
        if self.want_tables:
            row = self._meta(ch.op, lsn)
            # the typed row of a delete holds the old key / old row
            row["new"] = ch.old if ch.op == "d" else ch.new
            row["before"] = None if ch.old is None else (ch.old_kind, ch.old)
            rel.rows.append(row)
        if self.want_events:
            ev = self._meta(ch.op, lsn)
            ev["rel"] = rel
            ev["before_kind"] = ch.old_kind
            ev["before"] = None if ch.old is None else self._event_map(
                rel, ch.old, ch.old_text, ch.old_kind == "K")
            ev["after"] = None if ch.new is None else self._event_map(rel, ch.new, ch.new_text, False)
            ev["unchanged_toast"] = [] if ch.new is None else [
                name for name, e in zip(rel.version.column_names, ch.new) if e is TOAST]
            self.events.append(ev)
        self.ctx.seq += 1

    @staticmethod
    def _event_map(rel, entries, texts, key_only):
        """[(column name, text bytes or None)]: 'u' columns and (for 'K') non-key columns left out."""
        out = []
        for i, (name, e) in enumerate(zip(rel.version.column_names, entries)):
            if e is TOAST or (key_only and not rel.is_key[i]):
                continue
            if e is None:
                out.append((name, None))
            else:
                out.append((name, e.data if e.format == "t" and texts[i] is None else texts[i]))
        return out

    def _emit_truncate(self, rels, lsn, options):
        names = [name for bit, name in TRUNCATE_OPTIONS if options & bit]
        for rel in rels:
            self._touch(rel)
            if self.want_tables:
                row = self._meta("t", lsn)
                row["new"] = (None,) * rel.ncols
                row["before"] = None
                rel.rows.append(row)
            if self.want_events:
                ev = self._meta("t", lsn)
                ev.update(rel=rel, before_kind=None, before=None, after=None, unchanged_toast=[],
                          truncate_options=names)
                self.events.append(ev)
            self.ctx.seq += 1

    # -- output --------------------------------------------------------------------------
    def export(self):
        """(tables: [(RelationVersion, pa.Table)], events: pa.Table | None, messages: list)."""
        tables = []
        for rel in self.rel_all:
            if rel.committed:
                # the rows of a transaction still open stay for a later export
                open_rows = rel.rows[rel.committed:]
                del rel.rows[rel.committed:]
                tables.append((rel.version, self._export_rel(rel)))
                rel.rows = open_rows
                rel.committed = 0
        events = None
        if self.want_events:
            committed = self.events[:self.events_committed]
            del self.events[:self.events_committed]
            events = self._export_events(committed)
            self.events_committed = 0
        msgs, self.out_messages = self.out_messages, []
        return tables, events, msgs

    def _export_rel(self, rel):
        v = rel.version
        rows = rel.rows
        n = len(rows)
        names = list(v.column_names)
        arrays = _meta_arrays(rows, "_")
        fields = [pa.field(key, arr.type, nullable=key in ("_lsn", "_origin"))
                  for key, arr in arrays.items()]
        arrays = list(arrays.values())
        specials = [[] for _ in range(n)]     # per row: [(key, text)]
        before_specials = [[] for _ in range(n)]
        # typed columns of the new image (the old image for deletes)
        types = []
        for i, ct in enumerate(v.column_types):
            entries = [row["new"][i] for row in rows]
            # an unknown type is binary when asked for, or when a binary value was sent
            # (in either image): the same type serves the column and its _before field
            any_binary = any(isinstance(e, Value) and e.format == "b" for e in entries) or any(
                row["before"] is not None and isinstance(row["before"][1][i], Value)
                and row["before"][1][i].format == "b" for row in rows)
            typ = ct.arrow_type(self.binary_unknown or any_binary)
            arr = self._typed_column(ct, typ, entries, names[i], "", specials, range(n))
            arrays.append(arr)
            fields.append(pa.field(names[i], typ))
            types.append(typ)
        struct_fields = fields[7:]
        # _before: the old images, null where no old tuple was sent
        with_before = [r for r, row in enumerate(rows) if row["before"] is not None]
        if with_before:
            children = []
            for i, ct in enumerate(v.column_types):
                entries = [rows[r]["before"][1][i] for r in with_before]
                children.append(self._typed_column(ct, types[i], entries, names[i], "_before.",
                                                   before_specials, with_before))
            if rel.ncols:
                dense = pa.StructArray.from_arrays(children, fields=struct_fields)
            else:
                dense = pa.array([{}] * len(with_before), pa.struct([]))
            idx = np.full(n, -1, dtype=np.int32)
            idx[with_before] = np.arange(len(with_before), dtype=np.int32)
            before = dense.take(pa.array(idx, mask=idx < 0))
        else:
            before = pa.nulls(n, pa.struct(struct_fields))
        before_kind = pa.array([None if row["before"] is None else row["before"][0] for row in rows],
                               pa.string())
        arrays += [before, before_kind]
        fields += [pa.field("_before", before.type), pa.field("_before_kind", pa.string())]
        toast = pa.array([[names[i] for i, e in enumerate(row["new"]) if e is TOAST] for row in rows],
                         pa.list_(pa.string()))
        arrays.append(toast)
        fields.append(pa.field("_unchanged_toast", toast.type))
        # old-image specials first, then the new image's (the native scan order)
        special = pa.array([(b + s) or None for b, s in zip(before_specials, specials)], MAP_TYPE)
        arrays.append(special)
        fields.append(pa.field("_special", special.type))
        md = {b"pgoutput_fast.relid": str(v.relid).encode(),
              b"pgoutput_fast.version": str(v.version).encode(),
              b"pgoutput_fast.from_lsn": str(v.from_lsn).encode(),
              b"pgoutput_fast.key_columns": ",".join(v.key_columns).encode("utf-8", "surrogateescape"),
              b"pgoutput_fast.replident": v.replident.encode()}
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=md))

    def _typed_column(self, ct, typ, entries, name, prefix, specials, row_of):
        """One typed column with a single parse_values call; records its special values."""
        values = [None if e is TOAST else e for e in entries]
        arr, special_idx = parse_values(ct, values)
        if arr.type != typ:
            arr = arr.view(typ) if _same_layout(arr.type, typ) else arr.cast(typ)
        for j in special_idx:
            e = values[j]
            text = e.data.decode("utf-8", "surrogateescape") if e.format == "t" else format_binary(ct, e.data)
            specials[row_of[j]].append((prefix + name, text))
        return arr

    def _export_events(self, evs):
        arrays = _meta_arrays(evs, "")
        arrays["schema"] = pa.array([e["rel"].version.schema for e in evs], pa.string())
        arrays["table"] = pa.array([e["rel"].version.relname for e in evs], pa.string())
        arrays["relid"] = pa.array([e["rel"].version.relid for e in evs], pa.int64())
        arrays["before"] = _map_array([e["before"] for e in evs])
        arrays["before_kind"] = pa.array([e["before_kind"] for e in evs], pa.string())
        arrays["after"] = _map_array([e["after"] for e in evs])
        arrays["unchanged_toast"] = pa.array([e["unchanged_toast"] for e in evs], pa.list_(pa.string()))
        arrays["truncate_options"] = pa.array([e.get("truncate_options") for e in evs], pa.list_(pa.string()))
        return pa.Table.from_pydict({f.name: arrays[f.name] for f in EVENT_SCHEMA}, schema=EVENT_SCHEMA)

    def pending_summary(self):
        """What is held back: open streams and prepared transactions (bytes), open B..C."""
        spools = list(self.streams.values()) + list(self.prepared.values())
        if self.state == PREPARE:
            spools.append(self.cur)
        if self.txn_carry is not None:
            spools.append(self.txn_carry)
        return {
            "streams": {x: sp.size() for x, sp in self.streams.items()},
            "prepared": {g: sp.size() for g, sp in self.prepared.items()},
            "open_transaction": self.ctx.xid if self.state == TXN else None,
            "open_changes": self.ctx.seq if self.state == TXN else 0,
            "open_bytes": self.txn_carry.size() if self.txn_carry is not None else 0,
            "open_spooled": self.txn_spooled,
            "spilled_bytes": sum(sp.file_size for sp in spools),
        }


def _meta_arrays(rows, prefix):
    """The metadata columns (op, lsn, commit_lsn, commit_ts, xid, seq, origin)."""
    lsn = np.array([r["lsn"] for r in rows], dtype=np.int64)
    return {
        prefix + "op": pa.array([r["op"] for r in rows], pa.string()),
        prefix + "lsn": pa.array(lsn, pa.int64(), mask=lsn == 0),
        prefix + "commit_lsn": pa.array([r["commit_lsn"] for r in rows], pa.int64()),
        prefix + "commit_ts": pa.array([r["commit_ts"] for r in rows], pa.int64()).view(
            pa.timestamp("us", tz="UTC")),
        prefix + "xid": pa.array([r["xid"] for r in rows], pa.int64()),
        prefix + "seq": pa.array([r["seq"] for r in rows], pa.int64()),
        prefix + "origin": pa.array([r["origin"] for r in rows], pa.string()),
    }


def _map_array(rows):
    """map<string,string> from rows of [(key, value bytes or None)] or None.

    Values are PostgreSQL's text bytes as sent; like the native core this does not
    re-validate them as UTF-8.
    """
    offsets, keys, values = [0], [], []
    for row in rows:
        for key, value in row or ():
            keys.append(key)
            values.append(value)
        offsets.append(len(keys))
    nulls = [row is None for row in rows]
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(values, pa.binary()).view(pa.string()),
                                   mask=pa.array(nulls, pa.bool_()) if any(nulls) else None)


def _same_layout(a, b):
    """binary <-> string: same buffers, so a view (PostgreSQL text need not be UTF-8)."""
    kinds = (pa.types.is_binary, pa.types.is_string)
    return any(k(a) for k in kinds) and any(k(b) for k in kinds)
