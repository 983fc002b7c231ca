"""Binary (send-format) value -> PostgreSQL text form: the pure-Python twin of
``src/format_text.pxi`` (``pgoutput_fast._native.format_binary_values``).

The generic change-event table holds each column in PostgreSQL's *text* form. For
binary-mode captures that text is rebuilt from the ``'b'`` value bytes, exactly as the
server's output function prints it in a session with ``DateStyle=ISO``,
``IntervalStyle=postgres``, ``TimeZone=UTC``, ``extra_float_digits=3`` and
``bytea_output=hex`` (docs/protocol.md §4).

Each formatter follows the server's output function (float8out/Ryu, numeric_out,
EncodeDateTime, EncodeInterval, inet_net_ntop, array_out, ...) and accepts exactly what
the matching receive function accepts; anything else raises ``DecodeError`` with the
same reason as the native formatter. Results (and reasons) are identical to the native
implementation for every input; the tests check both against a real server.

This module must not import the native extension.
"""

from __future__ import annotations

import math
import struct
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

from ..errors import DecodeError
from ..types import (
    K_UNKNOWN, K_BOOL, K_INT2, K_INT4, K_INT8, K_OID, K_FLOAT4, K_FLOAT8, K_DECIMAL,
    K_NUMERIC_STR, K_TEXT, K_BPCHAR, K_CHAR, K_BYTEA, K_JSON, K_JSONB, K_DATE, K_TIME,
    K_TIMETZ, K_TIMESTAMP, K_TIMESTAMPTZ, K_INTERVAL, K_UUID, K_INET, K_CIDR, K_MACADDR,
    K_MACADDR8, K_ARRAY,
)

__all__ = ["format_binary_values", "format_binary_value"]

# Reasons, word for word the same as in src/format_text.pxi.
E_KIND = "unsupported value kind"
E_LENGTH = "binary value has the wrong length for its type"
E_NUM_SHORT = "numeric: value shorter than its 8-byte header"
E_NUM_LEN = "numeric: length does not match the digit count"
E_NUM_SIGN = "numeric: invalid sign"
E_NUM_DIGIT = "numeric: invalid base-10000 digit"
E_NUM_SCALE = "numeric: invalid display scale"
E_JSONB = "jsonb: unsupported version (expected 1)"
E_UTF8 = "invalid UTF-8 in a text value"
E_DATE = "date out of range"
E_TIME = "time out of range"
E_TZ = "time zone displacement out of range"
E_TIMESTAMP = "timestamp out of range"
E_INET_FAMILY = "inet: invalid address family"
E_INET_BITS = "inet: invalid mask length"
E_INET_LEN = "inet: invalid address length"
E_CIDR_BITS = "cidr: bits set to the right of the mask"
E_ARR_ELEM_KIND = "array: unsupported element kind"
E_ARR_SHORT = "array: truncated header"
E_ARR_NDIM = "array: invalid number of dimensions"
E_ARR_FLAGS = "array: invalid flags"
E_ARR_SIZE = "array: size exceeds the maximum allowed"
E_ARR_LBOUND = "array: lower bound is too large"
E_ARR_ELEM_LEN = "array: invalid element length"
E_ARR_ELEM_SHORT = "array: truncated element"
E_ARR_TRAILING = "array: trailing bytes after the last element"

POSTGRES_EPOCH_JDATE = 2451545
DATE_END_JULIAN = 2147483494  # date2j(5874898, 1, 1)
TZDISP_LIMIT = 57600  # (MAX_TZDISP_HOUR + 1) * SECS_PER_HOUR
MAX_ARRAY_SIZE = 134217727  # MaxAllocSize / sizeof(Datum)
MAXDIM = 6
USECS_PER_DAY = 86_400_000_000
USECS_PER_HOUR = 3_600_000_000
USECS_PER_MINUTE = 60_000_000
USECS_PER_SEC = 1_000_000
MIN_TIMESTAMP = -211_813_488_000_000_000  # 4714-11-24 00:00:00 BC
END_TIMESTAMP = 9_223_371_331_200_000_000  # 294277-01-01 00:00:00
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

_LAST_KIND = K_ARRAY


class _Malformed(Exception):
    pass


def _fail(reason):
    raise _Malformed(reason)


def _cdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _cmod(a: int, b: int) -> int:
    """C remainder (takes the sign of the dividend)."""
    return a - b * _cdiv(a, b)


def _zpad(v: int, width: int) -> str:
    return str(v).rjust(width, "0")


# -- float4 / float8 -------------------------------------------------------------------


def _shortest(bits: int, single: bool):
    """Shortest decimal strictly inside the rounding interval of this positive, finite,
    non-zero float (digits, exponent), correctly rounded, else the next one up.

    This is what PostgreSQL's Ryu prints: it is built without STRICTLY_SHORTEST, so
    both interval ends are excluded even for an even significand (the double nearest
    1e23 prints as 9.999999999999999e+22, where Python's repr says 1e+23). Exact
    rational arithmetic throughout."""
    mbits, ebits, bias, maxp = (23, 8, 127, 9) if single else (52, 11, 1023, 17)
    ieee_exp = (bits >> mbits) & ((1 << ebits) - 1)
    mant = bits & ((1 << mbits) - 1)
    if ieee_exp == 0:
        m, e = mant, 1 - bias - mbits
    else:
        m, e = mant | (1 << mbits), ieee_exp - bias - mbits
    x = Fraction(m) * Fraction(2) ** e
    half_up = Fraction(2) ** (e - 1)
    # a power of two above the smallest normal: the gap below is half the gap above
    half_down = half_up / 2 if mant == 0 and ieee_exp > 1 else half_up
    lo, hi = x - half_down, x + half_up
    with localcontext() as ctx:
        ctx.prec = 2000  # a double has at most 767 significant decimal digits
        exact = Decimal(m * 2**e) if e >= 0 else Decimal(m * 5 ** (-e)).scaleb(e)
        e10 = exact.adjusted()
        for p in range(1, maxp + 1):
            quantum = Decimal(1).scaleb(e10 - p + 1)
            cand = exact.quantize(quantum, rounding=ROUND_HALF_EVEN)
            if lo < Fraction(cand) < hi:
                break
            if cand < exact and lo < Fraction(cand + quantum) < hi:
                cand = cand + quantum
                break
        _s, digits, exp = cand.normalize().as_tuple()
    return digits, exp


def _float_text(value: float, digits, exp: int, single: bool) -> str:
    d = "".join(map(str, digits)).rstrip("0") or "0"
    e = exp + len(digits) - 1  # decimal exponent of the first digit
    s = "-" if value < 0 else ""
    if -4 <= e < (6 if single else 15):
        if e < 0:
            return s + "0." + "0" * (-e - 1) + d
        if len(d) <= e + 1:
            return s + d + "0" * (e + 1 - len(d))
        return s + d[: e + 1] + "." + d[e + 1 :]
    return s + d[0] + ("." + d[1:] if len(d) > 1 else "") + "e" + ("-" if e < 0 else "+") + _zpad(abs(e), 2)


def _fmt_float(b: bytes, single: bool) -> str:
    if len(b) != (4 if single else 8):
        _fail(E_LENGTH)
    v = struct.unpack(">f" if single else ">d", b)[0]
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    bits = int.from_bytes(b, "big") & ~(1 << (31 if single else 63))
    digits, exp = _shortest(bits, single)
    return _float_text(v, digits, exp, single)


# -- numeric ---------------------------------------------------------------------------


def _fmt_numeric(b: bytes) -> str:
    if len(b) < 8:
        _fail(E_NUM_SHORT)
    ndigits, weight, sign, dscale = struct.unpack(">HhHH", b[:8])
    if len(b) != 8 + 2 * ndigits:
        _fail(E_NUM_LEN)
    if sign not in (0x0000, 0x4000, 0xC000, 0xD000, 0xF000):
        _fail(E_NUM_SIGN)
    digits = list(struct.unpack(f">{ndigits}H", b[8:]))
    if any(d >= 10000 for d in digits):
        _fail(E_NUM_DIGIT)
    # special values: weight and dscale are meaningless (±Infinity carry 0x0020)
    if sign == 0xC000:
        return "NaN"
    if sign == 0xD000:
        return "Infinity"
    if sign == 0xF000:
        return "-Infinity"
    if dscale > 0x3FFF:
        _fail(E_NUM_SCALE)
    # make_result's normalisation: leading zero digits move into the weight
    while digits and digits[0] == 0:
        digits.pop(0)
        weight -= 1
    if not digits:
        weight = 0
    # get_str_from_var
    parts = []
    if weight < 0:
        d = weight + 1
        parts.append("0")
    else:
        for d in range(weight + 1):
            dig = digits[d] if d < len(digits) else 0
            parts.append(str(dig) if d == 0 else _zpad(dig, 4))
        d = weight + 1
    if dscale > 0:
        frac = []
        i = 0
        while i < dscale:
            frac.append(_zpad(digits[d] if 0 <= d < len(digits) else 0, 4))
            d += 1
            i += 4
        parts.append("." + "".join(frac)[:dscale])
    text = "".join(parts)
    # a value that is zero at this scale prints without a sign (make_result)
    if sign == 0x4000 and text.strip("0.") != "":
        text = "-" + text
    return text


# -- date / time -----------------------------------------------------------------------


def _j2date(jd: int):
    """PostgreSQL's j2date (unsigned 32-bit arithmetic; no wrap for valid dates)."""
    m = 0xFFFFFFFF
    julian = jd & m
    julian = (julian + 32044) & m
    quad = julian // 146097
    extra = ((julian - quad * 146097) * 4 + 3) & m
    julian = (julian + 60 + quad * 3 + extra // 146097) & m
    quad = julian // 1461
    julian -= quad * 1461
    y = julian * 4 // 1461
    julian = ((julian + 305) % 365 if y != 0 else (julian + 306) % 366) + 123
    y += quad * 4
    year = y - 4800
    quad = julian * 2141 // 65536
    day = julian - 7834 * quad // 256
    month = (quad + 10) % 12 + 1
    return year, month, day


def _date_part(year: int, mon: int, mday: int) -> str:
    return f"{_zpad(year if year > 0 else -(year - 1), 4)}-{_zpad(mon, 2)}-{_zpad(mday, 2)}"


def _seconds(sec: int, fsec: int) -> str:
    """AppendSeconds(precision 6, fillzeros): SS[.ffffff] without trailing zeros."""
    s = _zpad(abs(sec), 2)
    if fsec == 0:
        return s
    if abs(fsec) >= 1_000_000:  # PostgreSQL then prints the plain number
        return s + "." + str(abs(fsec))
    return s + "." + _zpad(abs(fsec), 6).rstrip("0")


def _time_part(t: int) -> str:
    hour, t = divmod(t, USECS_PER_HOUR)
    minute, t = divmod(t, USECS_PER_MINUTE)
    sec, fsec = divmod(t, USECS_PER_SEC)
    return f"{_zpad(hour, 2)}:{_zpad(minute, 2)}:{_seconds(sec, fsec)}"


def _timezone(tz: int) -> str:
    """EncodeTimezone: seconds WEST of UTC, printed east-positive ±HH[:MM[:SS]]."""
    sec = abs(tz)
    minute, sec = divmod(sec, 60)
    hour, minute = divmod(minute, 60)
    s = ("+" if tz <= 0 else "-") + _zpad(hour, 2)
    if sec:
        return s + f":{_zpad(minute, 2)}:{_zpad(sec, 2)}"
    if minute:
        return s + f":{_zpad(minute, 2)}"
    return s


def _fmt_date(d: int) -> str:
    if d == INT32_MIN:
        return "-infinity"
    if d == INT32_MAX:
        return "infinity"
    if d < -POSTGRES_EPOCH_JDATE or d >= DATE_END_JULIAN - POSTGRES_EPOCH_JDATE:
        _fail(E_DATE)
    year, mon, mday = _j2date(d + POSTGRES_EPOCH_JDATE)
    return _date_part(year, mon, mday) + (" BC" if year <= 0 else "")


def _fmt_time(t: int, zone=None) -> str:
    if t < 0 or t > USECS_PER_DAY:
        _fail(E_TIME)
    if zone is not None and (zone <= -TZDISP_LIMIT or zone >= TZDISP_LIMIT):
        _fail(E_TZ)
    s = _time_part(t)
    return s if zone is None else s + _timezone(zone)


def _fmt_timestamp(ts: int, with_zone: bool) -> str:
    """timestamp2tm + EncodeDateTime (ISO); timestamptz in UTC, BC after the offset."""
    if ts == INT64_MIN:
        return "-infinity"
    if ts == INT64_MAX:
        return "infinity"
    if ts < MIN_TIMESTAMP or ts >= END_TIMESTAMP:
        _fail(E_TIMESTAMP)
    date, t = divmod(ts, USECS_PER_DAY)  # floor: same as PG's TMODULO + fix-up
    year, mon, mday = _j2date(date + POSTGRES_EPOCH_JDATE)
    s = _date_part(year, mon, mday) + " " + _time_part(t)
    if with_zone:
        s += "+00"
    if year <= 0:
        s += " BC"
    return s


def _fmt_interval(time: int, day: int, month: int) -> str:
    """EncodeInterval, INTSTYLE_POSTGRES; PG 17 infinities are all-max / all-min."""
    if time == INT64_MAX and day == INT32_MAX and month == INT32_MAX:
        return "infinity"
    if time == INT64_MIN and day == INT32_MIN and month == INT32_MIN:
        return "-infinity"
    year, mon = _cdiv(month, 12), _cmod(month, 12)
    hour = _cdiv(time, USECS_PER_HOUR)
    time -= hour * USECS_PER_HOUR
    minute = _cdiv(time, USECS_PER_MINUTE)
    time -= minute * USECS_PER_MINUTE
    sec = _cdiv(time, USECS_PER_SEC)
    fsec = time - sec * USECS_PER_SEC

    out = []
    state = {"zero": True, "before": False}

    def part(value, unit):
        if value == 0:
            return
        out.append(("" if state["zero"] else " ") + ("+" if state["before"] and value > 0 else "")
                   + f"{value} {unit}" + ("" if value == 1 else "s"))
        state["before"] = value < 0
        state["zero"] = False

    part(year, "year")
    part(mon, "mon")
    part(day, "day")
    if state["zero"] or hour or minute or sec or fsec:
        minus = hour < 0 or minute < 0 or sec < 0 or fsec < 0
        out.append(("" if state["zero"] else " ") + ("-" if minus else "+" if state["before"] else "")
                   + f"{_zpad(abs(hour), 2)}:{_zpad(abs(minute), 2)}:{_seconds(sec, fsec)}")
    return "".join(out)


# -- network types ---------------------------------------------------------------------


def _fmt_inet(b: bytes, is_cidr: bool) -> str:
    """inet_recv's checks, then network_out (pg_inet_net_ntop, + '/bits' for cidr)."""
    if len(b) < 4:
        _fail(E_LENGTH)
    family, bits, _is_cidr_flag, nb = b[0], b[1], b[2], b[3]
    if family not in (2, 3):
        _fail(E_INET_FAMILY)
    maxbits = 32 if family == 2 else 128
    if bits > maxbits:
        _fail(E_INET_BITS)
    if nb != maxbits // 8:
        _fail(E_INET_LEN)
    if len(b) != 4 + nb:
        _fail(E_LENGTH)
    a = b[4:]
    if is_cidr and bits != maxbits:
        host = int.from_bytes(a, "big") & ((1 << (maxbits - bits)) - 1)
        if host:
            _fail(E_CIDR_BITS)
    if family == 2:
        s = ".".join(str(x) for x in a)
        if bits != 32:
            s += f"/{bits}"
    else:
        words = [(a[2 * i] << 8) | a[2 * i + 1] for i in range(8)]
        best_base, best_len, cur_base, cur_len = -1, 0, -1, 0
        for i, wd in enumerate(words):
            if wd == 0:
                if cur_base == -1:
                    cur_base, cur_len = i, 1
                else:
                    cur_len += 1
            elif cur_base != -1:
                if best_base == -1 or cur_len > best_len:
                    best_base, best_len = cur_base, cur_len
                cur_base = -1
        if cur_base != -1 and (best_base == -1 or cur_len > best_len):
            best_base, best_len = cur_base, cur_len
        if best_base != -1 and best_len < 2:
            best_base = -1
        s = ""
        for i in range(8):
            if best_base != -1 and best_base <= i < best_base + best_len:
                if i == best_base:
                    s += ":"
                continue
            if i != 0:
                s += ":"
            if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 7 and words[7] != 1)
                                               or (best_len == 5 and words[5] == 0xFFFF)):
                s += ".".join(str(x) for x in a[12:16])
                break
            s += format(words[i], "x")
        if best_base != -1 and best_base + best_len == 8:
            s += ":"
        if bits != 128:
            s += f"/{bits}"
    if is_cidr and "/" not in s:
        s += f"/{bits}"
    return s


def _fmt_macaddr(b: bytes, eui64: bool) -> str:
    if not eui64:
        if len(b) != 6:
            _fail(E_LENGTH)
    elif len(b) == 6:  # macaddr8_recv widens an EUI-48 with ff:fe
        b = b[:3] + b"\xff\xfe" + b[3:]
    elif len(b) != 8:
        _fail(E_LENGTH)
    return ":".join(f"{x:02x}" for x in b)


def _fmt_uuid(b: bytes) -> str:
    if len(b) != 16:
        _fail(E_LENGTH)
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# -- arrays ----------------------------------------------------------------------------

_ARRAY_SPECIAL = frozenset(b'{}," \\\t\n\r\v\f')


def _quote_element(t: bytes) -> bytes:
    """array_out: quote when empty, NULL in any case, or holding { } , " \\ or whitespace."""
    if not t or t.lower() == b"null" or any(c in _ARRAY_SPECIAL for c in t):
        return b'"' + t.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    return t


def _fmt_array(b: bytes, elem_kind: int) -> bytes:
    if elem_kind < 0 or elem_kind > _LAST_KIND or elem_kind == K_ARRAY:
        _fail(E_ARR_ELEM_KIND)
    if len(b) < 12:
        _fail(E_ARR_SHORT)
    ndim, flags, _elemtype = struct.unpack(">iiI", b[:12])
    if ndim < 0 or ndim > MAXDIM:
        _fail(E_ARR_NDIM)
    if flags not in (0, 1):
        _fail(E_ARR_FLAGS)
    if len(b) < 12 + 8 * ndim:
        _fail(E_ARR_SHORT)
    dims, lbs = [], []
    pos = 12
    nitems = 1 if ndim > 0 else 0
    for _ in range(ndim):
        dim, lb = struct.unpack(">ii", b[pos : pos + 8])
        pos += 8
        dims.append(dim)
        lbs.append(lb)
        if dim < 0:
            _fail(E_ARR_SIZE)
        nitems *= dim
        if nitems > MAX_ARRAY_SIZE:
            _fail(E_ARR_SIZE)
    for dim, lb in zip(dims, lbs):
        if dim + lb > INT32_MAX:
            _fail(E_ARR_LBOUND)
    if nitems == 0:
        if pos != len(b):
            _fail(E_ARR_TRAILING)
        return b"{}"

    out = []
    if any(lb != 1 for lb in lbs):
        out.append("".join(f"[{lb}:{lb + dim - 1}]" for dim, lb in zip(dims, lbs)).encode() + b"=")
    out.append(b"{")
    indx = [0] * ndim
    j = 0
    while True:
        out.append(b"{" * (ndim - 1 - j))
        if len(b) - pos < 4:
            _fail(E_ARR_ELEM_SHORT)
        (elen,) = struct.unpack(">i", b[pos : pos + 4])
        pos += 4
        if elen < -1:
            _fail(E_ARR_ELEM_LEN)
        if elen == -1:
            out.append(b"NULL")
        else:
            if elen > len(b) - pos:
                _fail(E_ARR_ELEM_SHORT)
            out.append(_quote_element(_format(elem_kind, -1, b[pos : pos + elen])))
            pos += elen
        i = ndim - 1
        while i >= 0:
            indx[i] += 1
            if indx[i] < dims[i]:
                out.append(b",")
                break
            indx[i] = 0
            out.append(b"}")
            i -= 1
        j = i
        if j == -1:
            break
    if pos != len(b):
        _fail(E_ARR_TRAILING)
    return b"".join(out)


# -- dispatch --------------------------------------------------------------------------

_INT_FORMATS = {K_INT2: ">h", K_INT4: ">i", K_INT8: ">q", K_OID: ">I"}


def _utf8(b: bytes) -> bytes:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        _fail(E_UTF8)
    return b


def _format(kind: int, elem_kind: int, b: bytes) -> bytes:
    if kind in (K_TEXT, K_BPCHAR, K_JSON):
        return _utf8(b)
    if kind in _INT_FORMATS:
        fmt = _INT_FORMATS[kind]
        if len(b) != struct.calcsize(fmt):
            _fail(E_LENGTH)
        return str(struct.unpack(fmt, b)[0]).encode()
    if kind in (K_FLOAT4, K_FLOAT8):
        return _fmt_float(b, kind == K_FLOAT4).encode()
    if kind in (K_DECIMAL, K_NUMERIC_STR):
        return _fmt_numeric(b).encode()
    if kind == K_BOOL:
        if len(b) != 1:
            _fail(E_LENGTH)
        return b"t" if b[0] else b"f"
    if kind == K_CHAR:
        if len(b) != 1:
            _fail(E_LENGTH)
        c = b[0]
        if c >= 0x80:  # charout: high-bit bytes as \ooo (PG 15+)
            return b"\\" + f"{c:03o}".encode()
        return b"" if c == 0 else b
    if kind in (K_BYTEA, K_UNKNOWN):
        # K_UNKNOWN: binary value of a type the decoder does not know, shown as hex
        return b"\\x" + b.hex().encode()
    if kind == K_JSONB:
        if len(b) < 1 or b[0] != 1:
            _fail(E_JSONB)
        return _utf8(b[1:])
    if kind == K_DATE:
        if len(b) != 4:
            _fail(E_LENGTH)
        return _fmt_date(struct.unpack(">i", b)[0]).encode()
    if kind == K_TIME:
        if len(b) != 8:
            _fail(E_LENGTH)
        return _fmt_time(struct.unpack(">q", b)[0]).encode()
    if kind == K_TIMETZ:
        if len(b) != 12:
            _fail(E_LENGTH)
        t, zone = struct.unpack(">qi", b)
        return _fmt_time(t, zone).encode()
    if kind in (K_TIMESTAMP, K_TIMESTAMPTZ):
        if len(b) != 8:
            _fail(E_LENGTH)
        return _fmt_timestamp(struct.unpack(">q", b)[0], kind == K_TIMESTAMPTZ).encode()
    if kind == K_INTERVAL:
        if len(b) != 16:
            _fail(E_LENGTH)
        return _fmt_interval(*struct.unpack(">qii", b)).encode()
    if kind == K_UUID:
        return _fmt_uuid(b).encode()
    if kind in (K_INET, K_CIDR):
        return _fmt_inet(b, kind == K_CIDR).encode()
    if kind in (K_MACADDR, K_MACADDR8):
        return _fmt_macaddr(b, kind == K_MACADDR8).encode()
    if kind == K_ARRAY:
        return _fmt_array(b, elem_kind)
    _fail(E_KIND)


def format_binary_value(column_type, value: bytes) -> bytes:
    """The PostgreSQL text form (UTF-8 bytes) of one binary value; DecodeError if malformed."""
    try:
        return _format(column_type.kind, column_type.elem_kind, bytes(value))
    except _Malformed as exc:
        raise DecodeError(exc.args[0]) from None


def format_binary_values(column_type, values):
    """PostgreSQL text form of each binary value of one column.

    ``column_type`` is a :class:`pgoutput_fast.types.ColumnType`; ``values`` a list of
    ``bytes`` (``None`` stays ``None``). Returns a list of ``str`` (UTF-8, undecodable
    bytes as surrogate escapes). Raises :class:`pgoutput_fast.DecodeError` on a
    malformed value.
    """
    return [
        None if v is None else format_binary_value(column_type, v).decode("utf-8", "surrogateescape")
        for v in values
    ]
