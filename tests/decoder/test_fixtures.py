"""Real PostgreSQL captures (tests/fixtures, made by make_fixtures.py) decode fully,
identically in the native and the reference implementation, and every truncation of a
real message is a DecodeError."""

import json
import os

import pytest

import pgoutput_fast
from pgoutput_fast import DecodeError, StreamStart, StreamStop, MESSAGE_TYPES
from pgoutput_fast import _reference
from tests.support.captures import FIXTURES, FIXTURE_NAMES, load_fixture

native = pytest.importorskip("pgoutput_fast._native") if pgoutput_fast.IMPL == "python" else pgoutput_fast._impl


def decode_stream(decode, msgs):
    out, in_stream = [], False
    for m in msgs:
        msg = decode(m, in_stream=in_stream)
        if isinstance(msg, StreamStart):
            in_stream = True
        elif isinstance(msg, StreamStop):
            in_stream = False
        out.append(msg)
    return out


def test_fixtures_present():
    assert len(FIXTURE_NAMES) >= 6


def test_all_message_types_covered():
    seen = set()
    for name in FIXTURE_NAMES:
        _, msgs = load_fixture(name)
        seen |= {chr(m[0]) for m in msgs}
    assert seen == set(MESSAGE_TYPES), f"missing: {set(MESSAGE_TYPES) - seen}"


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_decodes_and_implementations_agree(name):
    _, msgs = load_fixture(name)
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        meta = json.load(f)
    got = decode_stream(pgoutput_fast.decode_message, msgs)
    ref = decode_stream(_reference.decode_message, msgs)
    nat = decode_stream(native.decode_message, msgs)
    assert got == ref == nat
    assert len(got) == len(msgs)
    # each decoded object re-encodes to the exact bytes PostgreSQL sent
    for m, obj in zip(msgs, got):
        assert pgoutput_fast.encode_message(obj) == bytes(m)
    kinds = sorted({type(o).type_byte for o in got})
    assert set(kinds) == set(meta["message_types"])


def _offsets(n):
    if n <= 2048:
        return range(n)
    return sorted(set(range(0, 256)) | set(range(n - 256, n)) | set(range(0, n, 97)))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_truncation_native_every_offset(name):
    _, msgs = load_fixture(name)
    in_stream = False
    for m in msgs:
        m = bytes(m)
        full = native.decode_message(m, in_stream=in_stream)
        for cut in _offsets(len(m)):
            try:
                native.decode_message(m[:cut], in_stream=in_stream)
            except DecodeError as exc:
                assert exc.offset is not None and 0 <= exc.offset <= cut
            else:
                # a 25-byte parallel-mode Stream Abort cut to 9 bytes is the valid short form
                assert type(full).__name__ == "StreamAbort" and cut == 9, (name, m[:1], cut)
        if isinstance(full, StreamStart):
            in_stream = True
        elif isinstance(full, StreamStop):
            in_stream = False


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_truncation_reference_agrees(name):
    """Reference and native report the same offset and type for truncated real messages."""
    _, msgs = load_fixture(name)
    step = max(1, len(msgs) // 60)
    in_stream = False
    for i, m in enumerate(msgs):
        m = bytes(m)
        full = native.decode_message(m, in_stream=in_stream)
        if i % step == 0 and len(m) <= 4096:
            for cut in range(0, len(m), max(1, len(m) // 200)):
                errs = []
                for dec in (native.decode_message, _reference.decode_message):
                    try:
                        dec(m[:cut], in_stream=in_stream)
                        errs.append(None)
                    except DecodeError as exc:
                        errs.append((exc.offset, exc.message_type))
                assert errs[0] == errs[1], (name, i, cut)
        if isinstance(full, StreamStart):
            in_stream = True
        elif isinstance(full, StreamStop):
            in_stream = False
