# The change-event table's map<string,string> images (MapB): a before / after image
# of a row as (column name, text value) entries, written in C and exported to Arrow, and
# the string columns that export builds from name and kind ids.

cdef struct MapB:
    Buf offsets        # int32 entry end offsets per row (offsets[0] = 0 written lazily)
    Buf valid          # bit per row
    Column *keys       # string per entry: the column's name, written with its value
    Column *values     # string per entry (null = SQL NULL)
    Py_ssize_t rows


cdef inline int map_begin(MapB *mb) noexcept nogil:
    cdef int32_t zero = 0
    if mb.offsets.len == 0:
        if buf_append(&mb.offsets, &zero, 4) < 0:
            return -1
    if mb.values == NULL:
        mb.values = col_new(K_TEXT, LAYOUT_VARLEN, 0)
        if mb.values == NULL:
            return -1
    if mb.values.offsets.len == 0:        # (ev_map_row writes each value's end only)
        if buf_append(&mb.values.offsets, &zero, 4) < 0:
            return -1
    if mb.keys == NULL:
        mb.keys = col_new(K_TEXT, LAYOUT_VARLEN, 0)
        if mb.keys == NULL:
            return -1
    if mb.keys.offsets.len == 0:          # (map_key writes each entry's end only)
        if buf_append(&mb.keys.offsets, &zero, 4) < 0:
            return -1
    return 0


cdef inline int map_key(MapB *mb, const unsigned char *names, const int32_t *name_end,
                        int c) noexcept nogil:
    """The next entry's key: column c's name, names[name_end[c]:name_end[c + 1]] (names
    has 8 bytes of room past the last one, so that a short name is one 8-byte copy).
    After map_begin. -1: no memory; -2: the keys passed 2 GiB (int32 offsets)."""
    cdef Column *k = mb.keys
    cdef int32_t s = name_end[c]
    cdef int32_t ln = name_end[c + 1] - s
    cdef int32_t end
    if k.data.cap - k.data.len < ln + 8 and buf_reserve(&k.data, ln + 8) < 0:
        return -1
    if ln <= 8:
        memcpy(k.data.data + k.data.len, names + s, 8)
    else:
        memcpy(k.data.data + k.data.len, names + s, <size_t>ln)
    if k.data.len + ln > 0x7FFFFFFF:
        return -2
    k.data.len += ln
    end = <int32_t>k.data.len
    if buf_append4(&k.offsets, &end) < 0:
        return -1
    k.length += 1
    return 0


cdef inline int map_keys_all(MapB *mb, const unsigned char *names, const int32_t *name_end,
                             int ncols) noexcept nogil:
    """The keys of a row that has every column: the names in one copy, and their ends.
    After map_begin. -1: no memory; -2: past 2 GiB."""
    cdef Column *k = mb.keys
    cdef int32_t total = name_end[ncols]
    cdef int32_t base, i
    cdef int32_t *o
    cdef unsigned char *d
    cdef int c
    if k.data.len + total > 0x7FFFFFFF:
        return -2
    if ((k.data.cap - k.data.len < total + 8 and buf_reserve(&k.data, total + 8) < 0)
            or (k.offsets.cap - k.offsets.len < 4 * ncols and buf_reserve(&k.offsets, 4 * ncols) < 0)):
        return -1
    # 8 bytes at a time (names has 8 bytes of room past its end; so has the data): a
    # row's names are a few words, which a memcpy call of a variable size costs more than
    d = k.data.data + k.data.len
    i = 0
    while i < total:
        memcpy(d + i, names + i, 8)
        i += 8
    base = <int32_t>k.data.len
    o = <int32_t *>(k.offsets.data + k.offsets.len)
    for c in range(ncols):
        o[c] = base + name_end[c + 1]
    k.data.len += total
    k.offsets.len += 4 * ncols
    k.length += ncols
    return 0


cdef inline int map_end_row(MapB *mb, bint valid) noexcept nogil:
    cdef int32_t end = <int32_t>(mb.keys.length if mb.keys != NULL else 0)
    if mb.offsets.len == 0 and map_begin(mb) < 0:
        return -1
    if buf_append(&mb.offsets, &end, 4) < 0 or bit_set(&mb.valid, mb.rows, valid) < 0:
        return -1
    mb.rows += 1
    return 0


cdef void map_truncate(MapB *mb, Py_ssize_t rows) noexcept nogil:
    """Drop rows >= rows, and the entries of a row begun but not ended."""
    cdef int32_t end = 0
    if rows > mb.rows:
        return
    if mb.offsets.len >= 4 * (rows + 1):
        memcpy(&end, mb.offsets.data + 4 * rows, 4)
        mb.offsets.len = 4 * (rows + 1)
    if mb.keys != NULL:
        col_truncate(mb.keys, end)
    if mb.values != NULL:
        col_truncate(mb.values, end)
    mb.valid.len = (rows + 7) >> 3
    mb.rows = rows


cdef int map_split(MapB *mb, Py_ssize_t n, MapB *t) noexcept nogil:
    """Move rows [n, rows) of mb into the empty MapB t."""
    cdef int32_t base, end
    if offsets_split(&mb.offsets, n, mb.rows, &t.offsets, &base, &end) < 0:
        return -1
    if mb.keys != NULL:
        t.keys = col_split(mb.keys, base)
        if t.keys == NULL:
            return -1
    if mb.values != NULL:
        t.values = col_split(mb.values, base)
        if t.values == NULL:
            return -1
    if bits_split(&mb.valid, n, mb.rows - n, &t.valid) < 0:
        return -1
    t.rows = mb.rows - n
    mb.rows = n
    return 0


cdef void map_free(MapB *mb) noexcept nogil:
    buf_free(&mb.offsets); buf_free(&mb.valid)
    col_free(mb.keys)
    col_free(mb.values)
    mb.keys = NULL
    mb.values = NULL
    mb.rows = 0


cdef object MAP_TYPE = pa.map_(pa.string(), pa.string())


cdef extern from *:
    """
    /* _strings_by_id's rows of short names (at most w = 16, 32 or 64 bytes, w bytes
       of room past the blob's end and the data's), none null: each a fixed w-byte copy
       and its end. In C for restrict: through Cython's pointers every store to the data
       or the ends could alias the starts and the ids, which were loaded again after
       each. */
    #define PGO_NAMES_LOOP(W) \
        for (i = 0; i < n; i++) { \
            int32_t s = st[ids[i]]; \
            memcpy(d + end, src + s, W); \
            end += st[ids[i] + 1] - s; \
            o[i + 1] = end; \
        }
    static int32_t pgo_names_fixed(const int32_t *restrict ids, Py_ssize_t n,
                                   const int32_t *restrict st, const char *restrict src,
                                   unsigned char *restrict d, int32_t *restrict o, int w) {
        int32_t end = 0;
        Py_ssize_t i;
        o[0] = 0;
        if (w <= 16) {
            PGO_NAMES_LOOP(16)
        } else if (w <= 32) {
            PGO_NAMES_LOOP(32)
        } else {
            PGO_NAMES_LOOP(64)
        }
        return end;
    }
    """
    int32_t pgo_names_fixed(const int32_t *ids, Py_ssize_t n, const int32_t *st,
                            const char *src, unsigned char *d, int32_t *o, int w) noexcept nogil


cdef struct NamesJob:                # _strings_by_id between its two parts under the GIL
    const int32_t *ids               # the rows' name ids (remapped.data once deduplicated)
    Py_ssize_t n                     # rows
    Py_ssize_t nids                  # the ids' range: the names given
    Py_ssize_t nv                    # names, each once
    const int32_t *st                # where each name starts in src (nv + 1 ends)
    const char *src                  # the names one after the other, 64 bytes of room after
    int32_t longest
    Buf starts, offs, data, valid, runs
    Buf remap                        # id -> its name's place among the nv (empty: the same)
    Buf remapped                     # the rows' ids through remap
    Py_ssize_t nulls
    int32_t end                      # the data's bytes
    int32_t bad                      # an id past the names (rc -3)
    int rc                           # 0; -1 no memory, -3 an id past the names, -4 past 2 GiB


cdef object _strings_by_id(list values, const int32_t *ids, Py_ssize_t n):
    """pa.string() array of values[ids[i]] for i < n (null where ids[i] < 0), written
    here, where pyarrow's take checks bounds and runs a kernel (it was about a tenth of
    a change-event table's decode). In three parts, so that the middle one can run on
    another thread (DecoderCore.export: the change-event table's names on the helper
    while this thread exports the typed tables): names_prep and names_wrap under the
    GIL, names_build without it."""
    cdef NamesJob j
    memset(&j, 0, sizeof(NamesJob))
    try:
        blob = names_prep(&j, values, ids, n)
        names_build(&j)
        return names_wrap(&j)
    finally:
        names_free(&j)


cdef object names_prep(NamesJob *j, list values, const int32_t *ids, Py_ssize_t n):
    """_strings_by_id's first part, into j (zeroed): equal names under different ids
    (one schema's relations) made one name (j.remap; names_build then maps the rows'
    ids, so that such rows are one run); the names encoded one after the other into a
    bytes object, returned (the caller keeps it until names_wrap: j.src points into it).
    Nothing here is done per row."""
    cdef Py_ssize_t nv = len(values), k
    cdef int32_t ln, end = 0, at = 0
    cdef int32_t *rm
    j.nids = nv
    uniq = dict.fromkeys(values)
    if len(uniq) < nv:
        for v in uniq:
            uniq[v] = at
            at += 1
        if buf_reserve(&j.remap, 4 * nv) < 0:
            raise MemoryError()
        rm = <int32_t *>j.remap.data
        for k in range(nv):
            rm[k] = uniq[values[k]]
        j.remap.len = 4 * nv
        values = list(uniq)
        nv = len(values)
    encoded = [v.encode("utf-8") for v in values]
    blob = b"".join(encoded) + bytes(64)       # (64 bytes past the last name: see below)
    if buf_reserve(&j.starts, 4 * (nv + 1)) < 0:
        raise MemoryError()
    for k in range(nv):
        memcpy(j.starts.data + 4 * k, &end, 4)
        ln = <int32_t>len(encoded[k])
        end += ln
        if ln > j.longest:
            j.longest = ln
    memcpy(j.starts.data + 4 * nv, &end, 4)
    j.ids = ids
    j.n = n
    j.nv = nv
    j.st = <const int32_t *>j.starts.data
    j.src = PyBytes_AS_STRING(blob)
    return blob


cdef void names_build(NamesJob *j) noexcept nogil:
    """_strings_by_id's middle part, on C data only: the offsets, data and validity of
    the rows' names into j (j.rc says whether it could). Names of at most 64 bytes (a
    schema's, a table's: PostgreSQL's identifiers are at most 63) in short runs are
    written row by row, a fixed copy of 16, 32 or 64 bytes each (the longest name's): a
    change-event table's rows alternate between the relations of small transactions,
    in runs of one to three. Otherwise a run of equal ids at a time."""
    cdef Py_ssize_t i, r, q, total = 0, nulls = 0, run, filled, step, jr, nruns = 0
    cdef Py_ssize_t n = j.n, nv = j.nv
    cdef int32_t k, ln, end = 0
    cdef const int32_t *ids = j.ids
    cdef const int32_t *st = j.st
    cdef const char *src = j.src
    cdef const Py_ssize_t *rs = NULL
    cdef const int32_t *rm
    cdef int32_t *w
    cdef unsigned char *d
    cdef int32_t *o
    if j.remap.len:
        # the ids of names given twice: their name's one place
        if buf_reserve(&j.remapped, 4 * n + 4) < 0:
            j.rc = -1
            return
        rm = <const int32_t *>j.remap.data
        w = <int32_t *>j.remapped.data
        for i in range(n):
            k = ids[i]
            if k >= j.nids:
                j.bad = k
                j.rc = -3
                return
            w[i] = rm[k] if k >= 0 else k
        j.remapped.len = 4 * n
        ids = w
    # (row by row when the names are short and their runs too: fewer than 4 rows a
    # run on average; a long run is written faster doubled, by copies)
    cdef bint short_names = j.longest <= 64
    if short_names and n:
        q = 1
        for i in range(1, n):
            q += ids[i] != ids[i - 1]
        short_names = 4 * q > n
    if short_names:
        for i in range(n):
            k = ids[i]
            if k < 0:
                nulls += 1
            elif k >= nv:
                j.bad = k
                j.rc = -3
                return
            else:
                total += st[k + 1] - st[k]
    else:
        # the runs of rows with one name: where each starts, then n
        i = 0
        while i < n:
            k = ids[i]
            r = i + 1
            while r < n and ids[r] == k:
                r += 1
            if buf_append8(&j.runs, &i) < 0:
                j.rc = -1
                return
            if k < 0:
                nulls += r - i
            elif k >= nv:
                j.bad = k
                j.rc = -3
                return
            else:
                total += <Py_ssize_t>(st[k + 1] - st[k]) * (r - i)
            i = r
        if buf_append8(&j.runs, &n) < 0:
            j.rc = -1
            return
        rs = <const Py_ssize_t *>j.runs.data
        nruns = (j.runs.len >> 3) - 1
    if total > 0x7FFFFFFF:
        j.rc = -4
        return
    if (buf_reserve_exact(&j.offs, 4 * (n + 1)) < 0 or buf_reserve_exact(&j.data, total + 64) < 0
            or (nulls and buf_reserve_exact(&j.valid, (n + 7) >> 3) < 0)):
        j.rc = -1
        return
    if nulls:
        memset(j.valid.data, 0, <size_t>((n + 7) >> 3))
    o = <int32_t *>j.offs.data
    d = j.data.data
    o[0] = 0
    if short_names and not nulls:
        end = pgo_names_fixed(ids, n, st, src, d, o, j.longest)
    elif short_names:
        # (with nulls: each name's own length)
        for i in range(n):
            k = ids[i]
            if k >= 0:
                memcpy(d + end, src + st[k], <size_t>(st[k + 1] - st[k]))
                end += st[k + 1] - st[k]
                j.valid.data[i >> 3] |= <unsigned char>(1 << (i & 7))
            o[i + 1] = end
    for jr in range(nruns):
        # a run: the name once, then the run's bytes doubled by copies of what is
        # written (memory speed, not a store per row), the ends a progression
        i = rs[jr]
        r = rs[jr + 1]
        k = ids[i]
        if k < 0:
            for q in range(i, r):
                o[q + 1] = end
            continue
        ln = st[k + 1] - st[k]
        run = <Py_ssize_t>ln * (r - i)
        if ln:
            memcpy(d + end, src + st[k], <size_t>ln)
            filled = ln
            while filled < run:
                step = filled if filled <= run - filled else run - filled
                memcpy(d + end + filled, d + end, <size_t>step)
                filled += step
        for q in range(i, r):
            end += ln
            o[q + 1] = end
        if nulls:
            for q in range(i, r):
                j.valid.data[q >> 3] |= <unsigned char>(1 << (q & 7))
    j.offs.len = 4 * (n + 1)
    j.data.len = end
    j.valid.len = (n + 7) >> 3 if nulls else 0
    j.nulls = nulls
    j.end = end


cdef Py_ssize_t g_export_beside_rows = 16384   # event rows past which export() writes
                                               # their names on a helper (tests: set 1)


def _set_export_beside_rows(Py_ssize_t rows):
    """Tests: the committed event rows from which export() writes the event table's
    names on a helper thread; returns the old setting."""
    global g_export_beside_rows
    old = g_export_beside_rows
    g_export_beside_rows = rows
    return old


cdef void export_names_run(void *arg) noexcept nogil:
    """The helper's job in DecoderCore.export: names_build of two NamesJobs."""
    cdef NamesJob **jobs = <NamesJob **>arg
    names_build(jobs[0])
    names_build(jobs[1])


cdef object names_wrap(NamesJob *j):
    """_strings_by_id's last part: the array names_build wrote (its buffers handed over),
    or what stopped it, raised."""
    if j.rc == -1:
        raise MemoryError()
    if j.rc == -3:
        raise ValueError(f"name id {j.bad} out of range ({j.nids} names)")
    if j.rc == -4:
        raise DecodeError("the change-event table holds more than 2 GiB of names in one "
                          "batch; feed smaller batches", None, None)
    return _pa_from_buffers(pa.string(), j.n, [_take_buf(&j.valid, j.valid.len) if j.nulls else None,
                                               _take_buf(&j.offs, j.offs.len), _take_buf(&j.data, j.end)],
                            j.nulls)


cdef void names_free(NamesJob *j) noexcept nogil:
    buf_free(&j.starts); buf_free(&j.offs); buf_free(&j.data); buf_free(&j.valid)
    buf_free(&j.runs); buf_free(&j.remap); buf_free(&j.remapped)


cdef object _kind_strings(const unsigned char *kinds, Py_ssize_t n):
    """pa.string() of each row's old-image kind: "K" or "O" (the byte), null for 0.
    Two passes over the kinds (their count, then the strings), no temporaries."""
    cdef Buf offs, data, valid
    cdef Py_ssize_t i, nulls = 0, kept = 0
    cdef int32_t end = 0
    cdef int32_t *o
    cdef unsigned char c, bits = 0
    memset(&offs, 0, sizeof(Buf)); memset(&data, 0, sizeof(Buf)); memset(&valid, 0, sizeof(Buf))
    # the data's exact size first: a block the size of every row would be trimmed to the
    # kinds' bytes at hand-over and be too small for the next batch's reservation, which
    # would then fault in a fresh one each time
    for i in range(n):
        kept += kinds[i] == TUPLE_KEY or kinds[i] == TUPLE_OLD
    try:
        if (buf_reserve_exact(&offs, 4 * (n + 1)) < 0 or buf_reserve_exact(&data, kept + 1) < 0
                or buf_reserve_exact(&valid, ((n + 7) >> 3) + 1) < 0):
            raise MemoryError()
        o = <int32_t *>offs.data
        o[0] = 0
        for i in range(n):
            c = kinds[i]
            if c == TUPLE_KEY or c == TUPLE_OLD:
                data.data[end] = c
                end += 1
                bits |= <unsigned char>(1 << (i & 7))
            else:
                nulls += 1
            o[i + 1] = end
            if (i & 7) == 7:
                valid.data[i >> 3] = bits
                bits = 0
        if n & 7:
            valid.data[n >> 3] = bits
        offs.len = 4 * (n + 1)
        data.len = end
        valid.len = (n + 7) >> 3
        return _pa_from_buffers(pa.string(), n, [_take_buf(&valid, (n + 7) >> 3) if nulls else None,
                                                      _take_buf(&offs, 4 * (n + 1)), _take_buf(&data, end)],
                                     nulls)
    finally:
        buf_free(&offs); buf_free(&data); buf_free(&valid)


cdef object _strings_by_id_np(list values, object ids):
    """_strings_by_id over an int32 numpy array."""
    cdef const int32_t[::1] v = np.ascontiguousarray(ids, np.int32)
    if v.shape[0] == 0:
        return _pa_strings([])
    return _strings_by_id(values, &v[0], v.shape[0])


cdef object map_export(MapB *mb):
    cdef Py_ssize_t n = mb.rows
    if map_begin(mb) < 0:
        raise MemoryError()
    keys = col_export(mb.keys, pa.string())
    values = col_export(mb.values, pa.string())
    entries = pa.StructArray.from_arrays([keys, values], fields=[MAP_TYPE.key_field, MAP_TYPE.item_field])
    nulls = _popcount_zero_bits(&mb.valid, n) if mb.valid.len >= (n + 7) >> 3 else -1
    if nulls < 0:
        raise AssertionError("map validity shorter than its rows")
    validity = _take_buf(&mb.valid, (n + 7) >> 3) if nulls else None
    mb.valid.len = 0                      # (kept for the next rows when not handed over)
    offsets = _take_buf(&mb.offsets, 4 * (n + 1))
    mb.rows = 0
    return _pa_from_buffers(MAP_TYPE, n, [validity, offsets], nulls, children=[entries])


# -- the change-event table's buffers ----------------------------------------------
