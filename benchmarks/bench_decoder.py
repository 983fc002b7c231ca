"""Columnar Decoder throughput on the real-PostgreSQL corpus (benchmarks/corpus.py).

Paths: typed tables only, change-event table only, both; text and binary modes; a
plain memory copy of the same input bytes as the hardware baseline; the reference
decoder on a slice of the corpus for the native/reference ratio.
"""

import os

import numpy as np
import pytest

import corpus
from benchutil import RESULTS, record
from pgoutput_fast import _native
from pgoutput_fast.decoder import Decoder

ROWS = corpus.DEFAULT_ROWS
WORKLOADS = [(w, m) for w in ("narrow", "wide", "toast", "stream") for m in ("text", "binary")]
_cache = {}


def data(workload, mode):
    key = (workload, mode)
    if key not in _cache:
        lsns, msgs = corpus.load(workload, mode, ROWS)
        _cache[key] = (lsns, msgs, msgs.buffers()[2].size)
    return _cache[key]


def changes_of(msgs):
    first = np.frombuffer(msgs.buffers()[2], np.uint8)[
        np.frombuffer(msgs.buffers()[1], np.int32 if msgs.type.id == 14 or str(msgs.type) == "binary" else np.int64)[:-1]]
    return int(np.isin(first, np.frombuffer(b"IUD", np.uint8)).sum())


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.benchmark(group="memcpy")
def test_memcpy_baseline(benchmark, workload, mode):
    _, msgs, nbytes = data(workload, mode)
    src = np.frombuffer(msgs.buffers()[2], np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)     # a plain copy: into memory written before (np.copy would time page faults)
    benchmark.pedantic(np.copyto, args=(dst, src), rounds=9, iterations=1)
    record(benchmark, f"memcpy/{workload}/{mode}", bytes=nbytes)


@pytest.mark.parametrize("workload,mode", WORKLOADS)
@pytest.mark.parametrize("path", ["typed", "events", "both"])
@pytest.mark.benchmark(group="decoder")
def test_decoder_native(benchmark, workload, mode, path):
    lsns, msgs, nbytes = data(workload, mode)
    kw = {"typed": dict(events=False), "events": dict(tables=False), "both": {}}[path]

    def run():
        return Decoder(**kw).feed(msgs, lsns)

    cs = benchmark.pedantic(run, rounds=3, iterations=1)
    rows = cs.num_changes
    name = f"decoder/{path}/{workload}/{mode}"
    record(benchmark, name, bytes=nbytes, rows=rows)
    RESULTS[name]["baseline"] = f"memcpy/{workload}/{mode}"


SLICE = 20_000


@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.benchmark(group="decoder-vs-reference")
def test_decoder_slice(benchmark, mode):
    lsns, msgs, _ = data("narrow", mode)
    sl, ls = msgs.slice(0, SLICE), lsns[:SLICE]
    nbytes = sum(len(m) for m in sl.to_pylist())
    benchmark.pedantic(lambda: Decoder().feed(sl, ls), rounds=5, iterations=1)
    record(benchmark, f"slice/native/{mode}", bytes=nbytes)
    RESULTS[f"slice/native/{mode}"]["baseline"] = f"slice/reference/{mode}"


@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.benchmark(group="decoder-vs-reference")
def test_decoder_slice_reference(benchmark, mode):
    from pgoutput_fast import _reference

    if not hasattr(_reference, "DecoderCore"):
        pytest.skip("reference DecoderCore not available")
    lsns, msgs, _ = data("narrow", mode)
    sl, ls = msgs.slice(0, SLICE), lsns[:SLICE]
    nbytes = sum(len(m) for m in sl.to_pylist())

    def run():
        d = Decoder.__new__(Decoder)
        from pgoutput_fast.catalog import RelationCatalog

        d._catalog = RelationCatalog()
        d._core = _reference.DecoderCore(d._catalog)
        d._batch_cls = _reference.MessageBatch
        return d.feed(sl, ls)

    benchmark.pedantic(run, rounds=1, iterations=1)
    record(benchmark, f"slice/reference/{mode}", bytes=nbytes)
