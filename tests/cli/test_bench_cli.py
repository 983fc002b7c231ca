"""``pgoutput-fast bench`` end to end on a small corpus captured from a private server."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.postgres
def test_bench_command_small_corpus(tmp_path):
    out = tmp_path / "bench.json"
    # bench measures the native implementation (and the reference on a slice) whatever
    # implementation this test run uses
    env = {**os.environ, "PGOUTPUT_FAST_CORPUS": str(tmp_path / "corpus"), "PGOUTPUT_FAST_IMPL": "native"}
    proc = subprocess.run(
        [sys.executable, "-m", "pgoutput_fast", "bench", "--rows", "3000", "--repeat", "1",
         "--slice", "500", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for w in ("narrow/text", "narrow/binary", "wide/text", "wide/binary", "toast/text",
              "toast/binary", "stream/text", "stream/binary"):
        assert f"{w:15s} typed (Decoder)" in text, text
    assert "cannot decode binary mode" in text or "not installed" in text
    data = json.loads(out.read_text())
    by = {(r["workload"], r["mode"]): r for r in data["results"]}
    # narrow: 3000 inserts, a third updated, a sixth deleted; wide: a fifth of the rows
    assert by[("narrow", "text")]["rows"] == 3000 + 1000 + 500
    assert by[("wide", "binary")]["rows"] == 1000
    # toast: 100 rows inserted, all updated (the 4 KiB value unchanged), a quarter rewritten
    assert by[("toast", "text")]["rows"] == by[("toast", "binary")]["rows"] == 100 + 100 + 25
    # stream: 1000 committed inserts; the rows of the rolled-back savepoint are not among them
    assert by[("stream", "text")]["rows"] == by[("stream", "binary")]["rows"] == 1000
    assert "cannot decode streamed transactions" in text or "not installed" in text
    for r in data["results"]:
        assert r["typed_s"] > 0 and r["bytes"] > 0 and r["peak_extra_bytes"] is not None
    # the workloads are what they claim to be (checked on the captured bytes)
    from pgoutput_fast import UNCHANGED_TOAST, decode_message
    from pgoutput_fast.framing import read_capture

    for mode in ("text", "binary"):
        _, toast = read_capture(tmp_path / "corpus" / f"toast-{mode}-3000.pgoc")
        updates = [decode_message(m) for m in toast if m[:1] == b"U"]
        assert sum(u.new[2] is UNCHANGED_TOAST for u in updates) == 100
        assert max(len(m) for m in toast) > 4096
        _, stream = read_capture(tmp_path / "corpus" / f"stream-{mode}-3000.pgoc")
        kinds = [m[:1] for m in stream]
        assert b"B" not in kinds and b"C" not in kinds
        assert kinds.count(b"S") > 1 and kinds.count(b"c") == 1
        # the savepoint's rollback arrives as a Stream Abort of a subtransaction
        aborts = [decode_message(m) for m in stream if m[:1] == b"A"]
        assert aborts and all(a.xid != a.subxid for a in aborts)
