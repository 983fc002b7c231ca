# Python entry points to the value parsers (tests and tools, not the hot path).

from pgoutput_fast.types import KIND_NAMES as _KIND_NAMES


def kind_layouts():
    """{kind: (layout, fixed_width)} as the builders see them (for tests)."""
    return {k: (kind_layout(k), kind_fixed_width(k)) for k in range(K_NKINDS)}


cdef str _column_kind_name(object column_type):
    if column_type.kind == K_ARRAY:
        return f"array of {_KIND_NAMES.get(column_type.elem_kind, column_type.elem_kind)}"
    return _KIND_NAMES.get(column_type.kind, str(column_type.kind))


def parse_values(column_type, values):
    """Parse TupleData values of one column into an Arrow array.

    ``column_type`` is a ``pgoutput_fast.types.ColumnType``; ``values`` a list whose items
    are ``None`` (SQL NULL) or ``(format, data)`` with format ``'t'`` or ``'b'`` and data
    bytes-like. Returns ``(array, specials)``: ``specials`` lists the rows whose value is
    valid in PostgreSQL but has no Arrow form in this column type (those rows are null).
    Malformed input raises ``DecodeError`` (offset None).
    """
    cdef Column *c = column_for_type(column_type.kind, column_type.precision, column_type.scale,
                                     column_type.elem_kind, column_type.elem_precision,
                                     column_type.elem_scale)
    cdef const unsigned char[::1] view
    cdef const char *why = NULL
    cdef Py_ssize_t row
    cdef int r
    cdef bint binary_unknown
    cdef list specials = []
    if c == NULL:
        raise ValueError(f"unsupported column type {column_type!r}")
    try:
        for row, v in enumerate(values):
            if v is None:
                r = 0 if col_end_row(c, 0, 0) == 0 else -2
            else:
                fmt, data = v
                view = data if not isinstance(data, memoryview) else data.cast("B")
                if fmt == "t":
                    r = parse_text_value(c, &view[0] if view.shape[0] else <const unsigned char *>b"",
                                         view.shape[0], &why)
                elif fmt == "b":
                    r = parse_binary_value(c, &view[0] if view.shape[0] else <const unsigned char *>b"",
                                           view.shape[0], &why)
                else:
                    raise ValueError(f"value format must be 't' or 'b', not {fmt!r}")
                if r == -1:
                    reason = (<bytes>why).decode("utf-8", "replace") if why != NULL else "malformed value"
                    raise DecodeError(f"{reason} ({_column_kind_name(column_type)} column)", None)
                if r == 1:
                    specials.append(row)
                r = col_end_row(c, r == 0, 0)
            if r < 0:
                raise MemoryError("column builder out of memory or larger than 2 GiB")
        binary_unknown = c.any_binary or (c.child != NULL and c.child.any_binary)
        arr = col_export(c, column_type.arrow_type(binary_unknown=binary_unknown))
    finally:
        col_free(c)
    return arr, specials


def bench_parse(column_type, values, int repeat=1):
    """Time the C parsers alone on ``values`` (as for parse_values; no NULLs), ``repeat``
    times over, GIL released. Returns (seconds, input bytes parsed). A tool for tuning,
    not an API: it exports nothing and stops at the first non-zero parser result."""
    from time import perf_counter
    cdef bytes blob = b"".join(bytes(v[1]) for v in values)
    cdef Py_ssize_t nvals = len(values), i, pos
    cdef Py_ssize_t[::1] lens = np.array([len(v[1]) for v in values], dtype=np.intp)
    cdef unsigned char[::1] binary = np.array([v[0] == "b" for v in values], dtype=np.uint8)
    cdef const unsigned char *base = blob
    cdef const char *why = NULL
    cdef Column *c
    cdef int r = 0, k
    cdef double t0, t1
    c = column_for_type(column_type.kind, column_type.precision, column_type.scale,
                        column_type.elem_kind, column_type.elem_precision, column_type.elem_scale)
    if c == NULL:
        raise ValueError(f"unsupported column type {column_type!r}")
    try:
        t0 = perf_counter()
        # (with the GIL held: parsers may grow blocks through the shared block cache)
        for k in range(repeat):
            pos = 0
            for i in range(nvals):
                if binary[i]:
                    r = parse_binary_value(c, base + pos, lens[i], &why)
                else:
                    r = parse_text_value(c, base + pos, lens[i], &why)
                if r != 0 or col_end_row(c, 1, 0) < 0:
                    break
                pos += lens[i]
            if r != 0:
                break
            col_truncate(c, 0)
        t1 = perf_counter()
        if r != 0:
            raise ValueError(f"value {i} did not parse (result {r})")
    finally:
        col_free(c)
    return t1 - t0, len(blob) * repeat
