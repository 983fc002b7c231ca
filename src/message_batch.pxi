# MessageBatch: the messages of one feed() as a C array of MsgRef, zero copy.

cdef class MessageBatch:
    """The messages of one feed() as a C array of (pointer, length, lsn), zero copy.

    Accepts pa.BinaryArray / LargeBinaryArray / ChunkedArray of those, or any sequence
    of bytes-like objects. The batch keeps whatever owns the memory alive.
    """
    cdef MsgRef *refs
    cdef Py_ssize_t n
    cdef Py_ssize_t nbytes          # the messages' bytes (what a new relation's size hints scale by)
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
                lsn = _np_from_pa_lsn(lsn)
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
            self.nbytes += self.refs[self.n].n
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
            with nogil:
                for i in range(count):
                    r[i].p = data + off64[i]
                    r[i].n = off64[i + 1] - off64[i]
                    r[i].lsn = lsns[i] if lsns != NULL else 0
            self.nbytes += off64[count] - off64[0]
        else:
            off32 = <const int32_t *><size_t>bufs[1].address
            off32 += <Py_ssize_t>messages.offset
            with nogil:
                for i in range(count):
                    r[i].p = data + off32[i]
                    r[i].n = off32[i + 1] - off32[i]
                    r[i].lsn = lsns[i] if lsns != NULL else 0
            self.nbytes += off32[count] - off32[0]
        self.n += count
        return 0

    def __len__(self):
        return self.n

    def feed_into(self, DecoderCore core):
        core.feed_bytes = self.nbytes
        core.feed(self, self.n, <size_t>self.refs)


cdef object _np_from_pa_lsn(object arr):
    """numpy of an Arrow integer array of LSNs, nulls as 0 (to_numpy and fill_null would
    import pandas: see _pa_from_np)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    t = arr.type
    if pa.types.is_int64(t):
        dtype = np.int64
    elif pa.types.is_uint64(t):
        dtype = np.uint64
    else:
        return arr.fill_null(0).to_numpy(zero_copy_only=False)
    cdef Py_ssize_t n = len(arr)
    bufs = arr.buffers()
    if n == 0:
        return np.zeros(0, dtype)
    out = np.frombuffer(bufs[1], dtype, count=n, offset=8 * arr.offset)
    if arr.null_count:
        valid = np.unpackbits(np.frombuffer(bufs[0], np.uint8), bitorder="little")[arr.offset:arr.offset + n]
        out = np.where(valid.astype(bool), out, 0).astype(dtype)
    return out


DEF SCAN_PREFETCH = 16               # messages _message_scan reads ahead


def _message_scan(offsets, data, Py_ssize_t first, Py_ssize_t n, bint large, Py_ssize_t depth=0):
    """One pass over the type bytes of messages first..first+n of a binary (large:
    large_binary) array, from its offsets and data buffers: (types, rest, depth, simple).
    types: each message's type byte (0 for an empty one); rest[k] = 1 where no Begin is
    open after message k (depth: Begins minus Commits, from the given depth on; the
    depth after the last is returned); simple: no control message but Begin and Commit
    (else rest says nothing of stream blocks, streamed or prepared transactions).
    (parallel.plan_cuts: what cutting a stream needs.)"""
    cdef const unsigned char[::1] ob = offsets
    cdef const unsigned char[::1] db
    cdef Py_ssize_t w = 8 if large else 4, size = 0, k, a, b
    cdef const unsigned char *d = NULL
    cdef const unsigned char *o
    cdef unsigned char *tp
    cdef unsigned char *rp
    cdef unsigned char t
    cdef int32_t a4, b4
    cdef int64_t a8, b8
    cdef bint simple = True
    types = bytearray(n)
    rest = bytearray(n)
    if n == 0:
        return types, rest, depth, simple
    if first < 0 or n < 0 or (first + n + 1) * w > ob.shape[0]:
        raise ValueError("the offsets buffer is shorter than the array")
    if data is not None:
        db = data
        size = db.shape[0]
        if size:
            d = &db[0]
    o = &ob[0] + first * w
    tp = types
    rp = rest
    with nogil:
        for k in range(n):
            if large:
                memcpy(&a8, o + 8 * k, 8)
                memcpy(&b8, o + 8 * k + 8, 8)
                a = <Py_ssize_t>a8
                b = <Py_ssize_t>b8
                if k + SCAN_PREFETCH < n:
                    # (each message's first byte is a miss: ask for the one ahead)
                    memcpy(&a8, o + 8 * (k + SCAN_PREFETCH), 8)
                    if 0 <= a8 < size:
                        pgo_prefetch(d + a8)
            else:
                memcpy(&a4, o + 4 * k, 4)
                memcpy(&b4, o + 4 * k + 4, 4)
                a = a4
                b = b4
                if k + SCAN_PREFETCH < n:
                    memcpy(&a4, o + 4 * (k + SCAN_PREFETCH), 4)
                    if 0 <= a4 < size:
                        pgo_prefetch(d + a4)
            t = d[a] if b > a and 0 <= a < size else 0
            tp[k] = t
            if t == MSG_BEGIN:
                depth += 1
            elif t == MSG_COMMIT:
                depth -= 1
            elif (t == MSG_STREAM_START or t == MSG_STREAM_STOP or t == MSG_STREAM_COMMIT
                    or t == MSG_STREAM_ABORT or t == MSG_BEGIN_PREPARE or t == MSG_PREPARE
                    or t == MSG_STREAM_PREPARE or t == MSG_COMMIT_PREPARED
                    or t == MSG_ROLLBACK_PREPARED):
                simple = False
            rp[k] = depth == 0
    return types, rest, depth, simple
