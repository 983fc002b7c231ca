"""Pure-Python reference decoder for one pgoutput message (docs/protocol.md §2).

This is the oracle for the native core: both must return equal objects and, on bad
input, raise ``DecodeError`` with the same ``offset`` and ``message_type``. The error
rules (offsets count from the type byte, which is at 0):

* empty input: offset 0, message_type None. Unknown type byte: offset 0.
* Fields are read strictly in wire order and each one is validated as soon as it is
  read, so the first problem in byte order wins.
* A fixed-size field (or a value's / content's bytes) running past the end: offset =
  start of that field. A String without a NUL before the end: offset = its start.
* Illegal Int8 values (§3.12 flags, Truncate options, Relation column flags,
  first_segment, replident, TupleData kind, K/O/N markers): offset = that byte.
* Negative Int16 natts/ncols, Int32 nrels, value length or content length: offset =
  start of that count/length field.
* Truncate: after nrels and options, ``nrels * 4`` is checked against the remaining
  bytes before any relid is read; failure is a truncation at the first relid.
  Value / content lengths are checked against the remaining bytes the same way:
  truncation at the first byte of the value (right after the length field).
  natts/ncols are *not* pre-checked; the loop meets the truncation where it happens.
* Stream Abort: after xid and subxid, if any bytes remain, abort_lsn and abort_ts are
  read as ordinary fields (so 1..15 extra bytes are a truncation at the field start).
* Bytes left after a complete message: offset = the position after the last field.

Nothing but ``DecodeError`` escapes for any bytes-like input (a non-bytes-like
argument is a ``TypeError``).
"""

from __future__ import annotations

import re
import struct

from ..errors import DecodeError
from ..messages import (
    UNCHANGED_TOAST,
    Value,
    RelationColumn,
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    LogicalMessage,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
    BeginPrepare,
    Prepare,
    CommitPrepared,
    RollbackPrepared,
    StreamPrepare,
)

__all__ = ["decode_message"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_NUL = re.compile(b"\x00")

# Message types that carry the stream XID inside a Stream Start..Stop block (§2.1).
from ..protocol import XID_FRAMED_CHARS as _STREAMABLE  # noqa: E402
_REPLIDENTS = frozenset("dnfi")


class _Reader:
    """Cursor over one message. ``buf`` is ``bytes`` or a 1-D byte ``memoryview``."""

    __slots__ = ("buf", "pos", "end", "mtype")

    def __init__(self, buf, mtype):
        self.buf = buf
        self.pos = 1
        self.end = len(buf)
        self.mtype = mtype

    def fail(self, reason, offset):
        raise DecodeError(reason, offset=offset, message_type=self.mtype)

    def _need(self, size, what):
        pos = self.pos
        if size > self.end - pos:
            self.fail(f"message truncated in {what}", pos)
        self.pos = pos + size
        return pos

    def u8(self, what):
        pos = self._need(1, what)
        return self.buf[pos]

    def i16(self, what):
        return _I16.unpack_from(self.buf, self._need(2, what))[0]

    def i32(self, what):
        return _I32.unpack_from(self.buf, self._need(4, what))[0]

    def u32(self, what):
        return _U32.unpack_from(self.buf, self._need(4, what))[0]

    def u64(self, what):
        return _U64.unpack_from(self.buf, self._need(8, what))[0]

    def i64(self, what):
        return _I64.unpack_from(self.buf, self._need(8, what))[0]

    def flags_zero(self, what="flags"):
        pos = self.pos
        value = self.u8(what)
        if value != 0:
            self.fail(f"unsupported {what} value {value} (must be 0)", pos)
        return value

    def string(self, what):
        start = self.pos
        buf = self.buf
        if type(buf) is bytes:
            nul = buf.find(b"\x00", start)
        else:
            m = _NUL.search(buf, start)
            nul = -1 if m is None else m.start()
        if nul < 0:
            self.fail(f"unterminated string in {what}", start)
        self.pos = nul + 1
        return str(buf[start:nul], "utf-8", "surrogateescape")

    def raw(self, length, what):
        """``length`` bytes (already known to be >= 0) as ``bytes``."""
        start = self._need(length, what)
        chunk = self.buf[start : start + length]
        return chunk if type(chunk) is bytes else chunk.tobytes()

    def length(self, what):
        """An Int32 length that must be >= 0 (the caller checks it against the end)."""
        pos = self.pos
        n = self.i32(what)
        if n < 0:
            self.fail(f"negative {what} {n}", pos)
        return n

    def tuple_data(self, what):
        pos = self.pos
        ncols = self.i16(f"{what} column count")
        if ncols < 0:
            self.fail(f"negative {what} column count {ncols}", pos)
        cols = []
        append = cols.append
        buf = self.buf
        for _ in range(ncols):
            kpos = self._need(1, f"{what} column kind")
            kind = buf[kpos]
            if kind == 0x6E:  # 'n'
                append(None)
            elif kind == 0x75:  # 'u'
                append(UNCHANGED_TOAST)
            elif kind == 0x74 or kind == 0x62:  # 't' / 'b'
                n = self.length(f"{what} value length")
                append(Value(chr(kind), self.raw(n, f"{what} value bytes")))
            else:
                self.fail(f"unknown {what} column kind {chr(kind)!r}", kpos)
        return tuple(cols)

    def marker(self, allowed, what):
        pos = self.pos
        c = chr(self.u8(what))
        if c not in allowed:
            self.fail(f"expected {what} {' or '.join(allowed)}, got {c!r}", pos)
        return c


def _stream_xid(r, in_stream):
    return r.u32("stream xid") if in_stream else None


def _begin(r, in_stream):
    return Begin(r.u64("final_lsn"), r.i64("commit_ts"), r.u32("xid"))


def _commit(r, in_stream):
    return Commit(r.flags_zero(), r.u64("commit_lsn"), r.u64("end_lsn"), r.i64("commit_ts"))


def _origin(r, in_stream):
    return Origin(r.u64("origin_lsn"), r.string("origin name"))


def _relation(r, in_stream):
    xid = _stream_xid(r, in_stream)
    relid = r.u32("relid")
    nspname = r.string("nspname")
    relname = r.string("relname")
    pos = r.pos
    replident = chr(r.u8("replident"))
    if replident not in _REPLIDENTS:
        r.fail(f"unknown replica identity {replident!r}", pos)
    pos = r.pos
    natts = r.i16("natts")
    if natts < 0:
        r.fail(f"negative natts {natts}", pos)
    columns = []
    for _ in range(natts):
        pos = r.pos
        flags = r.u8("column flags")
        if flags > 1:
            r.fail(f"unsupported column flags value {flags} (must be 0 or 1)", pos)
        columns.append(
            RelationColumn(flags, r.string("column name"), r.u32("column type"), r.i32("column typmod"))
        )
    return Relation(relid, nspname, relname, replident, tuple(columns), xid)


def _type(r, in_stream):
    xid = _stream_xid(r, in_stream)
    return Type(r.u32("typid"), r.string("nspname"), r.string("typname"), xid)


def _insert(r, in_stream):
    xid = _stream_xid(r, in_stream)
    relid = r.u32("relid")
    r.marker("N", "new tuple marker")
    return Insert(relid, r.tuple_data("new tuple"), xid)


def _update(r, in_stream):
    xid = _stream_xid(r, in_stream)
    relid = r.u32("relid")
    kind = r.marker("KON", "tuple marker")
    old_kind = old = None
    if kind != "N":
        old_kind = kind
        old = r.tuple_data("old tuple")
        r.marker("N", "new tuple marker")
    return Update(relid, old_kind, old, r.tuple_data("new tuple"), xid)


def _delete(r, in_stream):
    xid = _stream_xid(r, in_stream)
    relid = r.u32("relid")
    old_kind = r.marker("KO", "old tuple marker")
    return Delete(relid, old_kind, r.tuple_data("old tuple"), xid)


def _truncate(r, in_stream):
    xid = _stream_xid(r, in_stream)
    pos = r.pos
    nrels = r.i32("nrels")
    if nrels < 0:
        r.fail(f"negative nrels {nrels}", pos)
    pos = r.pos
    options = r.u8("options")
    if options > 3:
        r.fail(f"unsupported truncate options value {options} (must be 0..3)", pos)
    # Check the whole relid array fits before building anything (nrels can be 2^31-1).
    start = r._need(4 * nrels, "relids")
    relids = struct.unpack_from(f">{nrels}I", r.buf, start) if nrels else ()
    return Truncate(options, relids, xid)


def _logical_message(r, in_stream):
    xid = _stream_xid(r, in_stream)
    pos = r.pos
    flags = r.u8("flags")
    if flags > 1:
        r.fail(f"unsupported message flags value {flags} (must be 0 or 1)", pos)
    lsn = r.u64("lsn")
    prefix = r.string("prefix")
    n = r.length("content length")
    return LogicalMessage(flags, lsn, prefix, r.raw(n, "content"), xid)


def _stream_start(r, in_stream):
    xid = r.u32("xid")
    pos = r.pos
    first = r.u8("first_segment")
    if first > 1:
        r.fail(f"unsupported first_segment value {first} (must be 0 or 1)", pos)
    return StreamStart(xid, first)


def _stream_stop(r, in_stream):
    return StreamStop()


def _stream_commit(r, in_stream):
    return StreamCommit(
        r.u32("xid"), r.flags_zero(), r.u64("commit_lsn"), r.u64("end_lsn"), r.i64("commit_ts")
    )


def _stream_abort(r, in_stream):
    xid = r.u32("xid")
    subxid = r.u32("subxid")
    if r.pos == r.end:
        return StreamAbort(xid, subxid)
    return StreamAbort(xid, subxid, r.u64("abort_lsn"), r.i64("abort_ts"))


def _begin_prepare(r, in_stream):
    return BeginPrepare(
        r.u64("prepare_lsn"), r.u64("end_lsn"), r.i64("prepare_ts"), r.u32("xid"), r.string("gid")
    )


def _prepare_like(cls):
    def read(r, in_stream):
        return cls(
            r.flags_zero(),
            r.u64("prepare_lsn"),
            r.u64("end_lsn"),
            r.i64("prepare_ts"),
            r.u32("xid"),
            r.string("gid"),
        )

    return read


def _commit_prepared(r, in_stream):
    return CommitPrepared(
        r.flags_zero(),
        r.u64("commit_lsn"),
        r.u64("end_lsn"),
        r.i64("commit_ts"),
        r.u32("xid"),
        r.string("gid"),
    )


def _rollback_prepared(r, in_stream):
    return RollbackPrepared(
        r.flags_zero(),
        r.u64("prepare_end_lsn"),
        r.u64("rollback_end_lsn"),
        r.i64("prepare_ts"),
        r.i64("rollback_ts"),
        r.u32("xid"),
        r.string("gid"),
    )


_READERS = {
    "B": _begin,
    "C": _commit,
    "O": _origin,
    "R": _relation,
    "Y": _type,
    "I": _insert,
    "U": _update,
    "D": _delete,
    "T": _truncate,
    "M": _logical_message,
    "S": _stream_start,
    "E": _stream_stop,
    "c": _stream_commit,
    "A": _stream_abort,
    "b": _begin_prepare,
    "P": _prepare_like(Prepare),
    "K": _commit_prepared,
    "r": _rollback_prepared,
    "p": _prepare_like(StreamPrepare),
}


def _as_buffer(data):
    """``bytes`` as is; any other bytes-like as a flat byte memoryview (no copy)."""
    if type(data) is bytes:
        return data
    mv = memoryview(data)  # TypeError for objects without the buffer protocol
    if not mv.c_contiguous:
        return mv.tobytes()  # rare (strided views): cast() needs contiguous memory
    if mv.ndim != 1 or mv.format != "B":
        mv = mv.cast("B")
    return mv


def decode_message(data, *, in_stream=False):
    """Decode one pgoutput message (type byte first, no framing) into a message object.

    ``in_stream=True`` means the message was received between Stream Start and Stream
    Stop: R/Y/I/U/D/T/M then carry a leading stream XID, returned as ``.xid``.
    Raises ``DecodeError`` for anything that is not exactly one well-formed message.
    """
    buf = _as_buffer(data)
    if len(buf) == 0:
        raise DecodeError("empty message", offset=0, message_type=None)
    mtype = chr(buf[0])
    reader = _READERS.get(mtype)
    if reader is None:
        raise DecodeError(f"unknown message type {mtype!r}", offset=0, message_type=mtype)
    r = _Reader(buf, mtype)
    msg = reader(r, in_stream and mtype in _STREAMABLE)
    if r.pos != r.end:
        r.fail(f"{r.end - r.pos} unexpected trailing byte(s) after the message", r.pos)
    return msg
