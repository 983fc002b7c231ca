"""Pure-Python reference twin of the native value parsers (src/values_*.pxi).

``parse_values(column_type, values) -> (pa.Array, specials)`` gives the same Arrow type,
values, null rows and ``specials`` as ``pgoutput_fast._native.parse_values``, and raises
``DecodeError`` for the same malformed inputs. It is written for clarity, not speed:
regular expressions, Python ints, ``fractions``/``decimal`` and ``ipaddress``.

A value parser returns the Python value for one valid value, returns ``SPECIAL`` for a
valid PostgreSQL value that the Arrow type cannot represent (the row becomes null and is
listed in ``specials``), or raises ``_Bad`` for malformed input.

Python value per kind (before Arrow conversion): bool; int (int2/4/8, oid, date32 days,
time64 and timestamp microseconds); float bit patterns (int) for float4/float8 so that
NaN payloads and -0 survive; int (the scaled integer) for decimal128; bytes for every
string/binary kind; ``(months, days, nanoseconds)`` for intervals; a list for arrays.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from decimal import Decimal
from fractions import Fraction

import pyarrow as pa

from ..errors import DecodeError
from . import textformat as _tf
from ..types import (
    KIND_NAMES,
    K_UNKNOWN, K_BOOL, K_INT2, K_INT4, K_INT8, K_OID, K_FLOAT4, K_FLOAT8, K_DECIMAL,
    K_NUMERIC_STR, K_TEXT, K_BPCHAR, K_CHAR, K_BYTEA, K_JSON, K_JSONB, K_DATE, K_TIME,
    K_TIMETZ, K_TIMESTAMP, K_TIMESTAMPTZ, K_INTERVAL, K_UUID, K_INET, K_CIDR, K_MACADDR,
    K_MACADDR8, K_ARRAY,
    ColumnType,
)

__all__ = ["parse_values", "SPECIAL"]

SPECIAL = object()

INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# PostgreSQL date/time limits (src/include/datatype/timestamp.h)
USECS_PER_DAY = 86_400_000_000
UNIX_EPOCH_USECS = 946_684_800_000_000  # 2000-01-01 in Unix microseconds
UNIX_EPOCH_DAYS = 10_957
MIN_TIMESTAMP = -211_813_488_000_000_000  # 4714-11-24 00:00 BC, PostgreSQL epoch us
END_TIMESTAMP = 9_223_371_331_200_000_000  # 294277-01-01, first invalid
MIN_DATE = -2_451_545  # 4714-11-24 BC, days since 2000-01-01
END_DATE = 2_145_031_949  # 5874898-01-01, first invalid
TZDISP_LIMIT = 57_600  # |zone| < 16 h

STRING_KINDS = {K_TEXT, K_BPCHAR, K_JSON, K_JSONB, K_CHAR, K_NUMERIC_STR, K_TIMETZ, K_INET,
                K_CIDR, K_MACADDR, K_MACADDR8, K_UNKNOWN}


class _Bad(Exception):
    """Malformed input (becomes DecodeError)."""


# ---------------------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------------------

_INT_RE = re.compile(rb"-?[0-9]+")
_UINT_RE = re.compile(rb"[0-9]+")
_MANTISSA = rb"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_FLOAT_RE = re.compile(_MANTISSA + rb"(?:[eE][+-]?[0-9]+)?")
_DECIMAL_RE = re.compile(rb"(-?)([0-9]*)(?:\.([0-9]*))?")
_DATE = rb"([0-9]{4,9})-([0-9]{2})-([0-9]{2})"
_CLOCK = rb"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?"
_OFFSET = rb"([+-])([0-9]{2})(?::([0-9]{2})(?::([0-9]{2}))?)?"
_DATE_RE = re.compile(_DATE + rb"( BC)?")
_TIME_RE = re.compile(_CLOCK)
_TIMESTAMP_RE = re.compile(_DATE + rb" " + _CLOCK + rb"( BC)?")
_TIMESTAMPTZ_RE = re.compile(_DATE + rb" " + _CLOCK + _OFFSET + rb"( BC)?")
_IV_NUMBER_RE = re.compile(rb"[+-]?[0-9]{1,10}")
_IV_CLOCK_RE = re.compile(rb"([+-]?)([0-9]{1,12}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?")
_IV_UNITS = {b"year": 1, b"years": 1, b"mon": 2, b"mons": 2, b"day": 3, b"days": 3}
_UUID_RE = re.compile(rb"[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}")
_HEX_RE = re.compile(rb"(?:[0-9A-Fa-f]{2})*")


def _f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _f64_bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def _round_to_float32(x: Fraction, negative: bool) -> float:
    """Correctly rounded (ties to even) binary32 value of x >= 0, as a Python float."""
    if x == 0:
        return -0.0 if negative else 0.0
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1  # now 2**e <= x < 2**(e+1)
    quantum = Fraction(2) ** (max(e, -126) - 23)
    m = round(x / quantum)  # Fraction.__round__ rounds half to even
    value = m * quantum
    if value >= 2**128:
        return float("-inf") if negative else float("inf")
    value = float(value)  # exact: at most 24 significant bits
    return -value if negative else value


def _text_float32(data: bytes) -> float:
    """Correctly rounded float32 of decimal text (already matched by _FLOAT_RE)."""
    negative = data.startswith(b"-")
    mantissa, _, exponent = data.lstrip(b"-").lower().partition(b"e")
    whole, _, frac = mantissa.partition(b".")
    digits = (whole + frac).lstrip(b"0")
    if not digits:
        return -0.0 if negative else 0.0
    e10 = int(exponent or b"0") - len(frac)  # value = int(digits) * 10**e10
    magnitude = e10 + len(digits)  # 10**(magnitude-1) <= value < 10**magnitude
    if magnitude > 40:  # >= 1e40: beyond float32 (max 3.4e38)
        return float("-inf") if negative else float("inf")
    if magnitude < -46:  # < 1e-47: below half the smallest subnormal (1.4e-45)
        return -0.0 if negative else 0.0
    return _round_to_float32(Fraction(int(digits)) * Fraction(10) ** e10, negative)


def _text_float(data: bytes, single: bool) -> int:
    special = {b"NaN": float("nan"), b"Infinity": float("inf"), b"-Infinity": float("-inf")}
    if data in special:
        v = special[data]
    else:
        if len(data) > 128 or not _FLOAT_RE.fullmatch(data):
            raise _Bad("invalid float text")
        if single:
            v = _text_float32(data)
        else:
            v = float(data)
        if v in (float("inf"), float("-inf")):
            raise _Bad("float text out of range")
    return _f32_bits(v) if single else _f64_bits(v)


def _text_int(data: bytes, lo: int, hi: int) -> int:
    if not (_UINT_RE if lo >= 0 else _INT_RE).fullmatch(data):
        raise _Bad("invalid integer text")
    v = int(data)
    if not lo <= v <= hi:
        raise _Bad("integer text out of range")
    return v


def _text_decimal(data: bytes, precision: int, scale: int):
    if data in (b"NaN", b"Infinity", b"-Infinity"):
        return SPECIAL
    if not re.fullmatch(_MANTISSA, data):
        raise _Bad("invalid numeric text")
    sign, int_part, frac = _DECIMAL_RE.fullmatch(data).groups()
    frac = frac or b""
    int_part = int_part.lstrip(b"0")
    if len(int_part) + scale > precision:
        raise _Bad("numeric value does not fit the decimal precision")
    if frac[scale:].strip(b"0"):
        raise _Bad("numeric value has more fraction digits than the decimal scale")
    v = int((int_part + frac[:scale].ljust(scale, b"0")) or b"0")
    return -v if sign else v


def _text_bytea(data: bytes) -> bytes:
    if data.startswith(b"\\x"):
        hexpart = data[2:]
        if len(hexpart) % 2 or not _HEX_RE.fullmatch(hexpart):
            raise _Bad("invalid bytea hex text")
        return bytes.fromhex(hexpart.decode("ascii"))
    out = bytearray()
    i = 0
    while i < len(data):
        ch = data[i]
        if ch != 0x5C:
            out.append(ch)
            i += 1
        elif data[i + 1 : i + 2] == b"\\":
            out.append(0x5C)
            i += 2
        elif re.fullmatch(rb"[0-3][0-7][0-7]", data[i + 1 : i + 4]):
            out.append(int(data[i + 1 : i + 4], 8))
            i += 4
        else:
            raise _Bad("invalid bytea escape text")
    return bytes(out)


def days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        return 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28
    return 30 if m in (4, 6, 9, 11) else 31


def _civil(y: bytes, m: bytes, d: bytes, bc) -> int:
    """Unix days of a (year label, month, day, ' BC' or None) after validation."""
    y, m, d = int(y), int(m), int(d)
    if y == 0 or not 1 <= m <= 12 or d < 1:
        raise _Bad("invalid date")
    if bc:
        y = 1 - y
    if d > _days_in_month(y, m):
        raise _Bad("invalid date")
    return days_from_civil(y, m, d)


def _clock_us(mi: bytes, se: bytes, frac) -> int:
    mi, se = int(mi), int(se)
    if mi > 59 or se > 59:
        raise _Bad("invalid time of day")
    return mi * 60_000_000 + se * 1_000_000 + (int(frac.ljust(6, b"0")) if frac else 0)


def _text_date(data: bytes) -> int:
    if data == b"infinity":
        return INT32_MAX
    if data == b"-infinity":
        return INT32_MIN
    m = _DATE_RE.fullmatch(data)
    if not m:
        raise _Bad("invalid date text")
    days = _civil(*m.groups())
    if not MIN_DATE <= days - UNIX_EPOCH_DAYS < END_DATE:
        raise _Bad("date out of range")
    return days


def _text_time(data: bytes) -> int:
    m = _TIME_RE.fullmatch(data)
    if not m:
        raise _Bad("invalid time text")
    h, mi, se, frac = m.groups()
    h = int(h)
    rest = _clock_us(mi, se, frac)
    if h > 24 or (h == 24 and rest):
        raise _Bad("invalid time text")
    return h * 3_600_000_000 + rest


def _text_timestamp(data: bytes, with_zone: bool):
    if data == b"infinity":
        return INT64_MAX
    if data == b"-infinity":
        return INT64_MIN
    m = (_TIMESTAMPTZ_RE if with_zone else _TIMESTAMP_RE).fullmatch(data)
    if not m:
        raise _Bad("invalid timestamp text")
    g = m.groups()
    y, mo, d, h, mi, se, frac = g[:7]
    east = 0
    if with_zone:
        sign, oh, om, os_ = g[7:11]
        om, os_ = int(om or 0), int(os_ or 0)
        if om > 59 or os_ > 59:
            raise _Bad("invalid timestamp text")
        east = int(oh) * 3600 + om * 60 + os_
        if east >= TZDISP_LIMIT:
            raise _Bad("invalid timestamp text")
        if sign == b"-":
            east = -east
    days = _civil(y, mo, d, g[-1])
    h = int(h)
    if h > 23:
        raise _Bad("invalid timestamp text")
    pg_us = ((days - UNIX_EPOCH_DAYS) * USECS_PER_DAY + h * 3_600_000_000
             + _clock_us(mi, se, frac) - east * 1_000_000)
    if not MIN_TIMESTAMP <= pg_us < END_TIMESTAMP:
        raise _Bad("timestamp out of range")
    unix = pg_us + UNIX_EPOCH_USECS
    if unix >= INT64_MAX:
        return SPECIAL
    return unix


def _interval(months: int, days: int, us: int):
    if not (INT32_MIN <= months <= INT32_MAX and INT32_MIN <= days <= INT32_MAX):
        raise _Bad("interval field out of range")
    if not INT64_MIN <= us * 1000 <= INT64_MAX:
        return SPECIAL
    return (months, days, us * 1000)


def _text_interval(data: bytes):
    if data == b"infinity":
        return (INT32_MAX, INT32_MAX, INT64_MAX)
    if data == b"-infinity":
        return (INT32_MIN, INT32_MIN, INT64_MIN)
    tokens = data.split(b" ")
    months = days = us = 0
    stage = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        clock = _IV_CLOCK_RE.fullmatch(tok)
        if clock and stage < 4:
            sign, h, mi, se, frac = clock.groups()
            h = int(h)
            if h > 2562047788:
                raise _Bad("interval hours out of range")
            mag = h * 3_600_000_000 + _clock_us(mi, se, frac)
            us = -mag if sign == b"-" else mag
            if not INT64_MIN <= us <= INT64_MAX:
                raise _Bad("interval time out of range")
            stage = 4
            i += 1
            continue
        if stage == 4 or not _IV_NUMBER_RE.fullmatch(tok) or i + 1 >= len(tokens):
            raise _Bad("invalid interval text")
        unit = _IV_UNITS.get(tokens[i + 1])
        if unit is None or unit <= stage:
            raise _Bad("invalid interval text")
        v = int(tok)
        if unit == 1:
            months += 12 * v
        elif unit == 2:
            months += v
        else:
            days = v
        stage = unit
        i += 2
    if stage == 0:
        raise _Bad("empty interval text")
    return _interval(months, days, us)


def _text_uuid(data: bytes) -> bytes:
    if len(data) not in (32, 36) or not _UUID_RE.fullmatch(data):
        raise _Bad("invalid uuid text")
    if len(data) == 36 and data.count(b"-") != 4:
        raise _Bad("invalid uuid text")
    return bytes.fromhex(data.replace(b"-", b"").decode("ascii"))


def _text_array(ct: ColumnType, data: bytes):
    """'{...}' one-dimensional array text -> list (or SPECIAL)."""
    elem = ColumnType(ct.elem_kind, ct.elem_precision, ct.elem_scale)
    if data.startswith(b"["):
        _utf8(data)  # kept as text in _special
        return SPECIAL  # explicit bounds: lower bound != 1
    if len(data) < 2 or data[0:1] != b"{":
        raise _Bad("invalid array text")
    if data[1:2] == b"{":
        _utf8(data)
        return SPECIAL  # several dimensions
    if data[1:2] == b"}":
        if len(data) != 2:
            raise _Bad("invalid array text")
        return []
    out = []
    i, n = 1, len(data)
    while True:
        if i >= n:
            raise _Bad("unterminated array text")
        if data[i] == 0x22:  # quoted element: backslash escapes the next byte
            i += 1
            buf = bytearray()
            while i < n and data[i] != 0x22:
                if data[i] == 0x5C:
                    i += 1
                    if i >= n:
                        break
                buf.append(data[i])
                i += 1
            if i >= n:
                raise _Bad("unterminated quoted array element")
            i += 1
            value = _parse_text(elem, bytes(buf))
        else:
            m = re.compile(rb'[^,}"\\{]*').match(data, i)
            s, i = i, m.end()
            if i == s or i >= n or data[i] in b'"\\{':
                raise _Bad("bad unquoted array element")
            token = data[s:i]
            value = None if token.lower() == b"null" else _parse_text(elem, token)
        if value is SPECIAL:
            return SPECIAL
        out.append(value)
        if i < n and data[i] == 0x2C:
            i += 1
        elif i < n and data[i] == 0x7D:
            i += 1
            break
        else:
            raise _Bad("expected ',' or '}' in array text")
    if i != n:
        raise _Bad("junk after array text")
    return out


def _utf8(data: bytes) -> bytes:
    """``data`` when it is valid UTF-8 (Arrow strings must be): PostgreSQL sends text in
    client_encoding, which the capture sets to UTF8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad("invalid UTF-8 in a text value") from None
    return data


def _parse_text(ct: ColumnType, data: bytes):
    k = ct.kind
    if k == K_CHAR and len(data) == 1 and data[0] >= 0x80:
        return b"\\%03o" % data[0]  # PostgreSQL 14 prints the raw byte; 15+ prints \ooo
    if k in STRING_KINDS:
        return _utf8(data)
    if k == K_BOOL:
        if data == b"t":
            return True
        if data == b"f":
            return False
        raise _Bad("invalid bool text")
    if k == K_INT2:
        return _text_int(data, INT16_MIN, INT16_MAX)
    if k == K_INT4:
        return _text_int(data, INT32_MIN, INT32_MAX)
    if k == K_INT8:
        return _text_int(data, INT64_MIN, INT64_MAX)
    if k == K_OID:
        return _text_int(data, 0, 2**32 - 1)
    if k in (K_FLOAT4, K_FLOAT8):
        return _text_float(data, k == K_FLOAT4)
    if k == K_DECIMAL:
        return _text_decimal(data, ct.precision, ct.scale)
    if k == K_BYTEA:
        return _text_bytea(data)
    if k == K_DATE:
        return _text_date(data)
    if k == K_TIME:
        v = _text_time(data)
        return SPECIAL if v == USECS_PER_DAY else v  # 24:00:00: outside Arrow's time64
    if k in (K_TIMESTAMP, K_TIMESTAMPTZ):
        return _text_timestamp(data, k == K_TIMESTAMPTZ)
    if k == K_INTERVAL:
        return _text_interval(data)
    if k == K_UUID:
        return _text_uuid(data)
    if k == K_ARRAY:
        return _text_array(ct, data)
    raise _Bad("unknown value kind")


# ---------------------------------------------------------------------------------------
# binary
# ---------------------------------------------------------------------------------------

_BIN_SIZES = {K_BOOL: 1, K_INT2: 2, K_INT4: 4, K_INT8: 8, K_OID: 4, K_FLOAT4: 4, K_FLOAT8: 8,
              K_DATE: 4, K_TIME: 8, K_TIMESTAMP: 8, K_TIMESTAMPTZ: 8, K_INTERVAL: 16,
              K_UUID: 16, K_TIMETZ: 12, K_CHAR: 1, K_MACADDR: 6, K_MACADDR8: 8}


def _numeric_fields(data: bytes):
    if len(data) < 8:
        raise _Bad("truncated binary numeric")
    nd, weight, sign, dscale = struct.unpack(">hhHH", data[:8])
    if nd < 0 or len(data) != 8 + 2 * nd:
        raise _Bad("binary numeric length does not match its digit count")
    digits = list(struct.unpack(f">{nd}H", data[8:]))
    if any(d > 9999 for d in digits):
        raise _Bad("invalid digit in binary numeric")
    return weight, sign, dscale, digits


def _numeric_exact(weight: int, digits) -> Fraction:
    return sum((Fraction(10000) ** (weight - i) * d for i, d in enumerate(digits)), Fraction(0))


def _bin_decimal(data: bytes, precision: int, scale: int):
    weight, sign, dscale, digits = _numeric_fields(data)
    if sign in (0xC000, 0xD000, 0xF000):
        return SPECIAL
    if sign not in (0, 0x4000) or dscale & 0xC000:
        raise _Bad("invalid sign or scale in binary numeric")
    scaled = _numeric_exact(weight, digits) * 10**scale
    if scaled.denominator != 1:
        raise _Bad("numeric value has more fraction digits than the decimal scale")
    if scaled >= 10**precision:
        raise _Bad("numeric value does not fit the decimal precision")
    v = int(scaled)
    return -v if sign == 0x4000 else v


def _bin_numeric_str(data: bytes) -> bytes:
    """numeric_out of the value, as the change-event table writes it (one writer of a
    numeric's text, and its reasons)."""
    try:
        return _tf._fmt_numeric(data).encode("ascii")
    except _tf._Malformed as e:
        raise _Bad(str(e)) from None


def _fmt_clock(us: int) -> str:
    secs, frac = divmod(us, 1_000_000)
    text = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    if frac:
        text += f".{frac:06d}".rstrip("0")
    return text


def _fmt_zone(zone_west: int) -> str:
    secs = abs(zone_west)
    hours, rest = divmod(secs, 3600)
    mins, secs = divmod(rest, 60)
    text = ("+" if zone_west <= 0 else "-") + f"{hours:02d}"
    if secs or mins:
        text += f":{mins:02d}"
    if secs:
        text += f":{secs:02d}"
    return text


def _bin_inet(data: bytes, cidr: bool) -> bytes:
    if len(data) < 4:
        raise _Bad("truncated binary inet")
    family, bits, _is_cidr, size = data[:4]
    if family not in (2, 3):
        raise _Bad("invalid address family in binary inet")
    want = 4 if family == 2 else 16
    if bits > 8 * want or size != want or len(data) != 4 + want:
        raise _Bad("invalid bits or length in binary inet")
    addr = data[4:]
    as_int = int.from_bytes(addr, "big")
    if cidr and as_int & ((1 << (8 * want - bits)) - 1):
        raise _Bad("binary cidr has bits set to the right of the mask")
    if family == 2:
        text = str(ipaddress.IPv4Address(addr))
    else:
        words = struct.unpack(">8H", addr)
        # PostgreSQL keeps a dotted IPv4 tail for ::a.b.c.d (compatible) and ::ffff:a.b.c.d
        if words[:5] == (0,) * 5 and (words[5] == 0xFFFF or (words[5] == 0 and words[6] != 0)):
            text = ("::ffff:" if words[5] else "::") + str(ipaddress.IPv4Address(addr[12:]))
        else:
            text = ipaddress.IPv6Address(addr).compressed
    if cidr or bits != 8 * want:
        text += f"/{bits}"
    return text.encode("ascii")


def _bin_array(ct: ColumnType, data: bytes):
    elem = ColumnType(ct.elem_kind, ct.elem_precision, ct.elem_scale)
    if len(data) < 12:
        raise _Bad("truncated binary array header")
    ndim, flags, _elem_oid = struct.unpack(">iiI", data[:12])
    if not 0 <= ndim <= 6 or flags not in (0, 1):
        raise _Bad("invalid binary array header")
    if len(data) < 12 + 8 * ndim:
        raise _Bad("truncated binary array dimensions")
    pos = 12
    nitems = 1 if ndim else 0
    special = ndim > 1
    for _ in range(ndim):
        dim, lb = struct.unpack(">ii", data[pos : pos + 8])
        pos += 8
        if dim < 0 or lb + dim > INT32_MAX:  # array_recv's ArrayCheckBounds
            raise _Bad("invalid binary array dimension")
        nitems *= dim
        if nitems > 134217727:
            raise _Bad("binary array too large")
        special = special or lb != 1
    if nitems > (len(data) - pos) // 4:
        raise _Bad("binary array shorter than its element count")
    if nitems == 0:
        if pos != len(data):
            raise _Bad("trailing bytes after binary array")
        return []
    out = []
    for _ in range(nitems):
        if len(data) - pos < 4:
            raise _Bad("truncated binary array element")
        (elen,) = struct.unpack(">i", data[pos : pos + 4])
        pos += 4
        if elen == -1:
            out.append(None)
            continue
        if elen < 0 or elen > len(data) - pos:
            raise _Bad("invalid binary array element length")
        if not special:
            value = _parse_binary(elem, data[pos : pos + elen])
            if value is SPECIAL:
                return SPECIAL
            out.append(value)
        pos += elen
    if pos != len(data):
        raise _Bad("trailing bytes after binary array")
    return SPECIAL if special else out


def _parse_binary(ct: ColumnType, data: bytes):
    k = ct.kind
    size = _BIN_SIZES.get(k)
    if size is not None and len(data) != size:
        raise _Bad("binary value has the wrong length for its type")
    if k in (K_BYTEA, K_UNKNOWN):
        return data
    if k in (K_TEXT, K_BPCHAR, K_JSON):
        return _utf8(data)  # text send() converts to client_encoding too
    if k == K_BOOL:
        return data != b"\x00"
    if k in (K_INT2, K_INT4, K_INT8):
        return int.from_bytes(data, "big", signed=True)
    if k in (K_OID, K_FLOAT4, K_FLOAT8):
        return int.from_bytes(data, "big")  # float kinds: the IEEE bit pattern
    if k == K_DECIMAL:
        return _bin_decimal(data, ct.precision, ct.scale)
    if k == K_NUMERIC_STR:
        return _bin_numeric_str(data)
    if k in (K_TIMESTAMP, K_TIMESTAMPTZ):
        v = int.from_bytes(data, "big", signed=True)
        if v in (INT64_MIN, INT64_MAX):
            return v
        if not MIN_TIMESTAMP <= v < END_TIMESTAMP:
            raise _Bad("binary timestamp out of range")
        return SPECIAL if v + UNIX_EPOCH_USECS >= INT64_MAX else v + UNIX_EPOCH_USECS
    if k == K_DATE:
        v = int.from_bytes(data, "big", signed=True)
        if v in (INT32_MIN, INT32_MAX):
            return v
        if not MIN_DATE <= v < END_DATE:
            raise _Bad("binary date out of range")
        return v + UNIX_EPOCH_DAYS
    if k == K_TIME:
        v = int.from_bytes(data, "big", signed=True)
        if not 0 <= v <= USECS_PER_DAY:
            raise _Bad("binary time out of range")
        return SPECIAL if v == USECS_PER_DAY else v
    if k == K_INTERVAL:
        us, days, months = struct.unpack(">qii", data)
        if (us, days, months) == (INT64_MAX, INT32_MAX, INT32_MAX):
            return (INT32_MAX, INT32_MAX, INT64_MAX)
        if (us, days, months) == (INT64_MIN, INT32_MIN, INT32_MIN):
            return (INT32_MIN, INT32_MIN, INT64_MIN)
        return _interval(months, days, us)
    if k == K_UUID:
        return data
    if k == K_JSONB:
        if data[:1] != b"\x01":
            raise _Bad("unsupported binary jsonb version")
        return _utf8(data[1:])
    if k == K_CHAR:
        b = data[0]
        if b == 0:
            return b""
        return data if b < 0x80 else b"\\%03o" % b
    if k == K_TIMETZ:
        us, zone = struct.unpack(">qi", data)
        if not 0 <= us <= USECS_PER_DAY or not -TZDISP_LIMIT < zone < TZDISP_LIMIT:
            raise _Bad("binary timetz out of range")
        return (_fmt_clock(us) + _fmt_zone(zone)).encode("ascii")
    if k in (K_INET, K_CIDR):
        return _bin_inet(data, k == K_CIDR)
    if k in (K_MACADDR, K_MACADDR8):
        return ":".join(f"{b:02x}" for b in data).encode("ascii")
    if k == K_ARRAY:
        return _bin_array(ct, data)
    raise _Bad("unknown value kind")


# ---------------------------------------------------------------------------------------
# Arrow
# ---------------------------------------------------------------------------------------


def _to_arrow(kind: int, values: list, arrow_type: pa.DataType, ct: ColumnType) -> pa.Array:
    if kind == K_ARRAY:
        elem = ColumnType(ct.elem_kind, ct.elem_precision, ct.elem_scale)
        offsets, flat = [0], []
        for v in values:
            flat.extend(v or ())
            offsets.append(len(flat))
        child = _to_arrow(elem.kind, flat, arrow_type.value_type, elem)
        mask = pa.array([v is None for v in values], pa.bool_())
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), child, type=arrow_type,
                                        mask=mask)
    if kind == K_FLOAT4:
        return pa.array(values, pa.uint32()).view(pa.float32())
    if kind == K_FLOAT8:
        return pa.array(values, pa.uint64()).view(pa.float64())
    if kind == K_DECIMAL:
        return pa.array([None if v is None else Decimal(f"{v}E-{ct.scale}") for v in values],
                        arrow_type)
    if pa.types.is_string(arrow_type):
        return pa.array(values, pa.binary()).view(pa.string())  # checked by _utf8
    return pa.array(values, arrow_type)


def _kind_name(ct: ColumnType) -> str:
    if ct.kind == K_ARRAY:
        return f"array of {KIND_NAMES.get(ct.elem_kind, ct.elem_kind)}"
    return KIND_NAMES.get(ct.kind, str(ct.kind))


def parse_values(column_type: ColumnType, values):
    """Reference twin of ``pgoutput_fast._native.parse_values`` (see there)."""
    ct = column_type
    out, specials = [], []
    # a binary UNKNOWN value turns the column (or an array's elements) into binary
    binary_unknown = False
    for row, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        fmt, data = v
        data = bytes(data)
        try:
            if fmt == "t":
                value = _parse_text(ct, data)
            elif fmt == "b":
                value = _parse_binary(ct, data)
            else:
                raise ValueError(f"value format must be 't' or 'b', not {fmt!r}")
        except _Bad as exc:
            raise DecodeError(f"{exc} ({_kind_name(ct)} column)", None) from None
        if fmt == "b" and ct.kind == K_ARRAY and ct.elem_kind == K_UNKNOWN:
            binary_unknown = True  # every binary array value, empty or special ones too
        if value is SPECIAL:
            specials.append(row)
            value = None
        elif fmt == "b" and ct.kind == K_UNKNOWN:
            binary_unknown = True
        out.append(value)
    arrow_type = ct.arrow_type(binary_unknown=binary_unknown)
    return _to_arrow(ct.kind, out, arrow_type, ct), specials
