"""pgoutput_fast: a fast, complete decoder for PostgreSQL's pgoutput logical replication stream.

The implementation is chosen once, at import, by ``PGOUTPUT_FAST_IMPL``:

* ``native`` (default): the compiled Cython core ``pgoutput_fast._native``. If it is
  missing the import fails loudly; there is no silent fallback.
* ``python``: the pure-Python reference twin (same API and results, much slower), used as
  the oracle in tests.

The implementation, ``decode_message``, ``Decoder``, ``ChangeSet``, ``RelationCatalog``
and the other names that need numpy and pyarrow are imported at their first use; a
missing compiled extension still fails ``import pgoutput_fast``.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING

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

if IMPL not in ("native", "python"):
    raise ImportError(f"PGOUTPUT_FAST_IMPL must be 'native' or 'python', not {IMPL!r}")


def _missing_extension(exc: BaseException) -> ImportError:
    err = ImportError(
        "pgoutput_fast: the compiled extension 'pgoutput_fast._native' could not be "
        f"imported ({exc}). Install a wheel or build it (`pip install .`, or "
        "`python setup.py build_ext --inplace` in a checkout). To run the slow "
        "pure-Python reference decoder on purpose, set PGOUTPUT_FAST_IMPL=python."
    )
    err.__cause__ = exc
    return err


# The implementation and the decoder pull in numpy and pyarrow (~0.2 s): they are
# imported at first use (PEP 562), so that ``import pgoutput_fast`` (and the command
# line, which installs its signal handlers first) starts in a few milliseconds. A
# missing extension is still found here, at import, without loading it.
if IMPL == "native":
    import importlib.util as _ilu

    try:
        _spec = _ilu.find_spec(__name__ + "._native")
    except ImportError as _exc:  # pragma: no cover - exercised by test_impl
        raise _missing_extension(_exc) from _exc
    if _spec is None:  # pragma: no cover
        _none = ModuleNotFoundError(f"No module named '{__name__}._native'")
        raise _missing_extension(_none) from _none
    del _ilu, _spec

if TYPE_CHECKING:
    from . import _native as _impl
    from .catalog import RelationCatalog, RelationVersion
    from .decoder import Decoder, ChangeSet, LogicalMessageEvent, decode_changes
    from .parallel import decode_parallel

    decode_message = _impl.decode_message

#: lazily imported names -> the submodule that defines them
_LAZY = {
    "RelationCatalog": "catalog",
    "RelationVersion": "catalog",
    "Decoder": "decoder",
    "ChangeSet": "decoder",
    "LogicalMessageEvent": "decoder",
    "decode_changes": "decoder",
    "decode_parallel": "parallel",
}


def _load_impl():
    if IMPL == "native":
        try:
            from . import _native as impl
        except ImportError as exc:
            raise _missing_extension(exc) from exc
    else:
        from . import _reference as impl  # type: ignore[no-redef]  # same API as _native
    return impl


def __getattr__(name: str):
    if name == "_impl":
        value = _load_impl()
    elif name == "decode_message":
        value = _load_impl().decode_message
    elif name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"_impl", "decode_message"})


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

__all__ += ["RelationCatalog", "RelationVersion", "Decoder", "ChangeSet",
            "LogicalMessageEvent", "decode_changes", "decode_parallel"]
