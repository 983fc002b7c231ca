"""PostgreSQL type OID -> value kind -> Arrow type (shared by both implementations).

A *kind* names how a column's values are parsed (from text and from binary TupleData)
and which Arrow type they land in. Kinds are resolved once per Relation message.

Mapping (documented in the README, "Type mapping"):

============================  ==========================================  =====================
PostgreSQL                    Arrow                                       special values
============================  ==========================================  =====================
bool                          bool
int2 / int4 / int8            int16 / int32 / int64
oid                           uint32
float4 / float8               float32 / float64                           NaN, ±Infinity, -0 kept
numeric(p,s), p <= 38         decimal128(p, s)                            NaN -> null + _special
numeric (no typmod / p > 38)  string (exact decimal text)                 'NaN', 'Infinity', '-Infinity'
text varchar bpchar name      string                                      bpchar keeps pad spaces
"char"                        string                                      PG text form (\\ooo above 0x7f)
bytea                         binary
json / jsonb                  string                                      jsonb: PG's normalised text
date                          date32                                      ±infinity -> int32 max/min
time                          time64[us]                                  24:00:00 -> null + _special
timetz                        string ('HH:MM:SS[.f]+HH[:MM[:SS]]')
timestamp                     timestamp[us]                               ±infinity -> int64 max/min
timestamptz                   timestamp[us, tz=UTC]                       ±infinity -> int64 max/min
interval                      month_day_nano_interval                     PG17 ±infinity -> all fields max/min
uuid                          fixed_size_binary(16)
inet cidr macaddr macaddr8    string (PG text form)
enum, other/unknown types     string in text mode, binary in binary mode
domain                        its base type (through the Type message)
one-dim arrays of the above   list<element>                               multi-dim / lower bound != 1 -> null + _special
arrays of unknown types       list<string> in text mode (the elements'    multi-dim / lower bound != 1 -> null + _special
(enum[], composite[], ...)    text), list<binary> in binary mode (their
                              send bytes)
============================  ==========================================  =====================

Arrays of unknown types are the built-in ones in UNKNOWN_ELEMENT_ARRAY_OIDS and the user
types a Type message names ``_name`` (PostgreSQL's name of an array type), except those
in NOT_COMMA_ARRAY_NAMES: these stay one string / binary value.
"""

from __future__ import annotations

from typing import NamedTuple

import pyarrow as pa

# Value kinds: the one list of them. scripts/gen_kinds.py writes src/kind_numbers.pxi (the
# Cython core's K_* enum and KIND_NUMBERS) from these lines, one `K_NAME = n` each, numbered
# 0, 1, 2, ...; tests/test_kinds_generated.py fails when that file is not current.
K_UNKNOWN = 0
K_BOOL = 1
K_INT2 = 2
K_INT4 = 3
K_INT8 = 4
K_OID = 5
K_FLOAT4 = 6
K_FLOAT8 = 7
K_DECIMAL = 8
K_NUMERIC_STR = 9
K_TEXT = 10
K_BPCHAR = 11
K_CHAR = 12
K_BYTEA = 13
K_JSON = 14
K_JSONB = 15
K_DATE = 16
K_TIME = 17
K_TIMETZ = 18
K_TIMESTAMP = 19
K_TIMESTAMPTZ = 20
K_INTERVAL = 21
K_UUID = 22
K_INET = 23
K_CIDR = 24
K_MACADDR = 25
K_MACADDR8 = 26
K_ARRAY = 27

KIND_NAMES = {v: k[2:].lower() for k, v in globals().items() if k.startswith("K_")}

#: scalar built-in type OID -> kind
SCALAR_OIDS = {
    16: K_BOOL,
    17: K_BYTEA,
    18: K_CHAR,
    19: K_TEXT,  # name
    20: K_INT8,
    21: K_INT2,
    23: K_INT4,
    25: K_TEXT,
    26: K_OID,
    114: K_JSON,
    142: K_TEXT,  # xml
    700: K_FLOAT4,
    701: K_FLOAT8,
    829: K_MACADDR,
    869: K_INET,
    650: K_CIDR,
    774: K_MACADDR8,
    1042: K_BPCHAR,
    1043: K_TEXT,  # varchar
    1082: K_DATE,
    1083: K_TIME,
    1114: K_TIMESTAMP,
    1184: K_TIMESTAMPTZ,
    1186: K_INTERVAL,
    1266: K_TIMETZ,
    1700: K_NUMERIC_STR,  # K_DECIMAL when the typmod gives precision <= 38
    2950: K_UUID,
    3802: K_JSONB,
}

#: built-in array type OID -> element type OID
ARRAY_OIDS = {
    1000: 16, 1001: 17, 1002: 18, 1003: 19, 1005: 21, 1007: 23, 1009: 25, 1028: 26,
    1016: 20, 199: 114, 143: 142, 1021: 700, 1022: 701, 1040: 829, 1041: 869, 651: 650,
    775: 774, 1014: 1042, 1015: 1043, 1182: 1082, 1183: 1083, 1115: 1114, 1185: 1184,
    1187: 1186, 1270: 1266, 1231: 1700, 2951: 2950, 3807: 3802,
}

#: built-in array types whose element type has no kind of its own (point[], money[],
#: int4range[], regclass[], ...; PostgreSQL 15-17's pg_type, typinput array_in): arrays
#: of K_UNKNOWN elements. box[] (1020) is left out: box's array delimiter is ';', not ','.
UNKNOWN_ELEMENT_ARRAY_OIDS = frozenset({
    210, 270, 271, 272, 273, 629, 719, 791, 1006, 1008, 1010, 1011, 1012, 1013, 1017, 1018,
    1019, 1027, 1034, 1263, 1561, 1563, 2201, 2207, 2208, 2209, 2210, 2211, 2287, 2949, 3221,
    3643, 3644, 3645, 3735, 3770, 3905, 3907, 3909, 3911, 3913, 3927, 4073, 4090, 4097, 4192,
    5039, 6150, 6151, 6152, 6153, 6155, 6157,
})

#: array type names (from Type messages) whose element's array delimiter is not ',', so
#: that their text form cannot be split without the catalog: box (';'), PostGIS's
#: geometry and geography (':'). They stay K_UNKNOWN (one string / one binary value).
NOT_COMMA_ARRAY_NAMES = frozenset({"_box", "_geometry", "_geography"})

#: pg_catalog type name -> OID (Type messages name a domain's base type, not its OID)
BUILTIN_NAMES = {
    "bool": 16, "bytea": 17, "char": 18, "name": 19, "int8": 20, "int2": 21, "int4": 23,
    "text": 25, "oid": 26, "json": 114, "xml": 142, "float4": 700, "float8": 701,
    "macaddr": 829, "inet": 869, "cidr": 650, "macaddr8": 774, "bpchar": 1042,
    "varchar": 1043, "date": 1082, "time": 1083, "timestamp": 1114, "timestamptz": 1184,
    "interval": 1186, "timetz": 1266, "numeric": 1700, "uuid": 2950, "jsonb": 3802,
}
for _arr, _elem in ARRAY_OIDS.items():
    for _name, _oid in list(BUILTIN_NAMES.items()):
        if _oid == _elem and "_" + _name not in BUILTIN_NAMES:
            BUILTIN_NAMES["_" + _name] = _arr
            break
del _arr, _elem, _name, _oid

INTERVAL_TYPE = pa.month_day_nano_interval()
TIMETZ_NOTE = "timetz"

_SCALAR_ARROW = {
    K_BOOL: pa.bool_(),
    K_INT2: pa.int16(),
    K_INT4: pa.int32(),
    K_INT8: pa.int64(),
    K_OID: pa.uint32(),
    K_FLOAT4: pa.float32(),
    K_FLOAT8: pa.float64(),
    K_NUMERIC_STR: pa.string(),
    K_TEXT: pa.string(),
    K_BPCHAR: pa.string(),
    K_CHAR: pa.string(),
    K_BYTEA: pa.binary(),
    K_JSON: pa.string(),
    K_JSONB: pa.string(),
    K_DATE: pa.date32(),
    K_TIME: pa.time64("us"),
    K_TIMETZ: pa.string(),
    K_TIMESTAMP: pa.timestamp("us"),
    K_TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    K_INTERVAL: INTERVAL_TYPE,
    K_UUID: pa.binary(16),
    K_INET: pa.string(),
    K_CIDR: pa.string(),
    K_MACADDR: pa.string(),
    K_MACADDR8: pa.string(),
}


class ColumnType(NamedTuple):
    """How one column is decoded: resolved from (type OID, typmod, Type messages)."""

    kind: int
    precision: int = 0  # K_DECIMAL
    scale: int = 0  # K_DECIMAL
    elem_kind: int = -1  # K_ARRAY: element kind
    elem_precision: int = 0
    elem_scale: int = 0

    def arrow_type(self, binary_unknown: bool = False) -> pa.DataType:
        if self.kind == K_ARRAY:
            elem = ColumnType(self.elem_kind, self.elem_precision, self.elem_scale)
            return pa.list_(elem.arrow_type(binary_unknown))
        if self.kind == K_DECIMAL:
            return pa.decimal128(self.precision, self.scale)
        if self.kind == K_UNKNOWN:
            return pa.binary() if binary_unknown else pa.string()
        return _SCALAR_ARROW[self.kind]


def numeric_kind(typmod: int):
    """(kind, precision, scale) of numeric with this typmod."""
    if typmod >= 4:
        tm = typmod - 4
        precision = (tm >> 16) & 0xFFFF
        scale = tm & 0x7FF
        if scale & 0x400:  # PG 15+ allows negative scale (11-bit signed)
            scale -= 0x800
        if 1 <= precision <= 38 and 0 <= scale <= precision:
            return K_DECIMAL, precision, scale
    return K_NUMERIC_STR, 0, 0


def _scalar(oid: int, typmod: int, types) -> ColumnType | None:
    oid = _base_oid(oid, types)
    if oid == 1700:
        k, p, s = numeric_kind(typmod)
        return ColumnType(k, p, s)
    kind = SCALAR_OIDS.get(oid)
    return None if kind is None else ColumnType(kind)


def _base_oid(oid: int, types) -> int:
    """A user type described by a Type message as a pg_catalog type (a domain) -> that OID."""
    if oid in SCALAR_OIDS or oid in ARRAY_OIDS or types is None:
        return oid
    t = types.get(oid)
    if t is not None:
        nsp, name = t
        if nsp in ("", "pg_catalog") and name in BUILTIN_NAMES:
            return BUILTIN_NAMES[name]
    return oid


def resolve_column_type(type_oid: int, typmod: int, types=None) -> ColumnType:
    """ColumnType for a column. ``types`` maps typid -> (nspname, typname) from Type messages."""
    scalar = _scalar(type_oid, typmod, types)
    if scalar is not None:
        return scalar
    oid = _base_oid(type_oid, types)
    elem_oid = ARRAY_OIDS.get(oid)
    if elem_oid is not None:
        # an array's typmod applies to its elements (numeric(10,2)[] -> typmod of numeric)
        elem = _scalar(elem_oid, typmod, types)
        if elem is not None:
            return ColumnType(K_ARRAY, elem_kind=elem.kind, elem_precision=elem.precision,
                              elem_scale=elem.scale)
    if oid in UNKNOWN_ELEMENT_ARRAY_OIDS or _is_array_name(oid, types):
        # an array of a type without a kind (enum[], a composite's or a domain's array...):
        # a list of the elements' text (text mode) or send bytes (binary mode)
        return ColumnType(K_ARRAY, elem_kind=K_UNKNOWN)
    return ColumnType(K_UNKNOWN)


def _is_array_name(oid: int, types) -> bool:
    """A user type that a Type message names as an array: PostgreSQL names the array type
    of ``x`` ``_x`` (its docs advise against other type names that start with ``_``).
    The Type message of a domain names its base type, so a domain over an array counts."""
    if types is None or oid in SCALAR_OIDS or oid in ARRAY_OIDS:
        return False
    t = types.get(oid)
    if t is None:
        return False
    name = t[1]
    return (name.startswith("_") and len(name) > 1 and name not in BUILTIN_NAMES
            and name not in NOT_COMMA_ARRAY_NAMES)
