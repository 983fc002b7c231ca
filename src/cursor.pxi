# Cursor over a message: bounds-checked big-endian readers.
#
# Every reader is `noexcept nogil` and returns 0, or -1 after recording the failure in
# the cursor (offset + static reason); the caller raises DecodeError with the GIL held.
# This keeps the same readers usable on the nogil scanning path.

from libc.stdint cimport uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t
from libc.string cimport memchr, memcpy, memcmp

cdef extern from "digits.h" nogil:
    int pgo_digits16(const unsigned char *p, int nd, uint64_t *out)
    int pgo_digit_run8(const unsigned char *p, Py_ssize_t avail, uint64_t *out)
    bint pgo_mmss(const unsigned char *p, int *mi, int *se)
    bint pgo_hex16(const unsigned char *p, unsigned char *out)
    bint pgo_uuid36(const unsigned char *p, unsigned char *out)
    uint64_t pgo_hex_encode4(const unsigned char *p)
    const bint PGO_SWAR_DIGITS        # (little-endian hosts: the 8-byte forms above)


cdef extern from "endian.h" nogil:
    uint16_t pgo_be16(const unsigned char *p)
    uint32_t pgo_be32(const unsigned char *p)
    uint64_t pgo_be64(const unsigned char *p)
    int16_t pgo_be16s(const unsigned char *p)
    int32_t pgo_be32s(const unsigned char *p)
    int64_t pgo_be64s(const unsigned char *p)
    double pgo_be_float8(const unsigned char *p)
    float pgo_be_float4(const unsigned char *p)


cdef struct Cursor:
    const unsigned char *buf
    Py_ssize_t len
    Py_ssize_t pos
    # failure record
    Py_ssize_t err_offset
    const char *err_reason
    Py_ssize_t err_need      # bytes a truncated read needed, or -1


cdef inline void cur_init(Cursor *c, const unsigned char *buf, Py_ssize_t n) noexcept nogil:
    c.buf = buf
    c.len = n
    c.pos = 0
    c.err_offset = 0
    c.err_reason = NULL
    c.err_need = -1


cdef inline int cur_fail(Cursor *c, Py_ssize_t offset, const char *reason) noexcept nogil:
    c.err_offset = offset
    c.err_reason = reason
    c.err_need = -1
    return -1


cdef inline int cur_need(Cursor *c, Py_ssize_t n) noexcept nogil:
    if c.len - c.pos < n:
        c.err_offset = c.pos
        c.err_reason = b"truncated message"
        c.err_need = n
        return -1
    return 0


cdef inline int rd_u8(Cursor *c, uint8_t *out) noexcept nogil:
    if c.pos >= c.len:
        return cur_need(c, 1)
    out[0] = c.buf[c.pos]
    c.pos += 1
    return 0


cdef inline int rd_i16(Cursor *c, int16_t *out) noexcept nogil:
    if cur_need(c, 2) < 0:
        return -1
    out[0] = pgo_be16s(c.buf + c.pos)
    c.pos += 2
    return 0


cdef inline int rd_u32(Cursor *c, uint32_t *out) noexcept nogil:
    if cur_need(c, 4) < 0:
        return -1
    out[0] = pgo_be32(c.buf + c.pos)
    c.pos += 4
    return 0


cdef inline int rd_i32(Cursor *c, int32_t *out) noexcept nogil:
    if cur_need(c, 4) < 0:
        return -1
    out[0] = pgo_be32s(c.buf + c.pos)
    c.pos += 4
    return 0


cdef inline int rd_u64(Cursor *c, uint64_t *out) noexcept nogil:
    if cur_need(c, 8) < 0:
        return -1
    out[0] = pgo_be64(c.buf + c.pos)
    c.pos += 8
    return 0


cdef inline int rd_i64(Cursor *c, int64_t *out) noexcept nogil:
    if cur_need(c, 8) < 0:
        return -1
    out[0] = pgo_be64s(c.buf + c.pos)
    c.pos += 8
    return 0


cdef inline int rd_cstring(Cursor *c, const char **out, Py_ssize_t *n) noexcept nogil:
    """A NUL-terminated String: `out` points at its first byte, `n` excludes the NUL."""
    cdef const unsigned char *start = c.buf + c.pos
    cdef const unsigned char *nul = <const unsigned char *>memchr(start, 0, <size_t>(c.len - c.pos))
    if nul == NULL:
        return cur_fail(c, c.pos, b"unterminated string (no NUL before the end)")
    out[0] = <const char *>start
    n[0] = nul - start
    c.pos += n[0] + 1
    return 0


cdef inline int rd_bytes(Cursor *c, Py_ssize_t n, const unsigned char **out) noexcept nogil:
    if cur_need(c, n) < 0:
        return -1
    out[0] = c.buf + c.pos
    c.pos += n
    return 0


cdef inline int cur_expect_end(Cursor *c) noexcept nogil:
    if c.pos != c.len:
        return cur_fail(c, c.pos, b"trailing bytes after the end of the message")
    return 0


cdef inline Py_ssize_t utf8_invalid_at(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Offset of the first byte that is not part of valid UTF-8 (as Python's strict
    decoder: no overlong forms, no surrogates, nothing above U+10FFFF), or -1."""
    cdef Py_ssize_t i = 0, start
    cdef uint64_t word
    cdef unsigned char c, c1
    cdef int need
    while i < n:
        # ASCII fast path, 8 bytes at a time
        while i + 8 <= n:
            memcpy(&word, p + i, 8)
            if word & <uint64_t>0x8080808080808080ULL:
                break
            i += 8
        if i >= n:
            break
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        start = i
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
        elif 0xF0 <= c <= 0xF4:
            need = 3
        else:
            return start
        if n - i <= need:
            return start
        c1 = p[i + 1]
        if ((c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F)
                or (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F)):
            return start
        i += 1
        while need > 0:
            if p[i] & 0xC0 != 0x80:
                return start
            i += 1
            need -= 1
    return -1
