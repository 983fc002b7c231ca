"""Peers on the same bytes, in the same run: pypgoutput 0.0.3's decoder layer (text
only) and a minimal ``struct``-based Python TupleData splitter (the floor any
pure-Python decoder reaches). Both get a slice of the narrow text corpus; the native
Decoder decodes the same slice into typed Arrow tables, so the ratio compares work on
identical input.
"""

import pytest

from bench_decoder import data
from benchutil import RESULTS, record
from pgoutput_fast.bench.peers import pypgoutput_decode as _pypgoutput_decode, struct_split as _struct_split
from pgoutput_fast.decoder import Decoder

SLICE = 50_000


def _slice(mode="text"):
    """The first SLICE messages, extended to the end of the transaction open there (so
    that the native Decoder emits every change it decoded)."""
    import numpy as np

    lsns, msgs, _ = data("narrow", mode)
    starts = np.frombuffer(msgs.buffers()[1], np.int32)[msgs.offset:msgs.offset + len(msgs)]
    first = np.frombuffer(msgs.buffers()[2], np.uint8)[starts]
    commits = np.nonzero(first == ord("C"))[0]
    end = int(commits[np.searchsorted(commits, SLICE - 1)]) + 1 if len(commits) else len(msgs)
    raw = msgs.slice(0, end).to_pylist()
    return lsns[:end], msgs.slice(0, end), raw, sum(len(m) for m in raw)


@pytest.mark.benchmark(group="peers")
def test_peer_pypgoutput(benchmark):
    pytest.importorskip("pypgoutput", reason="pip install pypgoutput==0.0.3 (the bench extra)")
    _, _, raw, nbytes = _slice()
    rows = benchmark.pedantic(_pypgoutput_decode, args=(raw,), rounds=1, iterations=1)
    record(benchmark, "peers/pypgoutput/text", bytes=nbytes, rows=rows)


@pytest.mark.benchmark(group="peers")
def test_peer_struct_splitter(benchmark):
    _, _, raw, nbytes = _slice()
    rows = benchmark.pedantic(_struct_split, args=(raw,), rounds=3, iterations=1)
    record(benchmark, "peers/struct-splitter/text", bytes=nbytes, rows=rows)


@pytest.mark.benchmark(group="peers")
def test_native_on_peer_slice(benchmark):
    lsns, sl, _, nbytes = _slice()
    cs = benchmark.pedantic(lambda: Decoder(events=False).feed(sl, lsns), rounds=5, iterations=1)
    name = "peers/pgoutput_fast-typed/text"
    record(benchmark, name, bytes=nbytes, rows=cs.num_changes)
    RESULTS[name]["baseline"] = ["peers/pypgoutput/text", "peers/struct-splitter/text"]


@pytest.mark.benchmark(group="peers")
def test_peer_pypgoutput_binary_mode(benchmark):
    """pypgoutput reads every value as UTF-8 text: what it does with binary mode is
    recorded instead of a number."""
    pytest.importorskip("pypgoutput")
    _, _, raw, _ = _slice("binary")

    def run():
        try:
            _pypgoutput_decode(raw)
        except Exception as exc:
            return f"fails: {type(exc).__name__}: {exc}"[:160]
        return ("no error raised, but wrong: its TupleData reader ignores the 'b' kind without "
                "reading the value, so every later column is misread")

    outcome = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["outcome"] = outcome
    print(f"\npypgoutput on binary mode: {outcome}")
