# The block writers' inner loops, in C only: they run without the GIL.
#
# A block is a run of changes of one relation that the column pass (typed tables) or the
# change-event block writer takes at once (column_pass.pxi: block_end). Everything such a
# block writes is C memory of its own decoder: its relation's Column builders and Meta,
# the decoder's scratch value tables, its EvStore. So a block of some size lets go of
# the GIL while it runs, and several Decoders on several threads (decode_parallel) run
# their blocks at the same time. What touches Python objects (the dispatch, the
# catalog, the builders' lists, errors) stays with the GIL, in the DecoderCore methods
# that call these. The one state the decoders share, the cache of released blocks
# (builders.pxi), takes its own lock.
#
# Each writer returns the first row it did not write (the row-wise scan goes on from
# there and reports what is wrong with it), or -1 when memory ran out (the caller
# raises MemoryError with the GIL).

DEF NOGIL_MIN_VALUES = 512           # values (rows x columns) of a block that lets go of the GIL


cdef inline bint block_drops_gil(Py_ssize_t i, Py_ssize_t j, int ncols) noexcept nogil:
    """Whether a block of the rows i..j is large enough to pay for letting go of the GIL
    (and taking it back)."""
    return (j - i) * ncols >= NOGIL_MIN_VALUES


cdef struct BlockDest:               # a relation version's typed builders (RelBuilders)
    Column **cols
    Column **before
    int ncols
    Meta *meta
    Buf *before_rows
    Buf *before_kind
    Py_ssize_t *nbefore


cdef inline void block_dest(BlockDest *d, RelBuilders rb) noexcept:
    d.cols = rb.cols
    d.before = rb.before
    d.ncols = rb.ncols
    d.meta = &rb.meta
    d.before_rows = &rb.before_rows
    d.before_kind = &rb.before_kind
    d.nbefore = &rb.nbefore


cdef Py_ssize_t cp_block(const BlockDest *d, Buf *scratch, Ctx *ctx, const MsgRef *refs,
                         Py_ssize_t i, Py_ssize_t j, Py_ssize_t nrefs, int olds,
                         int xo) noexcept nogil:
    """The rows i..j of a _run_typed_blocks block (room reserved) through the row pass and
    the column pass (cp_rows, cp_column), as far as they take them; returns the first
    row not written, from which the row-wise scan goes on (-1: out of memory). olds: what
    the block is made of (BLOCK_NEW, BLOCK_DELETES, BLOCK_UPDATES_OLD; BLOCK_MIXED is
    cp_mixed_block's); an old tuple goes to _before's dense columns, as _scan_old writes
    it, before the row. nrefs: the messages there are (the next block's are prefetched,
    a share per column pass)."""
    cdef Column **cols = d.cols
    cdef Column **before = d.before
    cdef Py_ssize_t bbase
    cdef int32_t row32
    cdef bint two = olds == BLOCK_UPDATES_OLD
    cdef int ncols = d.ncols
    cdef Meta *meta = d.meta
    cdef Py_ssize_t stride = CP_VALUES // ncols
    cdef Py_ssize_t rows, got, done, k, base, r
    cdef const unsigned char **vp
    cdef int32_t *vn
    cdef uint8_t *ckind
    cdef const unsigned char **vp2
    cdef int32_t *vn2
    cdef uint8_t *ckind2
    cdef CpTables tb
    cdef int c, rc = 0
    cdef char op = b'd' if olds == BLOCK_DELETES else b'u' if olds == BLOCK_UPDATES_OLD else 0
    cdef unsigned char *brows
    cdef unsigned char *bkind
    if stride < 1:
        stride = 1
    cdef Py_ssize_t i0 = i, ahead = prefetch_end(i, j, nrefs), fetch = j
    if cp_tables(scratch, stride, ncols, two, &tb) < 0:
        return -1
    vp = tb.vp
    vn = tb.vn
    ckind = tb.ckind
    vp2 = tb.vp2
    vn2 = tb.vn2
    ckind2 = tb.ckind2
    while i < j:
        rows = j - i
        if rows > stride:
            rows = stride
        memset(ckind, 0, <size_t>ncols)
        if two:
            memset(ckind2, 0, <size_t>ncols)
        got = cp_rows(refs + i, rows, ncols, stride, vp, vn, ckind, vp2, vn2, ckind2, two, xo)
        if got == 0:
            return i
        base = meta.rows
        done = got
        bbase = d.nbefore[0]
        if olds != BLOCK_NEW:
            for c in range(ncols):
                k = cp_column(before[c], ckind[c], vp + c * stride, vn + c * stride, done, &rc)
                if k < done:
                    done = k
                if rc != 0:
                    break
        if rc == 0:
            for c in range(ncols):
                # this sub-block's share of the next block's messages, by columns
                fetch = prefetch_msgs(refs, fetch, j + ((i - i0) * ncols + (c + 1) * rows)
                                      * (ahead - j) // ((j - i0) * ncols))
                k = cp_column(cols[c], ckind2[c], vp2 + c * stride, vn2 + c * stride, done, &rc)
                if k < done:
                    done = k
                if rc != 0:
                    break
        if done < got or rc != 0:
            for c in range(ncols):
                cp_cut(cols[c], base + done)
                if olds != BLOCK_NEW:
                    cp_cut(before[c], bbase + done)
        for c in range(ncols):
            # a column that has had an unchanged TOAST value ('u') keeps a bit per row
            if cp_toast_clear(cols[c], base, done) < 0 or (
                    olds != BLOCK_NEW and cp_toast_clear(before[c], bbase, done) < 0):
                return -1
        if olds != BLOCK_NEW:
            row32 = <int32_t>meta.rows
            brows = d.before_rows.data + d.before_rows.len
            bkind = d.before_kind.data + d.before_kind.len
            for r in range(done):
                memcpy(brows + 4 * r, &row32, 4)
                row32 += 1
                bkind[r] = refs[i + r].p[5 + xo]
            d.before_rows.len += 4 * done
            d.before_kind.len += done
            d.nbefore[0] += done
        meta_put_run(meta, refs + i, done, ctx, op)
        i += done
        if done < rows or rc != 0:
            return i
    return i


cdef Py_ssize_t cp_mixed_block(const BlockDest *d, Buf *scratch, Buf *scratch2, Ctx *ctx,
                               const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                               Py_ssize_t nrefs, int xo) noexcept nogil:
    """cp_block of a BLOCK_MIXED block: inserts, updates without an old tuple and
    deletes. Each change's first tuple is its row (a delete's old key or row, as
    _write_dml writes it), through the row pass and the column pass of every row; then
    the deletes' old images, gathered from the same value tables, through the column
    pass into _before's dense columns. Returns the first row not written (-1: out of
    memory). scratch2: the list of the deletes' rows."""
    cdef Column **cols = d.cols
    cdef Column **before = d.before
    cdef int ncols = d.ncols
    cdef Meta *meta = d.meta
    cdef Py_ssize_t stride = CP_VALUES // ncols
    cdef Py_ssize_t rows, got, done, k, base, bbase, r, nd, kept
    cdef const unsigned char **vp
    cdef int32_t *vn
    cdef uint8_t *ckind
    cdef const unsigned char **dvp
    cdef int32_t *dvn
    cdef int32_t *drow
    cdef CpTables tb
    cdef int c, rc = 0
    cdef int32_t row32
    cdef unsigned char *brows
    cdef unsigned char *bkind
    cdef Py_ssize_t i0 = i, ahead = prefetch_end(i, j, nrefs), fetch = j
    if stride < 1:
        stride = 1
    # (two tables: the rows' values, and the deletes' gathered; then a row list)
    if (cp_tables(scratch, stride, ncols, True, &tb) < 0
            or buf_reserve(scratch2, 4 * stride) < 0):
        return -1
    vp = tb.vp
    vn = tb.vn
    ckind = tb.ckind
    dvp = tb.vp2
    dvn = tb.vn2
    drow = <int32_t *>scratch2.data
    while i < j:
        rows = j - i
        if rows > stride:
            rows = stride
        memset(ckind, 0, <size_t>ncols)
        got = cp_rows(refs + i, rows, ncols, stride, vp, vn, ckind, vp, vn, ckind, False, xo)
        if got == 0:
            return i
        base = meta.rows
        bbase = d.nbefore[0]
        done = got
        for c in range(ncols):
            fetch = prefetch_msgs(refs, fetch, j + ((i - i0) * ncols + (c + 1) * rows)
                                  * (ahead - j) // ((j - i0) * ncols))
            k = cp_column(cols[c], ckind[c], vp + c * stride, vn + c * stride, done, &rc)
            if k < done:
                done = k
            if rc != 0:
                break
        # the deletes among the rows written: their old images, gathered
        nd = 0
        if rc == 0:
            for r in range(done):
                if refs[i + r].p[0] == MSG_DELETE:
                    drow[nd] = <int32_t>r
                    nd += 1
            if nd:
                for c in range(ncols):
                    for r in range(nd):
                        dvp[c * stride + r] = vp[c * stride + drow[r]]
                        dvn[c * stride + r] = vn[c * stride + drow[r]]
                kept = nd
                for c in range(ncols):
                    k = cp_column(before[c], ckind[c], dvp + c * stride, dvn + c * stride, kept, &rc)
                    if k < kept:
                        kept = k
                    if rc != 0:
                        break
                if kept < nd or rc != 0:
                    # (rows from the delete whose old image stopped go row-wise)
                    done = drow[kept] if kept < nd else done
                    nd = kept
        if rc != 0:
            done = 0
            nd = 0
        if done < got or rc != 0:
            for c in range(ncols):
                cp_cut(cols[c], base + done)
                cp_cut(before[c], bbase + nd)
        for c in range(ncols):
            if cp_toast_clear(cols[c], base, done) < 0 or cp_toast_clear(before[c], bbase, nd) < 0:
                return -1
        brows = d.before_rows.data + d.before_rows.len
        bkind = d.before_kind.data + d.before_kind.len
        for r in range(nd):
            row32 = <int32_t>(base + drow[r])
            memcpy(brows + 4 * r, &row32, 4)
            bkind[r] = refs[i + drow[r]].p[5 + xo]
        d.before_rows.len += 4 * nd
        d.before_kind.len += nd
        d.nbefore[0] += nd
        meta_put_run(meta, refs + i, done, ctx, 0)
        i += done
        if done < rows or rc != 0:
            return i
    return i


cdef struct EvRel:                   # what the change-event block writer reads of a RelBuilders
    int ncols
    int64_t relid
    int32_t rid
    unsigned char *names
    int32_t *name_end
    unsigned char *is_key
    int32_t *ctype
    FmtMemo *fmemo


cdef inline void ev_rel(EvRel *v, RelBuilders rb) noexcept:
    v.ncols = rb.ncols
    v.relid = rb.relid
    v.rid = rb.id
    v.names = rb.names
    v.name_end = rb.name_end
    v.is_key = rb.is_key
    v.ctype = rb.ctype
    v.fmemo = rb.fmemo


cdef inline int ev_reserve_rows(EvStore *e, Py_ssize_t n) noexcept nogil:
    """Room for the metadata of n more change-event rows (ev_block's, ev_mixed's),
    toast_off begun with its first offset. 0, or -1 out of memory."""
    cdef int32_t zero = 0
    if (meta_reserve(&e.meta, n) < 0 or buf_reserve(&e.relid, 8 * n) < 0
            or buf_reserve(&e.rb, 4 * n) < 0 or buf_reserve(&e.before_kind, n) < 0
            or buf_reserve(&e.trunc, n) < 0 or buf_reserve(&e.toast_off, 4 * (n + 1)) < 0):
        return -1
    if e.toast_off.len == 0:
        memcpy(e.toast_off.data, &zero, 4)
        e.toast_off.len = 4
    return 0


cdef Py_ssize_t ev_block(EvStore *e, const EvRel *v, Ctx *ctx, const MsgRef *refs,
                         Py_ssize_t i, Py_ssize_t j, Py_ssize_t nrefs, int olds,
                         int xo) noexcept nogil:
    """The rows i..j of an _run_event_blocks block into the change-event table: each
    change's tuples read and written into the maps in one pass (ev_tuple), then the
    rows' metadata a column at a time. Returns the first row not written (the row-wise
    scan takes it from there; -1: out of memory). nrefs: the messages there are (the
    next block's are prefetched as this one goes)."""
    cdef bint two = olds == BLOCK_UPDATES_OLD
    cdef int ncols = v.ncols
    cdef Py_ssize_t rows = j - i, done = 0, base, r, pos, end
    cdef const unsigned char *p
    cdef int32_t endo
    cdef int64_t relid = v.relid
    cdef int32_t rid = v.rid
    cdef char op = b'd' if olds == BLOCK_DELETES else b'u' if olds == BLOCK_UPDATES_OLD else 0
    cdef Py_ssize_t ahead = prefetch_end(i, j, nrefs), fetch = j
    base = e.meta.rows
    while done < rows:
        p = refs[i + done].p
        end = refs[i + done].n
        fetch = prefetch_msgs(refs, fetch, j + (done + 1) * (ahead - j) // rows)   # (a share per row)
        pos = 8 + xo
        if olds != BLOCK_NEW:               # the old image: 'K' (key columns) or 'O'
            pos = ev_tuple(&e.before, p, pos, end, ncols, v.names, v.name_end, v.is_key,
                           p[5 + xo] == TUPLE_KEY, v.ctype, v.fmemo)
            if pos < 0:
                break
        elif map_end_row(&e.before, 0) < 0:
            pos = -2
            break
        if olds == BLOCK_DELETES:
            if map_end_row(&e.after, 0) < 0:
                pos = -2
                break
        else:
            if two:
                if end - pos < 3 or p[pos] != TUPLE_NEW or pgo_be16s(p + pos + 1) != ncols:
                    pos = -1
                    break
                pos += 3
            pos = ev_tuple(&e.after, p, pos, end, ncols, v.names, v.name_end, v.is_key,
                           False, v.ctype, v.fmemo)
            if pos < 0:
                break
        if pos != end:
            pos = -1
            break
        done += 1
    if done < rows:
        map_truncate(&e.before, base + done)
        map_truncate(&e.after, base + done)
        if pos == -2:
            return -1
    if done:
        if ev_reserve_rows(e, done) < 0:
            return -1
        meta_put_run(&e.meta, refs + i, done, ctx, op)
        endo = <int32_t>(e.toast_ids.len >> 2)
        for r in range(done):
            memcpy(e.relid.data + e.relid.len + 8 * r, &relid, 8)
            memcpy(e.rb.data + e.rb.len + 4 * r, &rid, 4)
            e.before_kind.data[e.before_kind.len + r] = refs[i + r].p[5 + xo] if olds != BLOCK_NEW else 0
            e.trunc.data[e.trunc.len + r] = 0xFF
            memcpy(e.toast_off.data + e.toast_off.len + 4 * r, &endo, 4)
        e.relid.len += 8 * done
        e.rb.len += 4 * done
        e.before_kind.len += done
        e.trunc.len += done
        e.toast_off.len += 4 * done
    return i + done


cdef Py_ssize_t ev_mixed(EvStore *e, const EvRel *evr, const int32_t *grp, Ctx *ctx,
                         const MsgRef *refs, Py_ssize_t i, Py_ssize_t j, int xo) noexcept nogil:
    """The change-event rows of a transaction's changes refs[i..j) (xo 4: a streamed
    part's, which carry their xid after the type byte, else 0), of any relations and
    shapes in any order: each change's tuples read and written into the maps (ev_tuple)
    with its relation's EvRel, evr[grp[r - i]], then the rows' metadata a column at a
    time. ev_block's blocks are runs of one relation and one
    shape, and a stream of small transactions of a few tables and an insert / update /
    delete mix cut them to one or two rows each, each paying the block's set-up. The
    room of the rows' metadata is the caller's (window_events reserves it for many
    transactions at once: reserved here, a dozen buffers' reserves were paid per
    transaction). Returns the first row not written (the row-wise scan takes it from
    there, as after ev_block); -1: out of memory."""
    cdef Py_ssize_t rows = j - i, done = 0, base, r, pos, end
    cdef const unsigned char *p
    cdef const EvRel *v
    cdef int32_t endo
    cdef int ncols
    cdef uint8_t t, tk
    cdef unsigned char *bk
    cdef unsigned char *tr
    base = e.meta.rows
    while done < rows:
        if done + BLOCK_PREFETCH < rows:
            pgo_prefetch(refs[i + done + BLOCK_PREFETCH].p)
        p = refs[i + done].p
        end = refs[i + done].n
        v = &evr[grp[done]]
        ncols = v.ncols
        if (ncols <= 0 or end < 8 + xo or pgo_be32(p + 1 + xo) != <uint32_t>v.relid
                or pgo_be16s(p + 6 + xo) != ncols):
            break
        t = p[0]
        tk = p[5 + xo]
        if tk == TUPLE_NEW and (t == MSG_INSERT or t == MSG_UPDATE):
            if map_end_row(&e.before, 0) < 0:
                pos = -2
                break
            pos = ev_tuple(&e.after, p, 8 + xo, end, ncols, v.names, v.name_end, v.is_key,
                           False, v.ctype, v.fmemo)
            if pos < 0:
                break
        elif (tk == TUPLE_KEY or tk == TUPLE_OLD) and (t == MSG_UPDATE or t == MSG_DELETE):
            pos = ev_tuple(&e.before, p, 8 + xo, end, ncols, v.names, v.name_end, v.is_key,
                           tk == TUPLE_KEY, v.ctype, v.fmemo)
            if pos < 0:
                break
            if t == MSG_DELETE:
                if map_end_row(&e.after, 0) < 0:
                    pos = -2
                    break
            else:
                if end - pos < 3 or p[pos] != TUPLE_NEW or pgo_be16s(p + pos + 1) != ncols:
                    pos = -1
                    break
                pos = ev_tuple(&e.after, p, pos + 3, end, ncols, v.names, v.name_end, v.is_key,
                               False, v.ctype, v.fmemo)
                if pos < 0:
                    break
        else:
            pos = -1
            break
        if pos != end:
            pos = -1
            break
        done += 1
    if done < rows:
        map_truncate(&e.before, base + done)
        map_truncate(&e.after, base + done)
        if pos == -2:
            return -1
    if done:
        # (the room: window_events reserved it for the call's rows, ev_reserve_rows)
        meta_put_run(&e.meta, refs + i, done, ctx, 0)
        endo = <int32_t>(e.toast_ids.len >> 2)
        bk = e.before_kind.data + e.before_kind.len
        tr = e.trunc.data + e.trunc.len
        for r in range(done):
            v = &evr[grp[r]]
            memcpy(e.relid.data + e.relid.len + 8 * r, &v.relid, 8)
            memcpy(e.rb.data + e.rb.len + 4 * r, &v.rid, 4)
            tk = refs[i + r].p[5 + xo]
            bk[r] = 0 if tk == TUPLE_NEW else tk
            tr[r] = 0xFF
            memcpy(e.toast_off.data + e.toast_off.len + 4 * r, &endo, 4)
        e.relid.len += 8 * done
        e.rb.len += 4 * done
        e.before_kind.len += done
        e.trunc.len += done
        e.toast_off.len += 4 * done
    return i + done


cdef Py_ssize_t ev_run_end(const MsgRef *refs, Py_ssize_t i, Py_ssize_t nrefs, uint32_t relid,
                           int ncols, int xo) noexcept nogil:
    """Where _run_event_blocks (with the typed tables built too) stops at the latest in
    the run of changes from refs[i]: the end of its last block of CP_MIN_ROWS or more
    (block_end's blocks, their headers only)."""
    cdef Py_ssize_t j, nbytes
    cdef int olds
    while i < nrefs:
        j = block_end(refs, i, nrefs, relid, ncols, xo, &olds, &nbytes)
        if j - i < CP_MIN_ROWS:
            break
        i = j
    return i


cdef struct EvRunJob:                 # ev_run's arguments and result, for the helper thread
    EvStore *e
    const EvRel *v
    Ctx ctx
    const MsgRef *refs
    Py_ssize_t i
    Py_ssize_t end
    int xo
    Py_ssize_t k
    int64_t ns                       # the time it took


cdef void ev_run_job(void *arg) noexcept nogil:
    """_run_event_blocks' loop over refs[i..end) (ev_run_end's run), on the helper
    thread: each block through ev_block. k: the first change not written (a change the
    writer does not take: the caller goes on from there), or -1 (out of memory)."""
    cdef EvRunJob *jb = <EvRunJob *>arg
    cdef int64_t t0 = pgo_now_ns()
    ev_run_blocks(jb)
    jb.ns = pgo_now_ns() - t0


cdef void ev_run_blocks(EvRunJob *jb) noexcept nogil:
    cdef Py_ssize_t i = jb.i, j, k, nbytes
    cdef int olds
    while i < jb.end:
        j = block_end(jb.refs, i, jb.end, <uint32_t>jb.v.relid, jb.v.ncols, jb.xo, &olds, &nbytes)
        if j == i:
            break
        k = ev_block(jb.e, jb.v, &jb.ctx, jb.refs, i, j, jb.end, olds, jb.xo)
        if k < 0:
            jb.k = -1
            return
        if k < j:
            jb.k = k
            return
        i = j
    jb.k = i
