"""The transaction tracker: follows the message grammar to know where a segment may be
cut, keeps the state that becomes durable with a segment, and drops what the server
sends again after a restart (the resume filter; the package docstring says how)."""

from __future__ import annotations

import struct

from ..protocol import (BEGIN, BEGIN_PREPARE, COMMIT, COMMIT_PREPARED, MESSAGE, PREPARE,
                        RELATION, ROLLBACK_PREPARED, STREAM_ABORT, STREAM_COMMIT,
                        STREAM_PREPARE, STREAM_START, STREAM_STOP, TYPE)
from .state import CaptureState

__all__ = ["TransactionTracker"]

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _cstring(data, pos):
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8", "surrogateescape"), end + 1





class TransactionTracker:
    """Follows the message grammar (docs/protocol.md §3.1) to know where a segment may be
    cut, keeps the state that becomes durable with a segment, and drops what the
    server sends again after a restart (``resume``).

    ``process(lsn, data)`` returns the bytes to keep (``data`` itself, a shortened
    Relation/Type, or ``None`` to drop the message).
    """

    def __init__(self, state: CaptureState, *, streaming_parallel=False):
        self.state = state.copy()            # evolves with every kept message
        self.skip = None                     # the resume snapshot (a CaptureState) or None
        self.in_txn = False                  # inside B..C or b..P
        self.in_block = False                # inside S..E
        self.skipping = False                # inside a unit that is a re-sent duplicate
        self.block_xid = None
        self.parallel = streaming_parallel
        self.skipped = 0

    @property
    def at_boundary(self) -> bool:
        return not (self.in_txn or self.in_block)

    def resume(self, confirmed_flush: int) -> list:
        """Start a new walsender session. Returns the synthetic messages to write first:
        a Stream Abort for every streamed transaction left open in durable segments
        (the server streams it again from its first change, ``first_segment`` = 1)."""
        self.state.prune(confirmed_flush)
        self.skip = self.state.copy()
        self.in_txn = self.in_block = self.skipping = False
        out = []
        for xid in sorted(self.state.open_streams):
            msg = b"A" + _U32.pack(xid) + _U32.pack(xid)
            if self.parallel:
                msg += bytes(16)    # abort_lsn 0, abort_ts 0: as the server's inferred abort
            out.append(msg)
        self.state.open_streams.clear()
        return out

    def _finish(self, end_lsn):
        if end_lsn > self.state.durable_lsn:
            self.state.durable_lsn = end_lsn
        self.state.transactions += 1

    def process(self, lsn: int, data: bytes):
        t = data[0]
        st = self.state
        skip = self.skip
        if self.skipping:
            # inside a duplicate: keep only the schema (the server will not send it again
            # in this session, and later transactions may depend on it)
            if t == COMMIT or t == PREPARE:
                self.skipping = False
                self.in_txn = False
                return None
            if t == STREAM_STOP:
                self.skipping = False
                self.in_block = False
                return None
            if t == RELATION or t == TYPE:
                return data[:1] + data[5:] if self.in_block else data
            return None
        if t == BEGIN:
            self.in_txn = True
            final_lsn = _U64.unpack_from(data, 1)[0]
            if skip is not None and final_lsn < skip.durable_lsn:
                self.skipping = True
                self.skipped += 1
                return None
            return data
        if t == COMMIT:
            self.in_txn = False
            self._finish(_U64.unpack_from(data, 10)[0])
            return data
        if t == STREAM_START:
            xid = _U32.unpack_from(data, 1)[0]
            self.in_block = True
            self.block_xid = xid
            if skip is not None and xid in skip.finished_streams:
                self.skipping = True
                return None
            st.open_streams.add(xid)
            return data
        if t == STREAM_STOP:
            self.in_block = False
            return data
        if t == STREAM_COMMIT:
            xid = _U32.unpack_from(data, 1)[0]
            if skip is not None and xid in skip.finished_streams:
                self.skipped += 1
                return None
            end = _U64.unpack_from(data, 14)[0]
            st.open_streams.discard(xid)
            st.finished_streams[xid] = end
            self._finish(end)
            return data
        if t == STREAM_ABORT:
            xid, subxid = struct.unpack_from(">II", data, 1)
            if skip is not None and xid in skip.finished_streams:
                return None
            if xid == subxid:
                st.open_streams.discard(xid)
            return data
        if t == BEGIN_PREPARE:
            end = _U64.unpack_from(data, 9)[0]
            gid, _ = _cstring(data, 29)
            self.in_txn = True
            if skip is not None and any(p[0] == gid and p[1] == end for p in skip.prepares):
                self.skipping = True
                self.skipped += 1
                return None
            return data
        if t == PREPARE:
            end = _U64.unpack_from(data, 10)[0]
            gid, _ = _cstring(data, 30)
            self.in_txn = False
            st.prepares.append([gid, end, None])
            self._finish(end)
            return data
        if t == STREAM_PREPARE:
            end = _U64.unpack_from(data, 10)[0]
            gid, _ = _cstring(data, 30)
            xid = _U32.unpack_from(data, 26)[0]
            if skip is not None and xid in skip.finished_streams:
                self.skipped += 1
                return None
            st.open_streams.discard(xid)
            st.finished_streams[xid] = end
            st.prepares.append([gid, end, None])
            self._finish(end)
            return data
        if t == COMMIT_PREPARED or t == ROLLBACK_PREPARED:
            if t == COMMIT_PREPARED:
                end = _U64.unpack_from(data, 10)[0]
                gid, _ = _cstring(data, 30)
                prepare_end = None
            else:
                prepare_end, end = struct.unpack_from(">QQ", data, 2)
                gid, _ = _cstring(data, 38)
            if skip is not None and end <= skip.durable_lsn:
                self.skipped += 1
                return None
            for p in st.prepares:
                if p[0] == gid and p[2] is None and (prepare_end is None or p[1] == prepare_end):
                    p[2] = end
                    break
            self._finish(end)
            return data
        if t == MESSAGE and not (self.in_txn or self.in_block):
            # non-transactional Message: its own LSN is its identity
            if skip is not None and lsn <= skip.durable_lsn:
                return None
            if lsn > st.durable_lsn:
                st.durable_lsn = lsn
            return data
        return data


