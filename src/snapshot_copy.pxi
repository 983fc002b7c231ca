# The initial snapshot's COPY reader: COPY ... TO STDOUT rows -> pgoutput Insert messages.
#
# CopyRows runs one COPY on a PGconn (psycopg2's, inside the transaction that imported
# the exported snapshot) and turns each row into an Insert message ('I', relid, 'N',
# TupleData) appended to a MessageColumns, with the GIL released: the workers of a
# snapshot run in parallel, and no Python object is made per row.
#
# * binary COPY: the file header (in the first CopyData), then one tuple per CopyData:
#   Int16 field count, per field Int32 length (-1 = NULL) and the send function's bytes.
#   A TupleData column is 'n', or 'b' / 't' + the same Int32 length and bytes: the
#   fields are copied as they are, with their kind byte in front (fmts: 'b', or 't' for
#   a column selected as its output text because its type has no send function).
# * text COPY: one line per CopyData, fields split at TAB, "\N" = NULL, backslash
#   escapes undone (\b \f \n \r \t \v, and \X = X for anything else), which gives back the
#   output function's text that a text TupleData carries.
#
# libpq is not linked (see capture_loop.pxi): the caller passes the addresses of the
# functions of psycopg2's own libpq. The Python twin is capture/snapshot.py (RowSink).

ctypedef int (*PQsendQuery_fn)(PGconn *conn, const char *query) noexcept nogil
ctypedef void *(*PQgetResult_fn)(PGconn *conn) noexcept nogil
ctypedef int (*PQresultStatus_fn)(const void *res) noexcept nogil
ctypedef void (*PQclear_fn)(void *res) noexcept nogil
ctypedef char *(*PQresultErrorMessage_fn)(const void *res) noexcept nogil
ctypedef char *(*PQerrorMessage_fn)(const PGconn *conn) noexcept nogil

DEF PGRES_COMMAND_OK = 1
DEF PGRES_COPY_OUT = 3
DEF COPY_BINARY_HEADER = 19     # signature (11), flags (4), header extension length (4)

cdef const char *_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"

cdef enum CopyResult:
    COPY_MORE = 1       # max_bytes reached: call again
    COPY_DONE = 0       # the COPY ended (the trailer seen in binary mode)
    COPY_ERROR = -1     # the connection or the server failed (see the error message)
    COPY_NOMEM = -2
    COPY_MALFORMED = -3 # a row that does not parse (bad header, column count, lengths)


cdef class CopyRows:
    """One ``COPY ... TO STDOUT`` on a connection, its rows as Insert messages.

    ``CopyRows(pgconn, functions, relid, fmts, binary)``: ``functions`` holds the
    addresses of ``PQsendQuery``, ``PQgetResult``, ``PQresultStatus``, ``PQclear``,
    ``PQgetCopyData``, ``PQfreemem``, ``PQresultErrorMessage`` and ``PQerrorMessage``;
    ``fmts`` one byte per column (``b'b'`` or ``b't'``; binary mode only). ``start(sql)``
    sends the COPY; ``fill(columns, max_bytes)`` appends rows (LSN 0) until at least
    ``max_bytes`` of messages are in ``columns`` (returns 1) or the COPY is over
    (returns 0). A failure raises ``RuntimeError`` with the server's message.
    """

    cdef PGconn *conn
    cdef PQsendQuery_fn send_query
    cdef PQgetResult_fn get_result
    cdef PQresultStatus_fn result_status
    cdef PQclear_fn clear
    cdef PQgetCopyData_fn getcopy
    cdef PQfreemem_fn freemem
    cdef PQresultErrorMessage_fn result_error
    cdef PQerrorMessage_fn conn_error
    cdef unsigned char prefix[8]   # 'I' relid 'N' ncols
    cdef bytes fmts
    cdef const unsigned char *fm   # fmts' bytes (kept alive by fmts)
    cdef int ncols
    cdef bint binary
    cdef bint header_done
    cdef bint finished
    cdef bint started
    cdef Buf row               # one message being built
    cdef public Py_ssize_t rows
    cdef public Py_ssize_t copy_bytes

    def __init__(self, size_t pgconn, functions, uint32_t relid, bytes fmts not None,
                 bint binary):
        if not pgconn:
            raise ValueError("CopyRows: a NULL connection")
        f = dict(functions)
        for name in ("PQsendQuery", "PQgetResult", "PQresultStatus", "PQclear",
                     "PQgetCopyData", "PQfreemem", "PQresultErrorMessage", "PQerrorMessage"):
            if not f.get(name):
                raise ValueError(f"CopyRows: no address for {name}")
        self.conn = <PGconn *><size_t>pgconn
        self.send_query = <PQsendQuery_fn><size_t>f["PQsendQuery"]
        self.get_result = <PQgetResult_fn><size_t>f["PQgetResult"]
        self.result_status = <PQresultStatus_fn><size_t>f["PQresultStatus"]
        self.clear = <PQclear_fn><size_t>f["PQclear"]
        self.getcopy = <PQgetCopyData_fn><size_t>f["PQgetCopyData"]
        self.freemem = <PQfreemem_fn><size_t>f["PQfreemem"]
        self.result_error = <PQresultErrorMessage_fn><size_t>f["PQresultErrorMessage"]
        self.conn_error = <PQerrorMessage_fn><size_t>f["PQerrorMessage"]
        if len(fmts) > 32767:
            raise ValueError("CopyRows: more than 32767 columns")
        self.ncols = len(fmts)
        self.fmts = fmts
        self.fm = <const unsigned char *>PyBytes_AS_STRING(fmts)
        self.binary = binary
        self.header_done = not binary
        self.prefix[0] = 0x49                # 'I'
        self.prefix[1] = (relid >> 24) & 0xFF
        self.prefix[2] = (relid >> 16) & 0xFF
        self.prefix[3] = (relid >> 8) & 0xFF
        self.prefix[4] = relid & 0xFF
        self.prefix[5] = 0x4E                # 'N'
        self.prefix[6] = (self.ncols >> 8) & 0xFF
        self.prefix[7] = self.ncols & 0xFF

    def __dealloc__(self):
        free(self.row.data)

    def detach(self):
        self.conn = NULL

    cdef str _error(self, void *res):
        cdef const char *m = NULL
        if res != NULL:
            m = self.result_error(res)
        if m == NULL or m[0] == 0:
            m = self.conn_error(self.conn)
        text = (<bytes>m).decode("utf-8", "replace").strip() if m != NULL else ""
        return text or "the connection failed"

    def start(self, bytes sql not None):
        """Send the COPY and wait for the server to start it."""
        cdef void *res
        cdef int status
        cdef const char *q = sql
        if self.conn == NULL:
            raise ValueError("CopyRows: the connection is closed")
        with nogil:
            status = self.send_query(self.conn, q)
        if status != 1:
            raise RuntimeError(self._error(NULL))
        with nogil:
            res = self.get_result(self.conn)
        if res == NULL:
            raise RuntimeError(self._error(NULL))
        status = self.result_status(res)
        if status != PGRES_COPY_OUT:
            msg = self._error(res)
            self.clear(res)
            self._drain()
            raise RuntimeError(msg)
        self.clear(res)
        self.started = True

    cdef void _drain(self) noexcept:
        cdef void *res
        while True:
            with nogil:
                res = self.get_result(self.conn)
            if res == NULL:
                return
            self.clear(res)

    cdef int _binary_row(self, const unsigned char *p, Py_ssize_t n, MessageColumns out) noexcept nogil:
        cdef Py_ssize_t pos = 0
        cdef int16_t nf
        cdef int32_t ln
        cdef int i
        cdef const unsigned char *fm = self.fm
        if not self.header_done:
            if n < COPY_BINARY_HEADER or memcmp(p, _COPY_SIGNATURE, 11) != 0:
                return COPY_MALFORMED
            ln = pgo_be32s(p + 15)
            if ln < 0 or COPY_BINARY_HEADER + ln > n:
                return COPY_MALFORMED
            pos = COPY_BINARY_HEADER + ln
            self.header_done = True
            if pos == n:
                return COPY_MORE
        if n - pos < 2:
            return COPY_MALFORMED
        nf = pgo_be16s(p + pos)
        pos += 2
        if nf == -1:
            self.finished = True
            return COPY_DONE if pos == n else COPY_MALFORMED
        if nf != self.ncols:
            return COPY_MALFORMED
        self.row.len = 0
        # at most one kind byte more per field than the row itself, and the prefix
        if _grow(&self.row, n - pos + nf + 8) < 0:
            return COPY_NOMEM
        memcpy(self.row.data, self.prefix, 8)
        self.row.len = 8
        for i in range(nf):
            if n - pos < 4:
                return COPY_MALFORMED
            ln = pgo_be32s(p + pos)
            if ln < 0:
                self.row.data[self.row.len] = 0x6E       # 'n'
                self.row.len += 1
                pos += 4
                continue
            if n - pos - 4 < ln:
                return COPY_MALFORMED
            self.row.data[self.row.len] = fm[i]
            memcpy(self.row.data + self.row.len + 1, p + pos, <size_t>(4 + ln))
            self.row.len += 5 + ln
            pos += 4 + ln
        if pos != n:
            return COPY_MALFORMED
        if out._append(0, self.row.data, self.row.len) < 0:
            return COPY_NOMEM
        return COPY_MORE

    cdef int _text_row(self, const unsigned char *p, Py_ssize_t n, MessageColumns out) noexcept nogil:
        cdef Py_ssize_t pos = 0, start, lenpos
        cdef int fields = 0
        cdef unsigned char c
        cdef uint32_t flen
        if n < 1 or p[n - 1] != 0x0A:
            return COPY_MALFORMED
        n -= 1                                  # the newline
        self.row.len = 0
        # 5 bytes per field at most beyond its text (never longer unescaped)
        if _grow(&self.row, n + 5 * (self.ncols + 1) + 8) < 0:
            return COPY_NOMEM
        memcpy(self.row.data, self.prefix, 8)
        self.row.len = 8
        if self.ncols == 0:
            if n != 0:
                return COPY_MALFORMED
        else:
            while True:
                fields += 1
                if fields > self.ncols:
                    return COPY_MALFORMED
                if n - pos >= 2 and p[pos] == 0x5C and p[pos + 1] == 0x4E and (
                        n - pos == 2 or p[pos + 2] == 0x09):
                    self.row.data[self.row.len] = 0x6E       # 'n': \N is NULL
                    self.row.len += 1
                    pos += 2
                else:
                    self.row.data[self.row.len] = 0x74       # 't'
                    lenpos = self.row.len + 1
                    self.row.len += 5
                    start = self.row.len
                    while pos < n:
                        c = p[pos]
                        if c == 0x09:
                            break
                        if c == 0x5C:
                            pos += 1
                            if pos >= n:
                                return COPY_MALFORMED
                            c = p[pos]
                            if c == 0x62: c = 0x08        # \b
                            elif c == 0x66: c = 0x0C      # \f
                            elif c == 0x6E: c = 0x0A      # \n
                            elif c == 0x72: c = 0x0D      # \r
                            elif c == 0x74: c = 0x09      # \t
                            elif c == 0x76: c = 0x0B      # \v
                        self.row.data[self.row.len] = c
                        self.row.len += 1
                        pos += 1
                    flen = <uint32_t>(self.row.len - start)
                    self.row.data[lenpos] = (flen >> 24) & 0xFF
                    self.row.data[lenpos + 1] = (flen >> 16) & 0xFF
                    self.row.data[lenpos + 2] = (flen >> 8) & 0xFF
                    self.row.data[lenpos + 3] = flen & 0xFF
                if pos >= n:
                    break
                if p[pos] != 0x09:
                    return COPY_MALFORMED
                pos += 1
            if fields != self.ncols:
                return COPY_MALFORMED
        if out._append(0, self.row.data, self.row.len) < 0:
            return COPY_NOMEM
        return COPY_MORE

    cdef int _fill(self, MessageColumns out, Py_ssize_t max_bytes) noexcept nogil:
        cdef char *buf
        cdef int n, r
        cdef Py_ssize_t goal = out.data.len + max_bytes
        while out.data.len < goal:
            buf = NULL
            n = self.getcopy(self.conn, &buf, 0)       # blocking: one whole row
            if n > 0:
                self.copy_bytes += n
                if self.binary:
                    r = self._binary_row(<const unsigned char *>buf, n, out)
                else:
                    r = self._text_row(<const unsigned char *>buf, n, out)
                self.freemem(buf)
                if r == COPY_MORE:
                    continue
                if r == COPY_DONE:
                    continue                           # the trailer: -1 follows
                return r
            if n == -1:
                return COPY_DONE
            return COPY_ERROR
        return COPY_MORE

    def fill(self, MessageColumns out not None, Py_ssize_t max_bytes):
        """Append rows until ``max_bytes`` more message bytes are in ``out`` (1) or the
        COPY ended (0)."""
        cdef int r
        cdef Py_ssize_t n0 = out.ends.len >> 3
        cdef void *res
        cdef int status
        if self.conn == NULL or not self.started:
            raise ValueError("CopyRows: not started, or the connection is closed")
        with nogil:
            r = self._fill(out, max_bytes)
        self.rows += (out.ends.len >> 3) - n0
        if r == COPY_MORE:
            return 1
        if r == COPY_NOMEM:
            raise MemoryError()
        if r == COPY_MALFORMED:
            self.started = False
            raise RuntimeError("the COPY output does not parse as PostgreSQL's "
                               + ("binary" if self.binary else "text") + " format for "
                               f"{self.ncols} columns")
        # the end of the COPY: its result says whether it succeeded
        self.started = False
        with nogil:
            res = self.get_result(self.conn)
        if res == NULL:
            raise RuntimeError(self._error(NULL))
        status = self.result_status(res)
        if status != PGRES_COMMAND_OK or r == COPY_ERROR:
            msg = self._error(res)
            self.clear(res)
            self._drain()
            raise RuntimeError(msg)
        self.clear(res)
        self._drain()
        if self.binary and not self.finished:
            raise RuntimeError("the binary COPY output ended without its trailer")
        return 0
