"""One long-lived ``Decoder`` fed the same stream in feeds of different sizes, same run.

Corpus: real pgoutput from a private PostgreSQL 15 (``pgoutput_fast.bench.corpus``):
``oltp50`` (50 changes per transaction, two tables interleaved; protocol 1, text and
binary mode). Each timed call makes one ``Decoder`` and feeds it the whole stream in
feeds of FEED messages, each feed's ChangeSet built (its export to Arrow) and dropped,
as the Spark reader does with each Arrow batch (``maxRecordsPerBatch`` 10,000) and a
live consumer with what arrived. ``whole`` is one feed of everything. Feeds cut
transactions open; the decoder carries them to the next feed.

Outputs: ``typed`` (``events=False``), ``both`` (the default ``Decoder()``). The note
gives each size's time against ``whole``: what a feed's fixed cost (mostly its export:
one Arrow table per relation version, each with its metadata columns, ``_before``,
``_unchanged_toast`` and ``_special``) adds at that size.

    pytest benchmarks/bench_feed_size.py --benchmark-only
"""

import pytest

import corpus
from benchutil import NOTES, RESULTS, corpus_data, record
from pgoutput_fast.decoder import Decoder

ROWS = corpus.DEFAULT_ROWS
USES_CORPUS = True
SIZES = {"1000": 1_000, "10000": 10_000, "whole": None}
OUTPUTS = {"typed": dict(events=False), "both": {}}


def _feeds(msgs, lsns, size):
    n = len(msgs)
    if size is None:
        return [(msgs, lsns)]
    return [(msgs.slice(s, min(size, n - s)), lsns[s:s + size]) for s in range(0, n, size)]


@pytest.mark.parametrize("feed", list(SIZES))                # (varies fastest)
@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("workload,mode", [("oltp50", "text"), ("oltp50", "binary")])
@pytest.mark.benchmark(group="feed-size")
def test_feed_size(benchmark, workload, mode, output, feed):
    lsns, msgs, nbytes = corpus_data(workload, mode)
    feeds = _feeds(msgs, lsns, SIZES[feed])
    kw = OUTPUTS[output]

    def run():
        dec = Decoder(**kw)
        changes = 0
        for m, l in feeds:
            changes += dec.feed(m, l).num_changes
        return changes

    for _ in range(2):
        run()                                   # (untimed: the block cache warms)
    changes = benchmark.pedantic(run, rounds=5, iterations=1)
    name = f"feed-size/{output}/{workload}/{mode}/{feed}"
    record(benchmark, name, bytes=nbytes, rows=changes)
    base = f"feed-size/{output}/{workload}/{mode}/whole"
    if feed != "whole":
        RESULTS[name]["baseline"] = base
    elif base in RESULTS:
        for size in SIZES:
            other = f"feed-size/{output}/{workload}/{mode}/{size}"
            if size != "whole" and other in RESULTS:
                t = RESULTS[other]["median"]
                NOTES.append(f"{other:40s} {nbytes / t / 1e9:5.2f} GB/s, {len(_feeds(msgs, lsns, SIZES[size]))} feeds: "
                             f"{t / RESULTS[base]['median']:.2f}x the time of one feed")
