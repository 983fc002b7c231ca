"""``pgoutput-fast capture``: arguments, signals, exit status.

Signals: ``pgoutput_fast.cli.main`` installs the SIGINT/SIGTERM handlers before it
imports anything heavy (``pgoutput_fast.signals``); they set ``signals.STOP``, which
is the ``stop_event`` of ``run_capture``. A signal before the first connection makes
the capture return at once (exit 0); later it finishes the current segment, confirms
it and exits 0. ``run`` called without ``main`` installs the same handlers itself.

Exit status: 0 after a stop or at ``--until-lsn``; ``exc.exit_code`` of a
``pgoutput_fast.capture.errors`` class (2 options and server settings, 3 connection
refused, 4 slot/publication/database refused, 5 directory refused, 6 durability, 7
damaged segments), after one line on stderr that holds no password; 1 and a traceback
(passwords replaced by ``***``) for anything else, which is a bug.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from ..lsn import format_lsn, parse_lsn

__all__ = ["add_arguments", "run", "DESCRIPTION", "add_backfill_arguments", "run_backfill",
           "BACKFILL_DESCRIPTION"]

DESCRIPTION = """\
Capture a logical replication slot (pgoutput) into Parquet segment files
(columns lsn, data, ordinal), cut at transaction boundaries, made durable
before the flush position is confirmed. Restart it after a crash: no
transaction is lost or written twice. SIGINT/SIGTERM: finish the current
segment, confirm it, exit 0. Read the result with
pgoutput_fast.capture.read_segments(DIR).

With --create-slot the rows the published tables already hold are copied
first (--snapshot initial), inside the new slot's exported snapshot, as
transactions ahead of the stream (op 'r'); the stream starts once they are
durable. A snapshot cut short is copied again at the next start.

The connection string: --dsn, else --dsn-file, else $PGOUTPUT_FAST_DSN, else
libpq's environment (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD,
PGPASSFILE, PGSERVICE), which also fills any key the string lacks. Keep the
password out of the command line (ps shows it): --dsn-file, PGPASSWORD or
~/.pgpass.

Exit status: 0 stopped or --until-lsn reached; 2 bad option or server
setting; 3 connection refused (password, role, pg_hba.conf, host, nothing
listening at the first attempt); 4 slot, publication or database refused, slot
busy; 5 --out refused (locked, damaged or of another slot); 6 a write or fsync
failed; 7 damaged segments; 1 a bug (traceback).
"""


BACKFILL_DESCRIPTION = """\
Backfill tables added to the publication after the capture's slot was made: their
existing rows, which the stream never sends. A temporary slot is created with an
exported snapshot; its consistent point P is the hand-over LSN: the named tables
are copied inside that snapshot (each preceded by a Truncate of it) into a
directory of their own (--out, never the capture's), durable before the command
says done; the temporary slot goes with the connection. Apply it with the
capture: pgoutput-fast pipeline --backfill DIR (or apply_changeset(...,
backfills=[DIR])): the backfill replaces the table's rows, then only the
capture's changes at or after P apply on top.

Exit status: as capture's (2 options, 3 connection, 4 table not published or
publication missing, 5 --out refused, 6 a write failed); 130/143 interrupted
(nothing readable; run it again).
"""


def _size(text):
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("K", 1 << 10),
                      ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    try:
        return int(float(t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64MB, 512K, 1G)") from None


def _lsn(text):
    try:
        return parse_lsn(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an LSN: {text!r} (e.g. 0/16B3748)") from None


def _file_mode(text):
    try:
        mode = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal file mode: {text!r} (e.g. 0600, 0640)") from None
    if not 0 <= mode <= 0o777:
        raise argparse.ArgumentTypeError(f"file mode {text!r} is out of range (0000..0777)")
    if mode & 0o600 != 0o600:
        raise argparse.ArgumentTypeError(f"file mode {text!r} must let the owner read and write "
                                         "(0600 at least)")
    return mode


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text!r}")
    return value


def _workers(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of workers: {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be 1 to 64 workers, not {value}")
    return value


def publications(values) -> list:
    """The exact publication names of the ``--publication`` values (each may hold
    several, comma-separated; spaces around a comma are dropped)."""
    out = []
    for value in values or ():
        for name in value.split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dsn", default=None,
                     help="libpq connection string (key=value or postgresql:// URI) of a role "
                          "with REPLICATION; default: --dsn-file, $PGOUTPUT_FAST_DSN, then "
                          "libpq's PG* environment")
    src.add_argument("--dsn-file", default=None, metavar="PATH",
                     help="read the connection string from this file (keeps a password off "
                          "the command line)")
    p.add_argument("--slot", required=True, help="logical replication slot (plugin pgoutput)")
    p.add_argument("--publication", required=True, action="append", metavar="NAME",
                   help="publication name; repeat it or separate names with commas (exact, "
                        "case-sensitive names)")
    p.add_argument("--out", required=True, help="directory for segments and checkpoint.json")
    p.add_argument("--create-slot", action="store_true",
                   help="create the slot (two-phase with --two-phase) and the publication "
                        "(FOR ALL TABLES) when missing")
    p.add_argument("--proto-version", default="auto", choices=["auto", "1", "2", "3", "4"],
                   help="pgoutput protocol (default: the server's highest)")
    p.add_argument("--binary", action="store_true", help="binary values (PostgreSQL 14+)")
    p.add_argument("--messages", action="store_true", help="logical decoding messages (14+)")
    p.add_argument("--streaming", choices=["on", "off", "parallel"], default=None,
                   help="stream large in-progress transactions (default: server default, off)")
    p.add_argument("--two-phase", action="store_true", help="decode prepared transactions at PREPARE")
    p.add_argument("--origin", choices=["any", "none"], default=None, help="origin filter (16+)")
    p.add_argument("--segment-size", type=_size, default=64 << 20, metavar="BYTES",
                   help="rotate a segment after this much message data (default 64MB)")
    p.add_argument("--segment-seconds", type=float, default=10.0, metavar="S",
                   help="rotate a non-empty segment after this long (default 10)")
    p.add_argument("--memory-budget", type=_size, default=256 << 20, metavar="BYTES",
                   help="message data held in memory at most (received, queued for the "
                        "writer, being encoded), whatever the transaction size: a larger "
                        "transaction goes to the open segment in chunks (default 256MB)")
    p.add_argument("--until-lsn", type=_lsn, default=None, metavar="LSN",
                   help="exit 0 once everything up to LSN is durable and confirmed (e.g. "
                        "pg_current_wal_insert_lsn() after the last commit wanted)")
    p.add_argument("--file-mode", type=_file_mode, default=0o600, metavar="OCTAL",
                   help="mode of the files capture writes (default 0600; a directory it "
                        "creates gets the matching x bits: 0700)")
    p.add_argument("--slot-busy-timeout", type=_seconds, default=10.0, metavar="SECONDS",
                   help="wait this long for a slot another process holds (default 10)")
    p.add_argument("--snapshot", choices=["initial", "never", "only"], default=None,
                   help="copy the rows the published tables already hold, inside the new "
                        "slot's exported snapshot, ahead of the stream (op 'r'): initial "
                        "(then stream), only (then exit 0), never. Default: initial with "
                        "--create-slot, else never")
    p.add_argument("--snapshot-workers", type=_workers, default=1, metavar="N",
                   help="connections copying the snapshot in parallel (large tables are "
                        "split into block ranges; default 1), plus one that holds the "
                        "snapshot's horizon while the slot is created")
    p.add_argument("--progress", choices=["auto", "tty", "log", "off"], default="auto",
                   help="live line on a terminal, JSON lines otherwise (stderr)")


def add_backfill_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dsn", default=None,
                     help="libpq connection string of a role with REPLICATION (as capture's; "
                          "default: --dsn-file, $PGOUTPUT_FAST_DSN, libpq's PG* environment)")
    src.add_argument("--dsn-file", default=None, metavar="PATH",
                     help="read the connection string from this file")
    p.add_argument("--publication", required=True, action="append", metavar="NAME",
                   help="the capture's publication(s): each --table must be published by them")
    p.add_argument("--table", required=True, action="append", metavar="SCHEMA.NAME",
                   help="a table to backfill (repeatable), as the stream names it (a table "
                        "published through its partitioned root: the root)")
    p.add_argument("--out", required=True,
                   help="a new directory for the backfill (never the capture's own)")
    p.add_argument("--binary", action="store_true",
                   help="binary values: give it when the capture runs with --binary")
    p.add_argument("--snapshot-workers", type=_workers, default=1, metavar="N",
                   help="connections copying in parallel (default 1), plus one that holds "
                        "the snapshot's horizon while the slot is created")
    p.add_argument("--segment-size", type=_size, default=64 << 20, metavar="BYTES",
                   help="rotate a segment after this much message data (default 64MB)")
    p.add_argument("--memory-budget", type=_size, default=256 << 20, metavar="BYTES",
                   help="message data held in memory at most (default 256MB)")
    p.add_argument("--file-mode", type=_file_mode, default=0o600, metavar="OCTAL",
                   help="mode of the files written (default 0600)")
    p.add_argument("--progress", choices=["auto", "tty", "log", "off"], default="auto",
                   help="live line on a terminal, JSON lines otherwise (stderr)")


def run_backfill(args) -> int:
    debug = bool(getattr(args, "debug", False))
    dsn = args.dsn
    try:
        from .backfill import BackfillConfig, run_backfill as _run_backfill
        from .dsn import check_dsn, resolve_dsn

        dsn = resolve_dsn(args.dsn, args.dsn_file)
        check_dsn(dsn)
        cfg = BackfillConfig(dsn, publications(args.publication), args.out, args.table,
                             binary=args.binary, snapshot_workers=args.snapshot_workers,
                             segment_bytes=args.segment_size, memory_bytes=args.memory_budget,
                             file_mode=args.file_mode, progress=args.progress)
        # tests: a pause per snapshot transaction written (a window to write meanwhile)
        cfg.snapshot_chunk_delay = float(
            os.environ.get("PGOUTPUT_FAST_SNAPSHOT_CHUNK_DELAY", "0") or 0)
        result = _run_backfill(cfg)
    except Exception as exc:
        return _failed(exc, dsn, debug, "snapshot")
    summary = result.snapshot or {}
    print(json.dumps({"backfill": summary}), file=sys.stderr)
    print(f"backfilled {summary.get('rows', 0):,} rows of {', '.join(cfg.tables)} into "
          f"{args.out}; hand-over point {summary.get('consistent_point')}: apply it with "
          f"pgoutput-fast pipeline --backfill {args.out}", file=sys.stderr)
    return 0


def _log_mode(progress) -> bool:
    if progress == "log":
        return True
    if progress != "auto":
        return False
    try:
        return not sys.stderr.isatty()
    except (AttributeError, ValueError):
        return True


def _event(event, **fields):
    rec = {"ts": round(time.time(), 3), "event": event}
    rec.update(fields)
    sys.stderr.write(json.dumps(rec) + "\n")
    sys.stderr.flush()


def run(args) -> int:
    from .. import signals

    own = not signals.installed() and signals.install(defer=True)
    try:
        return _run(args, signals.STOP)
    finally:
        if own:
            signals.restore()


def _run(args, stop) -> int:
    log = _log_mode(args.progress)
    if log:
        # the handlers are in place: from now on SIGTERM/SIGINT end the capture cleanly
        _event("starting", pid=os.getpid())
    debug = bool(getattr(args, "debug", False))
    dsn = args.dsn
    try:
        from .dsn import check_dsn, resolve_dsn

        dsn = resolve_dsn(args.dsn, args.dsn_file)
        check_dsn(dsn)
        from . import CaptureConfig, run_capture

        cfg = CaptureConfig(
            dsn, args.slot, publications(args.publication), args.out,
            create_slot=args.create_slot, proto_version=args.proto_version, binary=args.binary,
            messages=args.messages, streaming=args.streaming, two_phase=args.two_phase,
            origin=args.origin, segment_bytes=args.segment_size,
            segment_seconds=args.segment_seconds, memory_bytes=args.memory_budget,
            until_lsn=args.until_lsn, progress=args.progress, file_mode=args.file_mode,
            slot_busy_timeout=args.slot_busy_timeout, snapshot=args.snapshot,
            snapshot_workers=args.snapshot_workers,
            # tests: widen the window between a durable checkpoint and its status update
            ack_delay=float(os.environ.get("PGOUTPUT_FAST_CAPTURE_ACK_DELAY", "0") or 0))
        # tests: a pause per snapshot transaction written (a window to kill it mid-copy)
        cfg.snapshot_chunk_delay = float(
            os.environ.get("PGOUTPUT_FAST_SNAPSHOT_CHUNK_DELAY", "0") or 0)
        result = run_capture(cfg, stop)
    except Exception as exc:
        return _failed(exc, dsn, debug)
    if log:
        _event("done", messages=result.messages, bytes=result.bytes,
               transactions=result.transactions, segments=result.segments,
               flush_lsn=format_lsn(result.flush_lsn), seconds=round(result.seconds, 3),
               peak_rss=result.peak_rss)
    if result.snapshot is not None:
        print(json.dumps({"snapshot": result.snapshot}), file=sys.stderr)
    print(f"captured {result.messages:,} messages ({result.bytes / 1e6:.1f} MB), "
          f"{result.transactions:,} transactions in {result.segments} segments; "
          f"confirmed {format_lsn(result.flush_lsn)}; peak RSS {result.peak_rss / 2**20:.0f} MiB",
          file=sys.stderr)
    return 0


def _failed(exc: Exception, dsn, debug: bool, command: str = "capture") -> int:
    """One redacted line (and the redacted traceback under ``--debug``) for a known
    failure, the redacted traceback for a bug; the exit status."""
    from ..errors import UserError
    from .dsn import redact

    def say(text):
        lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
        print(f"pgoutput-fast {command}: {redact('; '.join(lines), dsn)}", file=sys.stderr,
              flush=True)

    def traceback_():
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(redact(text, dsn))
        sys.stderr.flush()

    status = None
    message = None
    if isinstance(exc, UserError):
        status, message = exc.exit_code, str(exc)
    elif isinstance(exc, OSError):
        from ..cli import describe_os_error

        status, message = 1, describe_os_error(exc)
    else:
        psycopg2 = sys.modules.get("psycopg2")
        if psycopg2 is not None and isinstance(exc, psycopg2.Error):
            from .dsn import connect_error, describe

            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            err = connect_error(exc, dsn) if isinstance(exc, psycopg2.OperationalError) else None
            if err is not None:
                status, message = err.exit_code, str(err)
            elif isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
                status, message = 3, (f"the connection to {describe(dsn)} failed: {first}: "
                                      "check that the server is up and reachable, then start "
                                      "capture again")
            else:
                # an error the server reported that the capture did not expect
                status, message = 4, (f"the server reported: {first}: check the role's "
                                      "privileges and the slot and publication "
                                      "(--debug shows where)")
    if status is None:
        traceback_()               # a bug: the whole story, without secrets
        return 1
    if debug:
        traceback_()
    say(message)
    return status
