"""What the integrity checks of a capture directory cost (no server needed).

One synthetic capture of SEGMENTS segments (Begin, 50 Inserts of a 6-column text row,
Commit; about 64 MB of messages), written and read two ways in the same run:

* ``write/plain``: ``pq.write_table`` of each segment (zstd, no page checksums, no fsync,
  no digest): the floor.
* ``write/capture``: ``capture.write_capture``: page checksums, fsync, read-back
  SHA-256, rename, manifest line, checkpoint: what capture's writer thread does per
  segment.
* ``read/plain``: ``pq.read_table`` of each file, unverified.
* ``read/verified``: ``capture.read_segments``: checkpoint checksum, manifest chain,
  size and SHA-256 of every file, page checksums, ordinals.

The ratios (verified / plain) are printed at the end of the run. Run:
``pytest benchmarks/bench_segments.py --benchmark-only``
(``PGOUTPUT_FAST_SEGMENT_MB`` sets the size, default 64).
"""

import os
import shutil
import tempfile

import pytest

from benchutil import NOTES, RESULTS, record

MB = int(os.environ.get("PGOUTPUT_FAST_SEGMENT_MB", "64"))
SEGMENTS = 8


@pytest.fixture(scope="module")
def tables():
    import pyarrow as pa

    from pgoutput_fast import encode_message
    from pgoutput_fast.capture import SEGMENT_SCHEMA
    from pgoutput_fast.messages import Begin, Commit, Insert, Value

    msgs, lsns = [], []
    lsn = 1 << 24
    total = 0
    i = 0
    while total < MB << 20:
        lsn += 64
        msgs.append(encode_message(Begin(lsn + 60, 0, i)))
        lsns.append(lsn)
        for _ in range(50):
            i += 1
            m = encode_message(Insert(16400, (
                Value("t", str(i).encode()), Value("t", str(i * 7 % 100000).encode()),
                Value("t", f"row {i} some text payload".encode()),
                Value("t", f"2024-05-{1 + i % 28:02d} 12:{i % 60:02d}:00.123456+00".encode()),
                Value("t", repr(i / 7).encode()), Value("t", f"{i % 100000}.125".encode()))))
            msgs.append(m)
            lsns.append(lsn)
            total += len(m)
        msgs.append(encode_message(Commit(0, lsn + 60, lsn + 62, 0)))
        lsns.append(lsn + 60)
    n = len(msgs)
    step = -(-n // SEGMENTS)
    out = []
    for a in range(0, n, step):
        b = min(n, a + step)
        out.append(pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                             pa.array(range(a, b), pa.int64())], schema=SEGMENT_SCHEMA))
    return out, sum(len(m) for m in msgs), n


@pytest.fixture(scope="module")
def workdir():
    d = tempfile.mkdtemp(prefix="pgoutput_fast_bench_segments_")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _fresh(workdir, name):
    path = os.path.join(workdir, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


@pytest.mark.benchmark(group="segments-write")
def test_write_plain(benchmark, tables, workdir):
    import pyarrow.parquet as pq

    segs, nbytes, n = tables

    def run():
        d = _fresh(workdir, "plain")
        os.makedirs(d)
        for i, t in enumerate(segs, 1):
            pq.write_table(t, os.path.join(d, f"{i:010d}.parquet"), compression="zstd",
                           use_dictionary=False)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    record(benchmark, "write/plain", bytes=nbytes, messages=n)


@pytest.mark.benchmark(group="segments-write")
def test_write_capture(benchmark, tables, workdir):
    from pgoutput_fast.capture import write_capture

    segs, nbytes, n = tables

    def run():
        write_capture(_fresh(workdir, "verified"), segs, {"binary": False})

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    record(benchmark, "write/capture", bytes=nbytes, messages=n)
    if "write/plain" in RESULTS:
        NOTES.append(f"segments: write_capture (page checksums, fsync, SHA-256, manifest, "
                     f"checkpoint) / plain pq.write_table = "
                     f"{RESULTS['write/capture']['median'] / RESULTS['write/plain']['median']:.2f}x")


@pytest.mark.benchmark(group="segments-read")
def test_read_plain(benchmark, tables, workdir):
    import pyarrow.parquet as pq

    from pgoutput_fast.capture import write_capture

    segs, nbytes, n = tables
    d = os.path.join(workdir, "read")
    if not os.path.exists(d):
        write_capture(d, segs, {"binary": False})
    paths = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".parquet"))

    def run():
        return sum(pq.read_table(p).num_rows for p in paths)

    assert benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1) == n
    record(benchmark, "read/plain", bytes=nbytes, messages=n)


@pytest.mark.benchmark(group="segments-read")
def test_read_verified(benchmark, tables, workdir):
    from pgoutput_fast.capture import read_segments, write_capture

    segs, nbytes, n = tables
    d = os.path.join(workdir, "read")
    if not os.path.exists(d):
        write_capture(d, segs, {"binary": False})

    def run():
        return read_segments(d).num_rows

    assert benchmark.pedantic(run, rounds=7, iterations=1, warmup_rounds=1) == n
    record(benchmark, "read/verified", bytes=nbytes, messages=n)
    if "read/plain" in RESULTS:
        NOTES.append(f"segments: read_segments (verified) / plain pq.read_table = "
                     f"{RESULTS['read/verified']['median'] / RESULTS['read/plain']['median']:.2f}x")
