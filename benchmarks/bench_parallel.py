"""One long stream on N cores: ``decode_parallel`` against one ``Decoder``, same run.

Corpus: real pgoutput from a private PostgreSQL 15 (``pgoutput_fast.bench.corpus``):
``oltp1`` and ``oltp50`` (the same changes committed 1 or 50 per transaction, two tables
interleaved; protocol 1, text and binary mode) and ``narrow`` (100,000-row
transactions of one 10-column table). A replay of captured segments is this: the
messages of many segments, one after the other.

``one`` is ``Decoder(**options, threads=1).feed(messages, lsns)`` (one core: no helper
thread beside it); ``cores`` is
``decode_parallel(messages, lsns, workers=N, **options)``, N the CPUs this process may
use (``PGOUTPUT_FAST_WORKERS`` to set it): the stream cut where nothing is open into N
pieces of about equal size, each decoded by its own Decoder on a thread (the native
core lets go of the GIL in its block writers), the ChangeSets joined in commit order.
Outputs: ``typed`` (``events=False``), ``both`` (the default ``Decoder()``). Each is
timed after three untimed runs of the same call (the block cache then holds what that
call's buffers need: see docs/performance.md). The same-run ratio ``cores`` vs
``one`` is the speed-up; the notes give it against N.

``test_parallel_interleaved`` runs the two alternately, one call of each per round, and
gives each one's median: a host that slows down for a while (the development VM does,
by 2x at times) then slows both alike, where the two separate benchmarks can land on
either side of it. Each call there follows one of the other kind, whose output buffers
had other sizes (N pieces against one whole), so each starts with the block cache
shaped for the other and writes part of its output into pages the kernel must zero.

``test_parallel_replay`` is the replay of a capture: the stream cut into segments of
up to 64 MiB (the capture's default segment size; one for the oltp workloads, 7 or 8 for
narrow), each decoded in turn, the catalog carried from one to the next. ``one`` is
one long-lived Decoder fed segment after segment, ``cores`` is decode_parallel per
segment. A round replays the whole with one, then with the other: each kind first
untimed until a replay takes no more than 64 page faults a segment (a replay's calls
all have one shape, and the block cache, shaped by the other kind's, takes a few calls
to hold warm pages for each of its buffers), then once timed; the rounds alternate the
two against the host's drift. The note gives the untimed replays each round took.

    pytest benchmarks/bench_parallel.py --benchmark-only
"""

import os
import resource
import statistics
import time

import pytest

import corpus
from benchutil import NOTES, RESULTS, corpus_data, record
from pgoutput_fast.decoder import Decoder
from pgoutput_fast.parallel import _decode_parallel, cpu_count, decode_parallel, plan_cuts

ROWS = corpus.DEFAULT_ROWS
USES_CORPUS = True
WORKERS = int(os.environ.get("PGOUTPUT_FAST_WORKERS", "0")) or cpu_count()
WORKLOADS = [(w, m) for w in ("oltp1", "oltp50", "narrow") for m in ("text", "binary")]
OUTPUTS = {"typed": dict(events=False), "both": {}}


def _call(how, msgs, lsns, kw):
    """The call a benchmark times: one Decoder, or decode_parallel on WORKERS threads."""
    if how == "one":
        return lambda: Decoder(**kw, threads=1).feed(msgs, lsns)
    return lambda: decode_parallel(msgs, lsns, workers=WORKERS, **kw)


@pytest.mark.parametrize("how", ["one", "cores"])            # (varies fastest: the two in a row)
@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="parallel")
def test_parallel(benchmark, workload, mode, output, how):
    lsns, msgs, nbytes = corpus_data(workload, mode)
    run = _call(how, msgs, lsns, OUTPUTS[output])
    for _ in range(3):
        run()                                   # (untimed: the block cache warms)
    cs = benchmark.pedantic(run, rounds=5, iterations=1)
    name = f"parallel/{output}/{workload}/{mode}/{how}"
    record(benchmark, name, bytes=nbytes, rows=cs.num_changes)
    if how == "cores":
        base = f"parallel/{output}/{workload}/{mode}/one"
        RESULTS[name]["baseline"] = base
        if base in RESULTS:
            speedup = RESULTS[base]["median"] / RESULTS[name]["median"]
            NOTES.append(f"{name:40s} {nbytes / RESULTS[name]['median'] / 1e9:5.2f} GB/s on {WORKERS} cores, "
                         f"{speedup:.2f}x one core ({speedup / WORKERS:.2f} x N)")


@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="parallel-interleaved")
def test_parallel_interleaved(benchmark, workload, mode, output):
    """One Decoder and decode_parallel alternating, round by round: the benchmark times
    the pair, the note gives each one's median and the speed-up."""
    lsns, msgs, nbytes = corpus_data(workload, mode)
    calls = {how: _call(how, msgs, lsns, OUTPUTS[output]) for how in ("one", "cores")}
    times: dict = {how: [] for how in calls}

    def pair():
        for how, call in calls.items():
            t = time.perf_counter()
            cs = call()
            times[how].append(time.perf_counter() - t)
            del cs                                 # (dropped before the next: the cache)
    for _ in range(3):
        pair()                                     # (untimed: the block cache warms)
    for v in times.values():
        v.clear()
    benchmark.pedantic(pair, rounds=7, iterations=1)
    one, cores = statistics.median(times["one"]), statistics.median(times["cores"])
    name = f"parallel-interleaved/{output}/{workload}/{mode}"
    record(benchmark, name, bytes=2 * nbytes)
    NOTES.append(f"{name:44s} one {one * 1e3:7.1f} ms, {WORKERS} cores {cores * 1e3:7.1f} ms: "
                 f"{one / cores:.2f}x one core ({one / cores / WORKERS:.2f} x N)")


SEGMENT_BYTES = 64 << 20
WARM_FAULTS = 64            # page faults a segment of a warm replay may take
WARM_MAX = 12               # untimed replays at most before a timed one


def _segments(msgs, lsns, nbytes):
    """The stream as a capture's segments: cut where nothing is open into pieces of up
    to SEGMENT_BYTES."""
    cuts = plan_cuts(msgs, -(-nbytes // SEGMENT_BYTES))
    bounds = list(zip([0] + cuts, cuts + [len(msgs)]))
    return [(msgs.slice(a, b - a), lsns[a:b]) for a, b in bounds]


def _replay(how, segments, kw):
    """Decode the segments in turn, each ChangeSet dropped before the next: one Decoder
    fed them all, or decode_parallel per segment from the catalog the last ended with.
    Returns the changes decoded."""
    changes = 0
    if how == "one":
        dec = Decoder(**kw, threads=1)
        for seg, lsn in segments:
            changes += dec.feed(seg, lsn).num_changes
        return changes
    catalog = None
    for seg, lsn in segments:
        cs, last = _decode_parallel(seg, lsn, WORKERS, catalog, None, kw)
        changes += cs.num_changes
        del cs
        catalog = last.catalog
    return changes


@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="parallel-replay")
def test_parallel_replay(benchmark, workload, mode, output):
    """A replay of segments with one core and with N: the benchmark times a round (each
    kind replayed untimed until warm, then once timed), the note gives each one's median
    and the speed-up."""
    lsns, msgs, nbytes = corpus_data(workload, mode)
    segments = _segments(msgs, lsns, nbytes)
    kw = OUTPUTS[output]
    times: dict = {"one": [], "cores": []}
    counts: dict = {}
    warmups: dict = {"one": [], "cores": []}
    faults: dict = {"one": [], "cores": []}

    def one_round():
        for how in times:
            # untimed replays until the block cache has taken this kind's shape: one
            # with no more than WARM_FAULTS page faults a segment (or WARM_MAX of them)
            for k in range(1, WARM_MAX + 1):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                _replay(how, segments, kw)
                if resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0 <= WARM_FAULTS * len(segments):
                    break
            warmups[how].append(k)
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            counts[how] = _replay(how, segments, kw)
            times[how].append(time.perf_counter() - t)
            faults[how].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    benchmark.pedantic(one_round, rounds=5, iterations=1)
    assert counts["one"] == counts["cores"], counts
    one, cores = statistics.median(times["one"]), statistics.median(times["cores"])
    name = f"parallel-replay/{output}/{workload}/{mode}"
    record(benchmark, name, bytes=2 * nbytes)
    NOTES.append(f"{name:40s} {len(segments)} segment(s): one {one * 1e3:7.1f} ms, {WORKERS} cores "
                 f"{cores * 1e3:7.1f} ms: {one / cores:.2f}x one core ({one / cores / WORKERS:.2f} x N); "
                 f"warm-up replays {warmups['one']} / {warmups['cores']}, page faults of the timed "
                 f"ones {statistics.median(faults['one']):.0f} / {statistics.median(faults['cores']):.0f}")
