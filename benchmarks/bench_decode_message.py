"""decode_message (message objects): native vs the pure-Python reference, on real captures."""

import pytest

from pgoutput_fast import StreamStart, StreamStop, _native, _reference
from benchutil import record
from tests.support.captures import FIXTURE_NAMES, load_fixture


def _messages():
    out = []
    for name in FIXTURE_NAMES:
        _, msgs = load_fixture(name)
        in_stream = False
        for m in msgs:
            m = bytes(m)
            obj = _native.decode_message(m, in_stream=in_stream)
            out.append((m, in_stream))
            if isinstance(obj, StreamStart):
                in_stream = True
            elif isinstance(obj, StreamStop):
                in_stream = False
    return out


MESSAGES = _messages()
NBYTES = sum(len(m) for m, _ in MESSAGES)


def _run(decode):
    for m, s in MESSAGES:
        decode(m, in_stream=s)


@pytest.mark.benchmark(group="decode_message")
def test_decode_message_native(benchmark):
    benchmark(_run, _native.decode_message)
    record(benchmark, "decode_message/native", bytes=NBYTES, messages=len(MESSAGES))
    from benchutil import RESULTS
    RESULTS["decode_message/native"]["baseline"] = "decode_message/reference"


@pytest.mark.benchmark(group="decode_message")
def test_decode_message_reference(benchmark):
    benchmark.pedantic(_run, args=(_reference.decode_message,), rounds=3, iterations=1)
    record(benchmark, "decode_message/reference", bytes=NBYTES, messages=len(MESSAGES))
