"""Arrow types of the decoder's output -> the Arrow types every store holds, and back.

The one mapping used wherever decoded rows leave the process: Parquet files
(``pgoutput-fast decode --out``), Spark (``decode(df, catalog, table=...)``) and Delta
Lake tables (``apply_changes``). Spark and Delta have no unsigned integers, no
time-of-day type, no interval type, no fixed-size binary and no decimal whose scale
exceeds its precision (or above 38 digits); Parquet cannot write Arrow's
month_day_nano_interval. The typed tables use them, so they are mapped explicitly
(``storage_type`` / ``to_storage_array``):

=================================  =================================================
decoder (Arrow)                    stored (Arrow type -> Spark SQL / Delta type)
=================================  =================================================
uint32 (oid)                       int64 -> LongType
time64[us] (time)                  int64 microseconds since midnight -> LongType
month_day_nano_interval            struct<months: int32, days: int32,
                                   nanoseconds: int64> -> StructType
fixed_size_binary(16) (uuid)       string, canonical ``8-4-4-4-12`` lower-case hex
decimal128(p, s) with s > p or s<0 string (exact decimal text)
large_string / large_binary        string / binary
list<T>, struct<...>               list / struct of the mapped types
everything else                    unchanged (timestamp[us, UTC] -> TimestampType,
                                   timestamp[us] -> TimestampNTZType, date32 ->
                                   DateType, decimal128 -> DecimalType, ...)
=================================  =================================================

±infinity timestamps are the int64 extremes of timestamp[us] (Parquet's
TIMESTAMP_MICROS and Delta's timestamp hold them); values no typed column can hold are
in the table's ``_special`` map (``ChangeSet.tables``). ``from_storage_array(arr,
original_type)`` undoes the mapping (tests use it to compare stored tables with
PostgreSQL's rows in the decoder's own types). ``pgoutput_fast.spark`` exports the same
functions under their Spark names (``spark_arrow_type``, ``to_spark_array``,
``from_spark_array``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["storage_type", "to_storage_array", "from_storage_array", "to_storage_table",
           "spark_arrow_type", "to_spark_array", "from_spark_array", "spark_schema_ddl",
           "INTERVAL_STRUCT"]

INTERVAL_STRUCT = pa.struct([pa.field("months", pa.int32()), pa.field("days", pa.int32()),
                             pa.field("nanoseconds", pa.int64())])
_MDN = pa.month_day_nano_interval()
_HEX = np.array([ord(c) for c in "0123456789abcdef"], dtype=np.uint8)
_UUID_POS = np.array([0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34])  # 16 bytes


def storage_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type stores hold for a decoder output type (see the module doc)."""
    if pa.types.is_unsigned_integer(t):
        return pa.int64()
    if pa.types.is_time(t):
        return pa.int64()
    if t == _MDN:
        return INTERVAL_STRUCT
    if pa.types.is_fixed_size_binary(t):
        return pa.string() if t.byte_width == 16 else pa.binary()
    if pa.types.is_decimal(t):
        return t if 0 <= t.scale <= t.precision and t.precision <= 38 else pa.string()
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(storage_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, storage_type(t.field(i).type))
                          for i in range(t.num_fields)])
    return t


def _validity(arr):
    return None if arr.null_count == 0 else arr.is_null()


def _uuid_strings(arr: pa.FixedSizeBinaryArray) -> pa.Array:
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + n) * 16)
    raw = raw[arr.offset * 16:].reshape(n, 16)
    out = np.full((n, 36), ord("-"), dtype=np.uint8)
    out[:, _UUID_POS] = _HEX[raw >> 4]
    out[:, _UUID_POS + 1] = _HEX[raw & 15]
    offsets = np.arange(0, 36 * (n + 1), 36, dtype=np.int32)
    valid = None if arr.null_count == 0 else arr.is_valid().buffers()[1]
    return pa.Array.from_buffers(pa.string(), n, [valid, pa.py_buffer(offsets), pa.py_buffer(out)],
                                 null_count=arr.null_count)


def _interval_struct(arr) -> pa.Array:
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.dtype([("m", "<i4"), ("d", "<i4"), ("ns", "<i8")]),
                        count=arr.offset + n)[arr.offset:]
    mask = _validity(arr)
    return pa.StructArray.from_arrays(
        [pa.array(np.ascontiguousarray(raw["m"])), pa.array(np.ascontiguousarray(raw["d"])),
         pa.array(np.ascontiguousarray(raw["ns"]))], fields=list(INTERVAL_STRUCT), mask=mask)


def to_storage_array(arr):
    """``arr`` converted to ``storage_type(arr.type)`` (vectorized, no Python per value)."""
    if isinstance(arr, pa.ChunkedArray):
        return pa.chunked_array([to_storage_array(c) for c in arr.chunks],
                                type=storage_type(arr.type))
    t = arr.type
    target = storage_type(t)
    if target == t:
        return arr
    if pa.types.is_unsigned_integer(t):
        return arr.cast(pa.int64())
    if pa.types.is_time(t):
        return arr.view(pa.int64()) if t.bit_width == 64 else arr.cast(pa.int64())
    if t == _MDN:
        return _interval_struct(arr)
    if pa.types.is_fixed_size_binary(t):
        return _uuid_strings(arr) if t.byte_width == 16 else arr.cast(pa.binary())
    if pa.types.is_decimal(t):
        return arr.cast(pa.string())
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return arr.cast(target)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        arr = arr.cast(pa.list_(t.value_type)) if pa.types.is_large_list(t) else arr
        values = to_storage_array(arr.values)
        offsets = arr.offsets
        return pa.ListArray.from_arrays(offsets, values, mask=_validity(arr))
    if pa.types.is_struct(t):
        children = [to_storage_array(c) for c in arr.flatten()]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=_validity(arr))
    raise TypeError(f"no storage mapping for {t}")


def from_storage_array(arr, original: pa.DataType):
    """Undo ``to_storage_array``: the mapped values back in the decoder's ``original`` type."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if t == original:
        return arr
    if pa.types.is_unsigned_integer(original):
        return arr.cast(original)
    if pa.types.is_time(original):
        return arr.view(original) if original.bit_width == 64 else arr.cast(original)
    if original == _MDN:
        vals = [None if v is None else (v["months"], v["days"], v["nanoseconds"]) for v in arr.to_pylist()]
        return pa.array(vals, _MDN)
    if pa.types.is_fixed_size_binary(original) and original.byte_width == 16:
        raw = [None if v is None else bytes.fromhex(v.replace("-", "")) for v in arr.to_pylist()]
        return pa.array(raw, original)
    if pa.types.is_decimal(original) or pa.types.is_large_string(original) or \
            pa.types.is_large_binary(original) or pa.types.is_fixed_size_binary(original):
        return arr.cast(original)
    if pa.types.is_list(original) or pa.types.is_large_list(original):
        values = from_storage_array(arr.values, original.value_type)
        out = pa.ListArray.from_arrays(arr.offsets, values, mask=_validity(arr))
        return out.cast(original) if out.type != original else out
    if pa.types.is_struct(original):
        children = [from_storage_array(arr.field(i), original.field(i).type) for i in range(original.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(original), mask=_validity(arr))
    return arr.cast(original)


def to_storage_table(table: pa.Table) -> pa.Table:
    """``table`` with every column mapped (``to_storage_array``), field metadata kept.
    A struct with no fields (``_before`` of a table without columns) is left out:
    Parquet and Delta cannot hold one."""
    fields, columns = [], []
    for f, col in zip(table.schema, table.columns):
        if pa.types.is_struct(f.type) and f.type.num_fields == 0:
            continue
        fields.append(pa.field(f.name, storage_type(f.type), f.nullable, f.metadata))
        columns.append(to_storage_array(col))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


# the names pgoutput_fast.spark has always used
spark_arrow_type = storage_type
to_spark_array = to_storage_array
from_spark_array = from_storage_array


def spark_schema_ddl(schema: pa.Schema):
    """A ``pyspark.sql.types.StructType`` for an Arrow schema of Spark-safe types."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
