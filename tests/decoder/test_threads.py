"""Decoders on several threads at once.

The native block writers (src/block_writers.pxi: the column pass, the change-event
block writer, a window's scan, events and metadata) run without the GIL, so Decoders
on different threads really run at the same time: nothing they write may be shared but
the cache of released blocks, which has its own lock. These tests run several Decoders
at once over streams whose blocks are large enough to let go of the GIL (and over the
small transactions the windows gather), and check each result against the same stream
decoded alone, and against the pure-Python reference; one Decoder used by two threads
at once is refused; the type-byte pass that decode_parallel cuts with agrees with the
reference's and with the messages themselves."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from pgoutput_fast import Begin, Commit, Delete, Insert, Relation, RelationColumn, Update, Value, encode_message
from pgoutput_fast import _reference
from pgoutput_fast.decoder import Decoder
from pgoutput_fast.parallel import decode_parallel, message_scan
from tests.decoder.test_parallel import assert_same

native = pytest.importorskip("pgoutput_fast._native")

R, S = 16384, 16390
# (int4, int8, text, numeric(12,2), timestamptz, bool, float8, timestamp, text, int4)
OIDS = (23, 20, 25, 1700, 1184, 16, 701, 1114, 25, 23)


def _rel(relid, name):
    cols = tuple(RelationColumn(1 if i == 0 else 0, f"c{i}", oid, ((12 << 16) | 2) + 4 if oid == 1700 else -1)
                 for i, oid in enumerate(OIDS))
    return Relation(relid, "public", name, "d", cols)


def _row(rng, k):
    t = lambda v: Value("t", str(v).encode())      # noqa: E731
    return (t(k), t(rng.randrange(-2**62, 2**62)), t(f"row {k} " + "x" * rng.randrange(0, 40)),
            t(f"{rng.randrange(-10**9, 10**9)}.{rng.randrange(100):02d}"),
            t(f"2024-0{rng.randrange(1, 10)}-1{rng.randrange(10)} 1{rng.randrange(10)}:3{rng.randrange(10)}:"
              f"0{rng.randrange(10)}.{rng.randrange(10**6):06d}+00"),
            t(rng.choice("tf")), t(repr(rng.random() * 1e6)),
            t(f"2023-12-2{rng.randrange(10)} 0{rng.randrange(10)}:00:00"),
            None if rng.random() < 0.1 else t("note"), t(rng.randrange(-2**31, 2**31)))


def stream(seed=7, txns=400):
    """Plain transactions of 1 to 600 changes over two interleaved 10-column tables:
    inserts, updates with and without an old image, deletes by key and by row; long
    runs of one table (blocks that let go of the GIL) and many small transactions (the
    windows)."""
    rng = random.Random(seed)
    msgs = [encode_message(_rel(R, "a")), encode_message(_rel(S, "b"))]
    lsn = 1 << 24
    k = 0
    for x in range(txns):
        n = rng.choice((1, 3, 8, 50, 50, 120, 600))
        run_table = rng.choice((R, S, None))        # None: the two tables interleaved
        final = lsn + 100 * (n + 2)
        msgs.append(encode_message(Begin(final, 1_000_000 + x, 1000 + x)))
        for _ in range(n):
            k += 1
            relid = run_table or rng.choice((R, S))
            op = rng.random()
            row = _row(rng, k)
            if op < 0.7:
                m = Insert(relid, row, None)
            elif op < 0.8:
                m = Update(relid, None, None, row, None)
            elif op < 0.85:
                m = Update(relid, "O", _row(rng, k), row, None)
            elif op < 0.95:
                m = Delete(relid, "K", (Value("t", str(k).encode()),) + (None,) * (len(OIDS) - 1), None)
            else:
                m = Delete(relid, "O", row, None)
            msgs.append(encode_message(m))
        msgs.append(encode_message(Commit(0, final, final + 8, 1_000_000 + x)))
        lsn = final + 16
    lsns = np.arange(len(msgs), dtype=np.int64) + (1 << 24)
    return pa.array(msgs, pa.binary()), lsns


@pytest.fixture(scope="module")
def big():
    return stream()


OPTIONS = [{}, {"events": False}, {"tables": False}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "both")
@pytest.mark.parametrize("cache", ["default", "small"])
def test_decoders_on_threads_at_once(big, options, cache):
    """Four Decoders at once, twice over, each over the whole stream: each gives
    exactly what one Decoder gives alone (and with a small block cache, blocks are
    freed and taken by the threads as they go)."""
    msgs, lsns = big
    alone = Decoder(**options).feed(msgs, lsns)
    old = native.buffer_cache_info()["limit"]
    if cache == "small":
        native.set_buffer_cache_limit(4 << 20)
    try:
        out: dict = {}
        start = threading.Barrier(4)

        def run(t):
            start.wait()
            out[t] = [Decoder(**options).feed(msgs, lsns) for _ in range(2)]

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        native.set_buffer_cache_limit(old)
    assert sorted(out) == [0, 1, 2, 3]
    for t, results in out.items():
        for r, cs in enumerate(results):
            assert_same(cs, alone, f"thread {t} round {r}")


def test_the_stream_takes_the_paths_without_the_gil(big):
    """The stream has what the threads test is about: windows of small transactions, and
    the result equals the reference's (so 'alone' above is right, not just repeatable)."""
    from tests.decoder.test_decoder_parity import make_decoder

    msgs, lsns = big
    before = native._txn_windows_taken()
    cs = Decoder().feed(msgs, lsns)
    assert native._txn_windows_taken() > before
    assert sum(t.num_rows for _, t in cs.table_versions) == cs.events.num_rows > 20_000
    small_msgs, small_lsns = stream(seed=8, txns=40)      # (the reference is slow)
    ref = make_decoder(_reference).feed(small_msgs.to_pylist(), small_lsns.tolist())
    assert_same(Decoder().feed(small_msgs, small_lsns), ref, "native vs reference")


@pytest.mark.parametrize("workers,pieces", [(2, None), (2, 2), (3, 7), (4, 16)])
def test_decode_parallel_threads(big, workers, pieces):
    msgs, lsns = big
    for options in OPTIONS:
        assert_same(decode_parallel(msgs, lsns, workers=workers, pieces=pieces, **options),
                    Decoder(**options).feed(msgs, lsns), f"{workers} workers, {pieces} pieces, {options}")


def test_decode_parallel_chunked_input_is_not_combined(big):
    """A ChunkedArray (a capture directory's segments) is cut without copying it into
    one array, across chunk boundaries, with the same result."""
    msgs, lsns = big
    n = len(msgs)
    bounds = [0, 1, 5000, 5001, n // 2, n - 3, n]
    chunked = pa.chunked_array([msgs.slice(a, b - a) for a, b in zip(bounds, bounds[1:])])
    large = pa.chunked_array([c.cast(pa.large_binary()) for c in chunked.chunks])
    whole = Decoder().feed(msgs, lsns)
    for arr in (chunked, large):
        assert_same(decode_parallel(arr, lsns, workers=2, pieces=5), whole, str(arr.type))
        scan = message_scan(arr)
        lens = [len(m) for m in msgs.to_pylist()]
        assert scan.total == sum(lens) and scan.simple
        assert bytes(scan.types) == bytes(m[0] if m else 0 for m in msgs.to_pylist())
        assert scan.rest.sum() == 400 + 2             # (after each Commit, and the 2 Relations)
        idx = [0, 1, 4999, 5000, 5001, n // 2, n - 1, n]
        assert scan.starts(idx).tolist() == [sum(lens[:i]) for i in idx]


def _decode_threads() -> dict:
    """The live threads of decode_parallel's kept pools, by pool: {workers: count}."""
    out: dict = {}
    for th in threading.enumerate():
        if th.name.startswith("pgoutput_fast-decode-"):
            size = int(th.name[len("pgoutput_fast-decode-"):].split("_")[0])
            out[size] = out.get(size, 0) + 1
    return out


def test_decode_parallel_calls_from_threads_at_once(big):
    """Four threads call decode_parallel at once, three times each, on the kept pools of
    2 and 3 workers: each call gives what one Decoder gives; no pool runs more threads
    than its workers, and calls made after them start no more threads (the pool is
    kept, not made per call)."""
    msgs, lsns = big
    kw = {(): {}, ("events",): {"events": False}}
    alone = {o: Decoder(**kw[o]).feed(msgs, lsns) for o in kw}
    out: dict = {}
    errors: list = []
    start = threading.Barrier(4)

    def run(t):
        try:
            start.wait()
            opt = () if t % 2 else ("events",)
            out[t] = [(opt, decode_parallel(msgs, lsns, workers=2 + t % 2, pieces=5, **kw[opt]))
                      for _ in range(3)]
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert sorted(out) == [0, 1, 2, 3]
    for t, results in out.items():
        for r, (opt, cs) in enumerate(results):
            assert_same(cs, alone[opt], f"thread {t} round {r}")
    live = _decode_threads()
    assert live and live.get(2, 0) <= 2 and live.get(3, 0) <= 3, live
    ids = {th.ident for th in threading.enumerate() if th.name.startswith("pgoutput_fast-decode-")}
    for _ in range(3):
        assert_same(decode_parallel(msgs, lsns, workers=2, pieces=7), alone[()], "after")
    after = {th.ident for th in threading.enumerate() if th.name.startswith("pgoutput_fast-decode-")}
    assert after == ids, "a call started threads of its own"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_decode_parallel_in_a_forked_child(big):
    """A child forked after the parent used the kept pool (its threads are not in the
    child) decodes on a pool of its own, with the parent's result; the parent's pool
    goes on working after the fork."""
    msgs, lsns = big
    alone = Decoder(events=False).feed(msgs, lsns)
    assert_same(decode_parallel(msgs, lsns, workers=2, events=False), alone, "parent before")
    expect = [t.num_rows for _, t in alone.table_versions]
    pid = os.fork()
    if pid == 0:                                         # the child: exit 0 only if right
        code = 1
        try:
            cs = decode_parallel(msgs, lsns, workers=2, pieces=4, events=False)
            code = 0 if [t.num_rows for _, t in cs.table_versions] == expect else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("decode_parallel in the forked child did not finish in 120 s")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert_same(decode_parallel(msgs, lsns, workers=2, events=False), alone, "parent after")


def test_one_decoder_on_two_threads_is_refused(big):
    """feed() of one Decoder while another thread is inside its feed(): a clear
    RuntimeError for the second caller, and the first one's result is whole."""
    msgs, lsns = big
    alone = Decoder(events=False).feed(msgs, lsns)
    # a long feed: the stream five times over, as one batch (the same transactions again
    # and again: the decoder does not care)
    long_msgs = pa.chunked_array([msgs] * 5)
    long_lsns = np.concatenate([lsns] * 5)
    for attempt in range(5):
        dec = Decoder(events=False)
        inside = threading.Event()
        result: dict = {}

        def first():
            inside.set()
            result["cs"] = dec.feed(long_msgs, long_lsns)

        th = threading.Thread(target=first)
        th.start()
        inside.wait()
        refused = None
        while th.is_alive() and refused is None:
            try:
                dec.feed(msgs.slice(0, 2), lsns[:2])          # (Relation messages only)
            except RuntimeError as exc:
                refused = exc
        th.join()
        if refused is not None:
            break
    assert refused is not None, "the second feed never overlapped the first in 5 tries"
    assert "two threads at once" in str(refused)
    cs = result["cs"]
    for (v, t), (va, ta) in zip(cs.table_versions, alone.table_versions):
        assert v == va and t.num_rows == 5 * ta.num_rows
        assert t.slice(0, ta.num_rows).equals(ta)


@pytest.mark.parametrize("large", [False, True])
def test_message_scan_native_and_reference(large):
    """The type bytes, where no Begin is open after each message, the depth carried over
    and whether only Begin / Commit control the stream: the native pass, the
    reference's and a plain Python walk agree, on slices (offsets not from 0) and empty
    messages; a short offsets buffer is refused."""
    rng = random.Random(3)
    kinds = [b"B", b"C", b"I", b"U", b"R", b"", b"S", b"K"]
    msgs = []
    for _ in range(3000):
        t = rng.choice(kinds[:6] if rng.random() < 0.97 else kinds)
        msgs.append(t + bytes(rng.randrange(0, 5)) if t else b"")
    arr = pa.array(msgs, pa.large_binary() if large else pa.binary())
    for a, b, depth in ((0, len(arr), 0), (1, 2000, 3), (2999, 1, -1), (17, 0, 0)):
        sl = arr.slice(a, b)
        bufs = sl.buffers()
        d, want_rest, simple = depth, bytearray(), True
        for m in msgs[a:a + b]:
            d += (m[:1] == b"B") - (m[:1] == b"C")
            simple = simple and m[:1] not in (b"S", b"K")
            want_rest.append(d == 0)
        want = (bytes(m[0] if m else 0 for m in msgs[a:a + b]), bytes(want_rest), d, simple)
        for impl in (native, _reference):
            t, r, dd, s = impl._message_scan(memoryview(bufs[1]).cast("B"), memoryview(bufs[2]).cast("B"),
                                             sl.offset, len(sl), large, depth)
            assert (bytes(t), bytes(r), dd, s) == want, impl
    bufs = arr.buffers()
    for impl in (native, _reference):
        with pytest.raises(ValueError, match="shorter"):
            impl._message_scan(memoryview(bufs[1]).cast("B")[:8], memoryview(bufs[2]).cast("B"), 0, 10, large)
