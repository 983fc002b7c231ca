# The change-event table's buffers (EvStore) and their appends: one EvStore per
# decoder, one per pending spool; ev_append copies a spool's kept rows into the
# decoder's with the commit's metadata; EvChunk holds committed rows adopted whole.

# DecoderCore writes its event rows into one EvStore. A streamed or prepared
# transaction's rows are written into its Spool's own EvStore as they arrive (that write
# is also their check), and appended to the decoder's at the commit with the commit's
# metadata filled in (ev_append), instead of being decoded a second time.

cdef struct EvStore:
    Meta meta
    Buf relid               # int64
    Buf rb                  # int32 RelBuilders id (schema / table names)
    Buf before_kind         # 1 byte: K O or 0
    Buf trunc               # 1 byte: Truncate options, 0xFF = not a truncate
    MapB before
    MapB after
    Buf toast_off           # int32 offsets
    Buf toast_ids           # int32 name ids


cdef void ev_free(EvStore *e) noexcept nogil:
    meta_free(&e.meta)
    buf_free(&e.relid); buf_free(&e.rb); buf_free(&e.before_kind); buf_free(&e.trunc)
    map_free(&e.before); map_free(&e.after)
    buf_free(&e.toast_off); buf_free(&e.toast_ids)


cdef Py_ssize_t ev_nbytes(const EvStore *e) noexcept nogil:
    """Bytes the rows hold (what counts against max_pending_bytes)."""
    cdef Py_ssize_t n = (meta_nbytes(&e.meta) + e.relid.len + e.rb.len + e.before_kind.len
                         + e.trunc.len + e.toast_off.len + e.toast_ids.len)
    return n + map_nbytes(&e.before) + map_nbytes(&e.after)


cdef Py_ssize_t ev_capacity(const EvStore *e) noexcept nogil:
    """Bytes the buffers hold allocated (kept by an emptied EvStore)."""
    cdef Py_ssize_t n = (e.meta.lsn.cap + e.meta.commit_lsn.cap + e.meta.commit_ts.cap
                         + e.meta.xid.cap + e.meta.seq.cap + e.meta.op.cap + e.meta.origin.cap
                         + e.relid.cap + e.rb.cap + e.before_kind.cap + e.trunc.cap
                         + e.toast_off.cap + e.toast_ids.cap)
    return n + map_capacity(&e.before) + map_capacity(&e.after)


cdef Py_ssize_t map_capacity(const MapB *mb) noexcept nogil:
    cdef Py_ssize_t n = mb.offsets.cap + mb.valid.cap
    if mb.keys != NULL:
        n += mb.keys.data.cap + mb.keys.offsets.cap
    if mb.values != NULL:
        n += mb.values.data.cap + mb.values.offsets.cap + mb.values.validity.cap
    return n


cdef Py_ssize_t map_nbytes(const MapB *mb) noexcept nogil:
    cdef Py_ssize_t n = mb.offsets.len + mb.valid.len
    if mb.keys != NULL:
        n += col_nbytes(mb.keys)
    if mb.values != NULL:
        n += col_nbytes(mb.values)
    return n


cdef bint g_size_hints = True            # off: every Decoder's buffers grow from nothing


def _set_size_hints(bint on):
    """Turn the process-wide size hints (typed builders and change events) on or off,
    for tests that compare; returns the previous setting."""
    global g_size_hints
    cdef bint was = g_size_hints
    g_size_hints = on
    return was


DEF HINT_MIN_FEED = 1 << 20          # a kept feed of this many bytes or more scales up
DEF HINT_MAX_UP = 8.0                # by at most this much


cdef inline double hint_scale(Py_ssize_t feed_bytes, Py_ssize_t kept_feed) noexcept nogil:
    """What sizes kept from a feed of kept_feed bytes are multiplied by for a feed of
    feed_bytes: down to any share (a piece of decode_parallel, a small batch after a large
    one), up to HINT_MAX_UP times when the feed kept was large enough to say how the
    output grows with the input (HINT_MIN_FEED); 1 when either is unknown."""
    cdef double scale
    if feed_bytes <= 0 or kept_feed <= 0:
        return 1.0
    scale = <double>feed_bytes / <double>kept_feed
    if scale > 1.0:
        return 1.0 if kept_feed < HINT_MIN_FEED else min(scale, HINT_MAX_UP)
    return scale


# The sizes an EvStore's buffers were last handed over with, process-wide: a new
# Decoder starts its change-event buffers at them (Buf.hint) instead of growing each from
# 64 bytes through copies (a quarter of its size, 4x at a time: 5-7 % of a decode).
# A process decodes batch after batch, often with a new Decoder each (a Spark task per
# segment); _take_buf lowers a hint when batches get much smaller, and room not written
# costs no memory (pages are touched when written, and trimmed at hand-over).
DEF EV_NBUFS = 29
cdef Py_ssize_t _ev_hint[EV_NBUFS]
cdef Py_ssize_t _ev_hint_feed[EV_NBUFS]  # each one's feed: the bytes of the feed whose rows
                                         # it held (0: unknown)


cdef int ev_bufs(EvStore *e, Buf **out) noexcept nogil:
    """e's buffers in a fixed order (EV_NBUFS; the maps' key and value columns are
    made here when missing, empty). -1: no memory."""
    cdef MapB *maps[2]
    cdef int i, at = 13
    cdef Column *c
    out[0] = &e.meta.lsn; out[1] = &e.meta.commit_lsn; out[2] = &e.meta.commit_ts
    out[3] = &e.meta.xid; out[4] = &e.meta.seq; out[5] = &e.meta.op; out[6] = &e.meta.origin
    out[7] = &e.relid; out[8] = &e.rb; out[9] = &e.before_kind; out[10] = &e.trunc
    out[11] = &e.toast_off; out[12] = &e.toast_ids
    maps[0] = &e.before
    maps[1] = &e.after
    for i in range(2):
        if maps[i].keys == NULL:
            maps[i].keys = col_new(K_TEXT, LAYOUT_VARLEN, 0)
            if maps[i].keys == NULL:
                return -1
        if maps[i].values == NULL:
            maps[i].values = col_new(K_TEXT, LAYOUT_VARLEN, 0)
            if maps[i].values == NULL:
                return -1
        out[at] = &maps[i].offsets; out[at + 1] = &maps[i].valid
        c = maps[i].keys
        out[at + 2] = &c.data; out[at + 3] = &c.offsets; out[at + 4] = &c.validity
        c = maps[i].values
        out[at + 5] = &c.data; out[at + 6] = &c.offsets; out[at + 7] = &c.validity
        at += 8
    return 0


cdef int ev_hints_take(EvStore *e, Py_ssize_t feed_bytes) noexcept nogil:
    """Start e's empty buffers at the process's last hand-over sizes, scaled to a feed of
    feed_bytes as the typed builders' are (hint_scale). -1: no memory."""
    cdef Buf *bufs[EV_NBUFS]
    cdef int i
    cdef Py_ssize_t size
    if ev_bufs(e, bufs) < 0:
        return -1
    if not g_size_hints:
        return 0
    for i in range(EV_NBUFS):
        if bufs[i].hint == 0:
            size = <Py_ssize_t>(<double>_ev_hint[i] * hint_scale(feed_bytes, _ev_hint_feed[i]))
            if size >= 4096:                     # (smaller: the usual growth is as good)
                bufs[i].hint = size
    return 0


cdef void ev_hints_keep(EvStore *e, Py_ssize_t feed_bytes) noexcept nogil:
    """Remember e's hand-over sizes (what each buffer's last hand-over held: Buf.last,
    not its hint, which shrinks only below a quarter) for the next Decoder, with the
    bytes of the feed that wrote them."""
    cdef Buf *bufs[EV_NBUFS]
    cdef int i
    if ev_bufs(e, bufs) < 0:
        return
    for i in range(EV_NBUFS):
        if bufs[i].last >= 4096:         # (under: no hint; and one that held nothing says nothing of the next)
            _ev_hint[i] = bufs[i].last
            _ev_hint_feed[i] = feed_bytes


cdef void ev_truncate(EvStore *e, Py_ssize_t rows) noexcept nogil:
    """Drop rows >= rows, and what a row begun but not finished wrote."""
    cdef int32_t end
    if rows > e.meta.rows:
        return
    meta_truncate(&e.meta, rows)
    e.relid.len = 8 * rows
    e.rb.len = 4 * rows
    e.before_kind.len = rows
    e.trunc.len = rows
    map_truncate(&e.before, rows)
    map_truncate(&e.after, rows)
    if e.toast_off.len >= 4 * (rows + 1):
        memcpy(&end, e.toast_off.data + 4 * rows, 4)
        e.toast_off.len = 4 * (rows + 1)
        e.toast_ids.len = 4 * end
    else:
        e.toast_off.len = 0
        e.toast_ids.len = 0


cdef int bits_append(Buf *dst, Py_ssize_t dst_n, const Buf *src, Py_ssize_t src_n) noexcept nogil:
    """Bits [0, src_n) of src after bit dst_n of dst (bits past a bitmap's len are 0;
    dst's bits from dst_n on are overwritten)."""
    cdef Py_ssize_t need = (dst_n + src_n + 7) >> 3
    cdef Py_ssize_t d = dst_n >> 3, k, nsrc = (src_n + 7) >> 3
    cdef int shift = <int>(dst_n & 7)
    cdef unsigned char b
    if src_n == 0:
        return 0
    if need > dst.len:
        if buf_reserve(dst, need - dst.len) < 0:
            return -1
        memset(dst.data + dst.len, 0, <size_t>(need - dst.len))
        dst.len = need
    dst.data[d] &= <unsigned char>((1 << shift) - 1)
    for k in range(nsrc):
        b = src.data[k] if k < src.len else 0
        dst.data[d + k] |= <unsigned char>(b << shift)
        if shift and d + k + 1 < need:
            dst.data[d + k + 1] = <unsigned char>(b >> (8 - shift))
    return 0


cdef int bits_fill_ones(Buf *dst, Py_ssize_t dst_n, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(dst_n, dst_n + n):
        if bit_set(dst, i, 1) < 0:
            return -1
    return 0


cdef int offsets_append(Buf *dst, const Buf *src, Py_ssize_t n, int64_t base) noexcept nogil:
    """src's int32 end offsets 1..n, plus base, after dst's (whose first offset, 0, is
    written when missing). -2: past int32."""
    cdef int32_t v, o, zero = 0
    cdef Py_ssize_t i
    cdef int64_t last
    cdef unsigned char *w
    cdef bint have = src.len >= 4 * (n + 1)     # (else: no entries in any row)
    if n == 0:
        return 0
    v = 0
    if have:
        memcpy(&v, src.data + 4 * n, 4)
    last = base + v
    if last > 0x7FFFFFFF:
        return -2
    if dst.len == 0 and buf_append4(dst, &zero) < 0:
        return -1
    if buf_reserve(dst, 4 * n) < 0:
        return -1
    w = dst.data + dst.len
    v = 0
    for i in range(n):
        if have:
            memcpy(&v, src.data + 4 * (i + 1), 4)
        o = <int32_t>(v + base)
        memcpy(w + 4 * i, &o, 4)
    dst.len += 4 * n
    return 0


cdef int col_append(Column *dst, const Column *src) noexcept nogil:
    """Append the rows of src to dst, a column of the same kind and layout (an event
    map's values; a spool's typed rows at its commit, RelBuilders.adopt). -1: no
    memory, -2: past int32 offsets; dst then holds part of them (the caller cuts it
    back)."""
    cdef Py_ssize_t m = src.length
    cdef int rc
    cdef Buf none
    if m == 0:
        return 0
    if dst.layout == LAYOUT_FIXED:
        if buf_append(&dst.data, src.data.data, m * dst.fixed_width) < 0:
            return -1
    elif dst.layout == LAYOUT_BOOL:
        if bits_append(&dst.data, dst.length, &src.data, m) < 0:
            return -1
    elif dst.layout == LAYOUT_VARLEN:
        rc = offsets_append(&dst.offsets, &src.offsets, m, dst.data.len)
        if rc < 0:
            return rc
        if buf_append(&dst.data, src.data.data, src.data.len) < 0:
            return -1
    else:                                   # LAYOUT_LIST: the elements, then the offsets
        rc = offsets_append(&dst.offsets, &src.offsets, m, dst.child.length)
        if rc < 0:
            return rc
        rc = col_append(dst.child, src.child)
        if rc < 0:
            return rc
    if src.nulls or dst.nulls:
        if dst.nulls == 0 and _validity_backfill(dst) < 0:
            return -1
        if src.nulls:
            rc = bits_append(&dst.validity, dst.length, &src.validity, m)
        else:
            rc = bits_fill_ones(&dst.validity, dst.length, m)
        if rc < 0:
            return -1
        dst.nulls += src.nulls
    if src.any_toast or dst.any_toast:
        memset(&none, 0, sizeof(Buf))       # (no TOAST bits: all 0)
        if bits_append(&dst.toast, dst.length, &src.toast if src.any_toast else &none, m) < 0:
            return -1
        dst.any_toast = True
    dst.any_binary = dst.any_binary or src.any_binary
    dst.length += m
    return 0


cdef int map_append(MapB *dst, const MapB *src) noexcept nogil:
    cdef Py_ssize_t n = src.rows
    cdef int rc
    if n == 0:
        return 0
    if map_begin(dst) < 0:
        return -1
    rc = offsets_append(&dst.offsets, &src.offsets, n, dst.keys.length)
    if rc < 0:
        return rc
    if bits_append(&dst.valid, dst.rows, &src.valid, n) < 0:
        return -1
    if src.keys != NULL:
        rc = col_append(dst.keys, src.keys)
        if rc < 0:
            return rc
    if src.values != NULL:
        rc = col_append(dst.values, src.values)
        if rc < 0:
            return rc
    dst.rows += n
    return 0


cdef int ev_append(EvStore *dst, const EvStore *src, const Ctx *ctx) noexcept nogil:
    """Append src's rows to dst, with ctx's commit LSN, commit time, xid and origin (their
    lsn, seq and everything else as written), or with everything as written when ctx is
    NULL. -1: no memory, -2: past int32 offsets; dst is then cut back to its rows
    before."""
    cdef Py_ssize_t n = src.meta.rows, base = dst.meta.rows
    cdef Meta *m = &dst.meta
    cdef int rc
    if n == 0:
        return 0
    rc = map_append(&dst.before, &src.before)
    if rc == 0:
        rc = map_append(&dst.after, &src.after)
    if rc == 0:
        rc = offsets_append(&dst.toast_off, &src.toast_off, n, dst.toast_ids.len >> 2)
    if rc == 0 and (buf_append(&dst.toast_ids, src.toast_ids.data, src.toast_ids.len) < 0
                    or buf_append(&dst.relid, src.relid.data, 8 * n) < 0
                    or buf_append(&dst.rb, src.rb.data, 4 * n) < 0
                    or buf_append(&dst.before_kind, src.before_kind.data, n) < 0
                    or buf_append(&dst.trunc, src.trunc.data, n) < 0
                    or meta_reserve(m, n) < 0):
        rc = -1
    if rc < 0:
        ev_truncate(dst, base)
        return rc
    if ctx == NULL:
        meta_put_rows(m, &src.meta, n)
    else:
        meta_put_kept(m, &src.meta, n, ctx)
    return 0


cdef void meta_fill_commit(Meta *m, const Ctx *ctx) noexcept nogil:
    """ctx's commit LSN, commit time, xid and origin into every row of m, in place (the
    rows of a spool adopted whole: see EvChunk)."""
    cdef Py_ssize_t r
    for r in range(m.rows):
        memcpy(m.commit_lsn.data + 8 * r, &ctx.commit_lsn, 8)
        memcpy(m.commit_ts.data + 8 * r, &ctx.commit_ts, 8)
        memcpy(m.xid.data + 8 * r, &ctx.xid, 8)
        memcpy(m.origin.data + 4 * r, &ctx.origin, 4)


# A streamed or prepared transaction past this many bytes of event rows has its spool's
# EvStore adopted whole at the commit (an EvChunk) instead of appended to the decoder's:
# no copy, for one more RecordBatch in the output (its export costs about what a copy of
# ~1 MiB does). PostgreSQL streams a transaction only past logical_decoding_work_mem
# (64 MB by default), so a streamed one is usually far past it.
cdef Py_ssize_t _ev_adopt_bytes = 4 << 20


def _set_event_adopt_bytes(Py_ssize_t nbytes):
    """Set the bytes of event rows past which a committing spool is adopted whole (tests
    set 0: every streamed or prepared commit adopts); returns the previous value."""
    global _ev_adopt_bytes
    old = _ev_adopt_bytes
    _ev_adopt_bytes = nbytes
    return old


@cython.final
cdef class EvChunk:
    """Committed change-event rows as they were written (an adopted spool's EvStore, or
    the decoder's own rows before it): exported as a RecordBatch of their own, in
    commit order, before the decoder's current rows."""
    cdef EvStore ev

    def __dealloc__(self):
        ev_free(&self.ev)
