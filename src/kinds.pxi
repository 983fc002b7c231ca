# Value kinds: how a column's values are parsed and which Arrow type they land in.
#
# The kinds themselves (the ValueKind enum K_*, K_NKINDS, and KIND_NUMBERS) are
# generated from pgoutput_fast/types.py into kind_numbers.pxi (scripts/gen_kinds.py).
# The Arrow type of each kind is documented in the types.py docstring;
# kind_layout()/kind_fixed_width() give the builder layout of that Arrow type.


cdef inline bint kind_is_valid(int kind) noexcept nogil:
    return 0 <= kind < K_NKINDS


cdef int kind_layout(int kind) noexcept nogil:
    """Builder layout (ColLayout) of the kind's Arrow type; -1 for an unknown kind."""
    if kind == K_BOOL:
        return LAYOUT_BOOL
    elif (kind == K_INT2 or kind == K_INT4 or kind == K_INT8 or kind == K_OID
          or kind == K_FLOAT4 or kind == K_FLOAT8 or kind == K_DECIMAL
          or kind == K_DATE or kind == K_TIME or kind == K_TIMESTAMP
          or kind == K_TIMESTAMPTZ or kind == K_INTERVAL or kind == K_UUID):
        return LAYOUT_FIXED
    elif kind == K_ARRAY:
        return LAYOUT_LIST
    elif kind_is_valid(kind):
        return LAYOUT_VARLEN      # strings, bytea, unknown (string or binary)
    return -1


cdef int kind_fixed_width(int kind) noexcept nogil:
    """Bytes per value for LAYOUT_FIXED kinds, 0 for the others."""
    if kind == K_INT2:
        return 2                  # int16
    elif kind == K_INT4 or kind == K_OID or kind == K_FLOAT4 or kind == K_DATE:
        return 4                  # int32 / uint32 / float32 / date32
    elif (kind == K_INT8 or kind == K_FLOAT8 or kind == K_TIME or kind == K_TIMESTAMP
          or kind == K_TIMESTAMPTZ):
        return 8                  # int64 / float64 / time64[us] / timestamp[us]
    elif kind == K_DECIMAL or kind == K_UUID or kind == K_INTERVAL:
        return 16                 # decimal128 / fixed_size_binary(16) / month_day_nano
    return 0


cdef Column *column_for_type(int kind, int precision, int scale, int elem_kind,
                             int elem_precision, int elem_scale) noexcept nogil:
    """A new empty Column for a ColumnType (with its element Column for K_ARRAY).

    NULL when out of memory, or for an invalid kind (unknown number, an array of arrays,
    a decimal whose precision/scale decimal128 cannot hold). Free with col_free().
    """
    cdef Column *c
    if kind == K_ARRAY:
        if not kind_is_valid(elem_kind) or elem_kind == K_ARRAY:
            return NULL
        if elem_kind == K_DECIMAL and not (1 <= elem_precision <= 38 and 0 <= elem_scale <= elem_precision):
            return NULL
        c = col_new(K_ARRAY, LAYOUT_LIST, 0)
        if c == NULL:
            return NULL
        c.child = col_new(elem_kind, kind_layout(elem_kind), kind_fixed_width(elem_kind))
        if c.child == NULL:
            col_free(c)
            return NULL
        c.child.precision = elem_precision
        c.child.scale = elem_scale
        return c
    if not kind_is_valid(kind):
        return NULL
    if kind == K_DECIMAL and not (1 <= precision <= 38 and 0 <= scale <= precision):
        return NULL
    c = col_new(kind, kind_layout(kind), kind_fixed_width(kind))
    if c == NULL:
        return NULL
    c.precision = precision
    c.scale = scale
    return c
