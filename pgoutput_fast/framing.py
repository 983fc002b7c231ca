"""Capture files: a simple framed format, and Parquet with a binary ``data`` column.

Framed format (``.pgoc``)::

    b"PGOFCAP1"                         8-byte magic
    then per message:  UInt64 lsn  UInt32 length  Byte(length) message
    (big-endian; lsn 0 where unknown)

``read_capture`` accepts either format, or a capture directory (``pgoutput-fast
capture``'s segments, read with ``pgoutput_fast.capture.read_segments``), and returns
``(lsns, messages)`` as lists (``arrow=True``: a numpy int64 array and a binary Arrow
array, zero copy from a Parquet file or the segments). Input it cannot use raises ``CaptureFileError`` (a
``UserError``: one line naming the file and what is wrong with it), a damaged framed
file ``DecodeError`` naming the file, a damaged capture directory ``SegmentError``.
"""

from __future__ import annotations

import os
import struct

from .errors import DecodeError, UserError

__all__ = ["MAGIC", "CaptureFileError", "write_framed", "read_framed", "read_capture",
           "iter_framed"]

_FORMATS = ("give a framed capture (.pgoc), a Parquet file with a binary 'data' column "
            "(and an optional integer 'lsn' column) or a capture directory")


class CaptureFileError(UserError, ValueError):
    """A capture file or directory that ``read_capture`` cannot use (its message names
    the file and what is wrong)."""

    exit_code = 1

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
    """``(lsns, messages)`` of a framed capture file. A damaged file raises
    ``DecodeError`` whose reason names the file."""
    with open(path, "rb") as f:
        data = f.read()
    lsns, msgs = [], []
    try:
        for lsn, m in iter_framed(data):
            lsns.append(lsn)
            msgs.append(m)
    except DecodeError as exc:
        raise DecodeError(f"{os.fspath(path)}: {exc.reason}, after {len(msgs)} complete "
                          "messages: the file is damaged or was cut short",
                          offset=exc.offset) from None
    return lsns, msgs


def _is_capture_directory(path) -> bool:
    """A directory written by ``pgoutput-fast capture``: its checkpoint, manifest or
    lock, or numbered segment files (``read_segments`` then says what is missing)."""
    names = os.listdir(path)
    return any(n in ("checkpoint.json", "manifest.jsonl", "capture.lock")
               or (n.endswith(".parquet") and n[:-8].isdigit()) for n in names)


def _read_directory(path, arrow=False):
    if not _is_capture_directory(path):
        raise CaptureFileError(f"{path} is a directory but not a capture directory (no "
                               f"checkpoint.json, manifest or segments): {_FORMATS}")
    from .capture import read_segments

    table = read_segments(path)
    return _columns(path, table, arrow)


def _columns(path, table, arrow=False):
    import pyarrow as pa

    data = table.column("data")
    if data.null_count:
        raise CaptureFileError(f"{path}: column 'data' has {data.null_count} null values: "
                               "every row must hold one pgoutput message")
    if arrow:
        import numpy as np

        if not (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type)):
            data = data.cast(pa.large_binary())
        if "lsn" in table.column_names:
            from .parallel import _lsn_numpy

            lsn = _lsn_numpy(table.column("lsn").cast(pa.int64())).astype(np.int64, copy=False)
        else:
            lsn = np.zeros(len(data), np.int64)
        return lsn, data
    msgs = data.to_pylist()
    if "lsn" in table.column_names:
        col = table.column("lsn")
        if col.null_count:
            col = col.fill_null(pa.scalar(0, col.type))
        lsns = [int(v) for v in col.to_pylist()]
    else:
        lsns = [0] * len(msgs)
    return lsns, msgs


def _read_parquet(path, arrow=False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .parquet_io import read_parquet

    arrow_errors = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
    try:
        schema = pq.read_schema(path)
    except arrow_errors as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureFileError(f"{path}: not a readable Parquet file ({reason}): the file is "
                               f"damaged or was cut short; {_FORMATS}") from exc
    names = schema.names
    if "data" not in names:
        raise CaptureFileError(f"{path}: the Parquet file has no 'data' column (columns: "
                               f"{', '.join(names[:10]) or 'none'}): {_FORMATS}")
    t = schema.field("data").type
    binary = (pa.types.is_binary(t) or pa.types.is_large_binary(t)
              or pa.types.is_fixed_size_binary(t)
              or (hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t)))
    if not binary:
        raise CaptureFileError(f"{path}: column 'data' is {t}, not binary: it must hold the "
                               "pgoutput messages as bytes (binary or large_binary)")
    columns = ["data"]
    if "lsn" in names:
        lt = schema.field("lsn").type
        if not pa.types.is_integer(lt):
            raise CaptureFileError(f"{path}: column 'lsn' is {lt}, not an integer: it must "
                                   "hold each message's LSN as a number (or be left out)")
        columns.append("lsn")
    try:
        table = read_parquet(path, columns)
    except arrow_errors as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CaptureFileError(f"{path}: the Parquet file cannot be read ({reason}): it is "
                               "damaged or was cut short") from exc
    return _columns(path, table, arrow)


def read_capture(path, storage_options=None, *, arrow=False):
    """Read a framed file, a Parquet file (binary ``data`` column, optional integer
    ``lsn``) or a capture directory; ``(lsns, messages)``: lists, or with ``arrow`` a
    numpy int64 array and a binary Arrow array (or ChunkedArray), as ``Decoder.feed``
    and ``decode_parallel`` take them. A URI (``s3://bucket/cdc``, ...) names a capture
    directory on that file system, read with ``storage_options``
    (``pgoutput_fast.storage``)."""
    from .storage import Store

    store, path = Store.of(path, storage_options)
    if not store.local:
        from .capture import read_segments

        return _columns(path, read_segments(path, storage_options=storage_options), arrow)
    if os.path.isdir(path):
        return _read_directory(path, arrow)
    with open(path, "rb") as f:
        head = f.read(8)
    if head == MAGIC:
        lsns, msgs = read_framed(path)
        if arrow:
            import numpy as np
            import pyarrow as pa

            return np.array(lsns, np.uint64).astype(np.int64), pa.array(msgs, pa.large_binary())
        return lsns, msgs
    if head[:4] == b"PAR1":
        return _read_parquet(path, arrow)
    what = "an empty file" if not head else "neither a framed capture (PGOFCAP1) nor a Parquet file"
    raise CaptureFileError(f"{path} is {what}: {_FORMATS}")
