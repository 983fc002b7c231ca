"""Segment files, the checkpoint, the transaction tracker and the resume filter.

Layout of a capture directory::

    checkpoint.json              the durable state (see ``CaptureState``), replaced atomically
    0000000001.parquet           segments, in order; columns lsn, data, ordinal
    0000000002.parquet
    .0000000003.parquet.tmp      being written (ignored and removed on resume)

A segment is valid only if ``checkpoint.json`` lists it (``last_segment``): a segment
renamed into place just before a crash, whose checkpoint never got written, is removed
on resume and its transactions are received again.
"""

from __future__ import annotations

import json
import os
import queue
import struct
import threading
import time
from typing import Any

import pyarrow as pa

__all__ = ["SEGMENT_SCHEMA", "CaptureState", "TransactionTracker", "SegmentWriter",
           "read_segments", "iter_segments", "segment_paths", "load_state", "CHECKPOINT"]

CHECKPOINT = "checkpoint.json"
FORMAT = 1

#: The columns of a segment (``framing.read_capture`` reads ``lsn`` and ``data``).
SEGMENT_SCHEMA = pa.schema([
    pa.field("lsn", pa.int64(), nullable=False),       # XLogData dataStart (0/0 for R, Y, ...)
    pa.field("data", pa.binary(), nullable=False),     # one pgoutput message
    pa.field("ordinal", pa.int64(), nullable=False),   # position in the whole capture, from 0
])

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def _segment_name(seq: int) -> str:
    return f"{seq:010d}.parquet"


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cstring(data, pos):
    end = data.index(b"\0", pos)
    return data[pos:end].decode("utf-8", "surrogateescape"), end + 1


# ======================================================================================
# state
# ======================================================================================

class CaptureState:
    """What is durable: written into ``checkpoint.json`` after each segment.

    * ``durable_lsn``: the highest end LSN of a transaction outcome in a durable
      segment (Commit, Stream Commit, Commit/Rollback Prepared, Prepare, Stream Prepare)
      or the LSN of a durable non-transactional Message. It is the flush position sent.
    * ``open_streams``: xids of streamed transactions with blocks in durable segments
      and no outcome yet.
    * ``finished_streams``: ``{xid: end_lsn}`` of streamed transactions committed or
      prepared in durable segments, kept until the slot has confirmed past them.
    * ``prepares``: ``[[gid, prepare_end_lsn, outcome_end_lsn or None], ...]`` of prepared
      transactions in durable segments, kept until the slot has confirmed past the
      outcome.
    """

    def __init__(self):
        self.durable_lsn = 0
        self.last_segment = 0
        self.next_ordinal = 0
        self.open_streams = set()
        self.finished_streams = {}
        self.prepares = []
        self.transactions = 0
        self.options = None
        self.slot = None

    def copy(self):
        s = CaptureState()
        s.__dict__.update(self.__dict__)
        s.open_streams = set(self.open_streams)
        s.finished_streams = dict(self.finished_streams)
        s.prepares = [list(p) for p in self.prepares]
        return s

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "slot": self.slot,
            "options": self.options,
            "durable_lsn": self.durable_lsn,
            "last_segment": self.last_segment,
            "next_ordinal": self.next_ordinal,
            "transactions": self.transactions,
            "open_streams": sorted(self.open_streams),
            "finished_streams": {str(k): v for k, v in sorted(self.finished_streams.items())},
            "prepares": self.prepares,
        }

    @classmethod
    def from_json(cls, d) -> "CaptureState":
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown checkpoint format {d.get('format')!r}")
        s = cls()
        s.slot = d.get("slot")
        s.options = d.get("options")
        s.durable_lsn = int(d["durable_lsn"])
        s.last_segment = int(d["last_segment"])
        s.next_ordinal = int(d["next_ordinal"])
        s.transactions = int(d.get("transactions", 0))
        s.open_streams = {int(x) for x in d.get("open_streams", [])}
        s.finished_streams = {int(k): int(v) for k, v in d.get("finished_streams", {}).items()}
        s.prepares = [list(p) for p in d.get("prepares", [])]
        return s

    def prune(self, confirmed_flush: int):
        """Forget what the server can no longer send again: outcomes whose end the
        slot has confirmed (``confirmed_flush_lsn`` at connection time)."""
        self.finished_streams = {x: e for x, e in self.finished_streams.items() if e > confirmed_flush}
        self.prepares = [p for p in self.prepares if p[2] is None or p[2] > confirmed_flush]


def load_state(directory) -> CaptureState | None:
    path = os.path.join(directory, CHECKPOINT)
    try:
        with open(path, encoding="utf-8") as f:
            return CaptureState.from_json(json.load(f))
    except FileNotFoundError:
        return None


def _write_checkpoint(directory, state: CaptureState):
    path = os.path.join(directory, CHECKPOINT)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state.to_json(), f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


def clean_directory(directory, state: CaptureState | None) -> list:
    """Remove temp files and segments the checkpoint does not list; return their names."""
    last = state.last_segment if state else 0
    removed = []
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if name.endswith(".tmp"):
            os.unlink(full)
            removed.append(name)
        elif name.endswith(".parquet") and name[:-8].isdigit() and int(name[:-8]) > last:
            os.unlink(full)
            removed.append(name)
    if removed:
        _fsync_dir(directory)
    return removed


# ======================================================================================
# transaction tracking and the resume filter
# ======================================================================================

#: "finishing" message types whose end LSN advances the durable position
_B, _C, _O, _R, _Y, _M = b"BCORYM"
_S, _E, _c, _A = b"SEcA"
_b, _P, _p, _K, _r = b"bPpKr"


class TransactionTracker:
    """Follows the message grammar (PROTOCOL.md §3.1) to know where a segment may be
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
            if t == _C or t == _P:
                self.skipping = False
                self.in_txn = False
                return None
            if t == _E:
                self.skipping = False
                self.in_block = False
                return None
            if t == _R or t == _Y:
                return data[:1] + data[5:] if self.in_block else data
            return None
        if t == _B:
            self.in_txn = True
            final_lsn = _U64.unpack_from(data, 1)[0]
            if skip is not None and final_lsn < skip.durable_lsn:
                self.skipping = True
                self.skipped += 1
                return None
            return data
        if t == _C:
            self.in_txn = False
            self._finish(_U64.unpack_from(data, 10)[0])
            return data
        if t == _S:
            xid = _U32.unpack_from(data, 1)[0]
            self.in_block = True
            self.block_xid = xid
            if skip is not None and xid in skip.finished_streams:
                self.skipping = True
                return None
            st.open_streams.add(xid)
            return data
        if t == _E:
            self.in_block = False
            return data
        if t == _c:
            xid = _U32.unpack_from(data, 1)[0]
            if skip is not None and xid in skip.finished_streams:
                self.skipped += 1
                return None
            end = _U64.unpack_from(data, 14)[0]
            st.open_streams.discard(xid)
            st.finished_streams[xid] = end
            self._finish(end)
            return data
        if t == _A:
            xid, subxid = struct.unpack_from(">II", data, 1)
            if skip is not None and xid in skip.finished_streams:
                return None
            if xid == subxid:
                st.open_streams.discard(xid)
            return data
        if t == _b:
            end = _U64.unpack_from(data, 9)[0]
            gid, _ = _cstring(data, 29)
            self.in_txn = True
            if skip is not None and any(p[0] == gid and p[1] == end for p in skip.prepares):
                self.skipping = True
                self.skipped += 1
                return None
            return data
        if t == _P:
            end = _U64.unpack_from(data, 10)[0]
            gid, _ = _cstring(data, 30)
            self.in_txn = False
            st.prepares.append([gid, end, None])
            self._finish(end)
            return data
        if t == _p:
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
        if t == _K or t == _r:
            if t == _K:
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
        if t == _M and not (self.in_txn or self.in_block):
            # non-transactional Message: its own LSN is its identity
            if skip is not None and lsn <= skip.durable_lsn:
                return None
            if lsn > st.durable_lsn:
                st.durable_lsn = lsn
            return data
        return data


# ======================================================================================
# the writer thread
# ======================================================================================

class SegmentWriter:
    """Writes segments in a background thread, so that the replication connection is
    served (keepalives answered, data read) while Parquet is encoded and fsynced.

    ``append(table)`` adds a row group to the open segment; ``close(state)`` finishes it:
    write, fsync, rename, fsync the directory, then the checkpoint (same steps). After
    that ``durable`` holds the state's ``durable_lsn``: the flush position to send.
    """

    def __init__(self, directory, *, compression="zstd", metadata=None, write_delay=0.0,
                 max_bytes=128 << 20):
        self.directory = directory
        self.compression = compression
        self.metadata = metadata or {}
        self.write_delay = write_delay     # tests: make writing slow on purpose
        self.queue: queue.Queue = queue.Queue(maxsize=64)
        #: bytes of queued chunks not yet written (bounded by ``max_bytes``: a writer
        #: slower than the stream holds the reader back, memory stays flat)
        self.max_bytes = max_bytes
        self.pending_bytes = 0
        self._room = threading.Condition()
        self.lock = threading.Lock()
        self.durable = None                # CaptureState of the last durable segment
        self.segments_written = 0
        self.bytes_written = 0
        self.error = None
        self._writer = None
        self._tmp: Any = None
        self._thread = threading.Thread(target=self._run, name="pgoutput-fast-segment-writer",
                                        daemon=True)
        self._thread.start()

    # main thread side
    def put(self, item, keepalive=None):
        """Queue ``item``; while the queue is full, call ``keepalive()`` (serve the
        connection) instead of blocking."""
        while True:
            if self.error is not None:
                raise self.error
            try:
                self.queue.put(item, timeout=0.2)
                return
            except queue.Full:
                if keepalive is not None:
                    keepalive()

    def append(self, seq, arrays, keepalive=None):
        size = sum(a.nbytes for a in arrays)
        with self._room:
            while self.pending_bytes and self.pending_bytes + size > self.max_bytes:
                if self.error is not None:
                    raise self.error
                if not self._room.wait(0.2) and keepalive is not None:
                    keepalive()
            self.pending_bytes += size
        self.put(("append", seq, (arrays, size)), keepalive)

    def close_segment(self, seq, state, keepalive=None):
        self.put(("close", seq, state), keepalive)

    def abort_segment(self, seq, keepalive=None):
        self.put(("abort", seq, None), keepalive)

    def idle(self) -> bool:
        return self.queue.unfinished_tasks == 0

    def finish(self, timeout=None):
        self.put(("stop", None, None))
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def take_durable(self):
        with self.lock:
            d, self.durable = self.durable, None
        return d

    # writer thread side
    def _run(self):
        import pyarrow.parquet as pq

        while True:
            kind, seq, payload = self.queue.get()
            try:
                if kind == "stop":
                    self._discard()
                    return
                if kind == "append":
                    if self._writer is None:
                        self._tmp = os.path.join(self.directory, "." + _segment_name(seq) + ".tmp")
                        schema = SEGMENT_SCHEMA.with_metadata(
                            {k: json.dumps(v) for k, v in self.metadata.items()})
                        self._schema = schema
                        self._writer = pq.ParquetWriter(self._tmp, schema,
                                                        compression=self.compression,
                                                        use_dictionary=False,
                                                        write_statistics=["lsn", "ordinal"])
                    arrays, size = payload
                    payload = None
                    try:
                        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema))
                    finally:
                        del arrays
                        with self._room:
                            self.pending_bytes -= size
                            self._room.notify_all()
                elif kind == "abort":
                    self._discard()
                elif kind == "close":
                    self._close(seq, payload)
            except BaseException as exc:  # surfaced to the main thread by put()
                self.error = exc
                self._discard()
            finally:
                self.queue.task_done()

    def _discard(self):
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:
                pass
            self._writer = None
        if self._tmp and os.path.exists(self._tmp):
            os.unlink(self._tmp)
        self._tmp = None

    def _close(self, seq, state: CaptureState):
        if self._writer is None:   # nothing appended: only the checkpoint moves
            _write_checkpoint(self.directory, state)
        else:
            self._writer.close()
            self._writer = None
            if self.write_delay:
                time.sleep(self.write_delay)
            fd = os.open(self._tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            final = os.path.join(self.directory, _segment_name(seq))
            self.bytes_written += os.path.getsize(self._tmp)
            os.replace(self._tmp, final)
            self._tmp = None
            _fsync_dir(self.directory)
            state.last_segment = seq
            _write_checkpoint(self.directory, state)
            self.segments_written += 1
        with self.lock:
            self.durable = state


# ======================================================================================
# reading
# ======================================================================================

def segment_paths(directory) -> list:
    """The durable segments of a capture directory, in order."""
    state = load_state(directory)
    if state is None:
        return []
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".parquet") and name[:-8].isdigit() and int(name[:-8]) <= state.last_segment:
            out.append(os.path.join(directory, name))
    return out


def iter_segments(directory, columns=("lsn", "data", "ordinal")):
    """Yield one ``pa.Table`` per durable segment, in order. Feed them, in this order,
    to one ``pgoutput_fast.Decoder`` (a streamed or prepared transaction can span
    segments)."""
    import pyarrow.parquet as pq

    expect = 0
    for path in segment_paths(directory):
        table = pq.read_table(path, columns=list(columns))
        if "ordinal" in table.column_names and table.num_rows:
            first = table.column("ordinal")[0].as_py()
            if first != expect:
                raise ValueError(f"{path}: starts at ordinal {first}, expected {expect}")
            expect = first + table.num_rows
        yield table


def read_segments(directory, columns=("lsn", "data", "ordinal")) -> pa.Table:
    """All durable segments of a capture directory as one table, in order."""
    tables = list(iter_segments(directory, columns))
    if not tables:
        return SEGMENT_SCHEMA.empty_table().select(list(columns))
    return pa.concat_tables(tables)
