"""Instruction counts of one decode path, for comparing two builds (callgrind counts
instructions, not seconds: the same figure whatever else the machine is doing).

    python benchmarks/callgrind_cut.py TREE [TREE ...] --workload oltp1 --mode text --output events

For each source tree (the extension built in place; for per-line figures build it with
``-g``, e.g. by editing setup.py's release flags in a scratch copy), runs two decodes of
the first ``--messages`` messages of the workload (cut after a Commit, written once to a
small Arrow file so that valgrind does not load the whole corpus) under
``valgrind --tool=callgrind``, collecting inside ``DecoderCore.feed`` and ``export``
only, and prints the total and the functions above 1 % (summed over the source files a
function's inlined lines come from). The corpus is this checkout's
(``pgoutput_fast.bench.corpus``). Outputs: typed = Decoder(events=False), events =
Decoder(tables=False), both1 = Decoder(threads=1).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import sys, pyarrow as pa
from pgoutput_fast.decoder import Decoder
path, out = sys.argv[1], sys.argv[2]
t = pa.ipc.open_file(path).read_all()
msgs = t.column("msg").combine_chunks(); lsns = t.column("lsn").to_numpy()
kw = {"typed": dict(events=False), "events": dict(tables=False), "both1": dict(threads=1)}[out]
for _ in range(2):
    Decoder(**kw).feed(msgs, lsns)
"""

_TOGGLES = ("__pyx_f_13pgoutput_fast_7_native_11DecoderCore__feed",
            "__pyx_pf_13pgoutput_fast_7_native_11DecoderCore_8export")


def write_cut(workload: str, mode: str, n: int, path: str) -> int:
    import numpy as np
    import pyarrow as pa
    from pgoutput_fast.bench import corpus
    lsns, msgs = corpus.load(workload, mode, corpus.DEFAULT_ROWS)
    offs = np.frombuffer(msgs.buffers()[1], np.int32)[msgs.offset:]
    data = np.frombuffer(msgs.buffers()[2], np.uint8)
    k = min(n, len(msgs) - 1)
    while k < len(msgs) - 1 and data[offs[k]] != ord("C"):
        k += 1
    table = pa.table({"lsn": pa.array(np.asarray(lsns[:k + 1])), "msg": msgs.slice(0, k + 1)})
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return k + 1


def count(tree: str, cut: str, output: str, outfile: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outfile}"]
    cmd += [f"--toggle-collect={t}" for t in _TOGGLES]
    cmd += [sys.executable, "-c", _CHILD, cut, output]
    subprocess.run(cmd, env=env, cwd=tempfile.gettempdir(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = subprocess.run(["callgrind_annotate", "--auto=no", outfile], check=True,
                          capture_output=True, text=True).stdout
    total, funcs = 0, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s", line)
        if m and "PROGRAM TOTALS" in line:
            total = int(m.group(1).replace(",", ""))
            continue
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S+?):(\S+)", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        name = re.sub(r"^__pyx_f_13pgoutput_fast_7_native_", "", m.group(3))
        funcs[name] = funcs.get(name, 0) + ir
    return {"total": total, "funcs": funcs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--workload", default="oltp1")
    ap.add_argument("--mode", default="text", choices=("text", "binary"))
    ap.add_argument("--output", default="events", choices=("typed", "events", "both1"))
    ap.add_argument("--messages", type=int, default=60000)
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    with tempfile.TemporaryDirectory() as tmp:
        cut = os.path.join(tmp, "cut.arrow")
        n = write_cut(args.workload, args.mode, args.messages, cut)
        print(f"{args.workload}/{args.mode}/{args.output}: {n:,} messages, two decodes")
        base = None
        for i, tree in enumerate(args.trees):
            r = count(tree, cut, args.output, os.path.join(tmp, f"cg.{i}.out"))
            ratio = f"  ({r['total'] / base:.3f} of the first)" if base else ""
            base = base or r["total"]
            print(f"{tree}: {r['total']:,} instructions{ratio}")
            for name, ir in sorted(r["funcs"].items(), key=lambda kv: -kv[1]):
                if ir >= r["total"] / 100:
                    print(f"    {ir:>13,}  {name}")


if __name__ == "__main__":
    main()
