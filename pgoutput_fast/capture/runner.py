"""The capture loop: read the slot, cut segments at transaction boundaries, make them
durable in a writer thread, confirm the flush position, resume after crashes."""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time

from ..lsn import format_lsn
from .segments import (CaptureState, SegmentWriter, TransactionTracker, clean_directory,
                       load_state)
from .stream import CaptureError, ConnectionLost, ReplicationStream, choose_options

__all__ = ["CaptureConfig", "CaptureResult", "run_capture"]

class CaptureConfig:
    """Everything ``run_capture`` needs (the CLI flags, one to one)."""

    def __init__(self, dsn, slot, publication, out, *, create_slot=False,
                 proto_version="auto", binary=False, messages=False, streaming=None,
                 two_phase=False, origin=None, segment_bytes=64 << 20, segment_seconds=10.0,
                 chunk_bytes=8 << 20, memory_bytes=256 << 20, until_lsn=None, progress="auto",
                 log_interval=10.0,
                 max_backoff=30.0, max_reconnects=None, stop_timeout=60.0, write_delay=0.0,
                 compression="zstd", ack_delay=0.0):
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.out = out
        self.create_slot = create_slot
        self.proto_version = proto_version
        self.binary = binary
        self.messages = messages
        self.streaming = streaming
        self.two_phase = two_phase
        self.origin = origin
        self.segment_bytes = segment_bytes
        self.segment_seconds = segment_seconds
        #: the memory budget for message data held in the process (received, waiting
        #: for the writer thread, being encoded): independent of transaction size, a
        #: transaction larger than the budget is written to the open segment in chunks
        self.memory_bytes = max(int(memory_bytes), 1 << 20)
        self.chunk_bytes = max(64 << 10, min(chunk_bytes, segment_bytes, self.memory_bytes // 8, 1 << 30))
        self.until_lsn = until_lsn
        self.progress = progress
        self.log_interval = log_interval
        self.max_backoff = max_backoff
        self.max_reconnects = max_reconnects
        self.stop_timeout = stop_timeout
        self.write_delay = write_delay
        self.compression = compression
        #: tests only: confirm a durable position this many seconds late (widens the
        #: window "checkpoint written, status update not sent" that a crash can hit)
        self.ack_delay = ack_delay


class CaptureResult:
    def __init__(self):
        self.messages = 0          # kept and written
        self.bytes = 0
        self.transactions = 0
        self.skipped = 0           # duplicates dropped after a restart
        self.segments = 0
        self.reconnects = 0
        self.flush_lsn = 0
        self.seconds = 0.0
        self.peak_rss = 0          # the process's peak resident set size, bytes

    def __repr__(self):
        return (f"CaptureResult(messages={self.messages}, bytes={self.bytes}, "
                f"transactions={self.transactions}, segments={self.segments}, "
                f"skipped={self.skipped}, reconnects={self.reconnects}, "
                f"flush_lsn={format_lsn(self.flush_lsn)}, seconds={self.seconds:.2f})")


class _Progress:
    """A live line on a terminal, JSON lines otherwise (both on stderr)."""

    def __init__(self, mode, log_interval, stream=sys.stderr):
        if mode == "auto":
            mode = "tty" if stream.isatty() else "log"
        self.mode = mode
        self.stream = stream
        self.interval = 1.0 if mode == "tty" else log_interval
        self.t_last = time.monotonic()
        self.last = (0, 0)

    def event(self, event, **fields):
        if self.mode == "off":
            return
        if self.mode == "tty":
            self.stream.write("\r\x1b[K")
        rec = {"ts": round(time.time(), 3), "event": event}
        rec.update(fields)
        self.stream.write(json.dumps(rec) + "\n")
        self.stream.flush()

    def tick(self, result, stream: ReplicationStream, force=False):
        if self.mode == "off":
            return
        now = time.monotonic()
        if not force and now - self.t_last < self.interval:
            return
        dt = max(now - self.t_last, 1e-9)
        msgs = (result.messages - self.last[0]) / dt
        mbs = (result.bytes - self.last[1]) / dt / 1e6
        self.t_last, self.last = now, (result.messages, result.bytes)
        lag = None
        try:
            lag = max(0, stream.current_wal_lsn() - stream.server_wal_end)
        except Exception:
            pass
        if self.mode == "tty":
            lag_s = "?" if lag is None else f"{lag / 1e6:.1f} MB"
            self.stream.write(
                f"\r\x1b[K{msgs:>10,.0f} msg/s {mbs:>7.1f} MB/s  {result.transactions:,} txns  "
                f"{result.segments} segments  lsn {format_lsn(stream.server_wal_end)}  "
                f"flushed {format_lsn(stream.flush_lsn)}  lag {lag_s}")
            self.stream.flush()
        else:
            self.event("progress", messages_per_s=round(msgs), mb_per_s=round(mbs, 2),
                       messages=result.messages, transactions=result.transactions,
                       segments=result.segments, lsn=format_lsn(stream.server_wal_end),
                       flushed=format_lsn(stream.flush_lsn), lag_bytes=lag)

    def done(self):
        if self.mode == "tty":
            self.stream.write("\n")
            self.stream.flush()


def _setup_slot(stream: ReplicationStream, cfg: CaptureConfig):
    info = stream.slot_info(cfg.slot)
    if info is None:
        if not cfg.create_slot:
            raise CaptureError(f"replication slot {cfg.slot!r} does not exist (use --create-slot)")
        stream.ensure_publication(cfg.publication)
        stream.create_slot(cfg.slot, two_phase=cfg.two_phase)
        info = stream.slot_info(cfg.slot)
    elif cfg.create_slot:
        stream.ensure_publication(cfg.publication)
    confirmed, _two_phase, plugin, _db, _pid = info
    if plugin != "pgoutput":
        raise CaptureError(f"slot {cfg.slot!r} uses the plugin {plugin!r}, not pgoutput")
    return info


def run_capture(cfg: CaptureConfig, stop_event: threading.Event | None = None) -> CaptureResult:
    """Capture until ``stop_event`` is set (or ``cfg.until_lsn`` is flushed). Returns a
    ``CaptureResult``. Raises ``CaptureError`` for problems a retry cannot fix."""
    import psycopg2

    stop_event = stop_event or threading.Event()
    os.makedirs(cfg.out, exist_ok=True)
    state = load_state(cfg.out) or CaptureState()
    removed = clean_directory(cfg.out, state)
    progress = _Progress(cfg.progress, cfg.log_interval)
    if removed:
        progress.event("removed_incomplete", files=removed)
    result = CaptureResult()
    t0 = time.monotonic()
    backoff = 0.5
    try:
        while not stop_event.is_set():
            stream = ReplicationStream(cfg.dsn)
            try:
                stream.open()
                confirmed = _setup_slot(stream, cfg)[0]
                options = choose_options(
                    stream.version_num, cfg.publication, proto_version=cfg.proto_version,
                    binary=cfg.binary, messages=cfg.messages, streaming=cfg.streaming,
                    two_phase=cfg.two_phase, origin=cfg.origin)
                state.slot = cfg.slot
                state.options = options.as_dict()
                progress.event("connected", server_version=stream.version_num, slot=cfg.slot,
                               confirmed_flush=format_lsn(confirmed),
                               durable=format_lsn(state.durable_lsn),
                               command=options.command(cfg.slot),
                               peak_rss_mib=round(_peak_rss() / 2**20, 1))
                received = _session(cfg, stream, options, state, confirmed, stop_event,
                                    progress, result)
                if received:
                    backoff = 0.5
                if stop_event.is_set() or _until_done(cfg, stream):
                    break
            except (ConnectionLost, psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                if cfg.max_reconnects is not None and result.reconnects >= cfg.max_reconnects:
                    raise
                result.reconnects += 1
                progress.event("disconnected", error=str(exc).strip()[:500],
                               retry_in_s=backoff)
                stop_event.wait(backoff)
                backoff = min(backoff * 2, cfg.max_backoff)
            finally:
                stream.close()
                # the durable state is the one on disk (a crash would see the same)
                state = load_state(cfg.out) or CaptureState()
                clean_directory(cfg.out, state)
    finally:
        progress.done()
        result.seconds = time.monotonic() - t0
        result.peak_rss = _peak_rss()
    return result


def _peak_rss() -> int:
    """This process's peak resident set size in bytes (0 if unknown). Linux: VmHWM,
    which starts afresh at exec (``ru_maxrss`` keeps the high-water mark of the process
    image before exec, e.g. a large parent that spawned the capture)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:   # Windows
        return 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024   # bytes on macOS, KiB elsewhere


def _until_done(cfg, stream):
    return cfg.until_lsn is not None and stream.flush_lsn >= cfg.until_lsn


def _session(cfg, stream, options, state, confirmed, stop_event, progress, result) -> bool:
    """One walsender session. Returns whether anything was received."""
    tracker = TransactionTracker(state, streaming_parallel=options.streaming == "parallel")
    synthetic = tracker.resume(confirmed)
    stream.set_flush(max(confirmed, state.durable_lsn))
    stream.start(cfg.slot, options, 0)
    stream.send_status()
    writer = SegmentWriter(cfg.out, compression=cfg.compression, write_delay=cfg.write_delay,
                           max_bytes=cfg.memory_bytes // 2,
                           metadata={"slot": cfg.slot, "options": options.as_dict(),
                                     "server_version_num": stream.version_num})
    seq = state.last_segment + 1
    seg_base = result.segments
    chunk_limit = cfg.chunk_bytes
    next_ordinal = state.next_ordinal
    # message columns (C memory with the native loop, lists with the ctypes loop): the
    # messages of one read (``batch``) and the row group being filled (``chunk``)
    columns = stream.columns_type
    overhead = columns.MESSAGE_OVERHEAD
    batch = columns()
    chunk = columns()
    chunk_cost = 0     # message bytes + ``overhead`` per message
    seg_bytes = 0
    seg_messages = 0
    seg_started = time.monotonic()
    received_any = False
    stopping_since = None

    def serve():   # keep the connection answered while waiting for the writer
        stream.read(0.0, max_messages=0)

    def flush_chunk():
        nonlocal chunk_cost, next_ordinal
        n = len(chunk)
        if not n:
            return
        arrays = chunk.take_arrays(next_ordinal)   # leaves the chunk empty
        chunk_cost = 0
        next_ordinal += n
        result.messages += n
        result.bytes += arrays[1].buffers()[2].size
        writer.append(seq, arrays, keepalive=serve)

    def close_segment():
        nonlocal seq, seg_bytes, seg_messages, seg_started
        flush_chunk()
        snap = tracker.state.copy()
        snap.next_ordinal = next_ordinal
        writer.close_segment(seq, snap, keepalive=serve)
        seq += 1
        seg_bytes = seg_messages = 0
        seg_started = time.monotonic()

    held: collections.deque = collections.deque()   # (time durable, lsn): only with cfg.ack_delay (tests)

    def collect_durable(final=False):
        d = writer.take_durable()
        result.segments = seg_base + writer.segments_written
        if d is not None:
            held.append((time.monotonic(), d.durable_lsn))
        lsn = None
        while held and (final or time.monotonic() - held[0][0] >= cfg.ack_delay):
            lsn = held.popleft()[1]
        if lsn is not None and lsn > stream.flush_lsn:
            stream.set_flush(lsn)
            stream.send_status()
        result.flush_lsn = stream.flush_lsn

    for msg in synthetic:
        chunk.append(0, msg)
        chunk_cost += len(msg) + overhead
        seg_bytes += len(msg)
        seg_messages += 1
    try:
        # one read: the messages, and the indices of those that are not changes inside
        # a transaction (``ctrl``): only those go through the tracker one by one; the runs
        # of changes between them are copied to the chunk in one call each
        ctrl: list = []
        read_bytes = max(64 << 10, cfg.memory_bytes // 8)
        while True:
            # wait less while a segment is being made durable: its acknowledgement
            # follows sooner
            got = stream.read_batch(0.1 if writer.idle() else 0.01, batch, ctrl, read_bytes)
            if got:
                received_any = True
            due_by_time = seg_messages and time.monotonic() - seg_started >= cfg.segment_seconds
            process = tracker.process
            prev = 0
            ctrl.append(got)     # the run after the last control message
            for i in ctrl:
                if i > prev:
                    if not tracker.skipping:
                        # changes inside a transaction or block: no cut point, nothing to
                        # track. Also inside a transaction larger than memory the chunk
                        # goes to the open segment's temp file, renamed (and acknowledged)
                        # only at a boundary
                        a = prev
                        while a < i:
                            # no more than fits in the chunk: a row group stays within
                            # ``chunk_bytes`` (a read can hold a whole one)
                            b = batch.fit(a, i, chunk_limit - chunk_cost)
                            nb = chunk.extend_from(batch, a, b)
                            chunk_cost += nb + overhead * (b - a)
                            seg_bytes += nb
                            seg_messages += b - a
                            if chunk_cost >= chunk_limit:
                                flush_chunk()
                            a = b
                    else:
                        # inside a re-sent duplicate: dropped, but for Relation/Type
                        for j in range(prev, i):
                            keep = process(batch.lsn(j), batch.message(j))
                            if keep is not None:
                                chunk.append(batch.lsn(j), keep)
                                chunk_cost += len(keep) + overhead
                                seg_bytes += len(keep)
                                seg_messages += 1
                if i == got:
                    break
                prev = i + 1
                lsn = batch.lsn(i)
                keep = process(lsn, batch.message(i))
                if keep is None:
                    continue
                chunk.append(lsn, keep)
                n = len(keep)
                chunk_cost += n + overhead
                seg_bytes += n
                seg_messages += 1
                if not (tracker.in_txn or tracker.in_block):
                    if seg_bytes >= cfg.segment_bytes or due_by_time:
                        close_segment()
                        due_by_time = False
                    elif chunk_cost >= chunk_limit:
                        flush_chunk()
                elif chunk_cost >= chunk_limit:
                    flush_chunk()
            batch.clear()
            ctrl.clear()
            if seg_messages and tracker.at_boundary and (
                    (not got and (due_by_time or stop_event.is_set()))
                    or (cfg.until_lsn is not None and stream.server_wal_end >= cfg.until_lsn)):
                # (at --until-lsn: everything before it is in, no need to wait for a pause)
                close_segment()
            collect_durable()
            result.skipped = tracker.skipped
            idle = (not seg_messages and writer.idle() and tracker.at_boundary
                    and not tracker.skipping and not held)
            if idle and stream.server_wal_end > stream.flush_lsn:
                # everything received is durable: confirm the server's position, so that
                # skipped empty transactions do not cause a keepalive storm (§1.3)
                stream.set_flush(stream.server_wal_end)
                result.flush_lsn = stream.flush_lsn
            if idle and _until_done(cfg, stream):
                stream.send_status()
                break
            if stop_event.is_set():
                if stopping_since is None:
                    stopping_since = time.monotonic()
                if idle:
                    stream.send_status()
                    break
                if tracker.at_boundary and seg_messages:
                    close_segment()
                elif time.monotonic() - stopping_since > cfg.stop_timeout:
                    progress.event("stop_timeout", note="a transaction did not end in time; "
                                   "its part is dropped and will be received again")
                    writer.abort_segment(seq, keepalive=serve)
                    seg_messages = 0
                    chunk.clear()
                    chunk_cost = 0
                    break
            progress.tick(_with_txns(result, tracker), stream)
    except BaseException:
        try:
            writer.abort_segment(seq)
        except BaseException:
            pass
        writer.finish(timeout=60)
        raise
    writer.finish(timeout=None)
    collect_durable(final=True)
    try:
        stream.send_status()
    except ConnectionLost:
        pass
    _with_txns(result, tracker)
    return received_any


def _with_txns(result, tracker):
    result.transactions = tracker.state.transactions
    return result
