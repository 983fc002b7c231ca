"""The ``pgoutput-fast`` command."""

from __future__ import annotations

import argparse
import sys

from .lsn import format_lsn

__all__ = ["main"]


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

    lsns, msgs = read_capture(args.file)
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
                return 1
            continue
        if isinstance(msg, StreamStart):
            in_stream = True
        elif isinstance(msg, StreamStop):
            in_stream = False
        out.write(f"#{i:<7} lsn {format_lsn(lsn):>12} len {len(data):>6}  {_describe(msg)}\n")
        shown += 1
    return 0


def cmd_decode(args) -> int:
    import os
    import time

    import pyarrow.parquet as pq

    from . import Decoder
    from .framing import read_capture

    lsns, msgs = read_capture(args.file)
    nbytes = sum(len(m) for m in msgs)
    dec = Decoder(events=args.events or bool(args.out), tables=True)
    t0 = time.perf_counter()
    cs = dec.feed(msgs, lsns)
    dt = time.perf_counter() - t0
    print(f"{len(msgs)} messages, {nbytes / 1e6:.2f} MB decoded in {dt * 1e3:.1f} ms "
          f"({nbytes / 1e6 / dt:.0f} MB/s incl. Python list input)")
    for name, table in sorted(cs.tables.items()):
        ops = table.column("_op").value_counts().to_pylist()
        counts = ", ".join(f"{d['values']}={d['counts']}" for d in ops)
        print(f"  {name:40s} {table.num_rows:8d} rows  ({counts})  {table.num_columns - 12} columns")
    if cs.messages:
        print(f"  logical messages: {len(cs.messages)}")
    pending = dec.pending()
    if any(pending.values()):
        print(f"  held back (not committed yet): {pending}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for version, table in cs.table_versions:
            path = os.path.join(args.out, f"{version.qualified_name}.v{version.version}.parquet")
            pq.write_table(table, path)
        pq.write_table(cs.events, os.path.join(args.out, "_events.parquet"))
        print(f"wrote {len(cs.table_versions)} typed tables and _events.parquet to {args.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pgoutput-fast", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    pi = sub.add_parser("inspect", help="print a capture file, one line per message")
    pi.add_argument("file", help="framed capture (.pgoc) or Parquet file with a binary 'data' column")
    pi.add_argument("--limit", type=int, default=None, help="print at most N messages")
    pi.add_argument("--keep-going", action="store_true", help="continue after a decode error")
    pi.set_defaults(func=cmd_inspect)
    pd = sub.add_parser("decode", help="decode a capture into typed tables (and Parquet files)")
    pd.add_argument("file", help="framed capture (.pgoc) or Parquet file with a binary 'data' column")
    pd.add_argument("--out", help="directory for one Parquet file per table version + _events.parquet")
    pd.add_argument("--events", action="store_true", help="also build the change-event table")
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

    pp = sub.add_parser("pipeline", help="segments -> Spark decode -> Parquet table snapshots",
                        description=pipeline.DESCRIPTION)
    pipeline.add_arguments(pp)
    pp.set_defaults(func=pipeline.run)
    from .capture import cli as capture_cli

    pc = sub.add_parser("capture", help="replication slot -> durable Parquet segments, exactly once",
                        description=capture_cli.DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    capture_cli.add_arguments(pc)
    pc.set_defaults(func=capture_cli.run)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
