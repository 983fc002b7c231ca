# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The native core of pgoutput_fast, assembled from one file per concern:

    cursor.pxi         bounds-checked big-endian readers over const char*
    errors.pxi         DecodeError construction from cursor failures
    messages.pxi       decode_message: one message -> message object (inspection path)
    builders.pxi       column builders in C memory, exported zero-copy to Arrow
    kinds.pxi          value kinds (mirror of pgoutput_fast/types.py)
    values_text.pxi    text TupleData value -> typed column (no Python objects)
    values_binary.pxi  binary TupleData value -> typed column
    values_api.pxi     Python entry points to the value parsers (tests, tools)
    format_text.pxi    binary value -> PostgreSQL text form (change-event table)
    decoder.pxi        the stateful columnar decoder core
    capture_loop.pxi   the capture's receive loop (libpq CopyData -> message columns)
"""

cimport cython

import numpy as np
import pyarrow as pa

include "cursor.pxi"
include "errors.pxi"
include "messages.pxi"
include "builders.pxi"
include "kinds.pxi"
include "values_text.pxi"
include "values_binary.pxi"
include "values_api.pxi"
include "format_text.pxi"
include "decoder.pxi"
include "capture_loop.pxi"
