# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The native core of pgoutput_fast, assembled from one file per concern:

    cursor.pxi         bounds-checked big-endian readers over const char*
    errors.pxi         DecodeError construction from cursor failures
    protocol.pxi       the protocol's bytes: message types (MSG_*), tuple markers
    messages.pxi       decode_message: one message -> message object (inspection path)
    builders.pxi       column builders in C memory, exported zero-copy to Arrow
    helper_thread.pxi  a second thread for a Decoder's change-event rows (helper threads)
    kind_numbers.pxi   value kinds K_* (GENERATED from pgoutput_fast/types.py)
    kinds.pxi          value kinds: builder layout and column of each kind
    values_text.pxi    text TupleData value -> typed column (no Python objects)
    values_binary.pxi  binary TupleData value -> typed column
    values_api.pxi     Python entry points to the value parsers (tests, tools)
    format_text.pxi    binary value -> PostgreSQL text form (change-event table)
    meta.pxi           message refs, transaction context, per-row metadata columns (Meta)
    map_builder.pxi    the change-event table's map<string,string> images (MapB)
    event_store.pxi    the change-event table's buffers (EvStore) and their appends
    typed_builders.pxi typed column builders per relation version (RelBuilders), export
    spool.pxi          pending transactions' raw messages (Spool), spilling to disk
    column_pass.pxi    the block writers' C loops: row-wise scan, block shape, column pass
    decoder_core.pxi   the stateful columnar decoder (DecoderCore)
    pending_txn.pxi    streamed / prepared / spooled transactions: check, keep, replay
    txn_window.pxi     windows of small transactions (and parts of large ones): typed rows
                       gathered per relation
    truncate_message.pxi  Truncate and Logical Message handling
    export.pxi         the change-event table's schema and export to Arrow
    message_batch.pxi  a feed()'s messages as a C array (MessageBatch)
    capture_loop.pxi   the capture's receive loop (libpq CopyData -> message columns)
    snapshot_copy.pxi  the initial snapshot's COPY rows -> Insert messages (CopyRows)
"""

cimport cython

import numpy as np
import pyarrow as pa

# (bound once: an export builds dozens of Arrow arrays per relation, and each call
# looked these up through pa's module dict and the class)
cdef object _pa_from_buffers = pa.Array.from_buffers
cdef object _pa_py_buffer = pa.py_buffer
cdef object _pa_ts_utc = pa.timestamp("us", tz="UTC")
cdef object _pa_list_str = pa.list_(pa.string())

include "cursor.pxi"
include "errors.pxi"
include "protocol.pxi"
include "messages.pxi"
include "builders.pxi"
include "helper_thread.pxi"
include "kind_numbers.pxi"
include "kinds.pxi"
include "values_text.pxi"
include "values_binary.pxi"
include "values_api.pxi"
include "format_text.pxi"
include "meta.pxi"
include "map_builder.pxi"
include "event_store.pxi"
include "typed_builders.pxi"
include "spool.pxi"
include "column_pass.pxi"
include "block_writers.pxi"
include "decoder_core.pxi"
include "pending_txn.pxi"
include "txn_window.pxi"
include "truncate_message.pxi"
include "export.pxi"
include "message_batch.pxi"
include "capture_loop.pxi"
include "snapshot_copy.pxi"
