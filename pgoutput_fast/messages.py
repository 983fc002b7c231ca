"""Message objects returned by ``decode_message`` (both implementations share them).

Every class is an immutable tuple subclass (built on ``collections.namedtuple``):
fields are attributes, objects compare by type *and* value, hash, pickle, and have a
readable repr in which LSNs print as ``X/X`` and timestamps as ISO times.

Field names follow docs/protocol.md in snake_case. LSNs are ``int``; timestamps are ``int``
microseconds since 2000-01-01 UTC, with a ``*_time`` property giving a ``datetime``.
Names (schema, relation, column, type, origin, prefix, GID) are ``str`` decoded as
UTF-8 with ``surrogateescape``, so bytes that are not UTF-8 survive a round trip.
``Decoder`` is stricter: the names it puts into Arrow schemas and columns (Relation,
Type, Origin) must be UTF-8 (``errors.check_names_utf8``).
"""

from __future__ import annotations

import abc
from collections import namedtuple

from .lsn import format_lsn, pg_timestamp_to_datetime

__all__ = [
    "UNCHANGED_TOAST",
    "Value",
    "RelationColumn",
    "Message",
    "Begin",
    "Commit",
    "Origin",
    "Relation",
    "Type",
    "Insert",
    "Update",
    "Delete",
    "Truncate",
    "LogicalMessage",
    "StreamStart",
    "StreamStop",
    "StreamCommit",
    "StreamAbort",
    "BeginPrepare",
    "Prepare",
    "CommitPrepared",
    "RollbackPrepared",
    "StreamPrepare",
    "MESSAGE_TYPES",
]


class _UnchangedToast:
    """Sentinel for TupleData ``'u'``: an unchanged TOASTed value that was not sent.

    It is never ``None`` (``None`` is SQL NULL): keep the previous value of the column.
    """

    __slots__ = ()
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self):
        return "UNCHANGED_TOAST"

    def __reduce__(self):
        return "UNCHANGED_TOAST"

    def __bool__(self):
        return True


UNCHANGED_TOAST = _UnchangedToast()


class _Record(tuple):
    """Base for all value records: equality needs the same type, not just same fields."""

    __slots__ = ()

    def __eq__(self, other):
        return type(self) is type(other) and tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((type(self).__name__, tuple(self)))


def _fmt_field(name, value):
    if value is None:
        return "None"
    if name.endswith("lsn") and isinstance(value, int):
        return format_lsn(value)
    if name.endswith("_ts") and isinstance(value, int):
        try:
            return pg_timestamp_to_datetime(value).isoformat()
        except (OverflowError, ValueError):
            return str(value)
    return repr(value)


def _record(name, fields, doc, defaults=None, type_byte=None):
    base = namedtuple(name, fields, defaults=defaults)  # type: ignore[misc]  # built at run time
    ns = {
        "__slots__": (),
        "__doc__": doc,
        "__eq__": _Record.__eq__,
        "__ne__": _Record.__ne__,
        "__hash__": _Record.__hash__,
        "__repr__": lambda self: "%s(%s)"
        % (name, ", ".join(f"{f}={_fmt_field(f, v)}" for f, v in zip(self._fields, self))),
    }
    if type_byte is not None:
        ns["type_byte"] = type_byte
    cls = type(name, (base,), ns)
    cls.__module__ = __name__
    for field in fields:
        if field.endswith("_ts"):
            prop = field[:-3] + "_time"

            def getter(self, _i=fields.index(field)):
                v = self[_i]
                return None if v is None else pg_timestamp_to_datetime(v)

            setattr(cls, prop, property(getter, doc=f"``{field}`` as an aware datetime (UTC)."))
    return cls


Value = _record(
    "Value",
    ["format", "data"],
    "A sent column value: ``format`` is ``'t'`` (text output) or ``'b'`` (binary send "
    "format), ``data`` the raw bytes.",
)

RelationColumn = _record(
    "RelationColumn",
    ["flags", "name", "type_oid", "typmod"],
    "One column of a Relation message. ``flags`` bit 0 = part of the replica identity.",
)
RelationColumn.is_key = property(lambda self: bool(self.flags & 1))


Begin = _record("Begin", ["final_lsn", "commit_ts", "xid"], "Begin ``B``.", type_byte="B")
Commit = _record(
    "Commit", ["flags", "commit_lsn", "end_lsn", "commit_ts"], "Commit ``C``.", type_byte="C"
)
Origin = _record("Origin", ["origin_lsn", "name"], "Origin ``O``.", type_byte="O")
Relation = _record(
    "Relation",
    ["relid", "nspname", "relname", "replident", "columns", "xid"],
    "Relation ``R``. ``replident`` is one of ``'d' 'n' 'f' 'i'``; ``columns`` a tuple of "
    "RelationColumn; ``xid`` is the stream XID inside a stream block, else None.",
    defaults=(None,),
    type_byte="R",
)
Type = _record(
    "Type", ["typid", "nspname", "typname", "xid"], "Type ``Y``.", defaults=(None,), type_byte="Y"
)
Insert = _record(
    "Insert",
    ["relid", "new", "xid"],
    "Insert ``I``. ``new`` is a TupleData: a tuple with, per column, None (NULL), "
    "UNCHANGED_TOAST or a Value.",
    defaults=(None,),
    type_byte="I",
)
Update = _record(
    "Update",
    ["relid", "old_kind", "old", "new", "xid"],
    "Update ``U``. ``old_kind`` is ``'K'``, ``'O'`` or None (then ``old`` is None).",
    defaults=(None,),
    type_byte="U",
)
Delete = _record(
    "Delete",
    ["relid", "old_kind", "old", "xid"],
    "Delete ``D``. ``old_kind`` is ``'K'`` or ``'O'``.",
    defaults=(None,),
    type_byte="D",
)
Truncate = _record(
    "Truncate",
    ["options", "relids", "xid"],
    "Truncate ``T``. ``options`` bit 0 = CASCADE, bit 1 = RESTART IDENTITY.",
    defaults=(None,),
    type_byte="T",
)
Truncate.cascade = property(lambda self: bool(self.options & 1))
Truncate.restart_identity = property(lambda self: bool(self.options & 2))
LogicalMessage = _record(
    "LogicalMessage",
    ["flags", "lsn", "prefix", "content", "xid"],
    "Logical decoding message ``M`` (``pg_logical_emit_message``). ``content`` is bytes.",
    defaults=(None,),
    type_byte="M",
)
LogicalMessage.transactional = property(lambda self: bool(self.flags & 1))
StreamStart = _record("StreamStart", ["xid", "first_segment"], "Stream Start ``S``.", type_byte="S")
StreamStop = _record("StreamStop", [], "Stream Stop ``E``.", type_byte="E")
StreamCommit = _record(
    "StreamCommit",
    ["xid", "flags", "commit_lsn", "end_lsn", "commit_ts"],
    "Stream Commit ``c``.",
    type_byte="c",
)
StreamAbort = _record(
    "StreamAbort",
    ["xid", "subxid", "abort_lsn", "abort_ts"],
    "Stream Abort ``A``. ``abort_lsn``/``abort_ts`` are sent only with streaming "
    "'parallel' (protocol 4); None otherwise.",
    defaults=(None, None),
    type_byte="A",
)
BeginPrepare = _record(
    "BeginPrepare",
    ["prepare_lsn", "end_lsn", "prepare_ts", "xid", "gid"],
    "Begin Prepare ``b``.",
    type_byte="b",
)
Prepare = _record(
    "Prepare",
    ["flags", "prepare_lsn", "end_lsn", "prepare_ts", "xid", "gid"],
    "Prepare ``P``.",
    type_byte="P",
)
CommitPrepared = _record(
    "CommitPrepared",
    ["flags", "commit_lsn", "end_lsn", "commit_ts", "xid", "gid"],
    "Commit Prepared ``K``.",
    type_byte="K",
)
RollbackPrepared = _record(
    "RollbackPrepared",
    ["flags", "prepare_end_lsn", "rollback_end_lsn", "prepare_ts", "rollback_ts", "xid", "gid"],
    "Rollback Prepared ``r``.",
    type_byte="r",
)
StreamPrepare = _record(
    "StreamPrepare",
    ["flags", "prepare_lsn", "end_lsn", "prepare_ts", "xid", "gid"],
    "Stream Prepare ``p``.",
    type_byte="p",
)

#: type byte (one-character str) -> message class
MESSAGE_TYPES = {
    cls.type_byte: cls
    for cls in (
        Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate,
        LogicalMessage, StreamStart, StreamStop, StreamCommit, StreamAbort,
        BeginPrepare, Prepare, CommitPrepared, RollbackPrepared, StreamPrepare,
    )
}


class Message(metaclass=abc.ABCMeta):
    """Abstract base: ``isinstance(m, Message)`` is true for every decoded message."""

    __slots__ = ()


for _cls in MESSAGE_TYPES.values():
    Message.register(_cls)
del _cls

