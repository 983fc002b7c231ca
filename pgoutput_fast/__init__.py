"""pgoutput_fast: a fast, complete decoder for PostgreSQL's pgoutput logical replication stream.

The implementation is chosen once, at import, by ``PGOUTPUT_FAST_IMPL``:

* ``native`` (default): the compiled Cython core ``pgoutput_fast._native``. If it is
  missing the import fails loudly; there is no silent fallback.
* ``python``: the pure-Python reference twin (same API and results, much slower), used as
  the oracle in tests.
"""

from __future__ import annotations

import os as _os

from ._version import __version__
from .errors import DecodeError
from .lsn import format_lsn, parse_lsn, pg_timestamp_to_datetime, datetime_to_pg_timestamp
from .messages import (
    UNCHANGED_TOAST,
    Value,
    RelationColumn,
    Message,
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    LogicalMessage,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
    BeginPrepare,
    Prepare,
    CommitPrepared,
    RollbackPrepared,
    StreamPrepare,
    MESSAGE_TYPES,
)
from .encode import encode_message

IMPL = _os.environ.get("PGOUTPUT_FAST_IMPL", "native").strip().lower() or "native"

if IMPL == "native":
    try:
        from . import _native as _impl
    except ImportError as _exc:  # pragma: no cover - exercised by test_impl
        raise ImportError(
            "pgoutput_fast: the compiled extension 'pgoutput_fast._native' could not be "
            f"imported ({_exc}). Install a wheel or build it (`pip install .`, or "
            "`python setup.py build_ext --inplace` in a checkout). To run the slow "
            "pure-Python reference decoder on purpose, set PGOUTPUT_FAST_IMPL=python."
        ) from _exc
elif IMPL == "python":
    from . import _reference as _impl  # type: ignore[no-redef]  # same API as _native
else:
    raise ImportError(f"PGOUTPUT_FAST_IMPL must be 'native' or 'python', not {IMPL!r}")

decode_message = _impl.decode_message

__all__ = [
    "__version__",
    "IMPL",
    "DecodeError",
    "decode_message",
    "encode_message",
    "format_lsn",
    "parse_lsn",
    "pg_timestamp_to_datetime",
    "datetime_to_pg_timestamp",
    "UNCHANGED_TOAST",
    "Value",
    "RelationColumn",
    "Message",
    "MESSAGE_TYPES",
    "Begin",
    "Commit",
    "Origin",
    "Relation",
    "Type",
    "Insert",
    "Update",
    "Delete",
    "Truncate",
    "LogicalMessage",
    "StreamStart",
    "StreamStop",
    "StreamCommit",
    "StreamAbort",
    "BeginPrepare",
    "Prepare",
    "CommitPrepared",
    "RollbackPrepared",
    "StreamPrepare",
]

from .catalog import RelationCatalog, RelationVersion  # noqa: E402
from .decoder import Decoder, ChangeSet, LogicalMessageEvent, decode_changes  # noqa: E402

__all__ += ["RelationCatalog", "RelationVersion", "Decoder", "ChangeSet",
            "LogicalMessageEvent", "decode_changes"]
