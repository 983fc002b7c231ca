# The stateful columnar decoder core.
#
# DecoderCore.feed() walks a batch of pgoutput messages in C and appends every change
# of a *committed* transaction straight into typed column builders (one RelBuilders per
# relation version) and, optionally, into the generic change-event table. No Python
# object is created per row or per value on this path.
#
# Transaction handling (PROTOCOL.md §3, DESIGN.md):
#   B..C          rows are written directly; a commit advances each touched builder's
#                 watermark. A transaction still open at the end of a batch stays open in
#                 the builders: export() hands over the committed rows and moves the open
#                 transaction's rows to fresh builders (copied once), so a transaction
#                 spread over many feed() calls costs linear time.
#                 Memory bound: a transaction open at the end of a batch also gets a raw
#                 copy of its messages from its Begin (txn_carry, a Spool; the batch's
#                 part is copied once at the batch end, walking it again to find the
#                 relation version each change was checked against, so the hot path is
#                 unchanged and a transaction inside one batch costs nothing extra). When
#                 that copy exceeds max_pending_bytes at a batch end, the decoded rows are
#                 dropped (txn_spooled): from then on its changes are checked on arrival
#                 (a dry-run write, as for prepared work) and spooled, and its Commit
#                 replays the spool with the Begin's metadata. Below the limit nothing is
#                 decoded twice; above it, what was decoded before the switch is decoded
#                 again at the Commit. Origin messages are spooled too (REC_ORIGIN), so a
#                 replay gives every row the origin a direct write would have.
#   S..E / c / A  streamed changes are spooled as raw messages (with the relation
#                 version each refers to) per top-level xid, each checked on arrival by
#                 writing it (runs of one relation through the block writers,
#                 SPOOL_RUN_ROWS at a time) into the spool's own event rows (EvStore) and
#                 typed builders (Spool.tb: RelBuilders.side_copy per relation version),
#                 which keep them; a subtransaction abort truncates the spool, the event
#                 rows and the typed rows at the position where that subxid first
#                 appeared; Stream Commit appends the kept rows with its commit metadata
#                 (ev_append, RelBuilders.adopt: copies) and replays the spool only for
#                 what was not kept: rows dropped past max_pending_bytes, typed rows after
#                 a Truncate or of a column whose Arrow type waits on its values' format.
#   b..P / p, K/r prepared work is spooled (and its rows kept) per GID, appended at
#                 Commit Prepared, dropped at Rollback Prepared.
# Spools larger than max_pending_bytes spill to a temporary file.

import os as _os
import tempfile as _tempfile

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_Check

cdef extern from *:
    """
    #define PGO_UNIX_EPOCH_US 946684800000000LL
    #if defined(__GNUC__) || defined(__clang__)
    #  define pgo_prefetch(p) __builtin_prefetch((const void *)(p))
    #else
    #  define pgo_prefetch(p) ((void)0)
    #endif
    """
    int64_t PGO_UNIX_EPOCH_US
    void pgo_prefetch(const void *p) nogil

cdef enum TxnState:
    ST_NONE = 0
    ST_TXN = 1          # inside B..C
    ST_PREPARE = 2      # inside b..P
    ST_STREAM = 3       # inside S..E

cdef enum RecKind:
    REC_DML = 0         # I/U/D with a RelBuilders id
    REC_TRUNCATE = 1
    REC_MESSAGE = 2
    REC_ORIGIN = 3      # plain transactions only; rb_id holds the origin id

# record header in a spool: kind u8, in_stream u8, rb_id i32, lsn u64, len u32.
# A streamed change (REC_DML) is spooled without the xid after its type byte (that xid
# only decides where a subtransaction abort cuts, which note_xid records on arrival), so
# every REC_DML record is a plain I/U/D with its relid at byte 1, as _fast_run reads it.
DEF REC_HEAD = 18
DEF SPOOL_RUN_ROWS = 4096         # changes checked by one write (kept by the spool, or undone)
DEF EV_SPARE_MAX = 64 << 20       # an emptied spool EvStore up to this size is kept for the next


cdef struct MsgRef:
    const unsigned char *p
    Py_ssize_t n
    uint64_t lsn


cdef struct Ctx:
    # per-row metadata of the transaction whose changes are being written
    int64_t commit_lsn
    int64_t commit_ts       # Unix-epoch µs
    int64_t xid
    int64_t seq
    int32_t origin          # index into DecoderCore.origins, -1 = none


cdef struct Meta:
    Buf lsn            # int64, 0 = unknown (exported as null)
    Buf commit_lsn     # int64
    Buf commit_ts      # int64 µs since Unix epoch
    Buf xid            # int64
    Buf seq            # int64
    Buf op             # 1 byte per row: c u d t
    Buf origin         # int32 index into origins, -1 = null
    Py_ssize_t rows


cdef inline int meta_reserve(Meta *m, Py_ssize_t rows) noexcept nogil:
    """Room for `rows` more meta_put rows."""
    if (buf_reserve(&m.lsn, 8 * rows) < 0 or buf_reserve(&m.commit_lsn, 8 * rows) < 0
            or buf_reserve(&m.commit_ts, 8 * rows) < 0 or buf_reserve(&m.xid, 8 * rows) < 0
            or buf_reserve(&m.seq, 8 * rows) < 0 or buf_reserve(&m.op, rows) < 0
            or buf_reserve(&m.origin, 4 * rows) < 0):
        return -1
    return 0


cdef inline void meta_put(Meta *m, uint64_t lsn, Ctx *ctx, char op) noexcept nogil:
    """meta_append into room that meta_reserve made."""
    cdef int64_t v = <int64_t>lsn
    memcpy(m.lsn.data + m.lsn.len, &v, 8)
    m.lsn.len += 8
    memcpy(m.commit_lsn.data + m.commit_lsn.len, &ctx.commit_lsn, 8)
    m.commit_lsn.len += 8
    memcpy(m.commit_ts.data + m.commit_ts.len, &ctx.commit_ts, 8)
    m.commit_ts.len += 8
    memcpy(m.xid.data + m.xid.len, &ctx.xid, 8)
    m.xid.len += 8
    memcpy(m.seq.data + m.seq.len, &ctx.seq, 8)
    m.seq.len += 8
    m.op.data[m.op.len] = <unsigned char>op
    m.op.len += 1
    memcpy(m.origin.data + m.origin.len, &ctx.origin, 4)
    m.origin.len += 4
    m.rows += 1


cdef inline void meta_put_run(Meta *m, const MsgRef *refs, Py_ssize_t n, Ctx *ctx,
                              char op) noexcept nogil:
    """meta_put of refs[0..n) into room that meta_reserve made, one column at a time (the
    transaction's fields are the same for every row); op 0: 'c' for an insert, 'u' for
    an update, by each message's type byte. Advances ctx.seq by n."""
    cdef Py_ssize_t r
    cdef int64_t v
    cdef int64_t commit_lsn = ctx.commit_lsn, commit_ts = ctx.commit_ts
    cdef int64_t xid = ctx.xid, seq = ctx.seq
    cdef int32_t origin = ctx.origin
    cdef unsigned char *d = m.lsn.data + m.lsn.len
    for r in range(n):
        v = <int64_t>refs[r].lsn
        memcpy(d + 8 * r, &v, 8)
    d = m.commit_lsn.data + m.commit_lsn.len
    for r in range(n):
        memcpy(d + 8 * r, &commit_lsn, 8)
    d = m.commit_ts.data + m.commit_ts.len
    for r in range(n):
        memcpy(d + 8 * r, &commit_ts, 8)
    d = m.xid.data + m.xid.len
    for r in range(n):
        memcpy(d + 8 * r, &xid, 8)
    d = m.seq.data + m.seq.len
    for r in range(n):
        v = seq + r
        memcpy(d + 8 * r, &v, 8)
    d = m.op.data + m.op.len
    if op:
        memset(d, op, <size_t>n)
    else:
        for r in range(n):
            d[r] = 99 if refs[r].p[0] == 73 else 117      # 'c' / 'u'
    d = m.origin.data + m.origin.len
    for r in range(n):
        memcpy(d + 4 * r, &origin, 4)
    m.lsn.len += 8 * n
    m.commit_lsn.len += 8 * n
    m.commit_ts.len += 8 * n
    m.xid.len += 8 * n
    m.seq.len += 8 * n
    m.op.len += n
    m.origin.len += 4 * n
    m.rows += n
    ctx.seq = seq + n


cdef inline Py_ssize_t meta_nbytes(const Meta *m) noexcept nogil:
    """Bytes the metadata rows hold (what counts against max_pending_bytes)."""
    return (m.lsn.len + m.commit_lsn.len + m.commit_ts.len + m.xid.len + m.seq.len
            + m.op.len + m.origin.len)


cdef void meta_put_kept(Meta *m, const Meta *src, Py_ssize_t n, const Ctx *ctx) noexcept nogil:
    """src's n rows into room that meta_reserve made: their lsn, seq and op as written,
    ctx's commit LSN, commit time, xid and origin (rows kept for a transaction that
    commits now: ev_append, RelBuilders.adopt)."""
    cdef Py_ssize_t r
    cdef unsigned char *d
    memcpy(m.lsn.data + m.lsn.len, src.lsn.data, <size_t>(8 * n))
    memcpy(m.seq.data + m.seq.len, src.seq.data, <size_t>(8 * n))
    memcpy(m.op.data + m.op.len, src.op.data, <size_t>n)
    d = m.commit_lsn.data + m.commit_lsn.len
    for r in range(n):
        memcpy(d + 8 * r, &ctx.commit_lsn, 8)
    d = m.commit_ts.data + m.commit_ts.len
    for r in range(n):
        memcpy(d + 8 * r, &ctx.commit_ts, 8)
    d = m.xid.data + m.xid.len
    for r in range(n):
        memcpy(d + 8 * r, &ctx.xid, 8)
    d = m.origin.data + m.origin.len
    for r in range(n):
        memcpy(d + 4 * r, &ctx.origin, 4)
    m.lsn.len += 8 * n
    m.commit_lsn.len += 8 * n
    m.commit_ts.len += 8 * n
    m.xid.len += 8 * n
    m.seq.len += 8 * n
    m.op.len += n
    m.origin.len += 4 * n
    m.rows += n


cdef inline int meta_append(Meta *m, uint64_t lsn, Ctx *ctx, char op) noexcept nogil:
    cdef int64_t v = <int64_t>lsn
    cdef unsigned char o = <unsigned char>op
    if (buf_append8(&m.lsn, &v) < 0 or buf_append8(&m.commit_lsn, &ctx.commit_lsn) < 0
            or buf_append8(&m.commit_ts, &ctx.commit_ts) < 0
            or buf_append8(&m.xid, &ctx.xid) < 0 or buf_append8(&m.seq, &ctx.seq) < 0
            or buf_append1(&m.op, o) < 0 or buf_append4(&m.origin, &ctx.origin) < 0):
        return -1
    m.rows += 1
    return 0


cdef void meta_truncate(Meta *m, Py_ssize_t n) noexcept nogil:
    if n >= m.rows:
        return
    m.lsn.len = 8 * n
    m.commit_lsn.len = 8 * n
    m.commit_ts.len = 8 * n
    m.xid.len = 8 * n
    m.seq.len = 8 * n
    m.op.len = n
    m.origin.len = 4 * n
    m.rows = n


cdef int meta_split(Meta *m, Py_ssize_t n, Meta *t) noexcept nogil:
    """Move rows [n, rows) of m into the empty Meta t."""
    if (buf_split(&m.lsn, 8 * n, &t.lsn) < 0 or buf_split(&m.commit_lsn, 8 * n, &t.commit_lsn) < 0
            or buf_split(&m.commit_ts, 8 * n, &t.commit_ts) < 0 or buf_split(&m.xid, 8 * n, &t.xid) < 0
            or buf_split(&m.seq, 8 * n, &t.seq) < 0 or buf_split(&m.op, n, &t.op) < 0
            or buf_split(&m.origin, 4 * n, &t.origin) < 0):
        return -1
    t.rows = m.rows - n
    m.rows = n
    return 0


cdef void meta_free(Meta *m) noexcept nogil:
    buf_free(&m.lsn); buf_free(&m.commit_lsn); buf_free(&m.commit_ts)
    buf_free(&m.xid); buf_free(&m.seq); buf_free(&m.op); buf_free(&m.origin)
    m.rows = 0


cdef object _np_from_buf(Buf *b, object dtype, Py_ssize_t count):
    return np.frombuffer(_take_buf(b, count * np.dtype(dtype).itemsize), dtype=dtype)


# -- all-null arrays over one shared zero mapping ---------------------------------------
# A column that is null in every row (a _before field a delete's key image leaves out, a
# table with no old images, no unchanged TOAST, no origin) needs buffers of zeros as long
# as the table. They all view one read-only private anonymous mapping: its pages are the
# kernel's zero page until something writes them (nothing can), so they cost no memory
# and no page zeroing, where zeroed blocks cost a write of every byte.

import mmap as _mmap

cdef object _zero_mapping = None       # pa.Buffer over the mapping (the largest so far)


cdef object _zeros(Py_ssize_t nbytes):
    """A read-only pa.Buffer of nbytes zero bytes, page-aligned (a view of the shared
    zero mapping, grown by doubling; older, smaller mappings live on in their arrays)."""
    global _zero_mapping
    cdef Py_ssize_t size
    if _zero_mapping is None or _zero_mapping.size < nbytes:
        size = 1 << 20
        if _zero_mapping is not None:
            size = 2 * _zero_mapping.size
        while size < nbytes:
            size *= 2
        _zero_mapping = pa.py_buffer(_mmap.mmap(-1, size, flags=_mmap.MAP_PRIVATE, prot=_mmap.PROT_READ))
    return _zero_mapping.slice(0, nbytes)


cdef object _null_array(object t, Py_ssize_t n):
    """pa.nulls(n, t) with every buffer a view of the shared zero mapping (children of a
    struct all null too); pa.nulls itself for a layout not handled here."""
    cdef Py_ssize_t vb = (n + 7) >> 3, w
    if n == 0:
        return pa.nulls(0, t)
    if pa.types.is_boolean(t):
        return pa.Array.from_buffers(t, n, [_zeros(vb), _zeros(vb)], n)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return pa.Array.from_buffers(t, n, [_zeros(vb), _zeros(4 * (n + 1)), _zeros(0)], n)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return pa.Array.from_buffers(t, n, [_zeros(vb), _zeros(8 * (n + 1)), _zeros(0)], n)
    if pa.types.is_list(t) or pa.types.is_map(t):
        return pa.Array.from_buffers(t, n, [_zeros(vb), _zeros(4 * (n + 1))], n,
                                     children=[pa.array([], t).values])
    if pa.types.is_struct(t):
        return pa.Array.from_buffers(t, n, [_zeros(vb)], n,
                                     children=[_null_array(t.field(i).type, n) for i in range(t.num_fields)])
    if not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t)):
        try:
            w = t.bit_width
        except ValueError:
            w = 0
        if w and w % 8 == 0:
            return pa.Array.from_buffers(t, n, [_zeros(vb), _zeros(n * (w // 8))], n)
    return pa.nulls(n, t)


cdef object _iota_buffer = None        # pa.Buffer of int32 0, 1, 2, ... (the largest so far)


cdef object _iota32(Py_ssize_t count):
    """A read-only pa.Buffer of `count` int32: 0, 1, 2, ... (the offsets of a column of
    one byte per row, the op column): a view of one shared buffer, written once and
    grown by doubling, where each batch wrote its own (12 MB for 3 M rows)."""
    global _iota_buffer
    cdef Py_ssize_t size
    if count > 0x80000000:
        raise OverflowError("more than 2^31 rows in one batch")
    if _iota_buffer is None or _iota_buffer.size < 4 * count:
        size = 1 << 16
        if _iota_buffer is not None:
            size = 2 * (_iota_buffer.size >> 2)
        while size < count:
            size *= 2
        if size > 0x80000000:
            size = 0x80000000
        _iota_buffer = pa.py_buffer(np.arange(size, dtype=np.int32))
    return _iota_buffer.slice(0, 4 * count)


cdef object _lsn_validity(const int64_t *lsn, Py_ssize_t n, Py_ssize_t *nulls):
    """Validity bitmap of the lsn column (0 = unknown = null), or None when all are known."""
    cdef Buf b
    cdef Py_ssize_t i, zeros = 0
    for i in range(n):
        zeros += lsn[i] == 0
    nulls[0] = zeros
    if zeros == 0:
        return None
    memset(&b, 0, sizeof(Buf))
    if buf_reserve(&b, (n + 7) >> 3) < 0:
        raise MemoryError()
    memset(b.data, 0, <size_t>((n + 7) >> 3))
    for i in range(n):
        if lsn[i] != 0:
            b.data[i >> 3] |= <unsigned char>(1 << (i & 7))
    b.len = (n + 7) >> 3
    return _take_buf(&b, (n + 7) >> 3)


cdef dict meta_export(Meta *m, object origins, str prefix):
    """Arrow arrays of the metadata columns (the Meta is left empty)."""
    cdef Py_ssize_t n = m.rows
    cdef Py_ssize_t lsn_nulls = 0
    lsn_valid = _lsn_validity(<const int64_t *>m.lsn.data, n, &lsn_nulls) if n else None
    out = {}
    out[prefix + "op"] = pa.Array.from_buffers(
        pa.string(), n, [None, _iota32(n + 1), _take_buf(&m.op, n)])
    out[prefix + "lsn"] = pa.Array.from_buffers(pa.int64(), n, [lsn_valid, _take_buf(&m.lsn, 8 * n)],
                                                lsn_nulls)
    out[prefix + "commit_lsn"] = pa.array(_np_from_buf(&m.commit_lsn, np.int64, n), pa.int64())
    out[prefix + "commit_ts"] = pa.array(_np_from_buf(&m.commit_ts, np.int64, n)).view(pa.timestamp("us", tz="UTC"))
    out[prefix + "xid"] = pa.array(_np_from_buf(&m.xid, np.int64, n), pa.int64())
    out[prefix + "seq"] = pa.array(_np_from_buf(&m.seq, np.int64, n), pa.int64())
    origin = _np_from_buf(&m.origin, np.int32, n)
    if n and origin.max() >= 0:
        out[prefix + "origin"] = pa.array(origins, pa.string()).take(pa.array(origin, mask=(origin < 0)))
    else:
        out[prefix + "origin"] = _null_array(pa.string(), n)
    m.rows = 0
    return out


# -- the change-event table's map<string,string> images --------------------------

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


cdef object _strings_by_id(list values, const int32_t *ids, Py_ssize_t n):
    """pa.string() array of values[ids[i]] for i < n (null where ids[i] < 0), written
    here, a run of equal ids at a time, where pyarrow's take checks bounds and runs a
    kernel (it was about a tenth of a change-event table's decode)."""
    cdef Py_ssize_t nv = len(values), i, r, q, total = 0, nulls = 0, run, filled, step, j, nruns
    cdef int32_t k, ln, end = 0
    cdef Buf starts, offs, data, valid, runs
    cdef const Py_ssize_t *rs
    cdef const int32_t *st
    cdef const char *src
    cdef unsigned char *d
    cdef int32_t *o
    memset(&starts, 0, sizeof(Buf)); memset(&offs, 0, sizeof(Buf))
    memset(&data, 0, sizeof(Buf)); memset(&valid, 0, sizeof(Buf)); memset(&runs, 0, sizeof(Buf))
    encoded = [v.encode("utf-8") for v in values]
    blob = b"".join(encoded)
    src = PyBytes_AS_STRING(blob)
    try:
        if buf_reserve(&starts, 4 * (nv + 1)) < 0:
            raise MemoryError()
        for k in range(nv):
            memcpy(starts.data + 4 * k, &end, 4)
            end += <int32_t>len(encoded[k])
        memcpy(starts.data + 4 * nv, &end, 4)
        st = <const int32_t *>starts.data
        # the runs of rows with one name (a change-event table's rows come in runs of
        # one relation): where each starts, then n
        i = 0
        while i < n:
            k = ids[i]
            r = i + 1
            while r < n and ids[r] == k:
                r += 1
            if buf_append8(&runs, &i) < 0:
                raise MemoryError()
            if k < 0:
                nulls += r - i
            elif k >= nv:
                raise ValueError(f"name id {k} out of range ({nv} names)")
            else:
                total += <Py_ssize_t>(st[k + 1] - st[k]) * (r - i)
            i = r
        if buf_append8(&runs, &n) < 0:
            raise MemoryError()
        rs = <const Py_ssize_t *>runs.data
        nruns = (runs.len >> 3) - 1
        if total > 0x7FFFFFFF:
            raise DecodeError("the change-event table holds more than 2 GiB of names in one "
                              "batch; feed smaller batches", None, None)
        if (buf_reserve_exact(&offs, 4 * (n + 1)) < 0 or buf_reserve_exact(&data, total + 16) < 0
                or (nulls and buf_reserve_exact(&valid, (n + 7) >> 3) < 0)):
            raise MemoryError()
        if nulls:
            memset(valid.data, 0, <size_t>((n + 7) >> 3))
        o = <int32_t *>offs.data
        d = data.data
        end = 0
        o[0] = 0
        for j in range(nruns):
            # a run: the name once, then the run's bytes doubled by copies of what is
            # written (memory speed, not a store per row), the ends a progression
            i = rs[j]
            r = rs[j + 1]
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
                    valid.data[q >> 3] |= <unsigned char>(1 << (q & 7))
        offs.len = 4 * (n + 1)
        data.len = end
        valid.len = (n + 7) >> 3 if nulls else 0
        return pa.Array.from_buffers(pa.string(), n, [_take_buf(&valid, valid.len) if nulls else None,
                                                      _take_buf(&offs, offs.len), _take_buf(&data, end)],
                                     nulls)
    finally:
        buf_free(&starts); buf_free(&offs); buf_free(&data); buf_free(&valid); buf_free(&runs)


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
        kept += kinds[i] == 75 or kinds[i] == 79
    try:
        if (buf_reserve_exact(&offs, 4 * (n + 1)) < 0 or buf_reserve_exact(&data, kept + 1) < 0
                or buf_reserve_exact(&valid, ((n + 7) >> 3) + 1) < 0):
            raise MemoryError()
        o = <int32_t *>offs.data
        o[0] = 0
        for i in range(n):
            c = kinds[i]
            if c == 75 or c == 79:
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
        return pa.Array.from_buffers(pa.string(), n, [_take_buf(&valid, (n + 7) >> 3) if nulls else None,
                                                      _take_buf(&offs, 4 * (n + 1)), _take_buf(&data, end)],
                                     nulls)
    finally:
        buf_free(&offs); buf_free(&data); buf_free(&valid)


cdef object _strings_by_id_np(list values, object ids):
    """_strings_by_id over an int32 numpy array."""
    cdef const int32_t[::1] v = np.ascontiguousarray(ids, np.int32)
    if v.shape[0] == 0:
        return pa.array([], pa.string())
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
    return pa.Array.from_buffers(MAP_TYPE, n, [validity, offsets], nulls, children=[entries])


# -- the change-event table's buffers ----------------------------------------------
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


# The sizes an EvStore's buffers were last handed over with, process-wide: a new
# Decoder starts its change-event buffers at them (Buf.hint) instead of growing each from
# 64 bytes through copies (a quarter of its size, 4x at a time: 5-7 % of a decode).
# A process decodes batch after batch, often with a new Decoder each (a Spark task per
# segment); _take_buf lowers a hint when batches get much smaller, and room not written
# costs no memory (pages are touched when written, and trimmed at hand-over).
DEF EV_NBUFS = 29
cdef Py_ssize_t _ev_hint[EV_NBUFS]


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


cdef int ev_hints_take(EvStore *e) noexcept nogil:
    """Start e's empty buffers at the process's last hand-over sizes. -1: no memory."""
    cdef Buf *bufs[EV_NBUFS]
    cdef int i
    if ev_bufs(e, bufs) < 0:
        return -1
    for i in range(EV_NBUFS):
        if bufs[i].hint == 0:
            bufs[i].hint = _ev_hint[i]
    return 0


cdef void ev_hints_keep(EvStore *e) noexcept nogil:
    """Remember e's hand-over sizes (its Buf hints) for the next Decoder."""
    cdef Buf *bufs[EV_NBUFS]
    cdef int i
    if ev_bufs(e, bufs) < 0:
        return
    for i in range(EV_NBUFS):
        if bufs[i].hint:
            _ev_hint[i] = bufs[i].hint


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
    lsn, seq and everything else as written). -1: no memory, -2: past int32 offsets;
    dst is then cut back to its rows before."""
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


# -- per relation version: typed builders ------------------------------------------

cdef Py_ssize_t col_nbytes(const Column *c) noexcept nogil:
    """Bytes a column's rows hold (its element column's too)."""
    cdef Py_ssize_t n = 0
    while c != NULL:
        n += c.data.len + c.offsets.len + c.validity.len + c.toast.len
        c = c.child
    return n


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
        self.fmemo = <FmtMemo *>malloc(sizeof(FmtMemo) * (self.ncols + 1))
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
        return 0

    cdef void rollback(self) noexcept:
        cdef int i
        for i in range(self.ncols):
            col_truncate(self.cols[i], self.committed)
        if self.before != NULL:
            for i in range(self.ncols):
                col_truncate(self.before[i], self.committed_before)
        self.before_rows.len = 4 * self.committed_before
        self.before_kind.len = self.committed_before
        self.nbefore = self.committed_before
        meta_truncate(&self.meta, self.committed)
        # specials are appended in row order (old-image ones at their main row)
        while self.specials and self.specials[len(self.specials) - 1][0] >= self.committed:
            self.specials.pop()
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
        cdef list names = list(self.version.column_names)
        cdef list arrays = []
        cdef list fields = []
        binary_unknown = core.binary_unknown
        toast_masks = []
        special = core._specials_column(self, n)
        meta = meta_export(&self.meta, core.origins, "_")
        for key in ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin"):
            arrays.append(meta[key])
            fields.append(pa.field(key, meta[key].type, nullable=(key in ("_lsn", "_origin"))))
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
            fields.append(pa.field(names[i], arr.type))
        # _before: struct of the typed fields, null where no old tuple was sent
        struct_fields = fields[7:]
        m = self.nbefore
        if self.before != NULL and m:
            children = []
            for i in range(self.ncols):
                children.append(col_export(self.before[i], struct_fields[i].type).cast(struct_fields[i].type))
            dense = pa.StructArray.from_arrays(children, fields=struct_fields) if self.ncols else \
                pa.array([{}] * m, pa.struct([]))
            rows_buf = _take_buf(&self.before_rows, 4 * m)     # row index of each old image
            kinds = _take_buf(&self.before_kind, m)
            rows = <const int32_t *><size_t>rows_buf.address
            before = _spread_struct(dense, rows, m, n) if _rows_ascending(rows, m, n) else None
            if before is not None:
                before_kind = _spread_kinds(kinds, rows, m, n)
            else:                        # (a type _spread does not lay out)
                idx = np.full(n, -1, dtype=np.int32)
                idx[np.frombuffer(rows_buf, np.int32)] = np.arange(m, dtype=np.int32)
                before = dense.take(pa.array(idx, mask=(idx < 0)))
                kind_idx = np.full(n, -1, dtype=np.int32)
                kind_idx[np.frombuffer(rows_buf, np.int32)] = (
                    np.frombuffer(kinds, np.uint8) == 79).astype(np.int32)  # 0 = K, 1 = O
                before_kind = pa.array(["K", "O"], pa.string()).take(
                    pa.array(kind_idx, mask=(kind_idx < 0)))
        else:
            if self.before != NULL:
                for i in range(self.ncols):
                    col_truncate(self.before[i], 0)
            before = _null_array(pa.struct(struct_fields), n)
            before_kind = _null_array(pa.string(), n)
        self.nbefore = 0
        self.before_rows.len = 0
        self.before_kind.len = 0
        arrays.append(before)
        fields.append(pa.field("_before", before.type))
        arrays.append(before_kind)
        fields.append(pa.field("_before_kind", pa.string()))
        toast = _toast_lists(n, toast_masks, names)
        arrays.append(toast)
        fields.append(pa.field("_unchanged_toast", toast.type))
        arrays.append(special)
        fields.append(pa.field("_special", special.type))
        self.specials = []
        self.committed = 0
        self.committed_before = 0
        v = self.version
        md = {b"pgoutput_fast.relid": str(v.relid).encode(),
              b"pgoutput_fast.version": str(v.version).encode(),
              b"pgoutput_fast.from_lsn": str(v.from_lsn).encode(),
              b"pgoutput_fast.key_columns": ",".join(v.key_columns).encode("utf-8", "surrogateescape"),
              b"pgoutput_fast.replident": v.replident.encode()}
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=md))


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


cdef object _spread(object dense, const int32_t *rows, Py_ssize_t m, Py_ssize_t n):
    """The n-row array with dense[j] at row rows[j] and nulls elsewhere; None for a
    layout not handled here (the caller takes the general path)."""
    cdef Buf valid, data, offs
    cdef Py_ssize_t count = 0, j, r, w
    cdef const unsigned char *src_valid = NULL
    cdef const unsigned char *src
    cdef const int32_t *src_off
    cdef int32_t *off
    cdef int32_t cur
    t = dense.type
    if dense.offset != 0 or len(dense) != m:
        return None
    if m and dense.null_count == m:     # (a field a key image leaves out)
        return _null_array(t, n)
    bufs = dense.buffers()
    memset(&valid, 0, sizeof(Buf)); memset(&data, 0, sizeof(Buf)); memset(&offs, 0, sizeof(Buf))
    if bufs[0] is not None and dense.null_count:
        src_valid = <const unsigned char *><size_t>bufs[0].address
    try:
        if _spread_validity(&valid, src_valid, rows, m, n, &count) < 0:
            raise MemoryError()
        if pa.types.is_boolean(t):
            src = <const unsigned char *><size_t>bufs[1].address
            if _spread_validity(&data, src, rows, m, n, &j) < 0:    # the value bits, spread
                raise MemoryError()
            values = [_take_buf(&data, (n + 7) >> 3)]
            children = None
        elif (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_list(t)) and not (
                pa.types.is_large_string(t) or pa.types.is_large_binary(t)):
            src_off = <const int32_t *><size_t>bufs[1].address
            if buf_reserve_exact(&offs, 4 * (n + 1)) < 0:
                raise MemoryError()
            off = <int32_t *>offs.data
            cur = src_off[0]
            j = 0
            for r in range(n):
                off[r] = cur
                if j < m and rows[j] == r:
                    cur = src_off[j + 1]
                    j += 1
            off[n] = cur
            offs.len = 4 * (n + 1)
            if pa.types.is_list(t):
                values = [_take_buf(&offs, 4 * (n + 1))]
                children = [dense.values]
            else:
                values = [_take_buf(&offs, 4 * (n + 1)),
                          bufs[2] if bufs[2] is not None else pa.py_buffer(b"")]
                children = None
        else:
            try:
                w = t.bit_width
            except ValueError:
                return None
            if w % 8 or w == 0 or pa.types.is_nested(t) or pa.types.is_dictionary(t) \
                    or len(bufs) != 2:
                return None
            w //= 8
            src = <const unsigned char *><size_t>bufs[1].address
            if buf_reserve_exact(&data, n * w) < 0:
                raise MemoryError()
            memset(data.data, 0, <size_t>(n * w))
            if w == 8:
                for j in range(m):
                    memcpy(data.data + <Py_ssize_t>rows[j] * 8, src + j * 8, 8)
            elif w == 4:
                for j in range(m):
                    memcpy(data.data + <Py_ssize_t>rows[j] * 4, src + j * 4, 4)
            elif w == 16:
                for j in range(m):
                    memcpy(data.data + <Py_ssize_t>rows[j] * 16, src + j * 16, 16)
            else:
                for j in range(m):
                    memcpy(data.data + <Py_ssize_t>rows[j] * w, src + j * w, <size_t>w)
            data.len = n * w
            values = [_take_buf(&data, n * w)]
            children = None
        nulls = n - count
        vbuf = _take_buf(&valid, (n + 7) >> 3) if nulls else None
        return pa.Array.from_buffers(t, n, [vbuf] + values, nulls, children=children)
    finally:
        buf_free(&valid); buf_free(&data); buf_free(&offs)


cdef bint _rows_ascending(const int32_t *rows, Py_ssize_t m, Py_ssize_t n) noexcept nogil:
    """The old images' row indexes rise strictly and stay below n (what _spread needs)."""
    cdef Py_ssize_t j
    for j in range(m):
        if rows[j] < 0 or rows[j] >= n or (j and rows[j] <= rows[j - 1]):
            return False
    return True


cdef object _spread_struct(object dense, const int32_t *rows, Py_ssize_t m, Py_ssize_t n):
    """_before: the dense struct of old images spread over n rows (None: not handled)."""
    cdef Buf valid
    cdef Py_ssize_t count = 0
    children = []
    for child in dense.flatten():
        spread = _spread(child, rows, m, n)
        if spread is None:
            return None
        children.append(spread)
    memset(&valid, 0, sizeof(Buf))
    try:
        if _spread_validity(&valid, NULL, rows, m, n, &count) < 0:
            raise MemoryError()
        vbuf = _take_buf(&valid, (n + 7) >> 3) if n - m else None
    finally:
        buf_free(&valid)
    return pa.Array.from_buffers(dense.type, n, [vbuf], n - m, children=children)


cdef object _spread_kinds(object kinds, const int32_t *rows, Py_ssize_t m, Py_ssize_t n):
    """_before_kind: 'K' / 'O' (the m kind bytes, as they are) at the rows with an old
    image, null elsewhere."""
    cdef Buf valid, offs
    cdef Py_ssize_t count = 0, j = 0, r
    cdef int32_t *off
    memset(&valid, 0, sizeof(Buf)); memset(&offs, 0, sizeof(Buf))
    try:
        if _spread_validity(&valid, NULL, rows, m, n, &count) < 0 or buf_reserve_exact(&offs, 4 * (n + 1)) < 0:
            raise MemoryError()
        off = <int32_t *>offs.data
        for r in range(n):
            off[r] = <int32_t>j
            if j < m and rows[j] == r:
                j += 1
        off[n] = <int32_t>j
        offs.len = 4 * (n + 1)
        vbuf = _take_buf(&valid, (n + 7) >> 3) if n - m else None
        return pa.Array.from_buffers(pa.string(), n, [vbuf, _take_buf(&offs, 4 * (n + 1)), kinds], n - m)
    finally:
        buf_free(&valid); buf_free(&offs)


cdef object _toast_lists(Py_ssize_t n, list masks, list names):
    """list<string> per row: names of the columns sent as unchanged TOAST."""
    if not masks:
        return pa.Array.from_buffers(pa.list_(pa.string()), n,
                                     [None, _zeros(4 * (n + 1))], 0,
                                     children=[pa.array([], pa.string())])
    mat = np.stack([m.to_numpy(zero_copy_only=False) for _, m in masks], axis=1)
    rows, cols = np.nonzero(mat)
    colnames = pa.array([names[i] for i, _ in masks], pa.string())
    counts = mat.sum(axis=1).astype(np.int32)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), colnames.take(pa.array(cols.astype(np.int32))))


# -- spools for streamed and prepared transactions ----------------------------------

@cython.final
cdef class Spool:
    """Raw messages of a pending (streamed, prepared, or spooled plain) transaction, spilling to disk."""
    cdef Buf mem
    cdef object file                   # spill file (binary, w+b) or None
    cdef Py_ssize_t file_size
    cdef dict first_pos                # subxid -> logical position of its first message
    cdef dict first_row                # subxid -> rows of ev before its first message
    cdef EvStore ev                    # event rows written on arrival (ev_side)
    cdef bint ev_side                  # ev holds every change's event rows (see EvStore)
    cdef uint32_t last_noted           # the subxid note_xid saw last (noted_any: valid)
    cdef bint noted_any
    cdef list truncates                # per spooled Truncate: RelBuilders of its relids at arrival
    # typed rows written on arrival (tb_side): RelBuilders.side_copy per relation version
    # (by id), cut back at a subtransaction abort, appended at the commit (DecoderCore._adopt)
    cdef dict tb                       # rb id -> RelBuilders
    cdef bint tb_side
    cdef dict first_tb                 # subxid -> (seq_next, {rb id: rows}) before its first message
    cdef Py_ssize_t seq_next           # rows the spooled changes make so far (the next _seq)
    cdef Py_ssize_t others             # records other than changes ever spooled (Truncate,
                                       # message, Origin): none, and a commit that kept every
                                       # row has nothing to replay
    cdef public int32_t origin
    cdef public object xid
    cdef public object gid
    cdef public object prepare_end_lsn
    cdef public object prepare_ts

    def __cinit__(self):
        self.first_pos = {}
        self.first_row = {}
        self.truncates = []
        self.tb = {}
        self.first_tb = {}
        self.origin = -1

    def __dealloc__(self):
        # its memory goes to the block cache: the next transaction's spool reuses it
        # instead of faulting in fresh pages
        release_block(self.mem.data, self.mem.cap, self.mem.cap)
        self.mem.data = NULL
        self.mem.len = self.mem.cap = 0
        ev_free(&self.ev)
        if self.file is not None:
            try:
                self.file.close()
            except Exception:
                pass

    cpdef Py_ssize_t size(self):
        return self.file_size + self.mem.len

    cdef inline int put(self, int kind, bint in_stream, int32_t rb_id, const MsgRef *m,
                        int skip) except -1:
        """Write one record (REC_HEAD, then the message less its bytes 1..skip) in memory."""
        cdef uint32_t n32
        cdef Py_ssize_t need
        cdef unsigned char *w
        if m.n > 0xFFFFFFFF:
            raise DecodeError("message too large to spool", None, None)
        n32 = <uint32_t>(m.n - skip)
        need = REC_HEAD + <Py_ssize_t>n32
        if self.mem.cap - self.mem.len < need and buf_reserve(&self.mem, need) < 0:
            raise MemoryError()
        w = self.mem.data + self.mem.len
        w[0] = <unsigned char>kind
        w[1] = in_stream
        memcpy(w + 2, &rb_id, 4)
        memcpy(w + 6, &m.lsn, 8)
        memcpy(w + 14, &n32, 4)
        w[REC_HEAD] = m.p[0]
        memcpy(w + REC_HEAD + 1, m.p + 1 + skip, <size_t>(m.n - 1 - skip))
        self.mem.len += need
        return 0

    cdef int append(self, int kind, bint in_stream, int32_t rb_id, const MsgRef *m,
                    Py_ssize_t limit, object spill_dir, int skip=0) except -1:
        """One record: the message, less its bytes 1..skip (a streamed change's xid)."""
        if kind != REC_DML:
            self.others += 1
        self.put(kind, in_stream, rb_id, m, skip)
        if self.mem.len > limit:
            self.spill(spill_dir)
        return 0

    cdef int append_dml_run(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                            int32_t rb_id, bint stream, Py_ssize_t limit,
                            object spill_dir, Py_ssize_t row0, Py_ssize_t tb_row0=-1) except -1:
        """The records of refs[i:j], checked changes (I/U/D, at least 8 bytes, a streamed
        one 12) of relation version rb_id, exactly as append writes them one at a time:
        a streamed change has its xid noted, then is spooled without it. row0: the rows
        of ev before refs[i]'s (one event row per change); tb_row0: the rows of tb[rb_id]
        before refs[i]'s."""
        cdef const MsgRef *m
        cdef int skip = 4 if stream else 0
        cdef uint32_t xid
        cdef Py_ssize_t k
        for k in range(i, j):
            m = &refs[k]
            if stream:
                xid = pgo_be32(m.p + 1)
                if not self.noted_any or xid != self.last_noted:
                    self.note_xid(xid, row0 + (k - i), rb_id, tb_row0 + (k - i), self.seq_next + (k - i))
            self.put(REC_DML, False, rb_id, m, skip)
            if self.mem.len > limit:
                self.spill(spill_dir)
        self.seq_next += j - i
        return 0

    cdef int spill(self, object spill_dir) except -1:
        if self.file is None:
            self.file = _tempfile.TemporaryFile(prefix="pgoutput_fast-spool-", dir=spill_dir)
        self.file.seek(0, 2)
        self.file.write(memoryview(<const unsigned char[:self.mem.len]>self.mem.data))
        self.file_size += self.mem.len
        self.mem.len = 0
        return 0

    cdef void note_xid(self, uint32_t subxid, Py_ssize_t row=-1, int32_t tb_id=-1,
                       Py_ssize_t tb_row=-1, Py_ssize_t seq=-1):
        """row: the rows of ev before this message's (-1: all of them); tb_row: the rows
        of tb[tb_id] before it (the other builders of tb: all of theirs); seq: the
        spool's rows before it (-1: seq_next)."""
        cdef RelBuilders rb
        if self.noted_any and subxid == self.last_noted:
            return                     # the common case: the same (sub)transaction again
        if subxid not in self.first_pos:
            self.first_pos[subxid] = self.size()
            self.first_row[subxid] = row if row >= 0 else self.ev.meta.rows
            if self.tb_side:
                rows = {}
                for k, rb in self.tb.items():
                    rows[k] = rb.meta.rows
                if tb_id >= 0 and tb_row >= 0:
                    rows[tb_id] = tb_row
                self.first_tb[subxid] = (seq if seq >= 0 else self.seq_next, rows)
        self.last_noted = subxid
        self.noted_any = True

    cdef int abort_sub(self, uint32_t subxid) except -1:
        """Discard everything from where subxid first appeared (positional, like PG)."""
        pos = self.first_pos.get(subxid)
        if pos is None:
            return 0
        cdef Py_ssize_t p = pos
        if p >= self.file_size:
            self.mem.len = p - self.file_size
        else:
            self.file.truncate(p)
            self.file_size = p
            self.mem.len = 0
        self.first_pos = {x: q for x, q in self.first_pos.items() if q < p}
        if self.ev_side:
            ev_truncate(&self.ev, self.first_row[subxid])
        self.first_row = {x: self.first_row[x] for x in self.first_pos}
        cdef RelBuilders rb
        if self.tb_side:
            seq, rows = self.first_tb[subxid]
            for k, rb in self.tb.items():
                rb.cut(rows.get(k, 0))
            self.seq_next = seq
            self.first_tb = {x: self.first_tb[x] for x in self.first_pos}
        self.noted_any = False
        return 0

    def chunks(self, Py_ssize_t chunk=1 << 24):
        """Yield bytes chunks covering the spool (file part in pieces, then memory)."""
        if self.file is not None and self.file_size:
            self.file.seek(0)
            left = self.file_size
            while left > 0:
                data = self.file.read(min(chunk, left))
                if not data:
                    raise DecodeError("spool file ended early", None, None)
                left -= len(data)
                yield data
        if self.mem.len:
            yield bytes(<const unsigned char[:self.mem.len]>self.mem.data)


# -- the core ----------------------------------------------------------------------

cdef inline bint ascii_only(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """No byte of p[0..n) has its high bit set (8, then 4 bytes at a time)."""
    cdef uint64_t word, acc = 0
    cdef uint32_t half
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        memcpy(&word, p + i, 8)
        acc |= word
        i += 8
    if i + 4 <= n:
        memcpy(&half, p + i, 4)
        acc |= half
        i += 4
    while i < n:
        acc |= p[i]
        i += 1
    return (acc & 0x8080808080808080ULL) == 0


cdef inline bint copy_ascii(unsigned char *d, const unsigned char *s, Py_ssize_t n) noexcept nogil:
    """memcpy (the short sizes of typical text values as a few overlapping fixed-size
    moves instead of a call), and whether no byte of s[0..n) has its high bit set, from
    the same loads (the overlapping ones cover every byte): a text value is copied and
    checked in one pass. The copy is made either way (room for n bytes at d)."""
    cdef uint64_t a, b, c2, d2
    cdef uint32_t x, y
    if n <= 16:
        if n >= 8:
            memcpy(&a, s, 8)
            memcpy(&b, s + n - 8, 8)
            memcpy(d, &a, 8)
            memcpy(d + n - 8, &b, 8)
            return ((a | b) & 0x8080808080808080ULL) == 0
        elif n >= 4:
            memcpy(&x, s, 4)
            memcpy(&y, s + n - 4, 4)
            memcpy(d, &x, 4)
            memcpy(d + n - 4, &y, 4)
            return ((x | y) & 0x80808080U) == 0
        elif n > 0:
            d[0] = s[0]
            d[n >> 1] = s[n >> 1]
            d[n - 1] = s[n - 1]
            return ((s[0] | s[n >> 1] | s[n - 1]) & 0x80) == 0
        return True
    elif n <= 32:
        memcpy(&a, s, 8)
        memcpy(&b, s + 8, 8)
        memcpy(&c2, s + n - 16, 8)
        memcpy(&d2, s + n - 8, 8)
        memcpy(d, &a, 8)
        memcpy(d + 8, &b, 8)
        memcpy(d + n - 16, &c2, 8)
        memcpy(d + n - 8, &d2, 8)
        return ((a | b | c2 | d2) & 0x8080808080808080ULL) == 0
    memcpy(d, s, <size_t>n)
    return ascii_only(s, n)


DEF FAST_BLOCK_ROWS = 1024           # rows a _fast_run block reserves room for at once
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
        if kind == 116 or kind == 98:           # 't' / 'b'
            if end - pos < 5:
                break
            n = pgo_be32s(buf + pos + 1)
            if n < 0 or n > end - pos - 5:
                break
            pos += 5
            p = buf + pos
            code = col.text_inline if kind == 116 else col.bin_inline
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
            if kind == 116:
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
        elif kind == 110:                        # 'n'
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
# _fast_run's blocks (room reserved) are scanned twice. A row pass finds every value of
# the block (pointer and length, -1 for a null) and stores nothing; then a column pass
# stores each column's values in a loop of its own, in which the column's state and
# its kind of value stay the same, so the per-value dispatch of scan_typed_core
# (which column, which kind, which inline form) leaves the loop. Whatever either pass
# does not take ends the column pass at that row: the columns are cut back to it and
# the rows from there on go through the row-wise scan as before, so errors are found
# in the same order and reported the same way.

DEF CP_VALUES = 16384        # values (rows x columns) a column-pass block holds

cdef enum:                   # what a _fast_run block is made of
    BLOCK_NEW = 0            # inserts, updates without an old tuple: the tuple is the row
    BLOCK_DELETES = 1        # deletes: the old tuple is the row and the old image
    BLOCK_UPDATES_OLD = 2    # updates with an old tuple ('K' / 'O'): old image, then row


cdef Py_ssize_t block_end(const MsgRef *refs, Py_ssize_t i, Py_ssize_t nrefs, uint32_t relid,
                          int ncols, int xo, int *olds, Py_ssize_t *nbytes) noexcept nogil:
    """The end of the block of a run that starts at refs[i] (_fast_run, _ev_fast_run): up
    to FAST_BLOCK_ROWS changes of relid with ncols columns (and FAST_BLOCK_BYTES bytes, at
    least one change), all of one shape, set in *olds: inserts and updates without an
    old tuple (BLOCK_NEW), deletes (BLOCK_DELETES), or updates with an old tuple
    (BLOCK_UPDATES_OLD). *nbytes: their bytes. xo is 4 for changes that carry a streamed
    transaction's xid after the type byte, else 0. The header tests only choose the
    path: the scans check every message as the row-wise scan does."""
    cdef Py_ssize_t j = i, nb = 0
    cdef const MsgRef *m
    cdef const unsigned char *p
    cdef uint8_t t
    cdef int shape = BLOCK_NEW
    if refs[i].n >= 8 + xo and refs[i].p[0] == 68:
        shape = BLOCK_DELETES
    elif (refs[i].n >= 8 + xo and refs[i].p[0] == 85
          and (refs[i].p[5 + xo] == 75 or refs[i].p[5 + xo] == 79)):
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
            if t != 68 or (p[5 + xo] != 75 and p[5 + xo] != 79):
                break
        elif shape == BLOCK_UPDATES_OLD:
            if t != 85 or (p[5 + xo] != 75 and p[5 + xo] != 79):
                break
        elif (t != 73 and t != 85) or p[5 + xo] != 78:
            break
        if pgo_be32(p + 1 + xo) != relid or pgo_be16s(p + 6 + xo) != ncols:
            break
        nb += m.n
        j += 1
    olds[0] = shape
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


cdef inline Py_ssize_t prefetch_end(Py_ssize_t j, Py_ssize_t nrefs) noexcept nogil:
    """The end of the messages after a block ending at j that it prefetches: up to
    FAST_BLOCK_ROWS of them (the next block's most)."""
    return j + FAST_BLOCK_ROWS if j + FAST_BLOCK_ROWS < nrefs else nrefs


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
            if kind == 110:                      # 'n'
                vn[at] = -1
                pos += 1
            else:
                if kind != ckind[c] or kind == 0:
                    # (a kind byte 0 equals the "no kind yet" of ckind: it must not pass
                    # for a value, or a column null in the block's other rows would be
                    # stored as null in every row, this value lost)
                    if ckind[c] != 0 or (kind != 116 and kind != 98):
                        return -1
                    ckind[c] = kind
                n = pgo_be32s(p + pos + 1)
                if <size_t>n > <size_t>(rem - 5):   # (negative lengths wrap)
                    return -1
                vp[at] = p + pos + 5
                vn[at] = n
                pos += 5 + n
        elif pos < end and p[pos] == 110:        # a null among the last bytes
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
        if kind == 110:                          # 'n'
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
    if at < end and p[at] == 110:                # a null among the last bytes
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
        if (end - a < 3 or p[a] != 78 or pgo_be16s(p + a + 1) != ncols
                or qend - b < 3 or q[b] != 78 or pgo_be16s(q + b + 1) != ncols):
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
            if end - pos < 3 or p[pos] != 78 or pgo_be16s(p + pos + 1) != ncols:
                return r
            pos = cp_tuple(p, pos + 3, end, ncols, vp2 + r, vn2 + r, stride, ckind2)
            if pos < 0:
                return r
        if pos != end:
            return r
        r += 1
    return nrows


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
    cdef Column *vals
    cdef int c, rc
    cdef int32_t n, k, vend
    cdef uint8_t kind
    cdef const unsigned char *v
    cdef const char *why = NULL
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
    for c in range(ncols):
        if pos >= end:
            return -1
        kind = p[pos]
        if kind == 110:                          # 'n'
            n = -1
            pos += 1
        elif (kind != 116 and kind != 98) or end - pos < 5:
            return -1
        else:
            n = pgo_be32s(p + pos + 1)
            if <size_t>n > <size_t>(end - pos - 5):  # (negative lengths wrap)
                return -1
            v = p + pos + 5
            pos += 5 + n
        if key_only:
            if not is_key[c]:
                continue                         # 'K' image: not part of the key
            rc = map_key(mb, names, name_end, c)
            if rc != 0:
                return -1 if rc == -2 else -2
        if n < 0:
            if col_end_row(vals, 0, 0) < 0:
                return -2
            continue
        k = ctype[4 * c]
        if kind == 116 or k == K_TEXT or k == K_BPCHAR or k == K_JSON:
            # the text as sent, once checked (a text-like type's binary form is its text)
            if vals.data.cap - vals.data.len < n and buf_reserve(&vals.data, n) < 0:
                return -2
            if not copy_ascii(vals.data.data + vals.data.len, v, n):
                if k == K_CHAR or utf8_invalid_at(v, n) >= 0:
                    return -1
            vals.data.len += n
        elif fmt_column_value(k, ctype + 4 * c, v, n, &vals.data, memo + c, &why) < 0:
            return -1
        if vals.data.len > 0x7FFFFFFF:
            return -1                            # (int32 offsets: the row-wise scan reports)
        vend = <int32_t>vals.data.len
        memcpy(vals.offsets.data + vals.offsets.len, &vend, 4)
        vals.offsets.len += 4
        if vals.nulls and bit_set(&vals.validity, vals.length, 1) < 0:
            return -2
        vals.length += 1
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
        elif cp_form_t is CpTxtTs:
            if ts_memo_hit(col, p, n, &s64):
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
    if kind == 98:
        code = col.bin_inline
        fn = col.binary_fn
    else:
        fn = col.text_fn
        if kind == 116:
            code = col.text_inline
        else:
            return cp_all_null(col, fn, vp, vn, nrows, builder_rc)
    if code == BIN_INLINE_SWAP4:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpSwap4 *>NULL)
    if (kind == 98 and fn == bin_decimal and col.layout == LAYOUT_FIXED and col.fixed_width == 16
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
    if code == TEXT_INLINE_INT4:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtInt4 *>NULL)
    if code == TEXT_INLINE_INT8:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtInt8 *>NULL)
    if code == TEXT_INLINE_TIMESTAMP:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtTs *>NULL)
    if code == TEXT_INLINE_BOOL:
        return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtBool *>NULL)
    if kind == 116 and col.layout == LAYOUT_FIXED:
        # (float8 and numeric(p <= 18) text: the parser's result stored here, without
        # its push; anything it does not take goes to fn, which reports it)
        if fn == tx_float8 and col.fixed_width == 8:
            return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtFloat8 *>NULL)
        if fn == text_decimal and col.fixed_width == 16 and col.precision <= 18:
            return cp_loop(col, fn, vp, vn, nrows, builder_rc, <CpTxtDec18 *>NULL)
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
    cdef Py_ssize_t r, nulls = col.nulls
    if n >= col.length:
        return
    if nulls:
        for r in range(n, col.length):
            if not bit_get(&col.validity, r):
                nulls -= 1
    col.nulls = 0                      # (col_truncate would count them over every row)
    col_truncate(col, n)
    col.nulls = nulls
    if nulls:
        col.validity.len = (n + 7) >> 3


@cython.final
cdef class DecoderCore:
    """Native decoder state machine; see pgoutput_fast.decoder.Decoder for the API."""
    cdef public object catalog
    cdef dict rb_current            # relid -> RelBuilders
    cdef RelBuilders last_rb        # one-entry cache of rb_current (consecutive changes)
    cdef dict rb_by_version         # (relid, version) -> RelBuilders
    cdef list rb_all                # id -> RelBuilders
    cdef list dirty                 # RelBuilders touched by the open B..C transaction
    cdef public bint want_events
    cdef public bint want_tables
    cdef public object binary_unknown
    cdef public Py_ssize_t max_pending_bytes
    cdef public object spill_dir
    cdef public list origins
    cdef dict origin_ids
    cdef public list names          # global column-name table (event maps)
    cdef dict name_ids
    # transaction state
    cdef int state
    cdef Ctx ctx
    cdef list txn_messages          # transactional logical messages of the open B..C
    cdef list out_messages          # logical messages ready for the ChangeSet
    cdef dict streams               # top-level xid -> Spool
    cdef dict prepared              # gid -> Spool
    cdef Spool cur                  # spool of the open S..E block or b..P (or spooled B..C)
    cdef Spool txn_carry            # raw copy of the open B..C once it crossed a batch end
    cdef bint txn_spooled           # the open B..C is held as txn_carry only (not decoded)
    cdef Py_ssize_t txn_part_start  # index in this batch of the open B..C's first message
    cdef list txn_rel_log           # (relid, previous rb, new rb) per Relation in that part
    cdef uint32_t stream_xid
    # change-event table (while a streamed or prepared change is checked on arrival,
    # ev is swapped with its Spool's: see _side and _ev_swap)
    cdef EvStore ev
    cdef EvStore ev_spare           # an emptied spool's EvStore, for the next spool (warm pages)
    cdef list ev_chunks             # EvChunk: committed event rows before ev's (_ev_adopt)
    cdef Py_ssize_t spool_hint      # bytes the last committed spool held in memory
    cdef dict tb_spare              # rb id -> RelBuilders a committed spool emptied (warm
                                    # memory for the next spool's typed rows)
    cdef Py_ssize_t ev_committed
    # scratch
    cdef Buf scratch
    cdef Buf cp_scratch             # the column pass's value table (_column_block)
    cdef Buf run_refs               # MsgRef per spooled change of a replayed run

    def __cinit__(self):
        self.rb_current = {}
        self.rb_by_version = {}
        self.rb_all = []
        self.dirty = []
        self.origins = []
        self.origin_ids = {}
        self.names = []
        self.name_ids = {}
        self.txn_messages = []
        self.out_messages = []
        self.streams = {}
        self.prepared = {}
        self.txn_rel_log = []
        self.tb_spare = {}
        self.ev_chunks = []
        self.ctx.origin = -1

    def __init__(self, catalog, *, bint events=True, bint tables=True, binary_unknown=None,
                 Py_ssize_t max_pending_bytes=256 << 20, spill_dir=None):
        self.catalog = catalog
        self.want_events = events
        self.want_tables = tables
        self.binary_unknown = bool(binary_unknown)
        self.max_pending_bytes = max_pending_bytes
        self.spill_dir = spill_dir
        if events and ev_hints_take(&self.ev) < 0:
            raise MemoryError()
        for v in catalog.versions():
            if catalog.current(v.relid) is v:
                self._builders_for(v)

    def __dealloc__(self):
        ev_free(&self.ev)
        ev_free(&self.ev_spare)
        buf_free(&self.scratch)
        buf_free(&self.cp_scratch)
        buf_free(&self.run_refs)

    # -- catalog glue (rare: Python is fine) ---------------------------------------
    cdef int32_t _name_id(self, str name):
        i = self.name_ids.get(name)
        if i is None:
            i = len(self.names)
            self.names.append(name)
            self.name_ids[name] = i
        return i

    cdef RelBuilders _builders_for(self, object version):
        key = (version.relid, version.version)
        cdef RelBuilders rb = self.rb_by_version.get(key)
        if rb is None:
            rb = RelBuilders.__new__(RelBuilders)
            rb.init(version, len(self.rb_all), [self._name_id(c.name) for c in version.columns])
            self.rb_all.append(rb)
            self.rb_by_version[key] = rb
        self.rb_current[version.relid] = rb
        self.last_rb = None
        return rb

    cdef int32_t _origin_id(self, str name):
        i = self.origin_ids.get(name)
        if i is None:
            i = len(self.origins)
            self.origins.append(name)
            self.origin_ids[name] = i
        return i

    # -- errors --------------------------------------------------------------------
    cdef int _fail(self, str reason, const MsgRef *m, Py_ssize_t offset) except -1:
        raise DecodeError(reason, offset, chr(m.p[0]) if m.n else None)

    cdef int _fail_cursor(self, Cursor *c) except -1:
        return raise_cursor_error(c, c.buf[0] if c.len else -1)

    # -- feeding -------------------------------------------------------------------
    def feed(self, refs_owner, Py_ssize_t nrefs, size_t refs_addr):
        """Decode nrefs messages described by a MsgRef array at refs_addr.

        refs_owner keeps the memory of the messages alive. Returns nothing; call
        export() for the committed output. On DecodeError the output of this call
        up to the last commit before the bad message is kept (export() gives it).
        """
        cdef const MsgRef *refs = <const MsgRef *>refs_addr
        cdef Py_ssize_t i = 0
        if self.state == ST_TXN:
            self.txn_part_start = 0         # the open transaction continues here
            self.txn_rel_log = []
        try:
            while i < nrefs:
                if (self.state == ST_TXN and not self.txn_spooled and self.last_rb is not None
                        and (self.want_tables or self.want_events)):
                    self._run_fast(refs, &i, nrefs, self.last_rb, 0)
                    if i >= nrefs:
                        break
                elif self.state != ST_NONE and (self.state != ST_TXN or self.txn_spooled):
                    self._spool_run(refs, &i, nrefs)
                    if i >= nrefs:
                        break
                self._dispatch(&refs[i], i, refs)
                i += 1
            if self.state == ST_TXN and not self.txn_spooled:
                # a transaction still open stays open: its rows wait in the builders,
                # and a raw copy of them in txn_carry (see the top of this file)
                self._carry_part(refs, self.txn_part_start, nrefs)
                if self.txn_carry.size() > self.max_pending_bytes:
                    self._rollback_open()
                    self.txn_spooled = True
                    self.cur = self.txn_carry
        except DecodeError as exc:
            exc.message_index = i
            self._reset_after_error()
            raise
        except BaseException:
            self._reset_after_error()
            raise

    cdef int _carry_part(self, const MsgRef *refs, Py_ssize_t start, Py_ssize_t stop) except -1:
        """Append messages [start, stop) of the open B..C (all checked) to txn_carry.

        Each change is recorded with the relation version it was checked against: the
        map as it was at `start` is rb_current with this part's Relation messages undone.
        """
        cdef const MsgRef *m
        cdef Py_ssize_t k
        cdef uint8_t t
        cdef uint32_t relid
        cdef RelBuilders rb
        cdef Spool sp = self.txn_carry
        if sp is None:
            sp = self.txn_carry = Spool()
        current = dict(self.rb_current)
        for relid_o, prev, _ in reversed(self.txn_rel_log):
            if prev is None:
                current.pop(relid_o, None)
            else:
                current[relid_o] = prev
        log = iter(self.txn_rel_log)
        for k in range(start, stop):
            m = &refs[k]
            t = m.p[0]
            if t == 73 or t == 85 or t == 68:          # I U D
                relid = pgo_be32(m.p + 1)
                rb = current[relid]
                sp.append(REC_DML, 0, rb.id, m, self.max_pending_bytes, self.spill_dir)
            elif t == 84:                               # T
                msg = decode_message(<const unsigned char[:m.n]>m.p)
                sp.truncates.append([current[r] for r in msg.relids])
                sp.append(REC_TRUNCATE, 0, len(sp.truncates) - 1, m, self.max_pending_bytes,
                          self.spill_dir)
            elif t == 77:                               # M (transactional ones wait)
                if m.p[1] & 1:
                    sp.append(REC_MESSAGE, 0, -1, m, self.max_pending_bytes, self.spill_dir)
            elif t == 79:                               # O
                msg = decode_message(<const unsigned char[:m.n]>m.p)
                sp.append(REC_ORIGIN, 0, self._origin_id(msg.name), m, self.max_pending_bytes,
                          self.spill_dir)
            elif t == 82:                               # R: the next version from here
                relid_o, _, rb_new = next(log)
                current[relid_o] = rb_new
        self.txn_rel_log = []
        return 0

    cdef void _reset_after_error(self):
        self._rollback_open()
        self._drop_carry()
        self.state = ST_NONE
        self.cur = None

    cdef void _drop_carry(self):
        self.txn_carry = None               # (its spill file closes with it)
        self.txn_spooled = False
        self.txn_rel_log = []

    cdef void _rollback_open(self):
        cdef RelBuilders rb
        for rb in self.dirty:
            rb.rollback()
        self.dirty = []
        self._ev_truncate(self.ev_committed)
        self.txn_messages = []

    cdef int _dispatch(self, const MsgRef *m, Py_ssize_t index, const MsgRef *refs) except -1:
        cdef Cursor c
        cdef uint8_t t
        cdef uint32_t xid = 0
        if m.n == 0:
            raise DecodeError("empty message", 0, None)
        cur_init(&c, m.p, m.n)
        t = m.p[0]
        c.pos = 1
        if self.state == ST_STREAM and (t == 82 or t == 89 or t == 73 or t == 85 or t == 68
                                         or t == 84 or t == 77):
            if rd_u32(&c, &xid) < 0:
                self._fail_cursor(&c)
        if t == 73 or t == 85 or t == 68:                  # I U D
            return self._on_dml(m, &c, t, xid)
        if t == 66:
            return self._on_begin(m, index)
        if t == 67:
            return self._on_commit(m)
        if t == 82 or t == 89:
            return self._on_catalog(m, t, xid)
        if t == 84:
            return self._on_truncate(m, &c, xid)
        if t == 77:
            return self._on_logical_message(m, xid)
        if t == 79:
            return self._on_origin(m)
        if t == 83 or t == 69 or t == 99 or t == 65:
            return self._on_stream(m, t)
        if t == 98 or t == 80 or t == 112 or t == 75 or t == 114:
            return self._on_two_phase(m, t)
        decode_message(<const unsigned char[:m.n]>m.p)    # raises the precise DecodeError
        raise DecodeError(f"unexpected message type {chr(t)!r}", 0, chr(t))

    # -- transaction boundaries ----------------------------------------------------
    cdef int _require(self, int state, const MsgRef *m, str what) except -1:
        if self.state != state:
            names = {ST_NONE: "outside a transaction", ST_TXN: "inside Begin..Commit",
                     ST_PREPARE: "inside Begin Prepare..Prepare", ST_STREAM: "inside a stream block"}
            self._fail(f"{what} {names[self.state]}", m, 0)
        return 0

    cdef int _on_begin(self, const MsgRef *m, Py_ssize_t index) except -1:
        msg = decode_message(<const unsigned char[:m.n]>m.p)
        self._require(ST_NONE, m, "Begin")
        self.state = ST_TXN
        self.ctx.commit_lsn = <int64_t><uint64_t>msg.final_lsn
        self.ctx.commit_ts = _unix_ts(msg.commit_ts, 9, "B")
        self.ctx.xid = msg.xid
        self.ctx.seq = 0
        self.ctx.origin = -1
        self.txn_messages = []
        self._drop_carry()
        self.txn_part_start = index + 1
        return 0

    cdef int _on_commit(self, const MsgRef *m) except -1:
        cdef Spool sp
        msg = decode_message(<const unsigned char[:m.n]>m.p)
        self._require(ST_TXN, m, "Commit")
        if <int64_t><uint64_t>msg.commit_lsn != self.ctx.commit_lsn:
            self._fail(f"Commit LSN {msg.commit_lsn:X} does not match its Begin's final LSN "
                       f"{<uint64_t>self.ctx.commit_lsn:X}", m, 2)
        self.state = ST_NONE
        if self.txn_spooled:
            sp = self.txn_carry
            self._drop_carry()
            self.cur = None
            self.ctx.seq = 0
            self.ctx.origin = -1
            self._replay_records(sp)
        else:
            self._drop_carry()
            self._commit_rows()
        return 0

    cdef void _commit_rows(self):
        cdef RelBuilders rb
        for rb in self.dirty:
            rb.commit()
        self.dirty = []
        self.ev_committed = self.ev.meta.rows
        if self.txn_messages:
            self.out_messages.extend(self.txn_messages)
            self.txn_messages = []

    cdef int _on_origin(self, const MsgRef *m) except -1:
        msg = decode_message(<const unsigned char[:m.n]>m.p)
        check_names_utf8(msg)
        oid = self._origin_id(msg.name)
        if self.state == ST_TXN:
            self.ctx.origin = oid
            if self.txn_spooled:
                self._spool(m, REC_ORIGIN, oid, 0)
        elif self.state == ST_STREAM or self.state == ST_PREPARE:
            self.cur.origin = oid
        else:
            self._fail("Origin outside a transaction", m, 0)
        return 0

    cdef int _on_catalog(self, const MsgRef *m, uint8_t t, uint32_t xid) except -1:
        msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=self.state == ST_STREAM)
        check_names_utf8(msg)
        if self.state == ST_STREAM:
            self.cur.note_xid(xid)
        if t == 89:
            self.catalog.apply_type(msg)
        elif self.state == ST_TXN and not self.txn_spooled:
            prev = self.rb_current.get(msg.relid)
            rb = self._builders_for(self.catalog.apply_relation(msg, m.lsn))
            self.txn_rel_log.append((msg.relid, prev, rb))   # for _carry_part
        else:
            self._builders_for(self.catalog.apply_relation(msg, m.lsn))
        return 0

    cdef int _on_stream(self, const MsgRef *m, uint8_t t) except -1:
        cdef Spool sp
        msg = decode_message(<const unsigned char[:m.n]>m.p)
        if t == 83:    # S
            self._require(ST_NONE, m, "Stream Start")
            sp = self.streams.get(msg.xid)
            if sp is None:
                if not msg.first_segment:
                    self._fail(f"Stream Start continues transaction {msg.xid} whose first "
                               "segment was not seen", m, 5)
                sp = Spool()
                sp.xid = msg.xid
                self._side_init(sp)
                self.streams[msg.xid] = sp
            self.cur = sp
            self.stream_xid = msg.xid
            self.state = ST_STREAM
        elif t == 69:  # E
            self._require(ST_STREAM, m, "Stream Stop")
            self.cur = None
            self.state = ST_NONE
        elif t == 99:  # c
            self._require(ST_NONE, m, "Stream Commit")
            sp = self.streams.pop(msg.xid, None)
            if sp is None:
                self._fail(f"Stream Commit for transaction {msg.xid} that was never streamed", m, 1)
            self._replay(sp, msg.commit_lsn, msg.commit_ts, msg.xid, 22, "c")
        else:          # A
            self._require(ST_NONE, m, "Stream Abort")
            if msg.xid == msg.subxid:
                self.streams.pop(msg.xid, None)    # a stray abort without a stream is ignored
            else:
                sp = self.streams.get(msg.xid)
                if sp is not None:
                    sp.abort_sub(msg.subxid)
        return 0

    cdef int _on_two_phase(self, const MsgRef *m, uint8_t t) except -1:
        cdef Spool sp
        msg = decode_message(<const unsigned char[:m.n]>m.p)
        if t == 98:    # b
            self._require(ST_NONE, m, "Begin Prepare")
            sp = Spool()
            sp.xid = msg.xid
            sp.gid = msg.gid
            self._side_init(sp)
            self.cur = sp
            self.state = ST_PREPARE
        elif t == 80:  # P
            self._require(ST_PREPARE, m, "Prepare")
            sp = self.cur
            if sp.gid != msg.gid or sp.xid != msg.xid:
                self._fail(f"Prepare {msg.gid!r} (xid {msg.xid}) does not match Begin Prepare "
                           f"{sp.gid!r} (xid {sp.xid})", m, 0)
            sp.prepare_end_lsn = msg.end_lsn
            sp.prepare_ts = msg.prepare_ts
            self.prepared[msg.gid] = sp          # a re-sent b..P replaces the earlier copy
            self.cur = None
            self.state = ST_NONE
        elif t == 112: # p
            self._require(ST_NONE, m, "Stream Prepare")
            sp = self.streams.pop(msg.xid, None)
            if sp is None:
                self._fail(f"Stream Prepare for transaction {msg.xid} that was never streamed", m, 0)
            sp.gid = msg.gid
            sp.prepare_end_lsn = msg.end_lsn
            sp.prepare_ts = msg.prepare_ts
            self.prepared[msg.gid] = sp
        elif t == 75:  # K
            self._require(ST_NONE, m, "Commit Prepared")
            sp = self.prepared.pop(msg.gid, None)
            if sp is None:
                self._fail(f"Commit Prepared for unknown GID {msg.gid!r} (its Begin Prepare.."
                           "Prepare was not seen)", m, 0)
            self._replay(sp, msg.commit_lsn, msg.commit_ts, msg.xid, 18, "K")
        else:          # r
            self._require(ST_NONE, m, "Rollback Prepared")
            sp = self.prepared.get(msg.gid)
            if sp is not None and (sp.prepare_end_lsn == msg.prepare_end_lsn
                                   or sp.prepare_end_lsn is None):
                del self.prepared[msg.gid]
        return 0

    cdef int _replay(self, Spool sp, uint64_t commit_lsn, int64_t commit_ts, uint32_t xid,
                     Py_ssize_t ts_offset, str mtype) except -1:
        """Emit a spooled transaction as committed with the given metadata."""
        self.ctx.commit_lsn = <int64_t>commit_lsn
        self.ctx.commit_ts = _unix_ts(commit_ts, ts_offset, mtype)
        self.ctx.xid = xid
        self.ctx.seq = 0
        self.ctx.origin = sp.origin
        cdef int rc
        cdef bint events_kept = sp.ev_side and self.want_events
        cdef bint adopted = False
        if sp.mem.len:
            self.spool_hint = sp.mem.len
        if events_kept and ev_nbytes(&sp.ev) >= _ev_adopt_bytes and self.ev.meta.rows == self.ev_committed:
            self._ev_adopt(sp)
        elif events_kept:
            # the event rows were written on arrival: they take the commit's metadata
            rc = ev_append(&self.ev, &sp.ev, &self.ctx)
            if rc == -2:
                raise DecodeError("the change-event table holds more than 2 GiB of values in one "
                                  "batch; feed smaller batches", None, mtype)
            if rc < 0:
                raise MemoryError()
            ev_free(&self.ev_spare)
            if ev_capacity(&sp.ev) <= EV_SPARE_MAX:
                ev_truncate(&sp.ev, 0)             # its memory serves the next spool
                self.ev_spare = sp.ev
            else:
                ev_free(&sp.ev)
            memset(&sp.ev, 0, sizeof(EvStore))
            sp.ev_side = False
        if self.want_tables and sp.tb_side:
            adopted = self._adopt(sp)              # so were the typed rows
        # the spool is replayed for what was not kept (and the logical messages)
        if (sp.others == 0 and (events_kept or not self.want_events)
                and (adopted or not self.want_tables)):
            self.txn_messages = []
            self._commit_rows()
            return 0
        if events_kept:
            self.want_events = False
        if adopted:
            self.want_tables = False
        try:
            return self._replay_records(sp)
        finally:
            if events_kept:
                self.want_events = True
            if adopted:
                self.want_tables = True

    cdef bint _adopt(self, Spool sp) except -1:
        """The typed rows a spool kept (Spool.tb) are appended to the decoder's builders
        with the commit's metadata (ctx), as committed rows; the spool's builders,
        emptied, serve the next spool (tb_spare: their memory is warm). False, and
        nothing changed, when they cannot be (the decoder's builders hold rows of a
        transaction not committed, no memory, 2 GiB of text): then the spool is
        replayed."""
        cdef RelBuilders t, main
        cdef int rc = 0
        cdef list done = []
        for k in sp.tb:
            main = <RelBuilders>self.rb_all[k]
            if main.meta.rows != main.committed or main.nbefore != main.committed_before:
                return False
        for k in sorted(sp.tb):
            t = <RelBuilders>sp.tb[k]
            if t.meta.rows == 0:
                continue
            main = <RelBuilders>self.rb_all[k]
            if t.nbefore:
                main.ensure_before()
            done.append(main)
            rc = main.adopt(t, &self.ctx)
            if rc < 0:
                break
        if rc < 0:
            for main in done:
                main.rollback()
            return False
        for k in sorted(sp.tb):
            t = <RelBuilders>sp.tb[k]
            if t.specials:
                main = <RelBuilders>self.rb_all[k]
                base = main.meta.rows - t.meta.rows
                main.specials.extend([(x[0] + base,) + tuple(x[1:]) for x in t.specials])
            self._touch(<RelBuilders>self.rb_all[k])     # (committed by _commit_rows)
            if t.nbytes() <= EV_SPARE_MAX:
                t.cut(0)
                self.tb_spare[k] = t
        self._tb_drop(sp)
        return True

    cdef int _replay_records(self, Spool sp) except -1:
        """Write the spooled records with the metadata in ctx, and commit them."""
        cdef Py_ssize_t used
        cdef bytes data
        self.txn_messages = []
        if sp.file is None:
            # all in memory: read the records where they are (no copy)
            if self._replay_run(sp, sp.mem.data, sp.mem.len) != sp.mem.len:
                raise DecodeError("spool ended inside a record", None, None)
        else:
            pending = b""
            for chunk in sp.chunks():
                data = pending + chunk if pending else chunk
                used = self._replay_run(sp, <const unsigned char *>PyBytes_AS_STRING(data),
                                        PyBytes_GET_SIZE(data))
                pending = data[used:]
            if pending:
                raise DecodeError("spool ended inside a record", None, None)
        self._commit_rows()
        return 0

    cdef Py_ssize_t _replay_run(self, Spool sp, const unsigned char *p, Py_ssize_t n) except -1:
        """Write the whole records in p[0..n); returns the bytes they took. Consecutive
        changes of one relation version go through _write_run together."""
        cdef Py_ssize_t pos = 0
        cdef MsgRef m
        cdef uint8_t kind
        cdef int32_t rb_id, run_rb = -1
        cdef uint32_t len32
        cdef Cursor c
        self.run_refs.len = 0
        while n - pos >= REC_HEAD:
            memcpy(&len32, p + pos + 14, 4)
            if n - pos - REC_HEAD < <Py_ssize_t>len32:
                break
            kind = p[pos]
            memcpy(&rb_id, p + pos + 2, 4)
            memcpy(&m.lsn, p + pos + 6, 8)
            m.p = p + pos + REC_HEAD
            m.n = len32
            if kind == REC_DML:
                if not self.want_tables and not self.want_events:
                    pos += REC_HEAD + len32      # (its event rows were kept: see _replay)
                    continue
                if rb_id != run_rb or self.run_refs.len >= SPOOL_RUN_ROWS * <Py_ssize_t>sizeof(MsgRef):
                    self._write_run(run_rb)
                    run_rb = rb_id
                if buf_append(&self.run_refs, <const unsigned char *>&m, sizeof(MsgRef)) < 0:
                    raise MemoryError()
                pos += REC_HEAD + len32
                continue
            self._write_run(run_rb)
            cur_init(&c, m.p, m.n)
            c.pos = 5 if p[pos + 1] else 1
            if kind == REC_TRUNCATE:
                self._write_truncate(&m, &c, sp.truncates[rb_id])
            elif kind == REC_ORIGIN:
                self.ctx.origin = rb_id
            else:
                self.txn_messages.append(self._message_obj(&m, p[pos + 1]))
            pos += REC_HEAD + len32
        self._write_run(run_rb)
        return pos

    cdef int _write_run(self, int32_t rb_id) except -1:
        """Write the spooled changes in run_refs (all of relation version rb_id, each a
        plain I/U/D: see REC_HEAD), through _fast_run where it takes them."""
        cdef const MsgRef *refs = <const MsgRef *>self.run_refs.data
        cdef Py_ssize_t n = self.run_refs.len // <Py_ssize_t>sizeof(MsgRef), i = 0
        cdef RelBuilders rb
        cdef Cursor c
        if n == 0:
            return 0
        self.run_refs.len = 0
        rb = <RelBuilders>self.rb_all[rb_id]
        while i < n:
            if self.want_tables or self.want_events:
                self._run_fast(refs, &i, n, rb, 0)
                if i >= n:
                    break
            cur_init(&c, refs[i].p, refs[i].n)
            c.pos = 1
            self._write_dml(&refs[i], &c, refs[i].p[0], rb)
            i += 1
        return 0

    cdef object _message_obj(self, const MsgRef *m, bint in_stream):
        msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=in_stream)
        return (msg, m.lsn, self.ctx.commit_lsn, self.ctx.commit_ts, self.ctx.xid,
                self.origins[self.ctx.origin] if self.ctx.origin >= 0 else None)

    # -- changes -------------------------------------------------------------------
    cdef RelBuilders _rel(self, const MsgRef *m, Cursor *c, uint32_t *relid):
        cdef RelBuilders rb
        if rd_u32(c, relid) < 0:
            self._fail_cursor(c)
        rb = self.last_rb
        if rb is not None and rb.relid == relid[0]:
            return rb
        rb = self.rb_current.get(relid[0])
        self.last_rb = rb
        if rb is None:
            self._fail(f"change for relation {relid[0]} before any Relation message for it", m, c.pos - 4)
        return rb

    cdef int _spool(self, const MsgRef *m, int kind, int32_t rb_id, uint32_t xid,
                    Py_ssize_t row=-1, Py_ssize_t tb_row=-1, Py_ssize_t nrows=0) except -1:
        """row: the event rows the spool held before this message's, tb_row the typed rows
        of tb[rb_id] (see note_xid); nrows: the rows the message makes (seq_next)."""
        cdef Spool sp = self.cur
        if self.state == ST_STREAM:
            sp.note_xid(xid, row, rb_id if kind == REC_DML else -1, tb_row, -1)
        sp.seq_next += nrows
        if self.state == ST_STREAM and kind == REC_DML:       # without its xid: see REC_HEAD
            return sp.append(kind, False, rb_id, m, self.max_pending_bytes, self.spill_dir, 4)
        sp.append(kind, self.state == ST_STREAM, rb_id, m, self.max_pending_bytes, self.spill_dir)
        return 0

    cdef inline bint _side(self):
        """The changes of the open S..E block or b..P write their event rows into its
        Spool's EvStore (the check on arrival is then also their decode)."""
        return (self.want_events and (self.state == ST_STREAM or self.state == ST_PREPARE)
                and self.cur.ev_side)

    cdef void _side_init(self, Spool sp):
        """A new stream's or prepared transaction's spool keeps its event rows (_side) and
        its typed rows (_tb_for); its records start at the size the last one committed
        held (one block, from the block cache: no growth through copies)."""
        sp.mem.hint = self.spool_hint
        if self.want_events:
            sp.ev = self.ev_spare
            memset(&self.ev_spare, 0, sizeof(EvStore))
            sp.ev_side = True
        sp.tb_side = self.want_tables

    cdef RelBuilders _tb_for(self, Spool sp, RelBuilders rb):
        """The builders of the open S..E block's or b..P's spool for rb's relation version
        (made on first use), or None: its typed rows are not kept (the commit replays
        the spool for them)."""
        cdef RelBuilders t
        if not (sp.tb_side and self.want_tables and (self.state == ST_STREAM or self.state == ST_PREPARE)):
            return None
        t = sp.tb.get(rb.id)
        if t is None:
            if not rb.fixed_types:
                # (a column whose Arrow type waits on its values' format: the commit
                # decides it over all the rows, as a replay does)
                self._tb_drop(sp)
                return None
            t = self.tb_spare.pop(rb.id, None)
            if t is None or t.version is not rb.version:
                t = rb.side_copy()
            sp.tb[rb.id] = t
        return t

    cdef void _tb_drop(self, Spool sp):
        """From here the spool keeps no typed rows; its commit replays it for them."""
        sp.tb_side = False
        sp.tb = {}
        sp.first_tb = {}

    cdef Py_ssize_t _tb_nbytes(self, Spool sp):
        cdef RelBuilders t
        cdef Py_ssize_t n = 0
        for t in sp.tb.values():
            n += t.nbytes()
        return n

    cdef int _ev_adopt(self, Spool sp) except -1:
        """A committing spool's event rows become an EvChunk as they are, with the
        commit's metadata (ctx) filled in; the decoder's own rows (all committed) are
        sealed in one before them, so that the output keeps commit order. The next
        spool starts its buffers at this one's sizes."""
        cdef EvChunk ch
        cdef Buf *done[EV_NBUFS]
        cdef Buf *spare[EV_NBUFS]
        cdef int i
        if self.ev.meta.rows:
            ch = EvChunk.__new__(EvChunk)
            ch.ev = self.ev
            memset(&self.ev, 0, sizeof(EvStore))
            self.ev_chunks.append(ch)
            self.ev_committed = 0
        meta_fill_commit(&sp.ev.meta, &self.ctx)
        ch = EvChunk.__new__(EvChunk)
        ch.ev = sp.ev
        memset(&sp.ev, 0, sizeof(EvStore))
        sp.ev_side = False
        self.ev_chunks.append(ch)
        ev_free(&self.ev_spare)
        memset(&self.ev_spare, 0, sizeof(EvStore))
        if ev_bufs(&ch.ev, done) < 0 or ev_bufs(&self.ev_spare, spare) < 0:
            raise MemoryError()
        for i in range(EV_NBUFS):
            spare[i].hint = done[i].len
        return 0

    cdef void _ev_swap(self, Spool sp):
        cdef EvStore t = self.ev
        self.ev = sp.ev
        sp.ev = t

    cdef void _side_check(self, Spool sp):
        """Past max_pending_bytes (the spool's bytes in memory, its event rows and its
        typed rows together), the rows are dropped and the commit decodes the spool
        again."""
        cdef Py_ssize_t n = sp.mem.len
        if not (sp.ev_side or sp.tb_side):
            return
        if sp.ev_side:
            n += ev_nbytes(&sp.ev)
        if sp.tb_side:
            n += self._tb_nbytes(sp)
        if n > self.max_pending_bytes:
            if sp.ev_side:
                ev_free(&sp.ev)
                sp.ev_side = False
            self._tb_drop(sp)

    cdef int _spool_run(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs) except -1:
        """Check and spool a run of changes of one relation from refs[*index] (in S..E, b..P
        or a spooled B..C), as _on_dml does one at a time: a write of the whole run
        (through _run_fast, and _write_dml for what it leaves), then the spool. Where the
        spool keeps rows (its EvStore, _side; its typed builders, _tb_for) they stay;
        whatever else was written is undone at once (a dry run). Nothing a change's
        check decides depends on the changes before it in the builders or the event
        buffers, so one undo per run is the undo after each. *index ends at the first
        message not taken (the caller dispatches it), or at the bad one when the check
        raises."""
        cdef Py_ssize_t i = index[0], j, k
        cdef int xo = 4 if self.state == ST_STREAM else 0
        cdef const MsgRef *m = &refs[i]
        cdef uint32_t relid
        cdef uint8_t t
        cdef RelBuilders rb
        cdef Cursor c
        cdef int64_t seq
        cdef bint was_dirty
        if m.n < 8 + xo or (m.p[0] != 73 and m.p[0] != 85 and m.p[0] != 68):
            return 0
        relid = pgo_be32(m.p + 1 + xo)
        rb = self.last_rb
        if rb is None or rb.relid != relid:
            rb = self.rb_current.get(relid)
            if rb is None:
                return 0                  # _on_dml reports it
            self.last_rb = rb
        j = i + 1
        while j < nrefs and j - i < SPOOL_RUN_ROWS:
            m = &refs[j]
            t = m.p[0] if m.n > 0 else 0
            if m.n < 8 + xo or (t != 73 and t != 85 and t != 68) or pgo_be32(m.p + 1 + xo) != relid:
                break
            j += 1
        if j - i < 2:
            return 0
        cdef bint side = self._side()
        cdef Spool sp = self.cur
        cdef Py_ssize_t row0 = 0, tb_row0 = -1
        cdef RelBuilders w = self._tb_for(sp, rb)   # where the check writes
        cdef bint ok = False
        seq = self.ctx.seq
        if w is None:
            w = rb
        else:
            tb_row0 = w.meta.rows
            self.ctx.seq = sp.seq_next        # seq: the row's place in the transaction
        was_dirty = rb.dirty
        if side:
            row0 = sp.ev.meta.rows
            self._ev_swap(sp)
            self.ctx.seq = row0
        k = i
        try:
            while k < j:
                self._run_fast(refs, &k, j, w, xo)
                if k >= j:
                    break
                m = &refs[k]
                cur_init(&c, m.p, m.n)
                c.pos = 1 + xo
                self._write_dml(m, &c, m.p[0], w)
                k += 1
            ok = True
        finally:
            # undone whatever happened; the changes checked (all, or those before a bad
            # one, as _on_dml would have left them) go to the spool
            index[0] = k
            if w is rb:
                rb.rollback()
                if not was_dirty and self.dirty and self.dirty[len(self.dirty) - 1] is rb:
                    self.dirty.pop()
            elif not ok or w.meta.rows != tb_row0 + (k - i):
                self._tb_drop(sp)             # (a change that raised: the commit replays)
                tb_row0 = -1
            if side:
                ev_truncate(&self.ev, row0 + (k - i))   # the checked changes' rows stay
                self._ev_swap(sp)
            else:
                self._ev_truncate(self.ev_committed)
            self.ctx.seq = seq
            self._spool_checked(refs, i, k, rb, xo, row0, tb_row0)
        if side or sp.tb_side:
            self._side_check(sp)
        return 0

    cdef int _spool_checked(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                            RelBuilders rb, int xo, Py_ssize_t row0, Py_ssize_t tb_row0=-1) except -1:
        self.cur.append_dml_run(refs, i, j, rb.id, xo != 0, self.max_pending_bytes, self.spill_dir,
                                row0, tb_row0)
        if self.state == ST_TXN:
            self.ctx.seq += j - i             # open_changes of pending()
        return 0

    cdef int _on_dml(self, const MsgRef *m, Cursor *c, uint8_t t, uint32_t xid) except -1:
        cdef uint32_t relid
        cdef Py_ssize_t start = c.pos
        cdef RelBuilders rb = self._rel(m, c, &relid)
        cdef bint side, ok = False
        cdef Spool sp
        cdef RelBuilders w
        cdef Py_ssize_t row0 = -1, tb_row0 = -1
        if self.state == ST_TXN and not self.txn_spooled:
            c.pos = start
            return self._write_dml(m, c, t, rb)
        if self.state != ST_NONE:
            # validate now, exactly as the replay will decode it, so a bad message fails
            # where it arrives and not at commit: a dry-run write, rolled back at once
            # (outside B..C, and in a spooled one whose rows were dropped, the builders
            # hold only committed rows and the event buffers nothing uncommitted, so
            # undoing this one change is undoing rb and the events). Where the spool keeps
            # event rows (_side) or typed rows (_tb_for), this change's rows are written
            # into it and stay.
            c.pos = start
            seq = self.ctx.seq
            was_dirty = rb.dirty
            side = self._side()
            sp = self.cur
            w = self._tb_for(sp, rb)          # where the check writes
            if w is None:
                w = rb
            else:
                tb_row0 = w.meta.rows
                self.ctx.seq = sp.seq_next
            if side:
                row0 = sp.ev.meta.rows
                self._ev_swap(sp)
                self.ctx.seq = row0
            try:
                self._write_dml(m, c, t, w)
                ok = True
            finally:
                if w is rb:
                    rb.rollback()
                    if not was_dirty and self.dirty and self.dirty[len(self.dirty) - 1] is rb:
                        self.dirty.pop()
                elif not ok or w.meta.rows != tb_row0 + 1:
                    self._tb_drop(sp)         # (the change raised: the commit replays)
                    tb_row0 = -1
                if side:
                    ev_truncate(&self.ev, row0 + 1 if ok else row0)
                    self._ev_swap(sp)
                else:
                    self._ev_truncate(self.ev_committed)
                self.ctx.seq = seq
            self._spool(m, REC_DML, rb.id, xid, row0, tb_row0, 1)
            if side or sp.tb_side:
                self._side_check(sp)
            if self.state == ST_TXN:
                self.ctx.seq += 1               # open_changes of pending()
            return 0
        self._fail("change outside a transaction", m, 0)

    cdef int _on_truncate(self, const MsgRef *m, Cursor *c, uint32_t xid) except -1:
        if self.state == ST_TXN and not self.txn_spooled:
            return self._write_truncate(m, c, None)
        msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=self.state == ST_STREAM)
        if self.state != ST_NONE:
            # the relation versions are those in effect where the Truncate arrives
            targets = self._truncate_targets(msg, m)
            row0 = -1
            if self._side():
                row0 = self._side_truncate(m, c, targets)
            if self.cur.tb_side and self.state != ST_TXN:
                self._tb_drop(self.cur)       # (a Truncate's typed rows: the commit replays)
            self.cur.truncates.append(targets)
            self._spool(m, REC_TRUNCATE, len(self.cur.truncates) - 1, xid, row0, -1, len(targets))
            if self.state == ST_TXN:
                self.ctx.seq += len(targets)
            return 0
        self._fail("Truncate outside a transaction", m, 0)

    cdef Py_ssize_t _side_truncate(self, const MsgRef *m, Cursor *c, list targets) except -1:
        """The event rows of a Truncate into the open spool's EvStore (_side): one per
        relation, as _write_truncate writes them. Returns the rows it held before."""
        cdef Spool sp = self.cur
        cdef RelBuilders rb
        cdef Py_ssize_t row0 = sp.ev.meta.rows
        cdef int64_t seq = self.ctx.seq
        cdef bint ok = False
        if c.pos + 4 >= m.n:                  # (decode_message checked it)
            self._fail("Truncate without options", m, c.pos)
        self._ev_swap(sp)
        self.ctx.seq = row0
        try:
            for rb in targets:
                self._ev_truncate_row(rb, m, m.p[c.pos + 4])
                self.ctx.seq += 1
            ok = True
        finally:
            if not ok:
                ev_truncate(&self.ev, row0)
            self._ev_swap(sp)
            self.ctx.seq = seq
        self._side_check(sp)
        return row0

    cdef int _ev_truncate_row(self, RelBuilders rb, const MsgRef *m, int options) except -1:
        self._ev_row(rb, m, b't', options)
        if map_end_row(&self.ev.before, 0) < 0 or map_end_row(&self.ev.after, 0) < 0:
            raise MemoryError()
        self._ev_toast_end()
        return 0

    cdef list _truncate_targets(self, object msg, const MsgRef *m):
        targets = []
        for relid in msg.relids:
            rb = self.rb_current.get(relid)
            if rb is None:
                self._fail(f"Truncate of relation {relid} before any Relation message for it", m, 0)
            targets.append(rb)
        return targets

    cdef int _on_logical_message(self, const MsgRef *m, uint32_t xid) except -1:
        msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=self.state == ST_STREAM)
        if not msg.transactional:
            self.out_messages.append((msg, m.lsn, None, None, None, None))
        elif self.state == ST_TXN and self.txn_spooled:
            self._spool(m, REC_MESSAGE, -1, xid)
        elif self.state == ST_TXN:
            self.txn_messages.append((msg, m.lsn, self.ctx.commit_lsn, self.ctx.commit_ts,
                                      self.ctx.xid, self.origins[self.ctx.origin] if self.ctx.origin >= 0 else None))
        elif self.state == ST_STREAM or self.state == ST_PREPARE:
            self._spool(m, REC_MESSAGE, -1, xid)
        else:
            self._fail("transactional Message outside a transaction", m, 0)
        return 0

    cdef int _write_truncate(self, const MsgRef *m, Cursor *c, list targets) except -1:
        cdef RelBuilders rb
        cdef int options
        if targets is None:
            msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=c.pos == 5)
            targets = self._truncate_targets(msg, m)
        if c.pos + 4 >= m.n:                  # checked on arrival; kept for safety
            self._fail("Truncate without options", m, c.pos)
        options = m.p[c.pos + 4]              # after nrels
        for rb in targets:
            self._touch(rb)
            if self.want_tables:
                self._append_null_row(rb, m)
                if meta_append(&rb.meta, m.lsn, &self.ctx, b't') < 0:
                    raise MemoryError()
            if self.want_events:
                self._ev_truncate_row(rb, m, options)
            self.ctx.seq += 1
        return 0

    cdef inline void _touch(self, RelBuilders rb):
        if not rb.dirty:
            rb.dirty = True
            self.dirty.append(rb)

    cdef int _append_null_row(self, RelBuilders rb, const MsgRef *m) except -1:
        cdef int i
        for i in range(rb.ncols):
            if col_end_row(rb.cols[i], 0, 0) < 0:
                raise MemoryError()
        return 0

    cdef int _write_dml(self, const MsgRef *m, Cursor *c, uint8_t t, RelBuilders rb) except -1:
        """Scan an I/U/D whose relid has been checked; c is positioned at the relid."""
        cdef uint8_t b
        cdef uint8_t old_kind = 0
        cdef Py_ssize_t at
        c.pos += 4
        self._touch(rb)
        if self.want_events:
            self._ev_row(rb, m, b'c' if t == 73 else (b'u' if t == 85 else b'd'), -1)
        if rd_u8(c, &b) < 0:
            self._fail_cursor(c)
        if t == 73:
            if b != 78:
                self._fail("Insert: expected 'N' before the new tuple", m, c.pos - 1)
            if self.want_events:
                map_end_row(&self.ev.before, 0)
                self._ev_kind(0)
            self._scan_new(m, c, rb)
        elif t == 85:
            if b == 75 or b == 79:
                old_kind = b
                self._scan_old(m, c, rb, old_kind)
                at = c.pos
                if rd_u8(c, &b) < 0:
                    self._fail_cursor(c)
                if b != 78:
                    self._fail("Update: expected 'N' after the old tuple", m, at)
            elif b != 78:
                self._fail(f"Update: expected 'K', 'O' or 'N', got 0x{b:02x}", m, c.pos - 1)
            else:
                if self.want_events:
                    map_end_row(&self.ev.before, 0)
                    self._ev_kind(0)
            self._scan_new(m, c, rb)
        else:
            if b != 75 and b != 79:
                self._fail(f"Delete: expected 'K' or 'O', got 0x{b:02x}", m, c.pos - 1)
            at = c.pos
            self._scan_old(m, c, rb, b)
            if self.want_tables:
                # the typed row of a delete holds the old key / old row
                c.pos = at
                self._scan_tuple(m, c, rb, rb.cols, 0, b, rb.meta.rows)
            if self.want_events:
                map_end_row(&self.ev.after, 0)
        if cur_expect_end(c) < 0:
            self._fail_cursor(c)
        if self.want_tables:
            if meta_append(&rb.meta, m.lsn, &self.ctx, b'c' if t == 73 else (b'u' if t == 85 else b'd')) < 0:
                raise MemoryError()
        if self.want_events:
            self._ev_toast_end()
        self.ctx.seq += 1
        return 0

    cdef int _fast_run(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
                       RelBuilders rb, int xo) except -1:
        """Write the run of changes from refs[*index] on that _write_dml would write the
        same way with no choice to make: inserts, updates and deletes of rb's relation (and
        column count), typed tables only, in blocks of one shape (BLOCK_*). xo is 4 for
        changes that carry a streamed transaction's xid after the type byte, else 0.
        *index is kept at the message being written (the caller's
        index for errors) and ends at the first message not taken, which the caller
        dispatches as usual. Each message gets exactly _write_dml's checks, in its order:
        the header tests only choose the path; a TupleData that scan_typed_fast does not
        finish goes on in the full loop from the column it stopped at, and anything
        wrong raises from there with the same message and offset."""
        cdef Column **cols = rb.cols
        cdef Meta *meta = &rb.meta
        cdef Ctx *ctx = &self.ctx
        cdef uint32_t relid = rb.relid
        cdef int ncols = rb.ncols
        cdef Py_ssize_t i = index[0]
        cdef Py_ssize_t j, nbytes, pos
        cdef const MsgRef *m
        cdef const unsigned char *p
        cdef Cursor c
        cdef uint8_t t
        cdef int k, rc
        cdef bint roomy, with_old
        cdef int olds                # BLOCK_NEW / BLOCK_DELETES / BLOCK_UPDATES_OLD
        while i < nrefs:
            # a block of the run: room for all of it reserved at once (meta_put and
            # scan_typed_roomy then store without checks). A block is of inserts and
            # updates without an old tuple; of deletes (their old tuple is also the
            # row: _before's dense columns and the row's both get it); or of updates
            # with an old tuple (to _before) and the new one (the row)
            j = block_end(refs, i, nrefs, relid, ncols, xo, &olds, &nbytes)
            with_old = olds != BLOCK_NEW
            if j == i:
                break
            rc = reserve_block(ncols, cols, j - i, nbytes)
            if rc < 0 or meta_reserve(meta, j - i) < 0:
                raise MemoryError()
            roomy = rc == 0
            if with_old:
                rb.ensure_before()
                rc = reserve_block(ncols, rb.before, j - i, nbytes)
                if (rc < 0 or buf_reserve(&rb.before_rows, 4 * (j - i)) < 0
                        or buf_reserve(&rb.before_kind, j - i) < 0):
                    raise MemoryError()
                roomy = roomy and rc == 0
            if not rb.dirty:
                self._touch(rb)
            if roomy and ncols > 0 and j - i >= CP_MIN_ROWS:
                i = self._column_block(refs, i, j, nrefs, rb, olds, xo)
            if with_old:
                if i < j:            # the rest through _write_dml, one at a time
                    i = self._typed_rows(refs, i, j, index, rb, xo)
                continue
            while i < j:
                m = &refs[i]
                p = m.p
                index[0] = i
                pos = 8 + xo
                rc = 0
                if roomy:
                    k = scan_typed_roomy(p, &pos, m.n, ncols, cols, &rc)
                else:
                    k = scan_typed_fast(p, &pos, m.n, ncols, cols, &rc)
                if k != ncols or rc != 0 or pos != m.n:
                    cur_init(&c, p, m.n)
                    c.pos = pos
                    self._scan_typed_from(m, &c, rb, cols, 0, meta.rows, k, rc)
                    if cur_expect_end(&c) < 0:
                        self._fail_cursor(&c)
                meta_put(meta, m.lsn, ctx, b'c' if p[0] == 73 else b'u')
                ctx.seq += 1
                i += 1
        index[0] = i
        return 0

    cdef Py_ssize_t _dml_rows(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                              Py_ssize_t *index, RelBuilders rb, int xo) except -1:
        """Changes refs[i:j] of rb's relation (I/U/D, their headers checked by
        block_end) written one at a time by _write_dml, as the caller would: a block too
        short for the block writers. *index is kept at the change being written. Returns
        j."""
        cdef Cursor c
        while i < j:
            index[0] = i
            cur_init(&c, refs[i].p, refs[i].n)
            c.pos = 1 + xo
            self._write_dml(&refs[i], &c, refs[i].p[0], rb)
            i += 1
        return i

    cdef Py_ssize_t _typed_rows(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                                Py_ssize_t *index, RelBuilders rb, int xo) except -1:
        """_dml_rows into the typed tables only: the rest of a block of old tuples that
        the column pass did not take (or too short for it). With the change-event table
        also built, its rows for these changes are already written (_run_fast): the
        typed tables go on here instead of stopping the run, after which the event rows
        past the stop would be cut and written again from there."""
        cdef bint events = self.want_events
        self.want_events = False
        try:
            return self._dml_rows(refs, i, j, index, rb, xo)
        finally:
            self.want_events = events

    cdef int _run_fast(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
                       RelBuilders rb, int xo) except -1:
        """The block writers for what this decoder builds: _fast_run (typed tables),
        _ev_fast_run (change-event table), or both over the same changes: the events
        first, then the typed tables over the changes the events took, and the events cut
        back to where the typed tables stopped (one event row per change). *index ends at
        the first change not written (or, when the typed tables raise, at the change that
        raised), which the caller dispatches row-wise."""
        cdef Py_ssize_t i = index[0], k
        cdef Py_ssize_t ev_base = self.ev.meta.rows
        cdef int64_t seq = self.ctx.seq
        if not self.want_events:
            return self._fast_run(refs, index, nrefs, rb, xo)
        self._ev_fast_run(refs, index, nrefs, rb, xo)
        if not self.want_tables:
            return 0
        k = index[0]
        if k == i:
            return 0
        index[0] = i
        self.ctx.seq = seq
        try:
            self._fast_run(refs, index, k, rb, xo)
        finally:
            if index[0] < k:
                ev_truncate(&self.ev, ev_base + (index[0] - i))
        return 0

    cdef int _ev_fast_run(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
                          RelBuilders rb, int xo) except -1:
        """The change-event table's _fast_run: the run of changes of rb's relation from
        refs[*index] in blocks of one shape (block_end), each through the row pass and
        _ev_block. *index ends at
        the first message not written, which the caller dispatches as usual (it writes
        it row-wise, or reports what is wrong with it)."""
        cdef uint32_t relid = rb.relid
        cdef int ncols = rb.ncols
        cdef Py_ssize_t i = index[0], j, k, nbytes
        cdef int olds
        if ncols == 0:
            return 0
        while i < nrefs:
            j = block_end(refs, i, nrefs, relid, ncols, xo, &olds, &nbytes)
            if j == i:
                break
            if not rb.dirty:
                self._touch(rb)
            if j - i < CP_MIN_ROWS:
                if self.want_tables:
                    break                # (the caller writes it row-wise, both outputs)
                i = self._dml_rows(refs, i, j, index, rb, xo)
                continue
            k = self._ev_block(refs, i, j, nrefs, rb, olds, xo)
            if k < j:
                i = k
                break
            i = j
        index[0] = i
        return 0

    cdef Py_ssize_t _ev_block(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                              Py_ssize_t nrefs, RelBuilders rb, int olds, int xo) except -1:
        """The rows i..j of an _ev_fast_run block into the change-event table: each
        change's tuples read and written into the maps in one pass (ev_tuple), then the
        rows' metadata a column at a time. Returns the first row not written (the
        row-wise scan takes it from there). nrefs: the messages there are (the next
        block's are prefetched as this one goes)."""
        cdef EvStore *e = &self.ev
        cdef bint two = olds == BLOCK_UPDATES_OLD
        cdef int ncols = rb.ncols
        cdef Py_ssize_t rows = j - i, done = 0, base, r, pos, end
        cdef const unsigned char *p
        cdef int32_t endo, zero = 0
        cdef int64_t relid = rb.relid
        cdef int32_t rid = rb.id
        cdef char op = b'd' if olds == BLOCK_DELETES else b'u' if olds == BLOCK_UPDATES_OLD else 0
        cdef Py_ssize_t ahead = prefetch_end(j, nrefs), fetch = j
        base = e.meta.rows
        while done < rows:
            p = refs[i + done].p
            end = refs[i + done].n
            fetch = prefetch_msgs(refs, fetch, j + (done + 1) * (ahead - j) // rows)   # (a share per row)
            pos = 8 + xo
            if olds != BLOCK_NEW:               # the old image: 'K' (key columns) or 'O'
                pos = ev_tuple(&e.before, p, pos, end, ncols, rb.names, rb.name_end, rb.is_key,
                               p[5 + xo] == 75, rb.ctype, rb.fmemo)
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
                    if end - pos < 3 or p[pos] != 78 or pgo_be16s(p + pos + 1) != ncols:
                        pos = -1
                        break
                    pos += 3
                pos = ev_tuple(&e.after, p, pos, end, ncols, rb.names, rb.name_end, rb.is_key,
                               False, rb.ctype, rb.fmemo)
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
                raise MemoryError()
        if done:
            if (meta_reserve(&e.meta, done) < 0 or buf_reserve(&e.relid, 8 * done) < 0
                    or buf_reserve(&e.rb, 4 * done) < 0 or buf_reserve(&e.before_kind, done) < 0
                    or buf_reserve(&e.trunc, done) < 0 or buf_reserve(&e.toast_off, 4 * (done + 1)) < 0):
                raise MemoryError()
            meta_put_run(&e.meta, refs + i, done, &self.ctx, op)
            endo = <int32_t>(e.toast_ids.len >> 2)
            if e.toast_off.len == 0:
                memcpy(e.toast_off.data, &zero, 4)
                e.toast_off.len = 4
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

    cdef Py_ssize_t _column_block(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                                  Py_ssize_t nrefs, RelBuilders rb, int olds, int xo) except -1:
        """The rows i..j of a _fast_run block (room reserved) through the row pass and
        the column pass (cp_rows, cp_column), as far as they take them; returns the
        first row not written, from which the row-wise scan goes on. olds: what the
        block is made of (BLOCK_*); an old tuple goes to _before's dense columns, as
        _scan_old writes it, before the row. nrefs: the messages there are (the next
        block's are prefetched, a share per column pass)."""
        cdef Column **cols = rb.cols
        cdef Column **before = rb.before
        cdef Py_ssize_t bbase
        cdef int32_t row32
        cdef bint two = olds == BLOCK_UPDATES_OLD
        cdef int ncols = rb.ncols
        cdef Meta *meta = &rb.meta
        cdef Ctx *ctx = &self.ctx
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
        cdef Py_ssize_t i0 = i, ahead = prefetch_end(j, nrefs), fetch = j
        if cp_tables(&self.cp_scratch, stride, ncols, two, &tb) < 0:
            raise MemoryError()
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
            bbase = rb.nbefore
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
                    raise MemoryError()
            if olds != BLOCK_NEW:
                row32 = <int32_t>meta.rows
                brows = rb.before_rows.data + rb.before_rows.len
                bkind = rb.before_kind.data + rb.before_kind.len
                for r in range(done):
                    memcpy(brows + 4 * r, &row32, 4)
                    row32 += 1
                    bkind[r] = refs[i + r].p[5 + xo]
                rb.before_rows.len += 4 * done
                rb.before_kind.len += done
                rb.nbefore += done
            meta_put_run(meta, refs + i, done, ctx, op)
            i += done
            if done < rows or rc != 0:
                return i
        return i

    cdef int _scan_new(self, const MsgRef *m, Cursor *c, RelBuilders rb) except -1:
        cdef Py_ssize_t at = c.pos
        if not self.want_tables and not self.want_events:
            return self._skip_tuple(m, c, rb, 0)
        if self.want_tables:
            self._scan_tuple(m, c, rb, rb.cols, 0, 0, rb.meta.rows)
        if self.want_events:
            c.pos = at
            self._scan_tuple(m, c, rb, NULL, 0, 0, -1)
        return 0

    cdef int _scan_old(self, const MsgRef *m, Cursor *c, RelBuilders rb, uint8_t kind) except -1:
        cdef int32_t row = <int32_t>rb.meta.rows
        cdef Py_ssize_t at = c.pos
        if not self.want_tables and not self.want_events:
            return self._skip_tuple(m, c, rb, 1)
        if self.want_tables:
            rb.ensure_before()
            if buf_append(&rb.before_rows, &row, 4) < 0 or buf_append(&rb.before_kind, &kind, 1) < 0:
                raise MemoryError()
            self._scan_tuple(m, c, rb, rb.before, 1, kind, rb.meta.rows)
            rb.nbefore += 1
        if self.want_events:
            self._ev_kind(kind)
            if not self.want_tables:
                self._scan_tuple(m, c, rb, NULL, 1, kind, -1)
            else:
                c.pos = at
                self._scan_tuple(m, c, rb, NULL, 1, kind, -1)
        return 0

    cdef int _scan_typed(self, const MsgRef *m, Cursor *c, RelBuilders rb, Column **cols,
                         bint is_old, Py_ssize_t row) except -1:
        """The typed scan of one TupleData: the hot loop of the decoder.

        Position and end live in locals (registers), not in the Cursor; the Cursor is
        updated at the end, or just before an error is raised from it.
        """
        cdef const unsigned char *buf = c.buf
        cdef Py_ssize_t pos = c.pos
        cdef Py_ssize_t end = c.len
        cdef Py_ssize_t at = pos
        cdef int16_t ncols
        cdef int i
        cdef int rc = 0
        if end - pos < 2:
            return self._fail_short(c, pos, 2)
        ncols = pgo_be16s(buf + pos)
        if ncols != rb.ncols:
            self._fail(f"TupleData has {ncols} columns but relation {rb.version.qualified_name} "
                       f"(relid {rb.version.relid}) has {rb.ncols}", m, at)
        pos += 2
        i = scan_typed_fast(buf, &pos, end, ncols, cols, &rc)
        c.pos = pos
        if i == ncols and rc == 0:
            return 0
        return self._scan_typed_from(m, c, rb, cols, is_old, row, i, rc)

    cdef int _scan_typed_from(self, const MsgRef *m, Cursor *c, RelBuilders rb, Column **cols,
                              bint is_old, Py_ssize_t row, int i, int rc) except -1:
        """The rest of a TupleData's typed scan after scan_typed_fast stopped at column i
        (with its builder code rc) and c.pos at that column's kind byte: the full loop,
        with every check and error report."""
        cdef const unsigned char *buf = c.buf
        cdef Py_ssize_t pos = c.pos
        cdef Py_ssize_t end = c.len
        cdef Py_ssize_t at
        cdef const unsigned char *p
        cdef const char *why = NULL
        cdef Column *col
        cdef int ncols = rb.ncols
        cdef int32_t n
        cdef uint8_t kind
        if rc < 0:
            self._builder_fail(rc, m, rb, i)
        for i in range(i, ncols):
            at = pos
            if pos >= end:
                return self._fail_short(c, pos, 1)
            kind = buf[pos]
            pos += 1
            col = cols[i]
            if kind == 116 or kind == 98:           # 't' / 'b'
                if end - pos < 4:
                    return self._fail_short(c, pos, 4)
                n = pgo_be32s(buf + pos)
                pos += 4
                if n < 0:
                    self._fail(f"negative value length {n} in column {i}", m, pos - 4)
                if end - pos < n:
                    return self._fail_short(c, pos, n)
                p = buf + pos
                pos += n
                if kind == 116:
                    rc = parse_text_value(col, p, n, &why)
                else:
                    rc = parse_binary_value(col, p, n, &why)
                if rc == 0:
                    rc = col_end_valid(col)
                    if rc < 0:
                        self._builder_fail(rc, m, rb, i)
                elif rc == 1:
                    if col_end_row(col, 0, 0) < 0:
                        raise MemoryError()
                    rb.specials.append((row, i, is_old, chr(kind), bytes(<const unsigned char[:n]>p)))
                else:
                    self._value_fail(m, rb, i, kind, p, n, why, at)
            elif kind == 110:                        # 'n'
                if col_end_row(col, 0, 0) < 0:
                    raise MemoryError()
            elif kind == 117:                        # 'u'
                if is_old:
                    self._fail(f"unchanged-TOAST marker 'u' in an old tuple (column "
                               f"{rb.version.column_names[i]!r})", m, at)
                if col_end_row(col, 0, 1) < 0:
                    raise MemoryError()
            else:
                self._fail(f"unknown TupleData column kind byte 0x{kind:02x} in column {i}", m, at)
        c.pos = pos
        return 0

    cdef int _fail_short(self, Cursor *c, Py_ssize_t pos, Py_ssize_t need) except -1:
        c.pos = pos
        cur_need(c, need)
        return self._fail_cursor(c)

    cdef int _scan_tuple(self, const MsgRef *m, Cursor *c, RelBuilders rb, Column **cols,
                         bint is_old, uint8_t old_kind, Py_ssize_t row) except -1:
        """Scan one TupleData into `cols` (typed) or, with cols NULL, into the event map.

        The typed and the event pass are separate scans of the same bytes: each stays a
        tight loop with one job.
        """
        if cols != NULL:
            return self._scan_typed(m, c, rb, cols, is_old, row)
        cdef int16_t ncols
        cdef int i, rc
        cdef uint8_t kind
        cdef int32_t n
        cdef Py_ssize_t at = c.pos
        cdef const unsigned char *p
        cdef const char *why = NULL
        cdef Column *col
        cdef MapB *mb
        cdef bint key_only = old_kind == 75
        if rd_i16(c, &ncols) < 0:
            self._fail_cursor(c)
        if ncols != rb.ncols:
            self._fail(f"TupleData has {ncols} columns but relation {rb.version.qualified_name} "
                       f"(relid {rb.version.relid}) has {rb.ncols}", m, at)
        if cols == NULL:
            mb = &self.ev.before if is_old else &self.ev.after
            if map_begin(mb) < 0:
                raise MemoryError()
        for i in range(ncols):
            at = c.pos
            if rd_u8(c, &kind) < 0:
                self._fail_cursor(c)
            if kind == 116 or kind == 98:           # 't' / 'b'
                if rd_i32(c, &n) < 0:
                    self._fail_cursor(c)
                if n < 0:
                    self._fail(f"negative value length {n} in column {i}", m, c.pos - 4)
                if rd_bytes(c, n, &p) < 0:
                    self._fail_cursor(c)
                if cols != NULL:
                    col = cols[i]
                    if kind == 116:
                        rc = parse_text_value(col, p, n, &why)
                    else:
                        rc = parse_binary_value(col, p, n, &why)
                    if rc == 0:
                        rc = col_end_valid(col)
                        if rc < 0:
                            self._builder_fail(rc, m, rb, i)
                    elif rc == 1:
                        if col_end_row(col, 0, 0) < 0:
                            raise MemoryError()
                        rb.specials.append((row, i, is_old, chr(kind), bytes(<const unsigned char[:n]>p)))
                    else:
                        self._value_fail(m, rb, i, kind, p, n, why, at)
                else:
                    if key_only and not rb.is_key[i]:
                        continue
                    self._ev_value(mb, rb, i, kind, p, n, m, at)
            elif kind == 110:                        # 'n'
                if cols != NULL:
                    if col_end_row(cols[i], 0, 0) < 0:
                        raise MemoryError()
                elif not (key_only and not rb.is_key[i]):
                    self._ev_key(mb, rb, i, m)
                    if col_end_row(mb.values, 0, 0) < 0:
                        raise MemoryError()
            elif kind == 117:                        # 'u'
                if is_old:
                    self._fail(f"unchanged-TOAST marker 'u' in an old tuple (column "
                               f"{rb.version.column_names[i]!r})", m, at)
                if cols != NULL:
                    if col_end_row(cols[i], 0, 1) < 0:
                        raise MemoryError()
                elif buf_append(&self.ev.toast_ids, &rb.name_ids[i], 4) < 0:
                    raise MemoryError()
            else:
                self._fail(f"unknown TupleData column kind byte 0x{kind:02x} in column {i}", m, at)
        if cols == NULL:
            if map_end_row(mb, 1) < 0:
                raise MemoryError()
        return 0

    cdef int _skip_tuple(self, const MsgRef *m, Cursor *c, RelBuilders rb, bint is_old) except -1:
        """Walk one TupleData and check its structure, storing nothing."""
        cdef int16_t ncols
        cdef int i
        cdef uint8_t kind
        cdef int32_t n
        cdef Py_ssize_t at = c.pos
        cdef const unsigned char *p
        if rd_i16(c, &ncols) < 0:
            self._fail_cursor(c)
        if ncols != rb.ncols:
            self._fail(f"TupleData has {ncols} columns but relation {rb.version.qualified_name} "
                       f"(relid {rb.version.relid}) has {rb.ncols}", m, at)
        for i in range(ncols):
            at = c.pos
            if rd_u8(c, &kind) < 0:
                self._fail_cursor(c)
            if kind == 116 or kind == 98:
                if rd_i32(c, &n) < 0:
                    self._fail_cursor(c)
                if n < 0:
                    self._fail(f"negative value length {n} in column {i}", m, c.pos - 4)
                if rd_bytes(c, n, &p) < 0:
                    self._fail_cursor(c)
            elif kind == 117:
                if is_old:
                    self._fail(f"unchanged-TOAST marker 'u' in an old tuple (column "
                               f"{rb.version.column_names[i]!r})", m, at)
            elif kind != 110:
                self._fail(f"unknown TupleData column kind byte 0x{kind:02x} in column {i}", m, at)
        return 0

    cdef int _builder_fail(self, int rc, const MsgRef *m, RelBuilders rb, int i) except -1:
        if rc == -2:
            self._fail(f"column {rb.version.column_names[i]!r} holds more than 2 GiB in one "
                       "batch; feed smaller batches", m, 0)
        raise MemoryError()

    cdef int _value_fail(self, const MsgRef *m, RelBuilders rb, int i, uint8_t kind,
                         const unsigned char *p, Py_ssize_t n, const char *why,
                         Py_ssize_t at) except -1:
        v = rb.version
        shown = PyBytes_FromStringAndSize(<const char *>p, min(n, 60))
        reason = (<bytes>why).decode() if why != NULL else "bad value"
        self._fail(f"{reason}: column {v.column_names[i]!r} of {v.qualified_name} "
                   f"(type oid {v.columns[i].type_oid}, {'text' if kind == 116 else 'binary'}) "
                   f"value {shown!r}", m, at)

    # -- change-event table --------------------------------------------------------
    cdef int _ev_row(self, RelBuilders rb, const MsgRef *m, char op, int trunc_options) except -1:
        """Start an event row; trunc_options is the Truncate's option byte, or -1."""
        cdef int64_t relid = rb.relid
        cdef int32_t rid = rb.id
        if (meta_append(&self.ev.meta, m.lsn, &self.ctx, op) < 0
                or buf_append(&self.ev.relid, &relid, 8) < 0 or buf_append(&self.ev.rb, &rid, 4) < 0
                or buf_append1(&self.ev.trunc, <unsigned char>(trunc_options & 0xFF)) < 0):
            raise MemoryError()
        if op == b't':
            self._ev_kind(0)
        return 0

    cdef inline int _ev_kind(self, uint8_t kind) except -1:
        if buf_append(&self.ev.before_kind, &kind, 1) < 0:
            raise MemoryError()
        return 0

    cdef int _ev_toast_end(self) except -1:
        cdef int32_t zero = 0
        cdef int32_t end = <int32_t>(self.ev.toast_ids.len >> 2)
        if self.ev.toast_off.len == 0 and buf_append(&self.ev.toast_off, &zero, 4) < 0:
            raise MemoryError()
        if buf_append(&self.ev.toast_off, &end, 4) < 0:
            raise MemoryError()
        return 0

    cdef int _ev_key(self, MapB *mb, RelBuilders rb, int i, const MsgRef *m) except -1:
        cdef int rc = map_key(mb, rb.names, rb.name_end, i)
        if rc == -2:
            self._fail("the change-event table holds more than 2 GiB of column names in one "
                       "batch; feed smaller batches", m, 0)
        if rc < 0:
            raise MemoryError()
        return 0

    cdef int _ev_value(self, MapB *mb, RelBuilders rb, int i, uint8_t kind,
                       const unsigned char *p, Py_ssize_t n, const MsgRef *m, Py_ssize_t at) except -1:
        cdef const char *why = NULL
        cdef int rc
        self._ev_key(mb, rb, i, m)
        if kind == 116:
            if n == 1 and p[0] >= 0x80 and rb.ctype[4 * i] == K_CHAR:
                # "char" from PostgreSQL 14: the raw byte; shown as 15's \ooo, as typed
                if char_as_text(&mb.values.data, p, 1, &why) < 0:
                    raise MemoryError()
            elif utf8_invalid_at(p, n) >= 0:
                self._value_fail(m, rb, i, kind, p, n, WHY_UTF8, at)
            elif col_push_bytes(mb.values, p, n) < 0:
                raise MemoryError()
        else:
            rc = fmt_column_value(rb.ctype[4 * i], rb.ctype + 4 * i, p, n, &mb.values.data,
                                  rb.fmemo + i, &why)
            if rc < 0:
                self._value_fail(m, rb, i, kind, p, n, why, at)
        rc = col_end_valid(mb.values)
        if rc < 0:
            self._builder_fail(rc, m, rb, i)
        return 0

    cdef void _ev_truncate(self, Py_ssize_t rows):
        ev_truncate(&self.ev, rows)

    # -- output --------------------------------------------------------------------
    cdef object _specials_column(self, RelBuilders rb, Py_ssize_t n):
        """map<string,string> per row: values the typed column could not represent."""
        typ = MAP_TYPE
        if not rb.specials:
            return _null_array(typ, n)
        names = rb.version.column_names
        per_row = {}
        for row, i, is_old, fmt, data in rb.specials:
            if fmt == "t":
                text = data.decode("utf-8", "surrogateescape")
            else:
                text = self._format_binary(rb.col_types[i], data)
            key = ("_before." if is_old else "") + names[i]
            per_row.setdefault(row, []).append((key, text))
        return pa.array([per_row.get(r) for r in range(n)], typ)

    cdef str _format_binary(self, object ct, bytes data):
        return format_binary_values(ct, [data])[0]

    def export(self):
        """(tables: [(RelationVersion, pa.Table)], events: pa.Table | None, messages: list)."""
        cdef RelBuilders rb
        tables = []
        for rb in self.rb_all:
            if rb.committed:
                tables.append((rb.version, rb.export(self)))
        events = self._export_events() if self.want_events else None
        msgs = self.out_messages
        self.out_messages = []
        return tables, events, msgs

    cdef object _export_events(self):
        """The committed event rows (the EvChunks, then the decoder's own) as one table
        of a RecordBatch each; the rows of a transaction still open stay."""
        cdef EvChunk ch
        batches = []
        chunks = self.ev_chunks
        self.ev_chunks = []
        for ch in chunks:
            batches.append(self._export_store(&ch.ev, ch.ev.meta.rows))
        del chunks
        if self.ev_committed or not batches:
            batches.append(self._export_own())
        return pa.Table.from_batches(batches, schema=EVENT_SCHEMA)

    cdef object _export_own(self):
        """The decoder's committed event rows as a RecordBatch (see _export_events)."""
        cdef Py_ssize_t n = self.ev_committed
        cdef Meta t_meta
        cdef Buf t_relid, t_rb, t_kind, t_trunc, t_toast_off, t_toast_ids
        cdef MapB t_before, t_after
        cdef int32_t base, end
        if self.ev.meta.rows == n:
            return self._export_event_rows()
        memset(&t_meta, 0, sizeof(Meta))
        memset(&t_relid, 0, sizeof(Buf)); memset(&t_rb, 0, sizeof(Buf))
        memset(&t_kind, 0, sizeof(Buf)); memset(&t_trunc, 0, sizeof(Buf))
        memset(&t_toast_off, 0, sizeof(Buf)); memset(&t_toast_ids, 0, sizeof(Buf))
        memset(&t_before, 0, sizeof(MapB)); memset(&t_after, 0, sizeof(MapB))
        if (meta_split(&self.ev.meta, n, &t_meta) < 0
                or buf_split(&self.ev.relid, 8 * n, &t_relid) < 0
                or buf_split(&self.ev.rb, 4 * n, &t_rb) < 0
                or buf_split(&self.ev.before_kind, n, &t_kind) < 0
                or buf_split(&self.ev.trunc, n, &t_trunc) < 0
                or map_split(&self.ev.before, n, &t_before) < 0
                or map_split(&self.ev.after, n, &t_after) < 0
                or offsets_split(&self.ev.toast_off, n, n + t_meta.rows, &t_toast_off, &base, &end) < 0
                or buf_split(&self.ev.toast_ids, 4 * <Py_ssize_t>base, &t_toast_ids) < 0):
            meta_free(&t_meta)
            buf_free(&t_relid); buf_free(&t_rb); buf_free(&t_kind); buf_free(&t_trunc)
            buf_free(&t_toast_off); buf_free(&t_toast_ids)
            map_free(&t_before); map_free(&t_after)
            raise MemoryError()
        events = self._export_event_rows()
        meta_free(&self.ev.meta)
        self.ev.meta = t_meta
        buf_free(&self.ev.relid); self.ev.relid = t_relid
        buf_free(&self.ev.rb); self.ev.rb = t_rb
        buf_free(&self.ev.before_kind); self.ev.before_kind = t_kind
        buf_free(&self.ev.trunc); self.ev.trunc = t_trunc
        buf_free(&self.ev.toast_off); self.ev.toast_off = t_toast_off
        buf_free(&self.ev.toast_ids); self.ev.toast_ids = t_toast_ids
        map_free(&self.ev.before); self.ev.before = t_before
        map_free(&self.ev.after); self.ev.after = t_after
        return events

    cdef object _export_event_rows(self):
        batch = self._export_store(&self.ev, self.ev_committed)
        self.ev_committed = 0
        ev_hints_keep(&self.ev)
        return batch

    cdef object _export_store(self, EvStore *e, Py_ssize_t n):
        """A RecordBatch of e's first n rows (all of them: the caller splits off the
        rest); e's buffers are handed over."""
        meta = meta_export(&e.meta, self.origins, "")
        rb_ids = _np_from_buf(&e.rb, np.int32, n)
        schemas = _strings_by_id_np([rb.version.schema for rb in self.rb_all], rb_ids)
        tables = _strings_by_id_np([rb.version.relname for rb in self.rb_all], rb_ids)
        relid = pa.array(_np_from_buf(&e.relid, np.int64, n), pa.int64())
        before_kind = _kind_strings(<const unsigned char *>e.before_kind.data, n)
        e.before_kind.len = 0             # (read, not handed over: its memory stays)
        before = map_export(&e.before)
        after = map_export(&e.after)
        if e.toast_off.len == 0:
            toast_off = np.zeros(n + 1, np.int32)
        else:
            toast_off = _np_from_buf(&e.toast_off, np.int32, n + 1)
        nt = int(toast_off[n]) if n else 0
        toast_names = _strings_by_id_np(self.names, _np_from_buf(&e.toast_ids, np.int32, nt))
        toast = pa.ListArray.from_arrays(pa.array(toast_off), toast_names)
        trunc = _np_from_buf(&e.trunc, np.uint8, n)
        cols = {
            "lsn": meta["lsn"], "commit_lsn": meta["commit_lsn"], "commit_ts": meta["commit_ts"],
            "xid": meta["xid"], "seq": meta["seq"], "op": meta["op"], "schema": schemas,
            "table": tables, "relid": relid, "before": before, "before_kind": before_kind,
            "after": after, "unchanged_toast": toast, "origin": meta["origin"],
            "truncate_options": _truncate_options(trunc),
        }
        return pa.RecordBatch.from_pydict(cols, schema=EVENT_SCHEMA)

    def _event_rows_held(self):
        """{top-level xid or GID: bytes of the event rows its spool holds, or None once
        they were dropped} (tests: the bound of _side_check)."""
        cdef Spool sp
        out = {}
        for key, sp in list(self.streams.items()) + list(self.prepared.items()):
            out[key] = ev_nbytes(&sp.ev) if sp.ev_side else None
        return out

    def _typed_rows_held(self):
        """{top-level xid or GID: bytes of the typed rows its spool holds, or None once
        they were dropped} (tests: the bound of _side_check)."""
        cdef Spool sp
        out = {}
        for key, sp in list(self.streams.items()) + list(self.prepared.items()):
            out[key] = self._tb_nbytes(sp) if sp.tb_side else None
        return out

    def pending_summary(self):
        """What is held back: open streams and prepared transactions, the open B..C."""
        cdef Spool sp
        spools = list(self.streams.values()) + list(self.prepared.values())
        if self.state == ST_PREPARE:
            spools.append(self.cur)
        if self.txn_carry is not None:
            spools.append(self.txn_carry)
        spilled = 0
        for sp in spools:
            spilled += sp.file_size
        return {
            "streams": {x: sp.size() for x, sp in self.streams.items()},
            "prepared": {g: sp.size() for g, sp in self.prepared.items()},
            "open_transaction": self.ctx.xid if self.state == ST_TXN else None,
            "open_changes": self.ctx.seq if self.state == ST_TXN else 0,
            "open_bytes": self.txn_carry.size() if self.txn_carry is not None else 0,
            "open_spooled": bool(self.txn_spooled),
            "spilled_bytes": spilled,
        }


cdef int64_t _unix_ts(int64_t pg_us, Py_ssize_t offset, str mtype) except? -1:
    if pg_us > 0x7FFFFFFFFFFFFFFF - PGO_UNIX_EPOCH_US:
        raise DecodeError(f"commit timestamp {pg_us} out of range", offset, mtype)
    return pg_us + PGO_UNIX_EPOCH_US


cdef object _truncate_options(object flags):
    """list<string> per event row: the Truncate's options, null for other operations."""
    is_t = flags != 0xFF
    if not is_t.any():
        return pa.nulls(len(flags), pa.list_(pa.string()))
    cascade = is_t & ((flags & 1) != 0)
    restart = is_t & ((flags & 2) != 0)
    counts = cascade.astype(np.int32) + restart.astype(np.int32)
    offsets = np.zeros(len(flags) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    starts = offsets[:len(flags)]          # (no negative indices: wraparound is off here)
    names = np.empty(int(offsets[len(flags)]), object)
    names[starts[cascade]] = "cascade"
    names[starts[restart] + cascade[restart]] = "restart_identity"
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(names, pa.string()),
                                    mask=pa.array(~is_t))


EVENT_SCHEMA = pa.schema([
    pa.field("lsn", pa.int64()),
    pa.field("commit_lsn", pa.int64(), nullable=False),
    pa.field("commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("xid", pa.int64(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("op", pa.string(), nullable=False),
    pa.field("schema", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("relid", pa.int64(), nullable=False),
    pa.field("before", MAP_TYPE),
    pa.field("before_kind", pa.string()),
    pa.field("after", MAP_TYPE),
    pa.field("unchanged_toast", pa.list_(pa.string())),
    pa.field("origin", pa.string()),
    pa.field("truncate_options", pa.list_(pa.string())),
])


cdef class MessageBatch:
    """The messages of one feed() as a C array of (pointer, length, lsn), zero copy.

    Accepts pa.BinaryArray / LargeBinaryArray / ChunkedArray of those, or any sequence
    of bytes-like objects. The batch keeps whatever owns the memory alive.
    """
    cdef MsgRef *refs
    cdef Py_ssize_t n
    cdef Buf mem                    # holds refs: a block of the shared cache (warm pages)
    cdef list owners

    def __cinit__(self):
        self.owners = []

    def __dealloc__(self):
        release_block(self.mem.data, self.mem.cap, self.mem.cap)

    cdef int _grow(self, Py_ssize_t extra) except -1:
        cdef int rc
        self.mem.len = self.n * <Py_ssize_t>sizeof(MsgRef)
        if self.mem.cap == 0:
            # the first messages, their count known: the tightest cached block (growth
            # by the 4x ladder would ask for a bigger one, which another buffer of the
            # batch then misses)
            rc = buf_reserve_exact(&self.mem, extra * <Py_ssize_t>sizeof(MsgRef))
        else:
            rc = buf_reserve(&self.mem, extra * <Py_ssize_t>sizeof(MsgRef))
        if rc < 0:
            raise MemoryError()
        self.refs = <MsgRef *>self.mem.data
        return 0

    def add(self, messages, lsn=None):
        """Append messages (an Arrow binary array, a ChunkedArray of those, or bytes-like
        objects) with their LSNs (uint64 or int64; None = unknown, 0)."""
        cdef Py_ssize_t start = self.n
        cdef Py_ssize_t i, at
        cdef const uint64_t *lsns = NULL
        arr = None
        if lsn is not None:
            if isinstance(lsn, (pa.Array, pa.ChunkedArray)):
                lsn = lsn.fill_null(0).to_numpy(zero_copy_only=False)
            arr = np.asarray(lsn)
            arr = np.ascontiguousarray(arr.view(np.uint64) if arr.dtype == np.int64
                                       else arr.astype(np.uint64, copy=False))
            if arr.ndim != 1:
                raise ValueError(f"lsn has {arr.shape} values")
            if arr.shape[0]:
                lsns = <const uint64_t *><size_t>arr.ctypes.data
        if isinstance(messages, (pa.Array, pa.ChunkedArray)):
            # the LSNs are written with the refs, in the same pass
            if arr is not None and arr.shape[0] != len(messages):
                raise ValueError(f"lsn has {arr.shape[0]} values for {len(messages)} messages")
            if isinstance(messages, pa.Array):
                self._add_array(messages, lsns)
            else:
                if len(messages):
                    self._grow(len(messages))
                at = 0
                for chunk in messages.chunks:
                    self._add_array(chunk, lsns + at if lsns != NULL else NULL)
                    at += len(chunk)
            return
        try:
            count = len(messages)
        except TypeError:                  # (an iterator)
            count = 0
        if count:
            self._grow(count)
        for m in messages:
            if not PyBytes_Check(m):
                if m is None:
                    raise DecodeError("a message is null", None, None, self.n)
                m = bytes(memoryview(m))
            self._grow(1)
            self.owners.append(m)
            self.refs[self.n].p = <const unsigned char *>PyBytes_AS_STRING(m)
            self.refs[self.n].n = PyBytes_GET_SIZE(m)
            self.refs[self.n].lsn = 0
            self.n += 1
        if arr is not None:
            if arr.shape[0] != self.n - start:
                raise ValueError(f"lsn has {arr.shape[0]} values for {self.n - start} messages")
            for i in range(self.n - start):
                self.refs[start + i].lsn = lsns[i]

    cdef int _add_array(self, messages, const uint64_t *lsns) except -1:
        """The messages of one binary Arrow array, with lsns[i] (NULL: all unknown)."""
        cdef Py_ssize_t start = self.n
        cdef Py_ssize_t i, count
        cdef const int32_t *off32
        cdef const int64_t *off64
        cdef const unsigned char *data
        cdef MsgRef *r
        t = messages.type
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_string(t) or pa.types.is_large_string(t)):
            raise TypeError(f"messages must be a binary Arrow array, not {t}")
        if messages.null_count:
            raise DecodeError("a message is null", None, None,
                              int(pa.compute.index(messages.is_null(), True).as_py()) + start)
        count = len(messages)
        self._grow(count)
        bufs = messages.buffers()
        self.owners.append(messages)
        if count == 0:
            return 0
        data = <const unsigned char *><size_t>(bufs[2].address if bufs[2] is not None else 0)
        r = self.refs + self.n
        if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            off64 = <const int64_t *><size_t>bufs[1].address
            off64 += <Py_ssize_t>messages.offset
            for i in range(count):
                r[i].p = data + off64[i]
                r[i].n = off64[i + 1] - off64[i]
                r[i].lsn = lsns[i] if lsns != NULL else 0
        else:
            off32 = <const int32_t *><size_t>bufs[1].address
            off32 += <Py_ssize_t>messages.offset
            for i in range(count):
                r[i].p = data + off32[i]
                r[i].n = off32[i + 1] - off32[i]
                r[i].lsn = lsns[i] if lsns != NULL else 0
        self.n += count
        return 0

    def __len__(self):
        return self.n

    def feed_into(self, DecoderCore core):
        core.feed(self, self.n, <size_t>self.refs)
