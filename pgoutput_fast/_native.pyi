"""Type stub of the compiled core ``pgoutput_fast._native`` (built from ``src/*.pxi``).

tests/package/test_typing.py checks it against the built module with ``mypy.stubtest``: a
change to a ``def``, ``cdef class`` or ``cpdef`` in ``src/`` must be mirrored here.
Most code should use the package API (``pgoutput_fast.decode_message``,
``pgoutput_fast.Decoder``) rather than this module.
"""

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, final

import numpy.typing as npt
import pyarrow as pa
from typing_extensions import Buffer, TypeAlias

from .catalog import RelationCatalog, RelationVersion
from .errors import DecodeError as DecodeError
from .types import ColumnType

# One TupleData value for the value-parser entry points: None (SQL NULL) or
# (format, data) with format "t" (text) or "b" (binary).
_TupleValue: TypeAlias = tuple[str, Buffer] | None
# (message, lsn, commit_lsn, commit_ts, xid, origin): the fields of
# pgoutput_fast.LogicalMessageEvent.
_MessageEvent: TypeAlias = tuple[Any, int, int | None, int | None, int | None, str | None]

#: Schema of the change-event table (ChangeSet.events).
EVENT_SCHEMA: pa.Schema
#: Value kind numbers as compiled in (tests compare them with pgoutput_fast.types).
KIND_NUMBERS: dict[str, int]

# -- messages.pxi ----------------------------------------------------------------------

def decode_message(data: Buffer, *, in_stream: bool = False) -> Any:
    """Decode one pgoutput message (bytes-like, starting with its type byte).

    Returns one of the message classes of ``pgoutput_fast.messages`` (built at run time,
    hence ``Any`` here). Raises DecodeError on bad input.
    """

# -- builders.pxi ----------------------------------------------------------------------

def set_buffer_cache_limit(nbytes: int) -> None:
    """Bytes of released output buffers kept for reuse (0 disables; default 256 MiB)."""

def buffer_cache_info() -> dict[str, int]:
    """``{"blocks", "bytes", "limit", "fresh_blocks", "fresh_bytes", "grown_bytes",
    "evicted_blocks"}`` of the output buffer cache (the cumulative counters: output
    buffers given memory not from the cache, bytes copied by buffers growing, cached
    blocks freed oldest first to make room for newer ones)."""

class NativeBuffer:
    """malloc'd memory exposed through the buffer protocol (wrapped by pa.py_buffer)."""

# -- values_api.pxi / format_text.pxi -----------------------------------------------------

def kind_layouts() -> dict[int, tuple[int, int]]:
    """``{kind: (layout, fixed_width)}`` as the builders see them (for tests)."""

def parse_values(column_type: ColumnType, values: Iterable[_TupleValue]) -> tuple[pa.Array, list[int]]:
    """TupleData values of one column -> (Arrow array, rows with no Arrow form)."""

def bench_parse(column_type: ColumnType, values: Sequence[tuple[str, Buffer]], repeat: int = 1) -> tuple[float, int]:
    """Time the C parsers alone: (seconds, input bytes parsed). A tuning tool, not an API."""

def format_binary_values(column_type: ColumnType, values: Iterable[Buffer | None]) -> list[str | None]:
    """PostgreSQL text form of each binary value of one column (None stays None)."""

# -- decoder.pxi -------------------------------------------------------------------------

@final
class RelBuilders:
    """Typed column builders of one relation version (internal to DecoderCore)."""

    @property
    def version(self) -> RelationVersion: ...
    @property
    def id(self) -> int: ...

@final
class EvChunk:
    """Committed change-event rows held as written (an adopted spool's; internal to DecoderCore)."""

def _set_event_adopt_bytes(nbytes: int) -> int:
    """Bytes of event rows past which a committing spool is adopted whole (tests); returns the old value."""

def _set_txn_windows(on: bool) -> bool:
    """Windows of small transactions (and parts of large ones) on or off in this process (tests compare); returns the old setting."""

def _set_size_hints(on: bool) -> bool:
    """Process-wide size hints (typed builders, change events) on or off (tests compare); returns the old setting."""

def _set_helper_limits(feed_bytes: int, changes: int) -> tuple[int, int]:
    """Tests: the smallest feed and window or run a Decoder's helper thread takes."""

def _helper_stats() -> tuple[int, int, int, int]:
    """(helper threads started in this process, jobs run on them, windows whose last events the calling thread wrote, feeds that gave their helper back)."""

def _set_helper_guard(mode: int) -> int:
    """Tests: 1 a feed gives back a helper whose hand-overs gain nothing, 0 keeps it, 2 takes every hand-over as gaining nothing; returns the old setting."""

def _set_helper_share(share: float) -> float:
    """Tests: the calling thread's share of a window's events, fixed (-1: each Decoder's own); returns the old one."""

def _forget_helpers() -> None: ...

def _txn_windows_taken() -> int:
    """Windows of small transactions written in this process so far (tests)."""

def _txn_parts_taken() -> int:
    """Parts of large open transactions gathered per relation in this process so far (tests)."""

def _pending_parts_taken() -> int:
    """Parts of streamed, prepared or spooled transactions gathered so far (tests)."""

def _replay_parts_taken() -> int:
    """Parts of a spooled transaction's replay gathered so far (tests)."""

def _message_scan(offsets: Any, data: Any, first: int, n: int, large: bool,
                  depth: int = 0) -> tuple[bytearray, bytearray, int, bool]:
    """(types, rest, depth, simple) of messages first..first+n of a binary array: type bytes, at rest after each."""

@final
class Spool:
    """Raw messages of a pending (streamed, prepared, or spooled plain) transaction, spilling to disk."""

    origin: int
    xid: int | None
    gid: str | None
    prepare_end_lsn: int | None
    prepare_ts: int | None
    def size(self) -> int:
        """Bytes spooled (in memory and spilled)."""
    def chunks(self, chunk: int = ...) -> Iterator[bytes]: ...

@final
class DecoderCore:
    """Native decoder state machine; pgoutput_fast.Decoder is the API around it."""

    catalog: RelationCatalog
    want_events: bool
    want_tables: bool
    binary_unknown: bool
    max_pending_bytes: int
    spill_dir: str | os.PathLike[str] | None
    origins: list[str]
    names: list[str]
    threads: int
    def __init__(
        self,
        catalog: RelationCatalog,
        *,
        events: bool = True,
        tables: bool = True,
        binary_unknown: bool | None = None,
        max_pending_bytes: int = ...,
        spill_dir: str | os.PathLike[str] | None = None,
        threads: int | None = None,
    ) -> None: ...
    def feed(self, refs_owner: object, nrefs: int, refs_addr: int) -> None:
        """Decode ``nrefs`` messages of a MsgRef array at ``refs_addr`` (MessageBatch.feed_into)."""
    def export(self) -> tuple[list[tuple[RelationVersion, pa.Table]], pa.Table | None, list[_MessageEvent]]:
        """(tables: [(RelationVersion, pa.Table)], events: pa.Table | None, messages)."""
    def _event_rows_held(self) -> dict[Any, int | None]:
        """{xid or GID: bytes of event rows its spool holds, None once dropped} (tests)."""
    def _typed_rows_held(self) -> dict[Any, int | None]:
        """{xid or GID: bytes of typed rows its spool holds, None once dropped} (tests)."""
    def pending_summary(self) -> dict[str, Any]:
        """What is held back: open streams and prepared transactions, the open B..C."""

class MessageBatch:
    """The messages of one feed() as a C array of (pointer, length, lsn), zero copy."""

    def __len__(self) -> int: ...
    def add(
        self,
        messages: pa.Array | pa.ChunkedArray | Iterable[Buffer],
        lsn: pa.Array | pa.ChunkedArray | npt.ArrayLike | None = None,
    ) -> None:
        """Binary Arrow messages (array or chunked) or bytes-likes, with optional LSNs."""
    def feed_into(self, core: DecoderCore) -> None: ...

# -- capture_loop.pxi ------------------------------------------------------------------

@final
class MessageColumns:
    """pgoutput messages as columns in C memory: payloads, end offsets, LSNs."""

    MESSAGE_OVERHEAD: int
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int:
        """Payload bytes held."""
    def lsn(self, i: int) -> int:
        """The LSN of message ``i``."""
    def message(self, i: int) -> bytes:
        """Message ``i`` as bytes."""
    def append(self, lsn: int, data: Buffer) -> None:
        """Append one message (any contiguous bytes-like)."""
    def extend_from(self, other: MessageColumns, start: int, stop: int) -> int:
        """Copy messages ``start:stop`` of ``other`` to the end; returns their payload bytes."""
    def fit(self, start: int, stop: int, max_cost: int) -> int:
        """The end of the longest run from ``start`` within ``max_cost`` (at least one message)."""
    def clear(self) -> None:
        """Forget the messages (the memory is kept for the next ones)."""
    def take_arrays(self, first_ordinal: int) -> list[pa.Array]:
        """``[lsn, data, ordinal]`` Arrow arrays of the messages; leaves this empty."""

@final
class CopyReader:
    """The capture's receive loop over one PGconn in COPY BOTH mode (libpq functions
    passed by address: see pgoutput_fast/capture/stream.py)."""

    EMPTY: int
    BUDGET: int
    REPLY: int
    END: int
    ERROR: int
    INSIDE_TYPES: bytes
    def __init__(self, pgconn: int, PQgetCopyData: int, PQfreemem: int,
                 PQconsumeInput: int) -> None: ...
    @property
    def wal_end(self) -> int:
        """The highest walEnd of an XLogData or keepalive so far."""
    @property
    def keepalives(self) -> int: ...
    def detach(self) -> None:
        """Forget the connection (it is closed): ``fill`` raises from now on."""
    def fill(self, batch: MessageColumns, ctrl: list[int], max_bytes: int) -> int:
        """Read into ``batch`` (control-message indices into ``ctrl``); one of the constants."""

@final
class CopyRows:
    """One ``COPY ... TO STDOUT`` on a connection, its rows as Insert messages (the
    initial snapshot; libpq functions passed by address: pgoutput_fast/capture/snapshot.py)."""

    rows: int
    copy_bytes: int
    def __init__(self, pgconn: int, functions: dict[str, int], relid: int, fmts: bytes,
                 binary: bool) -> None: ...
    def detach(self) -> None: ...
    def start(self, sql: bytes) -> None:
        """Send the COPY and wait for the server to start it."""
    def fill(self, out: MessageColumns, max_bytes: int) -> int:
        """Append rows until ``max_bytes`` more message bytes are in ``out`` (1) or the
        COPY ended (0)."""
