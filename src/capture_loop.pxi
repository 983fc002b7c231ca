# The capture's receive loop: CopyData from the walsender into message columns.
#
# MessageColumns  growable columns of pgoutput messages in C memory: the payloads back
#                 to back, their int64 end offsets, their int64 LSNs (XLogData
#                 dataStart). The capture reads into one (a batch), copies runs of it
#                 into another (the chunk) and hands the chunk's memory to Arrow as the
#                 lsn/data columns of a Parquet row group: no Python object per message.
# CopyReader      calls PQgetCopyData(async) until nothing is buffered, a byte budget is
#                 used or the server asks for a status update, with the GIL released.
#                 Waiting for the socket stays with the caller (select in Python): a loop
#                 that also waited here (poll, woken by every message the walsender
#                 sends) used less CPU per round but slowed the walsender down, measured
#                 against pg_recvlogical; reading in rounds lets a little data gather.
#
# libpq is not linked: psycopg2(-binary) carries its own libpq, and one PGconn must only
# ever see the library that made it. The caller passes the addresses of the functions
# of that library (resolved with ctypes, see capture/stream.py); PGconn stays opaque.
#
# The Python twin of both (lists, ctypes) is pgoutput_fast/_reference/capture.py and
# ReplicationStream._read_ctypes.

cdef extern from *:
    """
    typedef struct pg_conn PGconn;   /* opaque, as in libpq-fe.h */
    """
    ctypedef struct PGconn:
        pass

ctypedef int (*PQgetCopyData_fn)(PGconn *conn, char **buffer, int async_) noexcept nogil
ctypedef void (*PQfreemem_fn)(void *ptr) noexcept nogil
ctypedef int (*PQconsumeInput_fn)(PGconn *conn) noexcept nogil

#: bytes a buffered message costs beyond its payload (end offset + LSN)
DEF COLUMNS_MESSAGE_OVERHEAD = 16
#: XLogData header: 'w', dataStart, walEnd, sendTime
DEF XLOG_HEADER = 25
#: Primary keepalive: 'k', walEnd, sendTime, replyRequested
DEF KEEPALIVE_SIZE = 18

# CopyReader.fill results (mirrored as constants on the class)
cdef enum FillResult:
    FILL_EMPTY = 0        # nothing more is buffered (the socket was drained once)
    FILL_BUDGET = 1       # the byte budget is used
    FILL_REPLY = 2        # a keepalive asked for a status update now
    FILL_END = -1         # the COPY ended (PQgetCopyData -1)
    FILL_ERROR = -2       # a connection error (PQgetCopyData -2, PQconsumeInput 0)
    FILL_NOMEM = -3
    FILL_MALFORMED = -4   # a CopyData message too short for its type


cdef inline int _grow(Buf *b, Py_ssize_t extra) noexcept nogil:
    """Room for `extra` more bytes: plain realloc by doubling. Not buf_reserve: this
    runs without the GIL, and the block cache of builders.pxi is guarded by it."""
    cdef Py_ssize_t need = b.len + extra
    cdef Py_ssize_t cap
    cdef unsigned char *p
    if need <= b.cap:
        return 0
    if b.cap == 0 and b.hint >= need:
        cap = b.hint + (b.hint >> 3)
    else:
        cap = b.cap * 2 if b.cap >= 256 else 256
        while cap < need:
            cap *= 2
    p = <unsigned char *>realloc(b.data, <size_t>cap)
    if p == NULL:
        return -1
    b.data = p
    b.cap = cap
    return 0


cdef inline int _put8(Buf *b, int64_t v) noexcept nogil:
    if b.cap - b.len < 8 and _grow(b, 8) < 0:
        return -1
    memcpy(b.data + b.len, &v, 8)
    b.len += 8
    return 0


cdef object _own_buffer(unsigned char *p, Py_ssize_t size):
    """pa.Buffer over malloc'd `p` (freed with the buffer, never cached)."""
    cdef NativeBuffer nb = NativeBuffer.__new__(NativeBuffer)
    nb.ptr = p
    nb.size = size
    nb.uncached = True
    return _pa_py_buffer(nb)


@cython.auto_pickle(False)
@cython.final
cdef class MessageColumns:
    """pgoutput messages as columns in C memory: payloads, end offsets, LSNs."""

    cdef Buf data          # payloads, back to back
    cdef Buf ends          # int64 end offset of each message in data
    cdef Buf lsns          # int64 per message

    #: what one message costs beyond its payload (the capture's memory accounting)
    MESSAGE_OVERHEAD = COLUMNS_MESSAGE_OVERHEAD

    def __dealloc__(self):
        free(self.data.data)
        free(self.ends.data)
        free(self.lsns.data)

    def __len__(self):
        return self.ends.len >> 3

    @property
    def nbytes(self):
        """Payload bytes held."""
        return self.data.len

    cdef inline Py_ssize_t _start(self, Py_ssize_t i) noexcept nogil:
        cdef int64_t v
        if i == 0:
            return 0
        memcpy(&v, self.ends.data + (i - 1) * 8, 8)
        return <Py_ssize_t>v

    cdef Py_ssize_t _index(self, Py_ssize_t i) except -1:
        cdef Py_ssize_t n = self.ends.len >> 3
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("message index out of range")
        return i

    def lsn(self, Py_ssize_t i):
        """The LSN of message ``i``."""
        cdef int64_t v
        i = self._index(i)
        memcpy(&v, self.lsns.data + i * 8, 8)
        return <uint64_t>v

    def message(self, Py_ssize_t i):
        """Message ``i`` as bytes."""
        i = self._index(i)
        cdef Py_ssize_t a = self._start(i)
        return (<const char *>self.data.data)[a:self._start(i + 1)]

    cdef int _append(self, uint64_t lsn, const unsigned char *p, Py_ssize_t n) noexcept nogil:
        cdef int64_t v
        if ((self.data.cap - self.data.len < n and _grow(&self.data, n) < 0)
                or (self.ends.cap - self.ends.len < 8 and _grow(&self.ends, 8) < 0)
                or (self.lsns.cap - self.lsns.len < 8 and _grow(&self.lsns, 8) < 0)):
            return -1
        if n:
            memcpy(self.data.data + self.data.len, p, <size_t>n)
        self.data.len += n
        v = <int64_t>self.data.len
        memcpy(self.ends.data + self.ends.len, &v, 8)
        self.ends.len += 8
        v = <int64_t>lsn
        memcpy(self.lsns.data + self.lsns.len, &v, 8)
        self.lsns.len += 8
        return 0

    def append(self, uint64_t lsn, const unsigned char[::1] data not None):
        """Append one message (any contiguous bytes-like)."""
        cdef Py_ssize_t n = data.shape[0]
        if self._append(lsn, &data[0] if n else NULL, n) < 0:
            raise MemoryError()

    def extend_from(self, MessageColumns other not None, Py_ssize_t start, Py_ssize_t stop):
        """Copy messages ``start:stop`` of ``other`` to the end; returns their payload bytes."""
        cdef Py_ssize_t n = other.ends.len >> 3
        cdef Py_ssize_t i, k, a, b, base
        cdef int64_t e
        if not (0 <= start <= stop <= n):
            raise IndexError(f"extend_from({start}, {stop}) of {n} messages")
        if other is self:
            raise ValueError("extend_from: the source is the target")
        k = stop - start
        a = other._start(start)
        b = other._start(stop)
        if (_grow(&self.data, b - a) < 0 or _grow(&self.ends, k * 8) < 0
                or _grow(&self.lsns, k * 8) < 0):
            raise MemoryError()
        if b > a:
            memcpy(self.data.data + self.data.len, other.data.data + a, <size_t>(b - a))
        base = self.data.len - a
        for i in range(start, stop):
            memcpy(&e, other.ends.data + i * 8, 8)
            e += base
            memcpy(self.ends.data + self.ends.len, &e, 8)
            self.ends.len += 8
        self.data.len += b - a
        if k:
            memcpy(self.lsns.data + self.lsns.len, other.lsns.data + start * 8, <size_t>(k * 8))
            self.lsns.len += k * 8
        return b - a

    def fit(self, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t max_cost):
        """The end ``j`` of the longest run ``start:j`` (``j <= stop``, at least one
        message when ``start < stop``) whose payload plus ``MESSAGE_OVERHEAD`` per
        message is at most ``max_cost``."""
        cdef Py_ssize_t n = self.ends.len >> 3
        cdef Py_ssize_t lo, hi, mid, base
        if not (0 <= start <= stop <= n):
            raise IndexError(f"fit({start}, {stop}) of {n} messages")
        if start == stop:
            return stop
        base = self._start(start)
        # binary search over the end offsets: the cost of start:j grows with j
        lo, hi = start + 1, stop
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self._start(mid) - base + COLUMNS_MESSAGE_OVERHEAD * (mid - start) <= max_cost:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def clear(self):
        """Forget the messages (the memory is kept for the next ones)."""
        self.data.len = self.ends.len = self.lsns.len = 0

    def take_arrays(self, int64_t first_ordinal):
        """``[lsn, data, ordinal]`` Arrow arrays of the messages (the capture's segment
        columns, ``ordinal`` counting from ``first_ordinal``); leaves this empty. The
        payload memory moves to Arrow without a copy."""
        cdef Py_ssize_t n = self.ends.len >> 3
        cdef Py_ssize_t total = self.data.len
        cdef Py_ssize_t i
        cdef int64_t e
        cdef int32_t e32
        cdef bint large = total >= 2147483647
        cdef unsigned char *offs = <unsigned char *>malloc(<size_t>((n + 1) * (8 if large else 4)))
        cdef unsigned char *lsn = <unsigned char *>malloc(<size_t>(n * 8 + 1))
        cdef unsigned char *ords = <unsigned char *>malloc(<size_t>(n * 8 + 1))
        cdef unsigned char *data
        if offs == NULL or lsn == NULL or ords == NULL:
            free(offs)
            free(lsn)
            free(ords)
            raise MemoryError()
        if large:
            memset(offs, 0, 8)
            if n:
                memcpy(offs + 8, self.ends.data, <size_t>(n * 8))
        else:
            memset(offs, 0, 4)
            for i in range(n):
                memcpy(&e, self.ends.data + i * 8, 8)
                e32 = <int32_t>e
                memcpy(offs + (i + 1) * 4, &e32, 4)
        if n:
            memcpy(lsn, self.lsns.data, <size_t>(n * 8))
        for i in range(n):
            e = first_ordinal + i
            memcpy(ords + i * 8, &e, 8)
        # the payloads: handed over at their exact size; the next chunk starts from the
        # size of this one (one allocation instead of a doubling series)
        data = self.data.data
        if data == NULL:
            data = <unsigned char *>malloc(1)
            if data == NULL:
                free(offs)
                free(lsn)
                free(ords)
                raise MemoryError()
        elif self.data.cap > total + 4096 and total > 0:
            data = <unsigned char *>realloc(data, <size_t>total)
            if data == NULL:
                data = self.data.data
        self.data.hint = total
        self.data.data = NULL
        self.data.cap = self.data.len = 0
        self.ends.len = self.lsns.len = 0
        dtype = pa.large_binary() if large else pa.binary()
        arr = _pa_from_buffers(dtype, n, [None, _own_buffer(offs, (n + 1) * (8 if large else 4)),
                                               _own_buffer(data, total)])
        if large:
            arr = arr.cast(pa.binary())   # raises: a chunk is never that large
        return [_pa_from_buffers(pa.int64(), n, [None, _own_buffer(lsn, n * 8)]), arr,
                _pa_from_buffers(pa.int64(), n, [None, _own_buffer(ords, n * 8)])]


@cython.auto_pickle(False)
@cython.final
cdef class CopyReader:
    """The receive loop over one PGconn in COPY BOTH mode (after START_REPLICATION).

    ``fill(batch, ctrl, max_bytes)`` appends each XLogData's pgoutput message and
    dataStart to ``batch`` and, to ``ctrl``, the index of each message whose type is
    not in ``INSIDE_TYPES`` (the changes inside a transaction need no tracking); it
    counts keepalives and the highest walEnd seen. It reads what libpq has buffered,
    then what the socket holds (``PQconsumeInput``, without waiting), until neither
    brings more.

    Returns ``EMPTY``, ``BUDGET``, ``REPLY`` (send a status update, then call again),
    ``END`` (the COPY ended) or ``ERROR``.
    """

    cdef PGconn *conn
    cdef PQgetCopyData_fn getcopy
    cdef PQfreemem_fn freemem
    cdef PQconsumeInput_fn consume
    cdef uint64_t _wal_end
    cdef Py_ssize_t _keepalives
    cdef bint inside[256]
    cdef Buf ctrl

    EMPTY = FILL_EMPTY
    BUDGET = FILL_BUDGET
    REPLY = FILL_REPLY
    END = FILL_END
    ERROR = FILL_ERROR
    #: message types that only occur inside B..C, b..P or S..E (capture/stream.py)
    INSIDE_TYPES = b"IUDTORY"

    def __init__(self, size_t pgconn, size_t PQgetCopyData, size_t PQfreemem,
                 size_t PQconsumeInput):
        if not (pgconn and PQgetCopyData and PQfreemem and PQconsumeInput):
            raise ValueError("CopyReader: a NULL connection or libpq function")
        self.conn = <PGconn *>pgconn
        self.getcopy = <PQgetCopyData_fn>PQgetCopyData
        self.freemem = <PQfreemem_fn>PQfreemem
        self.consume = <PQconsumeInput_fn>PQconsumeInput
        memset(self.inside, 0, sizeof(self.inside))
        for t in b"IUDTORY":
            self.inside[t] = True

    def __dealloc__(self):
        free(self.ctrl.data)

    @property
    def wal_end(self):
        """The highest walEnd of an XLogData or keepalive so far."""
        return self._wal_end

    @property
    def keepalives(self):
        return self._keepalives

    def detach(self):
        """Forget the connection (it is closed): ``fill`` raises from now on."""
        self.conn = NULL

    cdef int _fill(self, MessageColumns batch, Py_ssize_t budget) noexcept nogil:
        cdef char *buf
        cdef const unsigned char *p
        cdef int n
        cdef bint consumed = False
        cdef uint64_t wal_end
        while budget > 0:
            buf = NULL
            n = self.getcopy(self.conn, &buf, 1)
            if n > 0:
                consumed = False
                p = <const unsigned char *>buf
                if p[0] == 0x77:      # 'w' XLogData (dataStart == walEnd in logical mode)
                    if n <= XLOG_HEADER:
                        self.freemem(buf)
                        return FILL_MALFORMED
                    wal_end = pgo_be64(p + 9)
                    if not self.inside[p[XLOG_HEADER]] and _put8(&self.ctrl, batch.ends.len >> 3) < 0:
                        self.freemem(buf)
                        return FILL_NOMEM
                    if batch._append(pgo_be64(p + 1), p + XLOG_HEADER, n - XLOG_HEADER) < 0:
                        self.freemem(buf)
                        return FILL_NOMEM
                    self.freemem(buf)
                    if wal_end > self._wal_end:
                        self._wal_end = wal_end
                    budget -= n - XLOG_HEADER + COLUMNS_MESSAGE_OVERHEAD
                    continue
                if p[0] == 0x6B:      # 'k' keepalive
                    if n < KEEPALIVE_SIZE:
                        self.freemem(buf)
                        return FILL_MALFORMED
                    wal_end = pgo_be64(p + 1)
                    n = p[17]         # replyRequested
                    self.freemem(buf)
                    self._keepalives += 1
                    if wal_end > self._wal_end:
                        self._wal_end = wal_end
                    if n:
                        return FILL_REPLY
                    continue
                self.freemem(buf)     # another CopyData type: not for a logical client
                continue
            if n == 0:
                # read what arrived on the socket meanwhile, without waiting; stop once
                # that brought nothing
                if consumed:
                    return FILL_EMPTY
                if self.consume(self.conn) != 1:
                    return FILL_ERROR
                consumed = True
                continue
            return FILL_END if n == -1 else FILL_ERROR
        return FILL_BUDGET

    def fill(self, MessageColumns batch not None, list ctrl not None, Py_ssize_t max_bytes):
        """Read until nothing more is buffered, ``max_bytes`` (payload + 16 per message)
        are appended, or a keepalive asks for a reply; see the class docstring."""
        cdef int r
        cdef Py_ssize_t i
        cdef int64_t v
        if self.conn == NULL:
            raise ValueError("CopyReader: the connection is closed")
        self.ctrl.len = 0
        with nogil:
            r = self._fill(batch, max_bytes)
        for i in range(self.ctrl.len >> 3):
            memcpy(&v, self.ctrl.data + i * 8, 8)
            ctrl.append(v)
        if r == FILL_NOMEM:
            raise MemoryError()
        if r == FILL_MALFORMED:
            raise ValueError("replication stream: a CopyData message too short for its type")
        return r
