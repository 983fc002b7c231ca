"""Pure-Python reference implementation (the oracle the native core is tested against).

Selected with ``PGOUTPUT_FAST_IMPL=python``. Same API and results as
``pgoutput_fast._native``, including the offset and message type of every
``DecodeError``.
"""

from .decode import decode_message
from .decoder import DecoderCore, MessageBatch, EVENT_SCHEMA


def _message_scan(offsets, data, first: int, n: int, large: bool, depth: int = 0):
    """(types, rest, depth, simple) of messages first..first+n of a binary array, from its
    offsets and data buffers (as _native._message_scan)."""
    import struct

    w = 8 if large else 4
    off = memoryview(offsets).cast("B")
    if first < 0 or n < 0 or (first + n + 1) * w > len(off):
        raise ValueError("the offsets buffer is shorter than the array")
    d = memoryview(data).cast("B") if data is not None else memoryview(b"")
    fmt = "<q" if large else "<i"
    control = set(b"SEcAbPpKr")
    types, rest, simple = bytearray(n), bytearray(n), True
    for k in range(n):
        a = struct.unpack_from(fmt, off, (first + k) * w)[0]
        b = struct.unpack_from(fmt, off, (first + k + 1) * w)[0]
        t = d[a] if b > a and 0 <= a < len(d) else 0
        types[k] = t
        if t == ord("B"):
            depth += 1
        elif t == ord("C"):
            depth -= 1
        elif t in control:
            simple = False
        rest[k] = depth == 0
    return types, rest, depth, simple


__all__ = ["decode_message", "DecoderCore", "MessageBatch", "EVENT_SCHEMA", "_message_scan"]
