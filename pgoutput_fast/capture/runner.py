"""The capture loop: read the slot, cut segments at transaction boundaries, make them
durable in a writer thread, confirm the flush position, resume after crashes."""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import threading
import time

from ..lsn import format_lsn
from .errors import CaptureError, DirectoryRefused, ServerRefused
from .state import CaptureState
from .store import (STREAM_COMPRESSION, checkpoint_or_fail, new_capture_id, open_directory,
                    plan_recovery, upgrade_legacy)
from .stream import (ConnectFailed, ConnectionLost, ReplicationStream, SlotBusy, choose_options,
                     publication_list)
from .snapshot import initial_snapshot, snapshot_mode, snapshot_needed
from .tracker import TransactionTracker
from .writer import SegmentWriter

__all__ = ["CaptureConfig", "CaptureResult", "run_capture"]

class CaptureConfig:
    """Everything ``run_capture`` needs (the CLI flags, one to one)."""

    def __init__(self, dsn, slot, publication, out, *, create_slot=False,
                 proto_version="auto", binary=False, messages=False, streaming=None,
                 two_phase=False, origin=None, segment_bytes=64 << 20, segment_seconds=10.0,
                 chunk_bytes=8 << 20, memory_bytes=256 << 20, until_lsn=None, progress="auto",
                 log_interval=10.0,
                 max_backoff=30.0, max_reconnects=None, stop_timeout=60.0, write_delay=0.0,
                 compression=None, ack_delay=0.0, file_mode=0o600, slot_busy_timeout=10.0,
                 idle_checkpoint_seconds=1.0, snapshot=None, snapshot_workers=1,
                 snapshot_range_blocks=None):
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
        #: the segments' Parquet codec ("zstd", "lz4", "snappy", "none", ...); None: zstd
        #: for the stream's segments, lz4 for the snapshot's (``store.STREAM_COMPRESSION``,
        #: ``store.SNAPSHOT_COMPRESSION``); a value given applies to both
        self.compression = compression
        #: tests only: confirm a durable position this many seconds late (widens the
        #: window "checkpoint written, status update not sent" that a crash can hit)
        self.ack_delay = ack_delay
        #: mode of the files capture creates (segments, checkpoint, manifest, lock); a
        #: directory it creates gets the matching x bits (0600 -> 0700)
        self.file_mode = file_mode
        #: how long to wait for a slot held by another process before giving up
        self.slot_busy_timeout = slot_busy_timeout
        #: at most one checkpoint a this often to confirm the server's position while idle
        self.idle_checkpoint_seconds = idle_checkpoint_seconds
        #: the initial snapshot: "initial", "never", "only"; None: "initial" with
        #: ``create_slot``, else "never" (``capture/snapshot.py``)
        self.snapshot = snapshot
        #: connections copying the snapshot in parallel (all in the same exported snapshot)
        self.snapshot_workers = max(1, int(snapshot_workers))
        #: with more than one worker, tables are split into ranges of this many blocks
        self.snapshot_range_blocks = snapshot_range_blocks
        #: tests only: a pause after each snapshot transaction written (a window to kill
        #: capture in the middle of the copy)
        self.snapshot_chunk_delay = 0.0


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
        self.snapshot = None       # the initial snapshot's summary (a dict), when copied

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


_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


def _check_names(cfg: CaptureConfig) -> list:
    """The publications as a list; a slot name PostgreSQL would refuse, refused here
    (before anything is created)."""
    if not _SLOT_NAME.fullmatch(cfg.slot or ""):
        raise CaptureError(f"invalid slot name {cfg.slot!r}: a replication slot name holds only "
                           "lower-case letters, digits and underscores (at most 63)")
    return publication_list(cfg.publication)


def _setup_slot(stream: ReplicationStream, cfg: CaptureConfig, pubs: list, created: dict,
                stop_event) -> tuple:
    """The slot's ``(confirmed_flush, two_phase, plugin, database, active_pid)``, after
    creating it (and missing publications) with ``--create-slot``. Waits up to
    ``cfg.slot_busy_timeout`` for a slot held by another process."""
    missing = stream.missing_publications(pubs)
    if missing:
        if not cfg.create_slot or stream.slot_info(cfg.slot) is not None:
            raise ServerRefused(
                f"publication {', '.join(repr(m) for m in missing)} does not exist in database "
                f"{stream.database!r}: create it (CREATE PUBLICATION ... FOR TABLE ...) before the "
                "slot, or pass --create-slot to create both (FOR ALL TABLES)")
        for name in missing:
            stream.create_publication(name)
            created.setdefault("publications", []).append(name)
    info = stream.slot_info(cfg.slot)
    if info is None:
        if not cfg.create_slot:
            raise ServerRefused(f"replication slot {cfg.slot!r} does not exist in database "
                                f"{stream.database!r} (pass --create-slot to create it)")
        stream.create_slot(cfg.slot, two_phase=cfg.two_phase)
        created["slot"] = cfg.slot
        info = stream.slot_info(cfg.slot)
    confirmed, _two_phase, plugin, db, pid = info
    if plugin != "pgoutput":
        raise ServerRefused(f"slot {cfg.slot!r} uses the plugin {plugin!r}, not pgoutput")
    if db != stream.database:
        raise ServerRefused(f"slot {cfg.slot!r} belongs to database {db!r}, not to "
                            f"{stream.database!r} of the connection: connect to {db!r}")
    deadline = time.monotonic() + cfg.slot_busy_timeout
    while pid is not None and pid != stream.backend_pid:
        if time.monotonic() >= deadline or stop_event.is_set():
            raise ServerRefused(_slot_busy_message(cfg, pid))
        stop_event.wait(0.5)
        info = stream.slot_info(cfg.slot)
        if info is None:
            raise ServerRefused(f"replication slot {cfg.slot!r} was dropped while capture waited")
        pid = info[4]
    return info


def _create_publications(stream, cfg, pubs, created):
    missing = stream.missing_publications(pubs)
    if missing and not cfg.create_slot:
        raise ServerRefused(
            f"publication {', '.join(repr(m) for m in missing)} does not exist in database "
            f"{stream.database!r}: create it (CREATE PUBLICATION ... FOR TABLE ...) before the "
            "slot, or pass --create-slot to create both (FOR ALL TABLES)")
    for name in missing:
        stream.create_publication(name)
        created.setdefault("publications", []).append(name)


def _slot_busy_message(cfg, pid):
    return (f"replication slot {cfg.slot!r} is in use by another process (pid {pid}) and stayed "
            f"so for {cfg.slot_busy_timeout:g} s: stop that consumer (or terminate it with "
            f"pg_terminate_backend({pid})) and start capture again")


def _check_identity(rec, out, system_id, database, slot, pubs):
    st = rec.state
    if st is None:
        return
    if (st.snapshot or {}).get("kind") == "backfill":
        raise DirectoryRefused(
            f"{out} holds a backfill (pgoutput-fast snapshot), not a capture: a capture "
            "never writes into it. Nothing was changed: give the capture's own --out")
    problems = []
    if st.system_identifier is not None and st.system_identifier != system_id:
        problems.append(f"server (system identifier {st.system_identifier}, now {system_id})")
    if st.database is not None and st.database != database:
        problems.append(f"database ({st.database!r}, now {database!r})")
    if st.slot is not None and st.slot != slot:
        problems.append(f"slot ({st.slot!r}, now {slot!r})")
    if st.publications is not None and sorted(st.publications) != sorted(pubs):
        problems.append(f"publications ({', '.join(st.publications)}; now {', '.join(pubs)})")
    if problems:
        raise DirectoryRefused(
            f"{out} holds the capture of another {' and '.join(problems)}: a capture directory "
            "holds one stream. Nothing was changed: give the same options, or use another --out")


def _drop_created(stream, created, progress):
    """Remove what this run created before anything was captured (a failed start)."""
    try:
        if created.get("slot"):
            stream.drop_slot(created["slot"])
            progress.event("dropped_slot", slot=created["slot"],
                           note="created by this run, which failed before capturing anything")
        for name in created.get("publications", []):
            stream.drop_publication(name)
            progress.event("dropped_publication", publication=name)
    except Exception as exc:   # the original error matters more; say what is left
        progress.event("cleanup_failed", error=str(exc).strip()[:300], created=created)


def run_capture(cfg: CaptureConfig, stop_event: threading.Event | None = None) -> CaptureResult:
    """Capture until ``stop_event`` is set (or ``cfg.until_lsn`` is flushed). Returns a
    ``CaptureResult``. Raises a ``CaptureError`` (``capture.errors``: each class has its
    exit status) for what a retry cannot fix: it then has confirmed nothing that is not
    in a durable checkpoint."""
    import psycopg2

    from .dsn import connect_error

    stop_event = stop_event or threading.Event()
    pubs = _check_names(cfg)
    out = os.fspath(cfg.out)
    progress = _Progress(cfg.progress, cfg.log_interval)
    lock = open_directory(out, cfg.file_mode)
    result = CaptureResult()
    t0 = time.monotonic()
    backoff = 0.5
    connected_once = False
    started = False            # START_REPLICATION succeeded once: the directory is in use
    created: dict = {}
    busy_since = None          # when START_REPLICATION first found the slot held
    try:
        rec = plan_recovery(out)
        while not stop_event.is_set():
            stream = ReplicationStream(cfg.dsn)
            messages_before = result.messages
            try:
                try:
                    stream.open()
                except ConnectFailed as exc:
                    permanent = connect_error(exc.cause, cfg.dsn)
                    # nothing listening is permanent at the first attempt only (later it
                    # is a server restart); every other classified cause always is
                    if permanent is not None and (not connected_once
                                                  or getattr(permanent, "kind", None) != "refused"):
                        raise permanent from None
                    raise
                connected_once = True
                system_id, database = stream.identify()
                stream.database = database
                stream.system_identifier = system_id
                _check_identity(rec, out, system_id, database, cfg.slot, pubs)
                options = choose_options(
                    stream.version_num, pubs, proto_version=cfg.proto_version,
                    binary=cfg.binary, messages=cfg.messages, streaming=cfg.streaming,
                    two_phase=cfg.two_phase, origin=cfg.origin)
                if snapshot_needed(cfg, rec.state):
                    _create_publications(stream, cfg, pubs, created)
                    done = initial_snapshot(cfg, stream, rec, pubs, options, progress,
                                            stop_event, result, created)
                    # from now on the directory owns the slot: never dropped on failure
                    created.pop("slot", None)
                    started = True
                    rec = plan_recovery(out)
                    if done is None:
                        break
                if snapshot_mode(cfg) == "only":
                    break
                confirmed = _setup_slot(stream, cfg, pubs, created, stop_event)[0]
                rec.check_slot(confirmed, cfg.slot)
                removed = rec.apply(cfg.file_mode)
                if removed:
                    progress.event("removed_unconfirmed", files=removed)
                state = rec.state
                if state is not None and rec.legacy:
                    state = upgrade_legacy(out, state, cfg.file_mode)
                    progress.event("upgraded_directory", format=state.format)
                if state is None:
                    state = CaptureState()
                    state.capture_id = new_capture_id()
                    state.acked_lsn = confirmed
                state.system_identifier = system_id
                state.database = database
                state.slot = cfg.slot
                state.publications = list(pubs)
                state.options = options.as_dict()
                progress.event("connected", server_version=stream.version_num, slot=cfg.slot,
                               confirmed_flush=format_lsn(confirmed),
                               durable=format_lsn(state.durable_lsn),
                               command=options.command(cfg.slot),
                               peak_rss_mib=round(_peak_rss() / 2**20, 1))
                received = _session(cfg, stream, options, state, confirmed, stop_event,
                                    progress, result, out)
                started = True
                busy_since = None
                if received:
                    backoff = 0.5
                if stop_event.is_set() or _until_done(cfg, stream):
                    break
            except SlotBusy as exc:
                # the slot was taken between the check and START_REPLICATION (e.g. the
                # walsender of a connection just lost has not exited yet): wait within
                # the same bound as for a slot found busy
                busy_since = busy_since or time.monotonic()
                if time.monotonic() - busy_since >= cfg.slot_busy_timeout or stop_event.is_set():
                    raise ServerRefused(f"{_slot_busy_message(cfg, _pid_in(str(exc)))}") from None
                stop_event.wait(0.5)
            except (ConnectionLost, psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                permanent = _permanent_stream_error(str(exc), cfg, pubs)
                if permanent is not None:
                    raise permanent from None
                if cfg.max_reconnects is not None and result.reconnects >= cfg.max_reconnects:
                    raise
                if getattr(stream, "session_started", False):
                    busy_since = None
                if result.messages > messages_before:
                    backoff = 0.5       # that connection made progress: start the backoff again
                result.reconnects += 1
                progress.event("disconnected", error=_redact(str(exc).strip()[:500], cfg.dsn),
                               retry_in_s=backoff)
                stop_event.wait(backoff)
                backoff = min(backoff * 2, cfg.max_backoff)
            except BaseException:
                if created and not getattr(stream, "session_started", False) and not started:
                    _drop_created(stream, created, progress)
                raise
            finally:
                stream.close()
                # the durable state is the one on disk (a crash would see the same)
                rec = plan_recovery(out)
    finally:
        lock.release()
        progress.done()
        result.seconds = time.monotonic() - t0
        result.peak_rss = _peak_rss()
    return result


def _pid_in(text):
    m = re.search(r"PID (\d+)", text)
    return m.group(1) if m else "?"


def _redact(text, dsn):
    from .dsn import redact

    return redact(text, dsn)


def _permanent_stream_error(text: str, cfg, pubs=None):
    """An ERROR the walsender ends the stream with that a reconnect cannot fix."""
    m = re.search(r'publication "([^"]*)" does not exist', text)
    if m:
        return ServerRefused(
            f"the server cannot decode slot {cfg.slot!r} with publication {m.group(1)!r}: it does "
            "not exist as of the slot's position (a publication must be created before the "
            "slot that uses it). Create the slot again after the publication, or use a "
            "publication that existed then")
    return None


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


def _session(cfg, stream, options, state, confirmed, stop_event, progress, result, out) -> bool:
    """One walsender session. Returns whether anything was received."""
    tracker = TransactionTracker(state, streaming_parallel=options.streaming == "parallel")
    synthetic = tracker.resume(confirmed)
    stream.set_flush(max(confirmed, state.confirmable_lsn))
    # the identity and options, durable before anything is received (a new directory
    # gets its first checkpoint here: from now on it belongs to this slot, and a slot
    # this run created is no longer removed when a later step fails)
    checkpoint_or_fail(out, state, cfg.file_mode,
                       "nothing past the last checkpoint was confirmed")
    stream.session_started = True
    stream.start(cfg.slot, options, 0)
    stream.send_status()
    writer = SegmentWriter(out, state, compression=cfg.compression or STREAM_COMPRESSION,
                           write_delay=cfg.write_delay,
                           max_bytes=cfg.memory_bytes // 2, file_mode=cfg.file_mode,
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
            held.append((time.monotonic(), d.confirmable_lsn))
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
        last_idle_checkpoint = 0.0
        while True:
            writer.check()     # a failed write stops capture at once, idle or not
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
            if (idle and stream.server_wal_end > tracker.state.acked_lsn
                    and stream.server_wal_end > stream.flush_lsn
                    and (time.monotonic() - last_idle_checkpoint >= cfg.idle_checkpoint_seconds
                         or (cfg.until_lsn is not None and stream.server_wal_end >= cfg.until_lsn))):
                # everything received is durable and the server has moved on (past
                # transactions of other tables, skipped empty ones): confirm its position
                # too, so that WAL is released and no keepalive storm follows (§1.3); but
                # only once a checkpoint holds it (``acked_lsn``): a slot confirmed past
                # the newest checkpoint would hide a stale or lost one
                tracker.state.acked_lsn = stream.server_wal_end
                snap = tracker.state.copy()
                snap.next_ordinal = next_ordinal
                writer.checkpoint(snap, keepalive=serve)
                last_idle_checkpoint = time.monotonic()
                idle = False
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
        try:
            writer.finish(timeout=60)
        except BaseException:
            pass
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
