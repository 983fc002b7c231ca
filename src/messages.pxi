# decode_message: one pgoutput message -> one message object (pgoutput_fast.messages).
#
# This is the inspection path: it creates Python objects. The columnar path
# (decoder_core.pxi) shares the cursor readers but never builds objects per value.

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

from pgoutput_fast import messages as _m
from pgoutput_fast.errors import check_names_utf8

cdef object _tuple_new = tuple.__new__
cdef object M_Begin = _m.Begin
cdef object M_Commit = _m.Commit
cdef object M_Origin = _m.Origin
cdef object M_Relation = _m.Relation
cdef object M_RelationColumn = _m.RelationColumn
cdef object M_Type = _m.Type
cdef object M_Insert = _m.Insert
cdef object M_Update = _m.Update
cdef object M_Delete = _m.Delete
cdef object M_Truncate = _m.Truncate
cdef object M_LogicalMessage = _m.LogicalMessage
cdef object M_StreamStart = _m.StreamStart
cdef object M_StreamStop = _m.StreamStop
cdef object M_StreamCommit = _m.StreamCommit
cdef object M_StreamAbort = _m.StreamAbort
cdef object M_BeginPrepare = _m.BeginPrepare
cdef object M_Prepare = _m.Prepare
cdef object M_CommitPrepared = _m.CommitPrepared
cdef object M_RollbackPrepared = _m.RollbackPrepared
cdef object M_StreamPrepare = _m.StreamPrepare
cdef object M_Value = _m.Value
cdef object UNCHANGED_TOAST = _m.UNCHANGED_TOAST
cdef str FMT_T = "t"
cdef str FMT_B = "b"
cdef str KIND_K = "K"
cdef str KIND_O = "O"


cdef class _Reader:
    """A cursor bound to one message, raising DecodeError on failure (GIL held)."""
    cdef Cursor c
    cdef int t

    cdef inline int fail(self) except -1:
        return raise_cursor_error(&self.c, self.t)

    cdef inline uint8_t u8(self) except? 0xFF:
        cdef uint8_t v = 0
        if rd_u8(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline int16_t i16(self) except? -1:
        cdef int16_t v = 0
        if rd_i16(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline uint32_t u32(self) except? 0xFFFFFFFF:
        cdef uint32_t v = 0
        if rd_u32(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline int32_t i32(self) except? -1:
        cdef int32_t v = 0
        if rd_i32(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline uint64_t u64(self) except? 0xFFFFFFFFFFFFFFFF:
        cdef uint64_t v = 0
        if rd_u64(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline int64_t i64(self) except? -1:
        cdef int64_t v = 0
        if rd_i64(&self.c, &v) < 0:
            self.fail()
        return v

    cdef inline str string(self):
        cdef const char *s = NULL
        cdef Py_ssize_t n = 0
        if rd_cstring(&self.c, &s, &n) < 0:
            self.fail()
        return PyUnicode_DecodeUTF8(s, n, "surrogateescape")

    cdef inline int zero_flags(self) except -1:
        cdef Py_ssize_t at = self.c.pos
        if self.u8() != 0:
            raise_decode_error("flags must be 0", at, self.t)
        return 0

    cdef inline int end(self) except -1:
        if cur_expect_end(&self.c) < 0:
            self.fail()
        return 0

    cdef tuple tupledata(self):
        cdef Py_ssize_t at = self.c.pos
        cdef int16_t ncols = self.i16()
        cdef int32_t n
        cdef uint8_t kind
        cdef Py_ssize_t i
        cdef const unsigned char *p = NULL
        if ncols < 0:
            raise_decode_error(f"negative TupleData column count {ncols}", at, self.t)
        cdef tuple out = PyTuple_New_(ncols)
        cdef object v
        for i in range(ncols):
            at = self.c.pos
            kind = self.u8()
            if kind == COL_NULL:    # 'n'
                v = None
            elif kind == COL_TOAST:  # 'u'
                v = UNCHANGED_TOAST
            elif kind == COL_TEXT or kind == COL_BINARY:  # 't' / 'b'
                at = self.c.pos
                n = self.i32()
                if n < 0:
                    raise_decode_error(f"negative value length {n} in column {i}", at, self.t)
                if rd_bytes(&self.c, n, &p) < 0:
                    self.fail()
                v = _tuple_new(M_Value, (FMT_T if kind == COL_TEXT else FMT_B,
                                         PyBytes_FromStringAndSize(<const char *>p, n)))
            else:
                raise_decode_error(f"unknown TupleData column kind byte 0x{kind:02x} in column {i}",
                                   at, self.t)
            Py_INCREF(v)
            PyTuple_SET_ITEM(out, i, v)
        return out


from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New as PyTuple_New_, PyTuple_SET_ITEM


cdef object _decode_reader(_Reader r, bint in_stream):
    cdef int t = r.u8()
    r.t = t
    cdef object xid = None
    cdef Py_ssize_t at
    cdef uint8_t b
    cdef int16_t natts
    cdef int32_t n
    cdef Py_ssize_t i
    cdef list cols
    cdef list relids
    cdef const unsigned char *p = NULL

    if in_stream and (t == MSG_RELATION or t == MSG_TYPE or t == MSG_INSERT or t == MSG_UPDATE or t == MSG_DELETE or t == MSG_TRUNCATE or t == MSG_MESSAGE):
        xid = r.u32()

    if t == MSG_BEGIN:  # 'B' Begin
        lsn = r.u64(); ts = r.i64(); x = r.u32(); r.end()
        return _tuple_new(M_Begin, (lsn, ts, x))
    if t == MSG_COMMIT:  # 'C' Commit
        r.zero_flags()
        a = r.u64(); e = r.u64(); ts = r.i64(); r.end()
        return _tuple_new(M_Commit, (0, a, e, ts))
    if t == MSG_INSERT:  # 'I' Insert
        relid = r.u32()
        at = r.c.pos
        if r.u8() != TUPLE_NEW:
            raise_decode_error("Insert: expected 'N' before the new tuple", at, t)
        new = r.tupledata(); r.end()
        return _tuple_new(M_Insert, (relid, new, xid))
    if t == MSG_UPDATE:  # 'U' Update
        relid = r.u32()
        at = r.c.pos
        b = r.u8()
        old_kind = None
        old = None
        if b == TUPLE_KEY or b == TUPLE_OLD:
            old_kind = KIND_K if b == TUPLE_KEY else KIND_O
            old = r.tupledata()
            at = r.c.pos
            b = r.u8()
            if b != TUPLE_NEW:
                raise_decode_error("Update: expected 'N' after the old tuple", at, t)
        elif b != TUPLE_NEW:
            raise_decode_error(f"Update: expected 'K', 'O' or 'N', got 0x{b:02x}", at, t)
        new = r.tupledata(); r.end()
        return _tuple_new(M_Update, (relid, old_kind, old, new, xid))
    if t == MSG_DELETE:  # 'D' Delete
        relid = r.u32()
        at = r.c.pos
        b = r.u8()
        if b != TUPLE_KEY and b != TUPLE_OLD:
            raise_decode_error(f"Delete: expected 'K' or 'O', got 0x{b:02x}", at, t)
        old = r.tupledata(); r.end()
        return _tuple_new(M_Delete, (relid, KIND_K if b == TUPLE_KEY else KIND_O, old, xid))
    if t == MSG_RELATION:  # 'R' Relation
        relid = r.u32()
        nsp = r.string(); name = r.string()
        at = r.c.pos
        b = r.u8()
        if b != 100 and b != 110 and b != 102 and b != 105:  # d n f i
            raise_decode_error(f"Relation: unknown replica identity 0x{b:02x}", at, t)
        replident = chr(b)
        at = r.c.pos
        natts = r.i16()
        if natts < 0:
            raise_decode_error(f"Relation: negative column count {natts}", at, t)
        cols = []
        for i in range(natts):
            at = r.c.pos
            flags = r.u8()
            if flags > 1:
                raise_decode_error(f"Relation: illegal column flags 0x{flags:02x}", at, t)
            cname = r.string()
            toid = r.u32()
            typmod = r.i32()
            cols.append(_tuple_new(M_RelationColumn, (flags, cname, toid, typmod)))
        r.end()
        return _tuple_new(M_Relation, (relid, nsp, name, replident, tuple(cols), xid))
    if t == MSG_TYPE:  # 'Y' Type
        typid = r.u32(); nsp = r.string(); name = r.string(); r.end()
        return _tuple_new(M_Type, (typid, nsp, name, xid))
    if t == MSG_TRUNCATE:  # 'T' Truncate
        at = r.c.pos
        n = r.i32()
        if n < 0:
            raise_decode_error(f"Truncate: negative relation count {n}", at, t)
        at = r.c.pos
        opts = r.u8()
        if opts > 3:
            raise_decode_error(f"Truncate: illegal options 0x{opts:02x}", at, t)
        if (r.c.len - r.c.pos) // 4 < n:
            r.c.err_offset = r.c.pos
            r.c.err_reason = b"truncated message"
            r.c.err_need = <Py_ssize_t>n * 4
            r.fail()
        relids = [r.u32() for i in range(n)]
        r.end()
        return _tuple_new(M_Truncate, (opts, tuple(relids), xid))
    if t == MSG_MESSAGE:  # 'M' Message
        at = r.c.pos
        flags = r.u8()
        if flags > 1:
            raise_decode_error(f"Message: illegal flags 0x{flags:02x}", at, t)
        lsn = r.u64()
        prefix = r.string()
        at = r.c.pos
        n = r.i32()
        if n < 0:
            raise_decode_error(f"Message: negative content length {n}", at, t)
        if rd_bytes(&r.c, n, &p) < 0:
            r.fail()
        r.end()
        return _tuple_new(M_LogicalMessage, (flags, lsn, prefix,
                                             PyBytes_FromStringAndSize(<const char *>p, n), xid))
    if t == MSG_ORIGIN:  # 'O' Origin
        lsn = r.u64(); name = r.string(); r.end()
        return _tuple_new(M_Origin, (lsn, name))
    if t == MSG_STREAM_START:  # 'S' Stream Start
        x = r.u32()
        at = r.c.pos
        first = r.u8()
        if first > 1:
            raise_decode_error(f"Stream Start: illegal first_segment 0x{first:02x}", at, t)
        r.end()
        return _tuple_new(M_StreamStart, (x, first))
    if t == MSG_STREAM_STOP:  # 'E' Stream Stop
        r.end()
        return _tuple_new(M_StreamStop, ())
    if t == MSG_STREAM_COMMIT:  # 'c' Stream Commit
        x = r.u32(); r.zero_flags()
        a = r.u64(); e = r.u64(); ts = r.i64(); r.end()
        return _tuple_new(M_StreamCommit, (x, 0, a, e, ts))
    if t == MSG_STREAM_ABORT:  # 'A' Stream Abort
        x = r.u32(); sub = r.u32()
        if r.c.pos == r.c.len:
            return _tuple_new(M_StreamAbort, (x, sub, None, None))
        a = r.u64(); ts = r.i64(); r.end()
        return _tuple_new(M_StreamAbort, (x, sub, a, ts))
    if t == MSG_BEGIN_PREPARE:  # 'b' Begin Prepare
        a = r.u64(); e = r.u64(); ts = r.i64(); x = r.u32(); gid = r.string(); r.end()
        return _tuple_new(M_BeginPrepare, (a, e, ts, x, gid))
    if t == MSG_PREPARE or t == MSG_STREAM_PREPARE or t == MSG_COMMIT_PREPARED:  # 'P' Prepare, 'p' Stream Prepare, 'K' Commit Prepared
        r.zero_flags()
        a = r.u64(); e = r.u64(); ts = r.i64(); x = r.u32(); gid = r.string(); r.end()
        cls = M_Prepare if t == MSG_PREPARE else (M_StreamPrepare if t == MSG_STREAM_PREPARE else M_CommitPrepared)
        return _tuple_new(cls, (0, a, e, ts, x, gid))
    if t == MSG_ROLLBACK_PREPARED:  # 'r' Rollback Prepared
        r.zero_flags()
        a = r.u64(); e = r.u64(); ts = r.i64(); ts2 = r.i64(); x = r.u32(); gid = r.string()
        r.end()
        return _tuple_new(M_RollbackPrepared, (0, a, e, ts, ts2, x, gid))
    raise_decode_error(f"unknown message type byte 0x{t:02x}", 0, t)


def decode_message(data, *, bint in_stream=False):
    """Decode one pgoutput message (bytes-like, starting with its type byte).

    ``in_stream=True`` reads the stream XID that R/Y/I/U/D/T/M carry inside a
    Stream Start..Stream Stop block. Raises DecodeError on bad input.
    """
    cdef Py_buffer view
    cdef _Reader r = _Reader.__new__(_Reader)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        cur_init(&r.c, <const unsigned char *>view.buf, view.len)
        r.t = -1
        if view.len == 0:
            raise_decode_error("empty message", 0, -1)
        return _decode_reader(r, in_stream)
    finally:
        PyBuffer_Release(&view)
