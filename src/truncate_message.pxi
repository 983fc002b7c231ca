# Truncate and Logical Message on the decoder: a Truncate's targets, its event rows
# and the typed tables it empties (written, or checked and spooled in a pending
# transaction); a logical message held for its commit or passed on at once. Functions of
# DecoderCore (decoder_core.pxi) taking it as `self`.


cdef int on_truncate(DecoderCore self, const MsgRef *m, Cursor *c, uint32_t xid) except -1:
    if self.state == ST_TXN and not self.txn_spooled:
        return write_truncate(self, m, c, None)
    msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=self.state == ST_STREAM)
    if self.state != ST_NONE:
        # the relation versions are those in effect where the Truncate arrives
        targets = truncate_targets(self, msg, m)
        row0 = -1
        if pending_side(self):
            row0 = side_truncate(self, m, c, targets)
        if self.cur.tb_side and self.state != ST_TXN:
            pending_tb_drop(self, self.cur)       # (a Truncate's typed rows: the commit replays)
        self.cur.truncates.append(targets)
        self._spool(m, REC_TRUNCATE, len(self.cur.truncates) - 1, xid, row0, -1, len(targets))
        if self.state == ST_TXN:
            self.ctx.seq += len(targets)
        return 0
    self._fail("Truncate outside a transaction", m, 0)


cdef Py_ssize_t side_truncate(DecoderCore self, const MsgRef *m, Cursor *c, list targets) except -1:
    """The event rows of a Truncate into the open spool's EvStore (pending_side): one per
    relation, as write_truncate writes them. Returns the rows it held before."""
    cdef Spool sp = self.cur
    cdef RelBuilders rb
    cdef Py_ssize_t row0 = sp.ev.meta.rows
    cdef int64_t seq = self.ctx.seq
    cdef bint ok = False
    if c.pos + 4 >= m.n:                  # (decode_message checked it)
        self._fail("Truncate without options", m, c.pos)
    pending_ev_swap(self, sp)
    self.ctx.seq = row0
    try:
        for rb in targets:
            ev_truncate_row(self, rb, m, m.p[c.pos + 4])
            self.ctx.seq += 1
        ok = True
    finally:
        if not ok:
            ev_truncate(&self.ev, row0)
        pending_ev_swap(self, sp)
        self.ctx.seq = seq
    pending_side_check(self, sp)
    return row0


cdef int ev_truncate_row(DecoderCore self, RelBuilders rb, const MsgRef *m, int options) except -1:
    self._ev_row(rb, m, b't', options)
    if map_end_row(&self.ev.before, 0) < 0 or map_end_row(&self.ev.after, 0) < 0:
        raise MemoryError()
    self._ev_toast_end()
    return 0


cdef list truncate_targets(DecoderCore self, object msg, const MsgRef *m):
    targets = []
    for relid in msg.relids:
        rb = self.rb_current.get(relid)
        if rb is None:
            self._fail(f"Truncate of relation {relid} before any Relation message for it", m, 0)
        targets.append(rb)
    return targets


cdef int on_logical_message(DecoderCore self, const MsgRef *m, uint32_t xid) except -1:
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


cdef int write_truncate(DecoderCore self, const MsgRef *m, Cursor *c, list targets) except -1:
    cdef RelBuilders rb
    cdef int options
    if targets is None:
        msg = decode_message(<const unsigned char[:m.n]>m.p, in_stream=c.pos == 5)
        targets = truncate_targets(self, msg, m)
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
            ev_truncate_row(self, rb, m, options)
        self.ctx.seq += 1
    return 0
