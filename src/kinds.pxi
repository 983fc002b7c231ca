# STUB (replaced by the real kinds.pxi)
cdef enum:
    K_UNKNOWN = 0
    K_BOOL = 1
    K_INT2 = 2
    K_INT4 = 3
    K_INT8 = 4
    K_TEXT = 10
    K_ARRAY = 27

cdef Column *column_for_type(int kind, int precision, int scale, int elem_kind, int ep, int es) noexcept nogil:
    if kind == K_INT4:
        return col_new(kind, LAYOUT_FIXED, 4)
    if kind == K_INT8:
        return col_new(kind, LAYOUT_FIXED, 8)
    if kind == K_BOOL:
        return col_new(kind, LAYOUT_BOOL, 0)
    return col_new(K_TEXT if kind != K_UNKNOWN else K_UNKNOWN, LAYOUT_VARLEN, 0)
