"""``pgoutput-fast bench``: decode throughput on the standard workloads, with the peers
measured in the same run.

The workloads are real pgoutput captured from a private PostgreSQL
(``pgoutput_fast.bench.corpus``: a 10-column table of mixed int/text/timestamp/numeric/
bool/float columns with inserts, updates and deletes, and a 50-column table of inserts;
text and binary mode). Per workload it measures, on one core (``both`` on two where it may):

* ``memcpy``: a copy of the input bytes into memory already written once (``np.copyto``
  into a preallocated array: the hardware's limit, same run). ``np.copy`` into fresh
  memory is shown too: there the kernel's page faults set the pace (on the development
  VM 3-4 GB/s against 7-14 GB/s), so it is no measure of the machine's copy speed;
* ``typed``: ``Decoder(events=False).feed`` into typed Arrow tables;
* ``events``: ``Decoder(tables=False).feed`` into the change-event table;
* ``both``: ``Decoder().feed``, both outputs (the default Decoder: on a machine with two
  CPUs or more it writes the change events on a helper thread beside the typed rows);
* ``both, 1 thread``: ``Decoder(threads=1).feed``, both outputs on the calling thread;
* ``decode_message``: one message object per message (on a slice);
* ``reference``: the pure-Python reference Decoder (on a slice);
* peers on a slice that ends at a commit: pypgoutput 0.0.3's decoder layer (text mode;
  binary mode is recorded as unsupported) and a ``struct``-based Python splitter.

Medians of ``--repeat`` runs. Peak memory is the largest resident set growth of a child
process that decodes the workload once on the typed path (input already loaded).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time

__all__ = ["add_arguments", "run", "commit_bounded_slice"]

DESCRIPTION = __doc__


def add_arguments(p) -> None:
    p.add_argument("--rows", type=int, default=None,
                   help="rows of the narrow workload (default: the corpus default, 2,000,000; "
                        "the wide one has a fifth)")
    p.add_argument("--workloads", default="narrow,wide,toast,stream,oltp1,oltp50",
                   help="comma-separated: narrow, wide, toast, stream, oltp1, oltp10, oltp50, oltp1000, oltp100000, oltpstream "
                        "(only these are built, the first time)")
    p.add_argument("--modes", default="text,binary", help="comma-separated: text, binary")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    p.add_argument("--slice", type=int, default=50_000,
                   help="messages for the slow paths and the peers (extended to a commit)")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child process")


def commit_bounded_slice(msgs, lsns, n):
    """The first n messages, extended to the end of the transaction open there (a Commit,
    or a Stream Commit for streamed transactions)."""
    import numpy as np

    offsets = msgs.buffers()[1]
    width = 8 if str(msgs.type) == "large_binary" else 4
    starts = np.frombuffer(offsets, np.int64 if width == 8 else np.int32)[msgs.offset:msgs.offset + len(msgs)]
    first = np.frombuffer(msgs.buffers()[2], np.uint8)[starts]
    commits = np.nonzero((first == ord("C")) | (first == ord("c")))[0]
    i = np.searchsorted(commits, n - 1)
    end = int(commits[i]) + 1 if i < len(commits) else len(msgs)
    return msgs.slice(0, end), lsns[:end]


class _Progress:
    """One status line on a terminal (stderr); plain lines otherwise."""

    def __init__(self, total):
        self.total = total
        self.done = 0
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def step(self, what):
        self.done += 1
        width = 28
        filled = int(width * self.done / self.total)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{time.perf_counter() - self.t0:5.0f}s  {what}")
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
            sys.stderr.flush()
        else:
            sys.stderr.write(line + "\n")

    def close(self):
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _median_time(fn, repeat, min_seconds=0.0, max_runs=101):
    """Median wall time of fn over `repeat` runs, or more while the runs so far add up
    to less than min_seconds (up to max_runs): a short measurement (a slice) gets
    enough runs that one interruption of the machine does not move its median."""
    times: list[float] = []
    out = None
    while len(times) < repeat or (sum(times) < min_seconds and len(times) < max_runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        del out
    return statistics.median(times)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set (VmHWM) to its current size, if the kernel
    lets it (Linux: writing 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _peak_rss_bytes() is not None
    except OSError:
        return False


def _peak_rss_bytes():
    """VmHWM of /proc/self/status in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _peak_child(msgs, lsns):
    """(peak RSS growth, output bytes) of one typed decode in a forked child."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()

    def work(conn):
        from .. import _native
        from ..decoder import Decoder

        # released blocks the parent kept for reuse would hide the output's memory
        _native.set_buffer_cache_limit(0)
        # the high-water mark still holds the RSS from before they were freed: reset it
        # (Linux: clear_refs 5), else the peak would be the parent's cache, not the decode
        hwm_reset = _reset_peak_rss()
        base = _rss_bytes()
        cs = Decoder(events=False).feed(msgs, lsns)
        out = sum(t.get_total_buffer_size() for _, t in cs.table_versions)
        peak = _peak_rss_bytes() if hwm_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        conn.send((max(peak - base, 0), out))
        conn.close()

    proc = ctx.Process(target=work, args=(child,))
    proc.start()
    result = parent.recv() if parent.poll(600) else (None, None)
    proc.join()
    return result


def _fmt_rate(nbytes, rows, seconds):
    if seconds is None:
        return "", ""
    return f"{nbytes / seconds / 1e6:,.0f}", (f"{rows / seconds / 1e6:,.2f}" if rows else "")


def run(args) -> int:
    import numpy as np

    from .. import IMPL, _reference, decode_message
    from ..decoder import Decoder
    from . import corpus, peers

    if IMPL != "native":
        print("pgoutput-fast bench measures the native implementation; unset PGOUTPUT_FAST_IMPL",
              file=sys.stderr)
        return 2
    rows = args.rows or corpus.DEFAULT_ROWS
    workloads = [w for w in args.workloads.split(",") if w]
    modes = [m for m in args.modes.split(",") if m]
    have_pyp = peers.have_pypgoutput()
    unknown = set(workloads) - set(corpus.workload_names())
    if unknown:
        print(f"pgoutput-fast bench: unknown workloads {', '.join(sorted(unknown))}; known: "
              f"{', '.join(corpus.workload_names())}", file=sys.stderr)
        return 2
    steps_per = 7 + (0 if args.no_memory else 1) + 2
    # the workloads asked for and only those, each step on stderr as it goes (minutes for
    # the default rows; nothing when they are cached)
    corpus.build(rows, workloads=workloads, verbose=True)
    progress = _Progress(len(workloads) * len(modes) * steps_per)
    results = []
    for w in workloads:
        for mode in modes:
            progress.step(f"{w}/{mode}: loading the corpus")
            lsns, msgs = corpus.load(w, mode, rows)
            nbytes = msgs.buffers()[2].size
            r = {"workload": w, "mode": mode, "messages": len(msgs), "bytes": nbytes}
            src = np.frombuffer(msgs.buffers()[2], np.uint8)
            dst = np.empty_like(src)
            np.copyto(dst, src)                 # (its pages written once before timing)
            r["memcpy_s"] = _median_time(lambda: np.copyto(dst, src), args.repeat, min_seconds=0.5)
            del dst
            r["memcpy_fresh_s"] = _median_time(lambda: np.copy(src), args.repeat)
            progress.step(f"{w}/{mode}: typed")
            cs = Decoder(events=False).feed(msgs, lsns)
            r["rows"] = sum(t.num_rows for _, t in cs.table_versions)
            r["output_bytes"] = sum(t.get_total_buffer_size() for _, t in cs.table_versions)
            del cs
            r["typed_s"] = _median_time(lambda: Decoder(events=False).feed(msgs, lsns), args.repeat)
            progress.step(f"{w}/{mode}: events")
            # one untimed decode first, as for the typed path: the runs then write into
            # the block cache's warm pages, as a consumer's later batches do
            ev = Decoder(tables=False).feed(msgs, lsns).events
            r["events_output_bytes"] = ev.get_total_buffer_size() if ev is not None else 0
            del ev
            r["events_s"] = _median_time(lambda: Decoder(tables=False).feed(msgs, lsns), args.repeat)
            progress.step(f"{w}/{mode}: both outputs")
            Decoder().feed(msgs, lsns)
            r["both_s"] = _median_time(lambda: Decoder().feed(msgs, lsns), args.repeat)
            progress.step(f"{w}/{mode}: both outputs, one thread")
            Decoder(threads=1).feed(msgs, lsns)
            r["both1_s"] = _median_time(lambda: Decoder(threads=1).feed(msgs, lsns), args.repeat)
            if not args.no_memory:
                progress.step(f"{w}/{mode}: peak memory")
                r["peak_extra_bytes"], _ = _peak_child(msgs, lsns)
            sl, sl_lsn = commit_bounded_slice(msgs, lsns, args.slice)
            raw = sl.to_pylist()
            r["slice_messages"] = len(raw)
            r["slice_bytes"] = sl_bytes = sum(len(m) for m in raw)
            progress.step(f"{w}/{mode}: typed on the slice")
            r["slice_typed_s"] = _median_time(lambda: Decoder(events=False).feed(sl, sl_lsn), args.repeat,
                                              min_seconds=1.0)
            progress.step(f"{w}/{mode}: decode_message objects")

            def objects():
                in_stream = False
                for m in raw:
                    o = decode_message(m, in_stream=in_stream)
                    t = m[0]
                    if t == 83:
                        in_stream = True
                    elif t == 69:
                        in_stream = False
                return o

            r["slice_objects_s"] = _median_time(objects, args.repeat)
            progress.step(f"{w}/{mode}: reference decoder")
            ref = Decoder.__new__(Decoder)

            def reference():
                from ..catalog import RelationCatalog

                ref._catalog = RelationCatalog()
                ref._core = _reference.DecoderCore(ref._catalog, events=False)
                ref._batch_cls = _reference.MessageBatch
                return ref.feed(sl, sl_lsn)

            r["slice_reference_s"] = _median_time(reference, 1)
            progress.step(f"{w}/{mode}: struct splitter")
            r["slice_struct_s"] = _median_time(lambda: peers.struct_split(raw), args.repeat)
            progress.step(f"{w}/{mode}: pypgoutput")
            if not have_pyp:
                r["pypgoutput"] = "not installed (pip install pypgoutput==0.0.3)"
            elif mode == "binary":
                r["pypgoutput"] = peers.PYPGOUTPUT_BINARY
            elif w in corpus.STREAMED:
                r["pypgoutput"] = peers.PYPGOUTPUT_STREAM
            else:
                r["slice_pypgoutput_s"] = _median_time(lambda: peers.pypgoutput_decode(raw), 1)
            del raw, sl
            results.append(r)
            del msgs, lsns, src
    progress.close()
    _print_table(results, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "machine": _machine(), "results": results}, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


def _machine() -> str:
    import platform

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu or platform.processor()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _print_table(results, rows):
    print(f"pgoutput-fast bench: medians on one core; {_machine()}")
    print()
    head = (f"{'workload':15s} {'path':22s} {'MB/s':>8s} {'M rows/s':>9s} "
            f"{'time/memcpy':>11s} {'vs pypgoutput':>14s} {'vs struct':>10s}")
    print(head)
    print("-" * len(head))
    for r in results:
        name = f"{r['workload']}/{r['mode']}"
        nb, nrows = r["bytes"], r["rows"]
        sb = r["slice_bytes"]

        def line(path, nbytes, nr, s, vs_copy=True, vs_peers=False):
            mbs, rps = _fmt_rate(nbytes, nr, s)
            copy = f"{s / r['memcpy_s']:.1f}x" if vs_copy else ""
            pyp = ""
            struct_r = ""
            if vs_peers:
                if "slice_pypgoutput_s" in r:
                    pyp = f"{r['slice_pypgoutput_s'] / (r['slice_typed_s']):.0f}x"
                else:
                    pyp = "n/a"
                struct_r = f"{r['slice_struct_s'] / r['slice_typed_s']:.1f}x"
            print(f"{name:15s} {path:22s} {mbs:>8s} {rps:>9s} {copy:>11s} {pyp:>14s} {struct_r:>10s}")

        line("memcpy", nb, 0, r["memcpy_s"], vs_copy=False)
        if "memcpy_fresh_s" in r:
            line("copy to fresh memory", nb, 0, r["memcpy_fresh_s"], vs_copy=False)
        line("typed (Decoder)", nb, nrows, r["typed_s"])
        line("events (Decoder)", nb, nrows, r["events_s"])
        if "both_s" in r:
            line("both (Decoder)", nb, nrows, r["both_s"])
        if "both1_s" in r:
            line("both, 1 thread", nb, nrows, r["both1_s"])
        line("typed, slice", sb, 0, r["slice_typed_s"], vs_copy=False, vs_peers=True)
        line("decode_message, slice", sb, 0, r["slice_objects_s"], vs_copy=False)
        line("reference, slice", sb, 0, r["slice_reference_s"], vs_copy=False)
        line("struct splitter, slice", sb, 0, r["slice_struct_s"], vs_copy=False)
        if "slice_pypgoutput_s" in r:
            line("pypgoutput, slice", sb, 0, r["slice_pypgoutput_s"], vs_copy=False)
        else:
            print(f"{name:15s} {'pypgoutput, slice':22s} {r['pypgoutput']}")
        if r.get("peak_extra_bytes") is not None:
            print(f"{name:15s} {'peak memory (typed)':22s} {r['peak_extra_bytes'] / 1e6:,.0f} MB above the "
                  f"loaded input ({nb / 1e6:,.0f} MB input, {r['output_bytes'] / 1e6:,.0f} MB output)")
        print()
    print(f"narrow: {rows:,} rows (wide and stream a fifth, toast a fortieth: see "
          f"pgoutput_fast.bench.corpus); slices: the first messages up to a commit. time/memcpy: decode "
          f"time over the time of a copy of the same bytes into memory written before (np.copyto); vs peers: peer time over our time, same slice")
    from . import corpus

    print("oltpK: the changes (a tenth of the narrow rows) committed K per transaction, two tables interleaved.")
    if rows < corpus.DEFAULT_ROWS:
        print(f"A short run ({rows:,} rows) reproduces the ratios between paths and against the peers; its MB/s "
              f"are lower than docs/performance.md's ({corpus.DEFAULT_ROWS:,} rows): each decode's fixed costs "
              f"(the Decoder, the export to Arrow, fresh output pages) weigh more on a small input, and an input "
              f"that fits in the CPU cache makes the memcpy baseline faster.")
