"""A/B of two builds in one run: each build decodes the oltp workloads in a child process
of its own, the two alternating, each child timing a memory copy of the same input too.

    python benchmarks/ab.py A_TREE B_TREE [--rounds 3] [--workloads oltp1,oltp50]
    python benchmarks/ab.py A_TREE B_TREE --per-cell --rounds 7 --workloads oltptypes --outputs typed

A_TREE and B_TREE are source trees with the extension built in place (e.g. a
``git archive`` of the older commit, built with ``setup.py build_ext --inplace``). The
corpus is this checkout's (``pgoutput_fast.bench.corpus``). Prints, per workload, mode
and output, the median of each build's decode time over its copy time and the MB/s.

``--per-cell`` runs a child per cell instead, A and B alternating ``--rounds`` times on
one cell before the next, and prints the medians in ms with each child's figure: the
development VM's speed moves by up to 1.6x for this memory-heavy work between processes
and over tens of seconds, and a cell's A and B children then meet the same phases.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import json, sys, time, statistics
import numpy as np
from pgoutput_fast.bench import corpus
from pgoutput_fast.decoder import Decoder
import pgoutput_fast
workloads, modes, rows, repeat, outputs = json.loads(sys.argv[1])
import inspect
# both1: both outputs on the calling thread (a build from before Decoder's threads
# argument has no helper thread: its Decoder() is that)
one = dict(threads=1) if "threads" in inspect.signature(Decoder).parameters else {}
paths = {"typed": dict(events=False), "events": dict(tables=False), "both": {}, "both1": one}
paths = {p: kw for p, kw in paths.items() if p in outputs}
out = {"file": pgoutput_fast.__file__}
for w in workloads:
    for mode in modes:
        lsns, msgs = corpus.load(w, mode, rows)
        src = np.frombuffer(msgs.buffers()[2], np.uint8)
        dst = np.empty_like(src); np.copyto(dst, src)
        def med(fn, k):
            ts = []
            for _ in range(k):
                t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
            return statistics.median(ts)
        copy = med(lambda: np.copyto(dst, src), 15)
        for p, kw in paths.items():
            Decoder(**kw).feed(msgs, lsns)
            out[f"{w}/{mode}/{p}"] = [med(lambda: Decoder(**kw).feed(msgs, lsns), repeat), copy, src.size]
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workloads", default="oltp1,oltp10,oltp50,oltp1000")
    ap.add_argument("--modes", default="text,binary")
    ap.add_argument("--rows", type=int, default=None)
    ap.add_argument("--outputs", default="typed,events,both,both1")
    ap.add_argument("--per-cell", action="store_true",
                    help="a child per cell (workload, mode, output) instead of per build, A and B "
                         "alternating --rounds times on each cell before the next: a VM whose speed "
                         "drifts over tens of seconds then moves both builds' figures of a cell alike")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from pgoutput_fast.bench import corpus

    rows = args.rows or corpus.DEFAULT_ROWS
    workloads = args.workloads.split(",")
    corpus.build(rows, workloads=workloads)
    env = dict(os.environ, PGOUTPUT_FAST_CORPUS=corpus.CACHE)
    outputs = args.outputs.split(",")

    def child(tree, ws, modes, outs):
        out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([ws, modes, rows, args.repeat, outs])],
                             env=dict(env, PYTHONPATH=os.path.abspath(tree)), capture_output=True,
                             text=True, check=True, cwd="/")
        return json.loads(out.stdout)

    if args.per_cell:
        print(f"{'workload/mode/output':28s} {'A ms':>8s} {'B ms':>8s} {'B/A time':>9s}   A, B: each child's median (ms)")
        for w in workloads:
            for mode in args.modes.split(","):
                for o in outputs:
                    got = {"A": [], "B": []}
                    for _ in range(args.rounds):
                        for name, tree in (("A", args.a), ("B", args.b)):
                            got[name].append(child(tree, [w], [mode], [o])[f"{w}/{mode}/{o}"][0] * 1e3)
                    a, b = statistics.median(got["A"]), statistics.median(got["B"])
                    print(f"{w + '/' + mode + '/' + o:28s} {a:8.2f} {b:8.2f} {b / a:9.2f}   "
                          f"{' '.join(f'{x:.1f}' for x in got['A'])} | {' '.join(f'{x:.1f}' for x in got['B'])}",
                          flush=True)
        return
    runs = {"A": [], "B": []}
    for r in range(args.rounds):
        for name, tree in (("A", args.a), ("B", args.b)):
            runs[name].append(child(tree, workloads, args.modes.split(","), outputs))
            print(f"round {r + 1}/{args.rounds} {name}: {runs[name][-1]['file']}", file=sys.stderr)
        _table(runs)                      # (after each round: a long run shows what it has)


def _table(runs):
    keys = [k for k in runs["A"][0] if k != "file"]
    print(f"{'workload/mode/output':28s} {'A ÷ memcpy':>10s} {'B ÷ memcpy':>10s} {'B/A time':>9s} "
          f"{'A MB/s':>8s} {'B MB/s':>8s}")
    for k in keys:
        cells = []
        for name in ("A", "B"):
            ratios = [run[k][0] / run[k][1] for run in runs[name]]
            rates = [run[k][2] / run[k][0] / 1e6 for run in runs[name]]
            cells.append((statistics.median(ratios), statistics.median(rates)))
        (ra, ma), (rb, mb) = cells
        print(f"{k:28s} {ra:10.2f} {rb:10.2f} {rb / ra:9.2f} {ma:8,.0f} {mb:8,.0f}")
    print(f"({len(runs['A'])} rounds; medians over them)", flush=True)


if __name__ == "__main__":
    main()
