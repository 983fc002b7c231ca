"""LSN and PostgreSQL-timestamp helpers."""

from __future__ import annotations

import datetime as _dt

__all__ = [
    "format_lsn",
    "parse_lsn",
    "PG_EPOCH",
    "PG_EPOCH_UNIX_US",
    "pg_timestamp_to_datetime",
    "datetime_to_pg_timestamp",
]

#: 2000-01-01 00:00:00 UTC, the origin of PostgreSQL timestamps.
PG_EPOCH = _dt.datetime(2000, 1, 1, tzinfo=_dt.timezone.utc)
#: PG-epoch µs + this = Unix-epoch µs.
PG_EPOCH_UNIX_US = 946_684_800_000_000

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)


def format_lsn(lsn: int) -> str:
    """``0x16B3748`` -> ``'0/16B3748'`` (PostgreSQL's ``%X/%X``)."""
    if lsn is None:
        return "None"
    if not 0 <= lsn < (1 << 64):
        raise ValueError(f"LSN out of range: {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """``'0/16B3748'`` -> ``0x16B3748``."""
    hi, sep, lo = text.strip().partition("/")
    if not sep:
        raise ValueError(f"not an LSN: {text!r}")
    h, l = int(hi, 16), int(lo, 16)
    if not (0 <= h <= 0xFFFFFFFF and 0 <= l <= 0xFFFFFFFF):
        raise ValueError(f"not an LSN: {text!r}")
    return (h << 32) | l


def pg_timestamp_to_datetime(us: int) -> _dt.datetime:
    """µs since 2000-01-01 UTC -> aware ``datetime`` (UTC).

    PostgreSQL's ``infinity``/``-infinity`` (INT64 max/min) and values outside
    ``datetime``'s range raise ``OverflowError``: Python has no infinite datetime.
    """
    if us in (_INT64_MAX, _INT64_MIN):
        raise OverflowError("PostgreSQL infinite timestamp has no datetime equivalent")
    return PG_EPOCH + _dt.timedelta(microseconds=us)


def datetime_to_pg_timestamp(value: _dt.datetime) -> int:
    """Aware (or UTC-naive) ``datetime`` -> µs since 2000-01-01 UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    delta = value - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
