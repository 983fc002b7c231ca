# Text TupleData values ('t') -> typed column data, one value at a time.
#
# parse_text_value() appends the data of exactly one valid value to a Column and
# returns 0; -1 for malformed input (with a static reason in *why); 1 for a valid
# PostgreSQL value that the column's Arrow type cannot hold (nothing is appended; the
# caller stores a null and keeps the raw value in a '_special' side column).
# On any non-zero return the column is left exactly as it was before the call.
#
# Text values are NOT NUL-terminated: nothing here reads past p[n-1]. Integers, dates,
# times, numerics are parsed by hand; floats take an exact fast path (Clinger for short
# significands, else Eisel-Lemire for up to 19 digits) and only fall back to libc
# strtod/strtof (on a bounded stack copy without a decimal point, so locale-proof) for
# longer significands.
#
# The expected text forms are those of a session with DateStyle=ISO,
# IntervalStyle=postgres, extra_float_digits=3, bytea_output=hex (escape also parses),
# any numeric TimeZone offset (docs/protocol.md section 4.2).
#
# Their C (128-bit decimal arithmetic, the Eisel-Lemire float conversion and its
# power-of-five table, PostgreSQL date/time constants, the PGO_PUSH_FIXED store) is in
# text_values.h, declared below and shared with values_binary.pxi.

from libc.stdint cimport INT16_MIN, INT16_MAX, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX, UINT32_MAX
from libc.stdlib cimport strtod, strtof
from libc.math cimport NAN, INFINITY, isinf

cdef extern from "text_values.h":
    ctypedef struct pgo_u128:
        uint64_t lo
        uint64_t hi
    const pgo_u128 pgo_pow10_u128[39]
    void pgo_u128_muladd(pgo_u128 *x, uint32_t m, uint32_t a) noexcept nogil
    void pgo_u128_mul_pow10(pgo_u128 *x, int e) noexcept nogil
    void pgo_u128_neg(pgo_u128 *x) noexcept nogil
    const int PGO_EXACT_FAST_FLOAT
    const double pgo_pow10_f64[23]
    const float pgo_pow10_f32[11]
    int pgo_eisel_lemire(uint64_t w, int64_t q, int single, uint64_t *bits) noexcept nogil
    int pgo_clz64(uint64_t x) noexcept nogil
    const int64_t PGO_USECS_PER_DAY
    const int64_t PGO_UNIX_EPOCH_USECS
    const int PGO_UNIX_EPOCH_DAYS
    const int64_t PGO_MIN_TIMESTAMP
    const int64_t PGO_END_TIMESTAMP
    const int64_t PGO_MIN_DATE
    const int64_t PGO_END_DATE
    const int PGO_TZDISP_LIMIT
    const signed char pgo_hex_value[256]


# -- shared helpers (also used by values_binary.pxi) --------------------------------

cdef const char *WHY_OOM = b"out of memory (or column larger than 2 GiB) in a column builder"
# PostgreSQL sends text in client_encoding; the capture sets UTF8, and Arrow strings must be
# valid UTF-8: anything else is a corrupt stream (or a session in another encoding).
cdef const char *WHY_UTF8 = b"invalid UTF-8 in a text value"


cdef void col_discard_partial(Column *c) noexcept nogil:
    """Forget data appended for the unfinished row c.length (after a failed parse)."""
    cdef int32_t end = 0
    if c.layout == LAYOUT_FIXED:
        c.data.len = c.length * c.fixed_width
    elif c.layout == LAYOUT_VARLEN:
        if c.offsets.len >= 4 * (c.length + 1):
            memcpy(&end, c.offsets.data + 4 * c.length, 4)
        c.data.len = end
    elif c.layout == LAYOUT_LIST:
        c.data.len = 0            # the list's data buffer is only scratch space
        if c.offsets.len >= 4 * (c.length + 1):
            memcpy(&end, c.offsets.data + 4 * c.length, 4)
        if c.child.length > end:
            col_truncate(c.child, end)
        col_discard_partial(c.child)


cdef inline int push_decimal(Column *c, pgo_u128 v, bint negative, const char **why) noexcept nogil:
    """Append a decimal128 (16 bytes, two's complement, low 64-bit word first)."""
    cdef uint64_t words[2]
    if negative:
        pgo_u128_neg(&v)
    words[0] = v.lo
    words[1] = v.hi
    return PGO_PUSH_FIXED(c, words, 16, why, push_fixed_slow)


cdef int push_fixed_slow(Column *c, const void *value, Py_ssize_t w, const char **why) noexcept nogil:
    """PGO_PUSH_FIXED's slow path: the buffer must grow, or the width is wrong (w must
    equal c.fixed_width: the kind fixes both, and a mismatch would corrupt the column)."""
    if w != c.fixed_width:
        why[0] = b"internal error: value width does not match the column"
        return -1
    if buf_reserve(&c.data, w) < 0:
        why[0] = WHY_OOM
        return -1
    memcpy(c.data.data + c.data.len, value, <size_t>w)
    c.data.len += w
    return 0


cdef extern from "text_values.h":
    int PGO_PUSH_FIXED(Column *c, const void *value, Py_ssize_t w, const char **why,
                       int (*slow)(Column *, const void *, Py_ssize_t, const char **) noexcept nogil) noexcept nogil


cdef inline int push_bytes(Column *c, const void *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n == 0:                    # nothing to copy (and no memcpy on a still-NULL buffer)
        return 0
    if col_push_bytes(c, p, n) < 0:
        why[0] = WHY_OOM
        return -1
    return 0


cdef inline int buf_push(Buf *b, const void *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n == 0:
        return 0
    if buf_append(b, p, n) < 0:
        why[0] = WHY_OOM
        return -1
    return 0


cdef inline unsigned char *buf_room(Buf *b, Py_ssize_t n, const char **why) noexcept nogil:
    """Room for n more bytes at the end of b: write there, then add the count to b.len."""
    if buf_reserve(b, n if n > 0 else 1) < 0:       # never a NULL pointer, even for n == 0
        why[0] = WHY_OOM
        return NULL
    return b.data + b.len


cdef inline int is_digit(unsigned char ch) noexcept nogil:
    return <unsigned char>(ch - 48) < 10


cdef inline int hex_value(unsigned char ch) noexcept nogil:
    """0..15, or -1 for a non-hex character."""
    return pgo_hex_value[ch]


cdef inline int64_t days_from_civil(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year numbering)."""
    cdef int64_t era, yoe, doy, doe
    if m <= 2:
        y -= 1
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline int days_in_month(int64_t y, int64_t m) noexcept nogil:
    if m == 2:
        return 29 if (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) else 28
    if m == 4 or m == 6 or m == 9 or m == 11:
        return 30
    return 31


# -- text scanners (each advances *pos; 0 ok, -1 malformed) ---------------------------

cdef inline int scan_uint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos,
                          int min_digits, int max_digits, int64_t *out) noexcept nogil:
    """min..max decimal digits (max <= 18) -> out."""
    cdef Py_ssize_t i = pos[0]
    cdef int nd = 0
    cdef int64_t v = 0
    while i < n and is_digit(p[i]):
        if nd == max_digits:
            return -1
        v = v * 10 + (p[i] - 48)
        nd += 1
        i += 1
    if nd < min_digits:
        return -1
    pos[0] = i
    out[0] = v
    return 0


cdef inline int scan_char(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, unsigned char ch) noexcept nogil:
    if pos[0] < n and p[pos[0]] == ch:
        pos[0] += 1
        return 0
    return -1


cdef inline bint match_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos, const char *s, Py_ssize_t k) noexcept nogil:
    return n - pos >= k and memcmp(p + pos, s, <size_t>k) == 0


cdef inline bint text_is(const unsigned char *p, Py_ssize_t n, const char *s, Py_ssize_t k) noexcept nogil:
    return n == k and memcmp(p, s, <size_t>k) == 0


cdef int scan_date(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos,
                   int64_t *y, int64_t *m, int64_t *d) noexcept nogil:
    """YYYY-MM-DD (4 to 9 year digits), calendar-checked; the year is still the AD/BC label."""
    if (scan_uint(p, n, pos, 4, 9, y) < 0 or scan_char(p, n, pos, 45) < 0
            or scan_uint(p, n, pos, 2, 2, m) < 0 or scan_char(p, n, pos, 45) < 0
            or scan_uint(p, n, pos, 2, 2, d) < 0):
        return -1
    if y[0] == 0 or m[0] < 1 or m[0] > 12 or d[0] < 1:
        return -1
    return 0


cdef inline int check_mday(int64_t y, int64_t m, int64_t d) noexcept nogil:
    """After BC conversion (leap years are astronomical)."""
    return 0 if d <= days_in_month(y, m) else -1


cdef int scan_clock(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int min_hour_digits,
                    int max_hour_digits, int64_t *hours, int64_t *rest_us) noexcept nogil:
    """H+:MM:SS[.f{1,6}] -> hours and the remaining microseconds (< 3.6e9)."""
    cdef int64_t mi, se, frac = 0
    cdef Py_ssize_t fs
    if (scan_uint(p, n, pos, min_hour_digits, max_hour_digits, hours) < 0
            or scan_char(p, n, pos, 58) < 0 or scan_uint(p, n, pos, 2, 2, &mi) < 0
            or scan_char(p, n, pos, 58) < 0 or scan_uint(p, n, pos, 2, 2, &se) < 0):
        return -1
    if mi > 59 or se > 59:
        return -1
    if pos[0] < n and p[pos[0]] == 46:          # '.'
        pos[0] += 1
        fs = pos[0]
        if scan_uint(p, n, pos, 1, 6, &frac) < 0:
            return -1
        frac *= <int64_t>pgo_pow10_u128[6 - (pos[0] - fs)].lo
    rest_us[0] = mi * 60000000 + se * 1000000 + frac
    return 0


cdef int scan_offset(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int64_t *east_s) noexcept nogil:
    """+HH[:MM[:SS]] or -HH[...] -> seconds east of UTC (|offset| < 16 h)."""
    cdef int64_t hh, mm = 0, ss = 0
    cdef bint neg
    if pos[0] >= n or (p[pos[0]] != 43 and p[pos[0]] != 45):
        return -1
    neg = p[pos[0]] == 45
    pos[0] += 1
    if scan_uint(p, n, pos, 2, 2, &hh) < 0:
        return -1
    if pos[0] < n and p[pos[0]] == 58:
        pos[0] += 1
        if scan_uint(p, n, pos, 2, 2, &mm) < 0:
            return -1
        if pos[0] < n and p[pos[0]] == 58:
            pos[0] += 1
            if scan_uint(p, n, pos, 2, 2, &ss) < 0:
                return -1
    if mm > 59 or ss > 59:
        return -1
    east_s[0] = hh * 3600 + mm * 60 + ss
    if east_s[0] >= PGO_TZDISP_LIMIT:
        return -1
    if neg:
        east_s[0] = -east_s[0]
    return 0


cdef inline int scan_bc(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos) noexcept nogil:
    """1 if ' BC' follows (and is consumed), else 0."""
    if match_at(p, n, pos[0], b" BC", 3):
        pos[0] += 3
        return 1
    return 0


# -- text parsers per kind -------------------------------------------------------------

cdef int text_int(const unsigned char *p, Py_ssize_t n, int64_t lo, uint64_t hi, int64_t *out) noexcept nogil:
    """-?[0-9]+ in [lo, hi] (hi may be UINT32_MAX for oid). No division in the loop: up to
    19 significant digits cannot overflow uint64, the range check comes at the end."""
    cdef Py_ssize_t i = 0
    cdef bint neg = False
    cdef uint64_t v = 0, limit, d
    if n > 0 and p[0] == 45:
        if lo >= 0:
            return -1
        neg = True
        i = 1
    if i >= n:
        return -1
    while i < n - 1 and p[i] == 48:           # leading zeros (keep the last digit)
        i += 1
    if n - i > 19:
        return -1
    while i < n:
        d = <uint64_t>p[i] - 48
        if d > 9:
            return -1
        v = v * 10 + d
        i += 1
    limit = (<uint64_t>(-(lo + 1)) + 1) if neg else hi
    if v > limit:
        return -1
    out[0] = <int64_t>(0 - v) if neg else <int64_t>v
    return 0


cdef int text_float(const unsigned char *p, Py_ssize_t n, bint single, double *out) noexcept nogil:
    """PostgreSQL float text -> double (or the float32 value, widened, when single).

    Grammar: NaN | Infinity | -Infinity | -?(D+[.D*] | .D+)([eE][+-]?D+)?, at most 128
    bytes. Finite text that overflows is malformed (PostgreSQL would have rejected it).
    """
    cdef Py_ssize_t i = 0, s0, d0, f0
    cdef bint neg = False, truncated = False, exneg = False
    cdef uint64_t sig = 0
    cdef int nsig = 0, nmant = 0, nfrac = 0
    cdef int64_t ex = 0, e10
    cdef double v
    cdef float f
    cdef char buf[160]
    cdef char *endp
    cdef int k = 0, j
    cdef char expdigits[12]
    cdef uint64_t bits
    cdef uint32_t bits32
    cdef uint64_t chunk
    cdef int k8
    if n == 3 and p[0] == 78 and memcmp(p, b"NaN", 3) == 0:       # (the first byte
        out[0] = NAN                                                 # first: a number of
        return 0                                                     # 8 or 9 bytes takes
    if n == 8 and p[0] == 73 and memcmp(p, b"Infinity", 8) == 0:  # no memcmp call)
        out[0] = INFINITY
        return 0
    if n == 9 and p[1] == 73 and memcmp(p, b"-Infinity", 9) == 0:
        out[0] = -INFINITY
        return 0
    if n > 128:
        return -1
    if n > 0 and p[0] == 45:
        neg = True
        i = 1
    # Mantissa: every significant digit goes into sig; more than 19 of them (sig wrapped)
    # means "truncated" and the exact slow path. value = sig * 10^(ex + e10).
    s0 = i
    while i < n and p[i] == 48:                   # leading zeros
        i += 1
    d0 = i
    while True:                                   # 8 digits at a time (sig wraps alike)
        k8 = pgo_digit_run8(p + i, n - i, &chunk)
        sig = sig * pgo_pow10_u128[k8].lo + chunk
        i += k8
        if k8 < 8:
            break
    nsig = <int>(i - d0)
    nmant = <int>(i - s0)
    if i < n and p[i] == 46:                      # '.'
        i += 1
        f0 = i
        if nsig == 0:
            while i < n and p[i] == 48:           # zeros right after the point
                i += 1
        d0 = i
        while True:
            k8 = pgo_digit_run8(p + i, n - i, &chunk)
            sig = sig * pgo_pow10_u128[k8].lo + chunk
            i += k8
            if k8 < 8:
                break
        nsig += <int>(i - d0)
        nfrac = <int>(i - f0)
        nmant += nfrac
        ex = -nfrac
    truncated = nsig > 19
    if nmant == 0:
        return -1
    e10 = 0
    if i < n and (p[i] == 101 or p[i] == 69):     # e E
        i += 1
        if i < n and (p[i] == 43 or p[i] == 45):
            exneg = p[i] == 45
            i += 1
        if i >= n or not is_digit(p[i]):
            return -1
        while i < n and is_digit(p[i]):
            if e10 < 100000:                        # beyond that: inf or 0 anyway
                e10 = e10 * 10 + (p[i] - 48)
            i += 1
        if exneg:
            e10 = -e10
    if i != n:
        return -1
    if nsig == 0:                                 # all digits zero (sig may have wrapped otherwise)
        out[0] = -0.0 if neg else 0.0
        return 0
    if PGO_EXACT_FAST_FLOAT and not truncated:
        if single:
            if sig <= 16777216 and -10 <= ex + e10 <= 10:
                f = <float>sig
                if ex + e10 < 0:
                    f = f / pgo_pow10_f32[-(ex + e10)]
                else:
                    f = f * pgo_pow10_f32[ex + e10]
                out[0] = -f if neg else f
                return 0
        elif sig <= 9007199254740992ULL and -22 <= ex + e10 <= 22:
            v = <double>sig
            if ex + e10 < 0:
                v = v / pgo_pow10_f64[-(ex + e10)]
            else:
                v = v * pgo_pow10_f64[ex + e10]
            out[0] = -v if neg else v
            return 0
    if not truncated and pgo_eisel_lemire(sig, ex + e10, single, &bits) == 0:
        if single:
            bits32 = <uint32_t>bits
            memcpy(&f, &bits32, 4)
            v = f
        else:
            memcpy(&v, &bits, 8)
        if isinf(v):
            return -1
        out[0] = -v if neg else v
        return 0
    # Slow path (more than 19 significant digits, or an undecided Eisel-Lemire case):
    # "[-]DIGITS" "e" EXP without a decimal point, so that the locale's
    # decimal separator cannot matter, then libc's correctly rounded conversion.
    if neg:
        buf[k] = 45
        k += 1
    for j in range(1 if neg else 0, <int>n):
        if is_digit(p[j]):
            buf[k] = <char>p[j]
            k += 1
        elif p[j] != 46:
            break
    e10 -= nfrac
    buf[k] = 101
    k += 1
    if e10 < 0:
        buf[k] = 45
        k += 1
        e10 = -e10
    j = 0
    while True:
        expdigits[j] = <char>(48 + e10 % 10)
        j += 1
        e10 //= 10
        if e10 == 0:
            break
    while j > 0:
        j -= 1
        buf[k] = expdigits[j]
        k += 1
    buf[k] = 0
    if single:
        v = strtof(buf, &endp)
    else:
        v = strtod(buf, &endp)
    if isinf(v):
        return -1
    out[0] = v
    return 0


cdef inline bint decimal18_fast(const Column *c, const unsigned char *p, Py_ssize_t n,
                                int64_t *out) noexcept nogil:
    """numeric(p <= 18, s) text in one pass: -?D+[.D*] that fits, with no nonzero digit
    past the scale -> the scaled value. False for anything else (text_decimal's general
    path then decides, and reports)."""
    cdef Py_ssize_t i = 0, e, f0
    cdef bint neg = False
    cdef uint64_t v = 0, d
    cdef int scale = c.scale
    if n > 0 and p[0] == 45:
        neg = True
        i = 1
    if i >= n or p[i] == 46:
        return False
    while i < n and p[i] == 48:             # leading zeros
        i += 1
    # at most precision - scale significant integer digits: stop there, and a digit
    # right after means the value does not fit
    e = i + (c.precision - scale)
    if e > n:
        e = n
    while i < e:
        d = <uint64_t>p[i] - 48
        if d > 9:
            break
        v = v * 10 + d
        i += 1
    if i < n:
        if p[i] != 46:                      # a digit too many, or not a number
            return False
        i += 1
        f0 = i
        e = i + scale
        if e > n:
            e = n
        while i < e:
            d = <uint64_t>p[i] - 48
            if d > 9:
                return False
            v = v * 10 + d
            i += 1
        scale -= <int>(i - f0)
        while i < n:                        # past the scale: zeros only
            if p[i] != 48:
                return False
            i += 1
    v *= pgo_pow10_u128[scale].lo
    out[0] = -<int64_t>v if neg else <int64_t>v
    return True


cdef int text_decimal(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """numeric text -> decimal128(precision, scale): -?(D+[.D*]|.D+); NaN/±Infinity -> 1."""
    cdef Py_ssize_t i = 0, int_start, int_end, frac_start, frac_end, j
    cdef bint neg = False
    cdef pgo_u128 acc
    cdef uint32_t chunk = 0
    cdef int nchunk = 0, used, nint
    cdef uint64_t v64
    cdef uint64_t words[2]
    cdef int64_t s64
    if c.precision <= 18 and decimal18_fast(c, p, n, &s64):
        words[0] = <uint64_t>s64
        words[1] = <uint64_t>0xFFFFFFFFFFFFFFFFULL if s64 < 0 else 0
        return PGO_PUSH_FIXED(c, words, 16, why, push_fixed_slow)
    if text_is(p, n, b"NaN", 3) or text_is(p, n, b"Infinity", 8) or text_is(p, n, b"-Infinity", 9):
        return 1
    if n > 0 and p[0] == 45:
        neg = True
        i = 1
    int_start = i
    while i < n and is_digit(p[i]):
        i += 1
    int_end = i
    frac_start = frac_end = i
    if i < n and p[i] == 46:
        i += 1
        frac_start = i
        while i < n and is_digit(p[i]):
            i += 1
        frac_end = i
    if i != n or (int_end == int_start and frac_end == frac_start):
        why[0] = b"invalid numeric text"
        return -1
    while int_start < int_end and p[int_start] == 48:       # leading zeros
        int_start += 1
    nint = <int>(int_end - int_start)
    if nint + c.scale > c.precision:
        why[0] = b"numeric value does not fit the decimal precision"
        return -1
    used = <int>(frac_end - frac_start)
    if used > c.scale:
        for j in range(frac_start + c.scale, frac_end):
            if p[j] != 48:
                why[0] = b"numeric value has more fraction digits than the decimal scale"
                return -1
        used = c.scale
    if c.precision <= 18:
        # at most 18 digits: the value fits a uint64 (< 10^18), no 128-bit arithmetic
        v64 = 0
        for j in range(int_start, int_end):
            v64 = v64 * 10 + (p[j] - 48)
        for j in range(frac_start, frac_start + used):
            v64 = v64 * 10 + (p[j] - 48)
        v64 *= pgo_pow10_u128[c.scale - used].lo
        if neg and v64 != 0:
            words[0] = 0 - v64                    # two's complement over 128 bits
            words[1] = <uint64_t>0xFFFFFFFFFFFFFFFFULL
        else:
            words[0] = v64
            words[1] = 0
        return PGO_PUSH_FIXED(c, words, 16, why, push_fixed_slow)
    # at most 38 digits: fold them in 9-digit chunks
    acc.lo = 0
    acc.hi = 0
    for j in range(int_start, int_end):
        chunk = chunk * 10 + (p[j] - 48)
        nchunk += 1
        if nchunk == 9:
            pgo_u128_muladd(&acc, 1000000000u, chunk)
            chunk = 0
            nchunk = 0
    for j in range(frac_start, frac_start + used):
        chunk = chunk * 10 + (p[j] - 48)
        nchunk += 1
        if nchunk == 9:
            pgo_u128_muladd(&acc, 1000000000u, chunk)
            chunk = 0
            nchunk = 0
    if nchunk:
        pgo_u128_muladd(&acc, <uint32_t>pgo_pow10_u128[nchunk].lo, chunk)
    pgo_u128_mul_pow10(&acc, c.scale - used)
    return push_decimal(c, acc, neg and (acc.lo != 0 or acc.hi != 0), why)


cdef int text_bytea(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """bytea text: \\x hex (either case), or the escape format (\\ooo, \\\\, literal bytes)."""
    cdef unsigned char *out
    cdef Py_ssize_t i, k = 0
    cdef int hi, lo
    if n >= 2 and p[0] == 92 and p[1] == 120:         # \x
        if (n - 2) & 1:
            why[0] = b"invalid bytea hex text (odd number of digits)"
            return -1
        out = buf_room(&c.data, (n - 2) >> 1, why)
        if out == NULL:
            return -1
        i = 2
        while n - i >= 16 and pgo_hex16(p + i, out + k):     # (16 digits at a time)
            k += 8
            i += 16
        while i < n:
            hi = hex_value(p[i])
            lo = hex_value(p[i + 1])
            if hi < 0 or lo < 0:
                why[0] = b"invalid bytea hex text"
                return -1
            out[k] = <unsigned char>((hi << 4) | lo)
            k += 1
            i += 2
        c.data.len += k
        return 0
    out = buf_room(&c.data, n, why)
    if out == NULL:
        return -1
    i = 0
    while i < n:
        if p[i] != 92:
            out[k] = p[i]
            i += 1
        elif i + 1 < n and p[i + 1] == 92:
            out[k] = 92
            i += 2
        elif (i + 3 < n and 48 <= p[i + 1] <= 51 and 48 <= p[i + 2] <= 55
              and 48 <= p[i + 3] <= 55):
            out[k] = <unsigned char>(((p[i + 1] - 48) << 6) | ((p[i + 2] - 48) << 3) | (p[i + 3] - 48))
            i += 4
        else:
            why[0] = b"invalid bytea escape text"
            return -1
        k += 1
    c.data.len += k
    return 0


cdef inline int two_digits(const unsigned char *p) noexcept nogil:
    """Two ASCII digits -> 0..99, or -1."""
    cdef unsigned int a = <unsigned int>p[0] - 48
    cdef unsigned int b = <unsigned int>p[1] - 48
    if a > 9 or b > 9:
        return -1
    return <int>(a * 10 + b)


cdef int text_date(const unsigned char *p, Py_ssize_t n, int32_t *out) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef int64_t y, m, d, days
    cdef int y0, y1, m0, d0
    if n == 10 and p[4] == 45 and p[7] == 45:
        # 'YYYY-MM-DD', as PostgreSQL prints (DateStyle ISO) a date of the years 1 to
        # 9999 AD: no scan (any other shape, or a value this rejects, takes the general
        # path below, which decides it; a 4-digit year AD is always in range)
        y0 = two_digits(p)
        y1 = two_digits(p + 2)
        m0 = two_digits(p + 5)
        d0 = two_digits(p + 8)
        if (y0 | y1 | m0 | d0) >= 0 and (y0 | y1) != 0 and 1 <= m0 <= 12 and d0 >= 1:
            y = y0 * 100 + y1
            if d0 <= days_in_month(y, m0):
                out[0] = <int32_t>days_from_civil(y, m0, d0)
                return 0
    if text_is(p, n, b"infinity", 8):
        out[0] = INT32_MAX
        return 0
    if text_is(p, n, b"-infinity", 9):
        out[0] = INT32_MIN
        return 0
    if scan_date(p, n, &i, &y, &m, &d) < 0:
        return -1
    if scan_bc(p, n, &i):
        y = 1 - y
    if i != n or check_mday(y, m, d) < 0:
        return -1
    days = days_from_civil(y, m, d)
    if not (PGO_MIN_DATE <= days - PGO_UNIX_EPOCH_DAYS < PGO_END_DATE):
        return -1
    out[0] = <int32_t>days
    return 0


cdef int text_time(const unsigned char *p, Py_ssize_t n, int64_t *out) noexcept nogil:
    """HH:MM:SS[.f] -> microseconds since midnight; 24:00:00 is valid."""
    cdef Py_ssize_t i = 0
    cdef int64_t h, rest
    if scan_clock(p, n, &i, 2, 2, &h, &rest) < 0 or i != n:
        return -1
    if h > 24 or (h == 24 and rest != 0):
        return -1
    out[0] = h * 3600000000LL + rest
    return 0


cdef inline bint iso_fixed_prefix(const unsigned char *p, Py_ssize_t n, int64_t *y, int64_t *m,
                                  int64_t *d, int64_t *h, int64_t *rest, Py_ssize_t *pos) noexcept nogil:
    """The common shape 'YYYY-MM-DD HH:MM:SS[.f{1,6}]' at fixed positions.

    True with the fields set and *pos after the clock; False for anything else (a 5+
    digit year, a field out of range, 7+ fraction digits, ...), which then takes the
    general scanners: they decide what is valid, this is only a shortcut.
    """
    cdef int yh, yl, mo, dd, hh, mi, se, nd = 0
    cdef Py_ssize_t i = 19
    cdef int64_t frac = 0
    if n < 19 or p[4] != 45 or p[7] != 45 or p[10] != 32 or p[13] != 58 or p[16] != 58:
        return False
    yh = two_digits(p)
    yl = two_digits(p + 2)
    mo = two_digits(p + 5)
    dd = two_digits(p + 8)
    hh = two_digits(p + 11)
    mi = two_digits(p + 14)
    se = two_digits(p + 17)
    if (yh | yl | mo | dd | hh | mi | se) < 0:
        return False
    if mo < 1 or mo > 12 or dd < 1 or mi > 59 or se > 59 or (yh == 0 and yl == 0):
        return False
    if i < n and p[i] == 46:                    # '.'
        i += 1
        while i < n and nd < 6 and is_digit(p[i]):
            frac = frac * 10 + (p[i] - 48)
            i += 1
            nd += 1
        if nd == 0 or (i < n and is_digit(p[i])):
            return False
        frac *= <int64_t>pgo_pow10_u128[6 - nd].lo
    y[0] = yh * 100 + yl
    m[0] = mo
    d[0] = dd
    h[0] = hh
    rest[0] = <int64_t>mi * 60000000 + <int64_t>se * 1000000 + frac
    pos[0] = i
    return True


cdef int text_timestamp(const unsigned char *p, Py_ssize_t n, bint with_zone, int64_t *out) noexcept nogil:
    """ISO timestamp[tz] text -> Unix microseconds (UTC for timestamptz).

    0 ok, -1 malformed or outside PostgreSQL's range, 1 valid but past int64 Unix us.
    """
    cdef Py_ssize_t i = 0
    cdef int64_t y, m, d, h, rest, east = 0, days, pg_us
    if text_is(p, n, b"infinity", 8):
        out[0] = INT64_MAX
        return 0
    if text_is(p, n, b"-infinity", 9):
        out[0] = INT64_MIN
        return 0
    if not iso_fixed_prefix(p, n, &y, &m, &d, &h, &rest, &i):
        # the general path: years of 5+ digits, and everything malformed
        i = 0
        if (scan_date(p, n, &i, &y, &m, &d) < 0 or scan_char(p, n, &i, 32) < 0
                or scan_clock(p, n, &i, 2, 2, &h, &rest) < 0):
            return -1
    if h > 23:
        return -1
    if with_zone and scan_offset(p, n, &i, &east) < 0:
        return -1
    if scan_bc(p, n, &i):
        y = 1 - y
    if i != n or check_mday(y, m, d) < 0:
        return -1
    days = days_from_civil(y, m, d) - PGO_UNIX_EPOCH_DAYS       # since 2000-01-01
    if days < PGO_MIN_DATE - 1 or days > 106751984:              # keeps the product in int64
        return -1
    pg_us = days * PGO_USECS_PER_DAY + h * 3600000000LL + rest - east * 1000000
    if pg_us < PGO_MIN_TIMESTAMP or pg_us >= PGO_END_TIMESTAMP:
        return -1
    if pg_us >= INT64_MAX - PGO_UNIX_EPOCH_USECS:
        return 1
    out[0] = pg_us + PGO_UNIX_EPOCH_USECS
    return 0


cdef struct MonthDayNano:
    int32_t months
    int32_t days
    int64_t nanoseconds


cdef int text_interval(const unsigned char *p, Py_ssize_t n, MonthDayNano *out) noexcept nogil:
    """IntervalStyle=postgres text -> month_day_nano. 0 ok, -1 malformed, 1 ns overflow.

    [+-]N year[s] [+-]N mon[s] [+-]N day[s] [+-]H+:MM:SS[.f] (each part optional, in that
    order, at least one), or infinity / -infinity (PostgreSQL 17).
    """
    cdef Py_ssize_t i = 0, ws
    cdef int stage = 0, unit
    cdef bint neg
    cdef int64_t v, rest, months = 0, days = 0
    cdef uint64_t mag
    cdef int64_t us = 0
    if text_is(p, n, b"infinity", 8):
        out.months = INT32_MAX
        out.days = INT32_MAX
        out.nanoseconds = INT64_MAX
        return 0
    if text_is(p, n, b"-infinity", 9):
        out.months = INT32_MIN
        out.days = INT32_MIN
        out.nanoseconds = INT64_MIN
        return 0
    while True:
        if stage == 4:
            return -1                         # nothing may follow the time part
        neg = False
        if i < n and (p[i] == 43 or p[i] == 45):
            neg = p[i] == 45
            i += 1
        ws = i
        while i < n and is_digit(p[i]):
            i += 1
        if i < n and p[i] == 58:              # ':' -> this is the time part
            i = ws
            if scan_clock(p, n, &i, 1, 12, &v, &rest) < 0 or v > 2562047788LL:
                return -1
            mag = <uint64_t>v * 3600000000ULL + <uint64_t>rest
            if mag > (<uint64_t>INT64_MAX + (1 if neg else 0)):
                return -1
            us = <int64_t>(0 - mag) if neg else <int64_t>mag
            stage = 4
        else:
            i = ws
            if scan_uint(p, n, &i, 1, 10, &v) < 0 or scan_char(p, n, &i, 32) < 0:
                return -1
            if neg:
                v = -v
            if match_at(p, n, i, b"year", 4) and stage < 1:
                unit = 1
                i += 4
            elif match_at(p, n, i, b"mon", 3) and stage < 2:
                unit = 2
                i += 3
            elif match_at(p, n, i, b"day", 3) and stage < 3:
                unit = 3
                i += 3
            else:
                return -1
            if i < n and p[i] == 115:        # plural 's'
                i += 1
            if unit == 1:
                months += v * 12
            elif unit == 2:
                months += v
            else:
                days = v
            stage = unit
        if i == n:
            break
        if p[i] != 32:
            return -1
        i += 1
    if months < INT32_MIN or months > INT32_MAX or days < INT32_MIN or days > INT32_MAX:
        return -1
    out.months = <int32_t>months
    out.days = <int32_t>days
    if us > INT64_MAX // 1000 or us < INT64_MIN // 1000:
        return 1
    out.nanoseconds = us * 1000
    return 0


cdef int text_uuid(const unsigned char *p, Py_ssize_t n, unsigned char *out) noexcept nogil:
    """8-4-4-4-12 hex (either case) or 32 hex digits."""
    cdef Py_ssize_t i = 0, k
    cdef int hi, lo
    if n != 36 and n != 32:
        return -1
    if n == 36 and (p[8] != 45 or p[13] != 45 or p[18] != 45 or p[23] != 45):
        return -1
    # (8 digits at a time; any byte that is not a hex digit sends it to the loop, which
    # rejects it)
    if pgo_uuid36(p, out) if n == 36 else (pgo_hex16(p, out) and pgo_hex16(p + 16, out + 8)):
        return 0
    for k in range(16):
        if n == 36 and (i == 8 or i == 13 or i == 18 or i == 23):
            i += 1
        hi = hex_value(p[i])
        lo = hex_value(p[i + 1])
        if hi < 0 or lo < 0:
            return -1
        out[k] = <unsigned char>((hi << 4) | lo)
        i += 2
    return 0


cdef int text_array(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """One-dimensional array text '{...}' into c.child (docs/protocol.md section 4.3).

    Quoted elements may hold backslash escapes (unescaped into the list column's otherwise
    unused data buffer); unquoted NULL (any case) is a null element; '[lb:ub]=' bounds or
    nested braces (several dimensions) -> 1.
    """
    cdef Column *child = c.child
    cdef Py_ssize_t start_rows = child.length, i = 1, s, e, k
    cdef const unsigned char *ep
    cdef unsigned char *scratch
    cdef bint escaped, is_null
    cdef int r
    if n >= 1 and p[0] == 91:                 # '[' : explicit bounds, lower bound != 1
        if utf8_invalid_at(p, n) >= 0:         # kept as text in _special
            why[0] = WHY_UTF8
            return -1
        return 1
    if n < 2 or p[0] != 123:
        why[0] = b"invalid array text (no opening brace)"
        return -1
    if p[1] == 123:                            # '{{' : more than one dimension
        if utf8_invalid_at(p, n) >= 0:         # kept as text in _special
            why[0] = WHY_UTF8
            return -1
        return 1
    if p[1] == 125:                            # '{}'
        if n != 2:
            why[0] = b"invalid array text (junk after the closing brace)"
            return -1
        return 0
    while True:
        if i >= n:
            why[0] = b"invalid array text (unterminated)"
            return -1
        is_null = False
        if p[i] == 34:                         # quoted element
            i += 1
            s = i
            escaped = False
            while i < n and p[i] != 34:
                if p[i] == 92:
                    escaped = True
                    i += 1
                i += 1
            if i >= n:
                why[0] = b"invalid array text (unterminated quoted element)"
                return -1
            e = i
            i += 1
            ep = p + s
            if escaped:
                c.data.len = 0
                if buf_reserve(&c.data, e - s) < 0:
                    why[0] = WHY_OOM
                    return -1
                scratch = c.data.data
                k = 0
                while s < e:
                    if p[s] == 92:
                        s += 1
                    scratch[k] = p[s]
                    k += 1
                    s += 1
                ep = scratch
                e = k
                s = 0
        else:
            s = i
            while i < n and p[i] != 44 and p[i] != 125 and p[i] != 34 and p[i] != 92 and p[i] != 123:
                i += 1
            e = i
            if e == s or i >= n or p[i] == 34 or p[i] == 92 or p[i] == 123:
                why[0] = b"invalid array text (bad unquoted element)"
                return -1
            ep = p + s
            is_null = (e - s == 4 and (p[s] | 0x20) == 110 and (p[s + 1] | 0x20) == 117
                       and (p[s + 2] | 0x20) == 108 and (p[s + 3] | 0x20) == 108)
        if is_null:
            if col_end_row(child, 0, 0) < 0:
                why[0] = WHY_OOM
                return -1
        else:
            r = parse_text_value(child, ep, e - s, why)
            if r != 0:
                if r == 1:
                    col_truncate(child, start_rows)
                return r
            if col_end_row(child, 1, 0) < 0:
                why[0] = WHY_OOM
                return -1
        if i < n and p[i] == 44:
            i += 1
        elif i < n and p[i] == 125:
            i += 1
            break
        else:
            why[0] = b"invalid array text (expected ',' or '}')"
            return -1
    if i != n:
        why[0] = b"invalid array text (junk after the closing brace)"
        return -1
    return 0


# -- entry point -------------------------------------------------------------------------

cdef int _parse_text(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t i64
    cdef int32_t i32
    cdef int16_t i16
    cdef uint32_t u32
    cdef double f64
    cdef float f32
    cdef int r
    cdef MonthDayNano mdn
    cdef unsigned char uuid[16]
    cdef int kind = c.kind
    if kind == K_CHAR and n == 1 and p[0] >= 0x80:
        return char_as_text(&c.data, p, 1, why)   # PostgreSQL 14 prints the raw byte: use 15's \ooo
    if kind == K_TEXT or kind == K_BPCHAR or kind == K_JSON or kind == K_JSONB or kind == K_CHAR \
            or kind == K_NUMERIC_STR or kind == K_TIMETZ or kind == K_INET or kind == K_CIDR \
            or kind == K_MACADDR or kind == K_MACADDR8 or kind == K_UNKNOWN:
        if utf8_invalid_at(p, n) >= 0:
            why[0] = WHY_UTF8
            return -1
        return push_bytes(c, p, n, why)      # PostgreSQL's text form is the value
    elif kind == K_INT4:
        if text_int(p, n, INT32_MIN, INT32_MAX, &i64) < 0:
            why[0] = b"invalid int4 text"
            return -1
        i32 = <int32_t>i64
        return PGO_PUSH_FIXED(c, &i32, 4, why, push_fixed_slow)
    elif kind == K_INT8:
        if text_int(p, n, INT64_MIN, INT64_MAX, &i64) < 0:
            why[0] = b"invalid int8 text"
            return -1
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_INT2:
        if text_int(p, n, INT16_MIN, INT16_MAX, &i64) < 0:
            why[0] = b"invalid int2 text"
            return -1
        i16 = <int16_t>i64
        return PGO_PUSH_FIXED(c, &i16, 2, why, push_fixed_slow)
    elif kind == K_BOOL:
        if n == 1 and (p[0] == 116 or p[0] == 102):
            if col_push_bool(c, p[0] == 116) < 0:
                why[0] = WHY_OOM
                return -1
            return 0
        why[0] = b"invalid bool text (expected 't' or 'f')"
        return -1
    elif kind == K_FLOAT8:
        if text_float(p, n, False, &f64) < 0:
            why[0] = b"invalid float8 text"
            return -1
        return PGO_PUSH_FIXED(c, &f64, 8, why, push_fixed_slow)
    elif kind == K_FLOAT4:
        if text_float(p, n, True, &f64) < 0:
            why[0] = b"invalid float4 text"
            return -1
        f32 = <float>f64
        return PGO_PUSH_FIXED(c, &f32, 4, why, push_fixed_slow)
    elif kind == K_DECIMAL:
        return text_decimal(c, p, n, why)
    elif kind == K_TIMESTAMPTZ or kind == K_TIMESTAMP:
        r = text_timestamp(p, n, kind == K_TIMESTAMPTZ, &i64)
        if r < 0:
            why[0] = b"invalid or out-of-range timestamp text"
            return -1
        if r == 1:
            return 1
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_DATE:
        if text_date(p, n, &i32) < 0:
            why[0] = b"invalid or out-of-range date text"
            return -1
        return PGO_PUSH_FIXED(c, &i32, 4, why, push_fixed_slow)
    elif kind == K_TIME:
        if text_time(p, n, &i64) < 0:
            why[0] = b"invalid time text"
            return -1
        if i64 == PGO_USECS_PER_DAY:
            return 1                   # 24:00:00 is outside Arrow's time64 range
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_INTERVAL:
        r = text_interval(p, n, &mdn)
        if r < 0:
            why[0] = b"invalid interval text"
            return -1
        if r == 1:
            return 1
        return PGO_PUSH_FIXED(c, &mdn, 16, why, push_fixed_slow)
    elif kind == K_UUID:
        if text_uuid(p, n, uuid) < 0:
            why[0] = b"invalid uuid text"
            return -1
        return PGO_PUSH_FIXED(c, uuid, 16, why, push_fixed_slow)
    elif kind == K_BYTEA:
        return text_bytea(c, p, n, why)
    elif kind == K_OID:
        if text_int(p, n, 0, UINT32_MAX, &i64) < 0:
            why[0] = b"invalid oid text"
            return -1
        u32 = <uint32_t>i64
        return PGO_PUSH_FIXED(c, &u32, 4, why, push_fixed_slow)
    elif kind == K_ARRAY:
        return text_array(c, p, n, why)
    why[0] = b"unknown value kind"
    return -1


# -- per-kind entry points (Column.text_fn) ----------------------------------------------
# The common kinds get a small function each, chosen once per column by text_value_fn():
# the scan loop calls it through the column, with no kind tests per value. Each does
# exactly what _parse_text does for its kind; every other kind goes to _parse_text.

cdef int tx_text(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if utf8_invalid_at(p, n) >= 0:
        why[0] = WHY_UTF8
        return -1
    return push_bytes(c, p, n, why)


cdef int tx_int4(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t v
    cdef int32_t i32
    if text_int(p, n, INT32_MIN, INT32_MAX, &v) < 0:
        why[0] = b"invalid int4 text"
        return -1
    i32 = <int32_t>v
    return PGO_PUSH_FIXED(c, &i32, 4, why, push_fixed_slow)


cdef int tx_int8(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t v
    if text_int(p, n, INT64_MIN, INT64_MAX, &v) < 0:
        why[0] = b"invalid int8 text"
        return -1
    return PGO_PUSH_FIXED(c, &v, 8, why, push_fixed_slow)


cdef int tx_bool(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n == 1 and (p[0] == 116 or p[0] == 102):
        if col_push_bool(c, p[0] == 116) < 0:
            why[0] = WHY_OOM
            return -1
        return 0
    why[0] = b"invalid bool text (expected 't' or 'f')"
    return -1


cdef int tx_float8(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef double v
    if text_float(p, n, False, &v) < 0:
        why[0] = b"invalid float8 text"
        return -1
    return PGO_PUSH_FIXED(c, &v, 8, why, push_fixed_slow)


cdef int tx_uuid(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef unsigned char uuid[16]
    if text_uuid(p, n, uuid) < 0:
        why[0] = b"invalid uuid text"
        return -1
    return PGO_PUSH_FIXED(c, uuid, 16, why, push_fixed_slow)


cdef int ts_tail(const unsigned char *p, Py_ssize_t n, bint with_zone, int64_t *rest) noexcept nogil:
    """The part of an ISO timestamp[tz] text after 'YYYY-MM-DD HH' (n >= 19) in its common
    shapes: ':MM:SS[.f{1,6}]' then, with a zone, '+HH' or '+HH:MM' (or '-'), then the end.
    0 with *rest = µs into the hour minus the zone's offset; -1 for any other shape (the
    full parser decides those). Accepts only what text_timestamp accepts, with the same
    value."""
    cdef int mi, se, hh, mm = 0, nd = 0
    cdef Py_ssize_t i = 19
    cdef int64_t frac = 0, east = 0
    cdef uint64_t chunk
    if not pgo_mmss(p + 11, &mi, &se):
        return -1
    if i < n and p[i] == 46:                    # '.'
        i += 1
        nd = pgo_digit_run8(p + i, n - i, &chunk)  # (1 to 6 digits, 8 looked at once)
        if nd == 0 or nd > 6:
            return -1
        i += nd
        frac = <int64_t>chunk * <int64_t>pgo_pow10_u128[6 - nd].lo
    if with_zone:
        if n - i != 3 and not (n - i == 6 and p[i + 3] == 58):
            return -1
        if p[i] != 43 and p[i] != 45:
            return -1
        hh = two_digits(p + i + 1)
        if n - i == 6:
            mm = two_digits(p + i + 4)
        if (hh | mm) < 0 or mm > 59:
            return -1
        east = hh * 3600 + mm * 60
        if east >= PGO_TZDISP_LIMIT:
            return -1
        if p[i] == 45:
            east = -east
        i = n
    if i != n:
        return -1
    rest[0] = <int64_t>mi * 60000000 + <int64_t>se * 1000000 + frac - east * 1000000
    return 0


# The memo's base is kept only for hours whose every value (any minute, second and zone
# offset: within 17 h of the hour) is inside PostgreSQL's and int64's range, so a hit
# needs no range check.
cdef extern from "text_values.h":
    const int64_t PGO_TS_MEMO_MARGIN
    # ts_tail for the two shapes of whole seconds PostgreSQL sends most: 0, -1, or 1 for
    # another shape (ts_tail decides)
    int pgo_ts_tail_common(const unsigned char *p, Py_ssize_t n, bint with_zone,
                           int64_t *rest) noexcept nogil


cdef inline bint ts_memo_hit(Column *c, const unsigned char *p, Py_ssize_t n, int64_t *out) noexcept nogil:
    """A timestamp[tz] text whose date and hour are those of the column's memo: parse
    only the rest. Timestamps in a change stream cluster in time, so most values hit."""
    cdef uint64_t k0, k1
    cdef int64_t rest
    cdef int rc
    if not c.memo_set or n < 19:
        return False
    memcpy(&k0, p, 8)
    memcpy(&k1, p + 5, 8)
    if k0 != c.memo_k0 or k1 != c.memo_k1:
        return False
    rc = pgo_ts_tail_common(p, n, c.kind == K_TIMESTAMPTZ, &rest)
    if rc > 0:
        rc = ts_tail(p, n, c.kind == K_TIMESTAMPTZ, &rest)
    if rc < 0:
        return False
    out[0] = c.memo_base + rest
    return True


cdef inline void ts_memo_note(Column *c, const unsigned char *p, Py_ssize_t n, int64_t v) noexcept nogil:
    """After the full parser accepted p as v (Unix µs): remember its hour, when the text
    has the common shape (a 4-digit year, so the prefix is exactly 'YYYY-MM-DD HH')."""
    cdef int64_t rest, pg_us
    if n < 19 or p[4] != 45 or p[7] != 45 or p[10] != 32:
        return
    if ts_tail(p, n, c.kind == K_TIMESTAMPTZ, &rest) < 0:
        return
    v -= rest                                    # the hour's start, Unix µs
    pg_us = v - PGO_UNIX_EPOCH_USECS
    if (pg_us - PGO_TS_MEMO_MARGIN < PGO_MIN_TIMESTAMP or pg_us + PGO_TS_MEMO_MARGIN >= PGO_END_TIMESTAMP
            or pg_us + PGO_TS_MEMO_MARGIN >= INT64_MAX - PGO_UNIX_EPOCH_USECS):
        return
    memcpy(&c.memo_k0, p, 8)
    memcpy(&c.memo_k1, p + 5, 8)
    c.memo_base = v
    c.memo_set = True


cdef int tx_timestamp(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t v
    cdef int r
    if not ts_memo_hit(c, p, n, &v):
        r = text_timestamp(p, n, c.kind == K_TIMESTAMPTZ, &v)
        if r < 0:
            why[0] = b"invalid or out-of-range timestamp text"
            return -1
        if r == 1:
            return 1
        ts_memo_note(c, p, n, v)
    return PGO_PUSH_FIXED(c, &v, 8, why, push_fixed_slow)


cdef int tx_date(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int32_t v
    if text_date(p, n, &v) < 0:
        why[0] = b"invalid or out-of-range date text"
        return -1
    return PGO_PUSH_FIXED(c, &v, 4, why, push_fixed_slow)


cdef value_fn text_value_fn(int kind) noexcept nogil:
    """The text parser a column of this kind calls per value."""
    if kind == K_TEXT or kind == K_BPCHAR or kind == K_JSON or kind == K_JSONB \
            or kind == K_NUMERIC_STR or kind == K_TIMETZ or kind == K_INET or kind == K_CIDR \
            or kind == K_MACADDR or kind == K_MACADDR8 or kind == K_UNKNOWN:
        return tx_text                      # (K_CHAR has its PostgreSQL 14 byte case)
    if kind == K_INT4:
        return tx_int4
    if kind == K_INT8:
        return tx_int8
    if kind == K_BOOL:
        return tx_bool
    if kind == K_FLOAT8:
        return tx_float8
    if kind == K_DECIMAL:
        return text_decimal
    if kind == K_TIMESTAMP or kind == K_TIMESTAMPTZ:
        return tx_timestamp
    if kind == K_DATE:
        return tx_date
    if kind == K_UUID:
        return tx_uuid
    if kind == K_ARRAY:
        return text_array                   # (the elements: their own column's parser)
    if kind == K_BYTEA:
        return text_bytea
    return _parse_text


cdef inline int parse_text_value(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """Append one text-format value to c: 0 ok, -1 malformed (*why set), 1 unrepresentable.

    On -1 and 1 nothing is left appended (the column is as before the call).
    """
    cdef int r = c.text_fn(c, p, n, why)
    if r != 0:
        col_discard_partial(c)
    return r
