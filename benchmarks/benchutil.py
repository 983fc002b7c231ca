"""Shared helpers of the benchmark suites: throughput records and same-run ratios."""

RESULTS = {}  # name -> dict(median=seconds, bytes=..., rows=..., messages=...)
NOTES = []    # free-form lines printed after the throughput table


def record(benchmark, name, **sizes):
    """Attach throughput figures to a finished benchmark and remember it for ratios."""
    median = benchmark.stats.stats.median
    info = {"median": median, **sizes}
    for k, v in sizes.items():
        if k == "bytes":
            benchmark.extra_info["MB/s"] = round(v / median / 1e6, 1)
        elif k in ("rows", "messages"):
            benchmark.extra_info[f"{k}/s"] = round(v / median)
    RESULTS[name] = info


def corpus_data(workload, mode, rows=None):
    """``(lsns, messages, message bytes)`` of a corpus workload, loaded once per process."""
    import corpus

    key = (workload, mode, rows or corpus.DEFAULT_ROWS)
    if key not in _CORPUS:
        lsns, msgs = corpus.load(workload, mode, key[2])
        _CORPUS[key] = (lsns, msgs, msgs.buffers()[2].size)
    return _CORPUS[key]


_CORPUS: dict = {}


def time_memcpy(benchmark, msgs, rounds):
    """Time ``np.copyto`` of the messages' bytes into memory written before (``np.copy``
    would time the page faults of a new buffer): the same-run hardware baseline."""
    import numpy as np

    src = np.frombuffer(msgs.buffers()[2], np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    benchmark.pedantic(np.copyto, args=(dst, src), rounds=rounds, iterations=1)
