"""Leak check: a long decode loop over the real captures must keep memory flat.

    python scripts/leak_check.py [ITERATIONS]          (default 60)

Each iteration decodes every capture in tests/fixtures with a fresh ``Decoder`` (typed
tables and change events, in batches), decodes each message with ``decode_message``,
parses its values with ``parse_values``, and walks the error paths: every message cut
short, bad UTF-8, damaged values, errors inside open, streamed and prepared
transactions, a decoder reused after each error. It prints the resident memory after
each tenth iteration and fails when memory grows after the warm-up by more than
``--max-growth-mb`` (default 8 MB). scripts/sanitize.sh runs it twice under
LeakSanitizer (5 and 25 iterations): the bytes LeakSanitizer reports at exit (CPython's
own, the same every run) must not grow with the number of iterations; then 60
iterations of the normal build for the resident memory.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def load():
    from pgoutput_fast.framing import read_capture

    out = []
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".pgoc"):
            lsns, msgs = read_capture(os.path.join(FIXTURES, name))
            out.append((name, lsns, [bytes(m) for m in msgs]))
    return out


def one_iteration(captures, tmp):
    import pyarrow as pa
    from pgoutput_fast import DecodeError, Decoder, _native, decode_message
    from pgoutput_fast import types as T

    for _name, lsns, msgs in captures:
        # the whole capture in three batches, typed tables and events, spilling spools
        dec = Decoder(max_pending_bytes=4096, spill_dir=tmp)
        third = len(msgs) // 3
        for a, b in ((0, third), (third, 2 * third), (2 * third, len(msgs))):
            cs = dec.feed(pa.array(msgs[a:b], pa.binary()), lsn=lsns[a:b])
            _ = cs.tables, cs.events
        dec.pending()
        # every message alone, and cut short (DecodeError paths)
        in_stream = False
        for m in msgs[:400]:
            in_stream = {b"S": True, b"E": False}.get(m[:1], in_stream)
            decode_message(m, in_stream=in_stream)
            for cut in (1, len(m) // 2, len(m) - 1):
                try:
                    decode_message(m[:cut], in_stream=in_stream)
                except DecodeError:
                    pass
        # damaged messages inside open / streamed / prepared transactions; the decoder
        # is reused after each error
        dec = Decoder()
        for i in range(0, len(msgs), max(1, len(msgs) // 40)):
            bad = list(msgs[max(0, i - 30): i + 10])
            k = min(30, len(bad) - 1)
            if k < 0:
                continue
            m = bad[k]
            bad[k] = m[: len(m) // 2] + b"\xff\xfe" + m[len(m) // 2 + 2:]
            try:
                dec.feed(bad)
            except DecodeError as exc:
                _ = exc.changes
    # value parsers, good and bad, every kind
    for kind in range(T.K_ARRAY):
        ct = T.ColumnType(kind, 12, 3) if kind == T.K_DECIMAL else T.ColumnType(kind)
        for fmt, data in (("t", b"1"), ("t", b"\xff\xfe"), ("b", b""), ("b", b"\x00" * 16), ("t", b"")):
            try:
                _native.parse_values(ct, [(fmt, data), None, (fmt, data)])
            except DecodeError:
                pass
        try:
            _native.format_binary_values(ct, [b"\x00" * 8, b""])
        except DecodeError:
            pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("iterations", type=int, nargs="?", default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-growth-mb", type=float, default=8.0)
    args = ap.parse_args(argv)
    import tempfile

    import pgoutput_fast
    assert pgoutput_fast.IMPL == "native", "the leak check is for the native core"
    captures = load()
    series = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.iterations):
            one_iteration(captures, tmp)
            gc.collect()
            if i + 1 == args.warmup:
                base = rss_mb()
            if (i + 1) % 10 == 0 or i + 1 == args.iterations:
                series.append((i + 1, rss_mb()))
                print(f"iteration {i + 1}: rss {series[-1][1]:.1f} MB", flush=True)
    growth = series[-1][1] - base if args.iterations > args.warmup else 0.0
    print(f"growth after the warm-up ({args.warmup} iterations): {growth:+.1f} MB "
          f"over {args.iterations - args.warmup} iterations")
    if growth > args.max_growth_mb:
        print(f"FAILED: memory grows (more than {args.max_growth_mb} MB)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
