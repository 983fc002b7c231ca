# The block writers' C loops: ASCII checks, room reservation, the row-wise typed
# scan (scan_typed_*), the block shape (block_end), and the column pass (cp_*): a block's
# values found by a row pass, then stored one column at a time.

# -- the row-wise scan ------------------------------------------------------------

cdef extern from "text_values.h":
    # No byte of p[0..n) has its high bit set.
    bint ascii_only "pgo_ascii_only"(const unsigned char *p, Py_ssize_t n) noexcept nogil
    # memcpy of n bytes to d, and whether none of them has its high bit set, from the same
    # loads (always inlined: a text value is copied and checked in one pass).
    bint copy_ascii "pgo_copy_ascii"(unsigned char *d, const unsigned char *s, Py_ssize_t n) noexcept nogil


DEF FAST_BLOCK_ROWS = 1024           # rows a _run_typed_blocks block reserves room for at once
DEF EV_SLACK_PER_COLUMN = 64          # ev_tuple_full's room for formatted values per column
DEF CP_MIN_ROWS = 8                  # fewer rows: a block is written row-wise (the column
                                     # pass's set-up costs more than it saves there)
DEF FAST_BLOCK_BYTES = 1 << 20       # and message bytes (at least one message)
DEF BLOCK_PREFETCH = 8               # messages block_end reads ahead
DEF ROW_PREFETCH = 4096              # bytes the row pass asks for ahead of where it reads
                                     # (the next page: the hardware's prefetch stops at a
                                     # 4 KiB page, and the wire bytes are read once, in
                                     # order; measured best of 128 B - 8 KiB on the bench)


cdef int reserve_block(int ncols, Column **cols, Py_ssize_t rows, Py_ssize_t nbytes) noexcept nogil:
    """Room in every column for `rows` more TupleData holding `nbytes` message bytes in
    all, as scan_typed_roomy takes it: a row appends at most fixed_width bytes to a fixed
    column, a bit to a bool one, and to a var-len one an offset and at most its message's
    length. 0 ok, -1 out of memory, 1 a var-len column's int32 offsets could leave their
    range within the block (the caller scans it with the checks)."""
    cdef int i
    cdef Column *col
    cdef Py_ssize_t need
    for i in range(ncols):
        col = cols[i]
        if col.layout == LAYOUT_FIXED:
            if buf_reserve(&col.data, rows * col.fixed_width) < 0:
                return -1
        elif col.layout == LAYOUT_VARLEN:
            if col.data.len + nbytes > 0x7FFFFFFF:
                return 1
            if buf_reserve(&col.data, nbytes) < 0 or buf_reserve(&col.offsets, 4 * rows + 4) < 0:
                return -1
        elif col.layout == LAYOUT_BOOL:
            need = ((col.length + rows + 7) >> 3) - col.data.len
            if need > 0 and buf_reserve(&col.data, need) < 0:
                return -1
    return 0


# Compile-time tags of scan_typed_core's two versions (a fused type, so each is its own
# C function with the room tests of the other folded away).
cdef struct RoomChecked:
    char unused
cdef struct RoomReserved:
    char unused
ctypedef fused room_t:
    RoomChecked
    RoomReserved


cdef inline int scan_typed_fast(const unsigned char *buf, Py_ssize_t *pos_io, Py_ssize_t end,
                                int ncols, Column **cols, int *builder_rc) noexcept nogil:
    """scan_typed_core that checks each column's room before an inline store."""
    return scan_typed_core(buf, pos_io, end, ncols, cols, builder_rc, <RoomChecked *>NULL)


cdef inline int scan_typed_roomy(const unsigned char *buf, Py_ssize_t *pos_io, Py_ssize_t end,
                                 int ncols, Column **cols, int *builder_rc) noexcept nogil:
    """scan_typed_core for a TupleData whose columns have room reserved (reserve_block):
    the inline stores skip their room checks."""
    return scan_typed_core(buf, pos_io, end, ncols, cols, builder_rc, <RoomReserved *>NULL)


cdef int scan_typed_core(const unsigned char *buf, Py_ssize_t *pos_io, Py_ssize_t end,
                         int ncols, Column **cols, int *builder_rc, room_t *tag) noexcept nogil:
    """The common case of a TupleData's typed scan, in a loop with no Python in it: 't'/'b'
    values that parse, and nulls. Returns the index of the first column it did not
    finish (ncols when all are done), with *pos_io at that column's kind byte; the
    caller's loop goes on from there with the full checks and error reports. A column
    it stops at is left as it was (a failed parse appends nothing). A column builder
    that cannot grow sets *builder_rc (col_end_row's code) and stops: the caller
    raises.

    The commonest values (Column.text_inline / bin_inline: integers, booleans, ASCII
    text, fixed-width binary, timestamps) are parsed and stored right here when their
    column has room and no TOAST bitmap; anything else this inline code does not finish
    (another shape, a bad value, no room) takes the column's parser below, which
    decides and reports exactly as before.

    RoomReserved (tag's type; no value is passed): the caller reserved, for this TupleData, fixed_width bytes in every fixed
    column, the message's length in every var-len column's data (with its int32
    offsets still in range) and 4 bytes of offsets, and a byte of bool data."""
    cdef Py_ssize_t pos = pos_io[0]
    cdef Py_ssize_t start
    cdef Column *col
    cdef const char *why = NULL
    cdef const unsigned char *p
    cdef int32_t n
    cdef uint8_t kind
    cdef int i = 0
    cdef int rc
    cdef int code
    cdef int j
    cdef uint32_t u32 = 0
    cdef int64_t s64 = 0
    cdef uint64_t v, dg
    cdef Py_ssize_t byte
    cdef int32_t off
    cdef bint neg, bv, goto_stored
    cdef bint roomy = room_t is RoomReserved     # a constant in each version
    while i < ncols:
        if pos >= end:
            break
        start = pos
        kind = buf[pos]
        col = cols[i]
        if kind == COL_TEXT or kind == COL_BINARY:           # 't' / 'b'
            if end - pos < 5:
                break
            n = pgo_be32s(buf + pos + 1)
            if n < 0 or n > end - pos - 5:
                break
            pos += 5
            p = buf + pos
            code = col.text_inline if kind == COL_TEXT else col.bin_inline
            if code != 0 and not col.any_toast and (
                    col.nulls == 0 or (col.length >> 3) < col.validity.cap):
                # ---- inline: store the value and go on, or fall through to the parser
                if code == TEXT_INLINE_INT4 or code == TEXT_INLINE_INT8:
                    # -?D{1,16}: digits 8 at a time (digits.h reads up to 7 bytes before
                    # them, inside this message: the value starts at least 13 bytes in)
                    neg = n > 0 and p[0] == 45
                    j = 1 if neg else 0
                    goto_stored = False
                    if (0 < n - j <= 16 and pos >= 8 and (roomy or col.data.cap - col.data.len >= 8)
                            and pgo_digits16(p + j, n - j, &v)):
                        s64 = -<int64_t>v if neg else <int64_t>v
                        if code == TEXT_INLINE_INT8:
                            memcpy(col.data.data + col.data.len, &s64, 8)
                            col.data.len += 8
                            goto_stored = True
                        elif INT32_MIN <= s64 <= INT32_MAX:
                            u32 = <uint32_t><int32_t>s64
                            memcpy(col.data.data + col.data.len, &u32, 4)
                            col.data.len += 4
                            goto_stored = True
                elif code == TEXT_INLINE_TIMESTAMP:
                    goto_stored = ((roomy or col.data.cap - col.data.len >= 8)
                                   and ts_memo_hit(col, p, n, &s64))
                    if goto_stored:
                        memcpy(col.data.data + col.data.len, &s64, 8)
                        col.data.len += 8
                elif code == TEXT_INLINE_TEXT or code == BIN_INLINE_TEXT:
                    if (col.offsets.len != 0
                            and (roomy or (col.data.cap - col.data.len >= n
                                           and col.offsets.cap - col.offsets.len >= 4
                                           and col.data.len + n <= 0x7FFFFFFF))
                            and copy_ascii(col.data.data + col.data.len, p, n)):
                        col.data.len += n
                        off = <int32_t>col.data.len
                        memcpy(col.offsets.data + col.offsets.len, &off, 4)
                        col.offsets.len += 4
                        goto_stored = True
                    else:
                        goto_stored = False
                elif code == TEXT_INLINE_BOOL or code == BIN_INLINE_BOOL:
                    byte = col.length >> 3
                    if code == TEXT_INLINE_BOOL:
                        bv = n == 1 and p[0] == 116
                        goto_stored = n == 1 and (p[0] == 116 or p[0] == 102)
                    else:
                        bv = n == 1 and p[0] != 0
                        goto_stored = n == 1
                    if goto_stored:
                        if byte < col.data.len:
                            col.data.data[byte] = <unsigned char>(
                                (col.data.data[byte] & ~(1 << (col.length & 7))) | (bv << (col.length & 7)))
                        elif byte == col.data.len and (roomy or byte < col.data.cap):
                            col.data.data[byte] = <unsigned char>bv
                            col.data.len = byte + 1
                        else:
                            goto_stored = False
                elif (code == BIN_INLINE_SWAP4 or code == BIN_INLINE_SWAP8
                      or code == BIN_INLINE_TIMESTAMP):
                    # what bn_fixed4 / bn_fixed8 / bn_timestamp store for a value of the
                    # right length (a timestamp finite and in range)
                    goto_stored = False
                    if roomy or col.data.cap - col.data.len >= 8:
                        if code == BIN_INLINE_SWAP4:
                            if n == 4:
                                u32 = pgo_be32(p)
                                memcpy(col.data.data + col.data.len, &u32, 4)
                                col.data.len += 4
                                goto_stored = True
                        elif n == 8:
                            s64 = pgo_be64s(p)
                            if code == BIN_INLINE_SWAP8:
                                goto_stored = True
                            elif PGO_MIN_TIMESTAMP <= s64 < INT64_MAX - PGO_UNIX_EPOCH_USECS:
                                s64 += PGO_UNIX_EPOCH_USECS
                                goto_stored = True
                            if goto_stored:
                                memcpy(col.data.data + col.data.len, &s64, 8)
                                col.data.len += 8
                else:
                    goto_stored = False
                if goto_stored:
                    if col.nulls:
                        byte = col.length >> 3
                        if byte < col.validity.len:
                            col.validity.data[byte] |= <unsigned char>(1 << (col.length & 7))
                        else:
                            col.validity.data[byte] = 1
                            col.validity.len = byte + 1
                    col.length += 1
                    pos += n
                    i += 1
                    continue
            # parse_text_value / parse_binary_value inlined by hand: through them gcc
            # leaves this loop with 16 M more instructions per 100 k rows (callgrind)
            if kind == COL_TEXT:
                rc = col.text_fn(col, p, n, &why)
            else:
                rc = col.binary_fn(col, p, n, &why)
            if rc != 0:
                col_discard_partial(col)
                pos = start
                break
            rc = col_end_valid(col)
            if rc < 0:
                builder_rc[0] = rc
                break
            pos += n
        elif kind == COL_NULL:                        # 'n'
            # a null in a column that already has some, with room everywhere: what
            # col_end_row does, inline (the first null of a column takes col_end_row,
            # which materialises the validity bitmap)
            byte = col.length >> 3
            goto_stored = False
            if col.nulls and not col.any_toast and byte < col.validity.cap:
                if col.layout == LAYOUT_FIXED:
                    if roomy or col.data.cap - col.data.len >= col.fixed_width:
                        col_zero_fixed(col)
                        goto_stored = True
                elif col.layout == LAYOUT_VARLEN:
                    if col.offsets.len != 0 and (roomy or (col.offsets.cap - col.offsets.len >= 4
                                                          and col.data.len <= 0x7FFFFFFF)):
                        off = <int32_t>col.data.len
                        memcpy(col.offsets.data + col.offsets.len, &off, 4)
                        col.offsets.len += 4
                        goto_stored = True
                elif col.layout == LAYOUT_BOOL:
                    if byte < col.data.len:
                        col.data.data[byte] &= <unsigned char>~(1 << (col.length & 7))
                        goto_stored = True
                    elif byte == col.data.len and (roomy or byte < col.data.cap):
                        col.data.data[byte] = 0
                        col.data.len = byte + 1
                        goto_stored = True
            if goto_stored:
                if byte < col.validity.len:
                    col.validity.data[byte] &= <unsigned char>~(1 << (col.length & 7))
                else:
                    col.validity.data[byte] = 0
                    col.validity.len = byte + 1
                col.nulls += 1
                col.length += 1
            else:
                rc = col_end_row(col, 0, 0)
                if rc < 0:
                    builder_rc[0] = rc
                    break
            pos += 1
        else:
            break
        i += 1
    pos_io[0] = pos
    return i


# -- the column pass: a block of a run, one column at a time ------------------------------
# _run_typed_blocks's blocks (room reserved) are scanned twice. A row pass finds every value of
# the block (pointer and length, -1 for a null) and stores nothing; then a column pass
# stores each column's values in a loop of its own, in which the column's state and
# its kind of value stay the same, so the per-value dispatch of scan_typed_core
# (which column, which kind, which inline form) leaves the loop. Whatever either pass
# does not take ends the column pass at that row: the columns are cut back to it and
# the rows from there on go through the row-wise scan as before, so errors are found
# in the same order and reported the same way.

DEF CP_VALUES = 16384        # values (rows x columns) a column-pass block holds

cdef enum:                   # what a _run_typed_blocks block is made of
    BLOCK_NEW = 0            # inserts, updates without an old tuple: the tuple is the row
    BLOCK_DELETES = 1        # deletes: the old tuple is the row and the old image
    BLOCK_UPDATES_OLD = 2    # updates with an old tuple ('K' / 'O'): old image, then row
    BLOCK_MIXED = 3          # BLOCK_NEW's changes and deletes (typed tables only): each
                             # change's first tuple is its row, a delete's also its old image


cdef Py_ssize_t block_end(const MsgRef *refs, Py_ssize_t i, Py_ssize_t nrefs, uint32_t relid,
                          int ncols, int xo, int *olds, Py_ssize_t *nbytes, bint mix=False) noexcept nogil:
    """The end of the block of a run that starts at refs[i] (_run_typed_blocks, _run_event_blocks): up
    to FAST_BLOCK_ROWS changes of relid with ncols columns (and FAST_BLOCK_BYTES bytes, at
    least one change), all of one shape, set in *olds: inserts and updates without an
    old tuple (BLOCK_NEW), deletes (BLOCK_DELETES), or updates with an old tuple
    (BLOCK_UPDATES_OLD). *nbytes: their bytes. xo is 4 for changes that carry a streamed
    transaction's xid after the type byte, else 0. mix (the typed tables): deletes
    may be among BLOCK_NEW's changes, and a block with any is BLOCK_MIXED. The header
    tests only choose the path: the scans check every message as the row-wise scan
    does."""
    cdef Py_ssize_t j = i, nb = 0
    cdef const MsgRef *m
    cdef const unsigned char *p
    cdef uint8_t t
    cdef int shape = BLOCK_NEW
    cdef bint dels = False
    if refs[i].n >= 8 + xo and refs[i].p[0] == MSG_DELETE and not mix:
        shape = BLOCK_DELETES
    elif (refs[i].n >= 8 + xo and refs[i].p[0] == MSG_UPDATE
          and (refs[i].p[5 + xo] == TUPLE_KEY or refs[i].p[5 + xo] == TUPLE_OLD)):
        shape = BLOCK_UPDATES_OLD
    while j < nrefs and j - i < FAST_BLOCK_ROWS:
        m = &refs[j]
        p = m.p
        if j + BLOCK_PREFETCH < nrefs:
            # (the first touch of each message: ask for the one BLOCK_PREFETCH ahead)
            pgo_prefetch(refs[j + BLOCK_PREFETCH].p)
        if m.n < 8 + xo or (j > i and nb + m.n > FAST_BLOCK_BYTES):
            break
        t = p[0]
        if shape == BLOCK_DELETES:
            if t != MSG_DELETE or (p[5 + xo] != TUPLE_KEY and p[5 + xo] != TUPLE_OLD):
                break
        elif shape == BLOCK_UPDATES_OLD:
            if t != MSG_UPDATE or (p[5 + xo] != TUPLE_KEY and p[5 + xo] != TUPLE_OLD):
                break
        elif (t != MSG_INSERT and t != MSG_UPDATE) or p[5 + xo] != TUPLE_NEW:
            if not (mix and t == MSG_DELETE and (p[5 + xo] == TUPLE_KEY or p[5 + xo] == TUPLE_OLD)):
                break
            dels = True
        if pgo_be32(p + 1 + xo) != relid or pgo_be16s(p + 6 + xo) != ncols:
            break
        nb += m.n
        j += 1
    olds[0] = BLOCK_MIXED if dels else shape
    nbytes[0] = nb
    return j


cdef inline Py_ssize_t prefetch_msgs(const MsgRef *refs, Py_ssize_t fetch, Py_ssize_t upto) noexcept nogil:
    """Ask for the cache lines of messages refs[fetch..upto) (a share of the next
    block's, while this block's values are written), so that their first touch in
    block_end finds them in cache instead of waiting for memory. Returns upto (fetch
    when upto is not past it)."""
    cdef const unsigned char *q
    while fetch < upto:
        q = refs[fetch].p
        pgo_prefetch(q)                  # (a hint: never faults, never read)
        if refs[fetch].n > 64:
            pgo_prefetch(q + 64)
        if refs[fetch].n > 128:
            pgo_prefetch(q + refs[fetch].n - 1)
        fetch += 1
    return fetch


cdef inline Py_ssize_t prefetch_end(Py_ssize_t i, Py_ssize_t j, Py_ssize_t nrefs) noexcept nogil:
    """The end of the messages after a block refs[i..j) that it prefetches: as many as
    the block has (the next block's most, when blocks are long), so that a run of short
    blocks asks for each message once and not FAST_BLOCK_ROWS times."""
    cdef Py_ssize_t e = j + (j - i)
    return e if e < nrefs else nrefs


cdef struct CpTables:        # the row pass's value tables, laid out in a scratch Buf
    const unsigned char **vp
    int32_t *vn
    uint8_t *ckind
    const unsigned char **vp2
    int32_t *vn2
    uint8_t *ckind2


cdef int cp_tables(Buf *scratch, Py_ssize_t stride, int ncols, bint two, CpTables *t) noexcept nogil:
    """The row pass's tables for `stride` rows of ncols columns, in scratch: the pointer
    tables first, then the lengths, then the kind bytes, so that every table is aligned.
    The second set (vp2, vn2, ckind2) takes the new tuple of updates with an old one
    (two); otherwise it is the first (the tuple is the row's only image). -1: no memory."""
    cdef Py_ssize_t need = 2 * (stride * ncols * 12 + ncols)
    if scratch.cap < need:
        scratch.len = 0
        if buf_reserve(scratch, need) < 0:
            return -1
    t.vp = <const unsigned char **>scratch.data
    t.vn = <int32_t *>(scratch.data + 16 * stride * ncols)
    t.ckind = <uint8_t *>(scratch.data + 24 * stride * ncols)
    if two:
        t.vp2 = <const unsigned char **>(scratch.data + 8 * stride * ncols)
        t.vn2 = <int32_t *>(scratch.data + 20 * stride * ncols)
        t.ckind2 = <uint8_t *>(scratch.data + 24 * stride * ncols + ncols)
    else:
        t.vp2 = t.vp
        t.vn2 = t.vn
        t.ckind2 = t.ckind
    return 0


cdef inline Py_ssize_t cp_tuple(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int ncols,
                                 const unsigned char **vp, int32_t *vn, Py_ssize_t stride,
                                 uint8_t *ckind) noexcept nogil:
    """The row pass over one TupleData's columns from p[pos] (after its column count):
    vp/vn[column * stride] = the value's bytes and length, -1 for a null; ckind[column]
    (0 until the column's first value) the kind byte of its values, 't' or 'b'. Returns
    the position after the tuple, or -1 for anything else (a 'u', a column whose kind
    changes, a bad length, bytes missing)."""
    cdef Py_ssize_t at = 0, rem
    cdef int c
    cdef uint8_t kind
    cdef int32_t n
    for c in range(ncols):
        rem = end - pos
        if rem >= 5:                             # (room for a kind byte and a length)
            kind = p[pos]
            if kind == COL_NULL:                      # 'n'
                vn[at] = -1
                pos += 1
            else:
                if kind != ckind[c] or kind == 0:
                    # (a kind byte 0 equals the "no kind yet" of ckind: it must not pass
                    # for a value, or a column null in the block's other rows would be
                    # stored as null in every row, this value lost)
                    if ckind[c] != 0 or (kind != COL_TEXT and kind != COL_BINARY):
                        return -1
                    ckind[c] = kind
                n = pgo_be32s(p + pos + 1)
                if <size_t>n > <size_t>(rem - 5):   # (negative lengths wrap)
                    return -1
                vp[at] = p + pos + 5
                vn[at] = n
                pos += 5 + n
        elif pos < end and p[pos] == COL_NULL:        # a null among the last bytes
            vn[at] = -1
            pos += 1
        else:
            return -1
        at += stride
    return pos


cdef inline bint cp_tuple2(const unsigned char *p, Py_ssize_t *pos_a, Py_ssize_t end,
                           const unsigned char *q, Py_ssize_t *pos_b, Py_ssize_t qend, int ncols,
                           const unsigned char **vp, int32_t *vn, Py_ssize_t stride,
                           const uint8_t *ckind) noexcept nogil:
    """cp_tuple over two TupleData at once, p's row into vp/vn[column * stride] and q's
    into the next row (vp/vn[column * stride + 1]), in lockstep: each value's position
    hangs on the length before it, so one tuple is a chain of dependent loads; two
    independent chains interleaved let the core overlap them (a wide row is longer than
    the core's window, so it does not overlap rows on its own). Takes only what
    cp_tuple takes without changing ckind: a null, or a value of its column's kind.
    Returns 1 with both positions advanced, or 0 (anything else: nothing of ckind
    changed, the positions left as they were), and the caller does the rows one by one
    with cp_tuple, which then decides."""
    cdef Py_ssize_t a = pos_a[0], b = pos_b[0], at = 0
    cdef int c
    cdef uint8_t k
    for c in range(ncols):
        k = ckind[c]
        pgo_prefetch(p + a + ROW_PREFETCH)         # (a hint: never faults, never read)
        pgo_prefetch(q + b + ROW_PREFETCH)
        if not cp_value(p, &a, end, k, &vp[at], &vn[at]):
            return 0
        if not cp_value(q, &b, qend, k, &vp[at + 1], &vn[at + 1]):
            return 0
        at += stride
    pos_a[0] = a
    pos_b[0] = b
    return 1


cdef inline bint cp_value(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, uint8_t k,
                          const unsigned char **vp, int32_t *vn) noexcept nogil:
    """One value of cp_tuple2 at p[*pos]: a null, or a value of kind k (a column's kind,
    0 for none yet, which no value matches). 0: anything else, *pos left as it was."""
    cdef Py_ssize_t at = pos[0]
    cdef uint8_t kind
    cdef int32_t n
    if end - at >= 5:
        kind = p[at]
        if kind == COL_NULL:                          # 'n'
            vn[0] = -1
            pos[0] = at + 1
            return 1
        if kind != k or k == 0:
            return 0
        n = pgo_be32s(p + at + 1)
        if <size_t>n > <size_t>(end - at - 5):   # (negative lengths wrap)
            return 0
        vp[0] = p + at + 5
        vn[0] = n
        pos[0] = at + 5 + n
        return 1
    if at < end and p[at] == COL_NULL:                # a null among the last bytes
        vn[0] = -1
        pos[0] = at + 1
        return 1
    return 0


cdef inline bint cp_pair(const MsgRef *refs, Py_ssize_t r, int ncols, Py_ssize_t stride,
                         const unsigned char **vp, int32_t *vn, const uint8_t *ckind,
                         const unsigned char **vp2, int32_t *vn2, const uint8_t *ckind2,
                         bint two, int xo) noexcept nogil:
    """Rows r and r + 1 of cp_rows in lockstep (cp_tuple2): 1 when both are read whole,
    0 when cp_rows must take them one by one (nothing of ckind/ckind2 changed)."""
    cdef const unsigned char *p = refs[r].p
    cdef const unsigned char *q = refs[r + 1].p
    cdef Py_ssize_t end = refs[r].n, qend = refs[r + 1].n
    cdef Py_ssize_t a = 8 + xo, b = 8 + xo
    if not cp_tuple2(p, &a, end, q, &b, qend, ncols, vp + r, vn + r, stride, ckind):
        return 0
    if two:
        if (end - a < 3 or p[a] != TUPLE_NEW or pgo_be16s(p + a + 1) != ncols
                or qend - b < 3 or q[b] != TUPLE_NEW or pgo_be16s(q + b + 1) != ncols):
            return 0
        a += 3
        b += 3
        if not cp_tuple2(p, &a, end, q, &b, qend, ncols, vp2 + r, vn2 + r, stride, ckind2):
            return 0
    return a == end and b == qend


cdef Py_ssize_t cp_rows(const MsgRef *refs, Py_ssize_t nrows, int ncols, Py_ssize_t stride,
                        const unsigned char **vp, int32_t *vn, uint8_t *ckind,
                        const unsigned char **vp2, int32_t *vn2, uint8_t *ckind2,
                        bint two, int xo) noexcept nogil:
    """The row pass over refs[0..nrows): each starts with an I/U/D header whose TupleData
    has ncols columns, read from byte 8 + xo on (xo: 4 for a streamed change's xid)
    into vp/vn/ckind (cp_tuple, at row r:
    [column * stride + r]). two: updates with an old tuple, whose new tuple ('N', the
    column count, the columns) follows the old one and goes into vp2/vn2/ckind2. Returns
    the rows read whole: it stops at a message with anything else (or bytes left over),
    which the row-wise scan then takes."""
    cdef Py_ssize_t r = 0, pos, end
    cdef const unsigned char *p
    while r < nrows:
        if r + 1 < nrows and cp_pair(refs, r, ncols, stride, vp, vn, ckind, vp2, vn2, ckind2, two, xo):
            r += 2
            continue
        p = refs[r].p
        end = refs[r].n
        pos = cp_tuple(p, 8 + xo, end, ncols, vp + r, vn + r, stride, ckind)
        if pos < 0:
            return r
        if two:
            if end - pos < 3 or p[pos] != TUPLE_NEW or pgo_be16s(p + pos + 1) != ncols:
                return r
            pos = cp_tuple(p, pos + 3, end, ncols, vp2 + r, vn2 + r, stride, ckind2)
            if pos < 0:
                return r
        if pos != end:
            return r
        r += 1
    return nrows


cdef inline int ev_room(Column *vals, Py_ssize_t need) noexcept nogil:
    """ev_tuple_full's room: `need` more bytes in the values' data within the int32
    offsets' range. 0; -2 no memory; -1 past the range (the row-wise scan reports)."""
    if vals.data.cap - vals.data.len < need and buf_reserve(&vals.data, need) < 0:
        return -2
    if vals.data.len + need > 0x7FFFFFFF:
        return -1
    return 0


cdef Py_ssize_t ev_tuple_full(MapB *mb, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                              int ncols, const unsigned char *names, const int32_t *name_end,
                              const int32_t *ctype, FmtMemo *memo) noexcept nogil:
    """ev_tuple of a tuple with every column (not a 'K' image), the change-event rows'
    most common case, with the checks a value repeats made once per row (ev_room): the
    room of the values' bytes and their int32 offsets' range. A text value's bytes are
    the tuple's, so the tuple's bytes left bound them all; a formatted value reserves
    its own room and may take up to `slack` bytes more than its bytes (a numeric can
    take more: the room is then checked again). A text value is copied without looking
    at its column's type (a text-like type's binary form is its text too)."""
    cdef Column *vals
    cdef int c, rc
    cdef int32_t n, k = 0, vend
    cdef uint8_t kind
    cdef const unsigned char *v
    cdef const char *why = NULL
    cdef unsigned char *dd
    cdef unsigned char *od
    cdef Py_ssize_t dl, ol, vl, slack
    if map_begin(mb) < 0:
        return -2
    rc = map_keys_all(mb, names, name_end, ncols)
    if rc != 0:
        return -1 if rc == -2 else -2
    vals = mb.values
    if vals.offsets.cap - vals.offsets.len < 4 * ncols and buf_reserve(&vals.offsets, 4 * ncols) < 0:
        return -2
    slack = EV_SLACK_PER_COLUMN * ncols
    rc = ev_room(vals, end - pos + slack)
    if rc < 0:
        return rc
    # (the column's buffers in locals: see ev_tuple)
    dd = vals.data.data
    dl = vals.data.len
    od = vals.offsets.data
    ol = vals.offsets.len
    vl = vals.length
    for c in range(ncols):
        if pos >= end:
            pos = -1
            break
        kind = p[pos]
        if kind == COL_NULL:                          # 'n'
            pos += 1
            vals.data.len = dl
            vals.offsets.len = ol
            vals.length = vl
            if col_end_row(vals, 0, 0) < 0:
                return -2
            dd = vals.data.data
            dl = vals.data.len
            od = vals.offsets.data
            ol = vals.offsets.len
            vl = vals.length
            continue
        if (kind != COL_TEXT and kind != COL_BINARY) or end - pos < 5:
            pos = -1
            break
        n = pgo_be32s(p + pos + 1)
        if <size_t>n > <size_t>(end - pos - 5):      # (negative lengths wrap)
            pos = -1
            break
        v = p + pos + 5
        pos += 5 + n
        if kind == COL_BINARY:
            k = ctype[4 * c]
        if kind == COL_TEXT or k == K_TEXT or k == K_BPCHAR or k == K_JSON:
            if not copy_ascii(dd + dl, v, n):
                if ctype[4 * c] == K_CHAR or utf8_invalid_at(v, n) >= 0:
                    pos = -1
                    break
            dl += n
        else:
            vals.data.len = dl
            rc = fmt_column_value(k, ctype + 4 * c, v, n, &vals.data, memo + c, &why)
            if rc < 0:
                pos = -1
                break
            slack -= (vals.data.len - dl) - (5 + n)
            dd = vals.data.data
            dl = vals.data.len
            if slack < 0:
                # (a long text: room again for the values left, as at the start)
                slack = EV_SLACK_PER_COLUMN * ncols
                rc = ev_room(vals, end - pos + slack)
                if rc < 0:
                    pos = rc
                    break
                dd = vals.data.data
        vend = <int32_t>dl
        memcpy(od + ol, &vend, 4)
        ol += 4
        if vals.nulls and bit_set(&vals.validity, vl, 1) < 0:
            pos = -2
            break
        vl += 1
    vals.data.len = dl
    vals.offsets.len = ol
    vals.length = vl
    if pos < 0:
        return pos
    if map_end_row(mb, 1) < 0:
        return -2
    return pos


cdef Py_ssize_t ev_tuple(MapB *mb, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                         int ncols, const unsigned char *names, const int32_t *name_end,
                         const unsigned char *is_key, bint key_only, const int32_t *ctype,
                         FmtMemo *memo) noexcept nogil:
    """One TupleData of ncols columns, read from p[pos] (after its column count), as one
    row of a change-event map, read and written in one pass, with exactly the entries
    _scan_tuple writes. Returns the position after the tuple; -1 for what this loop
    leaves to the row-wise scan, which then writes the row or reports it (a 'u', a kind
    byte other than n/t/b, a bad length, bytes missing, a high-bit "char", text that is
    not UTF-8, a binary value the formatter rejects, 2 GiB of values); -2 no memory.
    On -1 and -2 the row is left begun: map_truncate drops its entries. key_only: a 'K'
    image, whose entries are the key columns. memo: the columns' FmtMemo (dates,
    timestamps)."""
    if not key_only and (pos >= end or p[pos] != COL_BINARY):
        # (a text-mode tuple: in binary mode the loop below formats values as fast)
        return ev_tuple_full(mb, p, pos, end, ncols, names, name_end, ctype, memo)
    cdef Column *vals
    cdef int c, rc
    cdef int32_t n, k, vend
    cdef uint8_t kind
    cdef const unsigned char *v
    cdef const char *why = NULL
    cdef unsigned char *dd
    cdef unsigned char *od
    cdef Py_ssize_t dl, dc, ol, vl
    if map_begin(mb) < 0:
        return -2
    if not key_only:
        rc = map_keys_all(mb, names, name_end, ncols)
        if rc != 0:
            return -1 if rc == -2 else -2
    vals = mb.values
    # room for the row's value offsets: each value's end is one store below
    if vals.offsets.cap - vals.offsets.len < 4 * ncols and buf_reserve(&vals.offsets, 4 * ncols) < 0:
        return -2
    # the values column's buffers in locals (a store through a byte pointer may alias
    # any field of the Column, and the compiler reloaded them after every value),
    # written back before anything else reads the column and before returning
    dd = vals.data.data
    dl = vals.data.len
    dc = vals.data.cap
    od = vals.offsets.data
    ol = vals.offsets.len
    vl = vals.length
    for c in range(ncols):
        if pos >= end:
            pos = -1
            break
        kind = p[pos]
        if kind == COL_NULL:                          # 'n'
            n = -1
            pos += 1
        elif (kind != COL_TEXT and kind != COL_BINARY) or end - pos < 5:
            pos = -1
            break
        else:
            n = pgo_be32s(p + pos + 1)
            if <size_t>n > <size_t>(end - pos - 5):  # (negative lengths wrap)
                pos = -1
                break
            v = p + pos + 5
            pos += 5 + n
        if key_only:
            if not is_key[c]:
                continue                         # 'K' image: not part of the key
            rc = map_key(mb, names, name_end, c)
            if rc != 0:
                pos = -1 if rc == -2 else -2
                break
        if n < 0:
            vals.data.len = dl
            vals.offsets.len = ol
            vals.length = vl
            if col_end_row(vals, 0, 0) < 0:
                return -2
            dd = vals.data.data
            dl = vals.data.len
            dc = vals.data.cap
            od = vals.offsets.data
            ol = vals.offsets.len
            vl = vals.length
            continue
        k = ctype[4 * c]
        if kind == COL_TEXT or k == K_TEXT or k == K_BPCHAR or k == K_JSON:
            # the text as sent, once checked (a text-like type's binary form is its text)
            if dc - dl < n:
                vals.data.len = dl
                if buf_reserve(&vals.data, n) < 0:
                    pos = -2
                    break
                dd = vals.data.data
                dc = vals.data.cap
            if not copy_ascii(dd + dl, v, n):
                if k == K_CHAR or utf8_invalid_at(v, n) >= 0:
                    pos = -1
                    break
            dl += n
        else:
            vals.data.len = dl
            rc = fmt_column_value(k, ctype + 4 * c, v, n, &vals.data, memo + c, &why)
            dd = vals.data.data
            dl = vals.data.len
            dc = vals.data.cap
            if rc < 0:
                pos = -1
                break
        if dl > 0x7FFFFFFF:
            pos = -1                             # (int32 offsets: the row-wise scan reports)
            break
        vend = <int32_t>dl
        memcpy(od + ol, &vend, 4)
        ol += 4
        if vals.nulls and bit_set(&vals.validity, vl, 1) < 0:
            pos = -2
            break
        vl += 1
    vals.data.len = dl
    vals.offsets.len = ol
    vals.length = vl
    if pos < 0:
        return pos
    if map_end_row(mb, 1) < 0:
        return -2
    return pos


cdef inline int cp_validity_room(Column *col, Py_ssize_t rows) noexcept nogil:
    """Room in a materialised validity bitmap for `rows` more rows."""
    cdef Py_ssize_t need = ((col.length + rows + 7) >> 3) - col.validity.len
    if need > 0 and col.validity.cap - col.validity.len < need:
        return buf_reserve(&col.validity, need)
    return 0


cdef inline int cp_null(Column *col, Py_ssize_t left) noexcept nogil:
    """Append a null (room reserved by reserve_block; validity room by the caller once
    the bitmap exists). `left`: rows of the block still to come, this one included."""
    cdef Py_ssize_t byte = col.length >> 3
    cdef int32_t off
    if col.nulls and (col.layout == LAYOUT_FIXED or col.layout == LAYOUT_BOOL
                      or (col.layout == LAYOUT_VARLEN and col.offsets.len != 0)):
        if col.layout == LAYOUT_FIXED:
            col_zero_fixed(col)
        elif col.layout == LAYOUT_VARLEN:
            off = <int32_t>col.data.len
            memcpy(col.offsets.data + col.offsets.len, &off, 4)
            col.offsets.len += 4
        elif byte < col.data.len:
            col.data.data[byte] &= <unsigned char>~(1 << (col.length & 7))
        else:
            col.data.data[byte] = 0
            col.data.len = byte + 1
        if byte < col.validity.len:
            col.validity.data[byte] &= <unsigned char>~(1 << (col.length & 7))
        else:
            col.validity.data[byte] = 0
            col.validity.len = byte + 1
        col.nulls += 1
        # (kept apart: GCC joins the two neighbours' increments into one 16-byte load
        # and store, and that load, right after the 8-byte store of the last value's
        # length, cannot be forwarded and stalls: a third of cp_null's time)
        pgo_compiler_barrier()
        col.length += 1
        return 0
    # the column's first null (the bitmap is materialised here), or a list column
    if col_end_row(col, 0, 0) < 0:
        return -1
    return cp_validity_room(col, left - 1)


cdef struct CpSwap4:
    char unused
cdef struct CpSwap8:
    char unused
cdef struct CpBinTs:
    char unused
cdef struct CpBinBool:
    char unused
cdef struct CpAscii:
    char unused
cdef struct CpTxtInt4:
    char unused
cdef struct CpTxtInt8:
    char unused
cdef struct CpTxtTs:
    char unused
cdef struct CpTxtBool:
    char unused
cdef struct CpBinDec18:
    char unused
cdef struct CpTxtFloat8:
    char unused
cdef struct CpTxtDec18:
    char unused
cdef struct CpTxtUuid:
    char unused
cdef struct CpBinJsonb:
    char unused
cdef struct CpParser:
    char unused
ctypedef fused cp_form_t:
    CpSwap4
    CpSwap8
    CpBinTs
    CpBinBool
    CpAscii
    CpTxtInt4
    CpTxtInt8
    CpTxtTs
    CpTxtBool
    CpBinDec18
    CpTxtFloat8
    CpTxtDec18
    CpTxtUuid
    CpBinJsonb
    CpParser


cdef Py_ssize_t cp_loop(Column *col, value_fn fn, const unsigned char **vp, const int32_t *vn,
                        Py_ssize_t nrows, int *builder_rc, cp_form_t *form) noexcept nogil:
    """Store rows 0..nrows of one column whose values have one inline form (form's type,
    a compile-time tag: each form is its own C loop). A value not of the form's common
    shape takes fn, the column's parser, exactly as in scan_typed_core. Returns nrows,
    or the row it stopped at with the column as it was before that row: a value fn
    rejects or marks special, or a builder that cannot grow (*builder_rc < 0).
    The inline forms write through locals (dd/dl: data and its length, od/ol: offsets,
    length): a store through a byte pointer may alias any field of *col, so the C
    compiler would reload col's fields after each one. They go back to *col before
    anything else that reads it (cp_null, fn) and at the return."""
    cdef Py_ssize_t r = 0, r0, byte
    cdef int32_t n, off
    cdef const unsigned char *p
    cdef const char *why = NULL
    cdef bint ok, neg, bv, nulls
    cdef uint32_t u32
    cdef int64_t s64
    cdef uint64_t v
    cdef uint64_t words[2]
    cdef double f64
    cdef int rc, j
    cdef unsigned char *dd
    cdef unsigned char *od
    cdef Py_ssize_t dl, ol, length
    if col.nulls and cp_validity_room(col, nrows) < 0:
        builder_rc[0] = -1
        return 0
    dd = col.data.data
    dl = col.data.len
    od = col.offsets.data
    ol = col.offsets.len
    length = col.length
    nulls = col.nulls != 0
    while r < nrows:
        if not nulls and (cp_form_t is CpSwap4 or cp_form_t is CpSwap8 or cp_form_t is CpBinTs
                          or cp_form_t is CpAscii):
            # the common case in a tight loop: no validity bitmap to keep, values of the
            # form's one shape; the first one that is not goes on below
            r0 = r
            if cp_form_t is CpSwap4:
                while r < nrows and vn[r] == 4:
                    u32 = pgo_be32(vp[r])
                    memcpy(dd + dl, &u32, 4)
                    dl += 4
                    r += 1
            elif cp_form_t is CpSwap8:
                while r < nrows and vn[r] == 8:
                    s64 = pgo_be64s(vp[r])
                    memcpy(dd + dl, &s64, 8)
                    dl += 8
                    r += 1
            elif cp_form_t is CpBinTs:
                while r < nrows and vn[r] == 8:
                    s64 = pgo_be64s(vp[r])
                    if not (PGO_MIN_TIMESTAMP <= s64 < INT64_MAX - PGO_UNIX_EPOCH_USECS):
                        break
                    s64 += PGO_UNIX_EPOCH_USECS
                    memcpy(dd + dl, &s64, 8)
                    dl += 8
                    r += 1
            elif cp_form_t is CpAscii:
                if ol != 0:
                    while r < nrows and vn[r] >= 0 and copy_ascii(dd + dl, vp[r], vn[r]):
                        dl += vn[r]
                        off = <int32_t>dl
                        memcpy(od + ol, &off, 4)
                        ol += 4
                        r += 1
            length += r - r0
            if r >= nrows:
                break
        n = vn[r]
        if n < 0 and nulls and (col.layout == LAYOUT_FIXED and (col.fixed_width == 8 or col.fixed_width == 4
                                                                or col.fixed_width == 16)
                                or col.layout == LAYOUT_VARLEN and ol != 0 or col.layout == LAYOUT_BOOL):
            # a null where the validity bitmap exists (its room made above): cp_null's
            # common case here, through the locals (the columns a key image leaves out
            # are null in every delete of a mixed block)
            if col.layout == LAYOUT_FIXED:
                words[0] = 0
                words[1] = 0
                if col.fixed_width == 8:
                    memcpy(dd + dl, words, 8)
                elif col.fixed_width == 4:
                    memcpy(dd + dl, words, 4)
                else:
                    memcpy(dd + dl, words, 16)
                dl += col.fixed_width
            elif col.layout == LAYOUT_VARLEN:
                off = <int32_t>dl
                memcpy(od + ol, &off, 4)
                ol += 4
            else:
                byte = length >> 3
                if byte < dl:
                    dd[byte] &= <unsigned char>~(1 << (length & 7))
                else:
                    dd[byte] = 0
                    dl = byte + 1
            byte = length >> 3
            if byte < col.validity.len:
                col.validity.data[byte] &= <unsigned char>~(1 << (length & 7))
            else:
                col.validity.data[byte] = 0
                col.validity.len = byte + 1
            col.nulls += 1
            length += 1
            r += 1
            continue
        if n < 0:
            col.data.len = dl
            col.offsets.len = ol
            col.length = length
            if cp_null(col, nrows - r) < 0:
                builder_rc[0] = -1
                return r
            dd = col.data.data
            dl = col.data.len
            od = col.offsets.data
            ol = col.offsets.len
            length = col.length
            nulls = True
            r += 1
            continue
        p = vp[r]
        ok = False
        if cp_form_t is CpSwap4:
            if n == 4:
                u32 = pgo_be32(p)
                memcpy(dd + dl, &u32, 4)
                dl += 4
                ok = True
        elif cp_form_t is CpSwap8 or cp_form_t is CpBinTs:
            if n == 8:
                s64 = pgo_be64s(p)
                if cp_form_t is CpSwap8:
                    ok = True
                elif PGO_MIN_TIMESTAMP <= s64 < INT64_MAX - PGO_UNIX_EPOCH_USECS:
                    s64 += PGO_UNIX_EPOCH_USECS
                    ok = True
                if ok:
                    memcpy(dd + dl, &s64, 8)
                    dl += 8
        elif cp_form_t is CpBinBool or cp_form_t is CpTxtBool:
            if n == 1:
                if cp_form_t is CpTxtBool:
                    bv = p[0] == 116
                    ok = p[0] == 116 or p[0] == 102
                else:
                    bv = p[0] != 0
                    ok = True
                if ok:
                    byte = length >> 3
                    if byte < dl:
                        dd[byte] = <unsigned char>((dd[byte] & ~(1 << (length & 7))) | (bv << (length & 7)))
                    else:
                        dd[byte] = <unsigned char>bv
                        dl = byte + 1
        elif cp_form_t is CpAscii:
            if ol != 0 and copy_ascii(dd + dl, p, n):
                dl += n
                off = <int32_t>dl
                memcpy(od + ol, &off, 4)
                ol += 4
                ok = True
        elif cp_form_t is CpTxtInt4 or cp_form_t is CpTxtInt8:
            # (the value starts at least 13 bytes into its message: digits.h may read
            # the 7 bytes before it)
            neg = n > 0 and p[0] == 45
            j = 1 if neg else 0
            if 0 < n - j <= 16 and pgo_digits16(p + j, n - j, &v):
                s64 = -<int64_t>v if neg else <int64_t>v
                if cp_form_t is CpTxtInt8:
                    memcpy(dd + dl, &s64, 8)
                    dl += 8
                    ok = True
                elif INT32_MIN <= s64 <= INT32_MAX:
                    u32 = <uint32_t><int32_t>s64
                    memcpy(dd + dl, &u32, 4)
                    dl += 4
                    ok = True
        elif cp_form_t is CpBinDec18:
            if bin_decimal18_fast(col, p, n, words):
                memcpy(dd + dl, words, 16)
                dl += 16
                ok = True
        elif cp_form_t is CpTxtFloat8:
            if text_float(p, n, False, &f64) == 0:
                memcpy(dd + dl, &f64, 8)
                dl += 8
                ok = True
        elif cp_form_t is CpTxtDec18:
            if decimal18_fast(col, p, n, &s64):
                words[0] = <uint64_t>s64
                words[1] = <uint64_t>0xFFFFFFFFFFFFFFFFULL if s64 < 0 else 0
                memcpy(dd + dl, words, 16)
                dl += 16
                ok = True
        elif cp_form_t is CpBinJsonb:
            # (jsonb_send: a version byte, 1, then the text; ASCII text copied as is)
            if ol != 0 and n >= 1 and p[0] == 1 and copy_ascii(dd + dl, p + 1, n - 1):
                dl += n - 1
                off = <int32_t>dl
                memcpy(od + ol, &off, 4)
                ol += 4
                ok = True
        elif cp_form_t is CpTxtUuid:
            # (as PostgreSQL prints it; room for 16 bytes is reserved, and a value that
            # is not of this shape takes fn, which overwrites what this wrote)
            if n == 36 and pgo_uuid36(p, dd + dl):
                dl += 16
                ok = True
        elif cp_form_t is CpTxtTs:
            # ts_memo_hit, written out here with the common tail's C always inlined
            # (the profile-guided build made ts_memo_hit a call per value), the other
            # shapes (fractions of a second, a zone with minutes) through ts_tail; a
            # value neither takes goes to fn, which looks again and parses it whole
            if col.memo_set and n >= 19:
                memcpy(&words[0], p, 8)
                memcpy(&words[1], p + 5, 8)
                if words[0] == col.memo_k0 and words[1] == col.memo_k1:
                    rc = pgo_ts_tail_common(p, n, col.kind == K_TIMESTAMPTZ, &s64)
                    if rc > 0:
                        rc = ts_tail(p, n, col.kind == K_TIMESTAMPTZ, &s64)
                    if rc == 0:
                        s64 += col.memo_base
                        memcpy(dd + dl, &s64, 8)
                        dl += 8
                        ok = True
        if ok:
            if nulls:
                byte = length >> 3
                if byte < col.validity.len:
                    col.validity.data[byte] |= <unsigned char>(1 << (length & 7))
                else:
                    col.validity.data[byte] = 1
                    col.validity.len = byte + 1
            length += 1
        else:
            col.data.len = dl
            col.offsets.len = ol
            col.length = length
            rc = fn(col, p, n, &why)
            if rc != 0:
                col_discard_partial(col)
                return r
            rc = col_end_valid(col)
            if rc < 0:
                builder_rc[0] = rc
                return r
            dd = col.data.data
            dl = col.data.len
            od = col.offsets.data
            ol = col.offsets.len
            length = col.length
            nulls = col.nulls != 0
        r += 1
    col.data.len = dl
    col.offsets.len = ol
    col.length = length
    return nrows


cdef inline void cp_clear_bits(Buf *b, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """Bits [start, end) of a bitmap cleared, its length extended to cover them (room
    reserved); the bits below start kept."""
    cdef Py_ssize_t b0 = start >> 3
    cdef Py_ssize_t newlen = (end + 7) >> 3
    if start & 7:
        if b0 < b.len:
            b.data[b0] &= <unsigned char>((1 << (start & 7)) - 1)
        else:
            b.data[b0] = 0
        b0 += 1
    if newlen > b0:
        memset(b.data + b0, 0, <size_t>(newlen - b0))
    if newlen > b.len:
        b.len = newlen


cdef Py_ssize_t cp_all_null(Column *col, value_fn fn, const unsigned char **vp, const int32_t *vn,
                            Py_ssize_t nrows, int *builder_rc) noexcept nogil:
    """The column pass of a column null in every row of the block (a delete's key image
    leaves the other columns out): all rows at once, zeros and cleared bits, where the
    bitmap exists and the layout is a flat one; else row by row."""
    cdef Py_ssize_t r = 0, rows, start, end
    cdef int32_t off
    if nrows == 0:
        return 0
    if col.nulls == 0 or (col.layout == LAYOUT_VARLEN and col.offsets.len == 0):
        if cp_null(col, nrows) < 0:         # (materialises the bitmap / offsets[0])
            builder_rc[0] = -1
            return 0
        r = 1
    if col.layout != LAYOUT_FIXED and col.layout != LAYOUT_BOOL and col.layout != LAYOUT_VARLEN:
        return r + cp_loop(col, fn, vp + r, vn + r, nrows - r, builder_rc, <CpParser *>NULL)
    rows = nrows - r
    if rows == 0:
        return nrows
    if cp_validity_room(col, rows) < 0:
        builder_rc[0] = -1
        return r
    start = col.length
    end = start + rows
    cp_clear_bits(&col.validity, start, end)
    if col.layout == LAYOUT_FIXED:
        memset(col.data.data + col.data.len, 0, <size_t>(rows * col.fixed_width))
        col.data.len += rows * col.fixed_width
    elif col.layout == LAYOUT_BOOL:
        cp_clear_bits(&col.data, start, end)
    else:
        off = <int32_t>col.data.len
        for r in range(rows):
            memcpy(col.offsets.data + col.offsets.len, &off, 4)
            col.offsets.len += 4
    col.nulls += rows
    col.length = end
    return nrows


cdef Py_ssize_t cp_column(Column *col, uint8_t kind, const unsigned char **vp, const int32_t *vn,
                          Py_ssize_t nrows, int *builder_rc) noexcept nogil:
    """The column pass of one column (its values all of `kind`, 't' or 'b', or 0 when
    all are null): cp_loop in the column's inline form."""
    cdef int code = 0
    cdef value_fn fn
    if kind == COL_BINARY:
        code = col.bin_inline
        fn = col.binary_fn
    else:
        fn = col.text_fn
        if kind == COL_TEXT:
            code = col.text_inline
        else:
            return cp_all_null(col, fn, vp, vn, nrows, builder_rc)
    if code == BIN_INLINE_SWAP4:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpSwap4 *>NULL)
    if (kind == COL_BINARY and fn == bin_decimal and col.layout == LAYOUT_FIXED and col.fixed_width == 16
            and col.precision <= 18):
        # (binary numeric(p <= 18): bin_decimal18_fast's one pass, else bin_decimal)
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpBinDec18 *>NULL)
    if code == BIN_INLINE_SWAP8:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpSwap8 *>NULL)
    if code == BIN_INLINE_TIMESTAMP:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpBinTs *>NULL)
    if code == BIN_INLINE_BOOL:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpBinBool *>NULL)
    if code == BIN_INLINE_TEXT or code == TEXT_INLINE_TEXT:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpAscii *>NULL)
    if kind == COL_BINARY and fn == bn_jsonb and col.layout == LAYOUT_VARLEN:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpBinJsonb *>NULL)
    if code == TEXT_INLINE_INT4:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtInt4 *>NULL)
    if code == TEXT_INLINE_INT8:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtInt8 *>NULL)
    if code == TEXT_INLINE_TIMESTAMP:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtTs *>NULL)
    if code == TEXT_INLINE_BOOL:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtBool *>NULL)
    if kind == COL_TEXT and col.layout == LAYOUT_FIXED:
        # (float8 and numeric(p <= 18) text: the parser's result stored here, without
        # its push; anything it does not take goes to fn, which reports it)
        if fn == tx_float8 and col.fixed_width == 8:
            return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtFloat8 *>NULL)
        if fn == text_decimal and col.fixed_width == 16 and col.precision <= 18:
            return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtDec18 *>NULL)
        if fn == tx_uuid and col.fixed_width == 16:
            return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtUuid *>NULL)
    return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpParser *>NULL)


cdef inline int cp_toast_clear(Column *col, Py_ssize_t start, Py_ssize_t n) noexcept nogil:
    """The TOAST bits of rows [start, start + n) that the column pass stored, 0 (none of
    its values is a 'u'), in a column that keeps them (any_toast: it has had one since
    the last commit; col_end_row sets a bit per row there). -1: no memory."""
    cdef Buf none
    if not col.any_toast or n <= 0:
        return 0
    memset(&none, 0, sizeof(Buf))       # (no bits: all 0)
    return bits_append(&col.toast, start, &none, n)


cdef void cp_cut(Column *col, Py_ssize_t n) noexcept nogil:
    """Drop rows >= n that the column pass stored (at most a block): col_truncate, with
    the nulls of the dropped rows counted instead of the whole bitmap."""
    cdef Py_ssize_t nulls = col.nulls
    if n >= col.length:
        return
    if nulls:
        nulls -= _zero_bits_between(&col.validity, n, col.length)
    col.nulls = 0                      # (col_truncate would count them over every row)
    col_truncate(col, n)
    col.nulls = nulls
    if nulls:
        col.validity.len = (n + 7) >> 3
