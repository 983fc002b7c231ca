"""Capture files: a simple framed format, and Parquet with a binary ``data`` column.

Framed format (``.pgoc``)::

    b"PGOFCAP1"                         8-byte magic
    then per message:  UInt64 lsn  UInt32 length  Byte(length) message
    (big-endian; lsn 0 where unknown)

``read_capture`` accepts either format and returns ``(lsns, messages)`` as lists.
"""

from __future__ import annotations

import os
import struct

from .errors import DecodeError

__all__ = ["MAGIC", "write_framed", "read_framed", "read_capture", "iter_framed"]

MAGIC = b"PGOFCAP1"
_HEAD = struct.Struct(">QI")


def write_framed(path, messages, lsns=None) -> None:
    """Write messages (bytes-like) with optional LSNs to a framed capture file."""
    with open(path, "wb") as f:
        f.write(MAGIC)
        for i, m in enumerate(messages):
            m = bytes(m)
            f.write(_HEAD.pack(0 if lsns is None else int(lsns[i]), len(m)))
            f.write(m)


def iter_framed(data: bytes):
    """Yield ``(lsn, message_bytes)`` from the bytes of a framed capture file."""
    if data[:8] != MAGIC:
        raise DecodeError("not a framed capture file (bad magic)", offset=0)
    pos, n = 8, len(data)
    while pos < n:
        if n - pos < _HEAD.size:
            raise DecodeError("truncated frame header", offset=pos)
        lsn, length = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        if length > n - pos:
            raise DecodeError(f"frame length {length} runs past the end of the file", offset=pos)
        yield lsn, data[pos : pos + length]
        pos += length


def read_framed(path):
    with open(path, "rb") as f:
        data = f.read()
    lsns, msgs = [], []
    for lsn, m in iter_framed(data):
        lsns.append(lsn)
        msgs.append(m)
    return lsns, msgs


def read_capture(path):
    """Read a framed file or a Parquet file (binary ``data`` column, optional ``lsn``)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(8)
    if head == MAGIC:
        return read_framed(path)
    if head[:4] == b"PAR1" or os.path.isdir(path):
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        if "data" not in table.column_names:
            raise ValueError(f"{path}: Parquet capture needs a binary 'data' column")
        msgs = table.column("data").to_pylist()
        if "lsn" in table.column_names:
            lsns = [0 if v is None else int(v) for v in table.column("lsn").to_pylist()]
        else:
            lsns = [0] * len(msgs)
        return lsns, msgs
    raise ValueError(f"{path}: neither a framed capture (PGOFCAP1) nor a Parquet file")
