"""``pgoutput-fast decode --workers N``: a capture decoded on N cores gives the files one
core gives, reports what is held back and a bad message as one core does."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pgoutput_fast import Begin, Insert, Value, encode_message
from tests.cli.test_cli_errors import one_line, run_cli
from tests.decoder.test_threads import R, stream

# (child processes decoding 30 k changes seven times: left out of the sanitized run, where
# test_threads.py and test_parallel.py drive the same decode in process)
pytestmark = pytest.mark.slow


def _capture_dir(path, msgs, lsns, segments=5):
    from pgoutput_fast.capture import SEGMENT_SCHEMA, write_capture
    from pgoutput_fast.parallel import plan_cuts

    cuts = [0] + plan_cuts(msgs, segments) + [len(msgs)]
    tables = [pa.table([pa.array(lsns[a:b]), msgs.slice(a, b - a), pa.array(np.arange(a, b))],
                       schema=SEGMENT_SCHEMA) for a, b in zip(cuts, cuts[1:])]
    write_capture(path, tables, {"binary": False, "proto_version": 1})
    return path


def _open_tail(msgs, lsns):
    """The stream and a transaction left open at its end (held back)."""
    extra = [encode_message(Begin(1 << 40, 5, 99999)),
             encode_message(Insert(R, (Value("t", b"1"),) + (None,) * 9, None))]
    return (pa.concat_arrays([msgs, pa.array(extra, pa.binary())]),
            np.concatenate([lsns, [lsns[-1] + 1, lsns[-1] + 2]]))


def test_decode_workers_same_files(tmp_path):
    msgs, lsns = _open_tail(*stream(seed=11, txns=250))
    src = _capture_dir(tmp_path / "cdc", msgs, lsns)
    outs = {}
    for w in (1, 2, 3):
        out = run_cli("decode", src, "--workers", w, "--out", tmp_path / f"w{w}")
        assert out.returncode == 0, out.stderr
        head = out.stdout.splitlines()[0]
        assert f"on {w} core" in head, head
        assert "held back" in out.stdout and "99999" in out.stdout, out.stdout
        outs[w] = [line.replace(str(tmp_path / f"w{w}"), "OUT") for line in out.stdout.splitlines()[1:]]
    assert outs[1] == outs[2] == outs[3]
    names = sorted(os.listdir(tmp_path / "w1"))
    assert "_events.parquet" in names and len(names) == 3
    for w in (2, 3):
        assert sorted(os.listdir(tmp_path / f"w{w}")) == names
        for n in names:
            a = pq.read_table(tmp_path / "w1" / n)
            b = pq.read_table(tmp_path / f"w{w}" / n)
            assert a.num_rows > 1000 and a.equals(b), (w, n)


def test_decode_workers_bad_message_and_bad_count(tmp_path):
    msgs, lsns = stream(seed=12, txns=200)
    bad_at = len(msgs) - 40
    data = msgs.to_pylist()
    data[bad_at] = data[bad_at][:9]                  # an Insert cut short, late in the stream
    src = _capture_dir(tmp_path / "cdc", pa.array(data, pa.binary()), lsns)
    lines = []
    for w in (1, 2):
        out = run_cli("decode", src, "--workers", w)
        lines.append(one_line(out, 1, "decode", "cannot be decoded", "pgoutput-fast inspect"))
    assert lines[0] == lines[1]
    lsn = int(lsns[bad_at])
    assert f"lsn {lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}" in lines[0]
    one_line(run_cli("decode", src, "--workers", 0), 1, "decode", "--workers 0", "1 or more")
