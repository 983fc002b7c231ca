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
