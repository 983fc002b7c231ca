"""The command line's failures: one line on stderr (what failed, where, what to do), the
exit status, no traceback unless --debug; and decode --out leaves no partial file."""

import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.captures import FIXTURES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "pgoutput_fast", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def one_line(out, status, command, *words):
    """``out`` failed with ``status`` and exactly one line on stderr, holding ``words``."""
    assert out.returncode == status, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith(f"pgoutput-fast {command}: "), line
    for w in words:
        assert str(w) in line, (w, line)
    return line


def with_debug(args, status):
    """The same failure under --debug (before and after the command): the traceback,
    then the one line."""
    for argv in (["--debug", *args], [args[0], "--debug", *args[1:]]):
        out = run_cli(*argv)
        assert out.returncode == status, (argv, out.stderr)
        assert "Traceback (most recent call last)" in out.stderr, out.stderr
        assert out.stderr.splitlines()[-1].startswith(f"pgoutput-fast {args[0]}: ")


def test_version():
    from pgoutput_fast._version import __version__

    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"pgoutput-fast {__version__}"


def test_usage_errors_are_one_line(tmp_path):
    one_line(run_cli("capture", "--slot", "s"), 2, "capture", "required", "--publication",
             "--out", "--help")
    one_line(run_cli("capture", "--slot", "s", "--publication", "p", "--out", tmp_path,
                     "--file-mode", "0400"), 2, "capture", "--file-mode", "0600")
    one_line(run_cli("capture", "--slot", "s", "--publication", "p", "--out", tmp_path,
                     "--until-lsn", "nope"), 2, "capture", "not an LSN")
    one_line(run_cli("capture", "--dsn", "x", "--dsn-file", "y", "--slot", "s",
                     "--publication", "p", "--out", tmp_path), 2, "capture", "not allowed")
    out = run_cli("no-such-command")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr


def test_missing_file(tmp_path):
    path = tmp_path / "missing.pgoc"
    for command in ("inspect", "decode"):
        one_line(run_cli(command, path), 1, command, path, "No such file or directory",
                 "check the path")
    with_debug(["inspect", str(path)], 1)


def test_directory_that_is_not_a_capture(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    line = one_line(run_cli("inspect", tmp_path), 1, "inspect", tmp_path,
                    "not a capture directory")
    assert "give a framed capture" in line
    one_line(run_cli("decode", tmp_path), 1, "decode", tmp_path, "not a capture directory")


def test_file_of_neither_format(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, not a capture\n")
    one_line(run_cli("inspect", path), 1, "inspect", path, "neither a framed capture",
             "Parquet")
    empty = tmp_path / "empty.pgoc"
    empty.write_bytes(b"")
    one_line(run_cli("decode", empty), 1, "decode", empty, "empty file")
    with_debug(["decode", str(empty)], 1)


@pytest.mark.parametrize("data, lsn, column, kind", [
    (pa.array(["a", "b"]), pa.array([1, 2], pa.int64()), "data", "string"),
    (pa.array([1, 2], pa.int32()), None, "data", "int32"),
    (pa.array([b"B", b"C"], pa.binary()), pa.array(["0/1", "0/2"]), "lsn", "string"),
    (pa.array([b"B", b"C"], pa.binary()), pa.array([1.5, 2.5]), "lsn", "double"),
])
def test_parquet_with_wrong_column_type(tmp_path, data, lsn, column, kind):
    cols = {"data": data}
    if lsn is not None:
        cols["lsn"] = lsn
    path = tmp_path / "wrong.parquet"
    pq.write_table(pa.table(cols), path)
    for command in ("inspect", "decode"):
        one_line(run_cli(command, path), 1, command, path, f"column '{column}' is {kind}")


def test_parquet_without_data_and_damaged(tmp_path):
    path = tmp_path / "nodata.parquet"
    pq.write_table(pa.table({"payload": pa.array([b"x"])}), path)
    one_line(run_cli("decode", path), 1, "decode", path, "no 'data' column", "payload")

    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"data": pa.array([b"x"] * 100)}), good)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:80])
    one_line(run_cli("inspect", cut), 1, "inspect", cut, "not a readable Parquet file")
    with_debug(["inspect", str(cut)], 1)


def test_truncated_framed_file(tmp_path):
    src = os.path.join(FIXTURES, "v1_text.pgoc")
    with open(src, "rb") as f:
        data = f.read()
    for n, what in ((len(data) - 5, "runs past the end"), (8 + 5, "truncated frame header")):
        path = tmp_path / f"cut{n}.pgoc"
        path.write_bytes(data[:n])
        for command in ("inspect", "decode"):
            line = one_line(run_cli(command, path), 1, command, path, what,
                            "damaged or was cut short")
            assert line.count(str(path)) == 1, line
    with_debug(["decode", str(path)], 1)


def test_bad_message(tmp_path):
    from pgoutput_fast.framing import write_framed

    path = tmp_path / "bad.pgoc"
    write_framed(path, [b"B" + bytes(20), b"C\x00" + bytes(10)], lsns=[16, 32])
    line = one_line(run_cli("decode", path), 1, "decode", path, "cannot be decoded",
                    "truncated", "message #1", "pgoutput-fast inspect")
    assert "lsn 0/20" in line
    with_debug(["decode", str(path)], 1)
    # inspect lists the messages on stdout up to the bad one, and says so on stderr
    out = run_cli("inspect", path)
    one_line(out, 1, "inspect", path, "message #1", "--keep-going")
    assert "ERROR" in out.stdout and "Begin(" in out.stdout


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(FIXTURES) if n.endswith(".pgoc")))
def test_decode_out_writes_every_type(tmp_path, name):
    """Every fixture (intervals, uuids, times, oids, unconstrained numerics, infinite
    timestamps among them) is written by ``decode --out``; each file read back and
    mapped back (``from_storage_array``) equals what the decoder gives in memory."""
    import pyarrow.parquet as pq

    from pgoutput_fast import Decoder
    from pgoutput_fast.framing import read_capture
    from pgoutput_fast.storage_types import from_storage_array

    out_dir = tmp_path / "tables"
    src = os.path.join(FIXTURES, name)
    out = run_cli("decode", src, "--out", out_dir)
    assert out.returncode == 0, out.stderr
    lsns, msgs = read_capture(src)
    cs = Decoder(events=True).feed(msgs, lsns)
    assert cs.table_versions
    for version, table in cs.table_versions:
        stored = pq.read_table(out_dir / f"{version.qualified_name}.v{version.version}.parquet")
        kept = [f for f in table.schema
                if not (pa.types.is_struct(f.type) and f.type.num_fields == 0)]
        assert stored.num_rows == table.num_rows
        assert stored.column_names == [f.name for f in kept]
        for f in kept:
            back = from_storage_array(stored.column(f.name), f.type)
            want = table.column(f.name).combine_chunks()
            if not back.equals(want):   # NaN: equal as Python reprs
                assert list(map(repr, back.to_pylist())) == list(map(repr, want.to_pylist())), f.name
    assert pq.read_table(out_dir / "_events.parquet").num_rows == cs.events.num_rows


def test_decode_out_renames_complete_files_only(tmp_path):
    """A file that cannot take its final name: one line, no temp file left, and only
    complete files under their final names."""
    src = os.path.join(FIXTURES, "v2_stream_text.pgoc")
    good = tmp_path / "good"
    out = run_cli("decode", src, "--out", good)
    assert out.returncode == 0, out.stderr
    expected = sorted(os.listdir(good))
    assert "_events.parquet" in expected and len(expected) >= 2

    bad = tmp_path / "bad"
    (bad / "_events.parquet").mkdir(parents=True)     # the last file cannot be renamed
    out = run_cli("decode", src, "--out", bad)
    one_line(out, 1, "decode", "_events.parquet", "Is a directory")
    names = sorted(os.listdir(bad))
    assert not [n for n in names if n.endswith(".tmp")], names
    assert set(names) == set(expected)
    for name in names:
        if name != "_events.parquet":      # the others are whole: they read back
            assert pq.read_table(bad / name).equals(pq.read_table(good / name))

    # a write that fails half-way (the file size limit stands in for a full disk):
    # the files written before it are whole, the one being written is not there at all
    import resource

    sizes = {n: os.path.getsize(good / n) for n in expected}
    limit = (min(sizes.values()) + max(sizes.values())) // 2
    assert min(sizes.values()) < limit < max(sizes.values())
    full = tmp_path / "full"
    out = subprocess.run(
        [sys.executable, "-m", "pgoutput_fast", "decode", src, "--out", str(full)], cwd=ROOT,
        capture_output=True, text=True, timeout=600,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    line = one_line(out, 1, "decode", "File too large", str(full))
    names = sorted(os.listdir(full))
    assert not [n for n in names if n.endswith(".tmp")], names
    assert len(names) < len(expected), names
    for name in names:
        assert sizes[name] < limit
        assert pq.read_table(full / name).equals(pq.read_table(good / name))
    assert line.split(": ")[1].startswith(str(full / "")), line   # the file that failed


def test_interrupt_outside_capture(tmp_path):
    """SIGINT/SIGTERM outside capture: one line, 130/143 (sent before the interpreter
    starts, blocked: it is handled the moment the handlers are in place)."""
    import signal

    for signum, status, word in ((signal.SIGINT, 130, "interrupted (SIGINT)"),
                                 (signal.SIGTERM, 143, "terminated (SIGTERM)")):
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgoutput_fast", "inspect",
             os.path.join(FIXTURES, "v1_text.pgoc")], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=lambda s=signum: (signal.signal(s, signal.SIG_DFL),
                                         signal.pthread_sigmask(signal.SIG_BLOCK, {s})))
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == status, stderr
        assert stderr.splitlines() == [f"pgoutput-fast inspect: {word}"]


@pytest.fixture
def capture_dir(pg_server, tmp_path):
    """A real capture directory: a few transactions captured with the command line."""
    conn = pg_server.connect()
    cur = conn.cursor()
    cur.execute("DROP TABLE IF EXISTS clierr_t")
    cur.execute("CREATE TABLE clierr_t (id int PRIMARY KEY, v text)")
    cur.execute("DROP PUBLICATION IF EXISTS clierr_pub")
    cur.execute("CREATE PUBLICATION clierr_pub FOR TABLE clierr_t")
    cur.execute("SELECT pg_create_logical_replication_slot('clierr_slot', 'pgoutput')")
    try:
        for i in range(5):
            cur.execute("INSERT INTO clierr_t VALUES (%s, %s)", (i, f"row {i}"))
        # the insert position: with synchronous_commit=off (the test server) the write
        # position pg_current_wal_lsn() can still be before these commits
        cur.execute("SELECT pg_current_wal_insert_lsn()::text")
        until = cur.fetchone()[0]
        out_dir = tmp_path / "cap"
        out = run_cli("capture", "--dsn", pg_server.dsn(), "--slot", "clierr_slot",
                      "--publication", "clierr_pub", "--out", out_dir, "--until-lsn", until,
                      "--progress", "off")
        assert out.returncode == 0, out.stderr
        yield out_dir
    finally:
        import time

        deadline = time.monotonic() + 60
        while True:           # the walsender may still be exiting
            cur.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'clierr_slot'")
            row = cur.fetchone()
            if row is None or not row[0] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = 'clierr_slot'")
        cur.execute("DROP PUBLICATION IF EXISTS clierr_pub")
        cur.execute("DROP TABLE IF EXISTS clierr_t")
        conn.close()


def test_capture_directory_read_and_damaged(capture_dir):
    out = run_cli("inspect", capture_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("Insert(") == 5
    out = run_cli("decode", capture_dir)
    assert out.returncode == 0, out.stderr
    assert "public.clierr_t" in out.stdout

    segments = sorted(n for n in os.listdir(capture_dir) if n.endswith(".parquet"))
    assert segments
    seg = capture_dir / segments[-1]
    seg.write_bytes(seg.read_bytes()[:-20])         # cut short
    for command in ("inspect", "decode"):
        out = run_cli(command, capture_dir)
        assert out.returncode == 7, out.stderr    # SegmentError
        assert "Traceback" not in out.stderr
        assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith(
            f"pgoutput-fast {command}: ")


def test_pipeline_without_segments_is_one_line(tmp_path):
    """A missing, empty or segment-less capture directory stops the pipeline with one
    line and exit status 7 before Spark starts, never '0 changes' and exit 0."""
    from pgoutput_fast.capture import write_capture

    empty = tmp_path / "empty"
    empty.mkdir()
    fresh = tmp_path / "fresh"
    write_capture(fresh, [], {"proto_version": 1})
    for path, words in ((tmp_path / "missing", ("no such directory",)),
                        (empty, ("no checkpoint.json",)),
                        (fresh, ("holds no segment yet",))):
        out = run_cli("pipeline", "--segments", path, "--out", tmp_path / "tables")
        one_line(out, 7, "pipeline", path, *words)
        assert not (tmp_path / "tables").exists()


def test_pipeline_conf_without_value_is_one_line(tmp_path):
    """``--conf`` that is not KEY=VALUE: one line, exit status 2, before Spark starts."""
    from tests.support.segdirs import write_fixture_dir

    segments = write_fixture_dir(tmp_path / "segments", "v1_text")
    out = run_cli("pipeline", "--segments", segments, "--out", tmp_path / "tables",
                  "--conf", "spark.executor.memory")
    one_line(out, 2, "pipeline", "--conf", "KEY=VALUE")
    assert not (tmp_path / "tables").exists()


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_pipeline_max_batch_changes_must_be_positive(tmp_path, value):
    """``--max-batch-changes`` that is not a positive whole number: argparse's usage line
    and exit status 2, before Spark starts."""
    out = run_cli("pipeline", "--segments", tmp_path, "--out", tmp_path / "tables",
                  "--max-batch-changes", value)
    assert out.returncode == 2, out.stderr
    assert "--max-batch-changes" in out.stderr and "positive whole number" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "tables").exists()
