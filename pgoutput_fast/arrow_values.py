"""Python values of the decoder's Arrow columns, in forms that compare exactly.

``column_values(arr)`` turns an Arrow array (or chunked array) of a typed table into
plain Python values, chosen so that every value the decoder can produce is
representable:

* date32 as ``int`` days since 1970-01-01, time64/timestamp as ``int`` in the column's
  unit (µs): ``infinity`` is then simply INT32_MAX / INT64_MAX, and BC or far-future
  values need no ``datetime``;
* month_day_nano_interval as a ``(months, days, nanoseconds)`` tuple;
* decimal128 as ``Decimal``, float as ``float``, binary as ``bytes``, lists as ``list``,
  structs as ``dict``.

A value the decoder reported in ``_special`` (e.g. NaN in a ``numeric(p,s)`` column, a
multi-dimensional array) is represented as ``Special(text)``, with PostgreSQL's text
form. ``freeze(v)`` gives a hashable form in which equal-looking values compare equal
(NaN == NaN, -0.0 != 0.0, the scale of a ``Decimal`` counts), ``same_value(a, b)`` the
equality under it.

Used by the demo's table images and ground truth (``pgoutput_fast.demo``) and by
``pgoutput_fast.spark.apply.snapshot_rows``.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import NamedTuple

import pyarrow as pa

__all__ = ["Special", "column_values", "freeze", "same_value"]


class Special(NamedTuple):
    """A value the typed column could not hold; ``text`` is PostgreSQL's text form."""

    text: str


def column_values(arr) -> list:
    """Python values of an Arrow array / chunked array, as documented in the module doc."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_date32(t):
        return _with_nulls(arr, arr.view(pa.int32()).to_pylist())
    if pa.types.is_date64(t):
        return _with_nulls(arr, arr.view(pa.int64()).to_pylist())
    if pa.types.is_time32(t):
        return _with_nulls(arr, arr.view(pa.int32()).to_pylist())
    if pa.types.is_time64(t) or pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return _with_nulls(arr, arr.view(pa.int64()).to_pylist())
    if t == pa.month_day_nano_interval():
        return [None if v is None else (v.months, v.days, v.nanoseconds) for v in arr.to_pylist()]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        child = column_values(arr.values)
        offsets = arr.offsets.to_pylist()
        valid = arr.is_valid().to_pylist()
        return [child[offsets[i]:offsets[i + 1]] if valid[i] else None for i in range(len(arr))]
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        children = [column_values(c) for c in arr.flatten()]
        valid = arr.is_valid().to_pylist()
        return [dict(zip(names, vals)) if valid[i] else None
                for i, vals in enumerate(zip(*children) if children else [()] * len(arr))]
    return arr.to_pylist()


def _with_nulls(arr, values):
    if arr.null_count == 0:
        return values
    valid = arr.is_valid().to_pylist()
    return [v if ok else None for v, ok in zip(values, valid)]


def freeze(v):
    """A hashable form of a value in which equal-looking values compare equal.

    NaN equals NaN, -0.0 differs from 0.0, ``Decimal('1.50')`` differs from
    ``Decimal('1.5')`` (the scale is part of the value), lists and dicts become tuples.
    """
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, float):
        return ("f", "nan" if math.isnan(v) else v.hex())
    if isinstance(v, Decimal):
        return ("d", str(v))
    if isinstance(v, Special):
        return ("special", v.text)
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    return v


def same_value(a, b) -> bool:
    """Equality under ``freeze`` (NaN == NaN, -0.0 != 0.0, Decimal scale matters)."""
    return freeze(a) == freeze(b)
