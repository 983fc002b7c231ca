"""``pgoutput-fast capture``: arguments, signals, exit status."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from ..lsn import format_lsn

__all__ = ["add_arguments", "run"]

DESCRIPTION = """\
Capture a logical replication slot (pgoutput) into Parquet segment files
(columns lsn, data, ordinal), cut at transaction boundaries, made durable
before the flush position is confirmed. Restart it after a crash: no
transaction is lost or written twice. SIGINT/SIGTERM: finish the current
segment, confirm it, exit 0. Read the result with
pgoutput_fast.capture.read_segments(DIR).
"""


def _size(text):
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("KB", 1 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("K", 1 << 10),
                      ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    return int(float(t) * mult)


def _lsn(text):
    from ..testing.sqlcapture import parse_pg_lsn

    return parse_pg_lsn(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", required=True, help="libpq connection string (a role with REPLICATION)")
    p.add_argument("--slot", required=True, help="logical replication slot (plugin pgoutput)")
    p.add_argument("--publication", required=True, help="publication name(s), comma-separated")
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
                   help="exit 0 once everything up to LSN is durable and confirmed")
    p.add_argument("--progress", choices=["auto", "tty", "log", "off"], default="auto",
                   help="live line on a terminal, JSON lines otherwise (stderr)")


def run(args) -> int:
    from . import CaptureConfig, CaptureError, run_capture

    cfg = CaptureConfig(
        args.dsn, args.slot, args.publication, args.out, create_slot=args.create_slot,
        proto_version=args.proto_version, binary=args.binary, messages=args.messages,
        streaming=args.streaming, two_phase=args.two_phase, origin=args.origin,
        segment_bytes=args.segment_size, segment_seconds=args.segment_seconds,
        memory_bytes=args.memory_budget, until_lsn=args.until_lsn, progress=args.progress,
        # tests: widen the window between a durable checkpoint and its status update
        ack_delay=float(os.environ.get("PGOUTPUT_FAST_CAPTURE_ACK_DELAY", "0") or 0))
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = run_capture(cfg, stop)
    except CaptureError as exc:
        print(f"pgoutput-fast capture: {exc}", file=sys.stderr)
        return 2
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if args.progress == "log" or (args.progress == "auto" and not sys.stderr.isatty()):
        print(json.dumps({"event": "done", "messages": result.messages, "bytes": result.bytes,
                          "transactions": result.transactions, "segments": result.segments,
                          "flush_lsn": format_lsn(result.flush_lsn),
                          "seconds": round(result.seconds, 3), "peak_rss": result.peak_rss}),
              file=sys.stderr)
    print(f"captured {result.messages:,} messages ({result.bytes / 1e6:.1f} MB), "
          f"{result.transactions:,} transactions in {result.segments} segments; "
          f"confirmed {format_lsn(result.flush_lsn)}; peak RSS {result.peak_rss / 2**20:.0f} MiB",
          file=sys.stderr)
    return 0
