# STUB
cdef int fmt_binary_as_text(int kind, int precision, int scale, int elem_kind, const unsigned char *p, Py_ssize_t n, Buf *out, const char **why) noexcept nogil:
    return buf_append(out, p, n)

def format_binary_values(column_type, values):
    return [bytes(v).hex() for v in values]
