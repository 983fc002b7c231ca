# Pending transactions on the decoder: streamed (S..E, c, A) and prepared (b..P, p,
# K, r) transactions and a plain B..C past max_pending_bytes, each held in a Spool.
# Their changes are checked on arrival (a run at a time, pending_spool_run) and their
# rows kept beside the spool where they can be (its EvStore and typed builders: the
# side_* / tb_* functions); the commit appends the kept rows (pending_adopt,
# pending_ev_adopt) and replays the spool for the rest (pending_replay*). Functions of
# DecoderCore (decoder_core.pxi) taking it as `self`.


cdef int pending_carry_part(DecoderCore self, const MsgRef *refs, Py_ssize_t start, Py_ssize_t stop) except -1:
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
        if t == MSG_INSERT or t == MSG_UPDATE or t == MSG_DELETE:          # I U D
            relid = pgo_be32(m.p + 1)
            rb = current[relid]
            sp.append(REC_DML, 0, rb.id, m, self.max_pending_bytes, self.spill_dir)
        elif t == MSG_TRUNCATE:                               # T
            msg = decode_message(<const unsigned char[:m.n]>m.p)
            sp.truncates.append([current[r] for r in msg.relids])
            sp.append(REC_TRUNCATE, 0, len(sp.truncates) - 1, m, self.max_pending_bytes,
                      self.spill_dir)
        elif t == MSG_MESSAGE:                               # M (transactional ones wait)
            if m.p[1] & 1:
                sp.append(REC_MESSAGE, 0, -1, m, self.max_pending_bytes, self.spill_dir)
        elif t == MSG_ORIGIN:                               # O
            msg = decode_message(<const unsigned char[:m.n]>m.p)
            sp.append(REC_ORIGIN, 0, self._origin_id(msg.name), m, self.max_pending_bytes,
                      self.spill_dir)
        elif t == MSG_RELATION:                               # R: the next version from here
            relid_o, _, rb_new = next(log)
            current[relid_o] = rb_new
    self.txn_rel_log = []
    return 0


cdef int pending_on_stream(DecoderCore self, const MsgRef *m, uint8_t t) except -1:
    cdef Spool sp
    msg = decode_message(<const unsigned char[:m.n]>m.p)
    if t == MSG_STREAM_START:    # S
        self._require(ST_NONE, m, "Stream Start")
        sp = self.streams.get(msg.xid)
        if sp is None:
            if not msg.first_segment:
                self._fail(f"Stream Start continues transaction {msg.xid} whose first "
                           "segment was not seen", m, 5)
            sp = Spool()
            sp.xid = msg.xid
            pending_side_init(self, sp)
            self.streams[msg.xid] = sp
        self.cur = sp
        self.stream_xid = msg.xid
        self.state = ST_STREAM
    elif t == MSG_STREAM_STOP:  # E
        self._require(ST_STREAM, m, "Stream Stop")
        self.cur = None
        self.state = ST_NONE
    elif t == MSG_STREAM_COMMIT:  # c
        self._require(ST_NONE, m, "Stream Commit")
        sp = self.streams.pop(msg.xid, None)
        if sp is None:
            self._fail(f"Stream Commit for transaction {msg.xid} that was never streamed", m, 1)
        pending_replay(self, sp, msg.commit_lsn, msg.commit_ts, msg.xid, 22, "c")
    else:          # A
        self._require(ST_NONE, m, "Stream Abort")
        if msg.xid == msg.subxid:
            self.streams.pop(msg.xid, None)    # a stray abort without a stream is ignored
        else:
            sp = self.streams.get(msg.xid)
            if sp is not None:
                sp.abort_sub(msg.subxid)
    return 0


cdef int pending_on_two_phase(DecoderCore self, const MsgRef *m, uint8_t t) except -1:
    cdef Spool sp
    msg = decode_message(<const unsigned char[:m.n]>m.p)
    if t == MSG_BEGIN_PREPARE:    # b
        self._require(ST_NONE, m, "Begin Prepare")
        sp = Spool()
        sp.xid = msg.xid
        sp.gid = msg.gid
        pending_side_init(self, sp)
        self.cur = sp
        self.state = ST_PREPARE
    elif t == MSG_PREPARE:  # P
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
    elif t == MSG_STREAM_PREPARE: # p
        self._require(ST_NONE, m, "Stream Prepare")
        sp = self.streams.pop(msg.xid, None)
        if sp is None:
            self._fail(f"Stream Prepare for transaction {msg.xid} that was never streamed", m, 0)
        sp.gid = msg.gid
        sp.prepare_end_lsn = msg.end_lsn
        sp.prepare_ts = msg.prepare_ts
        self.prepared[msg.gid] = sp
    elif t == MSG_COMMIT_PREPARED:  # K
        self._require(ST_NONE, m, "Commit Prepared")
        sp = self.prepared.pop(msg.gid, None)
        if sp is None:
            self._fail(f"Commit Prepared for unknown GID {msg.gid!r} (its Begin Prepare.."
                       "Prepare was not seen)", m, 0)
        pending_replay(self, sp, msg.commit_lsn, msg.commit_ts, msg.xid, 18, "K")
    else:          # r
        self._require(ST_NONE, m, "Rollback Prepared")
        sp = self.prepared.get(msg.gid)
        if sp is not None and (sp.prepare_end_lsn == msg.prepare_end_lsn
                               or sp.prepare_end_lsn is None):
            del self.prepared[msg.gid]
    return 0


cdef int pending_replay(DecoderCore self, Spool sp, uint64_t commit_lsn, int64_t commit_ts, uint32_t xid,
                        Py_ssize_t ts_offset, str mtype) except -1:
    """Emit a spooled transaction as committed with the given metadata."""
    self.ctx.commit_lsn = <int64_t>commit_lsn
    self.ctx.commit_ts = _unix_ts(commit_ts, ts_offset, mtype)
    self.ctx.xid = xid
    self.ctx.snapshot = 0
    self.ctx.seq = 0
    self.ctx.origin = sp.origin
    cdef int rc
    cdef bint events_kept = sp.ev_side and self.want_events
    cdef bint adopted = False
    if sp.mem.len:
        self.spool_hint = sp.mem.len
    if events_kept and ev_nbytes(&sp.ev) >= _ev_adopt_bytes and self.ev.meta.rows == self.ev_committed:
        pending_ev_adopt(self, sp)
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
        adopted = pending_adopt(self, sp)              # so were the typed rows
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
        return pending_replay_records(self, sp)
    finally:
        if events_kept:
            self.want_events = True
        if adopted:
            self.want_tables = True


cdef bint pending_adopt(DecoderCore self, Spool sp) except -1:
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
    pending_tb_drop(self, sp)
    return True


cdef int pending_replay_records(DecoderCore self, Spool sp) except -1:
    """Write the spooled records with the metadata in ctx, and commit them."""
    cdef Py_ssize_t used
    cdef bytes data
    self.txn_messages = []
    if sp.file is None:
        # all in memory: read the records where they are (no copy)
        if pending_replay_run(self, sp, sp.mem.data, sp.mem.len) != sp.mem.len:
            raise DecodeError("spool ended inside a record", None, None)
    else:
        pending = b""
        for chunk in sp.chunks():
            data = pending + chunk if pending else chunk
            used = pending_replay_run(self, sp, <const unsigned char *>PyBytes_AS_STRING(data),
                                    PyBytes_GET_SIZE(data))
            pending = data[used:]
        if pending:
            raise DecodeError("spool ended inside a record", None, None)
    self._commit_rows()
    return 0


cdef Py_ssize_t pending_replay_run(DecoderCore self, Spool sp, const unsigned char *p, Py_ssize_t n) except -1:
    """Write the whole records in p[0..n); returns the bytes they took. Consecutive
    changes of one relation version go through pending_write_run together."""
    cdef Py_ssize_t pos = 0
    cdef MsgRef m
    cdef uint8_t kind
    cdef int32_t rb_id
    cdef uint32_t len32
    cdef Cursor c
    self.run_refs.len = 0
    self.run_ids.len = 0
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
                pos += REC_HEAD + len32      # (its event rows were kept: see pending_replay)
                continue
            if self.run_refs.len >= SPOOL_RUN_ROWS * <Py_ssize_t>sizeof(MsgRef):
                pending_write_changes(self)
            if (buf_append(&self.run_refs, <const unsigned char *>&m, sizeof(MsgRef)) < 0
                    or buf_append(&self.run_ids, <const unsigned char *>&rb_id, 4) < 0):
                raise MemoryError()
            pos += REC_HEAD + len32
            continue
        pending_write_changes(self)
        cur_init(&c, m.p, m.n)
        c.pos = 5 if p[pos + 1] else 1
        if kind == REC_TRUNCATE:
            write_truncate(self, &m, &c, sp.truncates[rb_id])
        elif kind == REC_ORIGIN:
            self.ctx.origin = rb_id
        else:
            self.txn_messages.append(self._message_obj(&m, p[pos + 1]))
        pos += REC_HEAD + len32
    pending_write_changes(self)
    return pos


cdef int pending_write_changes(DecoderCore self) except -1:
    """Write the spooled changes gathered in run_refs (consecutive records of a replay,
    their relation versions in run_ids): as one part when they are worth gathering
    (replay_part_run), else a run of one relation version at a time."""
    cdef const MsgRef *refs = <const MsgRef *>self.run_refs.data
    cdef const int32_t *ids = <const int32_t *>self.run_ids.data
    cdef Py_ssize_t n = self.run_refs.len // <Py_ssize_t>sizeof(MsgRef), i = 0, j
    if n == 0:
        return 0
    try:
        if (self.want_tables or self.want_events) and replay_part_run(self, refs, ids, n):
            return 0
        while i < n:
            j = i + 1
            while j < n and ids[j] == ids[i]:
                j += 1
            pending_write_run(self, refs + i, j - i, ids[i])
            i = j
    finally:
        self.run_refs.len = 0
        self.run_ids.len = 0
    return 0


cdef int pending_write_run(DecoderCore self, const MsgRef *refs, Py_ssize_t n,
                           int32_t rb_id) except -1:
    """Write n spooled changes (all of relation version rb_id, each a plain I/U/D: see
    REC_HEAD), through the block writers where they take them."""
    cdef Py_ssize_t i = 0
    cdef RelBuilders rb
    cdef Cursor c
    rb = <RelBuilders>self.rb_all[rb_id]
    while i < n:
        if self.want_tables or self.want_events:
            self._run_blocks(refs, &i, n, rb, 0)
            if i >= n:
                break
        cur_init(&c, refs[i].p, refs[i].n)
        c.pos = 1
        self._write_dml(&refs[i], &c, refs[i].p[0], rb)
        i += 1
    return 0


cdef inline bint pending_side(DecoderCore self):
    """The changes of the open S..E block or b..P write their event rows into its
    Spool's EvStore (the check on arrival is then also their decode)."""
    return (self.want_events and (self.state == ST_STREAM or self.state == ST_PREPARE)
            and self.cur.ev_side)


cdef void pending_side_init(DecoderCore self, Spool sp):
    """A new stream's or prepared transaction's spool keeps its event rows (pending_side) and
    its typed rows (pending_tb_for); its records start at the size the last one committed
    held (one block, from the block cache: no growth through copies)."""
    sp.mem.hint = self.spool_hint
    if self.want_events:
        sp.ev = self.ev_spare
        memset(&self.ev_spare, 0, sizeof(EvStore))
        sp.ev_side = True
    sp.tb_side = self.want_tables


cdef RelBuilders pending_tb_for(DecoderCore self, Spool sp, RelBuilders rb):
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
            pending_tb_drop(self, sp)
            return None
        t = self.tb_spare.pop(rb.id, None)
        if t is None or t.version is not rb.version:
            t = rb.side_copy()
        sp.tb[rb.id] = t
    return t


cdef void pending_tb_drop(DecoderCore self, Spool sp):
    """From here the spool keeps no typed rows; its commit replays it for them."""
    sp.tb_side = False
    sp.tb = {}
    sp.first_tb = {}


cdef Py_ssize_t pending_tb_nbytes(DecoderCore self, Spool sp):
    cdef RelBuilders t
    cdef Py_ssize_t n = 0
    for t in sp.tb.values():
        n += t.nbytes()
    return n


cdef int pending_ev_adopt(DecoderCore self, Spool sp) except -1:
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


cdef void pending_ev_swap(DecoderCore self, Spool sp):
    cdef EvStore t = self.ev
    self.ev = sp.ev
    sp.ev = t


cdef void pending_side_check(DecoderCore self, Spool sp):
    """Past max_pending_bytes (the spool's bytes in memory, its event rows and its
    typed rows together), the rows are dropped and the commit decodes the spool
    again."""
    cdef Py_ssize_t n = sp.mem.len
    if not (sp.ev_side or sp.tb_side):
        return
    if sp.ev_side:
        n += ev_nbytes(&sp.ev)
    if sp.tb_side:
        n += pending_tb_nbytes(self, sp)
    if n > self.max_pending_bytes:
        if sp.ev_side:
            ev_free(&sp.ev)
            sp.ev_side = False
        pending_tb_drop(self, sp)


cdef int pending_spool_run(DecoderCore self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs) except -1:
    """Check and spool a run of changes of one relation from refs[*index] (in S..E, b..P
    or a spooled B..C), as _on_dml does one at a time: a write of the whole run
    (through _run_blocks, and _write_dml for what it leaves), then the spool. Where the
    spool keeps rows (its EvStore, pending_side; its typed builders, pending_tb_for) they stay;
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
    if m.n < 8 + xo or (m.p[0] != MSG_INSERT and m.p[0] != MSG_UPDATE and m.p[0] != MSG_DELETE):
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
        if m.n < 8 + xo or (t != MSG_INSERT and t != MSG_UPDATE and t != MSG_DELETE) or pgo_be32(m.p + 1 + xo) != relid:
            break
        j += 1
    if j - i < 2:
        return 0
    cdef bint side = pending_side(self)
    cdef Spool sp = self.cur
    cdef Py_ssize_t row0 = 0, tb_row0 = -1
    cdef RelBuilders w = pending_tb_for(self, sp, rb)   # where the check writes
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
        pending_ev_swap(self, sp)
        self.ctx.seq = row0
    k = i
    try:
        while k < j:
            self._run_blocks(refs, &k, j, w, xo)
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
            pending_tb_drop(self, sp)             # (a change that raised: the commit replays)
            tb_row0 = -1
        if side:
            ev_truncate(&self.ev, row0 + (k - i))   # the checked changes' rows stay
            pending_ev_swap(self, sp)
        else:
            self._ev_truncate(self.ev_committed)
        self.ctx.seq = seq
        pending_spool_checked(self, refs, i, k, rb, xo, row0, tb_row0)
    if side or sp.tb_side:
        pending_side_check(self, sp)
    return 0


cdef int pending_spool_checked(DecoderCore self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                               RelBuilders rb, int xo, Py_ssize_t row0, Py_ssize_t tb_row0=-1) except -1:
    self.cur.append_dml_run(refs, i, j, rb.id, xo != 0, self.max_pending_bytes, self.spill_dir,
                            row0, tb_row0)
    if self.state == ST_TXN:
        self.ctx.seq += j - i             # open_changes of pending()
    return 0
