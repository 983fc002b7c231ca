"""The capture-directory reader on an object store: a directory written locally
(``write_capture``) and copied to a local S3-compatible server (moto) reads the same
from its ``s3://`` URI, with every check in force: an altered, truncated or missing
object raises ``SegmentError`` naming its URI; an unreachable endpoint is one line
without the secret."""

from __future__ import annotations

import pickle

import pyarrow.fs as pafs
import pytest

from pgoutput_fast import capture
from pgoutput_fast.capture import SegmentError
from pgoutput_fast.storage import StorageError
from tests.support.s3 import BUCKET, s3, s3_filesystem, upload_dir  # noqa: F401
from tests.support.segdirs import write_fixture_dir

NAMES = ["v1_text", "v2_stream_binary"]


@pytest.fixture(scope="module")
def dirs(s3, tmp_path_factory):  # noqa: F811
    """{name: (local directory, s3 URI)} of the fixture captures."""
    out = {}
    for name in NAMES:
        local = write_fixture_dir(tmp_path_factory.mktemp(name) / "cdc", name)
        out[name] = (local, upload_dir(s3, local, f"good/{name}"))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_s3_reads_equal_local_ones(s3, dirs, name):  # noqa: F811
    local, uri = dirs[name]
    want = list(capture.iter_segments(local))
    got = list(capture.iter_segments(uri, storage_options=s3))
    assert len(got) == len(want) > 1
    assert all(g.equals(w) for g, w in zip(got, want))
    assert capture.read_segments(uri, storage_options=s3).equals(capture.read_segments(local))
    assert capture.load_state(uri, storage_options=s3).to_json() == \
        capture.load_state(local).to_json()
    entries = capture.segment_entries(uri, storage_options=s3)
    assert entries[0].path == f"{uri}/0000000001.parquet"
    # an explicit pyarrow file system with the path inside it
    fs_entries = capture.segment_entries(f"{BUCKET}/good/{name}", filesystem=s3_filesystem(s3))
    assert [e.sha256 for e in fs_entries] == [e.sha256 for e in entries]
    assert capture.read_segment(fs_entries[-1]).equals(want[-1])
    # what a Spark task gets: the entry pickles with what reopens the bucket, and
    # shows no secret
    again = pickle.loads(pickle.dumps(entries[1]))
    assert capture.read_segment(again).equals(want[1])
    assert "test" not in repr(again).replace(uri, "")


def test_file_uri_is_a_local_path(dirs):
    local, _ = dirs["v1_text"]
    assert capture.read_segments("file://" + local).equals(capture.read_segments(local))


def _copy_with(s3, name, dirs, damage):  # noqa: F811
    """The directory of ``name`` under a fresh prefix, ``damage(fs, prefix)`` applied."""
    local, _ = dirs[name]
    prefix = f"bad/{damage.__name__}"
    uri = upload_dir(s3, local, prefix)
    damage(s3_filesystem(s3), f"{BUCKET}/{prefix}")
    return uri


def _altered_byte(fs, prefix):
    p = f"{prefix}/0000000002.parquet"
    with fs.open_input_stream(p) as f:
        raw = bytearray(f.read())
    raw[len(raw) // 2] ^= 0x01
    with fs.open_output_stream(p) as f:
        f.write(bytes(raw))


def _truncated(fs, prefix):
    p = f"{prefix}/0000000002.parquet"
    with fs.open_input_stream(p) as f:
        raw = f.read()
    with fs.open_output_stream(p) as f:
        f.write(raw[:-100])


def _missing(fs, prefix):
    fs.delete_file(f"{prefix}/0000000002.parquet")


def _missing_last(fs, prefix):
    infos = fs.get_file_info(pafs.FileSelector(prefix))
    last = max(i.path for i in infos if i.path.endswith(".parquet"))
    fs.delete_file(last)


def _replace_in(fs, path, old, new):
    with fs.open_input_stream(path) as f:
        raw = f.read()
    with fs.open_output_stream(path) as f:
        f.write(raw.replace(old, new, 1))


def _manifest_altered(fs, prefix):
    _replace_in(fs, f"{prefix}/manifest.jsonl", b'"messages":', b'"messages": ')


def _checkpoint_altered(fs, prefix):
    _replace_in(fs, f"{prefix}/checkpoint.json", b'"last_segment": ', b'"last_segment": 1')


def _checkpoint_missing(fs, prefix):
    fs.delete_file(f"{prefix}/checkpoint.json")


@pytest.mark.parametrize("damage, names, words", [
    (_altered_byte, "0000000002.parquet", "SHA-256 does not match"),
    (_truncated, "0000000002.parquet", "truncated or replaced"),
    (_missing, "0000000002.parquet", "missing (the manifest lists it)"),
    (_missing_last, ".parquet", "missing (the manifest lists it)"),
    (_manifest_altered, "manifest.jsonl", ""),
    (_checkpoint_altered, "checkpoint.json", "checkpoint is damaged"),
    (_checkpoint_missing, "", "holds segments but no checkpoint.json"),
], ids=lambda v: v.__name__ if callable(v) else None)
def test_damage_on_s3_is_detected(s3, dirs, damage, names, words):  # noqa: F811
    uri = _copy_with(s3, "v1_text", dirs, damage)
    with pytest.raises(SegmentError) as ei:
        list(capture.iter_segments(uri, storage_options=s3))
    msg = str(ei.value)
    assert msg.startswith(uri), msg
    assert names in msg and words in msg, msg


def test_no_such_prefix(s3):  # noqa: F811
    with pytest.raises(SegmentError, match=r"^s3://lake/nothing/here: not a capture directory "
                                           r"\(no such directory\)$"):
        capture.segment_entries("s3://lake/nothing/here", storage_options=s3)


def test_unreachable_endpoint_is_one_line_without_secret(capsys):
    opts = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "AKIDNOTSHOWN",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t-NOT-SHOWN", "AWS_REGION": "us-east-1"}
    with pytest.raises(StorageError) as ei:
        capture.segment_entries("s3://lake/cdc", storage_options=opts)
    msg = str(ei.value)
    assert msg.startswith("s3://lake/cdc: cannot read it:") and "\n" not in msg, msg
    assert "s3cr3t" not in msg

    from pgoutput_fast.cli import main

    args = [f"--storage-option={k}={v}" for k, v in opts.items()]
    assert main(["decode", "s3://lake/cdc", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pgoutput-fast decode: s3://lake/cdc: cannot read it:"), err
    assert err.count("\n") == 1 and "Traceback" not in err and "s3cr3t" not in err, err


def test_cli_decode_reads_a_bucket(s3, dirs, capsys, monkeypatch):  # noqa: F811
    from pgoutput_fast.cli import main

    local, uri = dirs["v2_stream_binary"]
    assert main(["decode", local]) == 0
    want = capsys.readouterr().out.splitlines()[1:]      # the first line has the time
    # credentials from the environment, as delta-rs takes them
    for k, v in s3.items():
        monkeypatch.setenv(k, v)
    assert main(["decode", uri]) == 0
    got = capsys.readouterr().out.splitlines()[1:]
    assert got == want and got
