"""Capture throughput: ``pgoutput_fast.capture`` vs ``pg_recvlogical -f /dev/null``.

One private PostgreSQL, one workload (ROWS inserts of ~120-byte rows in transactions of
1000, plus updates), captured in binary mode with the server's highest protocol from
fresh slots created before the workload, so every round reads the same WAL:

* ``pg_recvlogical``: PostgreSQL's own client writing to /dev/null (no durability);
* ``capture``: segments written as Parquet (zstd), fsynced, renamed, checkpointed,
  acknowledged (``run_capture(until_lsn=end)``).

``test_capture_vs_pg_recvlogical_paired`` runs the two alternately (recvlogical, capture;
then capture, recvlogical; ...), so that a machine whose load changes during the run
(2 cores shared with other jobs) weighs on both alike, and reports the ratio of the
medians and each one's CPU time per message (capture: both of its threads;
pg_recvlogical: the child's user + system time).

Run: ``pytest benchmarks/bench_capture.py --benchmark-only`` (PGOUTPUT_FAST_CAPTURE_ROWS
sets the size, default 300000).
"""

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from benchutil import record

ROWS = int(os.environ.get("PGOUTPUT_FAST_CAPTURE_ROWS", "300000"))
ROUNDS = 3
_medians = {}


@pytest.fixture(scope="module")
def server():
    from pgoutput_fast.local_server import PostgresServer, find_bindir
    from pgoutput_fast import sqlcapture
    from pgoutput_fast.demo import workload

    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries")
    pg = PostgresServer(extra_conf={"logical_decoding_work_mem": "64MB"})
    pg.start()
    conn = pg.connect()
    workload._exec(conn, "CREATE TABLE bench (id int PRIMARY KEY, a int8, b text, c timestamptz, d float8)")
    workload._exec(conn, "CREATE PUBLICATION bench_pub FOR TABLE bench")
    slots = {f"{tool}{i}" for tool in ("cap", "recv", "pcap", "precv") for i in range(ROUNDS + 1)}
    for s in sorted(slots):
        workload.create_slot(conn, s)
    for lo in range(0, ROWS, 1000):
        workload._exec(conn, "INSERT INTO bench SELECT g, g * 7, md5(g::text) || md5((g+1)::text), "
                             "now(), g / 3.0 FROM generate_series(%s, %s) g", (lo, lo + 999))
    for lo in range(0, ROWS // 5, 1000):
        workload._exec(conn, "UPDATE bench SET a = a + 1 WHERE id >= %s AND id < %s", (lo, lo + 1000))
    end = sqlcapture.wait_for_wal_flush(conn)
    yield {"pg": pg, "end": end, "conn": conn, "slots": slots}
    conn.close()
    pg.stop()


def _proto(pg):
    from pgoutput_fast.capture import max_protocol

    return max_protocol(pg.version_num)


def _next_slot(server, tool):
    s = sorted(x for x in server["slots"] if x.startswith(tool))[0]
    server["slots"].discard(s)
    return s


@pytest.mark.benchmark(group="capture")
def test_pg_recvlogical_devnull(benchmark, server):
    from pgoutput_fast.sqlcapture import text_lsn

    pg = server["pg"]
    tool = os.path.join(pg.bindir, "pg_recvlogical")

    def run():
        slot = _next_slot(server, "recv")
        subprocess.run([tool, "-d", pg.dsn(), "--slot", slot, "--start", "-f", "/dev/null",
                        "--no-loop", "-E", text_lsn(server["end"]), "-o", f"proto_version={_proto(pg)}",
                        "-o", "publication_names=bench_pub", "-o", "binary=true"],
                       check=True, capture_output=True, timeout=600)

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    _medians["recv"] = benchmark.stats.stats.median
    record(benchmark, "capture: pg_recvlogical -> /dev/null", rows=ROWS * 6 // 5)


@pytest.mark.benchmark(group="capture")
def test_capture_segments(benchmark, server):
    from pgoutput_fast.capture import CaptureConfig, read_segments, run_capture

    pg = server["pg"]
    results = []

    def run():
        slot = _next_slot(server, "cap")
        out = tempfile.mkdtemp(prefix="pgoutput_fast_bench_capture_")
        try:
            r = run_capture(CaptureConfig(pg.dsn(), slot, "bench_pub", out, binary=True,
                                          until_lsn=server["end"], progress="off"))
            results.append((r, read_segments(out, columns=("ordinal",)).num_rows))
        finally:
            shutil.rmtree(out, ignore_errors=True)

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    r, n = results[-1]
    recv = _medians.get("recv")
    if recv:
        benchmark.extra_info["vs pg_recvlogical"] = round(recv / benchmark.stats.stats.median, 2)
    assert n == r.messages > ROWS
    record(benchmark, "capture: pgoutput_fast.capture -> Parquet segments", rows=ROWS * 6 // 5,
           messages=r.messages, bytes=r.bytes, baseline="capture: pg_recvlogical -> /dev/null")


def _recvlogical_once(server, slot):
    from pgoutput_fast.sqlcapture import text_lsn

    pg = server["pg"]
    cmd = [os.path.join(pg.bindir, "pg_recvlogical"), "-d", pg.dsn(), "--slot", slot, "--start",
           "-f", "/dev/null", "--no-loop", "-E", text_lsn(server["end"]),
           "-o", f"proto_version={_proto(pg)}", "-o", "publication_names=bench_pub",
           "-o", "binary=true"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    assert os.waitstatus_to_exitcode(status) == 0, p.stderr.read().decode()
    p.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def _capture_once(server, slot):
    from pgoutput_fast.capture import CaptureConfig, run_capture

    out = tempfile.mkdtemp(prefix="pgoutput_fast_bench_capture_")
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t = time.perf_counter()
        r = run_capture(CaptureConfig(server["pg"].dsn(), slot, "bench_pub", out, binary=True,
                                      until_lsn=server["end"], progress="off"))
        wall = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), r


@pytest.mark.benchmark(group="capture")
def test_capture_vs_pg_recvlogical_paired(benchmark, server):
    import statistics

    from benchutil import NOTES, RESULTS

    runs: dict = {"recv": [], "cap": []}
    result = None

    def pairs():
        nonlocal result
        for i in range(ROUNDS):
            for tool in (("recv", "cap") if i % 2 == 0 else ("cap", "recv")):
                slot = _next_slot(server, "p" + tool)
                if tool == "recv":
                    runs["recv"].append(_recvlogical_once(server, slot))
                else:
                    wall, cpu, result = _capture_once(server, slot)
                    runs["cap"].append((wall, cpu))

    benchmark.pedantic(pairs, rounds=1, iterations=1, warmup_rounds=0)
    assert result is not None and result.messages > ROWS
    med = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in runs.items()}
    sizes = {"messages": result.messages, "bytes": result.bytes, "rows": ROWS * 6 // 5}
    RESULTS["capture (paired): pg_recvlogical -> /dev/null"] = {"median": med["recv"], **sizes}
    RESULTS["capture (paired): pgoutput_fast.capture -> Parquet"] = {
        "median": med["cap"], **sizes, "baseline": "capture (paired): pg_recvlogical -> /dev/null"}
    benchmark.extra_info["vs pg_recvlogical"] = round(med["recv"] / med["cap"], 2)
    NOTES.append(f"capture (paired, {ROUNDS} rounds each, alternating): {result.messages:,} messages, "
                 f"{result.bytes / 1e6:.1f} MB; wall median capture {med['cap']:.2f} s, "
                 f"pg_recvlogical {med['recv']:.2f} s ({med['recv'] / med['cap']:.2f}x); CPU per "
                 f"message capture {cpu['cap'] / result.messages * 1e6:.2f} us, pg_recvlogical "
                 f"{cpu['recv'] / result.messages * 1e6:.2f} us")
