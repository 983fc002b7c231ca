# Typed column builders per relation version (RelBuilders): new image, old image
# (_before), metadata; the transaction watermark (commit / rollback / cut / adopt) and
# the export to an Arrow table, with the _spread* helpers that place the sparse _before
# rows of a table.

# -- per relation version: typed builders ------------------------------------------

cdef Py_ssize_t col_nbytes(const Column *c) noexcept nogil:
    """Bytes a column's rows hold (its element column's too)."""
    cdef Py_ssize_t n = 0
    while c != NULL:
        n += c.data.len + c.offsets.len + c.validity.len + c.toast.len
        c = c.child
    return n


# The sizes a relation's builders were last handed over with, process-wide (the typed
# tables' counterpart of _ev_hint): a new Decoder starts each buffer of a relation's
# builders at them (Buf.hint) instead of growing it from 64 bytes through copies into
# ever larger blocks. A process decodes batch after batch, often with a new Decoder
# each (a Spark task per segment group, decode_parallel's pieces); growing every buffer
# again cost 8-15 % of a typed decode of small transactions against a Decoder kept
# from batch to batch. Keyed by relid and column count, one relation per slot (a
# relation that lands on a taken slot replaces it): a hint is only a first growth
# target, so a stale or foreign one costs a block size, never a wrong row. The sizes
# are kept with the bytes of the feed that wrote them, and a smaller feed asks for its
# share (the pieces of decode_parallel, which alternate with whole-stream Decoders in a
# benchmark, took the whole stream's blocks and left each other to grow). Read and
# written with the GIL held (RelBuilders are made and exported under it).
DEF REL_HINT_SLOTS = 256
DEF REL_HINT_FIXED = 9               # the metadata's 7 buffers, before_rows, before_kind


cdef struct RelHint:
    uint32_t relid
    int ncols
    Py_ssize_t *sizes                    # REL_HINT_FIXED + 6 * ncols (rel_hint_bufs' order)
    Py_ssize_t *feeds                    # each size's feed: the bytes of the feed whose rows
                                         # it held (0: unknown). Per size: one a feed leaves
                                         # as it was goes with the feed that wrote it


cdef RelHint _rel_hint[REL_HINT_SLOTS]


cdef int rel_hint_bufs(Meta *m, Buf *before_rows, Buf *before_kind, Column **cols,
                       Column **before, int ncols, Buf **out) noexcept nogil:
    """A relation's builder buffers in rel_hint's order (NULL where `before` is not
    made yet); returns how many."""
    cdef int i, at = REL_HINT_FIXED
    out[0] = &m.lsn; out[1] = &m.commit_lsn; out[2] = &m.commit_ts; out[3] = &m.xid
    out[4] = &m.seq; out[5] = &m.op; out[6] = &m.origin
    out[7] = before_rows; out[8] = before_kind
    for i in range(ncols):
        out[at] = &cols[i].data; out[at + 1] = &cols[i].offsets; out[at + 2] = &cols[i].validity
        at += 3
    for i in range(ncols):
        if before != NULL:
            out[at] = &before[i].data; out[at + 1] = &before[i].offsets
            out[at + 2] = &before[i].validity
        else:
            out[at] = out[at + 1] = out[at + 2] = NULL
        at += 3
    return at


cdef const RelHint *rel_hint_find(uint32_t relid, int ncols) noexcept nogil:
    cdef RelHint *h = &_rel_hint[relid % REL_HINT_SLOTS]
    if not g_size_hints or h.sizes == NULL or h.relid != relid or h.ncols != ncols:
        return NULL
    return h


cdef void rel_hint_apply(Buf **bufs, int n, int lo, const RelHint *h,
                         Py_ssize_t feed_bytes) noexcept nogil:
    """Start the empty buffers bufs[lo..n) (those without a hint) at the sizes kept,
    scaled from the feed they were kept from to a feed of feed_bytes (hint_scale)."""
    cdef int i
    cdef Py_ssize_t size
    for i in range(lo, n):
        if bufs[i] != NULL and bufs[i].hint == 0:
            size = <Py_ssize_t>(<double>h.sizes[i] * hint_scale(feed_bytes, h.feeds[i]))
            if size >= 4096:                     # (smaller: the usual growth is as good)
                bufs[i].hint = size


cdef void rel_hint_keep(uint32_t relid, int ncols, Buf **bufs, int n,
                        Py_ssize_t feed_bytes) noexcept nogil:
    """Remember a relation's hand-over sizes (Buf.last, as ev_hints_keep) for the next
    Decoder."""
    cdef RelHint *h = &_rel_hint[relid % REL_HINT_SLOTS]
    cdef Py_ssize_t *sizes
    cdef int i
    if h.sizes == NULL or h.relid != relid or h.ncols != ncols:
        sizes = <Py_ssize_t *>calloc(<size_t>(2 * n), sizeof(Py_ssize_t))
        if sizes == NULL:
            return                           # (only a hint)
        free(h.sizes)
        h.sizes = sizes
        h.feeds = sizes + n
        h.relid = relid
        h.ncols = ncols
    for i in range(n):
        if bufs[i] != NULL and bufs[i].last >= 4096:   # (as ev_hints_keep)
            h.sizes[i] = bufs[i].last
            h.feeds[i] = feed_bytes

def _kept_sizes(uint32_t relid, int ncols):
    """The sizes kept for a relation's next Decoder, as (size, feed bytes) pairs in
    rel_hint_bufs' order (the metadata's 7 buffers, before_rows, before_kind, then data,
    offsets and validity of each column, then of each old-image column); None if none
    are kept (for tests)."""
    cdef RelHint *h = &_rel_hint[relid % REL_HINT_SLOTS]
    if h.sizes == NULL or h.relid != relid or h.ncols != ncols:
        return None
    return [(h.sizes[i], h.feeds[i]) for i in range(REL_HINT_FIXED + 6 * ncols)]


_META_COLUMNS = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin")


@cython.final
cdef class RelBuilders:
    """Typed column builders of one relation version (new image, old image, metadata)."""
    cdef readonly object version       # catalog.RelationVersion
    cdef readonly int id
    cdef uint32_t relid
    cdef int ncols
    cdef Column **cols                 # new image (old image for deletes)
    cdef Column **before               # old images, dense over rows that have one
    cdef Buf before_rows               # int32: main row index of each old image
    cdef Buf before_kind               # 1 byte per old image: K / O
    cdef Py_ssize_t nbefore
    cdef int32_t *name_ids
    cdef unsigned char *names          # the columns' names, UTF-8, end to end (+ 8 zero bytes)
    cdef int32_t *name_end             # ncols + 1: names[name_end[i]:name_end[i + 1]] is column i's
    cdef FmtMemo *fmemo                # per column: the change-event table's date / hour text
    cdef FmtMemo *fmemo_own            # the same, for the calling thread's share of a window's
                                       # events while the helper writes the rest with fmemo
                                       # (a memo is rewritten as it is read: one per thread)
    cdef unsigned char *is_key
    cdef unsigned char *any_binary_committed   # per column: a committed 'b' value (unknown types)
    cdef int32_t *ctype                # per column: kind, precision, scale, elem_kind (C copy)
    cdef Meta meta
    cdef Py_ssize_t committed          # rows of committed transactions
    cdef Py_ssize_t committed_before
    cdef list specials                 # [(row, col, is_before, format, bytes)]
    cdef object col_types
    cdef bint dirty                    # touched by the open transaction
    cdef bint fixed_types              # every column's Arrow type is known up front (none
                                       # waits on whether a value comes in binary)
    cdef Py_ssize_t hint_feed          # the bytes of the feed whose size hints they took
    cdef bint hinted                   # they took the process's size hints (hints_take)
    cdef tuple exp_types               # the typed columns' Arrow types at the last export,
    cdef list exp_struct_fields        # and what they make: _before's fields and type,
    cdef object exp_struct             # and the table's schema (each export built them
    cdef object exp_schema             # anew: a fixed cost of every feed)
    cdef tuple exp_tail                # the other columns' types at the last export

    def __dealloc__(self):
        cdef int i
        if self.cols != NULL:
            for i in range(self.ncols):
                col_free(self.cols[i])
            free(self.cols)
        if self.before != NULL:
            for i in range(self.ncols):
                col_free(self.before[i])
            free(self.before)
        free(self.name_ids)
        free(self.names)
        free(self.name_end)
        free(self.fmemo)
        free(self.is_key)
        free(self.any_binary_committed)
        free(self.ctype)
        buf_free(&self.before_rows)
        buf_free(&self.before_kind)
        meta_free(&self.meta)

    cdef Column **_alloc_cols(self) except NULL:
        cdef Column **cols = <Column **>malloc(sizeof(Column *) * (self.ncols if self.ncols else 1))
        cdef int i
        if cols == NULL:
            raise MemoryError()
        for i in range(self.ncols):
            ct = self.col_types[i]
            cols[i] = column_for_type(ct.kind, ct.precision, ct.scale, ct.elem_kind,
                                      ct.elem_precision, ct.elem_scale)
            if cols[i] == NULL:
                raise MemoryError()
        return cols

    cdef int init(self, object version, int rb_id, list name_ids) except -1:
        cdef int i
        cdef bytes blob
        self.version = version
        self.id = rb_id
        self.relid = version.relid
        self.col_types = version.column_types
        self.ncols = len(version.columns)
        encoded = [c.name.encode("utf-8") for c in version.columns]
        blob = b"".join(encoded)
        if len(blob) > 0x7FFFFFFF:
            raise ValueError("column names longer than 2 GiB")
        self.name_ids = <int32_t *>malloc(sizeof(int32_t) * (self.ncols + 1))
        self.names = <unsigned char *>calloc(len(blob) + 8, 1)
        self.name_end = <int32_t *>malloc(sizeof(int32_t) * (self.ncols + 1))
        self.fmemo = <FmtMemo *>malloc(sizeof(FmtMemo) * 2 * (self.ncols + 1))
        self.fmemo_own = self.fmemo + self.ncols + 1 if self.fmemo != NULL else NULL
        self.is_key = <unsigned char *>malloc(self.ncols + 1)
        self.any_binary_committed = <unsigned char *>calloc(self.ncols + 1, 1)
        self.ctype = <int32_t *>calloc(4 * self.ncols + 4, sizeof(int32_t))
        if (self.name_ids == NULL or self.names == NULL or self.name_end == NULL or self.fmemo == NULL
                or self.is_key == NULL or self.any_binary_committed == NULL or self.ctype == NULL):
            raise MemoryError()
        if len(blob):
            memcpy(self.names, PyBytes_AS_STRING(blob), len(blob))
        self.name_end[0] = 0
        for i in range(self.ncols):
            self.name_end[i + 1] = self.name_end[i] + <int32_t>len(encoded[i])
            fmt_memo_init(&self.fmemo[i])
            fmt_memo_init(&self.fmemo_own[i])
        for i in range(self.ncols):
            ct = self.col_types[i]
            self.ctype[4 * i] = ct.kind
            self.ctype[4 * i + 1] = ct.precision
            self.ctype[4 * i + 2] = ct.scale
            self.ctype[4 * i + 3] = ct.elem_kind
            self.name_ids[i] = name_ids[i]
            self.is_key[i] = version.columns[i].flags & 1
        self.cols = self._alloc_cols()
        self.specials = []
        self.fixed_types = all(ct.arrow_type(False) == ct.arrow_type(True) for ct in self.col_types)
        return 0

    cdef RelBuilders side_copy(self):
        """Empty builders of the same relation version and id, for the typed rows a
        streamed or prepared transaction writes on arrival (Spool.tb): dirty from the
        start, so that no commit or rollback of the decoder's own builders touches them."""
        cdef RelBuilders rb = RelBuilders.__new__(RelBuilders)
        rb.init(self.version, self.id, [self.name_ids[i] for i in range(self.ncols)])
        rb.dirty = True
        return rb

    cdef Py_ssize_t nbytes(self) noexcept:
        """Bytes the rows hold (what counts against max_pending_bytes)."""
        cdef Py_ssize_t n = meta_nbytes(&self.meta) + self.before_rows.len + self.before_kind.len
        cdef int i
        for i in range(self.ncols):
            n += col_nbytes(self.cols[i])
            if self.before != NULL:
                n += col_nbytes(self.before[i])
        return n

    cdef void cut(self, Py_ssize_t rows) noexcept:
        """Keep the first `rows` rows (their old images, specials and metadata)."""
        cdef const int32_t *at = <const int32_t *>self.before_rows.data
        cdef Py_ssize_t nb = self.nbefore
        cdef int i
        while nb > 0 and at[nb - 1] >= rows:
            nb -= 1
        self.committed = rows
        self.committed_before = nb
        self.rollback()
        self.dirty = True
        if rows == 0:
            # (empty: no TOAST marks left, so the next rows may take the column pass)
            for i in range(self.ncols):
                self.cols[i].any_toast = False
                self.cols[i].toast.len = 0
                if self.before != NULL:
                    self.before[i].any_toast = False
                    self.before[i].toast.len = 0

    cdef int adopt(self, RelBuilders src, const Ctx *ctx) noexcept:
        """Append src's rows (builders of the same relation version: Spool.tb) with ctx's
        commit LSN, commit time, xid and origin (their lsn, seq and values as written),
        but not its specials (the caller's: a Python list). 0; -1 no memory (or no old
        image columns: ensure_before first), -2 past int32 offsets: then the caller rolls
        these builders back (they held only committed rows)."""
        cdef Py_ssize_t n = src.meta.rows, base = self.meta.rows, r, nb = src.nbefore
        cdef Meta *m = &self.meta
        cdef int32_t *rows
        cdef int i, rc
        if n == 0:
            return 0
        for i in range(self.ncols):
            rc = col_append(self.cols[i], src.cols[i])
            if rc < 0:
                return rc
        if nb:
            if self.before == NULL:
                return -1                    # (the caller's ensure_before)
            for i in range(self.ncols):
                rc = col_append(self.before[i], src.before[i])
                if rc < 0:
                    return rc
            if buf_reserve(&self.before_rows, 4 * nb) < 0 or buf_append(
                    &self.before_kind, src.before_kind.data, nb) < 0:
                return -1
            rows = <int32_t *>(self.before_rows.data + self.before_rows.len)
            memcpy(rows, src.before_rows.data, <size_t>(4 * nb))
            for r in range(nb):
                rows[r] += <int32_t>base
            self.before_rows.len += 4 * nb
            self.nbefore += nb
        if meta_reserve(m, n) < 0:
            return -1
        meta_put_kept(m, &src.meta, n, ctx)
        return 0

    cdef int ensure_before(self) except -1:
        if self.before == NULL:
            self.before = self._alloc_cols()
            if self.hinted:
                self._hints_apply(True)
        return 0

    cdef void hints_take(self, Py_ssize_t feed_bytes) noexcept:
        """Start the empty buffers at the sizes this relation's builders were last
        handed over with in this process, scaled from the bytes of the feed that wrote
        them to feed_bytes (the first feed these builders write)."""
        self.hint_feed = feed_bytes
        self.hinted = True
        self._hints_apply(False)

    cdef void _hints_apply(self, bint before) noexcept:
        """hints_take's sizes, for the old images' buffers only when `before`."""
        cdef Buf **bufs
        cdef const RelHint *h = rel_hint_find(self.relid, self.ncols)
        cdef int n
        if h == NULL:
            return
        bufs = <Buf **>malloc(sizeof(Buf *) * (REL_HINT_FIXED + 6 * self.ncols))
        if bufs == NULL:
            return                               # (only a hint)
        n = rel_hint_bufs(&self.meta, &self.before_rows, &self.before_kind, self.cols,
                          self.before, self.ncols, bufs)
        rel_hint_apply(bufs, n, REL_HINT_FIXED + 3 * self.ncols if before else 0, h,
                       self.hint_feed)
        free(bufs)

    cdef void _hints_keep(self, Py_ssize_t feed_bytes) noexcept:
        """Remember the hand-over sizes of this relation's buffers for the next Decoder,
        with the bytes of the feed they were written by."""
        cdef Buf **bufs = <Buf **>malloc(sizeof(Buf *) * (REL_HINT_FIXED + 6 * self.ncols))
        cdef int n
        if bufs == NULL:
            return
        n = rel_hint_bufs(&self.meta, &self.before_rows, &self.before_kind, self.cols,
                          self.before, self.ncols, bufs)
        rel_hint_keep(self.relid, self.ncols, bufs, n, feed_bytes)
        free(bufs)

    cdef void truncate(self, Py_ssize_t rows, Py_ssize_t nbefore) noexcept:
        """Keep the first `rows` rows and `nbefore` old images (their specials and
        metadata); the committed marks and the columns' flags stay as they are."""
        cdef int i
        for i in range(self.ncols):
            col_truncate(self.cols[i], rows)
        if self.before != NULL:
            for i in range(self.ncols):
                col_truncate(self.before[i], nbefore)
        self.before_rows.len = 4 * nbefore
        self.before_kind.len = nbefore
        self.nbefore = nbefore
        meta_truncate(&self.meta, rows)
        # specials are appended in row order (old-image ones at their main row)
        while self.specials and self.specials[len(self.specials) - 1][0] >= rows:
            self.specials.pop()

    cdef void rollback(self) noexcept:
        cdef int i
        self.truncate(self.committed, self.committed_before)
        for i in range(self.ncols):
            # the columns' flags cover only the rows since the last commit
            self.cols[i].any_binary = False
            if self.before != NULL:
                self.before[i].any_binary = False
        self.dirty = False

    cdef void commit(self) noexcept:
        cdef int i
        self.committed = self.meta.rows
        self.committed_before = self.nbefore
        for i in range(self.ncols):
            if self.cols[i].any_binary or (self.before != NULL and self.before[i].any_binary):
                self.any_binary_committed[i] = 1
            # from here the columns' flags cover only the rows of the next transaction, so
            # an export that splits off an open transaction carries only its own flags
            self.cols[i].any_binary = False
            if self.before != NULL:
                self.before[i].any_binary = False
        self.dirty = False

    cdef object export(self, DecoderCore core):
        """pa.Table of the committed rows; the rows of a transaction still open stay."""
        cdef Column **tail = NULL
        cdef Column **tail_before = NULL
        cdef Meta tail_meta
        cdef Buf tail_rows, tail_kind
        cdef int32_t *rowp
        cdef Py_ssize_t keep = self.meta.rows - self.committed
        cdef Py_ssize_t keep_before = self.nbefore - self.committed_before
        cdef Py_ssize_t j
        cdef int i
        if keep == 0:
            return self._export(core)
        memset(&tail_meta, 0, sizeof(Meta))
        memset(&tail_rows, 0, sizeof(Buf))
        memset(&tail_kind, 0, sizeof(Buf))
        tail = <Column **>calloc(self.ncols + 1, sizeof(Column *))
        if tail == NULL:
            raise MemoryError()
        try:
            for i in range(self.ncols):
                tail[i] = col_split(self.cols[i], self.committed)
                if tail[i] == NULL:
                    raise MemoryError()
            if self.before != NULL:
                tail_before = <Column **>calloc(self.ncols + 1, sizeof(Column *))
                if tail_before == NULL:
                    raise MemoryError()
                for i in range(self.ncols):
                    tail_before[i] = col_split(self.before[i], self.committed_before)
                    if tail_before[i] == NULL:
                        raise MemoryError()
            if (meta_split(&self.meta, self.committed, &tail_meta) < 0
                    or buf_split(&self.before_rows, 4 * self.committed_before, &tail_rows) < 0
                    or buf_split(&self.before_kind, self.committed_before, &tail_kind) < 0):
                raise MemoryError()
        except BaseException:
            for i in range(self.ncols):
                col_free(tail[i])
                if tail_before != NULL:
                    col_free(tail_before[i])
            free(tail)
            free(tail_before)
            meta_free(&tail_meta)
            buf_free(&tail_rows)
            buf_free(&tail_kind)
            raise
        rowp = <int32_t *>tail_rows.data
        for j in range(keep_before):
            rowp[j] -= <int32_t>self.committed
        tail_specials = [(s[0] - self.committed,) + s[1:] for s in self.specials if s[0] >= self.committed]
        self.specials = [s for s in self.specials if s[0] < self.committed]
        self.nbefore = self.committed_before
        table = self._export(core)
        # the open transaction's rows become the whole content of the builders
        for i in range(self.ncols):
            col_free(self.cols[i])
            self.cols[i] = tail[i]
        free(tail)
        if tail_before != NULL:
            for i in range(self.ncols):
                col_free(self.before[i])
                self.before[i] = tail_before[i]
            free(tail_before)
        meta_free(&self.meta)
        self.meta = tail_meta
        buf_free(&self.before_rows)
        self.before_rows = tail_rows
        buf_free(&self.before_kind)
        self.before_kind = tail_kind
        self.nbefore = keep_before
        self.specials = tail_specials
        return table

    cdef object _export(self, DecoderCore core):
        """pa.Table of all rows (all committed); builders are left empty."""
        cdef Py_ssize_t n = self.meta.rows
        cdef int i
        cdef list names = None               # (the catalog's names: only when needed)
        cdef list arrays = []
        cdef list fields = []
        binary_unknown = core.binary_unknown
        toast_masks = []
        special = export_specials_column(core, self, n)
        meta = meta_export(&self.meta, core.origins, "_")
        for key in _META_COLUMNS:
            arrays.append(meta[key])
        types = []
        for i in range(self.ncols):
            mask = col_export_toast_mask(self.cols[i])
            if mask is not None:
                toast_masks.append((i, mask))
            t = self.col_types[i].arrow_type(binary_unknown or self.any_binary_committed[i])
            self.any_binary_committed[i] = 0
            if self.before != NULL:
                self.before[i].any_binary = False
            arr = col_export(self.cols[i], t)
            arrays.append(arr)
            types.append(arr.type)
        # the schema is a function of the typed columns' types (every other column's
        # type is fixed): the last export's, when they are the same
        key_types = tuple(types)
        if self.exp_types is None or self.exp_types != key_types:
            self.exp_types = key_types
            names = list(self.version.column_names)
            self.exp_struct_fields = [pa.field(names[i], types[i]) for i in range(self.ncols)]
            self.exp_struct = pa.struct(self.exp_struct_fields)
            self.exp_schema = None
        # _before: struct of the typed fields, null where no old tuple was sent
        struct_fields = self.exp_struct_fields
        m = self.nbefore
        if self.before != NULL and m:
            rows_buf = _take_buf(&self.before_rows, 4 * m)     # row index of each old image
            kinds = _take_buf(&self.before_kind, m)
            rows = <const int32_t *><size_t>rows_buf.address
            if _rows_ascending(rows, m, n) and _spreadable(self.before, self.ncols, m):
                # each column's old values straight from its buffers to their rows
                children = [_spread_column(self.before[i], self.exp_types[i], rows, m, n)
                            for i in range(self.ncols)]
                before = _spread_struct(self.exp_struct, children, rows, m, n)
                before_kind = _spread_kinds(kinds, rows, m, n)
            else:                        # (rows out of order: a dense struct, then a take)
                children = []
                for i in range(self.ncols):
                    child = col_export(self.before[i], struct_fields[i].type)
                    if child.type != struct_fields[i].type:      # (a cast imports pyarrow.compute)
                        child = child.cast(struct_fields[i].type)
                    children.append(child)
                dense = pa.StructArray.from_arrays(children, fields=struct_fields) if self.ncols else \
                    _pa_from_buffers(pa.struct([]), m, [None], children=[])
                idx = np.full(n, -1, dtype=np.int32)
                idx[np.frombuffer(rows_buf, np.int32)] = np.arange(m, dtype=np.int32)
                before = dense.take(_pa_from_np(idx, pa.int32(), idx < 0))
                kind_idx = np.full(n, -1, dtype=np.int32)
                kind_idx[np.frombuffer(rows_buf, np.int32)] = (
                    np.frombuffer(kinds, np.uint8) == 79).astype(np.int32)  # 0 = K, 1 = O
                before_kind = _pa_strings(["K", "O"]).take(
                    _pa_from_np(kind_idx, pa.int32(), kind_idx < 0))
        else:
            if self.before != NULL:
                for i in range(self.ncols):
                    col_truncate(self.before[i], 0)
            before = _null_array(self.exp_struct, n)
            before_kind = _null_array(pa.string(), n)
        self.nbefore = 0
        self.before_rows.len = 0
        self.before_kind.len = 0
        arrays.append(before)
        arrays.append(before_kind)
        if toast_masks and names is None:
            names = list(self.version.column_names)
        toast = _toast_lists(n, toast_masks, names)
        arrays.append(toast)
        arrays.append(special)
        self.specials = []
        self.committed = 0
        self.committed_before = 0
        self._hints_keep(core.feed_bytes)
        # (the columns besides the typed ones: meta_export types the other six itself)
        tail = (meta["_origin"].type, before.type, before_kind.type, toast.type, special.type)
        if self.exp_schema is None or self.exp_tail != tail:
            self.exp_tail = tail
            for key in _META_COLUMNS:
                fields.append(pa.field(key, meta[key].type, nullable=(key in ("_lsn", "_origin"))))
            fields.extend(struct_fields)
            fields.append(pa.field("_before", before.type))
            fields.append(pa.field("_before_kind", before_kind.type))
            fields.append(pa.field("_unchanged_toast", toast.type))
            fields.append(pa.field("_special", special.type))
            v = self.version
            md = {b"pgoutput_fast.relid": str(v.relid).encode(),
                  b"pgoutput_fast.version": str(v.version).encode(),
                  b"pgoutput_fast.from_lsn": str(v.from_lsn).encode(),
                  b"pgoutput_fast.key_columns": ",".join(v.key_columns).encode("utf-8", "surrogateescape"),
                  b"pgoutput_fast.replident": v.replident.encode()}
            self.exp_schema = pa.schema(fields, metadata=md)
        return pa.Table.from_arrays(arrays, schema=self.exp_schema)


# -- _before: the dense old images spread over all rows ------------------------------
# An old image is kept for the rows that have one only (m of n, rows ascending); the
# table's _before is n rows long, null elsewhere. Spreading the dense children's Arrow
# buffers here (offsets rebuilt, var-len bytes and list children shared as they are)
# costs a pass over n rows and writes into blocks of the buffer cache, where Arrow's
# take would gather through an index array into fresh memory.

cdef int _spread_validity(Buf *out, const unsigned char *src_valid, const int32_t *rows,
                          Py_ssize_t m, Py_ssize_t n, Py_ssize_t *valid_count) noexcept nogil:
    """n-bit bitmap: bit rows[j] = (dense row j is valid). 0, or -1 out of memory."""
    cdef Py_ssize_t nbytes = (n + 7) >> 3, j, r, count = 0
    out.len = 0
    if buf_reserve(out, nbytes) < 0:
        return -1
    memset(out.data, 0, <size_t>nbytes)
    out.len = nbytes
    for j in range(m):
        if src_valid == NULL or (src_valid[j >> 3] >> (j & 7)) & 1:
            r = rows[j]
            out.data[r >> 3] |= <unsigned char>(1 << (r & 7))
            count += 1
    valid_count[0] = count
    return 0


DEF SPREAD_NOGIL_ROWS = 1 << 16     # a spread of this many rows lets go of the GIL


cdef void _spread_offsets(int32_t *off, const int32_t *src_off, const int32_t *rows,
                          Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    """n + 1 offsets: row rows[j] spans dense row j's bytes, every other row none.
    (Written a run of rows at a time, each run one value: a fill the compiler
    vectorises, where a test per row cost ten instructions a row.)"""
    cdef Py_ssize_t r, j, r0 = 0
    cdef int32_t cur = src_off[0]
    for j in range(m):
        # rows r0 .. rows[j] start where dense row j does; the next one after its bytes
        for r in range(r0, rows[j] + 1):
            off[r] = cur
        cur = src_off[j + 1]
        r0 = rows[j] + 1
    for r in range(r0, n + 1):
        off[r] = cur


cdef void _spread_fixed(unsigned char *out, const unsigned char *src, const int32_t *rows,
                        Py_ssize_t m, Py_ssize_t n, Py_ssize_t w) noexcept nogil:
    """n values of w bytes: dense value j at row rows[j], zeros elsewhere."""
    cdef Py_ssize_t j
    memset(out, 0, <size_t>(n * w))
    if w == 8:
        for j in range(m):
            memcpy(out + <Py_ssize_t>rows[j] * 8, src + j * 8, 8)
    elif w == 4:
        for j in range(m):
            memcpy(out + <Py_ssize_t>rows[j] * 4, src + j * 4, 4)
    elif w == 16:
        for j in range(m):
            memcpy(out + <Py_ssize_t>rows[j] * 16, src + j * 16, 16)
    else:
        for j in range(m):
            memcpy(out + <Py_ssize_t>rows[j] * w, src + j * w, <size_t>w)


cdef int _bits_extend(Buf *b, Py_ssize_t nbytes) noexcept nogil:
    """A bitmap Buf at least nbytes long, the bytes added zero (a bitmap ends where its
    last bit set is: the bits past it are zeros not yet written). -1: no memory."""
    if b.len >= nbytes:
        return 0
    if buf_reserve(b, nbytes - b.len) < 0:
        return -1
    memset(b.data + b.len, 0, <size_t>(nbytes - b.len))
    b.len = nbytes
    return 0


cdef inline void _buf_spent(Buf *b, Py_ssize_t exact) noexcept nogil:
    """buf_free of a Buf whose bytes were copied out at export, with the size hints
    _take_buf leaves."""
    buf_note_handover(b, exact)
    buf_free(b)


cdef bint _spreadable(Column **cols, int ncols, Py_ssize_t m) noexcept nogil:
    """Every old-image column holds the m rows (and their offsets) _spread_column reads."""
    cdef int i
    cdef Column *c
    for i in range(ncols):
        c = cols[i]
        if c.length != m or c.nulls > m:
            return False
        if (c.layout == LAYOUT_VARLEN or c.layout == LAYOUT_LIST) and c.offsets.len < 4 * (m + 1):
            return False
        if c.layout == LAYOUT_LIST and c.child == NULL:
            return False
    return True


cdef object _spread_column(Column *c, object t, const int32_t *rows, Py_ssize_t m, Py_ssize_t n):
    """The n-row array of type t with the column's m values at rows[0..m) (rising, below
    n: _rows_ascending) and nulls elsewhere, straight from the column's buffers, which
    are left empty as col_export leaves them: fixed-width values and bits copied to
    their rows, var-len and list offsets rebuilt over the rows, their bytes and child
    rows handed over as they are. (A dense array of the old images first, then spread,
    made each column's arrays twice: in a feed of a few hundred rows the arrays cost
    more than the bytes.) After _spreadable."""
    cdef Buf valid, data, offs
    cdef Py_ssize_t count = 0, j, w, nb = (m + 7) >> 3
    cdef const unsigned char *src_valid = NULL
    cdef bint big = n >= SPREAD_NOGIL_ROWS
    cdef int rc = 0
    children = None
    memset(&valid, 0, sizeof(Buf)); memset(&data, 0, sizeof(Buf)); memset(&offs, 0, sizeof(Buf))
    try:
        if c.nulls == m:                     # (a field a key image leaves out)
            return _null_array(t, n)
        if c.nulls:
            if _bits_extend(&c.validity, nb) < 0:
                raise MemoryError()
            src_valid = c.validity.data
        if big:
            with nogil:
                rc = _spread_validity(&valid, src_valid, rows, m, n, &count)
        else:
            rc = _spread_validity(&valid, src_valid, rows, m, n, &count)
        if rc < 0:
            raise MemoryError()
        if c.layout == LAYOUT_BOOL:
            if _bits_extend(&c.data, nb) < 0:
                raise MemoryError()
            if big:
                with nogil:
                    rc = _spread_validity(&data, c.data.data, rows, m, n, &j)   # the value bits
            else:
                rc = _spread_validity(&data, c.data.data, rows, m, n, &j)
            if rc < 0:
                raise MemoryError()
            values = [_take_buf(&data, (n + 7) >> 3)]
            _buf_spent(&c.data, nb)
        elif c.layout == LAYOUT_FIXED:
            w = c.fixed_width
            if buf_reserve_exact(&data, n * w) < 0:
                raise MemoryError()
            if big:
                with nogil:
                    _spread_fixed(data.data, c.data.data, rows, m, n, w)
            else:
                _spread_fixed(data.data, c.data.data, rows, m, n, w)
            data.len = n * w
            values = [_take_buf(&data, n * w)]
            _buf_spent(&c.data, m * w)
        else:
            if buf_reserve_exact(&offs, 4 * (n + 1)) < 0:
                raise MemoryError()
            if big:
                with nogil:
                    _spread_offsets(<int32_t *>offs.data, <const int32_t *>c.offsets.data, rows, m, n)
            else:
                _spread_offsets(<int32_t *>offs.data, <const int32_t *>c.offsets.data, rows, m, n)
            offs.len = 4 * (n + 1)
            values = [_take_buf(&offs, 4 * (n + 1))]
            _buf_spent(&c.offsets, 4 * (m + 1))
            if c.layout == LAYOUT_VARLEN:
                values.append(_take_buf(&c.data, c.data.len))
            else:
                children = [col_export(c.child, t.value_type)]
        nulls = n - count
        vbuf = _take_buf(&valid, (n + 7) >> 3) if nulls else None
        return _pa_from_buffers(t, n, [vbuf] + values, nulls, children=children)
    finally:
        buf_free(&valid); buf_free(&data); buf_free(&offs)
        if c.nulls:
            _buf_spent(&c.validity, nb)
        else:
            buf_free(&c.validity)
        buf_free(&c.data)
        buf_free(&c.offsets)
        buf_free(&c.toast)
        if c.layout == LAYOUT_LIST and c.child != NULL and c.child.length:
            col_truncate(c.child, 0)
        c.length = 0
        c.nulls = 0
        c.any_toast = False
        c.any_binary = False


cdef bint _rows_ascending(const int32_t *rows, Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    """The old images' row indexes rise strictly and stay below n (what _spread needs)."""
    cdef Py_ssize_t j
    for j in range(m):
        if rows[j] < 0 or rows[j] >= n or (j and rows[j] <= rows[j - 1]):
            return False
    return True


cdef object _spread_struct(object t, list children, const int32_t *rows, Py_ssize_t m,
                           Py_ssize_t n):
    """_before: the struct of type t over n rows of the spread children (_spread_column),
    valid at the m rows with an old image."""
    cdef Buf valid
    cdef Py_ssize_t count = 0
    cdef int rc
    memset(&valid, 0, sizeof(Buf))
    try:
        if n >= SPREAD_NOGIL_ROWS:
            with nogil:
                rc = _spread_validity(&valid, NULL, rows, m, n, &count)
        else:
            rc = _spread_validity(&valid, NULL, rows, m, n, &count)
        if rc < 0:
            raise MemoryError()
        vbuf = _take_buf(&valid, (n + 7) >> 3) if n - m else None
    finally:
        buf_free(&valid)
    return _pa_from_buffers(t, n, [vbuf], n - m, children=children)


cdef int _spread_kind_bufs(Buf *valid, Buf *offs, const int32_t *rows, Py_ssize_t m,
                           Py_ssize_t n, const int32_t *iota) noexcept nogil:
    """_spread_kinds' validity and offsets (kind byte j at row rows[j]): the kind bytes
    are a dense column whose offsets are 0, 1, ..., m (iota), spread as _spread_offsets
    spreads any. -1: no memory."""
    cdef Py_ssize_t count = 0
    if _spread_validity(valid, NULL, rows, m, n, &count) < 0 or buf_reserve_exact(offs, 4 * (n + 1)) < 0:
        return -1
    _spread_offsets(<int32_t *>offs.data, iota, rows, m, n)
    offs.len = 4 * (n + 1)
    return 0


cdef object _spread_kinds(object kinds, const int32_t *rows, Py_ssize_t m, Py_ssize_t n):
    """_before_kind: 'K' / 'O' (the m kind bytes, as they are) at the rows with an old
    image, null elsewhere."""
    cdef Buf valid, offs
    cdef int rc = 0
    # (held in a local while in use: another thread's export may replace the shared one)
    iota_buf = _iota32(m + 1)
    cdef const int32_t *iota = <const int32_t *><size_t>iota_buf.address
    memset(&valid, 0, sizeof(Buf)); memset(&offs, 0, sizeof(Buf))
    try:
        if n >= SPREAD_NOGIL_ROWS:
            with nogil:
                rc = _spread_kind_bufs(&valid, &offs, rows, m, n, iota)
        else:
            rc = _spread_kind_bufs(&valid, &offs, rows, m, n, iota)
        if rc < 0:
            raise MemoryError()
        vbuf = _take_buf(&valid, (n + 7) >> 3) if n - m else None
        return _pa_from_buffers(pa.string(), n, [vbuf, _take_buf(&offs, 4 * (n + 1)), kinds], n - m)
    finally:
        buf_free(&valid); buf_free(&offs)


cdef object _empty_lists_new(object t, Py_ssize_t n):
    """n empty lists of list type t (of strings)."""
    return _pa_from_buffers(t, n, [None, _zeros(4 * (n + 1))], 0, children=[_pa_strings([])])


cdef _KeptArrays _empty_lists = _kept_arrays(_empty_lists_new)


cdef object _toast_lists(Py_ssize_t n, list masks, list names):
    """list<string> per row: names of the columns sent as unchanged TOAST."""
    if not masks:                        # (most tables have none)
        return _empty_lists.get(_pa_list_str, n)
    mat = np.stack([_np_from_pa_bool(m) for _, m in masks], axis=1)
    rows, cols = np.nonzero(mat)
    colnames = _pa_strings([names[i] for i, _ in masks])
    counts = mat.sum(axis=1).astype(np.int32)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(_pa_from_np(offsets, pa.int32()),
                                    colnames.take(_pa_from_np(cols.astype(np.int32), pa.int32())))
