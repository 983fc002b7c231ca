# Binary (send-format) value -> the text PostgreSQL's output function prints.
#
# The generic change-event table keeps every column as text. For binary-mode captures
# ('b' TupleData) that text is rebuilt here, exactly as the server would have printed it
# in a session with DateStyle=ISO, IntervalStyle=postgres, TimeZone=UTC,
# extra_float_digits=3 and bytea_output=hex (docs/protocol.md §4). Each formatter is a port
# of the server's output function (float8out/Ryu, numeric_out, EncodeDateTime,
# EncodeInterval, inet_net_ntop, array_out, ...) and accepts exactly what the matching
# receive function accepts: anything else is "malformed" (-1 with a static reason).
#
# Writers reserve the worst-case size first and then store through a plain pointer
# (`fmt_w_*` return the advanced pointer), so the only failure inside a formatter is
# a failed reservation (out of memory). Every read from the input is bounds-checked.
# The C writers (two-digit table, integer / float / time writers, the common numeric's
# straight-line writer) are in text_format.h, declared below.
#
# Everything here is prefixed fmt_ so it cannot clash with the value parsers, which are
# written alongside; the value kinds are kind_numbers.pxi's K_* (generated from types.py).

from libc.string cimport memmove
from libc.stdint cimport INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
cimport cython

cdef extern from "shortest.h" nogil:
    ctypedef struct pgo_dec64:
        uint64_t mantissa
        int32_t exponent
    pgo_dec64 pgo_d2d(uint64_t bits)
    pgo_dec64 pgo_d2d_fast(uint64_t bits)
    ctypedef struct pgo_dec32:
        uint32_t mantissa
        int32_t exponent
    pgo_dec32 pgo_f2d(uint32_t bits)


# PostgreSQL's datetime constants (src/include/datatype/timestamp.h).
cdef enum:
    FMT_POSTGRES_EPOCH_JDATE = 2451545
    FMT_DATE_END_JULIAN = 2147483494          # date2j(5874898, 1, 1)
    FMT_TZDISP_LIMIT = 57600                  # (MAX_TZDISP_HOUR + 1) * SECS_PER_HOUR
    FMT_MAX_ARRAY_SIZE = 134217727            # MaxAllocSize / sizeof(Datum)
    FMT_MAXDIM = 6

# Compile-time constants (C macros), not module variables: a division by a variable is
# a hardware divide (~40 cycles on x86-64), by a constant a multiplication and a shift.
cdef extern from "text_format.h":
    const int64_t FMT_USECS_PER_DAY
    const int64_t FMT_USECS_PER_HOUR
    const int64_t FMT_USECS_PER_MINUTE
    const int64_t FMT_USECS_PER_SEC
    const int64_t FMT_MIN_TIMESTAMP
    const int64_t FMT_END_TIMESTAMP

# The reasons (shared word for word with pgoutput_fast/_reference/textformat.py).
cdef const char *FMT_E_KIND = b"unsupported value kind"
cdef const char *FMT_E_LENGTH = b"binary value has the wrong length for its type"
cdef const char *FMT_E_NOMEM = b"out of memory"
cdef const char *FMT_E_NUM_SHORT = b"numeric: value shorter than its 8-byte header"
cdef const char *FMT_E_NUM_LEN = b"numeric: length does not match the digit count"
cdef const char *FMT_E_NUM_SIGN = b"numeric: invalid sign"
cdef const char *FMT_E_NUM_DIGIT = b"numeric: invalid base-10000 digit"
cdef const char *FMT_E_NUM_SCALE = b"numeric: invalid display scale"
cdef const char *FMT_E_JSONB = b"jsonb: unsupported version (expected 1)"
cdef const char *FMT_E_UTF8 = b"invalid UTF-8 in a text value"
cdef const char *FMT_E_DATE = b"date out of range"
cdef const char *FMT_E_TIME = b"time out of range"
cdef const char *FMT_E_TZ = b"time zone displacement out of range"
cdef const char *FMT_E_TIMESTAMP = b"timestamp out of range"
cdef const char *FMT_E_INET_FAMILY = b"inet: invalid address family"
cdef const char *FMT_E_INET_BITS = b"inet: invalid mask length"
cdef const char *FMT_E_INET_LEN = b"inet: invalid address length"
cdef const char *FMT_E_CIDR_BITS = b"cidr: bits set to the right of the mask"
cdef const char *FMT_E_ARR_ELEM_KIND = b"array: unsupported element kind"
cdef const char *FMT_E_ARR_SHORT = b"array: truncated header"
cdef const char *FMT_E_ARR_NDIM = b"array: invalid number of dimensions"
cdef const char *FMT_E_ARR_FLAGS = b"array: invalid flags"
cdef const char *FMT_E_ARR_SIZE = b"array: size exceeds the maximum allowed"
cdef const char *FMT_E_ARR_LBOUND = b"array: lower bound is too large"
cdef const char *FMT_E_ARR_ELEM_LEN = b"array: invalid element length"
cdef const char *FMT_E_ARR_ELEM_SHORT = b"array: truncated element"
cdef const char *FMT_E_ARR_TRAILING = b"array: trailing bytes after the last element"

cdef const char *FMT_HEX = b"0123456789abcdef"


# -- writing -----------------------------------------------------------------------

cdef inline char *fmt_room(Buf *out, Py_ssize_t n) noexcept nogil:
    """Pointer to `n` writable bytes at the end of `out` (NULL: out of memory).
    The caller stores through it and then calls fmt_commit with the advanced pointer."""
    if out.cap - out.len < n and buf_reserve(out, n) < 0:
        return NULL
    return <char *>out.data + out.len


cdef inline void fmt_commit(Buf *out, char *end) noexcept nogil:
    out.len = end - <char *>out.data


cdef inline char *fmt_w_str(char *w, const char *s) noexcept nogil:
    while s[0] != 0:
        w[0] = s[0]
        w += 1
        s += 1
    return w


cdef extern from "text_format.h":
    const char *FMT_DIGITS2 "pgo_digits2"
    char *fmt_w_u64 "pgo_w_u64" (char *w, uint64_t v, int width) noexcept nogil
    char *fmt_w_float "pgo_w_float" (char *w, uint64_t digits, int32_t exp_dec, int fixed_hi) noexcept nogil
    bint FMT_HAVE_W_MMSS "PGO_HAVE_W_MMSS"
    char *fmt_w_mmss "pgo_w_mmss" (char *w, uint32_t t, int with_zone) noexcept nogil


cdef inline char *fmt_w_2(char *w, unsigned int v) noexcept nogil:
    """Two digits of v < 100 (minutes, seconds)."""
    memcpy(w, FMT_DIGITS2 + 2 * v, 2)
    return w + 2


cdef inline char *fmt_w_i64(char *w, int64_t v) noexcept nogil:
    if v < 0:
        w[0] = 45  # '-'
        return fmt_w_u64(w + 1, <uint64_t>0 - <uint64_t>v, 0)
    return fmt_w_u64(w, <uint64_t>v, 0)


cdef inline int fmt_literal(Buf *out, const char *s, const char **why) noexcept nogil:
    cdef Py_ssize_t n = 0
    while s[n] != 0:
        n += 1
    if buf_append(out, s, n) < 0:
        why[0] = FMT_E_NOMEM
        return -1
    return 0


cdef inline int fmt_bytes(Buf *out, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n == 0:      # memcpy into a still-NULL buffer is undefined even for 0 bytes
        return 0
    if buf_append(out, p, n) < 0:
        why[0] = FMT_E_NOMEM
        return -1
    return 0


cdef inline int fmt_hex(Buf *out, const char *prefix, const unsigned char *p, Py_ssize_t n,
                        const char **why) noexcept nogil:
    """prefix + lowercase hex of the bytes (bytea_output=hex)."""
    cdef char *w = fmt_room(out, 2 + 2 * n)
    cdef Py_ssize_t i
    cdef uint64_t v
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    w = fmt_w_str(w, prefix)
    i = 0
    if PGO_SWAR_DIGITS:
        while n - i >= 4:                       # (4 bytes at a time)
            v = pgo_hex_encode4(p + i)
            memcpy(w, &v, 8)
            w += 8
            i += 4
    while i < n:
        w[0] = FMT_HEX[p[i] >> 4]
        w[1] = FMT_HEX[p[i] & 15]
        w += 2
        i += 1
    fmt_commit(out, w)
    return 0


# -- float4 / float8: shortest round-trip digits, laid out like PostgreSQL's Ryu -----
#
# The digits come from shortest.h, this project's Ryu (with PostgreSQL's choices: an
# exact halfway decimal never prints; float8 by its Schubfach road, pgo_d2d_fast, which
# gives the same digits); fmt_w_float (pgo_w_float) places the point as
# float8out/float4out do.

cdef int fmt_float(Buf *out, const unsigned char *p, bint single, const char **why) noexcept nogil:
    """float4out/float8out with extra_float_digits > 0 of the big-endian value at p:
    Ryu's shortest round-trip digits, fixed notation for decimal exponents
    -4 <= e < 15 (float4: < 6), else d.ddde±XX."""
    cdef char *w
    cdef uint64_t bits = pgo_be32(p) if single else pgo_be64(p)
    cdef int exp_bits = 8 if single else 11
    cdef int man_bits = 23 if single else 52
    cdef uint64_t mantissa = bits & ((<uint64_t>1 << man_bits) - 1)
    cdef uint64_t biased = (bits >> man_bits) & ((<uint64_t>1 << exp_bits) - 1)
    cdef bint negative = (bits >> (man_bits + exp_bits)) & 1
    cdef pgo_dec64 dec
    cdef pgo_dec32 dec32
    cdef uint64_t digits
    cdef int32_t exp_dec
    if biased == (<uint64_t>1 << exp_bits) - 1:
        if mantissa != 0:
            return fmt_literal(out, b"NaN", why)
        return fmt_literal(out, b"-Infinity" if negative else b"Infinity", why)
    if biased == 0 and mantissa == 0:
        return fmt_literal(out, b"-0" if negative else b"0", why)
    w = fmt_room(out, 40)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if negative:
        w[0] = 45
        w += 1
    if single:
        dec32 = pgo_f2d(<uint32_t>bits)
        digits = dec32.mantissa
        exp_dec = dec32.exponent
    else:
        dec = pgo_d2d_fast(bits)
        digits = dec.mantissa
        exp_dec = dec.exponent
    fmt_commit(out, fmt_w_float(w, digits, exp_dec, 6 if single else 15))
    return 0


# -- numeric -----------------------------------------------------------------------

cdef extern from "text_format.h":
    char *fmt_numeric_fast "pgo_numeric_fast" (char *w, const unsigned char *p, Py_ssize_t n) noexcept nogil


cdef int fmt_numeric(Buf *out, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """numeric_recv's checks, then get_str_from_var: exactly dscale fraction digits."""
    cdef Py_ssize_t ndigits, i, d, first, k
    cdef int weight, sign, dscale, dig
    cdef bint nonzero
    cdef char *w
    cdef char *digits_start
    if n < 8:
        why[0] = FMT_E_NUM_SHORT
        return -1
    w = fmt_room(out, 40)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    w = fmt_numeric_fast(w, p, n)
    if w != NULL:
        fmt_commit(out, w)
        return 0
    ndigits = pgo_be16(p)
    weight = pgo_be16s(p + 2)
    sign = pgo_be16(p + 4)
    dscale = pgo_be16(p + 6)
    if n != 8 + 2 * ndigits:
        why[0] = FMT_E_NUM_LEN
        return -1
    if sign != 0x0000 and sign != 0x4000 and sign != 0xC000 and sign != 0xD000 and sign != 0xF000:
        why[0] = FMT_E_NUM_SIGN
        return -1
    for i in range(ndigits):
        if pgo_be16(p + 8 + 2 * i) >= 10000:
            why[0] = FMT_E_NUM_DIGIT
            return -1
    # special values: their weight and dscale are meaningless (±Infinity carry 0x0020)
    if sign == 0xC000:
        return fmt_literal(out, b"NaN", why)
    if sign == 0xD000:
        return fmt_literal(out, b"Infinity", why)
    if sign == 0xF000:
        return fmt_literal(out, b"-Infinity", why)
    if dscale > 0x3FFF:
        why[0] = FMT_E_NUM_SCALE
        return -1
    # make_result's normalisation: leading zero digits move into the weight
    first = 0
    while first < ndigits and pgo_be16(p + 8 + 2 * first) == 0:
        first += 1
        weight -= 1
    if first == ndigits:
        weight = 0
    p += 8 + 2 * first
    ndigits -= first
    w = fmt_room(out, 1 + (4 * (<Py_ssize_t>weight + 1) if weight >= 0 else 1) + 1 + dscale + 4)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if sign == 0x4000:
        w[0] = 45
        w += 1
    digits_start = w
    if weight < 0:
        d = weight + 1
        w[0] = 48
        w += 1
    else:
        # the first group without its leading zeros (fmt_w_u64), the rest 4 digits each
        w = fmt_w_u64(w, <uint64_t>(pgo_be16(p) if ndigits > 0 else 0), 0)
        d = 1
        while d <= weight:
            dig = pgo_be16(p + 2 * d) if d < ndigits else 0
            memcpy(w, FMT_DIGITS2 + 2 * (dig // 100), 2)
            memcpy(w + 2, FMT_DIGITS2 + 2 * (dig % 100), 2)
            w += 4
            d += 1
    if dscale > 0:
        w[0] = 46
        w += 1
        k = 0
        while k < dscale:
            dig = pgo_be16(p + 2 * d) if 0 <= d < ndigits else 0
            memcpy(w, FMT_DIGITS2 + 2 * (dig // 100), 2)
            memcpy(w + 2, FMT_DIGITS2 + 2 * (dig % 100), 2)
            w += 4
            d += 1
            k += 4
        w -= k - dscale      # the last group printed whole, keep dscale digits
    if sign == 0x4000:
        # a value that is zero at this scale prints without a sign (make_result)
        nonzero = False
        k = 0
        while digits_start + k < w:
            if digits_start[k] != 48 and digits_start[k] != 46:
                nonzero = True
                break
            k += 1
        if not nonzero:
            memmove(digits_start - 1, digits_start, <size_t>(w - digits_start))
            w -= 1
    fmt_commit(out, w)
    return 0


# -- date / time -------------------------------------------------------------------

cdef void fmt_j2date(int jd, int *year, int *month, int *day) noexcept nogil:
    """PostgreSQL's j2date, unsigned arithmetic and all."""
    cdef unsigned int julian, quad, extra
    cdef int y
    julian = <unsigned int>jd
    julian += 32044
    quad = julian // 146097
    extra = (julian - quad * 146097) * 4 + 3
    julian += 60 + quad * 3 + extra // 146097
    quad = julian // 1461
    julian -= quad * 1461
    y = <int>(julian * 4 // 1461)
    if y != 0:
        julian = (julian + 305) % 365 + 123
    else:
        julian = (julian + 306) % 366 + 123
    y += <int>(quad * 4)
    year[0] = y - 4800
    quad = julian * 2141 // 65536
    day[0] = <int>(julian - 7834 * quad // 256)
    month[0] = <int>((quad + 10) % 12 + 1)


cdef inline char *fmt_w_date(char *w, int year, int mon, int mday) noexcept nogil:
    w = fmt_w_u64(w, <uint64_t>(year if year > 0 else -(year - 1)), 4)
    w[0] = 45
    w = fmt_w_u64(w + 1, <uint64_t>mon, 2)
    w[0] = 45
    return fmt_w_u64(w + 1, <uint64_t>mday, 2)


cdef char *fmt_w_seconds(char *w, int sec, int fsec) noexcept nogil:
    """AppendSeconds(precision 6, fillzeros): SS[.ffffff] without trailing zeros.
    Prints |sec| and |fsec|; callers print any sign."""
    cdef int value, precision = 6, rem
    cdef char *end
    cdef bint gotnonzero = False
    value = sec if sec >= 0 else -sec
    w = fmt_w_2(w, value) if 0 <= value < 100 else fmt_w_u64(w, <uint64_t>value, 2)
    if fsec == 0:
        return w
    value = fsec if fsec >= 0 else -fsec
    w[0] = 46
    w += 1
    end = w + precision
    while precision > 0:
        precision -= 1
        rem = value % 10
        value //= 10
        if rem != 0:
            gotnonzero = True
        if gotnonzero:
            w[precision] = <char>(48 + rem)
        else:
            end = w + precision
    if value != 0:   # more than 6 digits: PostgreSQL falls back to the plain number
        return fmt_w_u64(w, <uint64_t>(fsec if fsec >= 0 else -fsec), 0)
    return end


cdef inline char *fmt_w_time(char *w, int64_t t) noexcept nogil:
    """HH:MM:SS[.f] of 0 <= t <= 24h in µs (time2tm + EncodeTimeOnly)."""
    cdef int64_t hour = t // FMT_USECS_PER_HOUR
    t -= hour * FMT_USECS_PER_HOUR
    cdef int64_t minute = t // FMT_USECS_PER_MINUTE
    t -= minute * FMT_USECS_PER_MINUTE
    cdef int64_t sec = t // FMT_USECS_PER_SEC
    t -= sec * FMT_USECS_PER_SEC
    w = fmt_w_u64(w, <uint64_t>hour, 2)
    w[0] = 58
    w = fmt_w_u64(w + 1, <uint64_t>minute, 2)
    w[0] = 58
    return fmt_w_seconds(w + 1, <int>sec, <int>t)


cdef char *fmt_w_timezone(char *w, int tz) noexcept nogil:
    """EncodeTimezone: tz is seconds WEST of UTC, printed east-positive ±HH[:MM[:SS]]."""
    cdef int sec = tz if tz >= 0 else -tz
    cdef int minute = sec // 60
    sec -= minute * 60
    cdef int hour = minute // 60
    minute -= hour * 60
    w[0] = 43 if tz <= 0 else 45
    w = fmt_w_u64(w + 1, <uint64_t>hour, 2)
    if sec != 0:
        w[0] = 58
        w = fmt_w_u64(w + 1, <uint64_t>minute, 2)
        w[0] = 58
        w = fmt_w_u64(w + 1, <uint64_t>sec, 2)
    elif minute != 0:
        w[0] = 58
        w = fmt_w_u64(w + 1, <uint64_t>minute, 2)
    return w


cdef int fmt_date(Buf *out, int32_t d, const char **why) noexcept nogil:
    cdef int year, mon, mday
    cdef char *w
    if d == INT32_MIN:
        return fmt_literal(out, b"-infinity", why)
    if d == INT32_MAX:
        return fmt_literal(out, b"infinity", why)
    if d < -FMT_POSTGRES_EPOCH_JDATE or d >= FMT_DATE_END_JULIAN - FMT_POSTGRES_EPOCH_JDATE:
        why[0] = FMT_E_DATE
        return -1
    w = fmt_room(out, 32)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    fmt_j2date(d + FMT_POSTGRES_EPOCH_JDATE, &year, &mon, &mday)
    w = fmt_w_date(w, year, mon, mday)
    if year <= 0:
        w = fmt_w_str(w, b" BC")
    fmt_commit(out, w)
    return 0


cdef int fmt_time(Buf *out, int64_t t, bint with_zone, int32_t zone, const char **why) noexcept nogil:
    cdef char *w
    if t < 0 or t > FMT_USECS_PER_DAY:
        why[0] = FMT_E_TIME
        return -1
    if with_zone and (zone <= -FMT_TZDISP_LIMIT or zone >= FMT_TZDISP_LIMIT):
        why[0] = FMT_E_TZ
        return -1
    w = fmt_room(out, 48)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    w = fmt_w_time(w, t)
    if with_zone:
        w = fmt_w_timezone(w, zone)
    fmt_commit(out, w)
    return 0


@cython.cdivision(True)
cdef int fmt_timestamp(Buf *out, int64_t ts, bint with_zone, const char **why) noexcept nogil:
    """timestamp2tm + EncodeDateTime (ISO). timestamptz is shown in UTC: '+00', and the
    BC suffix follows the offset, as PostgreSQL prints it."""
    cdef int64_t date, t
    cdef int year, mon, mday
    cdef char *w
    if ts == INT64_MIN:
        return fmt_literal(out, b"-infinity", why)
    if ts == INT64_MAX:
        return fmt_literal(out, b"infinity", why)
    if ts < FMT_MIN_TIMESTAMP or ts >= FMT_END_TIMESTAMP:
        why[0] = FMT_E_TIMESTAMP
        return -1
    w = fmt_room(out, 64)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    date = ts // FMT_USECS_PER_DAY      # C division: truncates toward zero
    t = ts - date * FMT_USECS_PER_DAY
    if t < 0:
        t += FMT_USECS_PER_DAY
        date -= 1
    fmt_j2date(<int>(date + FMT_POSTGRES_EPOCH_JDATE), &year, &mon, &mday)
    w = fmt_w_date(w, year, mon, mday)
    w[0] = 32
    w = fmt_w_time(w + 1, t)
    if with_zone:
        w = fmt_w_str(w, b"+00")
    if year <= 0:
        w = fmt_w_str(w, b" BC")
    fmt_commit(out, w)
    return 0


# -- a column's memo of its last date and hour ------------------------------------
# The change-event table writes each binary date and timestamp as text. A column's
# values mostly fall in the same day (dates) or hour (timestamps) as the value before,
# so the column keeps that day's or hour's text: 'YYYY-MM-DD' or 'YYYY-MM-DD HH:',
# written by fmt_j2date and fmt_w_date only when the day or hour changes.

cdef struct FmtMemo:
    int64_t key          # the day (dates) or hour (timestamps, floor of µs / 1 h) of text
    int32_t len          # bytes of text
    bint bc              # timestamps: year <= 0, " BC" follows the value
    char text[24]        # at most 16 bytes ('294276-12-31 23:', '5874897-12-31 BC')


cdef inline void fmt_memo_init(FmtMemo *m) noexcept nogil:
    m.key = INT64_MIN    # (no date or hour formats through the memo with this key)
    m.len = 0
    m.bc = False


@cython.cdivision(True)
cdef int fmt_timestamp_memo(Buf *out, int64_t ts, bint with_zone, FmtMemo *m,
                            const char **why) noexcept nogil:
    """fmt_timestamp, the date and hour from the column's memo."""
    cdef int64_t hour, day, t, minute, sec
    cdef int year, mon, mday
    cdef char *w
    cdef char *e
    if ts == INT64_MIN or ts == INT64_MAX or ts < FMT_MIN_TIMESTAMP or ts >= FMT_END_TIMESTAMP:
        return fmt_timestamp(out, ts, with_zone, why)
    w = fmt_room(out, 64)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    hour = ts // FMT_USECS_PER_HOUR      # C division: truncates toward zero
    if hour * FMT_USECS_PER_HOUR > ts:
        hour -= 1
    if hour != m.key:
        day = hour // 24
        if day * 24 > hour:
            day -= 1
        fmt_j2date(<int>(day + FMT_POSTGRES_EPOCH_JDATE), &year, &mon, &mday)
        e = fmt_w_date(m.text, year, mon, mday)
        e[0] = 32
        e = fmt_w_u64(e + 1, <uint64_t>(hour - day * 24), 2)
        e[0] = 58
        m.len = <int32_t>(e + 1 - m.text)
        m.bc = year <= 0
        m.key = hour
    memcpy(w, m.text, 16)
    w += m.len
    t = ts - hour * FMT_USECS_PER_HOUR
    if FMT_HAVE_W_MMSS:
        w = fmt_w_mmss(w, <uint32_t>t, with_zone)
        if m.bc:
            w = fmt_w_str(w, b" BC")
        fmt_commit(out, w)
        return 0
    minute = t // FMT_USECS_PER_MINUTE
    t -= minute * FMT_USECS_PER_MINUTE
    sec = t // FMT_USECS_PER_SEC
    t -= sec * FMT_USECS_PER_SEC
    w = fmt_w_2(w, <unsigned int>minute)
    w[0] = 58
    if t == 0:                          # whole seconds: no fraction to lay out
        w = fmt_w_2(w + 1, <unsigned int>sec)
    else:
        w = fmt_w_seconds(w + 1, <int>sec, <int>t)
    if with_zone:
        w[0] = 43           # '+00'
        w[1] = 48
        w[2] = 48
        w += 3
    if m.bc:
        w = fmt_w_str(w, b" BC")
    fmt_commit(out, w)
    return 0


cdef int fmt_date_memo(Buf *out, int32_t d, FmtMemo *m, const char **why) noexcept nogil:
    """fmt_date, the text from the column's memo."""
    cdef int year, mon, mday
    cdef char *w
    cdef char *e
    if (d == INT32_MIN or d == INT32_MAX or d < -FMT_POSTGRES_EPOCH_JDATE
            or d >= FMT_DATE_END_JULIAN - FMT_POSTGRES_EPOCH_JDATE):
        return fmt_date(out, d, why)
    w = fmt_room(out, 32)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if d != m.key:
        fmt_j2date(d + FMT_POSTGRES_EPOCH_JDATE, &year, &mon, &mday)
        e = fmt_w_date(m.text, year, mon, mday)
        if year <= 0:
            e = fmt_w_str(e, b" BC")
        m.len = <int32_t>(e - m.text)
        m.key = d
    memcpy(w, m.text, 16)
    fmt_commit(out, w + m.len)
    return 0


cdef char *fmt_w_interval_part(char *w, int64_t value, const char *unit, bint *is_zero,
                               bint *is_before) noexcept nogil:
    """AddPostgresIntPart."""
    if value == 0:
        return w
    if not is_zero[0]:
        w[0] = 32
        w += 1
    if is_before[0] and value > 0:
        w[0] = 43
        w += 1
    w = fmt_w_i64(w, value)
    w[0] = 32
    w = fmt_w_str(w + 1, unit)
    if value != 1:
        w[0] = 115  # 's'
        w += 1
    is_before[0] = value < 0
    is_zero[0] = False
    return w


@cython.cdivision(True)
cdef int fmt_interval(Buf *out, int64_t time, int32_t day, int32_t month, const char **why) noexcept nogil:
    """interval_out, IntervalStyle postgres (EncodeInterval, INTSTYLE_POSTGRES).
    PostgreSQL 17's infinities are the all-max / all-min field triples."""
    cdef int64_t hour, tfrac
    cdef int year, mon, minute, sec, fsec
    cdef bint is_zero = True, is_before = False, minus
    cdef char *w
    if time == INT64_MAX and day == INT32_MAX and month == INT32_MAX:
        return fmt_literal(out, b"infinity", why)
    if time == INT64_MIN and day == INT32_MIN and month == INT32_MIN:
        return fmt_literal(out, b"-infinity", why)
    w = fmt_room(out, 128)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    year = month // 12      # C division and remainder (signs follow the dividend)
    mon = month % 12
    tfrac = time // FMT_USECS_PER_HOUR
    time -= tfrac * FMT_USECS_PER_HOUR
    hour = tfrac
    tfrac = time // FMT_USECS_PER_MINUTE
    time -= tfrac * FMT_USECS_PER_MINUTE
    minute = <int>tfrac
    tfrac = time // FMT_USECS_PER_SEC
    time -= tfrac * FMT_USECS_PER_SEC
    sec = <int>tfrac
    fsec = <int>time
    w = fmt_w_interval_part(w, year, b"year", &is_zero, &is_before)
    w = fmt_w_interval_part(w, mon, b"mon", &is_zero, &is_before)
    w = fmt_w_interval_part(w, day, b"day", &is_zero, &is_before)
    if is_zero or hour != 0 or minute != 0 or sec != 0 or fsec != 0:
        minus = hour < 0 or minute < 0 or sec < 0 or fsec < 0
        if not is_zero:
            w[0] = 32
            w += 1
        if minus:
            w[0] = 45
            w += 1
        elif is_before:
            w[0] = 43
            w += 1
        w = fmt_w_u64(w, <uint64_t>(hour if hour >= 0 else -hour), 2)
        w[0] = 58
        w = fmt_w_u64(w + 1, <uint64_t>(minute if minute >= 0 else -minute), 2)
        w[0] = 58
        w = fmt_w_seconds(w + 1, sec, fsec)
    fmt_commit(out, w)
    return 0


# -- network types -----------------------------------------------------------------

cdef int fmt_inet(Buf *out, const unsigned char *p, Py_ssize_t n, bint is_cidr,
                  const char **why) noexcept nogil:
    """inet_recv's checks, then network_out: pg_inet_net_ntop (+ '/bits' for cidr)."""
    cdef int family, bits, nb, maxbits, i, byte
    cdef int words[8]
    cdef int best_base = -1, best_len = 0, cur_base = -1, cur_len = 0
    cdef unsigned char mask
    cdef const unsigned char *a
    cdef char *w
    cdef bint slash = False
    if n < 4:
        why[0] = FMT_E_LENGTH
        return -1
    family = p[0]
    if family != 2 and family != 3:
        why[0] = FMT_E_INET_FAMILY
        return -1
    maxbits = 32 if family == 2 else 128
    bits = p[1]
    if bits > maxbits:
        why[0] = FMT_E_INET_BITS
        return -1
    nb = p[3]                 # p[2] is the is_cidr flag, which inet_recv ignores
    if nb != maxbits // 8:
        why[0] = FMT_E_INET_LEN
        return -1
    if n != 4 + nb:
        why[0] = FMT_E_LENGTH
        return -1
    a = p + 4
    if is_cidr and bits != maxbits:   # addressOK(): no host bits right of the mask
        byte = bits // 8
        mask = 0xFF
        if bits != 0:
            mask >>= bits % 8
        while byte < nb:
            if a[byte] & mask:
                why[0] = FMT_E_CIDR_BITS
                return -1
            mask = 0xFF
            byte += 1
    w = fmt_room(out, 64)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if family == 2:
        for i in range(4):
            if i:
                w[0] = 46
                w += 1
            w = fmt_w_u64(w, a[i], 0)
        if bits != 32:
            w[0] = 47
            w = fmt_w_u64(w + 1, <uint64_t>bits, 0)
            slash = True
    else:
        for i in range(8):
            words[i] = (a[2 * i] << 8) | a[2 * i + 1]
        # the first longest run of (at least two) zero words becomes '::'
        for i in range(8):
            if words[i] == 0:
                if cur_base == -1:
                    cur_base = i
                    cur_len = 1
                else:
                    cur_len += 1
            elif cur_base != -1:
                if best_base == -1 or cur_len > best_len:
                    best_base = cur_base
                    best_len = cur_len
                cur_base = -1
        if cur_base != -1 and (best_base == -1 or cur_len > best_len):
            best_base = cur_base
            best_len = cur_len
        if best_base != -1 and best_len < 2:
            best_base = -1
        for i in range(8):
            if best_base != -1 and best_base <= i < best_base + best_len:
                if i == best_base:
                    w[0] = 58
                    w += 1
                continue
            if i != 0:
                w[0] = 58
                w += 1
            # an encapsulated IPv4 address: ::a.b.c.d, ::ffff:a.b.c.d
            if i == 6 and best_base == 0 and (best_len == 6 or
                                               (best_len == 7 and words[7] != 1) or
                                               (best_len == 5 and words[5] == 0xFFFF)):
                w = fmt_w_u64(w, a[12], 0)
                for byte in range(13, 16):
                    w[0] = 46
                    w = fmt_w_u64(w + 1, a[byte], 0)
                break
            if words[i] >= 0x1000:
                w[0] = FMT_HEX[words[i] >> 12]
                w += 1
            if words[i] >= 0x100:
                w[0] = FMT_HEX[(words[i] >> 8) & 15]
                w += 1
            if words[i] >= 0x10:
                w[0] = FMT_HEX[(words[i] >> 4) & 15]
                w += 1
            w[0] = FMT_HEX[words[i] & 15]
            w += 1
        if best_base != -1 and best_base + best_len == 8:
            w[0] = 58
            w += 1
        if bits != 128:
            w[0] = 47
            w = fmt_w_u64(w + 1, <uint64_t>bits, 0)
            slash = True
    if is_cidr and not slash:
        w[0] = 47
        w = fmt_w_u64(w + 1, <uint64_t>bits, 0)
    fmt_commit(out, w)
    return 0


cdef int fmt_macaddr(Buf *out, const unsigned char *p, Py_ssize_t n, bint eui64,
                     const char **why) noexcept nogil:
    """macaddr_out / macaddr8_out. macaddr8_recv also takes a 6-byte EUI-48 and
    inserts ff:fe in the middle."""
    cdef unsigned char a[8]
    cdef int i, count
    cdef char *w
    if not eui64:
        if n != 6:
            why[0] = FMT_E_LENGTH
            return -1
        count = 6
        for i in range(6):
            a[i] = p[i]
    elif n == 8:
        count = 8
        for i in range(8):
            a[i] = p[i]
    elif n == 6:
        count = 8
        a[0] = p[0]
        a[1] = p[1]
        a[2] = p[2]
        a[3] = 0xFF
        a[4] = 0xFE
        a[5] = p[3]
        a[6] = p[4]
        a[7] = p[5]
    else:
        why[0] = FMT_E_LENGTH
        return -1
    w = fmt_room(out, 3 * count)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    for i in range(count):
        if i:
            w[0] = 58
            w += 1
        w[0] = FMT_HEX[a[i] >> 4]
        w[1] = FMT_HEX[a[i] & 15]
        w += 2
    fmt_commit(out, w)
    return 0


cdef int fmt_uuid(Buf *out, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int i
    cdef char *w
    cdef uint64_t v
    if n != 16:
        why[0] = FMT_E_LENGTH
        return -1
    w = fmt_room(out, 36)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if PGO_SWAR_DIGITS:                         # 8-4-4-4-12, from four 8-digit words
        v = pgo_hex_encode4(p)
        memcpy(w, &v, 8)
        v = pgo_hex_encode4(p + 4)
        memcpy(w + 9, &v, 4)
        memcpy(w + 14, (<char *>&v) + 4, 4)
        v = pgo_hex_encode4(p + 8)
        memcpy(w + 19, &v, 4)
        memcpy(w + 24, (<char *>&v) + 4, 4)
        v = pgo_hex_encode4(p + 12)
        memcpy(w + 28, &v, 8)
        w[8] = w[13] = w[18] = w[23] = 45
        fmt_commit(out, w + 36)
        return 0
    for i in range(16):
        if i == 4 or i == 6 or i == 8 or i == 10:
            w[0] = 45
            w += 1
        w[0] = FMT_HEX[p[i] >> 4]
        w[1] = FMT_HEX[p[i] & 15]
        w += 2
    fmt_commit(out, w)
    return 0


# -- arrays ------------------------------------------------------------------------

cdef inline bint fmt_array_isspace(unsigned char c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 13 or c == 11 or c == 12


cdef int fmt_array_quote(Buf *out, Py_ssize_t start, const char **why) noexcept nogil:
    """array_out's quoting of the element text in out[start:]: double quotes when it is
    empty, reads NULL in any case, or holds { } , " \\ or whitespace; " and \\ escaped."""
    cdef Py_ssize_t n = out.len - start, i, extra = 0, src, dst
    cdef unsigned char *e = out.data + start
    cdef unsigned char c
    cdef bint need = n == 0
    if n == 4 and (e[0] | 0x20) == 110 and (e[1] | 0x20) == 117 and \
            (e[2] | 0x20) == 108 and (e[3] | 0x20) == 108:
        need = True
    for i in range(n):
        c = e[i]
        if c == 34 or c == 92:
            need = True
            extra += 1
        elif c == 123 or c == 125 or c == 44 or fmt_array_isspace(c):
            need = True
    if not need:
        return 0
    if buf_reserve(out, extra + 2) < 0:
        why[0] = FMT_E_NOMEM
        return -1
    e = out.data + start
    # expand in place from the back: '"' + escaped text + '"'
    dst = n + extra + 1
    e[dst] = 34
    src = n - 1
    while src >= 0:
        c = e[src]
        dst -= 1
        e[dst] = c
        if c == 34 or c == 92:
            dst -= 1
            e[dst] = 92
        src -= 1
    e[0] = 34
    out.len = start + n + extra + 2
    return 0


cdef int fmt_array(Buf *out, int elem_kind, const unsigned char *p, Py_ssize_t n,
                   const char **why) noexcept nogil:
    """array_recv's checks, then array_out: nested braces per dimension, '[lb:ub]='
    prefix when a lower bound is not 1, elements formatted by their own kind."""
    cdef int ndim, flags, i, j
    cdef int32_t dims[FMT_MAXDIM]
    cdef int32_t lbs[FMT_MAXDIM]
    cdef int32_t indx[FMT_MAXDIM]
    cdef int64_t nitems = 0, k
    cdef int32_t elen
    cdef Py_ssize_t pos, start
    cdef bint needdims = False
    cdef char *w
    if elem_kind < 0 or elem_kind >= K_NKINDS or elem_kind == K_ARRAY:
        why[0] = FMT_E_ARR_ELEM_KIND
        return -1
    if n < 12:
        why[0] = FMT_E_ARR_SHORT
        return -1
    ndim = pgo_be32s(p)
    flags = pgo_be32s(p + 4)
    # p[8:12] is the publisher's element type OID; the column type says what it is
    if ndim < 0 or ndim > FMT_MAXDIM:
        why[0] = FMT_E_ARR_NDIM
        return -1
    if flags != 0 and flags != 1:
        why[0] = FMT_E_ARR_FLAGS
        return -1
    if n < 12 + 8 * ndim:
        why[0] = FMT_E_ARR_SHORT
        return -1
    pos = 12
    if ndim > 0:
        nitems = 1
    for i in range(ndim):
        dims[i] = pgo_be32s(p + pos)
        lbs[i] = pgo_be32s(p + pos + 4)
        pos += 8
        if dims[i] < 0:
            why[0] = FMT_E_ARR_SIZE
            return -1
        nitems *= dims[i]
        if nitems > FMT_MAX_ARRAY_SIZE:
            why[0] = FMT_E_ARR_SIZE
            return -1
    for i in range(ndim):
        if <int64_t>dims[i] + lbs[i] > INT32_MAX:
            why[0] = FMT_E_ARR_LBOUND
            return -1
        if lbs[i] != 1:
            needdims = True
    if nitems == 0:
        if pos != n:
            why[0] = FMT_E_ARR_TRAILING
            return -1
        return fmt_literal(out, b"{}", why)
    w = fmt_room(out, 24 * ndim + 1 + ndim)
    if w == NULL:
        why[0] = FMT_E_NOMEM
        return -1
    if needdims:
        for i in range(ndim):
            w[0] = 91  # '['
            w = fmt_w_i64(w + 1, lbs[i])
            w[0] = 58
            w = fmt_w_i64(w + 1, <int64_t>lbs[i] + dims[i] - 1)
            w[0] = 93
            w += 1
        w[0] = 61
        w += 1
    w[0] = 123
    w += 1
    fmt_commit(out, w)
    for i in range(ndim):
        indx[i] = 0
    j = 0
    k = 0
    while True:
        w = fmt_room(out, ndim + 1)
        if w == NULL:
            why[0] = FMT_E_NOMEM
            return -1
        for i in range(j, ndim - 1):
            w[0] = 123
            w += 1
        fmt_commit(out, w)
        # one element: Int32 length (-1 = NULL) + its send-format bytes
        if n - pos < 4:
            why[0] = FMT_E_ARR_ELEM_SHORT
            return -1
        elen = pgo_be32s(p + pos)
        pos += 4
        if elen < -1:
            why[0] = FMT_E_ARR_ELEM_LEN
            return -1
        if elen == -1:
            if fmt_literal(out, b"NULL", why) < 0:
                return -1
        else:
            if elen > n - pos:
                why[0] = FMT_E_ARR_ELEM_SHORT
                return -1
            start = out.len
            if fmt_value(elem_kind, -1, p + pos, elen, out, why) < 0:
                return -1
            if fmt_array_quote(out, start, why) < 0:
                return -1
            pos += elen
        k += 1
        w = fmt_room(out, ndim + 1)
        if w == NULL:
            why[0] = FMT_E_NOMEM
            return -1
        i = ndim - 1
        while i >= 0:
            indx[i] += 1
            if indx[i] < dims[i]:
                w[0] = 44
                w += 1
                break
            indx[i] = 0
            w[0] = 125
            w += 1
            i -= 1
        fmt_commit(out, w)
        j = i
        if j == -1:
            break
    if pos != n:
        why[0] = FMT_E_ARR_TRAILING
        return -1
    return 0


# -- dispatch ----------------------------------------------------------------------

cdef int fmt_value(int kind, int elem_kind, const unsigned char *p, Py_ssize_t n, Buf *out,
                   const char **why) noexcept nogil:
    cdef char *w
    cdef unsigned char c
    if kind == K_TEXT or kind == K_BPCHAR or kind == K_JSON:
        if utf8_invalid_at(p, n) >= 0:
            why[0] = FMT_E_UTF8
            return -1
        return fmt_bytes(out, p, n, why)
    if kind == K_INT4 or kind == K_INT2 or kind == K_INT8 or kind == K_OID:
        if n != (2 if kind == K_INT2 else 8 if kind == K_INT8 else 4):
            why[0] = FMT_E_LENGTH
            return -1
        w = fmt_room(out, 24)
        if w == NULL:
            why[0] = FMT_E_NOMEM
            return -1
        if kind == K_INT2:
            w = fmt_w_i64(w, pgo_be16s(p))
        elif kind == K_INT4:
            w = fmt_w_i64(w, pgo_be32s(p))
        elif kind == K_INT8:
            w = fmt_w_i64(w, pgo_be64s(p))
        else:
            w = fmt_w_u64(w, pgo_be32(p), 0)
        fmt_commit(out, w)
        return 0
    if kind == K_FLOAT8 or kind == K_FLOAT4:
        if n != (8 if kind == K_FLOAT8 else 4):
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_float(out, p, kind == K_FLOAT4, why)
    if kind == K_DECIMAL or kind == K_NUMERIC_STR:
        return fmt_numeric(out, p, n, why)
    if kind == K_BOOL:
        if n != 1:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_literal(out, b"t" if p[0] != 0 else b"f", why)
    if kind == K_CHAR:
        if n != 1:
            why[0] = FMT_E_LENGTH
            return -1
        c = p[0]
        w = fmt_room(out, 4)
        if w == NULL:
            why[0] = FMT_E_NOMEM
            return -1
        if c >= 0x80:       # charout: high-bit bytes as \ooo (PG 15+)
            w[0] = 92
            w[1] = <char>(48 + (c >> 6))
            w[2] = <char>(48 + ((c >> 3) & 7))
            w[3] = <char>(48 + (c & 7))
            w += 4
        elif c != 0:        # byte 0 is the empty string
            w[0] = <char>c
            w += 1
        fmt_commit(out, w)
        return 0
    if kind == K_BYTEA or kind == K_UNKNOWN:
        # K_UNKNOWN: binary value of a type the decoder does not know, shown as hex
        return fmt_hex(out, b"\\x", p, n, why)
    if kind == K_JSONB:
        if n < 1 or p[0] != 1:
            why[0] = FMT_E_JSONB
            return -1
        if utf8_invalid_at(p + 1, n - 1) >= 0:
            why[0] = FMT_E_UTF8
            return -1
        return fmt_bytes(out, p + 1, n - 1, why)
    if kind == K_DATE:
        if n != 4:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_date(out, pgo_be32s(p), why)
    if kind == K_TIME:
        if n != 8:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_time(out, pgo_be64s(p), False, 0, why)
    if kind == K_TIMETZ:
        if n != 12:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_time(out, pgo_be64s(p), True, pgo_be32s(p + 8), why)
    if kind == K_TIMESTAMP or kind == K_TIMESTAMPTZ:
        if n != 8:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_timestamp(out, pgo_be64s(p), kind == K_TIMESTAMPTZ, why)
    if kind == K_INTERVAL:
        if n != 16:
            why[0] = FMT_E_LENGTH
            return -1
        return fmt_interval(out, pgo_be64s(p), pgo_be32s(p + 8), pgo_be32s(p + 12), why)
    if kind == K_UUID:
        return fmt_uuid(out, p, n, why)
    if kind == K_INET or kind == K_CIDR:
        return fmt_inet(out, p, n, kind == K_CIDR, why)
    if kind == K_MACADDR or kind == K_MACADDR8:
        return fmt_macaddr(out, p, n, kind == K_MACADDR8, why)
    if kind == K_ARRAY:
        return fmt_array(out, elem_kind, p, n, why)
    why[0] = FMT_E_KIND
    return -1


cdef int fmt_binary_as_text(int kind, int precision, int scale, int elem_kind,
                            const unsigned char *p, Py_ssize_t n, Buf *out,
                            const char **why) noexcept nogil:
    """Append to `out` the PostgreSQL text form of one binary (send-format) value.

    0 ok; -1 malformed (or out of memory), with a static reason in *why and `out` left
    as it was. `precision`/`scale` (K_DECIMAL) do not matter: numeric text follows the
    value's own display scale, as numeric_out does. `elem_kind` is the element kind of
    a K_ARRAY (ignored otherwise)."""
    cdef Py_ssize_t start = out.len
    if fmt_value(kind, elem_kind, p, n, out, why) < 0:
        out.len = start
        return -1
    return 0


cdef inline int fmt_column_value(int32_t k, const int32_t *ct, const unsigned char *p, Py_ssize_t n,
                              Buf *out, FmtMemo *memo, const char **why) noexcept nogil:
    """fmt_binary_as_text for a value of a column (the change-event table, and
    format_binary_values): int2/4/8, bool, float8 and numeric written here, without
    fmt_value's dispatch (measured at ~5 ns a value); dates and timestamps through the
    column's memo; the rest through fmt_binary_as_text. ct: the column's kind,
    precision, scale, elem_kind (k is ct[0]). 0, or -1 with *why and out as it was."""
    cdef char *w
    if k == K_INT4 or k == K_INT8 or k == K_INT2:
        if n == (4 if k == K_INT4 else 8 if k == K_INT8 else 2):
            w = fmt_room(out, 24)
            if w == NULL:
                why[0] = FMT_E_NOMEM
                return -1
            if k == K_INT4:
                w = fmt_w_i64(w, pgo_be32s(p))
            elif k == K_INT8:
                w = fmt_w_i64(w, pgo_be64s(p))
            else:
                w = fmt_w_i64(w, pgo_be16s(p))
            fmt_commit(out, w)
            return 0
    elif k == K_BOOL:
        if n == 1:
            w = fmt_room(out, 1)
            if w == NULL:
                why[0] = FMT_E_NOMEM
                return -1
            w[0] = 116 if p[0] != 0 else 102
            fmt_commit(out, w + 1)
            return 0
    elif k == K_FLOAT8:
        if n == 8:
            return fmt_float(out, p, False, why)
    elif k == K_DECIMAL or k == K_NUMERIC_STR:
        return fmt_numeric(out, p, n, why)          # (out as it was when it fails)
    elif (k == K_TIMESTAMP or k == K_TIMESTAMPTZ) and n == 8:
        return fmt_timestamp_memo(out, pgo_be64s(p), k == K_TIMESTAMPTZ, memo, why)
    elif k == K_DATE and n == 4:
        return fmt_date_memo(out, pgo_be32s(p), memo, why)
    return fmt_binary_as_text(k, ct[1], ct[2], ct[3], p, n, out, why)



def format_binary_values(column_type, values):
    """PostgreSQL text form of each binary value of one column.

    ``column_type`` is a :class:`pgoutput_fast.types.ColumnType`; ``values`` a list of
    ``bytes`` (``None`` stays ``None``). Returns a list of ``str`` (UTF-8, undecodable
    bytes as surrogate escapes). Raises :class:`pgoutput_fast.DecodeError` on a
    malformed value.
    """
    cdef int32_t ct[4]
    cdef FmtMemo memo
    cdef Buf out
    cdef const char *why = NULL
    cdef const unsigned char *p
    cdef Py_ssize_t n
    cdef int rc
    cdef bytes b
    cdef list result = []
    out.data = NULL
    out.len = 0
    out.cap = 0
    out.hint = 0
    out.hw = 0
    ct[0] = column_type.kind
    ct[1] = column_type.precision
    ct[2] = column_type.scale
    ct[3] = column_type.elem_kind
    fmt_memo_init(&memo)
    try:
        for v in values:
            if v is None:
                result.append(None)
                continue
            b = v if type(v) is bytes else bytes(v)
            p = <const unsigned char *>PyBytes_AS_STRING(b)
            n = PyBytes_GET_SIZE(b)
            out.len = 0
            # GIL kept: buffer growth may touch the builders' shared block cache
            rc = fmt_column_value(ct[0], ct, p, n, &out, &memo, &why)
            if rc < 0:
                if why == FMT_E_NOMEM:
                    raise MemoryError()
                raise DecodeError((<bytes>why).decode("ascii"))
            if out.len == 0:
                result.append("")
            else:
                result.append(PyUnicode_DecodeUTF8(<const char *>out.data, out.len, "surrogateescape"))
    finally:
        buf_free(&out)
    return result
