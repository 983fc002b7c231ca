"""Decoder throughput on production-like streams: small transactions, tables interleaved.

Corpus: real pgoutput from a private PostgreSQL 15 (``pgoutput_fast.bench.corpus``,
workloads ``oltp1``, ``oltp10``, ``oltp50``, ``oltp1000``, ``oltp100000``): the same
changes committed 1, 10, 50, 1,000 or 100,000 per transaction (the last a batch job: two
transactions), each transaction mixing the 10-column narrow table
(three changes in four) and an 8-column orders table, 70 % inserts, 20 % updates, 10 %
deletes, one row per statement; protocol 1, text and binary mode. ``oltpstream`` is
oltp100000's batch job streamed (protocol 2, ``streaming on``,
``logical_decoding_work_mem`` 64kB: stream segments of about 300 changes). ``oltptypes`` is
oltp50's shape on one table of the types production schemas add (a uuid, a jsonb document,
an unconstrained numeric, a date, a text array, a timestamptz with microseconds, a real, a
bytea, a varchar, an int2, a bool). A tenth of the corpus
rows (``PGOUTPUT_FAST_CORPUS_ROWS``, default 2,000,000) in changes: 200,000.

Outputs: ``typed`` = ``Decoder(events=False)``, ``events`` = ``Decoder(tables=False)``,
``both`` = ``Decoder()`` (what the README shows: on a machine with two CPUs or more the
change events are written on its helper thread beside the typed rows), ``both1`` =
``Decoder(threads=1)`` (both outputs on the calling thread only). Each timed run is a new Decoder over
the whole workload in one ``feed`` (input already in memory as a ``pa.BinaryArray``),
after an untimed one. ``memcpy`` is ``np.copyto`` of the same message bytes into memory
written before, in the same run: the ratios at the end are decode time over copy time
(``vs memcpy``, as the other suites print them: how many times faster the copy is,
inverted here as baseline/decode), and the notes give GB/s and ``both`` against the
slower of its two outputs alone.

    pytest benchmarks/bench_oltp.py --benchmark-only
"""

import pytest

import corpus
from benchutil import NOTES, RESULTS, corpus_data, record, time_memcpy
from pgoutput_fast.decoder import Decoder

ROWS = corpus.DEFAULT_ROWS
USES_CORPUS = True              # (conftest builds the workloads the selected tests need, first)
SIZES = corpus.OLTP_TXN_SIZES
WORKLOADS = [(w, m) for w in [f"oltp{k}" for k in SIZES] + ["oltpstream", "oltptypes"] for m in ("text", "binary")]
PATHS = {"typed": dict(events=False), "events": dict(tables=False), "both": {}, "both1": dict(threads=1)}


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="oltp-memcpy")
def test_oltp_memcpy(benchmark, workload, mode):
    _, msgs, nbytes = corpus_data(workload, mode)
    time_memcpy(benchmark, msgs, rounds=21)
    record(benchmark, f"oltp/memcpy/{workload}/{mode}", bytes=nbytes)


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.benchmark(group="oltp-decoder")
def test_oltp_decoder(benchmark, workload, mode, path):
    lsns, msgs, nbytes = corpus_data(workload, mode)
    kw = PATHS[path]
    Decoder(**kw).feed(msgs, lsns)            # (untimed: the block cache's pages warm)
    cs = benchmark.pedantic(lambda: Decoder(**kw).feed(msgs, lsns), rounds=7, iterations=1)
    name = f"oltp/{path}/{workload}/{mode}"
    record(benchmark, name, bytes=nbytes, rows=cs.num_changes)
    RESULTS[name]["baseline"] = f"oltp/memcpy/{workload}/{mode}"
    mine = RESULTS[name]["median"]
    copy = RESULTS.get(f"oltp/memcpy/{workload}/{mode}")
    NOTES.append(f"{name:34s} {nbytes / mine / 1e9:6.2f} GB/s  {cs.num_changes / mine / 1e6:6.2f} M changes/s  "
                 + (f"{mine / copy['median']:5.1f}x the memcpy time  " if copy else "")
                 + f"({cs.num_changes:,} changes, {nbytes / 1e6:.0f} MB)")
    alone = [RESULTS.get(f"oltp/{p}/{workload}/{mode}") for p in ("typed", "events")]
    if path in ("both", "both1") and all(alone):
        slower = max(a["median"] for a in alone)
        NOTES.append(f"{'':34s} both outputs / the slower alone: {mine / slower:.2f}")


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="oltp-interleaved")
def test_oltp_outputs_interleaved(benchmark, workload, mode):
    """The four paths alternating, one decode of each per round: a host whose speed
    drifts (the development VM's does, by up to 1.6x between minutes) then moves them
    alike, where the separate benchmarks above can land on either side of a slow phase.
    The benchmark times a round; the notes give each path's median, both outputs against
    the slower alone, and the default Decoder against one thread."""
    import statistics
    import time

    lsns, msgs, nbytes = corpus_data(workload, mode)
    times: dict = {p: [] for p in PATHS}

    def one_round():
        for p, kw in PATHS.items():
            t = time.perf_counter()
            cs = Decoder(**kw).feed(msgs, lsns)
            times[p].append(time.perf_counter() - t)
            del cs                                 # (dropped before the next: the cache)
    for _ in range(2):
        one_round()                                # (untimed: the block cache's pages warm)
    for v in times.values():
        v.clear()
    benchmark.pedantic(one_round, rounds=9, iterations=1)
    med = {p: statistics.median(v) for p, v in times.items()}
    record(benchmark, f"oltp-interleaved/{workload}/{mode}", bytes=len(PATHS) * nbytes)
    slower = max(med["typed"], med["events"])
    NOTES.append(f"oltp-interleaved/{workload}/{mode:6s} " + "  ".join(
        f"{p} {nbytes / t / 1e9:4.2f} GB/s" for p, t in med.items())
        + f"  both / slower alone {med['both'] / slower:.2f} (threads=1: {med['both1'] / slower:.2f})"
        + f"  both1 / both {med['both1'] / med['both']:.2f}")
