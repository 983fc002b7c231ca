"""pytest-benchmark suites (kept out of the unit run): `pytest benchmarks/`.

Each benchmark records its median time in RESULTS; at the end of the session the
same-run ratios (native vs reference, decode vs memcpy, ...) are printed.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # benchutil; the tests' helpers are tests.support.* (pyproject's pythonpath)

from benchutil import NOTES, RESULTS  # noqa: E402


def pytest_collection_finish(session):
    """Build the corpus workloads the selected benchmarks need before the first one runs,
    with its progress on the terminal (inside a test it would be captured: minutes of
    silence). Modules that read the corpus say so with ``USES_CORPUS = True`` and their
    ``ROWS``; the workload is the test's ``workload`` parameter."""
    if session.config.option.collectonly or getattr(session.config.option, "benchmark_skip", False):
        return
    needed = {}
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item.module, "USES_CORPUS", False) and "workload" in params:
            needed.setdefault(item.module.ROWS, set()).add(params["workload"])
    if not needed:
        return
    from pgoutput_fast.bench import corpus

    missing = {rows: sorted(w for w in ws if not all(os.path.exists(corpus.path_for(w, m, rows))
                                                     for m in ("text", "binary")))
               for rows, ws in needed.items()}
    missing = {rows: ws for rows, ws in missing.items() if ws}
    if not missing:
        return
    capman = session.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        for rows, ws in missing.items():
            sys.stderr.write(f"\nbenchmarks: building the corpus first: {', '.join(ws)} at {rows:,} rows "
                             f"(set PGOUTPUT_FAST_CORPUS_ROWS for a smaller one)\n")
            corpus.build(rows, workloads=ws, verbose=True)


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    tr = terminalreporter
    tr.section("pgoutput_fast throughput (medians, this run)")
    for name, info in sorted(RESULTS.items()):
        parts = []
        if "bytes" in info:
            parts.append(f"{info['bytes'] / info['median'] / 1e6:9.1f} MB/s")
        if "rows" in info:
            parts.append(f"{info['rows'] / info['median'] / 1e6:7.2f} M rows/s")
        if "messages" in info:
            parts.append(f"{info['messages'] / info['median'] / 1e6:7.2f} M msgs/s")
        tr.write_line(f"{name:48s} " + "  ".join(parts))
    for line in NOTES:
        tr.write_line(line)
    ratios = []
    for name, info in RESULTS.items():
        bases = info.get("baseline") or []
        for base in [bases] if isinstance(bases, str) else bases:
            if base in RESULTS:
                ratios.append((name, base, RESULTS[base]["median"] / info["median"]))
    if ratios:
        tr.section("same-run ratios (how many times faster than the baseline)")
        for name, base, r in sorted(ratios):
            tr.write_line(f"{name:48s} vs {base:36s} {r:8.2f}x")
