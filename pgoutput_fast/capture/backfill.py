"""A backfill: the rows of tables added to the publication after the slot was made.

A slot sends only what commits after its consistent point, so the rows a table held
before it was added to the publication (``ALTER PUBLICATION ... ADD TABLE``) never
come through the stream. ``pgoutput-fast snapshot --table s.t --out BACKFILL_DIR``
(``run_backfill``) copies them, consistently with the running stream, the way
PostgreSQL's table-sync worker does:

1. The directory must be new (or hold a backfill cut short, which is started again:
   its checkpoint proves it was never readable). A checkpoint saying
   ``snapshot.state = "creating"``, ``kind = "backfill"``, with the tables, is made
   durable first.
2. A *temporary* logical slot is created with an exported snapshot
   (``CREATE_REPLICATION_SLOT ... TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')``).
   Its consistent point ``P`` is the hand-over LSN: the snapshot holds exactly the
   transactions that committed before ``P`` (commit LSN < ``P``); every slot on the
   server, the capture's included, sends those that commit at or after it. The slot
   is never started; it goes away with its connection.
3. The named tables (each must be published by ``--publication``, as of the snapshot)
   are copied inside the snapshot with the initial snapshot's machinery
   (``snapshot._copy``: ``--snapshot-workers`` connections, COPY, synthetic
   transactions with xid 0 below ``P``, op ``'r'``), each table's rows preceded by a
   synthetic ``Truncate`` of it: applied, the backfill *replaces* the table's rows.
4. After the last segment is durable the checkpoint says ``"done"`` (with ``P`` as
   ``consistent_point``, the tables and the summary); only then is the directory
   readable (``iter_segments``, Spark), as for an initial snapshot. The connection is
   closed, which drops the temporary slot: nothing is confirmed anywhere, the running
   capture is never touched.

The hand-over (``pgoutput_fast.delta.backfill_needed``, applied by
``apply_changeset(..., backfills=[DIR])``, ``run_pipeline(..., backfills=[DIR])`` and
``pipeline --backfill DIR``): for a backfilled table, the capture's changes with
commit LSN < ``P`` are in the backfill; those at or after ``P`` are not. Applying a
backfill replaces the table's rows and sets its applied position to ``(P - 1, max)``,
so the position filter then applies exactly the stream's changes at or after ``P``.
That is only right while the table has applied nothing at or past ``P``: otherwise
the backfill is refused (take it again: a new backfill's point is past everything
applied before it). The backfill's own record (Delta transaction ``pgoutput_fast.
backfill`` = ``P``) makes applying it again a no-op.

Two-phase (a ``--two-phase`` capture): a prepared transaction's rows carry the position
of its COMMIT PREPARED (the decoder replays them there), not of its PREPARE, so one
prepared before ``P`` and committed at or after ``P`` (not in the snapshot) is applied
from the stream, as the rule says. A transaction prepared before the backfill starts
holds the slot's creation until it ends (PostgreSQL counts it as running), so ``P`` is
then past it (``tests/capture/test_backfill.py``).

A crash or stop in the middle leaves the checkpoint saying ``creating``/``copying``:
readers see no segment; the temporary slot died with the connection. Run the same
command again (into the same directory, which is then reset, or a fresh one).
"""

from __future__ import annotations

import os
import threading
import time

from ..lsn import format_lsn
from .errors import CaptureError, DirectoryRefused, DurabilityError, ServerRefused
from .runner import CaptureConfig, CaptureResult, _Progress
from .state import CaptureState

__all__ = ["BackfillConfig", "Backfill", "run_backfill", "read_backfill", "BACKFILL"]

#: ``snapshot.kind`` in a backfill directory's checkpoint
BACKFILL = "backfill"


class BackfillConfig(CaptureConfig):
    """``CaptureConfig`` and the tables to copy (``schema.table``); the slot is a
    temporary one of its own (``slot`` is its name)."""

    def __init__(self, dsn, publication, out, tables, **kw):
        slot = kw.pop("slot", None) or f"pgoutput_fast_backfill_{os.getpid()}_{int(time.time() * 1000) % 10**9}"
        kw.setdefault("snapshot", "only")
        super().__init__(dsn, slot, publication, out, **kw)
        self.tables = list(tables)


class Backfill:
    """A completed backfill directory: its hand-over point and tables."""

    def __init__(self, directory, point: int, tables: list, binary: bool, system_identifier,
                 database, summary=None):
        self.directory = directory
        self.point = point
        self.tables = tables
        self.binary = binary
        self.system_identifier = system_identifier
        self.database = database
        self.summary = summary

    def __repr__(self):
        return (f"Backfill({self.directory!r}, point={format_lsn(self.point)}, "
                f"tables={self.tables})")


def is_backfill(state: CaptureState | None) -> bool:
    return state is not None and (state.snapshot or {}).get("kind") == BACKFILL


def read_backfill(directory, *, storage_options=None, filesystem=None) -> Backfill:
    """The ``Backfill`` of a directory ``pgoutput-fast snapshot`` wrote; one clear
    ``DirectoryRefused`` when it is not one, or not complete."""
    from .segments import load_state

    state = load_state(directory, storage_options=storage_options, filesystem=filesystem)
    if state is None:
        raise DirectoryRefused(f"{directory}: not a backfill directory (no checkpoint.json): "
                               "give the --out of pgoutput-fast snapshot")
    snap = state.snapshot or {}
    if snap.get("kind") != BACKFILL:
        raise DirectoryRefused(f"{directory}: a capture directory, not a backfill (pgoutput-fast "
                               "snapshot --table ... --out DIR writes one)")
    if snap.get("state") != "done":
        raise DirectoryRefused(f"{directory}: the backfill was cut short ({snap.get('state')}): "
                               "nothing in it can be applied; take it again (pgoutput-fast "
                               "snapshot)")
    return Backfill(directory, int(snap["consistent_point"]), list(snap["tables"]),
                    bool((state.options or {}).get("binary")), state.system_identifier,
                    state.database, snap.get("summary"))


def _check_tables(tables) -> list:
    out = []
    for t in tables or ():
        name = t.strip()
        schema, dot, rel = name.partition(".")
        if not dot or not schema or not rel:
            raise CaptureError(f"--table {t!r}: give the table as schema.table (e.g. "
                               "public.orders)")
        if name not in out:
            out.append(name)
    if not out:
        raise CaptureError("a backfill needs at least one --table schema.table")
    return out


def _prepare_directory(out, file_mode, progress) -> CaptureState | None:
    """None for a new directory; the state of a backfill cut short (started again);
    anything else is refused, nothing changed."""
    from .store import MANIFEST, read_checkpoint, segment_seq
    from .errors import SegmentError

    try:
        state = read_checkpoint(out)
    except SegmentError as exc:
        raise DirectoryRefused(f"{exc}. Nothing was changed: give a new directory") from None
    if state is None:
        names = [n for n in os.listdir(out) if segment_seq(n) is not None or n == MANIFEST]
        if names:
            raise DirectoryRefused(f"{out} holds segments but no checkpoint: a backfill needs a "
                                   "new directory. Nothing was changed")
        return None
    if not is_backfill(state):
        raise DirectoryRefused(f"{out} holds a capture: a backfill goes into a directory of its "
                               "own (never the capture's). Nothing was changed: give a new --out")
    snap = state.snapshot or {}
    if snap.get("state") == "done":
        raise DirectoryRefused(f"{out} holds a completed backfill (point "
                               f"{format_lsn(int(snap['consistent_point']))}): give "
                               "a new --out for another one. Nothing was changed")
    return state


def run_backfill(cfg: BackfillConfig, stop_event: threading.Event | None = None) -> CaptureResult:
    """Copy ``cfg.tables`` into ``cfg.out`` as a backfill (module doc). Returns the
    ``CaptureResult`` (``result.snapshot``: the summary, with the point), or one with
    ``snapshot`` None when stopped before the end (nothing readable; run it again)."""
    from .dsn import connect_error
    from .runner import _check_names
    from .snapshot import _WorkerConnections, _copy, _reset_directory, create_slot_exported
    from .store import checkpoint_or_fail, new_capture_id, open_directory
    from .stream import ConnectFailed, ReplicationStream, choose_options

    stop_event = stop_event or threading.Event()
    tables = _check_tables(cfg.tables)
    pubs = _check_names(cfg)
    out = os.fspath(cfg.out)
    progress = _Progress(cfg.progress, cfg.log_interval)
    lock = open_directory(out, cfg.file_mode, "backfill")
    result = CaptureResult()
    t0 = time.monotonic()
    try:
        old = _prepare_directory(out, cfg.file_mode, progress)
        stream = ReplicationStream(cfg.dsn, application_name="pgoutput-fast-backfill")
        try:
            try:
                stream.open()
            except ConnectFailed as exc:
                raise (connect_error(exc.cause, cfg.dsn) or exc.cause) from None
            system_id, database = stream.identify()
            missing = stream.missing_publications(pubs)
            if missing:
                raise ServerRefused(f"publication {', '.join(repr(m) for m in missing)} does not "
                                    f"exist in database {database!r}: give the capture's "
                                    "publication(s)")
            options = choose_options(stream.version_num, pubs, binary=cfg.binary)
            creating = {"state": "creating", "kind": BACKFILL, "tables": tables,
                        "slot": cfg.slot}
            state = CaptureState()
            state.capture_id = new_capture_id()
            if old is not None:
                try:
                    state = _reset_directory(out, old, cfg.file_mode, progress, creating)
                except OSError as exc:
                    raise DurabilityError(f"resetting {out} failed: {exc.strerror or exc}; "
                                          "nothing was created on the server") from None
            state.system_identifier, state.database = system_id, database
            state.slot = cfg.slot
            state.publications = list(pubs)
            state.options = options.as_dict()
            state.snapshot = creating
            checkpoint_or_fail(out, state, cfg.file_mode, "nothing was created on the server")
            workers = _WorkerConnections(
                cfg.dsn, max(1, int(getattr(cfg, "snapshot_workers", 1) or 1)))
            try:
                # the horizon held until the workers import the snapshot (hold_horizon)
                workers.hold_horizon()
                point, snapshot_name = create_slot_exported(stream, cfg.slot, False,
                                                            temporary=True)
                progress.event("backfill_slot", slot=cfg.slot, point=format_lsn(point),
                               snapshot=snapshot_name, tables=tables)
                state.snapshot = {"state": "copying", "kind": BACKFILL, "tables": tables,
                                  "slot": cfg.slot, "consistent_point": point,
                                  "snapshot_name": snapshot_name,
                                  "started": round(time.time(), 3)}
                state.acked_lsn = point
                checkpoint_or_fail(out, state, cfg.file_mode, "nothing was confirmed")
                done = _copy(cfg, stream, state, point, snapshot_name, options, progress,
                             stop_event, result, workers, only_tables=tables)
            finally:
                workers.close()
            if done is not None:
                progress.event("backfill_done", point=format_lsn(point), tables=tables,
                               rows=result.snapshot["rows"] if result.snapshot else None)
        finally:
            # the temporary slot goes with its connection
            stream.close()
    finally:
        lock.release()
        progress.done()
        result.seconds = time.monotonic() - t0
    return result
