"""Writer for pgoutput messages: the inverse of ``decode_message``.

``encode_message(msg)`` turns any message object from :mod:`pgoutput_fast.messages`
back into the exact bytes pgoutput sends (docs/protocol.md §2). It exists for tests,
fixtures and tools that synthesise streams; it is not on any hot path.

Rules:

* R/Y/I/U/D/T/M carry the stream XID (Int32 right after the type byte) iff
  ``msg.xid is not None``; the caller decodes them with ``in_stream=True``.
* Stream Abort writes ``abort_lsn``/``abort_ts`` iff ``abort_lsn is not None``.
* Strings are ``str.encode('utf-8', 'surrogateescape')`` + NUL, so names decoded from
  non-UTF-8 bytes round-trip.
* Int8 fields (flags, options, first_segment) accept 0..255 without checking the legal
  values of §3.12, so tests can build illegal messages on purpose.
* Anything that cannot be represented raises ``TypeError`` (wrong type) or
  ``ValueError`` (a NUL inside a string, an integer out of range, a bad tag).
"""

from __future__ import annotations

import struct

from .messages import (
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

__all__ = ["encode_message"]

_U8 = struct.Struct(">B")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")

_INT32_MAX = (1 << 31) - 1


def _int(value, what):
    # bool is an int subclass; accept it (True -> 1) as struct would.
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _u8(value, what):
    value = _int(value, what)
    if not 0 <= value <= 0xFF:
        raise ValueError(f"{what} out of range for Int8 (0..255): {value}")
    return _U8.pack(value)


def _i16(value, what):
    value = _int(value, what)
    if not -(1 << 15) <= value < (1 << 15):
        raise ValueError(f"{what} out of range for Int16: {value}")
    return _I16.pack(value)


def _i32(value, what):
    value = _int(value, what)
    if not -(1 << 31) <= value <= _INT32_MAX:
        raise ValueError(f"{what} out of range for Int32: {value}")
    return _I32.pack(value)


def _u32(value, what):
    value = _int(value, what)
    if not 0 <= value <= 0xFFFFFFFF:
        raise ValueError(f"{what} out of range for an unsigned 32-bit XID/OID: {value}")
    return _U32.pack(value)


def _u64(value, what):
    value = _int(value, what)
    if not 0 <= value < (1 << 64):
        raise ValueError(f"{what} out of range for an LSN (unsigned 64-bit): {value}")
    return _U64.pack(value)


def _i64(value, what):
    value = _int(value, what)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{what} out of range for a TimestampTz (signed 64-bit): {value}")
    return _I64.pack(value)


def _string(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    raw = value.encode("utf-8", "surrogateescape")  # UnicodeEncodeError is a ValueError
    if b"\x00" in raw:
        raise ValueError(f"{what} contains a NUL byte, which a String field cannot carry")
    return raw + b"\x00"


def _char(value, what, allowed=None):
    """A one-character tag written as one byte."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a one-character str, not {type(value).__name__}")
    if len(value) != 1 or ord(value) > 0xFF:
        raise ValueError(f"{what} must be a single byte-sized character: {value!r}")
    if allowed is not None and value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, allowed))}: {value!r}")
    return value.encode("latin-1")


def _raw(value, what):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    raise TypeError(f"{what} must be bytes-like, not {type(value).__name__}")


def _length_prefixed(value, what):
    data = _raw(value, what)
    if len(data) > _INT32_MAX:
        raise ValueError(f"{what} is too long for an Int32 length: {len(data)} bytes")
    return _I32.pack(len(data)) + data


def _tuple_data(tup, what, out):
    if not isinstance(tup, (tuple, list)):
        raise TypeError(f"{what} must be a tuple of column values, not {type(tup).__name__}")
    out.append(_i16(len(tup), f"{what} column count"))
    for i, col in enumerate(tup):
        if col is None:
            out.append(b"n")
        elif col is UNCHANGED_TOAST:
            out.append(b"u")
        elif isinstance(col, Value):
            out.append(_char(col.format, f"{what}[{i}].format", ("t", "b")))
            out.append(_length_prefixed(col.data, f"{what}[{i}].data"))
        else:
            raise TypeError(
                f"{what}[{i}] must be None, UNCHANGED_TOAST or a Value, not {type(col).__name__}"
            )


def _stream_xid(msg, out):
    if msg.xid is not None:
        out.append(_u32(msg.xid, "xid"))


def _begin(m, out):
    out += (_u64(m.final_lsn, "final_lsn"), _i64(m.commit_ts, "commit_ts"), _u32(m.xid, "xid"))


def _commit(m, out):
    out += (
        _u8(m.flags, "flags"),
        _u64(m.commit_lsn, "commit_lsn"),
        _u64(m.end_lsn, "end_lsn"),
        _i64(m.commit_ts, "commit_ts"),
    )


def _origin(m, out):
    out += (_u64(m.origin_lsn, "origin_lsn"), _string(m.name, "name"))


def _relation(m, out):
    _stream_xid(m, out)
    out += (
        _u32(m.relid, "relid"),
        _string(m.nspname, "nspname"),
        _string(m.relname, "relname"),
        _char(m.replident, "replident"),
    )
    cols = m.columns
    if not isinstance(cols, (tuple, list)):
        raise TypeError(f"columns must be a tuple of RelationColumn, not {type(cols).__name__}")
    out.append(_i16(len(cols), "number of columns"))
    for i, col in enumerate(cols):
        if not isinstance(col, RelationColumn):
            raise TypeError(f"columns[{i}] must be a RelationColumn, not {type(col).__name__}")
        out += (
            _u8(col.flags, f"columns[{i}].flags"),
            _string(col.name, f"columns[{i}].name"),
            _u32(col.type_oid, f"columns[{i}].type_oid"),
            _i32(col.typmod, f"columns[{i}].typmod"),
        )


def _type(m, out):
    _stream_xid(m, out)
    out += (_u32(m.typid, "typid"), _string(m.nspname, "nspname"), _string(m.typname, "typname"))


def _insert(m, out):
    _stream_xid(m, out)
    out += (_u32(m.relid, "relid"), b"N")
    _tuple_data(m.new, "new", out)


def _update(m, out):
    _stream_xid(m, out)
    out.append(_u32(m.relid, "relid"))
    if m.old_kind is not None:
        out.append(_char(m.old_kind, "old_kind", ("K", "O")))
        _tuple_data(m.old, "old", out)
    elif m.old is not None:
        raise ValueError("Update.old must be None when old_kind is None")
    out.append(b"N")
    _tuple_data(m.new, "new", out)


def _delete(m, out):
    _stream_xid(m, out)
    out += (_u32(m.relid, "relid"), _char(m.old_kind, "old_kind", ("K", "O")))
    _tuple_data(m.old, "old", out)


def _truncate(m, out):
    _stream_xid(m, out)
    relids = m.relids
    if not isinstance(relids, (tuple, list)):
        raise TypeError(f"relids must be a tuple of ints, not {type(relids).__name__}")
    out += (_i32(len(relids), "number of relids"), _u8(m.options, "options"))
    out += [_u32(r, f"relids[{i}]") for i, r in enumerate(relids)]


def _logical_message(m, out):
    _stream_xid(m, out)
    out += (
        _u8(m.flags, "flags"),
        _u64(m.lsn, "lsn"),
        _string(m.prefix, "prefix"),
        _length_prefixed(m.content, "content"),
    )


def _stream_start(m, out):
    out += (_u32(m.xid, "xid"), _u8(m.first_segment, "first_segment"))


def _stream_stop(m, out):
    pass


def _stream_commit(m, out):
    out += (
        _u32(m.xid, "xid"),
        _u8(m.flags, "flags"),
        _u64(m.commit_lsn, "commit_lsn"),
        _u64(m.end_lsn, "end_lsn"),
        _i64(m.commit_ts, "commit_ts"),
    )


def _stream_abort(m, out):
    out += (_u32(m.xid, "xid"), _u32(m.subxid, "subxid"))
    if m.abort_lsn is not None:
        if m.abort_ts is None:
            raise ValueError("StreamAbort.abort_ts must be set when abort_lsn is")
        out += (_u64(m.abort_lsn, "abort_lsn"), _i64(m.abort_ts, "abort_ts"))
    elif m.abort_ts is not None:
        raise ValueError("StreamAbort.abort_lsn must be set when abort_ts is")


def _begin_prepare(m, out):
    out += (
        _u64(m.prepare_lsn, "prepare_lsn"),
        _u64(m.end_lsn, "end_lsn"),
        _i64(m.prepare_ts, "prepare_ts"),
        _u32(m.xid, "xid"),
        _string(m.gid, "gid"),
    )


def _prepare(m, out):  # also Stream Prepare: identical layout
    out += (
        _u8(m.flags, "flags"),
        _u64(m.prepare_lsn, "prepare_lsn"),
        _u64(m.end_lsn, "end_lsn"),
        _i64(m.prepare_ts, "prepare_ts"),
        _u32(m.xid, "xid"),
        _string(m.gid, "gid"),
    )


def _commit_prepared(m, out):
    out += (
        _u8(m.flags, "flags"),
        _u64(m.commit_lsn, "commit_lsn"),
        _u64(m.end_lsn, "end_lsn"),
        _i64(m.commit_ts, "commit_ts"),
        _u32(m.xid, "xid"),
        _string(m.gid, "gid"),
    )


def _rollback_prepared(m, out):
    out += (
        _u8(m.flags, "flags"),
        _u64(m.prepare_end_lsn, "prepare_end_lsn"),
        _u64(m.rollback_end_lsn, "rollback_end_lsn"),
        _i64(m.prepare_ts, "prepare_ts"),
        _i64(m.rollback_ts, "rollback_ts"),
        _u32(m.xid, "xid"),
        _string(m.gid, "gid"),
    )


_WRITERS = {
    Begin: _begin,
    Commit: _commit,
    Origin: _origin,
    Relation: _relation,
    Type: _type,
    Insert: _insert,
    Update: _update,
    Delete: _delete,
    Truncate: _truncate,
    LogicalMessage: _logical_message,
    StreamStart: _stream_start,
    StreamStop: _stream_stop,
    StreamCommit: _stream_commit,
    StreamAbort: _stream_abort,
    BeginPrepare: _begin_prepare,
    Prepare: _prepare,
    CommitPrepared: _commit_prepared,
    RollbackPrepared: _rollback_prepared,
    StreamPrepare: _prepare,
}


def encode_message(msg) -> bytes:
    """Serialise one message object to its pgoutput wire bytes (type byte first).

    Raises ``TypeError`` for an object that is not a message (or has fields of the
    wrong type) and ``ValueError`` for values the wire format cannot carry.
    """
    writer = _WRITERS.get(type(msg))
    if writer is None:
        raise TypeError(f"not a pgoutput message object: {type(msg).__name__}")
    out = [msg.type_byte.encode("ascii")]
    writer(msg, out)
    return b"".join(out)
