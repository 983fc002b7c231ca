"""Initial snapshot throughput: ``capture --snapshot only`` of one table against
``psql -c "COPY t TO STDOUT (FORMAT binary)" > /dev/null``, in the same run.

One private PostgreSQL, one table (ROWS rows of ~100 bytes: int4, int8, text,
timestamptz, float8). The three are run alternately, ROUNDS times (psql, snapshot with
1 worker, snapshot with 2 workers; the order rotates each round), so that a machine
whose load changes weighs on all alike; the medians and their ratios are printed. The
snapshot does more than psql: it turns every row into a pgoutput Insert, writes Parquet
segments (LZ4, the snapshot's default codec) with page checksums, fsyncs, hashes and
checkpoints them; the
summary's ``encode_seconds`` is the encoder threads' time (Parquet and SHA-256, summed
over the threads, which run at the same time as the COPY and each other) and
``write_seconds`` the writer thread's (write, fsync, rename, manifest, checkpoint).

Run: ``pytest benchmarks/bench_snapshot.py -s -p no:xdist`` (PGOUTPUT_FAST_SNAPSHOT_ROWS
sets the size, default 500000). ``PGOUTPUT_FAST_SNAPSHOT_AB=zstd`` (any Parquet codec)
adds a fourth contender to the same rotation: 1 worker with that codec given explicitly
(``CaptureConfig(compression=...)``), reported as ``snapshot_1_worker_<codec>_s``, an
A/B of the codec in the same run.
"""

import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time

import pytest

ROWS = int(os.environ.get("PGOUTPUT_FAST_SNAPSHOT_ROWS", "500000"))
ROUNDS = int(os.environ.get("PGOUTPUT_FAST_SNAPSHOT_ROUNDS", "5"))
AB = os.environ.get("PGOUTPUT_FAST_SNAPSHOT_AB") or None


@pytest.fixture(scope="module")
def server():
    from pgoutput_fast.local_server import PostgresServer, find_bindir
    from pgoutput_fast.demo import workload

    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries")
    pg = PostgresServer()
    pg.start()
    conn = pg.connect()
    workload._exec(conn, "CREATE TABLE bench (id int PRIMARY KEY, a int8, b text, c timestamptz, d float8)")
    workload._exec(conn, "INSERT INTO bench SELECT g, g * 7, md5(g::text) || md5((g+1)::text), "
                         "now(), g / 3.0 FROM generate_series(1, %s) g", (ROWS,))
    workload._exec(conn, "VACUUM ANALYZE bench")
    workload._exec(conn, "CREATE PUBLICATION bench_pub FOR TABLE bench")
    yield {"pg": pg, "conn": conn}
    conn.close()
    pg.stop()


def _psql(server):
    pg = server["pg"]
    t = time.perf_counter()
    subprocess.run([os.path.join(pg.bindir, "psql"), pg.dsn(), "-X", "-q", "-c",
                    "COPY bench TO STDOUT (FORMAT binary)"], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t, None


def _snapshot(server, workers, compression=None):
    from pgoutput_fast.capture import CaptureConfig, run_capture

    pg = server["pg"]
    out = tempfile.mkdtemp(prefix="pgoutput_fast_bench_snapshot_")
    try:
        t = time.perf_counter()
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        r = run_capture(CaptureConfig(pg.dsn(), "bench_snap", "bench_pub", out, create_slot=True,
                                      binary=True, snapshot="only", snapshot_workers=workers,
                                      progress="off", compression=compression))
        wall = time.perf_counter() - t
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        assert r.snapshot["rows"] == ROWS, r.snapshot
        summary = dict(r.snapshot)
        # CPU of this process (every thread: COPY reading and conversion, Parquet, fsync)
        summary["cpu_s"] = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
        summary["segment_mb"] = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)
                                    if f.endswith(".parquet")) / 1e6
        return wall, summary
    finally:
        with server["conn"].cursor() as cur:
            cur.execute("SELECT pg_drop_replication_slot('bench_snap')")
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.benchmark(group="snapshot")
def test_snapshot_vs_psql_copy_binary(benchmark, server):
    order = ["psql", "w1", "w2"] + (["ab"] if AB else [])
    runs: dict = {k: [] for k in order}
    summaries: dict = {k: [] for k in order if k != "psql"}

    def one_round():
        for name in order:
            if name == "psql":
                wall, summary = _psql(server)
            elif name == "ab":
                wall, summary = _snapshot(server, 1, AB)
            else:
                wall, summary = _snapshot(server, int(name[1]))
            runs[name].append(wall)
            if summary:
                summaries[name].append(summary)
        order.append(order.pop(0))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    med = {k: statistics.median(v[-ROUNDS:]) for k, v in runs.items()}
    write = {k: statistics.median(s["write_seconds"] for s in v[-ROUNDS:]) for k, v in summaries.items()}
    encode = {k: statistics.median(s["encode_seconds"] for s in v[-ROUNDS:]) for k, v in summaries.items()}
    info = {
        "rows": ROWS,
        "psql_s": round(med["psql"], 3),
        "snapshot_1_worker_s": round(med["w1"], 3),
        "snapshot_2_workers_s": round(med["w2"], 3),
        "ratio_1_worker": round(med["psql"] / med["w1"], 2),
        "ratio_2_workers": round(med["psql"] / med["w2"], 2),
        "speedup_2_workers": round(med["w1"] / med["w2"], 2),
        "encode_s_1_worker": round(encode["w1"], 3),
        "writer_s_1_worker": round(write["w1"], 3),
        "capture_cpu_s_1_worker": round(statistics.median(x["cpu_s"] for x in summaries["w1"][-ROUNDS:]), 3),
        "message_mb": round(summaries["w1"][-1]["message_bytes"] / 1e6, 1),
        "segment_mb": round(summaries["w1"][-1]["segment_mb"], 1),
        "segments": summaries["w1"][-1]["segments"],
        "load_average": round(os.getloadavg()[0], 1),
    }
    if AB:
        info.update({
            f"snapshot_1_worker_{AB}_s": round(med["ab"], 3),
            f"ratio_1_worker_{AB}": round(med["psql"] / med["ab"], 2),
            f"encode_s_1_worker_{AB}": round(encode["ab"], 3),
            f"writer_s_1_worker_{AB}": round(write["ab"], 3),
            f"capture_cpu_s_1_worker_{AB}": round(
                statistics.median(x["cpu_s"] for x in summaries["ab"][-ROUNDS:]), 3),
            f"segment_mb_{AB}": round(summaries["ab"][-1]["segment_mb"], 1),
        })
    benchmark.extra_info.update(info)
    print("\nsnapshot vs psql COPY (binary) -> /dev/null:", info)
