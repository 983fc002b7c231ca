"""The ``pgoutput-fast`` command.

A failure with a known cause (a missing or damaged file, a bad option, a refused
connection, a message the decoder rejects) is one line on stderr,
``pgoutput-fast <command>: <what failed, where>: <what to do>``, and an exit status:
1 for input and file errors, ``exc.exit_code`` for a ``UserError`` (the capture's are
listed in ``pgoutput_fast.capture.errors``), 130 for SIGINT and 143 for SIGTERM (outside
``capture``, which stops cleanly and exits 0). ``--debug`` adds the traceback. Any
other exception is a bug: its traceback is printed, exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import signals
from ._version import __version__
from .lsn import format_lsn

__all__ = ["main", "build_parser"]

PROG = "pgoutput-fast"


def _describe(msg) -> str:
    """One readable line per message, like pg_waldump."""
    from .messages import Insert, Update, Delete, Relation, LogicalMessage, UNCHANGED_TOAST

    def tup(t):
        if t is None:
            return "-"
        out = []
        for v in t:
            if v is None:
                out.append("null")
            elif v is UNCHANGED_TOAST:
                out.append("<unchanged-toast>")
            elif v.format == "t":
                s = v.data.decode("utf-8", "backslashreplace")
                out.append(repr(s if len(s) <= 40 else s[:37] + "..."))
            else:
                out.append(f"b'{v.data[:16].hex()}{'...' if len(v.data) > 16 else ''}'")
        return "(" + ", ".join(out) + ")"

    name = type(msg).__name__
    if isinstance(msg, Insert):
        body = f"relid {msg.relid} new {tup(msg.new)}"
    elif isinstance(msg, Update):
        old = f" old[{msg.old_kind}] {tup(msg.old)}" if msg.old_kind else ""
        body = f"relid {msg.relid}{old} new {tup(msg.new)}"
    elif isinstance(msg, Delete):
        body = f"relid {msg.relid} old[{msg.old_kind}] {tup(msg.old)}"
    elif isinstance(msg, Relation):
        cols = ", ".join(
            f"{c.name}:{c.type_oid}{'*' if c.is_key else ''}" for c in msg.columns
        )
        body = f"relid {msg.relid} {msg.nspname or 'pg_catalog'}.{msg.relname} ident {msg.replident} ({cols})"
    elif isinstance(msg, LogicalMessage):
        kind = "transactional" if msg.transactional else "non-transactional"
        body = f"{kind} lsn {format_lsn(msg.lsn)} prefix {msg.prefix!r} {len(msg.content)} bytes"
    else:
        return repr(msg)
    if getattr(msg, "xid", None) is not None:
        body += f" xid {msg.xid}"
    return f"{name}({body})"


def cmd_inspect(args) -> int:
    from . import decode_message, DecodeError
    from .framing import read_capture
    from .messages import StreamStart, StreamStop

    lsns, msgs = read_capture(args.file, _storage_options(args))
    in_stream = False
    out = sys.stdout
    shown = 0
    for i, (lsn, data) in enumerate(zip(lsns, msgs)):
        if args.limit is not None and shown >= args.limit:
            break
        try:
            msg = decode_message(data, in_stream=in_stream)
        except DecodeError as exc:
            out.write(f"#{i:<7} lsn {format_lsn(lsn):>12} len {len(data):>6}  ERROR {exc}\n")
            if not args.keep_going:
                out.flush()
                _say("inspect", f"{args.file}: message #{i} at lsn {format_lsn(lsn)} cannot be "
                                f"decoded: {exc}: --keep-going lists the messages after it")
                return 1
            continue
        if isinstance(msg, StreamStart):
            in_stream = True
        elif isinstance(msg, StreamStop):
            in_stream = False
        out.write(f"#{i:<7} lsn {format_lsn(lsn):>12} len {len(data):>6}  {_describe(msg)}\n")
        shown += 1
    return 0


def _write_parquet(table, path: str, what: str) -> None:
    """Write ``table`` to ``path`` through a temp name in the same directory, renamed
    when complete: a failure leaves no file under the final name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .errors import UserError

    d, name = os.path.split(path)
    tmp = os.path.join(d, f".{name}.{os.getpid()}.tmp")
    try:
        try:
            pq.write_table(table, tmp)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise UserError(f"cannot write {what} to {path}: {_first_line(exc)}") from exc
        except OSError as exc:
            if exc.filename is not None or not exc.errno:
                raise
            # Arrow's errors name no file (ENOSPC, EFBIG, EIO while writing): this one
            raise OSError(exc.errno, os.strerror(exc.errno), path) from exc
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _storage_options(args):
    from .storage import parse_storage_options

    return parse_storage_options(getattr(args, "storage_option", None))


_STORAGE_OPTION_HELP = ("an object-store option for a capture directory given as a URI "
                        "(s3://bucket/cdc), as delta-rs takes it (AWS_ENDPOINT_URL=..., "
                        "repeatable); the AWS_* environment variables are read too")


def cmd_decode(args) -> int:
    import time

    from . import DecodeError
    from .errors import UserError
    from .framing import read_capture
    from .parallel import _decode_parallel, cpu_count, message_scan

    lsns, msgs = read_capture(args.file, _storage_options(args), arrow=True)
    nbytes = message_scan(msgs).total
    workers = args.workers if args.workers is not None else cpu_count()
    if workers < 1:
        raise UserError(f"--workers {workers}: give 1 or more (the cores to decode on)")
    events = args.events or bool(args.out)
    t0 = time.perf_counter()
    try:
        # (one piece per core: each a Decoder of its own, the GIL let go in its blocks)
        cs, last = _decode_parallel(msgs, lsns, workers, None, None, dict(events=events, tables=True))
    except DecodeError as exc:
        i = exc.message_index
        at = f" at lsn {format_lsn(int(lsns[i]))}" if i is not None and 0 <= i < len(lsns) else ""
        raise UserError(f"{args.file}: a message{at} cannot be decoded: {exc}: "
                        f"'pgoutput-fast inspect {args.file}' shows the messages up to it") from exc
    dt = max(time.perf_counter() - t0, 1e-9)
    print(f"{len(msgs)} messages, {nbytes / 1e6:.2f} MB decoded in {dt * 1e3:.1f} ms "
          f"({nbytes / 1e6 / dt:.0f} MB/s on {workers} {'core' if workers == 1 else 'cores'})")
    for name, table in sorted(cs.tables.items()):
        ops = table.column("_op").value_counts().to_pylist()
        counts = ", ".join(f"{d['values']}={d['counts']}" for d in ops)
        print(f"  {name:40s} {table.num_rows:8d} rows  ({counts})  {table.num_columns - 12} columns")
    if cs.messages:
        print(f"  logical messages: {len(cs.messages)}")
    pending = last.pending()
    if any(pending.values()):
        print(f"  held back (not committed yet): {pending}")
    if args.out:
        from .storage_types import to_storage_table

        # the decoder's Arrow types that Parquet cannot hold (interval, time, oid, uuid,
        # unconstrained numeric) mapped as everywhere else: docs/types.md, "Stored types"
        files = [(os.path.join(args.out, f"{version.qualified_name}.v{version.version}.parquet"),
                  f"table {version.qualified_name} (version {version.version})",
                  to_storage_table(table))
                 for version, table in cs.table_versions]
        files.append((os.path.join(args.out, "_events.parquet"), "the change events", cs.events))
        os.makedirs(args.out, exist_ok=True)
        for path, what, table in files:
            _write_parquet(table, path, what)
        print(f"wrote {len(cs.table_versions)} typed tables and _events.parquet to {args.out}")
    return 0


class _Parser(argparse.ArgumentParser):
    """A usage error is one line too (argparse prints the usage first), status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog="--debug (before or after the command) prints the "
                                       "traceback of a failure.")
    p.add_argument("--debug", action="store_true",
                   help="print the traceback of a failure (after its one-line message)")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    pi = sub.add_parser("inspect", help="print a capture file, one line per message")
    pi.add_argument("file", help="framed capture (.pgoc), Parquet file with a binary 'data' "
                                 "column, or capture directory (local or s3://, gs://, ...)")
    pi.add_argument("--limit", type=int, default=None, help="print at most N messages")
    pi.add_argument("--keep-going", action="store_true", help="continue after a decode error")
    pi.add_argument("--storage-option", action="append", metavar="KEY=VALUE", default=[],
                    help=_STORAGE_OPTION_HELP)
    pi.set_defaults(func=cmd_inspect)
    pd = sub.add_parser("decode", help="decode a capture into typed tables (and Parquet files)")
    pd.add_argument("file", help="framed capture (.pgoc), Parquet file with a binary 'data' "
                                 "column, or capture directory (local or s3://, gs://, ...)")
    pd.add_argument("--out", help="directory for one Parquet file per table version + _events.parquet")
    pd.add_argument("--events", action="store_true", help="also build the change-event table")
    pd.add_argument("--workers", type=int, default=None, metavar="N",
                    help="cores to decode on (default: all this process may use): the capture "
                         "is cut where no transaction is open (or inside a large plain one), "
                         "each piece decoded by its own "
                         "Decoder, the tables joined in commit order (decode_parallel)")
    pd.add_argument("--storage-option", action="append", metavar="KEY=VALUE", default=[],
                    help=_STORAGE_OPTION_HELP)
    pd.set_defaults(func=cmd_decode)
    from . import demo  # stdlib-only at import; the work happens in demo.run

    pm = sub.add_parser("demo", help="PostgreSQL workload -> capture -> decode -> tables, "
                                     "checked against PostgreSQL", description=demo.DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_arguments(pm)
    pm.set_defaults(func=demo.run)
    from . import bench  # the work happens in bench.run

    pb = sub.add_parser("bench", help="decode throughput on the standard workloads, with peers",
                        description=bench.DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(pb)
    pb.set_defaults(func=bench.run)
    from .spark import pipeline  # pyspark is imported only when the command runs

    pp = sub.add_parser("pipeline", help="segments -> Spark decode -> Delta Lake tables",
                        description=pipeline.DESCRIPTION)
    pipeline.add_arguments(pp)
    pp.set_defaults(func=pipeline.run)
    from .capture import cli as capture_cli

    pc = sub.add_parser("capture", help="replication slot -> durable Parquet segments, exactly once",
                        description=capture_cli.DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    capture_cli.add_arguments(pc)
    pc.set_defaults(func=capture_cli.run)
    ps = sub.add_parser("snapshot", help="backfill tables added to the publication later "
                                         "(a temporary slot's snapshot and an LSN hand-over)",
                        description=capture_cli.BACKFILL_DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    capture_cli.add_backfill_arguments(ps)
    ps.set_defaults(func=capture_cli.run_backfill)
    for sp in (pi, pd, pm, pb, pp, pc, ps):
        # also after the command; SUPPRESS: absent unless given (the global one stays)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of a failure")
    return p


# -- failures ---------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _one_line(text: str) -> str:
    return "; ".join(ln.strip() for ln in str(text).splitlines() if ln.strip())


def _say(command, message: str) -> None:
    prefix = f"{PROG} {command}" if command else PROG
    print(f"{prefix}: {_one_line(message)}", file=sys.stderr, flush=True)


_OS_HINTS = {
    "ENOENT": "check the path",
    "EACCES": "check its permissions (or run as a user who may read/write it)",
    "EPERM": "check its permissions (or run as a user who may read/write it)",
    "EISDIR": "give a file, not a directory",
    "ENOTDIR": "a part of the path is a file, not a directory",
    "ENOSPC": "free some space or write elsewhere",
    "EDQUOT": "the disk quota is used up: free some space or write elsewhere",
    "EROFS": "the file system is read-only: write elsewhere",
    "EEXIST": "remove it or choose another name",
    "EMFILE": "too many open files: raise the limit (ulimit -n)",
    "ENAMETOOLONG": "use a shorter path",
    "ELOOP": "a symbolic link in the path points back at itself",
}


def describe_os_error(exc: OSError) -> str:
    """``<path>: <errno text>: <what to do>`` for an ``OSError``."""
    import errno as _errno

    reason = exc.strerror or _first_line(exc)
    name = _errno.errorcode.get(exc.errno or 0, "")
    hint = _OS_HINTS.get(name)
    where = ""
    if exc.filename is not None:
        where = os.fsdecode(exc.filename) if isinstance(exc.filename, (str, bytes)) else str(exc.filename)
        if exc.filename2 is not None:
            where += f" -> {os.fsdecode(exc.filename2)}"
        where += ": "
    elif not exc.strerror:
        reason = _first_line(exc)
    text = f"{where}{reason}"
    return f"{text}: {hint}" if hint else text


def _arrow_error(exc: BaseException) -> bool:
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return False
    return isinstance(exc, (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError))


def _command_of(argv) -> str | None:
    """The subcommand in ``argv`` (the first word that is not an option; the global
    options take no value), before argparse and the heavy imports it brings."""
    for a in argv:
        if a == "--":
            continue
        if not a.startswith("-"):
            return a
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(argv)
    try:
        # first of all: a SIGTERM/SIGINT from now on stops a capture cleanly (exit 0) or
        # interrupts another command with one line
        signals.install(defer=command == "capture")
        return _main(argv, command)
    except KeyboardInterrupt as exc:    # pending when the handlers came (outside capture)
        return _interrupted(command, exc, "--debug" in argv)
    finally:
        signals.restore()


def _interrupted(command, exc: BaseException, debug: bool) -> int:
    signum = getattr(exc, "signum", 2)
    text = str(exc) if isinstance(exc, signals.Interrupted) else "interrupted (SIGINT)"
    return _fail(command, text, 128 + signum, debug)


def _main(argv, command) -> int:
    from .errors import DecodeError, UserError

    debug = "--debug" in argv
    args = None
    try:
        args = build_parser().parse_args(argv)
        debug = bool(getattr(args, "debug", False))
        command = args.command
        return args.func(args)
    except BrokenPipeError:
        # the reader went away (| head): nothing more to say, and no error at exit either
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt as exc:
        return _interrupted(command, exc, debug)
    except UserError as exc:
        return _fail(command, str(exc), exc.exit_code, debug)
    except DecodeError as exc:
        return _fail(command, f"{_where(args, exc)}{exc}", 1, debug)
    except OSError as exc:
        return _fail(command, describe_os_error(exc), 1, debug)
    except Exception as exc:
        if "pyspark" in sys.modules:
            from .spark.errors import executor_setup_error

            known = executor_setup_error(exc)
            if known is not None:
                return _fail(command, str(known), known.exit_code, debug)
        if not _arrow_error(exc):
            raise                      # a bug: the traceback
        return _fail(command, f"{_where(args, exc)}{type(exc).__name__}: {_first_line(exc)}: "
                              "run with --debug for the traceback", 1, debug)


def _where(args, exc) -> str:
    """``FILE: `` of the command, unless the message names it already."""
    path = getattr(args, "file", None)
    return f"{path}: " if path and str(path) not in str(exc) else ""


def _fail(command, message: str, status: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    _say(command, message)
    return status


if __name__ == "__main__":
    sys.exit(main())
