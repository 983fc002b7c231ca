"""Delta tables on an object store: a local S3-compatible server (moto, in its own
process) takes the same batches as a local directory, through delta-rs's
``storage_options``; both end with the same rows, and a replay commits nothing."""

import os

import pytest

import pgoutput_fast
from pgoutput_fast.delta import apply_changeset, read_table
from pgoutput_fast.delta.reduce import _plain_type
from pgoutput_fast.framing import read_capture
from tests.support.captures import FIXTURES
from tests.support.s3 import s3  # noqa: F401  (the moto server's fixture)


@pytest.mark.parametrize("name", ["v1_text.pgoc", "v2_stream_binary.pgoc"])
def test_s3_tables_equal_local_ones(s3, tmp_path, name):
    lsns, msgs = read_capture(os.path.join(FIXTURES, name))
    binary = "binary" in name
    local, remote = str(tmp_path / "local"), f"s3://lake/{tmp_path.name}"
    dec_l, dec_r = pgoutput_fast.Decoder(), pgoutput_fast.Decoder()
    for i in range(0, len(msgs), 7):        # small batches: later ones read rows back
        apply_changeset(dec_l.feed(msgs[i:i + 7], lsns[i:i + 7]), local, binary=binary)
        apply_changeset(dec_r.feed(msgs[i:i + 7], lsns[i:i + 7]), remote, binary=binary,
                        storage_options=s3)
    again = apply_changeset(pgoutput_fast.Decoder().feed(msgs, lsns), remote, binary=binary,
                            storage_options=s3)
    assert again and all(r["skipped"] for r in again.values())
    for table in again:
        want = read_table(local, table)
        got = read_table(remote, table, s3)
        assert got.num_rows == want.num_rows, table
        if not want.column_names:        # a table without columns: its rows only
            continue
        key = [(c, "ascending") for c in want.column_names if not c.startswith("c_")][:3] \
            or [(want.column_names[0], "ascending")]
        got, want = got.sort_by(key), want.sort_by(key)
        for c in want.column_names:
            a, b = got.column(c), want.column(c)
            if not a.equals(b):   # NaN: the same as Python reprs (dates as their integers)
                plain = _plain_type(b.type)
                assert list(map(repr, a.cast(plain).to_pylist())) == \
                    list(map(repr, b.cast(plain).to_pylist())), (table, c)
