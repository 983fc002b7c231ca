"""The capture's message columns in plain Python: the twin of ``MessageColumns`` in
``src/capture_loop.pxi``, filled by the ctypes receive loop (``PGOUTPUT_FAST_IMPL=python``,
or ``ReplicationStream(native_loop=False)``): lists of LSNs and bytes, exported to
Arrow per chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["MessageColumns"]


class MessageColumns:
    """pgoutput messages as two lists: ``lsns`` (XLogData dataStart) and ``datas``."""

    #: what one message costs beyond its payload (bytes object, int, list slots)
    MESSAGE_OVERHEAD = 120

    __slots__ = ("lsns", "datas")

    def __init__(self):
        self.lsns: list = []
        self.datas: list = []

    def __len__(self) -> int:
        return len(self.datas)

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.datas))

    def lsn(self, i: int) -> int:
        return self.lsns[i]

    def message(self, i: int) -> bytes:
        return self.datas[i]

    def append(self, lsn: int, data) -> None:
        self.lsns.append(lsn)
        self.datas.append(bytes(data))

    def extend_from(self, other: "MessageColumns", start: int, stop: int) -> int:
        if not 0 <= start <= stop <= len(other):
            raise IndexError(f"extend_from({start}, {stop}) of {len(other)} messages")
        if other is self:
            raise ValueError("extend_from: the source is the target")
        run = other.datas[start:stop]
        self.lsns.extend(other.lsns[start:stop])
        self.datas.extend(run)
        return sum(map(len, run))

    def fit(self, start: int, stop: int, max_cost: int) -> int:
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"fit({start}, {stop}) of {len(self)} messages")
        if start == stop:
            return stop
        cost = 0
        datas, overhead = self.datas, self.MESSAGE_OVERHEAD
        for j in range(start, stop):
            cost += len(datas[j]) + overhead
            if cost > max_cost and j > start:
                return j
        return stop

    def clear(self) -> None:
        self.lsns.clear()
        self.datas.clear()

    def take_arrays(self, first_ordinal: int) -> list:
        """``[lsn, data, ordinal]``, built from buffers: ``pa.array`` (on a list or a
        NumPy array) imports pandas when it is installed, which costs a capture ~60 MiB
        of memory and most of a second."""
        lsns, datas = self.lsns, self.datas
        self.lsns, self.datas = [], []
        n = len(datas)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter(map(len, datas), np.int64, n), out=offsets[1:])
        if offsets[-1] < 2**31 - 1:
            offsets = offsets.astype(np.int32)
            dtype = pa.binary()
        else:
            dtype = pa.large_binary()
        data = pa.Array.from_buffers(dtype, n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(datas))])
        del datas
        if dtype != pa.binary():
            data = data.cast(pa.binary())   # raises if the values do not fit: never for a chunk
        return [_int64_array(np.array(lsns, np.uint64).view(np.int64)), data,
                _int64_array(np.arange(first_ordinal, first_ordinal + n, dtype=np.int64))]


def _int64_array(values) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
