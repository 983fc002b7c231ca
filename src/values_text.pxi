# STUB
cdef int parse_text_value(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int64_t v = 0
    cdef int32_t v32
    cdef Py_ssize_t i
    cdef bint neg = 0
    if c.kind == K_INT4 or c.kind == K_INT8:
        for i in range(n):
            if p[i] == 45:
                neg = 1
            else:
                v = v * 10 + (p[i] - 48)
        if neg:
            v = -v
        if c.kind == K_INT4:
            v32 = <int32_t>v
            return col_push_fixed(c, &v32)
        return col_push_fixed(c, &v)
    if c.kind == K_BOOL:
        return col_push_bool(c, p[0] == 116)
    return col_push_bytes(c, p, n)
