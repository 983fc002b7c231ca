"""pgoutput's protocol facts in one place, for the Python side: the message type bytes,
which messages carry a stream's xid, and the transaction grammar (which messages open
and close a transaction, a stream block, a streamed or a prepared transaction).

Users: capture's tracker and receive loop, the Spark segment grouping, the demo's
batch cuts, the test harness. The native core keeps its own state machine (C needs
it inline); ``tests/test_protocol.py`` checks it against ``Grammar`` on generated
streams: the decoder holds nothing back exactly where ``Grammar.at_rest`` says.
"""

from __future__ import annotations

import struct

__all__ = ["BEGIN", "COMMIT", "ORIGIN", "RELATION", "TYPE", "INSERT", "UPDATE", "DELETE",
           "TRUNCATE", "MESSAGE", "STREAM_START", "STREAM_STOP", "STREAM_COMMIT",
           "STREAM_ABORT", "BEGIN_PREPARE", "PREPARE", "COMMIT_PREPARED", "ROLLBACK_PREPARED",
           "STREAM_PREPARE", "MESSAGE_TYPE_BYTES", "INSIDE_ONLY", "XID_FRAMED", "CHANGES",
           "UNIT_ENDS", "STREAM_OR_PREPARED", "SESSION_SETTINGS", "XID_FRAMED_CHARS",
           "Grammar"]

# the type byte of each message (PostgreSQL's LogicalRepMsgType)
BEGIN = 0x42              # B
COMMIT = 0x43             # C
ORIGIN = 0x4F             # O
RELATION = 0x52           # R
TYPE = 0x59               # Y
INSERT = 0x49             # I
UPDATE = 0x55             # U
DELETE = 0x44             # D
TRUNCATE = 0x54           # T
MESSAGE = 0x4D            # M (logical decoding message)
STREAM_START = 0x53       # S   protocol 2+
STREAM_STOP = 0x45        # E
STREAM_COMMIT = 0x63      # c
STREAM_ABORT = 0x41       # A
BEGIN_PREPARE = 0x62      # b   protocol 3+
PREPARE = 0x50            # P
COMMIT_PREPARED = 0x4B    # K
ROLLBACK_PREPARED = 0x72  # r
STREAM_PREPARE = 0x70     # p

MESSAGE_TYPE_BYTES = bytes([BEGIN, COMMIT, ORIGIN, RELATION, TYPE, INSERT, UPDATE, DELETE,
                            TRUNCATE, MESSAGE, STREAM_START, STREAM_STOP, STREAM_COMMIT,
                            STREAM_ABORT, BEGIN_PREPARE, PREPARE, COMMIT_PREPARED,
                            ROLLBACK_PREPARED, STREAM_PREPARE])

#: the changes of a transaction
CHANGES = frozenset((INSERT, UPDATE, DELETE, TRUNCATE))
#: messages that only occur inside ``B…C``, ``b…P`` or ``S…E`` (a Relation or Type a
#: consumer writes itself outside one aside): no transaction bookkeeping needed
INSIDE_ONLY = frozenset((INSERT, UPDATE, DELETE, TRUNCATE, ORIGIN, RELATION, TYPE))
#: messages that carry the (sub)transaction's xid after the type byte inside ``S…E``
XID_FRAMED = frozenset((INSERT, UPDATE, DELETE, TRUNCATE, RELATION, TYPE, MESSAGE))
#: messages after which a unit of work may have ended (what ``Grammar.at_rest`` can
#: turn true after)
UNIT_ENDS = frozenset((COMMIT, STREAM_COMMIT, COMMIT_PREPARED, ROLLBACK_PREPARED,
                       STREAM_ABORT))
#: messages that open or end streamed and prepared transactions (everything
#: ``Grammar`` needs besides ``B``/``C``/``b``/``P`` inside a segment's interior)
STREAM_OR_PREPARED = frozenset((STREAM_START, STREAM_STOP, STREAM_COMMIT, STREAM_ABORT,
                                STREAM_PREPARE, PREPARE, COMMIT_PREPARED, ROLLBACK_PREPARED))

#: Session settings the text form of values depends on (docs/protocol.md §4.1): capture
#: sets them on its walsender session, and every text-mode consumer must.
SESSION_SETTINGS = (
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("TimeZone", "UTC"),
    ("client_encoding", "UTF8"),
    ("bytea_output", "hex"),
)

#: the one-character type names of ``XID_FRAMED`` (for code that keeps the type as str)
XID_FRAMED_CHARS = frozenset(chr(t) for t in XID_FRAMED)

_U32 = struct.Struct(">I")


def _gid(data, pos) -> bytes:
    return bytes(data[pos:data.index(b"\0", pos)])


class Grammar:
    """Which units of work are open, message by message.

    * ``in_txn``: inside ``B…C`` or ``b…P``;
    * ``in_block``: inside a stream block ``S…E``;
    * ``streams``: xids of streamed transactions begun (``S``) and not yet ended by
      Stream Commit ``c``, Stream Prepare ``p`` or a top-level Stream Abort ``A``;
    * ``prepared``: GIDs of transactions prepared (``P``/``p``) and not yet ended by
      Commit Prepared ``K`` or Rollback Prepared ``r``.

    ``at_boundary``: no transaction or block open (a segment may be cut here).
    ``at_rest``: nothing open at all (a consumer that stops here holds nothing back).
    Only the type byte, the xid of ``S``/``c``/``A``/``p`` and the GID of ``P``/``p``/
    ``K``/``r`` are read; the messages are not otherwise checked.
    """

    __slots__ = ("in_txn", "in_block", "streams", "prepared")

    def __init__(self):
        self.in_txn = False
        self.in_block = False
        self.streams: set = set()
        self.prepared: set = set()

    @property
    def at_boundary(self) -> bool:
        return not (self.in_txn or self.in_block)

    @property
    def at_rest(self) -> bool:
        return not (self.in_txn or self.in_block or self.streams or self.prepared)

    def step(self, data) -> int:
        """Follow one message; returns its type byte."""
        t = data[0]
        if t == BEGIN or t == BEGIN_PREPARE:
            self.in_txn = True
        elif t == COMMIT:
            self.in_txn = False
        elif t == PREPARE:               # P: flags, prepare_lsn, end_lsn, ts, xid, gid
            self.in_txn = False
            self.prepared.add(_gid(data, 30))
        elif t == STREAM_START:          # S: xid, first_segment
            self.in_block = True
            self.streams.add(_U32.unpack_from(data, 1)[0])
        elif t == STREAM_STOP:
            self.in_block = False
        elif t == STREAM_COMMIT:         # c: xid, ...
            self.streams.discard(_U32.unpack_from(data, 1)[0])
        elif t == STREAM_PREPARE:        # p: flags, prepare_lsn, end_lsn, ts, xid, gid
            self.streams.discard(_U32.unpack_from(data, 26)[0])
            self.prepared.add(_gid(data, 30))
        elif t == STREAM_ABORT:          # A: xid, subxid[, abort_lsn, abort_ts]
            xid, sub = struct.unpack_from(">II", data, 1)
            if xid == sub:
                self.streams.discard(xid)
        elif t == COMMIT_PREPARED:       # K: flags, commit_lsn, end_lsn, ts, xid, gid
            self.prepared.discard(_gid(data, 30))
        elif t == ROLLBACK_PREPARED:     # r: flags, prepare_end, end, prepare_ts, ts, xid, gid
            self.prepared.discard(_gid(data, 38))
        return t
