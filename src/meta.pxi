# The decoder core's shared records and the per-row metadata columns.
#
# MsgRef (one message of a batch: pointer, length, LSN), Ctx (the metadata of the
# transaction being written), the transaction states and spool record kinds, and Meta:
# the lsn / commit_lsn / commit_ts / xid / seq / op columns every typed table and the
# change-event table carry, with their export to Arrow (and the shared all-null and
# iota buffers that export uses).

import os as _os
import tempfile as _tempfile

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_Check

cdef extern from *:
    """
    #define PGO_UNIX_EPOCH_US 946684800000000LL
    #if defined(__GNUC__) || defined(__clang__)
    #  define pgo_prefetch(p) __builtin_prefetch((const void *)(p))
    #  define pgo_compiler_barrier() __asm__ __volatile__("" ::: "memory")
    #else
    #  define pgo_prefetch(p) ((void)0)
    #  define pgo_compiler_barrier() ((void)0)
    #endif
    """
    int64_t PGO_UNIX_EPOCH_US
    void pgo_prefetch(const void *p) nogil
    void pgo_compiler_barrier() nogil

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
# every REC_DML record is a plain I/U/D with its relid at byte 1, as _run_typed_blocks reads it.
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
    int32_t snapshot        # a Begin with xid 0 (the initial snapshot's): inserts are 'r'


cdef inline char insert_op(const Ctx *ctx) noexcept nogil:
    """The op of an insert: 'c', or 'r' (read) in a Begin..Commit whose Begin carries
    xid 0, which no real transaction has: the initial snapshot's (capture/snapshot.py).
    The flag, not ctx.xid: the rows a streamed or prepared transaction keeps on arrival
    are written with the ctx of the last Begin..Commit."""
    return b'r' if ctx.snapshot else b'c'


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
    an update, 'd' for a delete, by each message's type byte. Advances ctx.seq by n."""
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
    cdef unsigned char ins = <unsigned char>insert_op(ctx)
    d = m.op.data + m.op.len
    if op:
        memset(d, op, <size_t>n)
    else:
        for r in range(n):
            d[r] = (ins if refs[r].p[0] == MSG_INSERT
                    else 117 if refs[r].p[0] == MSG_UPDATE else 100)   # 'c' (or 'r') / 'u' / 'd'
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


cdef void meta_put_rows(Meta *m, const Meta *src, Py_ssize_t n) noexcept nogil:
    """src's n rows into room that meta_reserve made, as written (ev_append without a
    commit's context)."""
    memcpy(m.lsn.data + m.lsn.len, src.lsn.data, <size_t>(8 * n))
    memcpy(m.commit_lsn.data + m.commit_lsn.len, src.commit_lsn.data, <size_t>(8 * n))
    memcpy(m.commit_ts.data + m.commit_ts.len, src.commit_ts.data, <size_t>(8 * n))
    memcpy(m.xid.data + m.xid.len, src.xid.data, <size_t>(8 * n))
    memcpy(m.seq.data + m.seq.len, src.seq.data, <size_t>(8 * n))
    memcpy(m.op.data + m.op.len, src.op.data, <size_t>n)
    memcpy(m.origin.data + m.origin.len, src.origin.data, <size_t>(4 * n))
    m.lsn.len += 8 * n
    m.commit_lsn.len += 8 * n
    m.commit_ts.len += 8 * n
    m.xid.len += 8 * n
    m.seq.len += 8 * n
    m.op.len += n
    m.origin.len += 4 * n
    m.rows += n


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


# -- Arrow arrays from numpy and Python values, without pa.array ------------------------
# pa.array (and Array.to_numpy, pa.scalar) imports pandas on its first call in a process,
# whatever its input: about half a second of CPU that the first feed() paid. The export
# builds its arrays from buffers instead.

cdef object _pa_from_np(object values, object typ, object null_mask=None):
    """A typ array over a 1-D numpy array of typ's width (zero copy when contiguous);
    null where null_mask (a bool array) is True."""
    values = np.ascontiguousarray(values)
    cdef Py_ssize_t n = values.shape[0], nulls = 0
    valid = None
    if values.dtype == np.bool_:
        values = np.packbits(values, bitorder="little")
    if null_mask is not None:
        nulls = int(np.count_nonzero(null_mask))
        if nulls:
            valid = _pa_py_buffer(np.packbits(~np.asarray(null_mask, dtype=bool), bitorder="little"))
    return _pa_from_buffers(typ, n, [valid, _pa_py_buffer(values)], nulls)


cdef object _pa_strings(object values):
    """A string array of a sequence of str (None: null)."""
    cdef Py_ssize_t n = len(values), i, nulls = 0
    encoded = []
    offsets = np.zeros(n + 1, np.int64)
    cdef int64_t[::1] off = offsets
    cdef int64_t at = 0
    valid = np.ones(n, bool)
    for i in range(n):
        v = values[i]
        if v is None:
            valid[i] = False
            nulls += 1
        else:
            b = (<str>v).encode("utf-8")
            encoded.append(b)
            at += len(b)
        off[i + 1] = at
    if at >= 0x7FFFFFFF:
        raise OverflowError("more than 2 GiB of strings in one array")
    return _pa_from_buffers(
        pa.string(), n,
        [_pa_py_buffer(np.packbits(valid, bitorder="little")) if nulls else None,
         _pa_py_buffer(offsets.astype(np.int32)), _pa_py_buffer(b"".join(encoded))], nulls)


cdef object _np_from_pa_bool(object arr):
    """numpy bool of a BooleanArray (nulls read as False)."""
    cdef Py_ssize_t n = len(arr)
    bufs = arr.buffers()
    if n == 0:
        return np.zeros(0, bool)
    bits = np.unpackbits(np.frombuffer(bufs[1], np.uint8), bitorder="little")[arr.offset:arr.offset + n]
    out = bits.astype(bool)
    if bufs[0] is not None and arr.null_count:
        out &= np.unpackbits(np.frombuffer(bufs[0], np.uint8), bitorder="little")[arr.offset:arr.offset + n].astype(bool)
    return out


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
        _zero_mapping = _pa_py_buffer(_mmap.mmap(-1, size, flags=_mmap.MAP_PRIVATE, prot=_mmap.PROT_READ))
    return _zero_mapping.slice(0, nbytes)


# -- arrays kept from export to export ---------------------------------------------------
# A feed's export asks for several columns that hold nothing of the feed (per relation:
# the _before struct and its fields when no old image came, _before_kind, _special,
# _origin; empty _unchanged_toast lists), which took more than a small feed's decode to
# build each time. Arrays are immutable: each is a slice of one kept per type, grown by
# doubling (over the zero mapping: no memory).

ctypedef object (*array_fn)(object, Py_ssize_t)


@cython.final
@cython.auto_pickle(False)
cdef class _KeptArrays:
    """One array per Arrow type, made by `make` and handed out as slices."""
    cdef dict by_value                 # Arrow type -> its array (the longest so far)
    cdef dict by_id                    # id(type object) -> (the object, its array)
    cdef array_fn make

    cdef object get(self, object t, Py_ssize_t n):
        """make(t, n), as a slice of the kept array."""
        cdef Py_ssize_t have
        cdef tuple seen
        # found by the type object first (a DataType's hash prints it: microseconds for
        # a struct), then by its value; the entry holds the object, so its id stays its own
        seen = self.by_id.get(id(t))
        arr = seen[1] if seen is not None and seen[0] is t else self.by_value.get(t)
        have = len(arr) if arr is not None else -1
        if have < n:
            have = max(n, 2 * have, 1024)
            arr = self.make(t, have)
            self.by_value[t] = arr
        if seen is None or seen[0] is not t or seen[1] is not arr:
            if len(self.by_id) >= 256:
                self.by_id.clear()
            self.by_id[id(t)] = (t, arr)
        return arr if have == n else arr.slice(0, n)


cdef _KeptArrays _kept_arrays(array_fn make):
    cdef _KeptArrays k = _KeptArrays.__new__(_KeptArrays)
    k.by_value = {}
    k.by_id = {}
    k.make = make
    return k


cdef _KeptArrays _null_arrays          # (made below, after the function it calls)


cdef object _null_array(object t, Py_ssize_t n):
    """pa.nulls(n, t), a slice of one kept all-null array of t."""
    if n == 0:
        return pa.nulls(0, t)
    return _null_arrays.get(t, n)


cdef object _null_array_new(object t, Py_ssize_t n):
    """pa.nulls(n, t) with every buffer a view of the shared zero mapping (children of a
    struct all null too); pa.nulls itself for a layout not handled here."""
    cdef Py_ssize_t vb = (n + 7) >> 3, w
    if n == 0:
        return pa.nulls(0, t)
    if pa.types.is_boolean(t):
        return _pa_from_buffers(t, n, [_zeros(vb), _zeros(vb)], n)
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return _pa_from_buffers(t, n, [_zeros(vb), _zeros(4 * (n + 1)), _zeros(0)], n)
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return _pa_from_buffers(t, n, [_zeros(vb), _zeros(8 * (n + 1)), _zeros(0)], n)
    if pa.types.is_list(t) or pa.types.is_map(t):
        return _pa_from_buffers(t, n, [_zeros(vb), _zeros(4 * (n + 1))], n,
                                     children=[_null_array(t.value_type if pa.types.is_list(t)
                                                           else pa.struct([t.key_field, t.item_field]), 0)])
    if pa.types.is_struct(t):
        return _pa_from_buffers(t, n, [_zeros(vb)], n,
                                     children=[_null_array(t.field(i).type, n) for i in range(t.num_fields)])
    if not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t)):
        try:
            w = t.bit_width
        except ValueError:
            w = 0
        if w and w % 8 == 0:
            return _pa_from_buffers(t, n, [_zeros(vb), _zeros(n * (w // 8))], n)
    return pa.nulls(n, t)


_null_arrays = _kept_arrays(_null_array_new)


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
        _iota_buffer = _pa_py_buffer(np.arange(size, dtype=np.int32))
    return _iota_buffer.slice(0, 4 * count)


cdef Py_ssize_t _count_zeros64(const int64_t *v, Py_ssize_t n) noexcept nogil:
    """The zeros among n values. Most columns have none: whether there is one is an OR
    over the values of (x - 1) & ~x, whose top bit is set for x = 0 only, which the
    compiler vectorises (baseline x86-64 has no 64-bit equality compare, and a compare
    and add per value cost four instructions a value); the count is made only then."""
    cdef Py_ssize_t i, zeros = 0
    cdef uint64_t acc = 0, x
    for i in range(n):
        x = <uint64_t>v[i]
        acc |= (x - 1) & ~x
    if not (acc >> 63):
        return 0
    for i in range(n):
        zeros += v[i] == 0
    return zeros


cdef object _lsn_validity(const int64_t *lsn, Py_ssize_t n, Py_ssize_t *nulls):
    """Validity bitmap of the lsn column (0 = unknown = null), or None when all are known."""
    cdef Buf b
    cdef Py_ssize_t i, zeros
    if n >= 1 << 16:                     # (the pieces of decode_parallel export at once)
        with nogil:
            zeros = _count_zeros64(lsn, n)
    else:
        zeros = _count_zeros64(lsn, n)
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


cdef bint _any_origin(const int32_t *origin, Py_ssize_t n) noexcept nogil:
    """Whether any row has an origin (its id >= 0; -1 = none, the only negative id).
    (All -1 is an AND of all bits set: an AND over 1,024 rows at a time, which the
    compiler vectorises, where a test per row cost four instructions a row.)"""
    cdef Py_ssize_t i, at = 0, end
    cdef int32_t acc
    while at < n:
        end = at + 1024 if n - at > 1024 else n
        acc = -1
        for i in range(at, end):
            acc &= origin[i]
        if acc != -1:
            return True
        at = end
    return False


cdef dict meta_export(Meta *m, object origins, str prefix):
    """Arrow arrays of the metadata columns (the Meta is left empty)."""
    cdef Py_ssize_t n = m.rows
    cdef Py_ssize_t lsn_nulls = 0
    lsn_valid = _lsn_validity(<const int64_t *>m.lsn.data, n, &lsn_nulls) if n else None
    out = {}
    out[prefix + "op"] = _pa_from_buffers(
        pa.string(), n, [None, _iota32(n + 1), _take_buf(&m.op, n)])
    out[prefix + "lsn"] = _pa_from_buffers(pa.int64(), n, [lsn_valid, _take_buf(&m.lsn, 8 * n)],
                                                lsn_nulls)
    out[prefix + "commit_lsn"] = _pa_from_buffers(pa.int64(), n, [None, _take_buf(&m.commit_lsn, 8 * n)])
    out[prefix + "commit_ts"] = _pa_from_buffers(_pa_ts_utc, n,
                                                      [None, _take_buf(&m.commit_ts, 8 * n)])
    out[prefix + "xid"] = _pa_from_buffers(pa.int64(), n, [None, _take_buf(&m.xid, 8 * n)])
    out[prefix + "seq"] = _pa_from_buffers(pa.int64(), n, [None, _take_buf(&m.seq, 8 * n)])
    if m.origin.len < 4 * n or _any_origin(<const int32_t *>m.origin.data, n):
        origin = _np_from_buf(&m.origin, np.int32, n)
        out[prefix + "origin"] = _strings_by_id_np(origins, origin)     # (take: pyarrow.compute)
    else:
        _take_buf(&m.origin, 4 * n)      # (handed over and let go, as when it is read:
        out[prefix + "origin"] = _null_array(pa.string(), n)   # the block cache's sizes)
    m.rows = 0
    return out


# -- the change-event table's map<string,string> images --------------------------
