# The spool of a pending transaction (streamed, prepared, or a plain one past
# max_pending_bytes): its raw messages as records, spilling to a temporary file, with the
# subtransaction positions that an abort cuts back to.

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
                       Py_ssize_t tb_row=-1, Py_ssize_t seq=-1, dict over=None):
        """row: the rows of ev before this message's (-1: all of them); tb_row: the rows
        of tb[tb_id] before it (the other builders of tb: all of theirs, but those in
        over: rb id -> rows before it); seq: the spool's rows before it (-1: seq_next)."""
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
                if over:
                    rows.update(over)
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
