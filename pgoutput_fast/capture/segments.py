"""Reading a capture directory, verified; and writing one outside a live capture.

Every reader here checks, before it hands a row out: the checkpoint's checksum, the
manifest's hash chain up to the segments the checkpoint vouches for, and for each
segment its size, SHA-256, Parquet page checksums and ordinals (the first one where
the manifest says, one more per row, contiguous from 0). A missing, truncated,
reordered or altered segment, the last one included, raises ``SegmentError`` naming
the file. ``store.py`` describes the layout.

The directory may be a local path or a URI (``s3://bucket/prefix``, ``gs://``,
``abfss://``, ``hdfs://``, ``file://``) with ``storage_options`` (delta-rs's keys) or
an explicit ``filesystem`` (a ``pyarrow.fs.FileSystem``): ``pgoutput_fast.storage``.
Every check above holds there too; a ``SegmentEntry`` of a URI directory carries the
URI of its object and what reopens the file system (for a Spark task).
"""

from __future__ import annotations

import hashlib
import os

import pyarrow as pa

from ..storage import Store
from .errors import SegmentError
from .state import CaptureState
from .store import (CHECKPOINT, MANIFEST, SEGMENT_SCHEMA, SegmentEntry, legacy_entries,
                    new_capture_id, read_checkpoint, read_manifest)

__all__ = ["SEGMENT_SCHEMA", "segment_entries", "segment_paths", "read_segment",
           "iter_segments", "read_segments", "load_state", "write_capture", "CHECKPOINT"]


def load_state(directory, *, storage_options=None, filesystem=None) -> CaptureState | None:
    """The checkpoint of a capture directory (verified), or None when it has none."""
    store, directory = Store.of(directory, storage_options, filesystem)
    return read_checkpoint(directory, store)


def _open(directory, storage_options=None, filesystem=None) -> tuple[CaptureState, list]:
    store, directory = Store.of(directory, storage_options, filesystem)
    if not store.isdir(directory):
        raise SegmentError(f"{directory}: not a capture directory (no such directory)")
    state = read_checkpoint(directory, store)
    if state is None:
        names = store.listdir(directory)
        what = ("holds segments but no checkpoint.json (it was deleted, or this is not the "
                "directory capture wrote)" if any(n.endswith(".parquet") for n in names)
                else "is not a capture directory (no checkpoint.json)")
        raise SegmentError(f"{directory}: {what}")
    if state.snapshot is not None and state.snapshot.get("state") != "done":
        # the initial snapshot is still being copied (or was cut short): no segment is
        # readable before the whole snapshot is durable
        return state, []
    if state.format == 1:
        return state, legacy_entries(directory, state, store)
    entries, _tail = read_manifest(directory, state, store)
    return state, entries


def _store(entry) -> Store:
    from ..storage import LOCAL

    return entry.store if entry.store is not None else LOCAL


def segment_entries(directory, *, storage_options=None, filesystem=None) -> list:
    """The durable segments of a capture directory, in order, as ``SegmentEntry``s
    (path, size, SHA-256, first ordinal, message count), from the verified manifest.
    Each listed file must exist with its size."""
    _state, entries = _open(directory, storage_options, filesystem)
    for e in entries:
        try:
            size = _store(e).size(e.path)
        except FileNotFoundError:
            raise SegmentError(f"{e.path}: missing (the manifest lists it)") from None
        if e.bytes is not None and size != e.bytes:
            raise SegmentError(f"{e.path}: {size} bytes, the manifest says {e.bytes} "
                               "(truncated or replaced)")
    return entries


def segment_paths(directory, *, storage_options=None, filesystem=None) -> list:
    """The paths (or URIs) of the durable segments of a capture directory, in order."""
    return [e.path for e in segment_entries(directory, storage_options=storage_options,
                                            filesystem=filesystem)]


def read_segment(entry: SegmentEntry, columns=("lsn", "data", "ordinal"),
                 expect_ordinal: int | None = None) -> pa.Table:
    """One segment, verified against its manifest entry: size and SHA-256 of the file,
    Parquet page checksums, the message count and the ordinals (``expect_ordinal``: the
    first one a sequential reader expects, for a legacy directory)."""
    from ..parquet_io import read_parquet

    path = entry.path
    try:
        raw = _store(entry).read_bytes(path)
    except FileNotFoundError:
        raise SegmentError(f"{path}: missing (the manifest lists it)") from None
    if entry.bytes is not None and len(raw) != entry.bytes:
        raise SegmentError(f"{path}: {len(raw)} bytes, the manifest says {entry.bytes} "
                           "(truncated or replaced)")
    if entry.sha256 is not None and hashlib.sha256(raw).hexdigest() != entry.sha256:
        raise SegmentError(f"{path}: its SHA-256 does not match the manifest (the file was "
                           "altered or damaged)")
    want = list(columns)
    read_cols = want if "ordinal" in want else want + ["ordinal"]
    try:
        table = read_parquet(pa.BufferReader(raw), read_cols, verify_checksums=True)
    except (OSError, pa.ArrowException) as exc:
        raise SegmentError(f"{path}: not a readable segment ({exc})") from None
    for name in read_cols:
        if table.schema.field(name).type != SEGMENT_SCHEMA.field(name).type:
            raise SegmentError(f"{path}: column {name!r} is {table.schema.field(name).type}, "
                               f"a segment's is {SEGMENT_SCHEMA.field(name).type}")
    first = entry.first_ordinal if entry.first_ordinal is not None else expect_ordinal
    if entry.messages is not None and table.num_rows != entry.messages:
        raise SegmentError(f"{path}: {table.num_rows} messages, the manifest says {entry.messages}")
    if table.num_rows:
        import numpy as np

        ords = table.column("ordinal").to_numpy()
        if first is not None and (int(ords[0]) != first
                                  or not np.array_equal(ords, np.arange(first, first + len(ords)))):
            raise SegmentError(f"{path}: its ordinals do not run from {first} one by one "
                               "(a segment out of order or altered)")
    if read_cols != want:
        table = table.select(want)
    return table


def iter_segments(directory, columns=("lsn", "data", "ordinal"), *, storage_options=None,
                  filesystem=None):
    """Yield one ``pa.Table`` per durable segment, in order, each verified. Feed them,
    in this order, to one ``pgoutput_fast.Decoder`` (a streamed or prepared transaction
    can span segments)."""
    expect = 0
    for entry in segment_entries(directory, storage_options=storage_options,
                                 filesystem=filesystem):
        if entry.first_ordinal is not None and entry.first_ordinal != expect:
            raise SegmentError(f"{entry.path}: starts at ordinal {entry.first_ordinal}, "
                               f"expected {expect} (a segment is missing or out of order)")
        table = read_segment(entry, columns, expect_ordinal=expect)
        expect += table.num_rows
        yield table


def read_segments(directory, columns=("lsn", "data", "ordinal"), *, storage_options=None,
                  filesystem=None) -> pa.Table:
    """All durable segments of a capture directory as one table, in order, verified."""
    tables = list(iter_segments(directory, columns, storage_options=storage_options,
                                filesystem=filesystem))
    if not tables:
        return SEGMENT_SCHEMA.empty_table().select(list(columns))
    return pa.concat_tables(tables)


def write_capture(directory, segments, options: dict, *, file_mode=0o600,
                  compression="zstd") -> CaptureState:
    """Write a complete capture directory outside a live capture (tools, the demo's
    bundled capture, benchmarks): ``segments`` is an iterable of ``pa.Table`` (or
    arrays) with ``SEGMENT_SCHEMA``'s columns, each cut at a transaction boundary, in
    order. The directory must be new or empty. Returns the final state."""
    from .store import DirectoryWriter, dir_mode, write_checkpoint

    directory = os.fspath(directory)
    os.makedirs(directory, mode=dir_mode(file_mode), exist_ok=True)
    if os.listdir(directory):
        raise SegmentError(f"{directory}: not empty; write_capture writes a new directory")
    state = CaptureState()
    state.capture_id = new_capture_id()
    state.options = dict(options)
    write_checkpoint(directory, state, file_mode)
    w = DirectoryWriter(directory, state, file_mode=file_mode, compression=compression,
                        metadata={"options": dict(options)})
    seq = 0
    for seg in segments:
        table = seg if isinstance(seg, pa.Table) else pa.table(list(seg), schema=SEGMENT_SCHEMA)
        table = table.cast(SEGMENT_SCHEMA)
        seq += 1
        w.begin(seq)
        w.write([table.column(i).combine_chunks() for i in range(3)])
        state.next_ordinal += table.num_rows
        state = w.commit(state)
    return state


__all__ += ["MANIFEST"]
