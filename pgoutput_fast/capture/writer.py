"""The segment writer thread: Parquet encoding, fsync and the checkpoint off the thread
that serves the replication connection."""

from __future__ import annotations

import queue
import threading
import time

from .errors import DurabilityError
from .state import CaptureState
from .store import DirectoryWriter

__all__ = ["SegmentWriter"]


class SegmentWriter:
    """Writes segments in a background thread, so that the replication connection is
    served (keepalives answered, data read) while Parquet is encoded and fsynced.

    ``append(seq, arrays)`` adds a row group to segment ``seq``; ``close_segment(seq,
    state)`` makes it durable and then the checkpoint (``DirectoryWriter.commit``);
    ``checkpoint(state)`` writes a checkpoint with no segment (a new ``acked_lsn``).
    After either, ``take_durable()`` returns the state written: the flush position to
    send is its ``confirmable_lsn``.

    The first failure poisons the writer: ``error`` is set, the open segment's temp file
    is dropped, and every later request is ignored, so that no checkpoint can follow a
    lost write. The capture loop checks ``error`` on every round and stops.
    """

    def __init__(self, directory, state: CaptureState, *, compression="zstd", metadata=None,
                 write_delay=0.0, max_bytes=128 << 20, file_mode=0o600):
        self.store = DirectoryWriter(directory, state, file_mode=file_mode,
                                     compression=compression, metadata=metadata)
        self.store.note_confirmable(state.confirmable_lsn)
        self.write_delay = write_delay     # tests: make writing slow on purpose
        self.queue: queue.Queue = queue.Queue(maxsize=64)
        #: bytes of queued chunks not yet written (bounded by ``max_bytes``: a writer
        #: slower than the stream holds the reader back, memory stays flat)
        self.max_bytes = max_bytes
        self.pending_bytes = 0
        self._room = threading.Condition()
        self.lock = threading.Lock()
        self.durable: CaptureState | None = None    # the last checkpoint written, not yet taken
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pgoutput-fast-segment-writer",
                                        daemon=True)
        self._thread.start()

    @property
    def segments_written(self) -> int:
        return self.store.segments_written

    @property
    def bytes_written(self) -> int:
        return self.store.bytes_written

    # main thread side
    def check(self):
        """Raise the writer's error, if any."""
        if self.error is not None:
            raise self.error

    def put(self, item, keepalive=None):
        """Queue ``item``; while the queue is full, call ``keepalive()`` (serve the
        connection) instead of blocking."""
        while True:
            self.check()
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
                self.check()
                if not self._room.wait(0.2) and keepalive is not None:
                    keepalive()
            self.pending_bytes += size
        self.put(("append", seq, (arrays, size)), keepalive)

    def close_segment(self, seq, state, keepalive=None):
        self.put(("close", seq, state), keepalive)

    def checkpoint(self, state, keepalive=None):
        self.put(("checkpoint", None, state), keepalive)

    def abort_segment(self, seq, keepalive=None):
        self.put(("abort", seq, None), keepalive)

    def idle(self) -> bool:
        return self.queue.unfinished_tasks == 0

    def finish(self, timeout=None):
        try:
            self.queue.put(("stop", None, None), timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        self.check()

    def take_durable(self):
        with self.lock:
            d, self.durable = self.durable, None
        return d

    # writer thread side
    def _run(self):
        while True:
            kind, seq, payload = self.queue.get()
            try:
                if kind == "stop":
                    self.store.discard()
                    return
                if self.error is not None:
                    if kind == "append":
                        self._release(payload[1])
                    continue          # poisoned: nothing more is written
                if kind == "append":
                    arrays, size = payload
                    payload = None
                    try:
                        if not self.store.open:
                            self.store.begin(seq)
                        self.store.write(arrays)
                    finally:
                        del arrays
                        self._release(size)
                elif kind == "abort":
                    self.store.discard()
                elif kind == "close":
                    if not self.store.open:
                        # a segment with nothing appended: cannot happen unless an append
                        # was lost; never write a checkpoint over it
                        raise DurabilityError(f"segment {seq} was closed with no data written; "
                                              "capture stopped before confirming it")
                    if self.write_delay:
                        time.sleep(self.write_delay)
                    written = self.store.commit(payload)
                    with self.lock:
                        self.durable = written
                elif kind == "checkpoint":
                    written = self.store.checkpoint(payload)
                    with self.lock:
                        self.durable = written
            except BaseException as exc:  # surfaced to the main thread by check()
                if not isinstance(exc, DurabilityError) and isinstance(exc, OSError):
                    exc = DurabilityError(f"writing to {self.store.directory} failed: {exc}; "
                                          "nothing past the last checkpoint was confirmed")
                self.error = exc
                self.store.discard()
            finally:
                self.queue.task_done()

    def _release(self, size):
        with self._room:
            self.pending_bytes -= size
            self._room.notify_all()
