# STUB
cdef int parse_binary_value(Column *c, const unsigned char *p, Py_ssize_t n, const char **why) noexcept nogil:
    cdef int32_t v32
    cdef int64_t v
    if c.kind == K_INT4:
        v32 = pgo_be32s(p)
        return col_push_fixed(c, &v32)
    if c.kind == K_INT8:
        v = pgo_be64s(p)
        return col_push_fixed(c, &v)
    if c.kind == K_BOOL:
        return col_push_bool(c, p[0])
    c.any_binary = 1
    return col_push_bytes(c, p, n)
