"""Value parsers: one TupleData value (text 't' or binary 'b') -> a typed Arrow column.

* Hand-written examples for every kind, in both formats, with the Arrow value expected,
  the special values (infinities, NaN, -0, 24:00:00, BC dates), the unrepresentable ones
  (row null + listed in ``specials``), malformed input (``DecodeError``) and hostile
  binary arrays. Each runs against the native parser and the pure-Python reference.
* Native == reference on all of those and on Hypothesis-generated values and bytes.
* A real PostgreSQL server: text output and send() output of many values of every type
  must parse to the same value, which must equal what the server says independently
  (extract(epoch ...), psycopg2's Python values, ...). Marked ``postgres``.
"""

from __future__ import annotations

import datetime
import decimal
import ipaddress
import math
import struct
import uuid
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pgoutput_fast import DecodeError, _native
from pgoutput_fast import types as T
from pgoutput_fast._reference import values as reference
from pgoutput_fast.types import (
    K_UNKNOWN, K_BOOL, K_INT2, K_INT4, K_INT8, K_OID, K_FLOAT4, K_FLOAT8, K_DECIMAL,
    K_NUMERIC_STR, K_TEXT, K_BPCHAR, K_CHAR, K_BYTEA, K_JSON, K_JSONB, K_DATE, K_TIME,
    K_TIMETZ, K_TIMESTAMP, K_TIMESTAMPTZ, K_INTERVAL, K_UUID, K_INET, K_CIDR, K_MACADDR,
    K_MACADDR8, K_ARRAY,
    ColumnType,
)

IMPLS = {"native": _native.parse_values, "reference": reference.parse_values}
FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EPOCH_US = 946_684_800_000_000       # 2000-01-01 in Unix microseconds
EPOCH_DAYS = 10_957
MIN_TIMESTAMP = -211_813_488_000_000_000
END_TIMESTAMP = 9_223_371_331_200_000_000
MIN_DATE, END_DATE = -2_451_545, 2_145_031_949


class _Marker:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


SPECIAL = _Marker("SPECIAL")  # valid PostgreSQL value, no Arrow form: null + specials
ERROR = _Marker("ERROR")  # malformed: DecodeError


def C(kind, precision=0, scale=0):
    return ColumnType(kind, precision, scale)


def A(elem_kind, precision=0, scale=0):
    return ColumnType(K_ARRAY, elem_kind=elem_kind, elem_precision=precision, elem_scale=scale)


# -- helpers: Arrow -> plain values, comparisons ----------------------------------------

def raw(arr: pa.Array) -> list:
    """Plain Python values: ints for date32/time64/timestamp, tuples for intervals."""
    t = arr.type
    if pa.types.is_list(t):
        flat = raw(arr.values)
        offs = arr.offsets.to_pylist()
        return [flat[offs[i]:offs[i + 1]] if arr[i].is_valid else None for i in range(len(arr))]
    if pa.types.is_date32(t):
        return arr.view(pa.int32()).to_pylist()
    if pa.types.is_time64(t) or pa.types.is_timestamp(t):
        return arr.view(pa.int64()).to_pylist()
    if pa.types.is_interval(t):
        return [None if v is None else tuple(v) for v in arr.to_pylist()]
    return arr.to_pylist()


def same(a, b) -> bool:
    """Equality that treats NaN == NaN and tells -0.0 from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _bits_view(t: pa.DataType) -> pa.DataType:
    if pa.types.is_list(t):
        return pa.list_(_bits_view(t.value_type))
    if pa.types.is_float32(t):
        return pa.uint32()
    if pa.types.is_float64(t):
        return pa.uint64()
    return t


def assert_arrays_identical(a: pa.Array, b: pa.Array):
    """Same type, validity and values, floats compared bit for bit."""
    assert a.type == b.type
    assert a.view(_bits_view(a.type)).equals(b.view(_bits_view(b.type))), (raw(a), raw(b))


def validate(arr: pa.Array, values):
    """arr.validate(full=True): string kinds reject input that is not UTF-8 (DecodeError),
    so every array is valid, UTF-8 included. (time 24:00:00 is a special value: Arrow's
    time64 cannot hold it.)"""
    arr.validate(full=True)


def run(impl, ct, values):
    """(array, specials) or ERROR; validates the array fully."""
    try:
        arr, specials = IMPLS[impl](ct, values)
    except DecodeError as exc:
        assert exc.offset is None and exc.reason
        return ERROR
    validate(arr, values)
    assert len(arr) == len(values)
    return arr, specials


def twins(ct, values):
    """Run native and reference; assert identical outcomes; return the native one."""
    n = run("native", ct, values)
    r = run("reference", ct, values)
    if n is ERROR or r is ERROR:
        assert n is r, f"native {n!r} vs reference {r!r} for {ct} {values!r}"
        return n
    assert_arrays_identical(n[0], r[0])
    assert n[1] == r[1]
    return n


def outcome(impl, ct, fmt, data):
    """The expected-value form of one parsed value: value, SPECIAL or ERROR."""
    res = run(impl, ct, [(fmt, data)])
    if res is ERROR:
        return ERROR
    arr, specials = res
    if specials:
        assert specials == [0] and arr.null_count == 1
        return SPECIAL
    assert arr.null_count == 0
    return raw(arr)[0]


# -- builders of binary inputs -----------------------------------------------------------

def be(fmt, *v):
    return struct.pack(">" + fmt, *v)


def numeric_send(value, dscale=None) -> bytes:
    """numeric_send() of a Decimal (or 'NaN' / 'Infinity' / '-Infinity')."""
    if value in ("NaN", "Infinity", "-Infinity"):
        sign = {"NaN": 0xC000, "Infinity": 0xD000, "-Infinity": 0xF000}[value]
        return be("hhHH", 0, 0, sign, 0 if value == "NaN" else 0x20)  # junk dscale, as PG
    value = Decimal(value)
    sign, digits, exp = value.as_tuple()
    if dscale is None:
        dscale = max(-exp, 0)
    n = int("".join(map(str, digits)) or "0")
    pad = exp % 4
    n *= 10**pad
    exp -= pad  # value = n * 10^exp, exp a multiple of 4
    groups = []
    while n:
        groups.append(n % 10000)
        n //= 10000
    groups.reverse()
    weight = len(groups) - 1 + exp // 4
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return be("hhHH", len(groups), weight, 0x4000 if sign and groups else 0, dscale) + b"".join(
        be("H", g) for g in groups)


def array_send(elements, elem_oid=23, dims=None, lbounds=None) -> bytes:
    """array_send(): elements are bytes (already send()-encoded) or None."""
    if dims is None:
        dims = [len(elements)] if elements else []
    if lbounds is None:
        lbounds = [1] * len(dims)
    out = be("iiI", len(dims), int(any(e is None for e in elements)), elem_oid)
    for d, lb in zip(dims, lbounds):
        out += be("ii", d, lb)
    for e in elements:
        out += be("i", -1) if e is None else be("i", len(e)) + e
    return out


def civil_from_days(z: int):
    """(year, month, day) of a Unix day number (astronomical year)."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return y + (m <= 2), m, d


def pg_date_text(unix_days: int) -> str:
    y, m, d = civil_from_days(unix_days)
    return f"{y if y > 0 else 1 - y:04d}-{m:02d}-{d:02d}" + ("" if y > 0 else " BC")


def pg_seconds(secs: int, frac_us: int) -> str:
    text = f"{secs:02d}"
    return text + (f".{frac_us:06d}".rstrip("0") if frac_us else "")


def pg_zone(east: int) -> str:
    sign = "+" if east >= 0 else "-"
    hours, rest = divmod(abs(east), 3600)
    mins, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}"
    if secs:
        return text + f":{mins:02d}:{secs:02d}"
    return text + (f":{mins:02d}" if mins else "")


def pg_timestamp_text(pg_us: int, east: int | None) -> str:
    local = pg_us + (east or 0) * 1_000_000
    days, tod = divmod(local, 86_400_000_000)
    y, m, d = civil_from_days(days + EPOCH_DAYS)
    secs, frac = divmod(tod, 1_000_000)
    text = (f"{y if y > 0 else 1 - y:04d}-{m:02d}-{d:02d} {secs // 3600:02d}:{secs // 60 % 60:02d}:"
            + pg_seconds(secs % 60, frac))
    if east is not None:
        text += pg_zone(east)
    return text + ("" if y > 0 else " BC")


def pg_interval_text(months: int, days: int, us: int) -> str:
    """PostgreSQL EncodeInterval, IntervalStyle=postgres."""
    def trunc_div(a, b):
        q = abs(a) // b
        return -q if a < 0 else q

    year = trunc_div(months, 12)
    mon = months - 12 * year
    hour = trunc_div(us, 3_600_000_000)
    rest = abs(us) - abs(hour) * 3_600_000_000
    minute, rest = divmod(rest, 60_000_000)
    sec, frac = divmod(rest, 1_000_000)
    out = ""
    is_zero, is_before = True, False
    for value, unit in ((year, "year"), (mon, "mon"), (days, "day")):
        if value == 0:
            continue
        out += ("" if is_zero else " ") + ("+" if is_before and value > 0 else "")
        out += f"{value} {unit}" + ("" if value == 1 else "s")
        is_before, is_zero = value < 0, False
    if is_zero or us != 0:
        out += ("" if is_zero else " ") + ("-" if us < 0 else ("+" if is_before else ""))
        out += f"{abs(hour):02d}:{minute:02d}:" + pg_seconds(sec, frac)
    return out


def unix_days(y, m, d):
    """Unix day of an astronomical-year date, via datetime and 400-year (146097-day) cycles."""
    cycles = 0
    while y < 1:
        y, cycles = y + 400, cycles + 1
    while y > 9999:
        y, cycles = y - 400, cycles - 1
    return (datetime.date(y, m, d) - datetime.date(1970, 1, 1)).days - 146097 * cycles


def unix_us(y, m, d, hh=0, mi=0, ss=0, us=0):
    return unix_days(y, m, d) * 86_400_000_000 + ((hh * 60 + mi) * 60 + ss) * 1_000_000 + us


def ts_expect(pg_us):
    return SPECIAL if pg_us + EPOCH_US >= INT64_MAX else pg_us + EPOCH_US


def iv_expect(months, days, us):
    return SPECIAL if not INT64_MIN <= us * 1000 <= INT64_MAX else (months, days, us * 1000)


D = lambda s: Decimal(s)  # noqa: E731
F4 = lambda x: float(np.float32(x))  # noqa: E731
NAN = float("nan")
INF = float("inf")

# -- the hand-written examples: (column type, format, input bytes, expected) ------------------

CASES = []


def case(ct, fmt, data, expected):
    CASES.append((ct, fmt, data, expected))


def text_cases(ct, pairs):
    for data, expected in pairs:
        case(ct, "t", data, expected)


def bin_cases(ct, pairs):
    for data, expected in pairs:
        case(ct, "b", data, expected)


# bool
text_cases(C(K_BOOL), [(b"t", True), (b"f", False), (b"true", ERROR), (b"", ERROR), (b"T", ERROR)])
bin_cases(C(K_BOOL), [(b"\x01", True), (b"\x00", False), (b"\x02", True), (b"", ERROR),
                      (b"\x01\x00", ERROR)])

# integers
text_cases(C(K_INT2), [(b"32767", 32767), (b"-32768", -32768), (b"0", 0), (b"-0", 0),
                       (b"007", 7), (b"32768", ERROR), (b"-32769", ERROR), (b"", ERROR),
                       (b"-", ERROR), (b"+1", ERROR), (b" 1", ERROR), (b"1 ", ERROR),
                       (b"1.0", ERROR), (b"1e3", ERROR), ("١".encode(), ERROR), (b"1_0", ERROR)])
bin_cases(C(K_INT2), [(b"\x7f\xff", 32767), (b"\x80\x00", -32768), (b"\x00", ERROR),
                      (b"\x00\x00\x00", ERROR)])
text_cases(C(K_INT4), [(b"2147483647", INT32_MAX), (b"-2147483648", INT32_MIN), (b"42", 42),
                       (b"2147483648", ERROR), (b"-2147483649", ERROR),
                       (b"99999999999999999999999", ERROR)])
bin_cases(C(K_INT4), [(be("i", -5), -5), (be("i", INT32_MIN), INT32_MIN), (b"\x00\x00\x00", ERROR)])
text_cases(C(K_INT8), [(b"9223372036854775807", INT64_MAX), (b"-9223372036854775808", INT64_MIN),
                       (b"9223372036854775808", ERROR), (b"-9223372036854775809", ERROR),
                       (b"18446744073709551616", ERROR)])
bin_cases(C(K_INT8), [(be("q", INT64_MIN), INT64_MIN), (be("q", 1), 1), (b"\x00" * 4, ERROR)])
text_cases(C(K_OID), [(b"4294967295", 2**32 - 1), (b"0", 0), (b"2147483648", 2**31),
                      (b"4294967296", ERROR), (b"-1", ERROR), (b"-0", ERROR)])
bin_cases(C(K_OID), [(b"\xff\xff\xff\xff", 2**32 - 1), (b"\x80\x00\x00\x00", 2**31), (b"\xff", ERROR)])

# floats
text_cases(C(K_FLOAT4), [
    (b"1.5", 1.5), (b"0.1", F4(0.1)), (b"1e-07", F4(1e-07)), (b"1e+20", F4(1e20)),
    (b"3.4028235e+38", F4(3.4028235e38)), (b"1.4e-45", F4(1.4e-45)), (b"-123.456", F4(-123.456)),
    (b"3.1415927", F4(3.1415927)), (b"16777217", 16777216.0), (b"NaN", NAN), (b"Infinity", INF),
    (b"-Infinity", -INF), (b"-0", -0.0), (b"0", 0.0), (b".5", 0.5), (b"5.", 5.0),
    (b"3.5e38", ERROR), (b"nan", ERROR), (b"inf", ERROR), (b"infinity", ERROR), (b"", ERROR),
    (b" 1", ERROR), (b"0x1p3", ERROR), (b"1e", ERROR), (b"1_0", ERROR), (b"1.5.", ERROR),
    (b"+1", ERROR), (b".", ERROR), (b"-", ERROR), (b"e5", ERROR),
    (b"3.4028236e38", ERROR), (b"1e99999999999", ERROR), (b"1e-99999999999", 0.0), (b"7e-46", 0.0),
    (b"7.1e-46", F4(1.4e-45)), (b"-1e-50", -0.0), (b"0.0000e999999999999", 0.0),
    (b"0.00000000000000000000000000000000000000000000000000001e50", F4(1e-3)),
])
bin_cases(C(K_FLOAT4), [(bytes.fromhex("7fc00000"), NAN), (bytes.fromhex("7f800000"), INF),
                        (bytes.fromhex("ff800000"), -INF), (bytes.fromhex("80000000"), -0.0),
                        (bytes.fromhex("3fc00000"), 1.5), (bytes.fromhex("00000001"), F4(1.4e-45)),
                        (b"\x00" * 8, ERROR)])
text_cases(C(K_FLOAT8), [
    (b"0.1", 0.1), (b"1e-07", 1e-07), (b"1e+20", 1e20), (b"-1.7976931348623157e+308", -1.7976931348623157e308),
    (b"5e-324", 5e-324), (b"2.2250738585072014e-308", 2.2250738585072014e-308),
    (b"0.30000000000000004", 0.30000000000000004), (b"123456789012345678901234567890", 1.2345678901234568e29),
    (b"0.000000000000000000000000000001", 1e-30), (b"9007199254740993", 9007199254740992.0),
    (b"1" * 128, float("1" * 128)), (b"NaN", NAN), (b"Infinity", INF), (b"-Infinity", -INF),
    (b"-0", -0.0), (b"-0.0e10", -0.0), (b"1E5", 1e5), (b"1e-400", 0.0), (b"0e999999999", 0.0),
    (b"1e309", ERROR), (b"1e999999999", ERROR), (b"Infinity ", ERROR), (b"NaN1", ERROR),
    (b"1" * 129, ERROR), (b"--1", ERROR), (b"1e+-5", ERROR),
])
bin_cases(C(K_FLOAT8), [(bytes.fromhex("7ff8000000000000"), NAN), (bytes.fromhex("fff0000000000000"), -INF),
                        (bytes.fromhex("8000000000000000"), -0.0), (be("d", 0.1), 0.1),
                        (b"\x00" * 4, ERROR)])

# numeric -> decimal128(p, s)
text_cases(C(K_DECIMAL, 10, 3), [
    (b"1234.500", D("1234.500")), (b"1234.5", D("1234.500")), (b"1234.50000", D("1234.500")),
    (b"-0.001", D("-0.001")), (b"0.000", D("0.000")), (b"-0.000", D("0.000")),
    (b"9999999.999", D("9999999.999")), (b"-9999999.999", D("-9999999.999")), (b".5", D("0.500")),
    (b"0000000001", D("1.000")), (b"7.", D("7.000")),
    (b"NaN", SPECIAL), (b"Infinity", SPECIAL), (b"-Infinity", SPECIAL),
    (b"10000000.000", ERROR), (b"1.0001", ERROR), (b"1e3", ERROR), (b"", ERROR), (b"-", ERROR),
    (b".", ERROR), (b"nan", ERROR), (b"+1", ERROR), (b"1,5", ERROR),
])
bin_cases(C(K_DECIMAL, 10, 3), [
    (numeric_send("1234.500"), D("1234.500")), (numeric_send("-0.001"), D("-0.001")),
    (numeric_send("0.000"), D("0.000")), (numeric_send("9999999.999"), D("9999999.999")),
    (numeric_send("1.5", dscale=1), D("1.500")), (numeric_send("10"), D("10.000")),
    (be("hhHH", 0, 0, 0x4000, 3), D("0.000")),                       # -0
    (be("hhHHHHH", 3, 1, 0, 3, 0, 5, 0), D("5.000")),                 # leading + trailing zero groups
    (numeric_send("NaN"), SPECIAL), (numeric_send("Infinity"), SPECIAL), (numeric_send("-Infinity"), SPECIAL),
    (numeric_send("10000000"), ERROR), (numeric_send("0.0001"), ERROR), (numeric_send("1.2345"), ERROR),
    (be("hhHHH", 1, 0, 0, 0, 10000), ERROR),                          # digit out of range
    (be("hhHHH", 2, 0, 0, 0, 1), ERROR),                              # fewer digits than ndigits
    (be("hhHH", -1, 0, 0, 0), ERROR), (be("hhHH", 0, 0, 0x1234, 0), ERROR),
    (be("hhHH", 0, 0, 0, 0x4000), ERROR), (b"\x00\x00", ERROR), (be("hhHHH", 1, 32767, 0, 0, 1), ERROR),
    (be("hhHHH", 1, -32768, 0, 0, 1), ERROR),
])
text_cases(C(K_DECIMAL, 38, 0), [(b"9" * 38, D("9" * 38)), (b"-" + b"9" * 38, D("-" + "9" * 38)),
                                 (b"1" + b"0" * 38, ERROR)])
bin_cases(C(K_DECIMAL, 38, 0), [(numeric_send("9" * 38), D("9" * 38)), (numeric_send("-" + "9" * 38), D("-" + "9" * 38)),
                                (numeric_send("1" + "0" * 38), ERROR), (numeric_send("1e37"), D("1" + "0" * 37))])
text_cases(C(K_DECIMAL, 38, 38), [(b"0.12345678901234567890123456789012345678", D("0.12345678901234567890123456789012345678")),
                                  (b"1", ERROR)])
bin_cases(C(K_DECIMAL, 38, 38), [(numeric_send("-0.12345678901234567890123456789012345678"),
                                  D("-0.12345678901234567890123456789012345678"))])
text_cases(C(K_DECIMAL, 5, 2), [(b"123.45", D("123.45")), (b"1234.5", ERROR), (b"0.005", ERROR)])
# the one-pass numeric(p <= 18) parser's edges: no integer digits allowed, exactly 18
# digits, zeros past the scale, leading zeros that do not count toward the precision
text_cases(C(K_DECIMAL, 2, 2), [(b"0.5", D("0.50")), (b"-00.99", D("-0.99")), (b".25", D("0.25")),
                                (b"0.990", D("0.99")), (b"5.0", ERROR), (b"0.991", ERROR)])
text_cases(C(K_DECIMAL, 18, 0), [(b"999999999999999999", D("999999999999999999")),
                                 (b"-0000999999999999999999", D("-999999999999999999")),
                                 (b"999999999999999999.000", D("999999999999999999")),
                                 (b"1000000000000000000", ERROR), (b"1.5", ERROR), (b"12a", ERROR)])
bin_cases(C(K_DECIMAL, 5, 2), [(numeric_send("123.45"), D("123.45")), (numeric_send("0.1"), D("0.10")),
                               (numeric_send("1234.5"), ERROR), (numeric_send("0.005"), ERROR),
                               (numeric_send("0.50"), D("0.50"))])

# numeric without typmod -> exact text
text_cases(C(K_NUMERIC_STR), [(b"1234.500", "1234.500"), (b"NaN", "NaN"), (b"-Infinity", "-Infinity")])
bin_cases(C(K_NUMERIC_STR), [
    (numeric_send("1234.500"), "1234.500"), (numeric_send("-0.001"), "-0.001"),
    (numeric_send("0"), "0"), (numeric_send("0.00"), "0.00"), (numeric_send("100000000"), "100000000"),
    (numeric_send("0.0001"), "0.0001"), (numeric_send("-12345678901234567890.123456789"), "-12345678901234567890.123456789"),
    (numeric_send("1e-20"), "0.00000000000000000001"), (numeric_send("1e20"), "100000000000000000000"),
    (numeric_send("NaN"), "NaN"), (numeric_send("Infinity"), "Infinity"), (numeric_send("-Infinity"), "-Infinity"),
    (be("hhHH", 0, 5, 0xD000, 0x1234), "Infinity"),                   # junk weight/dscale
    (be("hhHH", 0, 0, 0x4000, 2), "0.00"),                            # negative zero
    (be("hhHHH", 1, -1, 0x4000, 2, 1), "0.00"),                       # truncated to zero: no sign
    (be("hhHHHH", 2, 0, 0x4000, 2, 1, 2345), "-1.23"),                # digits beyond dscale cut
    (be("hhHHHH", 2, 1, 0, 0, 0, 5), "5"),                            # leading zero group
    (be("hhHHH", 1, 2, 0, 1, 7), "700000000.0"),
    (be("hhHHH", 1, -3, 0x4000, 12, 5), "-0.000000000005"),
    (be("hhHH", 0, 0, 0, 0xC000), ERROR), (be("hhHH", 0, 0, 0x8000, 0), ERROR),
    (be("hhHHH", 1, 0, 0, 0, 65535), ERROR), (be("hhHH", 3, 0, 0, 0), ERROR), (b"", ERROR),
])

# strings, bytes
for k in (K_TEXT, K_JSON, K_UNKNOWN):
    text_cases(C(k), [(b"", ""), ("héllo ☃".encode(), "héllo ☃"), (b"a\tb\\", "a\tb\\")])
for k in (K_TEXT, K_JSON):
    bin_cases(C(k), [(b"", ""), ("héllo".encode(), "héllo")])
bin_cases(C(K_UNKNOWN), [(b"\x00\xff", b"\x00\xff")])                 # -> binary column
text_cases(C(K_BPCHAR), [(b"ab   ", "ab   ")])
bin_cases(C(K_BPCHAR), [(b"ab   ", "ab   ")])
text_cases(C(K_JSONB), [(b'{"a": 1}', '{"a": 1}')])
bin_cases(C(K_JSONB), [(b'\x01{"a": 1, "b": [1, 2]}', '{"a": 1, "b": [1, 2]}'), (b"\x01", ""),
                       (b"", ERROR), (b"\x02{}", ERROR), (b"{}", ERROR)])
text_cases(C(K_CHAR), [(b"a", "a"), (b"", ""), (b"\\377", "\\377"),
                       (b"\xff", "\\377"), (b"\x80", "\\200")])     # raw high byte: PostgreSQL 14
bin_cases(C(K_CHAR), [(b"\x00", ""), (b"A", "A"), (b"\x7f", "\x7f"), (b"\x80", "\\200"), (b"\xff", "\\377"),
                      (b"", ERROR), (b"ab", ERROR)])
text_cases(C(K_BYTEA), [
    (b"\\x00ff41", b"\x00\xffA"), (b"\\x", b""), (b"\\xABcd", b"\xab\xcd"), (b"abc", b"abc"), (b"", b""),
    (b"\\000\\377A\\\\", b"\x00\xffA\\"), (b"\\x0", ERROR), (b"\\xzz", ERROR), (b"\\x 00", ERROR),
    (b"\\400", ERROR), (b"\\9", ERROR), (b"a\\", ERROR), (b"\\07", ERROR),
])
bin_cases(C(K_BYTEA), [(b"\x00\\x", b"\x00\\x"), (b"", b"")])

# date
assert unix_days(-4713, 11, 24) == MIN_DATE + EPOCH_DAYS  # PostgreSQL's first date, Julian day 0
assert unix_days(5874898, 1, 1) == END_DATE + EPOCH_DAYS

text_cases(C(K_DATE), [
    (b"2024-02-29", unix_days(2024, 2, 29)), (b"1970-01-01", 0), (b"2000-01-01", EPOCH_DAYS), (b"0001-01-01 BC", unix_days(0, 1, 1)),
    (b"4714-11-24 BC", MIN_DATE + EPOCH_DAYS), (b"5874897-12-31", END_DATE - 1 + EPOCH_DAYS),
    (b"10000-01-01", unix_days(10000, 1, 1)), (b"infinity", INT32_MAX), (b"-infinity", INT32_MIN),
    (b"2023-02-29", ERROR), (b"2024-13-01", ERROR), (b"2024-00-10", ERROR), (b"2024-01-00", ERROR),
    (b"0000-01-01", ERROR), (b"24-01-01", ERROR), (b"2024-1-01", ERROR), (b"4714-11-23 BC", ERROR),
    (b"5874898-01-01", ERROR), (b"2024-01-01 AD", ERROR), (b" 2024-01-01", ERROR),
    (b"Infinity", ERROR), (b"2024-04-31", ERROR), (b"0004-02-29 BC", ERROR), (b"0005-02-29 BC", unix_days(-4, 2, 29)),
])
bin_cases(C(K_DATE), [(be("i", 0), EPOCH_DAYS), (be("i", -EPOCH_DAYS), 0), (be("i", INT32_MAX), INT32_MAX),
                      (be("i", INT32_MIN), INT32_MIN), (be("i", MIN_DATE), MIN_DATE + EPOCH_DAYS),
                      (be("i", END_DATE - 1), END_DATE - 1 + EPOCH_DAYS), (be("i", END_DATE), ERROR),
                      (be("i", MIN_DATE - 1), ERROR), (be("i", INT32_MAX - 1), ERROR), (b"\x00\x00\x00", ERROR)])

# time, timetz
text_cases(C(K_TIME), [
    (b"00:00:00", 0), (b"23:59:59.999999", 86_399_999_999), (b"24:00:00", SPECIAL),
    (b"12:34:56.5", 45_296_500_000), (b"00:00:00.000001", 1), (b"24:00:00.000001", ERROR),
    (b"25:00:00", ERROR), (b"12:60:00", ERROR), (b"12:00:60", ERROR), (b"1:00:00", ERROR),
    (b"12:00:00.1234567", ERROR), (b"12:00", ERROR), (b"12:00:00.", ERROR), (b"12:00:00+00", ERROR),
])
bin_cases(C(K_TIME), [(be("q", 0), 0), (be("q", 86_400_000_000), SPECIAL), (be("q", -1), ERROR),
                      (be("q", 86_400_000_001), ERROR), (be("i", 0), ERROR)])
text_cases(C(K_TIMETZ), [(b"12:00:00+05:30", "12:00:00+05:30")])
bin_cases(C(K_TIMETZ), [
    (be("qi", 43_200_000_000, -19800), "12:00:00+05:30"), (be("qi", 0, 0), "00:00:00+00"),
    (be("qi", 86_399_500_000, 28800), "23:59:59.5-08"), (be("qi", 86_400_000_000, 57599), "24:00:00-15:59:59"),
    (be("qi", 1, -1), "00:00:00.000001+00:00:01"), (be("qi", 3_723_000_100, 5400), "01:02:03.0001-01:30"),
    (be("qi", 0, 57600), ERROR), (be("qi", 0, -57600), ERROR), (be("qi", -1, 0), ERROR),
    (be("qi", 86_400_000_001, 0), ERROR), (be("q", 0), ERROR),
])

# timestamp, timestamptz
text_cases(C(K_TIMESTAMP), [
    (b"2000-01-01 00:00:00", EPOCH_US), (b"1970-01-01 00:00:00.000001", 1),
    (b"0044-03-15 12:00:00 BC", unix_us(-43, 3, 15, 12)), (b"4714-11-24 00:00:00 BC", MIN_TIMESTAMP + EPOCH_US),
    (b"294247-01-10 04:00:54.775806", INT64_MAX - 1), (b"294247-01-10 04:00:54.775807", SPECIAL),
    (b"294276-12-31 23:59:59.999999", SPECIAL), (b"infinity", INT64_MAX), (b"-infinity", INT64_MIN),
    (b"1900-02-28 23:59:59.5", unix_us(1900, 2, 28, 23, 59, 59, 500_000)),
    (b"2000-01-01 00:00:00+00", ERROR), (b"2000-01-01 24:00:00", ERROR), (b"2000-01-01", ERROR),
    (b"2000-01-01T00:00:00", ERROR), (b"294277-01-01 00:00:00", ERROR), (b"4714-11-23 23:59:59 BC", ERROR),
    (b"2000-01-01 00:00:00 bc", ERROR), (b"2000-01-01 00:00:00 BC ", ERROR),
])
text_cases(C(K_TIMESTAMPTZ), [
    (b"2024-01-01 10:00:00+05:30", unix_us(2024, 1, 1, 4, 30)), (b"2000-01-01 00:00:00+00", EPOCH_US),
    (b"1849-12-31 19:03:58-04:56:02", unix_us(1850, 1, 1)), (b"2000-01-01 00:00:00-00:00:01", EPOCH_US + 1_000_000),
    (b"0044-03-15 12:00:00-04:56:02 BC", unix_us(-43, 3, 15, 12) + 17_762_000_000),
    (b"4714-11-24 00:00:00+00 BC", MIN_TIMESTAMP + EPOCH_US), (b"4714-11-23 23:00:00-01 BC", MIN_TIMESTAMP + EPOCH_US),
    (b"294276-12-31 23:59:59.999999+00", SPECIAL), (b"infinity", INT64_MAX), (b"-infinity", INT64_MIN),
    (b"2000-01-01 00:00:00", ERROR), (b"2000-01-01 00:00:00+16", ERROR), (b"2000-01-01 00:00:00+05:60", ERROR),
    (b"2000-01-01 00:00:00+5", ERROR), (b"2000-01-01 00:00:00 +00", ERROR), (b"2000-01-01 00:00:00+00:", ERROR),
    (b"4714-11-24 00:00:00+01 BC", ERROR), (b"294277-01-01 00:00:00+00", ERROR),
])
for k in (K_TIMESTAMP, K_TIMESTAMPTZ):
    bin_cases(C(k), [
        (be("q", 0), EPOCH_US), (be("q", INT64_MAX), INT64_MAX), (be("q", INT64_MIN), INT64_MIN),
        (be("q", MIN_TIMESTAMP), MIN_TIMESTAMP + EPOCH_US), (be("q", INT64_MAX - EPOCH_US - 1), INT64_MAX - 1),
        (be("q", INT64_MAX - EPOCH_US), SPECIAL), (be("q", END_TIMESTAMP - 1), SPECIAL),
        (be("q", END_TIMESTAMP), ERROR), (be("q", MIN_TIMESTAMP - 1), ERROR), (be("q", INT64_MAX - 1), ERROR),
        (be("i", 0), ERROR),
    ])

# interval
text_cases(C(K_INTERVAL), [
    (b"1 year 2 mons 3 days 04:05:06.789", (14, 3, 14_706_789_000_000)),
    (b"-1 days +02:03:00", (0, -1, 7_380_000_000_000)), (b"00:00:00", (0, 0, 0)),
    (b"-00:00:01.5", (0, 0, -1_500_000_000)), (b"3 days", (0, 3, 0)), (b"1 mon -00:00:00.000001", (1, 0, -1000)),
    (b"100:00:00", (0, 0, 360_000_000_000_000)), (b"-1 years -2 mons +3 days -04:05:06", (-14, 3, -14_706_000_000_000)),
    (b"10 mons", (10, 0, 0)), (b"1 day", (0, 1, 0)), (b"-178956970 years -8 mons", (INT32_MIN, 0, 0)),
    (b"178956970 years 7 mons", (INT32_MAX, 0, 0)), (b"2 years -3 days +04:00:00", (24, -3, 14_400_000_000_000)),
    (b"+1 mons", (1, 0, 0)), (b"2562047:47:16.854775", (0, 0, 9_223_372_036_854_775_000)),
    (b"infinity", (INT32_MAX, INT32_MAX, INT64_MAX)), (b"-infinity", (INT32_MIN, INT32_MIN, INT64_MIN)),
    (b"2562047:47:16.854776", SPECIAL), (b"2562047788:00:54.775807", SPECIAL), (b"-2562047788:00:54.775808", SPECIAL),
    (b"", ERROR), (b"3 days ", ERROR), (b" 3 days", ERROR), (b"3  days", ERROR), (b"3 day 1 mon", ERROR),
    (b"1 year 1 year", ERROR), (b"3", ERROR), (b"3 weeks", ERROR), (b"00:00:00 1 day", ERROR),
    (b"1:2:3", ERROR), (b"01:60:00", ERROR), (b"2562047788:00:54.775808", ERROR), (b"178956970 years 8 mons", ERROR),
    (b"P1Y", ERROR), (b"@ 1 day", ERROR), (b"1 days ago", ERROR), (b"2147483648 days", ERROR),
    (b"1 daysx", ERROR), (b"00:00:00.1234567", ERROR), (b"12345678901 days", ERROR),
])
bin_cases(C(K_INTERVAL), [
    (be("qii", 14_706_789_000, 3, 14), (14, 3, 14_706_789_000_000)), (be("qii", 0, 0, 0), (0, 0, 0)),
    (be("qii", INT64_MAX, INT32_MAX, INT32_MAX), (INT32_MAX, INT32_MAX, INT64_MAX)),
    (be("qii", INT64_MIN, INT32_MIN, INT32_MIN), (INT32_MIN, INT32_MIN, INT64_MIN)),
    (be("qii", INT64_MAX, 0, 0), SPECIAL), (be("qii", INT64_MIN, INT32_MIN, 0), SPECIAL),
    (be("qii", 9_223_372_036_854_775, 1, 2), (2, 1, 9_223_372_036_854_775_000)),
    (be("qii", -9_223_372_036_854_775, 1, 2), (2, 1, -9_223_372_036_854_775_000)),
    (be("qii", -9_223_372_036_854_776, 1, 2), SPECIAL), (be("qi", 0, 0), ERROR),
])

# uuid
U = bytes.fromhex("a0eebc999c0b4ef8bb6d6bb9bd380a11")
text_cases(C(K_UUID), [(b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", U), (b"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", U),
                       (b"a0eebc999c0b4ef8bb6d6bb9bd380a11", U), (b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", ERROR),
                       (b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", ERROR), (b"a0eebc999-c0b-4ef8-bb6d-6bb9bd380a11", ERROR),
                       (b"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", ERROR), (b"", ERROR)])
bin_cases(C(K_UUID), [(U, U), (U[:15], ERROR), (U + b"\x00", ERROR)])


# network types
def inet_send(family, bits, addr, is_cidr=0):
    return bytes([family, bits, is_cidr, len(addr)]) + addr


V4 = bytes([10, 0, 0, 1])


def V6(text):
    return ipaddress.IPv6Address(text).packed


text_cases(C(K_INET), [(b"10.0.0.1/24", "10.0.0.1/24")])
bin_cases(C(K_INET), [
    (inet_send(2, 32, bytes([1, 2, 3, 4])), "1.2.3.4"), (inet_send(2, 24, V4), "10.0.0.1/24"),
    (inet_send(2, 0, bytes(4)), "0.0.0.0/0"), (inet_send(3, 128, V6("::1")), "::1"),
    (inet_send(3, 128, V6("::")), "::"), (inet_send(3, 128, V6("::ffff:1.2.3.4")), "::ffff:1.2.3.4"),
    (inet_send(3, 128, V6("::1.2.3.4")), "::1.2.3.4"), (inet_send(3, 128, V6("::2")), "::2"),
    (inet_send(3, 128, V6("1::")), "1::"), (inet_send(3, 64, V6("fe80::1")), "fe80::1/64"),
    (inet_send(3, 128, V6("1:0:0:1:0:0:0:1")), "1:0:0:1::1"), (inet_send(3, 128, V6("1:0:0:1:1:0:0:1")), "1::1:1:0:0:1"),
    (inet_send(3, 128, V6("::ffff:0:0")), "::ffff:0.0.0.0"), (inet_send(3, 128, V6("::1:0:0")), "::1:0:0"),
    (inet_send(3, 128, V6("::ffff:1:2:3")), "::ffff:1:2:3"), (inet_send(3, 128, V6("1:2:3:4:5:6:7:8")), "1:2:3:4:5:6:7:8"),
    (inet_send(3, 128, V6("0:1::")), "0:1::"), (inet_send(3, 128, V6("1:0:2:3:4:5:6:7")), "1:0:2:3:4:5:6:7"),
    (inet_send(3, 128, V6("::1:0.0.0.1")), "::1:0:1"), (inet_send(3, 120, V6("::ffff:1.2.3.0")), "::ffff:1.2.3.0/120"),
    (inet_send(2, 32, V4, is_cidr=1), "10.0.0.1"),
    (inet_send(1, 32, V4), ERROR), (inet_send(2, 33, V4), ERROR), (inet_send(3, 129, bytes(16)), ERROR),
    (inet_send(2, 32, bytes(16)), ERROR), (inet_send(2, 32, V4)[:-1], ERROR), (inet_send(2, 32, V4) + b"\x00", ERROR),
    (bytes([2, 32, 0, 16]) + V4, ERROR), (b"\x02\x20", ERROR),
])
bin_cases(C(K_CIDR), [
    (inet_send(2, 8, bytes([10, 0, 0, 0]), 1), "10.0.0.0/8"), (inet_send(2, 32, bytes([1, 2, 3, 4]), 1), "1.2.3.4/32"),
    (inet_send(3, 0, bytes(16), 1), "::/0"), (inet_send(3, 64, V6("fe80::"), 1), "fe80::/64"),
    (inet_send(3, 128, V6("::1"), 1), "::1/128"), (inet_send(2, 0, bytes(4), 1), "0.0.0.0/0"),
    (inet_send(2, 8, V4, 1), ERROR), (inet_send(2, 31, bytes([10, 0, 0, 1]), 1), ERROR),
    (inet_send(3, 64, V6("fe80::1"), 1), ERROR), (inet_send(2, 0, bytes([0, 0, 0, 1]), 1), ERROR),
])
text_cases(C(K_MACADDR), [(b"08:00:2b:01:02:03", "08:00:2b:01:02:03")])
bin_cases(C(K_MACADDR), [(bytes.fromhex("08002b0102ff"), "08:00:2b:01:02:ff"), (bytes(5), ERROR), (bytes(8), ERROR)])
bin_cases(C(K_MACADDR8), [(bytes.fromhex("08002b01020304ab"), "08:00:2b:01:02:03:04:ab"), (bytes(6), ERROR)])

# arrays: text
text_cases(A(K_INT4), [
    (b"{1,NULL,3}", [1, None, 3]), (b"{}", []), (b"{-2147483648}", [INT32_MIN]), (b"{null,Null}", [None, None]),
    (b'{"1","2"}', [1, 2]), (b"{{1,2},{3,4}}", SPECIAL), (b"[0:1]={1,2}", SPECIAL), (b"[1:2]={1,2}", SPECIAL),
    (b"{1,2", ERROR), (b"{1,,2}", ERROR), (b"{,}", ERROR), (b'{"1}', ERROR), (b"{1}x", ERROR), (b"1,2", ERROR),
    (b"{1 ,2}", ERROR), (b"{ 1}", ERROR), (b"{1,{2}}", ERROR), (b"{1\\2}", ERROR), (b'{1"2"}', ERROR),
    (b"{x}", ERROR), (b"{", ERROR), (b"", ERROR), (b"{}}", ERROR), (b'{"2147483648"}', ERROR), (b'{"\\', ERROR),
])
text_cases(A(K_TEXT), [
    (b'{"a b",c,"\\"q\\"","\\\\",NULL,"NULL",""," x "}', ["a b", "c", '"q"', "\\", None, "NULL", "", " x "]),
    (b'{"{}","a,b"}', ["{}", "a,b"]), ("{é,☃}".encode(), ["é", "☃"]), (b'{"a"b}', ERROR), (b'{a"b"}', ERROR),
])
text_cases(A(K_DECIMAL, 10, 2), [(b"{1.5,-2.25,NULL}", [D("1.50"), D("-2.25"), None]), (b"{1.5,NaN}", SPECIAL),
                                 (b"{NaN,x}", SPECIAL), (b"{1.5,x}", ERROR)])
text_cases(A(K_NUMERIC_STR), [(b"{1.5,NaN,NULL}", ["1.5", "NaN", None])])
text_cases(A(K_TIMESTAMPTZ), [(b'{"2024-01-01 00:00:00+00",infinity,NULL}', [1_704_067_200_000_000, INT64_MAX, None]),
                              (b'{"294276-12-31 23:59:59.999999+00"}', SPECIAL)])
text_cases(A(K_BYTEA), [(b'{"\\\\x0102",NULL,"\\\\x"}', [b"\x01\x02", None, b""]), (b'{"\\\\x0"}', ERROR)])
text_cases(A(K_BOOL), [(b"{t,f,NULL}", [True, False, None]), (b"{t,x}", ERROR)])
text_cases(A(K_FLOAT8), [(b"{NaN,-0,1.5,Infinity}", [NAN, -0.0, 1.5, INF])])
text_cases(A(K_JSONB), [(b'{"{\\"a\\": 1}","[]"}', ['{"a": 1}', "[]"])])
text_cases(A(K_INTERVAL), [(b'{"1 day","-00:00:01"}', [(0, 1, 0), (0, 0, -1_000_000_000)])])
text_cases(A(K_CHAR), [(b'{a,"\\\\377",""}', ["a", "\\377", ""])])
text_cases(A(K_DATE), [(b"{2024-01-01,infinity,\"0001-01-01 BC\"}", [unix_days(2024, 1, 1), INT32_MAX, unix_days(0, 1, 1)])])
text_cases(A(K_UUID), [(b"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", [U])])

# arrays: binary
I4 = lambda v: be("i", v)  # noqa: E731
bin_cases(A(K_INT4), [
    (bytes.fromhex("00000001 00000001 00000017 00000003 00000001 00000004 00000001 ffffffff 00000004 00000003"),
     [1, None, 3]),
    (bytes.fromhex("00000000 00000000 00000017"), []), (array_send([I4(7)]), [7]),
    (array_send([], dims=[0], lbounds=[5]), []), (array_send([], dims=[0, 3]), []),
    (array_send([I4(1), I4(2)], dims=[2], lbounds=[0]), SPECIAL),
    (array_send([I4(1), I4(2), I4(3), I4(4)], dims=[2, 2]), SPECIAL),
    (array_send([I4(1), None], dims=[1, 2]), SPECIAL),
    # hostile
    (b"", ERROR), (bytes(11), ERROR), (be("iiI", -1, 0, 23), ERROR), (be("iiI", 7, 0, 23), ERROR),
    (be("iiI", 0, 2, 23), ERROR), (be("iiI", 0, 0, 23) + b"\x00", ERROR), (be("iiI", 1, 0, 23), ERROR),
    (be("iiIii", 1, 0, 23, 0x7FFFFFFF, 1), ERROR), (be("iiIii", 1, 0, 23, -1, 1), ERROR),
    (be("iiIii", 1, 0, 23, 2, 0x7FFFFFFF), ERROR), (be("iiIii", 1, 0, 23, 1, 1) + be("i", -2), ERROR),
    (be("iiIii", 1, 0, 23, 1, 1) + be("i", 0x7FFFFFFF) + b"\x00" * 4, ERROR),
    (be("iiIii", 1, 0, 23, 1, 1) + be("i", INT32_MIN), ERROR),
    (be("iiIii", 1, 0, 23, 1, 1) + be("i", 5) + b"\x00" * 4, ERROR),          # int4 of 5 bytes
    (array_send([I4(1)]) + b"\x00", ERROR), (array_send([I4(1), I4(2)])[:-1], ERROR),
    (be("iiIiiii", 2, 0, 23, 65536, 1, 65536, 1), ERROR),                        # > MaxArraySize
    (be("iiIiiii", 2, 0, 23, 2, 1, 1, 1) + I4(4) + I4(1), ERROR),               # special but truncated
    (array_send([I4(1), I4(2)], dims=[2], lbounds=[0]) + b"\x00", ERROR),
])
bin_cases(A(K_TEXT), [(array_send([b"a b", None, b"", "é".encode()], elem_oid=25), ["a b", None, "", "é"])])
bin_cases(A(K_DECIMAL, 10, 2), [(array_send([numeric_send("1.5"), None], 1700), [D("1.50"), None]),
                                (array_send([numeric_send("1.5"), numeric_send("NaN")], 1700), SPECIAL),
                                (array_send([numeric_send("NaN"), b"\x00"], 1700), SPECIAL),
                                (array_send([numeric_send("0.001")], 1700), ERROR)])
bin_cases(A(K_NUMERIC_STR), [(array_send([numeric_send("1.50"), numeric_send("NaN")], 1700), ["1.50", "NaN"])])
bin_cases(A(K_TIMESTAMPTZ), [(array_send([be("q", 0), be("q", INT64_MAX)], 1184), [EPOCH_US, INT64_MAX]),
                             (array_send([be("q", 0), be("q", END_TIMESTAMP - 1)], 1184), SPECIAL)])
bin_cases(A(K_BOOL), [(array_send([b"\x01", None, b"\x00"], 16), [True, None, False]),
                      (array_send([b"\x01\x01"], 16), ERROR)])
bin_cases(A(K_CHAR), [(array_send([b"\xff", b"\x00", b"a"], 18), ["\\377", "", "a"])])
bin_cases(A(K_INET), [(array_send([inet_send(3, 128, V6("::ffff:1.2.3.4"))], 869), ["::ffff:1.2.3.4"])])
bin_cases(A(K_JSONB), [(array_send([b'\x01{"a": 1}'], 3802), ['{"a": 1}']), (array_send([b"{}"], 3802), ERROR)])


def _case_id(c):
    ct, fmt, data, expected = c
    name = T.KIND_NAMES[ct.kind] + ("_" + T.KIND_NAMES[ct.elem_kind] if ct.kind == K_ARRAY else "")
    return f"{name}-{fmt}-{data[:24]!r}"


@pytest.mark.parametrize("impl", ["native", "reference"])
@pytest.mark.parametrize("c", CASES, ids=[_case_id(c) for c in CASES])
def test_example(impl, c):
    ct, fmt, data, expected = c
    got = outcome(impl, ct, fmt, data)
    assert same(got, expected), f"{got!r} != {expected!r}"


@pytest.mark.parametrize("c", CASES, ids=[_case_id(c) for c in CASES])
def test_example_twins(c):
    ct, fmt, data, _expected = c
    twins(ct, [(fmt, data)])
    twins(ct, [None, (fmt, data), None])


def test_examples_as_whole_columns():
    """All valid examples of a type in one column, nulls and specials mixed in: checks the
    builders' offsets/bitmaps and that specials leave nothing behind (e.g. an array whose
    2nd element was NaN must not leak its 1st element into the next row)."""
    by_type = {}
    for ct, fmt, data, expected in CASES:
        if expected is not ERROR:
            by_type.setdefault(ct, []).append(((fmt, data), expected))
    for ct, items in by_type.items():
        values, expect = [], []
        for (v, e) in items:
            values += [v, None]
            expect += [e, None]
        arr, specials = twins(ct, values)
        assert specials == [i for i, e in enumerate(expect) if e is SPECIAL]
        if arr.type == pa.binary():  # an UNKNOWN column turned binary: text values are bytes too
            expect = [e.encode() if isinstance(e, str) else e for e in expect]
        got = raw(arr)
        assert same(got, [None if e is SPECIAL else e for e in expect]), ct


def test_arrow_types():
    assert _native.parse_values(C(K_UNKNOWN), [("t", b"x")])[0].type == pa.string()
    assert _native.parse_values(C(K_UNKNOWN), [("t", b"x"), ("b", b"x")])[0].type == pa.binary()
    assert _native.parse_values(C(K_DECIMAL, 7, 2), [])[0].type == pa.decimal128(7, 2)
    assert _native.parse_values(A(K_TIMESTAMPTZ), [])[0].type == pa.list_(pa.timestamp("us", tz="UTC"))
    for k in range(K_ARRAY):
        ct = C(k, 10, 2) if k == K_DECIMAL else C(k)
        for impl in IMPLS.values():
            assert impl(ct, [None])[0].type == ct.arrow_type()


def test_kind_numbers_match_types_py():
    expected = {name: getattr(T, name) for name in dir(T) if name.startswith("K_")}
    assert _native.KIND_NUMBERS == expected


def test_kind_layouts_match_arrow_types():
    layouts = _native.kind_layouts()
    for k in range(K_ARRAY):
        t = (C(k, 10, 2) if k == K_DECIMAL else C(k)).arrow_type()
        layout, width = layouts[k]
        if t == pa.bool_():
            assert layout == 1
        elif pa.types.is_string(t) or pa.types.is_binary(t):
            assert (layout, width) == (2, 0), k
        else:
            assert layout == 0 and width == t.byte_width, k
    assert layouts[K_ARRAY] == (3, 0)


def test_bad_arguments():
    with pytest.raises(ValueError):
        _native.parse_values(C(K_DECIMAL, 40, 2), [])
    with pytest.raises(ValueError):
        _native.parse_values(ColumnType(K_ARRAY, elem_kind=K_ARRAY), [])
    with pytest.raises(ValueError):
        _native.parse_values(C(K_INT4), [("x", b"1")])
    err = pytest.raises(DecodeError, _native.parse_values, A(K_INT4), [("t", b"{x}")]).value
    assert "int4" in err.reason and err.offset is None


def test_memoryview_and_bytearray_inputs():
    buf = bytearray(b"xx12345yy")
    arr, _ = _native.parse_values(C(K_INT4), [("t", memoryview(buf)[2:7]), ("t", bytearray(b"7"))])
    assert arr.to_pylist() == [12345, 7]


# -- hostile binary: every truncation and single-byte corruption --------------------------------

HOSTILE_SOURCES = [
    (A(K_INT4), array_send([I4(1), None, I4(3)])),
    (A(K_TEXT), array_send([b"abc", b"", None], 25)),
    (A(K_DECIMAL, 10, 2), array_send([numeric_send("12.5"), numeric_send("-0.01")], 1700)),
    (A(K_NUMERIC_STR), array_send([numeric_send("123456.789"), None], 1700)),
    (A(K_INTERVAL), array_send([be("qii", 1, 2, 3)], 1186)),
    (A(K_INET), array_send([inet_send(3, 64, V6("fe80::1"))], 869)),
    (C(K_NUMERIC_STR), numeric_send("-12345678.000001")),
    (C(K_DECIMAL, 20, 6), numeric_send("-12345678.000001")),
    (C(K_INET), inet_send(3, 120, V6("::ffff:1.2.3.0"))),
    (C(K_TIMETZ), be("qi", 1, -19800)),
]


@pytest.mark.parametrize("ct,data", HOSTILE_SOURCES, ids=[str(i) for i in range(len(HOSTILE_SOURCES))])
def test_truncated_and_corrupted_binary(ct, data):
    for cut in range(len(data)):
        assert twins(ct, [("b", data[:cut])]) is ERROR
    for i in range(len(data)):
        for b in (0x00, 0x7F, 0x80, 0xFF):
            twins(ct, [("b", data[:i] + bytes([b]) + data[i + 1:])])


# -- Hypothesis: native == reference == expected ---------------------------------------------

@FAST
@given(st.integers(INT64_MIN, INT64_MAX))
def test_hyp_int8(v):
    arr, _ = twins(C(K_INT8), [("t", str(v).encode()), ("b", be("q", v))])
    assert raw(arr) == [v, v]


@FAST
@given(st.integers(-40000, 40000), st.sampled_from([K_INT2, K_INT4, K_OID]))
def test_hyp_small_ints(v, kind):
    lo, hi = {K_INT2: (-(2**15), 2**15 - 1), K_INT4: (INT32_MIN, INT32_MAX), K_OID: (0, 2**32 - 1)}[kind]
    res = twins(C(kind), [("t", str(v).encode())])
    assert (res is ERROR) == (not lo <= v <= hi)


@FAST
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_hyp_float8(x):
    forms = [repr(x), "%.17g" % x, "%.17e" % x] if math.isfinite(x) else []
    pg = "NaN" if math.isnan(x) else "Infinity" if x == INF else "-Infinity" if x == -INF else repr(x)
    forms = [f for f in forms if "inf" not in f and "nan" not in f]
    values = [("t", pg.encode()), ("b", be("d", x))] + [("t", f.encode()) for f in forms]
    arr, _ = twins(C(K_FLOAT8), values)
    for v in raw(arr):
        assert same(v, x)


@FAST
@given(st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_hyp_float4(x):
    f = np.float32(x)
    pg = "NaN" if math.isnan(x) else "Infinity" if x == INF else "-Infinity" if x == -INF else str(f)
    values = [("t", pg.encode()), ("b", be("f", x))]
    if math.isfinite(x):
        values += [("t", ("%.9g" % x).encode()), ("t", repr(float(x)).encode())]
    arr, _ = twins(C(K_FLOAT4), values)
    for v in raw(arr):
        assert same(v, x)


def _float_texts(rnd, count):
    """Decimal texts that stress correct rounding: random doubles in several formats,
    random significands of up to 19 digits with any exponent, exact midpoints between
    adjacent doubles (ties to even), and long (> 19 digit) significands."""
    out = []
    for _ in range(count):
        k = rnd.random()
        if k < 0.3:
            x = struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
            if not math.isfinite(x):
                continue
            out.append(rnd.choice([repr(x), "%.17g" % x, "%.16e" % x, "%.15g" % x]))
        elif k < 0.6:
            nd = rnd.randint(1, 19)
            out.append(f"{rnd.randint(1, 10**nd - 1)}e{rnd.randint(-345, 310)}")
        elif k < 0.8:
            x = float(rnd.randint(2**53, 10**19 - 10**6))
            mid = (int(x) + int(math.nextafter(x, math.inf))) // 2
            out.append(rnd.choice([str(mid), str(mid + 1), str(mid - 1), f"{str(mid)[:-3]}.{str(mid)[-3:]}e3"]))
        else:
            out.append(f"{rnd.randint(1, 10**40)}.{rnd.randint(0, 10**20)}e{rnd.randint(-360, 290)}")
    return [t for t in out if len(t) <= 128 and math.isfinite(float(t))]


def test_float8_text_bulk_against_python():
    """Eisel-Lemire / Clinger / strtod paths against Python's correctly rounded float()."""
    import random
    texts = _float_texts(random.Random(20240501), 60000)
    arr, _ = _native.parse_values(C(K_FLOAT8), [("t", t.encode()) for t in texts])
    got = np.asarray(arr.view(pa.uint64()))
    want = np.array([struct.unpack("<Q", struct.pack("<d", float(t)))[0] for t in texts], dtype=np.uint64)
    bad = [texts[i] for i in np.nonzero(got != want)[0][:5]]
    assert not bad


def test_float4_text_bulk_against_reference():
    """float32: exact midpoints between adjacent floats and nearby values vs the Fraction reference."""
    import random
    rnd = random.Random(7)
    texts = []
    while len(texts) < 3000:
        b = rnd.getrandbits(31)
        x = struct.unpack("<f", struct.pack("<I", b))[0]
        y = struct.unpack("<f", struct.pack("<I", b + 1))[0]
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        mid = (x + y) / 2  # exact in double
        t = rnd.choice([str(Decimal(mid)), repr(mid), "%.9g" % x, "%.8e" % (mid * (1 + (rnd.random() - 0.5) * 1e-9))])
        if len(t) <= 128:
            texts.append(t)
    twins(C(K_FLOAT4), [("t", t.encode()) for t in texts if abs(float(t)) < 3.4028234e38])


@FAST
@given(st.text(alphabet="0123456789.-+eE", max_size=30))
def test_hyp_float_like_text(s):
    twins(C(K_FLOAT4), [("t", s.encode())])
    twins(C(K_FLOAT8), [("t", s.encode())])
    twins(C(K_DECIMAL, 12, 4), [("t", s.encode())])


@FAST
@given(st.data())
def test_hyp_decimal(data):
    precision = data.draw(st.integers(1, 38))
    scale = data.draw(st.integers(0, precision))
    v = data.draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    d = Decimal(f"{v}E-{scale}")
    text = f"{d:.{scale}f}".encode()
    ct = C(K_DECIMAL, precision, scale)
    arr, specials = twins(ct, [("t", text), ("b", numeric_send(d, dscale=scale)), ("b", numeric_send(d.normalize(decimal.Context(prec=100))))])
    assert raw(arr) == [d, d, d] and not specials
    arr, _ = twins(C(K_NUMERIC_STR), [("t", text), ("b", numeric_send(d, dscale=scale))])
    assert raw(arr) == [text.decode()] * 2


@FAST
@given(st.integers(-(10**60), 10**60), st.integers(0, 80), st.integers(0, 80))
def test_hyp_numeric_str(v, scale, dscale):
    d = Decimal(f"{v}E-{scale}")
    arr, _ = twins(C(K_NUMERIC_STR), [("b", numeric_send(d, dscale=dscale))])
    exact = f"{d:f}"
    whole, _, frac = exact.partition(".")
    frac = frac[:dscale].ljust(dscale, "0")
    text = whole.lstrip("-") + ("." + frac if dscale else "")
    if d < 0 and (whole.strip("-0") or frac.strip("0")):
        text = "-" + text
    assert raw(arr) == [text]


@FAST
@given(st.data())
def test_hyp_decimal_text_and_binary(data):
    """numeric(p, s) -> decimal128(p, s) for every precision (the <= 18-digit path and
    the 128-bit one), from text with any number of sent fraction digits and from
    binary: both implementations agree with Python's Decimal (in a context wide enough
    for 38 digits: the default one has 28 and raises on quantize)."""
    with decimal.localcontext(decimal.Context(prec=80)):
        _check_decimal_text_and_binary(data)


def _check_decimal_text_and_binary(data):
    precision = data.draw(st.integers(1, 38))
    scale = data.draw(st.integers(0, precision))
    v = data.draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    d = Decimal(v).scaleb(-scale)
    sent = data.draw(st.integers(0, scale + 3))       # fraction digits as sent
    text = f"{d:.{sent}f}".encode()
    if sent < scale and Decimal(text.decode()) != d:  # rounded away: a different value
        d = Decimal(text.decode())
    assume(abs(d.scaleb(scale)) < 10**precision)
    arr, specials = twins(C(K_DECIMAL, precision, scale),
                          [("t", text), ("b", numeric_send(d, dscale=max(sent, 0)))])
    assert not specials
    assert raw(arr) == [d.quantize(Decimal(1).scaleb(-scale))] * 2


@FAST
@given(st.data())
def test_hyp_decimal_binary_raw_forms(data):
    """Any numeric_send form (leading and trailing zero groups, a digit above 9999, any
    weight, sign and dscale) into decimal128(p <= 18, s): native ==
    reference, a value is accepted exactly when it is exact at the scale and within the
    precision, and what is accepted is the digits' value."""
    precision = data.draw(st.integers(1, 18))
    scale = data.draw(st.integers(0, precision))
    nd = data.draw(st.integers(0, 5))
    digits = data.draw(st.lists(st.one_of(st.integers(0, 9999), st.sampled_from([0, 10000, 65535])),
                                min_size=nd, max_size=nd))
    weight = data.draw(st.integers(-7, 7))
    sign = data.draw(st.sampled_from([0, 0x4000, 0xC000, 0xD000, 0x2000]))
    dscale = data.draw(st.sampled_from([0, 2, 7, 0x4000]))
    payload = be("hhHH", nd, weight, sign, dscale) + b"".join(be("H", d) for d in digits)
    res = twins(C(K_DECIMAL, precision, scale), [("b", payload)])
    with decimal.localcontext(decimal.Context(prec=80)):
        value = sum((Decimal(d) * Decimal(10000) ** (weight - i) for i, d in enumerate(digits)),
                    Decimal(0))
        if sign == 0x4000:
            value = -value
        scaled = value.scaleb(scale)
        ok = (max(digits, default=0) <= 9999 and sign in (0, 0x4000) and dscale < 0x4000
              and scaled == scaled.to_integral_value() and abs(scaled) < 10**precision)
    if sign in (0xC000, 0xD000) and max(digits, default=0) <= 9999:
        assert res is not ERROR and res[1] == [0]          # NaN / Infinity: special
        return
    assert (res is not ERROR) == ok, (res, value)
    if ok:
        assert not res[1] and raw(res[0]) == [value]


@FAST
@given(st.integers(MIN_DATE, END_DATE - 1))
def test_hyp_date(pg_days):
    arr, _ = twins(C(K_DATE), [("t", pg_date_text(pg_days + EPOCH_DAYS).encode()), ("b", be("i", pg_days))])
    assert raw(arr) == [pg_days + EPOCH_DAYS] * 2


@FAST
@given(st.dates())
def test_hyp_date_against_datetime(d):
    unix = (d - datetime.date(1970, 1, 1)).days
    arr, _ = twins(C(K_DATE), [("t", d.isoformat().encode())])
    assert raw(arr) == [unix]


@FAST
@given(st.integers(0, 86_400_000_000))
def test_hyp_time(us):
    secs, frac = divmod(us, 1_000_000)
    text = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:" + pg_seconds(secs % 60, frac)
    arr, specials = twins(C(K_TIME), [("t", text.encode()), ("b", be("q", us))])
    if us == 86_400_000_000:        # 24:00:00: no time64 form
        assert raw(arr) == [None, None] and len(specials) == 2
    else:
        assert raw(arr) == [us, us]


@FAST
@given(st.integers(0, 86_400_000_000), st.integers(-57599, 57599))
def test_hyp_timetz(us, zone_west):
    secs, frac = divmod(us, 1_000_000)
    text = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:" + pg_seconds(secs % 60, frac) + pg_zone(-zone_west)
    arr, _ = twins(C(K_TIMETZ), [("b", be("qi", us, zone_west))])
    assert raw(arr) == [text]


@FAST
@given(st.integers(MIN_TIMESTAMP, END_TIMESTAMP - 1), st.one_of(st.just(0), st.integers(-57599, 57599)))
def test_hyp_timestamp(pg_us, east):
    expect = ts_expect(pg_us)
    vals = [("t", pg_timestamp_text(pg_us, east).encode()), ("b", be("q", pg_us))]
    arr, specials = twins(C(K_TIMESTAMPTZ), vals)
    arr2, specials2 = twins(C(K_TIMESTAMP), [("t", pg_timestamp_text(pg_us, None).encode()), ("b", be("q", pg_us))])
    for a, s in ((arr, specials), (arr2, specials2)):
        if expect is SPECIAL:
            assert s == [0, 1]
        else:
            assert raw(a) == [expect, expect] and not s


@FAST
@given(st.datetimes(timezones=st.just(datetime.timezone.utc)))
def test_hyp_timestamp_against_datetime(dt):
    us = (dt - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(microseconds=1)
    text = dt.strftime("%Y-%m-%d %H:%M:%S") + (f".{dt.microsecond:06d}".rstrip("0") if dt.microsecond else "")
    text = ("0" * (4 - len(text.split("-")[0]))) + text + "+00"
    arr, _ = twins(C(K_TIMESTAMPTZ), [("t", text.encode())])
    assert raw(arr) == [us]


@FAST
@given(st.integers(INT32_MIN, INT32_MAX), st.integers(INT32_MIN, INT32_MAX), st.integers(INT64_MIN + 1, INT64_MAX))
def test_hyp_interval(months, days, us):
    expect = iv_expect(months, days, us)
    text = pg_interval_text(months, days, us)
    arr, specials = twins(C(K_INTERVAL), [("t", text.encode()), ("b", be("qii", us, days, months))])
    if expect is SPECIAL:
        assert specials == [0, 1]
    else:
        assert raw(arr) == [expect, expect]


@FAST
@given(st.integers(-1000, 1000), st.integers(-1000, 1000), st.integers(-10**13, 10**13))
def test_hyp_interval_small(months, days, us):
    text = pg_interval_text(months, days, us)
    arr, _ = twins(C(K_INTERVAL), [("t", text.encode())])
    assert raw(arr) == [(months, days, us * 1000)]


@FAST
@given(st.binary(min_size=16, max_size=16), st.booleans())
def test_hyp_uuid(b, upper):
    text = str(uuid.UUID(bytes=b))
    arr, _ = twins(C(K_UUID), [("t", (text.upper() if upper else text).encode()), ("b", b),
                               ("t", text.replace("-", "").encode())])
    assert raw(arr) == [b] * 3


@FAST
@given(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16), st.integers(0, 128))
def test_hyp_inet(addr, bits):
    maxbits = 8 * len(addr)
    bits = min(bits, maxbits)
    arr, _ = twins(C(K_INET), [("b", inet_send(2 if len(addr) == 4 else 3, bits, addr))])
    ip = ipaddress.ip_address(addr)
    assert ipaddress.ip_address(raw(arr)[0].split("/")[0]) == ip
    net = ipaddress.ip_network((int.from_bytes(addr, "big") >> (maxbits - bits) << (maxbits - bits)
                                if bits else 0, bits)) if len(addr) == 4 else None
    if net is not None:
        arr, _ = twins(C(K_CIDR), [("b", inet_send(2, bits, net.network_address.packed, 1))])
        assert raw(arr) == [str(net)]


@FAST
@given(st.binary(max_size=40))
def test_hyp_random_binary_every_kind(data):
    for kind in range(K_ARRAY):
        ct = C(kind, 12, 3) if kind == K_DECIMAL else C(kind)
        twins(ct, [("b", data)])
    twins(A(K_INT4), [("b", data)])


@FAST
@given(st.binary(max_size=40))
def test_hyp_random_text_every_kind(data):
    for kind in range(K_ARRAY):
        ct = C(kind, 12, 3) if kind == K_DECIMAL else C(kind)
        twins(ct, [("t", data)])
    twins(A(K_TEXT), [("t", data)])


ELEMENT_BYTES = st.one_of(st.binary(max_size=12), st.sampled_from([I4(1), I4(-1), b"", b"\x00\x00"]))


@FAST
@given(st.lists(st.one_of(st.none(), ELEMENT_BYTES), max_size=6), st.integers(-1, 8), st.integers(-2, 3),
       st.lists(st.integers(-2, 8), max_size=3), st.sampled_from([K_INT4, K_TEXT, K_INTERVAL, K_DECIMAL, K_BOOL]),
       st.integers(0, 3))
def test_hyp_hostile_binary_arrays(elements, ndim, flags, dims, elem_kind, lb):
    """Structured but inconsistent headers, lengths and elements: never a crash, same answer."""
    data = be("iiI", ndim, flags, 23)
    for d in dims:
        data += be("ii", d, lb)
    for e in elements:
        data += be("i", -1) if e is None else be("i", len(e)) + e
    ct = A(elem_kind, 10, 2) if elem_kind == K_DECIMAL else A(elem_kind)
    twins(ct, [("b", data)])
    twins(ct, [("b", data[: len(data) // 2])])


@FAST
@given(st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=6))
def test_hyp_text_arrays(items):
    """PostgreSQL's array_out quoting, then parse back."""
    def quote(s):
        if s == "" or s.lower() == "null" or any(c in s for c in '{},"\\ \t\n\r\v\f'):
            return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return s

    assume(all("\x00" not in s for s in items if s is not None))
    text = "{" + ",".join("NULL" if s is None else quote(s) for s in items) + "}"
    arr, _ = twins(A(K_TEXT), [("t", text.encode())])
    assert raw(arr) == [items]
    binary = array_send([None if s is None else s.encode() for s in items], 25)
    arr, _ = twins(A(K_TEXT), [("b", binary)])
    assert raw(arr) == [items]


@FAST
@given(st.text(alphabet='{}",\\NULnul123 [:]=x', max_size=20))
def test_hyp_array_text_fuzz(s):
    twins(A(K_INT4), [("t", s.encode())])
    twins(A(K_TEXT), [("t", s.encode())])


@FAST
@given(st.binary(max_size=30))
def test_hyp_bytea(b):
    escape = "".join(chr(c) if 0x20 <= c < 0x7F and c != 0x5C else "\\\\" if c == 0x5C else f"\\{c:03o}" for c in b)
    arr, _ = twins(C(K_BYTEA), [("t", b"\\x" + b.hex().encode()), ("t", escape.encode()), ("b", b)])
    assert raw(arr) == [b] * 3


@FAST
@given(st.text(alphabet="0123456789 -+:.yearmonsdayinfty", max_size=40))
def test_hyp_interval_text_fuzz(s):
    twins(C(K_INTERVAL), [("t", s.encode())])


@FAST
@given(st.text(alphabet="0123456789 -+:.BC", max_size=40))
def test_hyp_datetime_text_fuzz(s):
    for k in (K_DATE, K_TIME, K_TIMESTAMP, K_TIMESTAMPTZ):
        twins(C(k), [("t", s.encode())])


# -- a real PostgreSQL server --------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg_conn():
    from pgoutput_fast.local_server import PostgresServer, find_bindir

    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries")
    with PostgresServer() as server:
        conn = server.connect()
        with conn.cursor() as cur:
            cur.execute("SET DateStyle = ISO; SET IntervalStyle = postgres; SET TimeZone = 'UTC'; "
                        "SET extra_float_digits = 3; SET bytea_output = hex")
        yield conn
        conn.close()


def _us(seconds):
    """Exact microseconds from extract(epoch ...) (a numeric)."""
    if seconds is None:
        return None
    if seconds.is_infinite():
        return INT64_MAX if seconds > 0 else INT64_MIN
    return int(seconds * 1_000_000)


# Seconds since 2000-01-01 UTC as an exact numeric. (extract(epoch from v) itself is not
# exact where the Unix microseconds pass int64: the server returns 9223372036854.775800
# for '294247-01-10 04:00:54.775807'.) NULL for +-infinity, told apart by the 2nd column.
TS_EXPECT_SQL = ("CASE WHEN isfinite(v) THEN extract(epoch from v - '2000-01-01 00:00:00+00') END",
                 "v > '2000-01-01 00:00:00+00'")
TS_ARRAY_EXPECT_SQL = (
    "ARRAY(SELECT CASE WHEN isfinite(x) THEN extract(epoch from x - '2000-01-01 00:00:00+00') END "
    "FROM unnest(v) x)",
    "ARRAY(SELECT x > '2000-01-01 00:00:00+00' FROM unnest(v) x)")


def _ts_expect(seconds, positive):
    """Unix microseconds (SPECIAL past int64), or the infinity sentinels."""
    if positive is None:
        return None
    if seconds is None:
        return INT64_MAX if positive else INT64_MIN
    return ts_expect(_us(seconds))


def _ts_array_expect(seconds, positive):
    items = [_ts_expect(s, p) for s, p in zip(seconds, positive)]
    return SPECIAL if SPECIAL in items else items


def _char_expect(code):
    b = code & 0xFF
    return "" if b == 0 else chr(b) if b < 0x80 else f"\\{b:03o}"


def _interval_expect(year, month, day, hour, minute, micro):
    months = int(year) * 12 + int(month)
    us = int(hour) * 3_600_000_000 + int(minute) * 60_000_000 + int(micro)
    return iv_expect(months, int(day), us)


def _array(items, conv):
    if items is None:
        return None
    out = [None if x is None else conv(x) for x in items]
    return SPECIAL if any(x is SPECIAL for x in out) else out   # the whole array is special


def _time_us(seconds):
    us = _us(seconds)
    return SPECIAL if us == 86_400_000_000 else us     # 24:00:00: outside Arrow's time64


def _dec(value):
    return SPECIAL if value.is_nan() else value


# (sql type, column type, send function, literals, SQL expression(s) of the expected value,
#  Python conversion of those to the expected parsed value; None -> the text output itself)
PG_TYPES = [
    ("bool", C(K_BOOL), "boolsend", ["true", "false"], "v", bool),
    ("int2", C(K_INT2), "int2send", ["-32768", "32767", "0", "42"], "v", int),
    ("int4", C(K_INT4), "int4send", ["-2147483648", "2147483647", "0"], "v", int),
    ("int8", C(K_INT8), "int8send", ["-9223372036854775808", "9223372036854775807", "1"], "v", int),
    ("oid", C(K_OID), "oidsend", ["0", "4294967295", "2147483648"], "v::int8", int),
    ("float4", C(K_FLOAT4), "float4send",
     ["NaN", "Infinity", "-Infinity", "-0", "0", "1.5", "0.1", "3.4028235e+38", "1.401298e-45",
      "1.17549435e-38", "-123.456", "1e+20", "1e-07", "16777217", "3.1415927"], "v::float8", float),
    ("float8", C(K_FLOAT8), "float8send",
     ["NaN", "Infinity", "-Infinity", "-0", "0.1", "1e-07", "1e+20", "5e-324", "1.7976931348623157e+308",
      "2.2250738585072014e-308", "-1234567.891", "123456789012345680000", "0.30000000000000004",
      "1e15", "1e16", "123456789012345.6"], "v", float),
    ("numeric", C(K_NUMERIC_STR), "numeric_send",
     ["0", "-0", "1234.500", "-0.001", "NaN", "Infinity", "-Infinity", "1e100", "0.0000000001",
      "123456789012345678901234567890.123456789", "-99999.99999", "10000", "0.10", "-1e-20",
      "100000000.00000000"], None, None),
    ("numeric(10,3)", C(K_DECIMAL, 10, 3), "numeric_send",
     ["1234.5", "-0.001", "0", "9999999.999", "-9999999.999", "NaN", "0.0005", "-0.0005"], "v", _dec),
    ("numeric(38,0)", C(K_DECIMAL, 38, 0), "numeric_send",
     ["99999999999999999999999999999999999999", "-1", "-99999999999999999999999999999999999999"], "v", _dec),
    ("numeric(38,10)", C(K_DECIMAL, 38, 10), "numeric_send",
     ["1234567890123456789012345678.0123456789", "-0.0000000001", "NaN"], "v", _dec),
    ("numeric(5,5)", C(K_DECIMAL, 5, 5), "numeric_send", ["0.12345", "-0.00001", "0"], "v", _dec),
    ("text", C(K_TEXT), "textsend", ["''", "'hello'", "'héllo ☃'", "E'tab\\there'", "'q\"\\'", "'NULL'"], "v", str),
    ("varchar(5)", C(K_TEXT), "varcharsend", ["'ab'", "'abcde'"], "v", str),
    ("name", C(K_TEXT), "namesend", ["'pg_class'", "'é'"], "v", str),
    ("bpchar(5)", C(K_BPCHAR), "bpcharsend", ["'ab'", "''", "'abcde'"], "v", str),
    ("xml", C(K_TEXT), "xml_send", ["'<a>1</a>'"], "v::text", str),
    ('"char"', C(K_CHAR), "charsend", ["'a'", "'A'", "''", "'\\377'", "'\\200'", "'\\177'"], "v::int4", _char_expect),
    ("bytea", C(K_BYTEA), "byteasend", ["'\\x'", "'\\x00ff41'", "'hello'", "'\\x5c'", "'\\x0d0a7f80'"],
     "v", bytes),
    ("json", C(K_JSON), "json_send", ["'{\"b\":1, \"a\":2}'", "'[1, 2]'", "'\"x\"'", "'null'"], "v::text", str),
    ("jsonb", C(K_JSONB), "jsonb_send", ["'{\"b\":1, \"a\":2, \"a\":3}'", "'[1, 2]'", "'\"x\"'", "'{}'"],
     "v::text", str),
    ("date", C(K_DATE), "date_send",
     ["'2024-02-29'", "'1970-01-01'", "'0001-01-01 BC'", "'4714-11-24 BC'", "'5874897-12-31'", "'infinity'",
      "'-infinity'", "'10000-01-01'", "'0044-03-15 BC'"],
     ("CASE WHEN isfinite(v) THEN v - DATE '1970-01-01' END", "v = 'infinity'"),
     lambda d, inf: d if d is not None else INT32_MAX if inf else INT32_MIN),
    ("time", C(K_TIME), "time_send",
     ["'00:00:00'", "'23:59:59.999999'", "'24:00:00'", "'12:34:56.5'", "'00:00:00.000001'"],
     "extract(epoch from v)", _time_us),
    ("timetz", C(K_TIMETZ), "timetz_send",
     ["'12:00:00+05:30'", "'00:00:00+00'", "'23:59:59.5-08'", "'24:00:00-15:59:59'", "'12:00:00.000001+00:00:01'",
      "'13:00-1:30'", "'00:00:00.1+15:59'"], None, None),
    ("timestamp", C(K_TIMESTAMP), "timestamp_send",
     ["'2000-01-01 00:00:00'", "'1970-01-01 00:00:00.000001'", "'0044-03-15 12:00:00 BC'",
      "'4714-11-24 00:00:00 BC'", "'294276-12-31 23:59:59.999999'", "'294247-01-10 04:00:54.775806'",
      "'294247-01-10 04:00:54.775807'", "'infinity'", "'-infinity'", "'1900-02-28 23:59:59.5'"],
     TS_EXPECT_SQL, _ts_expect),
    ("timestamptz", C(K_TIMESTAMPTZ), "timestamptz_send",
     ["'2024-01-01 10:00:00+05:30'", "'1849-12-31 19:03:58'", "'0044-03-15 12:00:00 BC'",
      "'4714-11-24 00:00:00+00 BC'", "'294276-12-31 23:59:59.999999+00'", "'infinity'", "'-infinity'",
      "'1900-06-01 12:00:00'", "'2024-07-01 12:00:00.123456'"],
     TS_EXPECT_SQL, _ts_expect),
    ("interval", C(K_INTERVAL), "interval_send",
     ["'1 year 2 mons 3 days 04:05:06.789'", "'-1 days +02:03:00'", "'00:00:00'", "'-00:00:01.5'", "'3 days'",
      "'1 mon -00:00:00.000001'", "'100:00:00'", "'-178956970 years -8 mons'", "'1 day -1 mons'",
      "'178956970 years 7 mons 2147483647 days 2562047788:00:54.775806'", "'-2 years +3 days -04:00:00'",
      "'2562047:47:16.854776'"],
     ("extract(year from v)", "extract(month from v)", "extract(day from v)", "extract(hour from v)",
      "extract(minute from v)", "extract(microseconds from v)"), _interval_expect),
    ("uuid", C(K_UUID), "uuid_send",
     ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'",
      "'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF'"], "v::text", lambda s: uuid.UUID(s).bytes),
    ("inet", C(K_INET), "inet_send",
     ["'1.2.3.4'", "'10.0.0.1/24'", "'0.0.0.0/0'", "'::1'", "'::'", "'::ffff:1.2.3.4'", "'::1.2.3.4'", "'1::'",
      "'fe80::1/64'", "'2001:db8::1:0:0:1'", "'1:0:0:1:0:0:0:1'", "'1:0:0:1:1:0:0:1'", "'::2'", "'::ffff:0:0'",
      "'1:2:3:4:5:6:7:8'", "'0:0:0:0:0:1:0:0'", "'::ffff:1:2:3'", "'::0.0.1.2'", "'::1.0.0.0'", "'0:1::'",
      "'::ffff:1.2.3.4/120'", "'255.255.255.255/31'"], None, None),
    ("cidr", C(K_CIDR), "cidr_send",
     ["'10.0.0.0/8'", "'1.2.3.4/32'", "'::/0'", "'fe80::/64'", "'::ffff:1.2.3.0/120'", "'2001:db8::/32'",
      "'1.2.3.4'", "'::1'"], None, None),
    ("macaddr", C(K_MACADDR), "macaddr_send", ["'08:00:2b:01:02:03'", "'FF-FF-FF-FF-FF-FF'"], None, None),
    ("macaddr8", C(K_MACADDR8), "macaddr8_send", ["'08:00:2b:01:02:03:04:05'", "'08:00:2b:01:02:03'"], None, None),
    ("int4[]", A(K_INT4), "array_send",
     ["'{}'", "'{1,NULL,3}'", "'{{1,2},{3,4}}'", "'[0:1]={1,2}'", "'{-2147483648}'", "'{NULL}'"],
     ("CASE WHEN array_ndims(v) > 1 OR array_lower(v, 1) <> 1 THEN NULL ELSE v END",
      "array_ndims(v) > 1 OR array_lower(v, 1) <> 1"),
     lambda v, special: SPECIAL if special else v),
    ("text[]", A(K_TEXT), "array_send",
     ["'{}'", "ARRAY['a b', 'c', '\"q\"', '\\', NULL, 'NULL', '', ' x ', '{}', 'a,b', 'é']"], "v", list),
    ("numeric(10,2)[]", A(K_DECIMAL, 10, 2), "array_send", ["'{1.5,-2.25,NULL}'", "'{1.5,NaN}'", "'{}'"],
     ("v", "'NaN' = ANY(v)"), lambda v, nan: SPECIAL if nan else v),
    ("numeric[]", A(K_NUMERIC_STR), "array_send", ["'{1.50,NaN,NULL,-Infinity,0.000}'"],
     "v::text[]", list),
    ("timestamptz[]", A(K_TIMESTAMPTZ), "array_send",
     ["ARRAY['2024-01-01 00:00:00+00', 'infinity', NULL, '0044-03-15 12:00:00 BC']::timestamptz[]",
      "ARRAY['294276-12-31 23:59:59.999999+00']::timestamptz[]"],
     TS_ARRAY_EXPECT_SQL, _ts_array_expect),
    ("bool[]", A(K_BOOL), "array_send", ["'{t,f,NULL}'"], "v", list),
    ("bytea[]", A(K_BYTEA), "array_send", ["ARRAY['\\x0102'::bytea, NULL, '\\x'::bytea, '\\x5c22'::bytea]"],
     "v", lambda items: _array(items, bytes)),
    ("date[]", A(K_DATE), "array_send", ["'{2024-01-01,infinity,\"0001-01-01 BC\",NULL}'"],
     "ARRAY(SELECT CASE WHEN isfinite(x) THEN x - DATE '1970-01-01' WHEN x > '2000-01-01' THEN 2147483647 "
     "WHEN x < '2000-01-01' THEN -2147483648 END FROM unnest(v) x)", list),
    ("uuid[]", A(K_UUID), "array_send", ["'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'"],
     "v::text[]", lambda items: _array(items, lambda s: uuid.UUID(s).bytes)),
    ("float8[]", A(K_FLOAT8), "array_send", ["'{NaN,-0,1.5,Infinity,0.1}'"], "v", list),
    ("float4[]", A(K_FLOAT4), "array_send", ["'{NaN,-0,1.5,-Infinity,0.1}'"], "v::float8[]", list),
    ("jsonb[]", A(K_JSONB), "array_send", ["ARRAY['{\"a\": 1}'::jsonb, '[]', NULL]"], "v::text[]", list),
    ("interval[]", A(K_INTERVAL), "array_send", ["ARRAY['1 day'::interval, '-00:00:01', NULL, '1 mon 2 days 00:00:01']"],
     ("ARRAY(SELECT extract(month from x) FROM unnest(v) x)", "ARRAY(SELECT extract(day from x) FROM unnest(v) x)",
      "ARRAY(SELECT extract(epoch from x - justify_days(date_trunc('day', x))) FROM unnest(v) x)"),
     lambda mo, d, s: [None if a is None else (int(a), int(b), _us(c) * 1000) for a, b, c in zip(mo, d, s)]),
    ("inet[]", A(K_INET), "array_send", ["'{::ffff:1.2.3.4,10.0.0.1/8,NULL,1.2.3.4}'"],
     "ARRAY(SELECT CASE WHEN x IS NOT NULL THEN format('%s', x) END FROM unnest(v) x)", list),
    ('"char"[]', A(K_CHAR), "array_send", ["ARRAY['a'::\"char\", '\\377', '']"],
     "ARRAY(SELECT x::int4 FROM unnest(v) x)", lambda items: _array(items, _char_expect)),
    ("varchar[]", A(K_TEXT), "array_send", ["'{a,\"b c\"}'"], "v", list),
    ("int2[]", A(K_INT2), "array_send", ["'{1,-32768}'"], "v", list),
    ("int8[]", A(K_INT8), "array_send", ["'{1,-9223372036854775808}'"], "v", list),
    ("oid[]", A(K_OID), "array_send", ["'{1,4294967295}'"], "v::int8[]", list),
    ("time[]", A(K_TIME), "array_send", ["'{24:00:00,00:00:00.5}'"], "ARRAY(SELECT extract(epoch from x) FROM unnest(v) x)",
     lambda items: _array(items, _time_us)),
    ("timetz[]", A(K_TIMETZ), "array_send", ["'{12:00:00+05:30}'"], "v::text[]", list),
    ("macaddr[]", A(K_MACADDR), "array_send", ["'{08:00:2b:01:02:03}'"], "v::text[]", list),
]


def _server_rows(cur, sqltype, send, literals, expect_sql):
    exprs = [expect_sql] if isinstance(expect_sql, str) else list(expect_sql or ())
    quoted = [lit if lit[:1] in ("'", "E") or lit.startswith("ARRAY") else f"'{lit}'" for lit in literals]
    values = ", ".join(f"(({lit})::{sqltype})" for lit in quoted)
    select = ", ".join([f"format('%s', v)", f"{send}(v)"] + exprs)
    cur.execute(f"SELECT {select} FROM (VALUES {values}) AS t(v)")
    return cur.fetchall()


def _check_server_type(cur, sqltype, ct, send, literals, expect_sql, expect_fn):
    rows = _server_rows(cur, sqltype, send, literals, expect_sql)
    texts = [("t", r[0].encode()) for r in rows]
    bins = [("b", bytes(r[1])) for r in rows]
    if expect_fn is None:  # the server's text output is the expected value
        expected = [r[0] for r in rows]
    else:
        expected = [expect_fn(*r[2:]) for r in rows]
    got = []
    for values in (texts, bins):
        arr, specials = twins(ct, values)
        got.append(raw(arr))
        assert specials == [i for i, e in enumerate(expected) if e is SPECIAL], (sqltype, values)
    want = [None if e is SPECIAL else e for e in expected]
    for i, lit in enumerate(literals):
        assert same(got[0][i], want[i]), f"{sqltype} {lit}: text {rows[i][0]!r} -> {got[0][i]!r}, want {want[i]!r}"
        assert same(got[1][i], want[i]), f"{sqltype} {lit}: binary {bytes(rows[i][1]).hex()} -> {got[1][i]!r}, want {want[i]!r}"


@pytest.mark.postgres
@pytest.mark.parametrize("spec", PG_TYPES, ids=[s[0] for s in PG_TYPES])
def test_server_text_and_binary_agree(pg_conn, spec):
    with pg_conn.cursor() as cur:
        _check_server_type(cur, *spec)


@pytest.mark.postgres
@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "Europe/Amsterdam", "Asia/Manila",
                                  "America/Metlakatla", "-03:30", "UTC"])
def test_server_timestamptz_in_other_zones(pg_conn, zone):
    """timestamptz text carries the session zone's offset (LMT offsets with seconds too)."""
    literals = ["'1849-12-31 19:03:58+00'", "'1900-01-01 00:00:00+00'", "'1937-07-01 12:00:00+00'",
                "'2024-03-31 01:30:00+00'", "'0044-03-15 12:00:00+00 BC'", "'1800-06-01 00:00:00+00'",
                "'2024-01-01 00:00:00.5+00'", "'infinity'"]
    with pg_conn.cursor() as cur:
        cur.execute("SET TimeZone = %s", (zone,))
        try:
            _check_server_type(cur, "timestamptz", C(K_TIMESTAMPTZ), "timestamptz_send", literals,
                               TS_EXPECT_SQL, _ts_expect)
            _check_server_type(cur, "timestamptz[]", A(K_TIMESTAMPTZ), "array_send",
                               ["ARRAY[" + ", ".join(lit + "::timestamptz" for lit in literals) + "]"],
                               TS_ARRAY_EXPECT_SQL, _ts_array_expect)
        finally:
            cur.execute("SET TimeZone = 'UTC'")


@pytest.mark.postgres
def test_server_bytea_escape_output(pg_conn):
    literals = ["'\\x'", "'\\x00ff41'", "'hello'", "'\\x5c'", "'\\x0d0a7f80205c5c'"]
    with pg_conn.cursor() as cur:
        cur.execute("SET bytea_output = escape")
        try:
            _check_server_type(cur, "bytea", C(K_BYTEA), "byteasend", literals, "v", bytes)
            _check_server_type(cur, "bytea[]", A(K_BYTEA), "array_send",
                               ["ARRAY[" + ", ".join(lit + "::bytea" for lit in literals) + "]"],
                               "v", lambda items: _array(items, bytes))
        finally:
            cur.execute("SET bytea_output = hex")


@pytest.mark.postgres
def test_server_many_random_values(pg_conn):
    """Random values of the numeric/temporal types generated on the server."""
    queries = [
        ("float8", C(K_FLOAT8), "float8send",
         "SELECT (random() - 0.5) * 10 ^ (random() * 600 - 300) FROM generate_series(1, 300)", "v", float),
        ("float4", C(K_FLOAT4), "float4send",
         "SELECT ((random() - 0.5) * 10 ^ (random() * 70 - 35))::float4 FROM generate_series(1, 300)", "v::float8", float),
        ("numeric", C(K_NUMERIC_STR), "numeric_send",
         "SELECT round(((random() - 0.5) * 10 ^ (random() * 40 - 20))::numeric, (random() * 30)::int) "
         "FROM generate_series(1, 300)", None, None),
        ("numeric(30,8)", C(K_DECIMAL, 30, 8), "numeric_send",
         "SELECT ((random() - 0.5) * 10 ^ (random() * 28 - 8))::numeric(30,8) FROM generate_series(1, 300)",
         "v", _dec),
        ("timestamptz", C(K_TIMESTAMPTZ), "timestamptz_send",
         "SELECT '4713-01-01 BC'::timestamptz + random() * interval '290000 years' FROM generate_series(1, 300)",
         TS_EXPECT_SQL, _ts_expect),
        ("timestamp", C(K_TIMESTAMP), "timestamp_send",
         "SELECT '1000-01-01'::timestamp + random() * interval '2000 years' FROM generate_series(1, 300)",
         TS_EXPECT_SQL, _ts_expect),
        ("date", C(K_DATE), "date_send",
         "SELECT '4713-01-01 BC'::date + (random() * 2000000000)::int FROM generate_series(1, 300)",
         "v - DATE '1970-01-01'", int),
        ("interval", C(K_INTERVAL), "interval_send",
         "SELECT make_interval(((random() - 0.5) * 20000)::int, ((random() - 0.5) * 200)::int, 0, "
         "((random() - 0.5) * 20000)::int, ((random() - 0.5) * 2000)::int, 0, (random() - 0.5) * 1e6) "
         "FROM generate_series(1, 300)",
         ("extract(year from v)", "extract(month from v)", "extract(day from v)", "extract(hour from v)",
          "extract(minute from v)", "extract(microseconds from v)"), _interval_expect),
        ("timetz", C(K_TIMETZ), "timetz_send",
         "SELECT ('00:00'::time + random() * interval '24 hours')::timetz "
         "AT TIME ZONE (((random() - 0.5) * 50000)::int || ' seconds')::interval FROM generate_series(1, 300)",
         None, None),
    ]
    with pg_conn.cursor() as cur:
        for sqltype, ct, send, query, expect_sql, expect_fn in queries:
            cur.execute(f"CREATE TEMP TABLE rnd AS SELECT v::{sqltype} AS v FROM ({query}) AS q(v)")
            try:
                cur.execute("SELECT v::text FROM rnd")
                literals = [f"'{r[0]}'" for r in cur.fetchall()]
                _check_server_type(cur, sqltype, ct, send, literals, expect_sql, expect_fn)
            finally:
                cur.execute("DROP TABLE rnd")


# -- hex digits 8 at a time (src/digits.h: pgo_hex16, pgo_uuid36) ------------------------

_HEX = set(b"0123456789abcdefABCDEF")


def _hex_cases(text: bytes, digit_at):
    """text with each byte value 0..255 put at each position: (the value, whether every
    position still holds what it may: a hex digit where digit_at says so)."""
    for pos in range(len(text)):
        for b in range(256):
            t = bytearray(text)
            t[pos] = b
            yield bytes(t), (b in _HEX) if digit_at(pos) else b == text[pos]


@pytest.mark.parametrize("form", ["36", "32"])
def test_uuid_text_each_byte_at_each_position(form):
    """Every byte value at every position of a uuid's text, both forms: a value exactly
    when every digit position holds a hex digit of either case (and the dashes are
    dashes), the same as the reference; the 8-digit words (16 digits, then the dashes'
    groups) must catch a bad byte wherever it falls."""
    base = b"a0eebc99-9c0b-4Ef8-BB6d-6bb9bd380a11"
    if form == "32":
        base = base.replace(b"-", b"")
    dashes = {8, 13, 18, 23} if form == "36" else set()
    for text, ok in _hex_cases(base, lambda pos: pos not in dashes):
        res = twins(C(K_UUID), [("t", text)])
        if ok:
            assert raw(res[0]) == [uuid.UUID(text.decode()).bytes], text
        else:
            assert res is ERROR, text


def test_bytea_hex_text_each_byte_at_each_position():
    """bytea's \\x text of 40 digits (two 16-digit words and a tail of 8): every byte
    value at every digit position, against bytes.fromhex and the reference."""
    digits = b"0123456789abcdefABCDEF0123456789aBcDeF01"
    for text, ok in _hex_cases(digits, lambda pos: True):
        res = twins(C(K_BYTEA), [("t", b"\\x" + text)])
        if ok:
            assert raw(res[0]) == [bytes.fromhex(text.decode())], text
        else:
            assert res is ERROR, text


@pytest.mark.parametrize("n", range(0, 41))
def test_bytea_hex_text_every_length(n):
    """Every length of a 16-digit word and its tail, odd ones (an error) included."""
    rnd = np.random.default_rng(n)
    text = rnd.integers(0, 256, (n + 1) // 2, dtype=np.uint8).tobytes().hex()[:n].encode()
    res = twins(C(K_BYTEA), [("t", b"\\x" + text)])
    assert (res is ERROR) == (n % 2 == 1)
    if n % 2 == 0:
        assert raw(res[0]) == [bytes.fromhex(text.decode())]


def test_date_text_near_its_common_shape():
    """'YYYY-MM-DD' takes a path of its own (values_text.pxi: text_date): every byte value
    at every position of a few dates, and the last day of every month (and the day after
    it) in leap and common years, centuries included: the same outcome as the reference,
    and the value datetime gives where the text is an ISO date."""
    texts = []
    for base in (b"2024-02-29", b"1999-12-31", b"0001-01-01"):
        texts += [t for t, _ in _hex_cases(base, lambda pos: True)]
    for y in (1900, 2000, 2023, 2024, 9999, 1):
        for m in range(1, 13):
            last = (datetime.date(y + (m == 12), m % 12 + 1, 1) - datetime.timedelta(days=1)).day if y < 9999 or m < 12 else 31
            for d in (0, 1, last, last + 1, 32, 99):
                texts.append(f"{y:04d}-{m:02d}-{d:02d}".encode())
    texts += [b"0000-01-01", b"2024-00-01", b"2024-13-01", b"2024-1-01", b"2024-01-1", b"20240-01-01"]
    for text in texts:
        res = twins(C(K_DATE), [("t", text)])
        try:
            want = datetime.date.fromisoformat(text.decode("latin-1"))
        except ValueError:
            want = None
        if want is not None and len(text) == 10:
            assert raw(res[0]) == [(want - datetime.date(1970, 1, 1)).days], text
