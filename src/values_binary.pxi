# Binary TupleData values ('b', the types' send functions) -> typed column data.
#
# Same contract as parse_text_value (values_text.pxi): 0 ok, -1 malformed (*why set),
# 1 valid but unrepresentable (nothing appended); on non-zero nothing is left appended.
# Every read is bounds-checked against n: lengths inside arrays and numerics are hostile
# input. Types whose Arrow form is PostgreSQL's text form (numeric without typmod,
# timetz, inet/cidr, macaddr/macaddr8, "char") are formatted here exactly like the
# server's output functions would; those formatters (*_as_text) append to a plain Buf so
# that other code can reuse them.

cdef const char *WHY_BIN_LEN = b"binary value has the wrong length for its type"
cdef const char *HEX_DIGITS = b"0123456789abcdef"


# -- formatting helpers (write into a buffer reserved by the caller) -------------------

cdef inline Py_ssize_t put_uint(unsigned char *out, uint64_t v) noexcept nogil:
    """Decimal digits of v; returns the count."""
    cdef unsigned char tmp[20]
    cdef Py_ssize_t k = 0, j = 0
    while True:
        tmp[k] = <unsigned char>(48 + v % 10)
        k += 1
        v //= 10
        if v == 0:
            break
    while k > 0:
        k -= 1
        out[j] = tmp[k]
        j += 1
    return j


cdef inline Py_ssize_t put_2d(unsigned char *out, uint64_t v) noexcept nogil:
    """At least two digits, zero-padded."""
    if v < 10:
        out[0] = 48
        out[1] = <unsigned char>(48 + v)
        return 2
    return put_uint(out, v)


cdef Py_ssize_t put_clock(unsigned char *out, int64_t us) noexcept nogil:
    """HH:MM:SS[.ffffff without trailing zeros] for 0 <= us <= 24 h (PostgreSQL time_out)."""
    cdef int64_t frac = us % 1000000
    cdef int64_t secs = us // 1000000
    cdef Py_ssize_t k = put_2d(out, <uint64_t>(secs // 3600))
    cdef int j
    out[k] = 58
    k += put_2d(out + k + 1, <uint64_t>((secs // 60) % 60)) + 1
    out[k] = 58
    k += put_2d(out + k + 1, <uint64_t>(secs % 60)) + 1
    if frac:
        out[k] = 46
        for j in range(6, 0, -1):
            out[k + j] = <unsigned char>(48 + frac % 10)
            frac //= 10
        k += 7
        while out[k - 1] == 48:
            k -= 1
    return k


cdef Py_ssize_t put_zone(unsigned char *out, int32_t zone_west) noexcept nogil:
    """PostgreSQL EncodeTimezone: +HH, +HH:MM or +HH:MM:SS, east-positive."""
    cdef int32_t secs = -zone_west if zone_west < 0 else zone_west
    cdef int32_t mins = secs // 60
    cdef int32_t hours = mins // 60
    cdef Py_ssize_t k = 1
    secs -= mins * 60
    mins -= hours * 60
    out[0] = 43 if zone_west <= 0 else 45
    k += put_2d(out + k, <uint64_t>hours)
    if secs != 0 or mins != 0:
        out[k] = 58
        k += put_2d(out + k + 1, <uint64_t>mins) + 1
    if secs != 0:
        out[k] = 58
        k += put_2d(out + k + 1, <uint64_t>secs) + 1
    return k


cdef Py_ssize_t put_ipv4(unsigned char *out, const unsigned char *a) noexcept nogil:
    cdef Py_ssize_t k = 0
    cdef int i
    for i in range(4):
        if i:
            out[k] = 46
            k += 1
        k += put_uint(out + k, a[i])
    return k


cdef Py_ssize_t put_ipv6(unsigned char *out, const unsigned char *a) noexcept nogil:
    """PostgreSQL's inet_net_ntop_ipv6 without the mask: the longest run (first on ties)
    of two or more zero groups becomes '::'; ::a.b.c.d and ::ffff:a.b.c.d keep the
    dotted IPv4 tail. (Its 'len == 7' IPv4 case can never fire: group 6 is inside the
    run then, so ::2 prints as ::2, as the server does.)"""
    cdef unsigned int words[8]
    cdef int i, best_base = -1, best_len = 0, cur_base = -1, cur_len = 0
    cdef Py_ssize_t k = 0
    cdef unsigned int w
    cdef int shift
    cdef bint started
    for i in range(8):
        words[i] = (<unsigned int>a[2 * i] << 8) | a[2 * i + 1]
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
                out[k] = 58
                k += 1
            continue
        if i != 0:
            out[k] = 58
            k += 1
        if i == 6 and best_base == 0 and (best_len == 6 or (best_len == 5 and words[5] == 0xffff)):
            return k + put_ipv4(out + k, a + 12)
        w = words[i]
        started = False
        for shift in range(12, -4, -4):
            if started or (w >> shift) & 15 or shift == 0:
                out[k] = <unsigned char>HEX_DIGITS[(w >> shift) & 15]
                k += 1
                started = True
    if best_base != -1 and best_base + best_len == 8:
        out[k] = 58
        k += 1
    return k


# -- binary parsers per kind -------------------------------------------------------------

cdef inline bint bin_decimal18_fast(const Column *c, const unsigned char *p, Py_ssize_t n,
                                   uint64_t *words) noexcept nogil:
    """bin_decimal's common case for precision <= 18, in one pass: at most 4 base-10000
    digits (read as one integer, acc = value * 10000^(nd-1-weight)), a plain sign, and a
    value exact at the column's scale and within its precision. False leaves the value
    to the general code, which decides and reports."""
    cdef int nd, e, i
    cdef uint16_t sign
    cdef uint32_t d
    cdef uint64_t acc = 0, r
    if n < 8:
        return False
    nd = pgo_be16s(p)
    if nd < 0 or nd > 4 or n != 8 + 2 * nd:
        return False
    sign = pgo_be16(p + 4)
    if (sign != 0 and sign != 0x4000) or (pgo_be16(p + 6) & 0xC000):
        return False
    for i in range(nd):
        d = pgo_be16(p + 8 + 2 * i)
        if d > 9999:
            return False
        acc = acc * 10000 + d
    # scaled value = acc * 10^e
    e = c.scale - 4 * (nd - 1 - pgo_be16s(p + 2))
    if e >= 0:
        if e > c.precision:
            if acc != 0:
                return False
            r = 0
        elif acc >= pgo_pow10_u128[c.precision - e].lo:
            return False
        else:
            r = acc * pgo_pow10_u128[e].lo
    else:
        # constant divisors (a multiply, not a division instruction)
        if e == -1:
            r = acc // 10
            if r * 10 != acc:
                return False
        elif e == -2:
            r = acc // 100
            if r * 100 != acc:
                return False
        elif e == -3:
            r = acc // 1000
            if r * 1000 != acc:
                return False
        else:
            return False
        if r >= pgo_pow10_u128[c.precision].lo:
            return False
    if sign == 0x4000 and r != 0:
        words[0] = 0 - r                          # two's complement over 128 bits
        words[1] = <uint64_t>0xFFFFFFFFFFFFFFFFULL
    else:
        words[0] = r
        words[1] = 0
    return True


cdef int bin_decimal(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """numeric_send -> decimal128(precision, scale). NaN/±Infinity -> 1.

    value = sum(digit[i] * 10000^(weight - i)); the scaled integer value * 10^scale must
    be exact (no nonzero digit below the scale) and below 10^precision.
    """
    cdef int nd, weight, first, last, i, p10, top, ndig_top, unit_p = 0
    cdef uint16_t sign, dscale
    cdef uint32_t d, f, q
    cdef pgo_u128 acc
    cdef uint64_t v64
    cdef uint64_t words[2]
    if c.precision <= 18 and bin_decimal18_fast(c, p, n, words):
        return PGO_PUSH_FIXED(c, words, 16, why, push_fixed_slow)
    if n < 8:
        why[0] = b"truncated binary numeric"
        return -1
    nd = pgo_be16s(p)
    weight = pgo_be16s(p + 2)
    sign = pgo_be16(p + 4)
    dscale = pgo_be16(p + 6)
    if nd < 0 or n != 8 + 2 * <Py_ssize_t>nd:
        why[0] = b"binary numeric length does not match its digit count"
        return -1
    for i in range(nd):
        if pgo_be16(p + 8 + 2 * i) > 9999:
            why[0] = b"invalid digit in binary numeric"
            return -1
    if sign == 0xC000 or sign == 0xD000 or sign == 0xF000:
        return 1                                  # NaN / Infinity: no decimal128 form
    if (sign != 0 and sign != 0x4000) or dscale & 0xC000:
        why[0] = b"invalid sign or scale in binary numeric"
        return -1
    first = 0
    while first < nd and pgo_be16(p + 8 + 2 * first) == 0:
        first += 1
    last = nd
    while last > first and pgo_be16(p + 8 + 2 * (last - 1)) == 0:
        last -= 1
    acc.lo = 0
    acc.hi = 0
    if first < last:
        top = pgo_be16(p + 8 + 2 * first)
        ndig_top = 1 if top < 10 else 2 if top < 100 else 3 if top < 1000 else 4
        if 4 * (weight - first) + c.scale + ndig_top > c.precision:
            why[0] = b"numeric value does not fit the decimal precision"
            return -1
        if c.precision <= 18:
            # the scaled value is below 10^18 (checked just above): 64-bit arithmetic,
            # the same steps as the 128-bit loop below
            v64 = 0
            for i in range(first, last):
                d = pgo_be16(p + 8 + 2 * i)
                p10 = 4 * (weight - i) + c.scale
                if p10 >= 0:
                    v64 = v64 * 10000 + d
                    unit_p = p10
                elif p10 > -4:
                    # constant divisors (a multiply, not a division instruction)
                    if p10 == -1:
                        q = d // 10
                        f = 10
                    elif p10 == -2:
                        q = d // 100
                        f = 100
                    else:
                        q = d // 1000
                        f = 1000
                    if d != q * f:
                        why[0] = b"numeric value has more fraction digits than the decimal scale"
                        return -1
                    v64 = v64 * (10000 // f) + q
                    unit_p = 0
                elif d:
                    why[0] = b"numeric value has more fraction digits than the decimal scale"
                    return -1
            v64 *= pgo_pow10_u128[unit_p].lo
            if sign == 0x4000 and v64 != 0:
                words[0] = 0 - v64                    # two's complement over 128 bits
                words[1] = <uint64_t>0xFFFFFFFFFFFFFFFFULL
            else:
                words[0] = v64
                words[1] = 0
            return PGO_PUSH_FIXED(c, words, 16, why, push_fixed_slow)
        for i in range(first, last):
            d = pgo_be16(p + 8 + 2 * i)
            p10 = 4 * (weight - i) + c.scale     # decimal exponent of this group's unit
            if p10 >= 0:
                pgo_u128_muladd(&acc, 10000, d)
                unit_p = p10
            elif p10 > -4:
                f = <uint32_t>pgo_pow10_u128[-p10].lo
                if d % f:
                    why[0] = b"numeric value has more fraction digits than the decimal scale"
                    return -1
                pgo_u128_muladd(&acc, 10000 // f, d // f)
                unit_p = 0
            elif d:
                why[0] = b"numeric value has more fraction digits than the decimal scale"
                return -1
        pgo_u128_mul_pow10(&acc, unit_p)
    return push_decimal(c, acc, sign == 0x4000 and (acc.lo != 0 or acc.hi != 0), why)


cdef int timetz_as_text(Buf *buf, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t us
    cdef int32_t zone
    cdef unsigned char *out
    if n != 12:
        why[0] = WHY_BIN_LEN
        return -1
    us = pgo_be64s(p)
    zone = pgo_be32s(p + 8)
    if us < 0 or us > PGO_USECS_PER_DAY or zone <= -PGO_TZDISP_LIMIT or zone >= PGO_TZDISP_LIMIT:
        why[0] = b"binary timetz out of range"
        return -1
    out = buf_room(buf, 32, why)
    if out == NULL:
        return -1
    n = put_clock(out, us)
    buf.len += n + put_zone(out + n, zone)
    return 0


cdef int inet_as_text(Buf *buf, const unsigned char *p, Py_ssize_t n, bint cidr, const char **why) noexcept nogil:
    """inet_send/cidr_send -> network_out text: inet drops a full-length mask, cidr never."""
    cdef int family, bits, size, maxbits, byte, i
    cdef unsigned char mask
    cdef unsigned char *out
    cdef Py_ssize_t k
    if n < 4:
        why[0] = b"truncated binary inet"
        return -1
    family = p[0]
    bits = p[1]
    if family == 2:
        size = 4
    elif family == 3:
        size = 16
    else:
        why[0] = b"invalid address family in binary inet"
        return -1
    maxbits = size * 8
    if bits > maxbits or p[3] != size or n != 4 + size:
        why[0] = b"invalid bits or length in binary inet"
        return -1
    if cidr and bits != maxbits:                 # PostgreSQL's addressOK()
        byte = bits // 8
        mask = <unsigned char>(0xff >> (bits % 8))
        for i in range(byte, size):
            if p[4 + i] & mask:
                why[0] = b"binary cidr has bits set to the right of the mask"
                return -1
            mask = 0xff
    out = buf_room(buf, 64, why)
    if out == NULL:
        return -1
    k = put_ipv4(out, p + 4) if size == 4 else put_ipv6(out, p + 4)
    if cidr or bits != maxbits:
        out[k] = 47
        k += 1 + put_uint(out + k + 1, <uint64_t>bits)
    buf.len += k
    return 0


cdef int macaddr_as_text(Buf *buf, const unsigned char *p, Py_ssize_t n, Py_ssize_t size, const char **why) noexcept nogil:
    cdef unsigned char *out
    cdef Py_ssize_t i
    if n != size:
        why[0] = WHY_BIN_LEN
        return -1
    out = buf_room(buf, 3 * size - 1, why)
    if out == NULL:
        return -1
    for i in range(size):
        out[3 * i] = <unsigned char>HEX_DIGITS[p[i] >> 4]
        out[3 * i + 1] = <unsigned char>HEX_DIGITS[p[i] & 15]
        if i + 1 < size:
            out[3 * i + 2] = 58
    buf.len += 3 * size - 1
    return 0


cdef int char_as_text(Buf *buf, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """charsend byte -> PostgreSQL 15+ charout: 0 -> '', >= 0x80 -> \\ooo, else the byte."""
    cdef unsigned char b
    cdef unsigned char esc[4]
    if n != 1:
        why[0] = WHY_BIN_LEN
        return -1
    b = p[0]
    if b == 0:
        return 0
    if b < 0x80:
        return buf_push(buf, p, 1, why)
    esc[0] = 92
    esc[1] = <unsigned char>(48 + (b >> 6))
    esc[2] = <unsigned char>(48 + ((b >> 3) & 7))
    esc[3] = <unsigned char>(48 + (b & 7))
    return buf_push(buf, esc, 4, why)


cdef int bin_array(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """array_send into c.child (docs/protocol.md section 4.3); element OID ignored.

    Empty (ndim 0 or no items) -> empty list; ndim > 1 or lower bound != 1 -> 1 after
    checking the framing; element length -1 -> null element. An array of K_UNKNOWN
    elements marks the column binary (any_binary) for every binary value, as a
    K_UNKNOWN column does: its Arrow type is list<binary> then, list<string> from text.
    """
    cdef Column *child = c.child
    cdef Py_ssize_t start_rows = child.length, pos, nitems = 1, k
    cdef int32_t ndim, flags, dim, lb, elen
    cdef bint special = False
    cdef int i, r
    if child.kind == K_UNKNOWN:
        c.any_binary = 1
    if n < 12:
        why[0] = b"truncated binary array header"
        return -1
    ndim = pgo_be32s(p)
    flags = pgo_be32s(p + 4)
    if ndim < 0 or ndim > 6 or (flags != 0 and flags != 1):
        why[0] = b"invalid binary array header (ndim or flags)"
        return -1
    if n < 12 + 8 * <Py_ssize_t>ndim:
        why[0] = b"truncated binary array dimensions"
        return -1
    pos = 12
    if ndim == 0:
        nitems = 0
    for i in range(ndim):
        dim = pgo_be32s(p + pos)
        lb = pgo_be32s(p + pos + 4)
        pos += 8
        # array_recv's ArrayCheckBounds: dim + lb must not overflow int32 (so the last
        # subscript is below INT32_MAX), whatever the dimension's length, 0 included
        if dim < 0 or lb > INT32_MAX - dim:
            why[0] = b"invalid binary array dimension"
            return -1
        nitems *= dim
        if nitems > 134217727:                    # MaxArraySize
            why[0] = b"binary array too large"
            return -1
        if lb != 1:
            special = True
    if ndim > 1:
        special = True
    if nitems > (n - pos) // 4:
        why[0] = b"binary array shorter than its element count"
        return -1
    if nitems == 0:
        if pos != n:
            why[0] = b"trailing bytes after binary array"
            return -1
        return 0
    for k in range(nitems):
        if n - pos < 4:
            why[0] = b"truncated binary array element"
            return -1
        elen = pgo_be32s(p + pos)
        pos += 4
        if elen == -1:
            if not special and col_end_row(child, 0, 0) < 0:
                why[0] = WHY_OOM
                return -1
            continue
        if elen < 0 or elen > n - pos:
            why[0] = b"invalid binary array element length"
            return -1
        if not special:
            r = parse_binary_value(child, p + pos, elen, why)
            if r != 0:
                if r == 1:
                    col_truncate(child, start_rows)
                return r
            if col_end_row(child, 1, 0) < 0:
                why[0] = WHY_OOM
                return -1
        pos += elen
    if pos != n:
        why[0] = b"trailing bytes after binary array"
        return -1
    if special:
        return 1
    return 0


# -- entry point -------------------------------------------------------------------------

cdef int _parse_binary(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t i64
    cdef int32_t i32
    cdef int16_t i16
    cdef uint32_t u32
    cdef uint64_t u64
    cdef MonthDayNano mdn
    cdef int kind = c.kind
    if kind == K_BYTEA:
        return push_bytes(c, p, n, why)
    if kind == K_TEXT or kind == K_BPCHAR or kind == K_JSON:
        if utf8_invalid_at(p, n) >= 0:           # text send() converts to client_encoding
            why[0] = WHY_UTF8
            return -1
        return push_bytes(c, p, n, why)
    elif kind == K_INT4:
        if n != 4:
            why[0] = WHY_BIN_LEN
            return -1
        i32 = pgo_be32s(p)
        return PGO_PUSH_FIXED(c, &i32, 4, why, push_fixed_slow)
    elif kind == K_INT8:
        if n != 8:
            why[0] = WHY_BIN_LEN
            return -1
        i64 = pgo_be64s(p)
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_INT2:
        if n != 2:
            why[0] = WHY_BIN_LEN
            return -1
        i16 = pgo_be16s(p)
        return PGO_PUSH_FIXED(c, &i16, 2, why, push_fixed_slow)
    elif kind == K_BOOL:
        if n != 1:
            why[0] = WHY_BIN_LEN
            return -1
        if col_push_bool(c, p[0] != 0) < 0:
            why[0] = WHY_OOM
            return -1
        return 0
    elif kind == K_FLOAT8:                        # IEEE bits as they are (NaN payloads kept)
        if n != 8:
            why[0] = WHY_BIN_LEN
            return -1
        u64 = pgo_be64(p)
        return PGO_PUSH_FIXED(c, &u64, 8, why, push_fixed_slow)
    elif kind == K_FLOAT4:
        if n != 4:
            why[0] = WHY_BIN_LEN
            return -1
        u32 = pgo_be32(p)
        return PGO_PUSH_FIXED(c, &u32, 4, why, push_fixed_slow)
    elif kind == K_DECIMAL:
        return bin_decimal(c, p, n, why)
    elif kind == K_NUMERIC_STR:
        return fmt_numeric(&c.data, p, n, why)     # (the change events' writer: one text)
    elif kind == K_TIMESTAMPTZ or kind == K_TIMESTAMP:
        if n != 8:
            why[0] = WHY_BIN_LEN
            return -1
        i64 = pgo_be64s(p)
        if i64 != INT64_MAX and i64 != INT64_MIN:
            if i64 < PGO_MIN_TIMESTAMP or i64 >= PGO_END_TIMESTAMP:
                why[0] = b"binary timestamp out of range"
                return -1
            if i64 >= INT64_MAX - PGO_UNIX_EPOCH_USECS:
                return 1                          # valid, but past int64 Unix microseconds
            i64 += PGO_UNIX_EPOCH_USECS
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_DATE:
        if n != 4:
            why[0] = WHY_BIN_LEN
            return -1
        i32 = pgo_be32s(p)
        if i32 != INT32_MAX and i32 != INT32_MIN:
            if i32 < PGO_MIN_DATE or i32 >= PGO_END_DATE:
                why[0] = b"binary date out of range"
                return -1
            i32 += PGO_UNIX_EPOCH_DAYS
        return PGO_PUSH_FIXED(c, &i32, 4, why, push_fixed_slow)
    elif kind == K_TIME:
        if n != 8:
            why[0] = WHY_BIN_LEN
            return -1
        i64 = pgo_be64s(p)
        if i64 < 0 or i64 > PGO_USECS_PER_DAY:
            why[0] = b"binary time out of range"
            return -1
        if i64 == PGO_USECS_PER_DAY:
            return 1                   # 24:00:00 is outside Arrow's time64 range
        return PGO_PUSH_FIXED(c, &i64, 8, why, push_fixed_slow)
    elif kind == K_INTERVAL:
        if n != 16:
            why[0] = WHY_BIN_LEN
            return -1
        i64 = pgo_be64s(p)
        mdn.days = pgo_be32s(p + 8)
        mdn.months = pgo_be32s(p + 12)
        if i64 == INT64_MAX and mdn.days == INT32_MAX and mdn.months == INT32_MAX:
            mdn.nanoseconds = INT64_MAX           # +infinity (PostgreSQL 17)
        elif i64 == INT64_MIN and mdn.days == INT32_MIN and mdn.months == INT32_MIN:
            mdn.nanoseconds = INT64_MIN
        elif i64 > INT64_MAX // 1000 or i64 < INT64_MIN // 1000:
            return 1                              # nanoseconds overflow int64
        else:
            mdn.nanoseconds = i64 * 1000
        return PGO_PUSH_FIXED(c, &mdn, 16, why, push_fixed_slow)
    elif kind == K_UUID:
        if n != 16:
            why[0] = WHY_BIN_LEN
            return -1
        return PGO_PUSH_FIXED(c, p, 16, why, push_fixed_slow)
    elif kind == K_JSONB:
        return bn_jsonb(c, p, n, why)
    elif kind == K_CHAR:
        return char_as_text(&c.data, p, n, why)
    elif kind == K_TIMETZ:
        return timetz_as_text(&c.data, p, n, why)
    elif kind == K_INET or kind == K_CIDR:
        return inet_as_text(&c.data, p, n, kind == K_CIDR, why)
    elif kind == K_MACADDR:
        return macaddr_as_text(&c.data, p, n, 6, why)
    elif kind == K_MACADDR8:
        return macaddr_as_text(&c.data, p, n, 8, why)
    elif kind == K_OID:
        if n != 4:
            why[0] = WHY_BIN_LEN
            return -1
        u32 = pgo_be32(p)
        return PGO_PUSH_FIXED(c, &u32, 4, why, push_fixed_slow)
    elif kind == K_ARRAY:
        return bin_array(c, p, n, why)
    elif kind == K_UNKNOWN:
        c.any_binary = 1
        return push_bytes(c, p, n, why)
    why[0] = b"unknown value kind"
    return -1


# -- per-kind entry points (Column.binary_fn): see the text ones in values_text.pxi ------

cdef int bn_jsonb(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n < 1 or p[0] != 1:
        why[0] = b"unsupported binary jsonb version (expected 1)"
        return -1
    if utf8_invalid_at(p + 1, n - 1) >= 0:
        why[0] = WHY_UTF8
        return -1
    return push_bytes(c, p + 1, n - 1, why)


cdef int bn_text(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if utf8_invalid_at(p, n) >= 0:           # text send() converts to client_encoding
        why[0] = WHY_UTF8
        return -1
    return push_bytes(c, p, n, why)


cdef int bn_fixed4(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """int4, oid, float4: the 4 bytes byte-swapped (float NaN payloads kept)."""
    cdef uint32_t v
    if n != 4:
        why[0] = WHY_BIN_LEN
        return -1
    v = pgo_be32(p)
    return PGO_PUSH_FIXED(c, &v, 4, why, push_fixed_slow)


cdef int bn_fixed8(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """int8, float8: the 8 bytes byte-swapped."""
    cdef uint64_t v
    if n != 8:
        why[0] = WHY_BIN_LEN
        return -1
    v = pgo_be64(p)
    return PGO_PUSH_FIXED(c, &v, 8, why, push_fixed_slow)


cdef int bn_bool(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    if n != 1:
        why[0] = WHY_BIN_LEN
        return -1
    if col_push_bool(c, p[0] != 0) < 0:
        why[0] = WHY_OOM
        return -1
    return 0


cdef int bn_timestamp(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t v
    if n != 8:
        why[0] = WHY_BIN_LEN
        return -1
    v = pgo_be64s(p)
    if v != INT64_MAX and v != INT64_MIN:
        if v < PGO_MIN_TIMESTAMP or v >= PGO_END_TIMESTAMP:
            why[0] = b"binary timestamp out of range"
            return -1
        if v >= INT64_MAX - PGO_UNIX_EPOCH_USECS:
            return 1                          # valid, but past int64 Unix microseconds
        v += PGO_UNIX_EPOCH_USECS
    return PGO_PUSH_FIXED(c, &v, 8, why, push_fixed_slow)


cdef value_fn binary_value_fn(int kind) noexcept nogil:
    """The binary parser a column of this kind calls per value."""
    if kind == K_TEXT or kind == K_BPCHAR or kind == K_JSON:
        return bn_text
    if kind == K_INT4 or kind == K_FLOAT4 or kind == K_OID:
        return bn_fixed4
    if kind == K_INT8 or kind == K_FLOAT8:
        return bn_fixed8
    if kind == K_BOOL:
        return bn_bool
    if kind == K_DECIMAL:
        return bin_decimal
    if kind == K_TIMESTAMP or kind == K_TIMESTAMPTZ:
        return bn_timestamp
    if kind == K_JSONB:
        return bn_jsonb
    if kind == K_ARRAY:
        return bin_array
    return _parse_binary


cdef inline int parse_binary_value(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    """Append one binary-format value to c: 0 ok, -1 malformed (*why set), 1 unrepresentable.

    On -1 and 1 nothing is left appended (the column is as before the call).
    """
    cdef int r = c.binary_fn(c, p, n, why)
    if r != 0:
        col_discard_partial(c)
    return r
