# The stateful columnar decoder core.
#
# DecoderCore.feed() walks a batch of pgoutput messages in C and appends every change
# of a *committed* transaction straight into typed column builders (one RelBuilders per
# relation version) and, optionally, into the generic change-event table. No Python
# object is created per row or per value on this path.
#
# This file holds the class: its state, feed() and dispatch, transaction boundaries,
# the changes (row-wise and the block writers _run_blocks -> _run_typed_blocks /
# _run_event_blocks), the row-wise TupleData scan, the event rows and export(). The
# logic of pending transactions is in pending_txn.pxi, Truncate and Logical Message in
# truncate_message.pxi, the export of the event table in export.pxi: cdef functions
# taking the core as `self`.
#
# Transaction handling (docs/protocol.md §3, docs/design.md):
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
    cdef Py_ssize_t feed_bytes      # the bytes of the messages of the last feed (MessageBatch)
    cdef bint hints_taken           # the process's size hints applied (at the first feed)
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
    # ev is swapped with its Spool's: see pending_side and pending_ev_swap)
    cdef EvStore ev
    cdef EvStore ev_spare           # an emptied spool's EvStore, for the next spool (warm pages)
    cdef list ev_chunks             # EvChunk: committed event rows before ev's (pending_ev_adopt)
    cdef Py_ssize_t spool_hint      # bytes the last committed spool held in memory
    cdef dict tb_spare              # rb id -> RelBuilders a committed spool emptied (warm
                                    # memory for the next spool's typed rows)
    cdef Py_ssize_t ev_committed
    # scratch
    cdef Buf scratch
    cdef Buf cp_scratch             # the column pass's value table (_column_block)
    cdef Buf run_refs               # MsgRef per spooled change of a replayed run
    cdef Buf run_ids                # int32 relation version (rb id) of each of them
    cdef Buf win_txn, win_grp, win_rows, win_refs   # a window's lists (txn_window.pxi)
    cdef Buf win_txn2, win_grp2, win_rows2  # the next window's lists, scanned beside the
                                    # helper's work on this one (window_write)
    cdef Buf win_pre                # that scan's state, a WinScan (where it stopped;
                                    # the type is txn_window.pxi's)
    cdef Py_ssize_t win_pre_i       # its first Begin (-1: none)
    cdef const MsgRef *win_pre_refs # of the batch it scanned
    cdef int win_pre_rc             # what window_scan returned (WSCAN_DONE / WSCAN_NEED)
    cdef list win_pre_groups        # its groups so far (this window's, in order)
    cdef bint busy                  # a feed() or export() is running: the block writers
                                    # let go of the GIL, so another thread could come in
    cdef public int threads         # 2: the change-event rows on a helper thread
                                    # beside the typed rows (helper_thread.pxi)
    cdef pgo_helper *helper         # that thread, during a feed() (else NULL)
    cdef EvStore ev_own             # the calling thread's share of a window's event rows
                                    # beside the helper's (appended to ev after them)
    cdef double ev_share            # that share of the changes, from the last window's times
    cdef int helper_strikes         # hand-overs in a row that took longer than one thread
    cdef bint helper_kept           # the last feed() kept its helper to the end (export()
                                    # then writes the event names on one: its hand-overs paid)

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
        self.win_pre_i = -1

    def __init__(self, catalog, *, bint events=True, bint tables=True, binary_unknown=None,
                 Py_ssize_t max_pending_bytes=256 << 20, spill_dir=None, threads=None):
        self.catalog = catalog
        if threads is None:
            self.threads = default_threads()
        elif int(threads) < 1:
            raise ValueError(f"threads must be 1 or more, not {threads!r}")
        else:
            self.threads = int(threads)
        self.want_events = events
        self.want_tables = tables
        self.binary_unknown = bool(binary_unknown)
        self.max_pending_bytes = max_pending_bytes
        self.spill_dir = spill_dir
        for v in catalog.versions():
            if catalog.current(v.relid) is v:
                self._builders_for(v)

    def __dealloc__(self):
        ev_free(&self.ev)
        ev_free(&self.ev_spare)
        ev_free(&self.ev_own)
        buf_free(&self.scratch)
        buf_free(&self.cp_scratch)
        buf_free(&self.run_refs)
        buf_free(&self.run_ids)
        buf_free(&self.win_txn)
        buf_free(&self.win_grp)
        buf_free(&self.win_rows)
        buf_free(&self.win_refs)
        buf_free(&self.win_txn2)
        buf_free(&self.win_grp2)
        buf_free(&self.win_rows2)
        buf_free(&self.win_pre)

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
            if self.hints_taken:
                rb.hints_take(self.feed_bytes)   # (else at the first feed: _take_hints)
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
        self._enter()
        try:
            if not self.hints_taken:
                self._take_hints()
            if (self.threads >= 2 and self.want_events and self.want_tables
                    and self.feed_bytes >= g_helper_min_feed):
                self.helper = helper_take()  # (NULL: no thread to be had, one does all)
                self.helper_strikes = 0
            self._feed(refs, nrefs)
        finally:
            self.helper_kept = self.helper != NULL
            helper_give(self.helper)         # (every job it ran was waited for)
            self.helper = NULL
            self.busy = False

    cdef int _take_hints(self) except -1:
        """Start the empty output buffers (change events, and the typed builders made
        before this first feed: the catalog's relations) at the sizes the process last
        handed over, scaled to this feed's bytes; builders made later take theirs when
        made."""
        cdef RelBuilders rb
        self.hints_taken = True
        if self.want_events and ev_hints_take(&self.ev, self.feed_bytes) < 0:
            raise MemoryError()
        for rb in self.rb_all:
            rb.hints_take(self.feed_bytes)
        return 0

    cdef int _enter(self) except -1:
        if self.busy:
            raise RuntimeError("a Decoder is being used by two threads at once: feed() and "
                               "export() of one Decoder must not overlap (give each thread "
                               "its own Decoder, or see decode_parallel)")
        self.busy = True
        return 0

    cdef int _feed(self, const MsgRef *refs, Py_ssize_t nrefs) except -1:
        cdef Py_ssize_t i = 0, k, skip = 0
        self.win_pre_i = -1                 # (a scan ahead is of one batch only)
        self.win_pre_groups = None
        if self.state == ST_TXN:
            self.txn_part_start = 0         # the open transaction continues here
            self.txn_rel_log = []
        try:
            while i < nrefs:
                if (self.state == ST_TXN and not self.txn_spooled
                        and (self.want_tables or self.want_events) and g_windows and i >= skip and refs[i].n >= 5
                        and (refs[i].p[0] == MSG_INSERT or refs[i].p[0] == MSG_UPDATE
                             or refs[i].p[0] == MSG_DELETE)):
                    # a large transaction's changes to several tables: gathered per relation
                    k = window_part_run(self, refs, i, nrefs, &skip)
                    if k > i:
                        i = k
                        continue
                if (self.state == ST_TXN and not self.txn_spooled and self.last_rb is not None
                        and (self.want_tables or self.want_events)):
                    self._run_blocks(refs, &i, nrefs, self.last_rb, 0)
                    if i >= nrefs:
                        break
                elif self.state != ST_NONE and (self.state != ST_TXN or self.txn_spooled):
                    if ((self.want_tables or self.want_events) and g_windows and i >= skip
                            and refs[i].n >= 5 and (refs[i].p[0] == MSG_INSERT
                                                    or refs[i].p[0] == MSG_UPDATE
                                                    or refs[i].p[0] == MSG_DELETE)):
                        # a streamed or prepared transaction's changes to several
                        # tables: gathered per relation, then spooled
                        k = pending_part_run(self, refs, i, nrefs, &skip)
                        if k > i:
                            i = k
                            continue
                    pending_spool_run(self, refs, &i, nrefs)
                    if i >= nrefs:
                        break
                elif (self.state == ST_NONE and (self.want_tables or self.want_events) and g_windows and i >= skip
                        and refs[i].n == 21 and refs[i].p[0] == MSG_BEGIN):
                    # whole small transactions: typed rows gathered per relation
                    k = window_run(self, refs, i, nrefs, &skip)
                    if k > i:
                        i = k
                        continue
                self._dispatch(&refs[i], i, refs)
                i += 1
            if self.state == ST_TXN and not self.txn_spooled:
                # a transaction still open stays open: its rows wait in the builders,
                # and a raw copy of them in txn_carry (see the top of this file)
                pending_carry_part(self, refs, self.txn_part_start, nrefs)
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
        return 0


    cdef void _reset_after_error(self):
        self._rollback_open()
        self._drop_carry()
        self.state = ST_NONE
        self.cur = None

    cdef void _drop_carry(self):
        if self.txn_carry is not None:
            self.txn_carry = None           # (its spill file closes with it)
        self.txn_spooled = False
        if self.txn_rel_log:
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
        if self.state == ST_STREAM and (t == MSG_RELATION or t == MSG_TYPE or t == MSG_INSERT or t == MSG_UPDATE or t == MSG_DELETE
                                         or t == MSG_TRUNCATE or t == MSG_MESSAGE):
            if rd_u32(&c, &xid) < 0:
                self._fail_cursor(&c)
        if t == MSG_INSERT or t == MSG_UPDATE or t == MSG_DELETE:                  # I U D
            return self._on_dml(m, &c, t, xid)
        if t == MSG_BEGIN:
            return self._on_begin(m, index)
        if t == MSG_COMMIT:
            return self._on_commit(m)
        if t == MSG_RELATION or t == MSG_TYPE:
            return self._on_catalog(m, t, xid)
        if t == MSG_TRUNCATE:
            return on_truncate(self, m, &c, xid)
        if t == MSG_MESSAGE:
            return on_logical_message(self, m, xid)
        if t == MSG_ORIGIN:
            return self._on_origin(m)
        if t == MSG_STREAM_START or t == MSG_STREAM_STOP or t == MSG_STREAM_COMMIT or t == MSG_STREAM_ABORT:
            return pending_on_stream(self, m, t)
        if t == MSG_BEGIN_PREPARE or t == MSG_PREPARE or t == MSG_STREAM_PREPARE or t == MSG_COMMIT_PREPARED or t == MSG_ROLLBACK_PREPARED:
            return pending_on_two_phase(self, m, t)
        decode_message(<const unsigned char[:m.n]>m.p)    # raises the precise DecodeError
        raise DecodeError(f"unexpected message type {chr(t)!r}", 0, chr(t))

    # -- transaction boundaries ----------------------------------------------------
    cdef int _require(self, int state, const MsgRef *m, str what) except -1:
        if self.state != state:
            names = {ST_NONE: "outside a transaction", ST_TXN: "inside Begin..Commit",
                     ST_PREPARE: "inside Begin Prepare..Prepare", ST_STREAM: "inside a stream block"}
            self._fail(f"{what} {names[self.state]}", m, 0)
        return 0

    # Begin and Commit are read here in C: a message object each (decode_message) was
    # most of what a small transaction cost beyond its changes. A message of any other
    # length (or Commit flags) goes through decode_message, which raises its error.
    cdef int _on_begin(self, const MsgRef *m, Py_ssize_t index) except -1:
        cdef uint64_t final_lsn
        cdef int64_t commit_ts
        cdef uint32_t xid
        if m.n != 21:                       # 'B', final LSN, timestamp, xid
            decode_message(<const unsigned char[:m.n]>m.p)
            raise DecodeError("malformed Begin", 0, "B")     # (not reached)
        final_lsn = pgo_be64(<const unsigned char *>m.p + 1)
        commit_ts = pgo_be64s(<const unsigned char *>m.p + 9)
        xid = pgo_be32(<const unsigned char *>m.p + 17)
        self._require(ST_NONE, m, "Begin")
        self.state = ST_TXN
        self.ctx.commit_lsn = <int64_t>final_lsn
        self.ctx.commit_ts = _unix_ts(commit_ts, 9, "B")
        self.ctx.xid = xid
        self.ctx.snapshot = xid == 0
        self.ctx.seq = 0
        self.ctx.origin = -1
        if self.txn_messages:
            self.txn_messages = []
        self._drop_carry()
        self.txn_part_start = index + 1
        return 0

    cdef int _on_commit(self, const MsgRef *m) except -1:
        cdef Spool sp
        cdef uint64_t commit_lsn
        if m.n != 26 or m.p[1] != 0:       # 'C', flags 0, commit LSN, end LSN, timestamp
            decode_message(<const unsigned char[:m.n]>m.p)
            raise DecodeError("malformed Commit", 0, "C")    # (not reached)
        commit_lsn = pgo_be64(<const unsigned char *>m.p + 2)
        self._require(ST_TXN, m, "Commit")
        if <int64_t>commit_lsn != self.ctx.commit_lsn:
            self._fail(f"Commit LSN {commit_lsn:X} does not match its Begin's final LSN "
                       f"{<uint64_t>self.ctx.commit_lsn:X}", m, 2)
        self.state = ST_NONE
        if self.txn_spooled:
            sp = self.txn_carry
            self._drop_carry()
            self.cur = None
            self.ctx.seq = 0
            self.ctx.origin = -1
            pending_replay_records(self, sp)
        else:
            self._drop_carry()
            self._commit_rows()
        self.ctx.snapshot = 0
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
        if t == MSG_TYPE:
            self.catalog.apply_type(msg)
        elif self.state == ST_TXN and not self.txn_spooled:
            prev = self.rb_current.get(msg.relid)
            rb = self._builders_for(self.catalog.apply_relation(msg, m.lsn))
            self.txn_rel_log.append((msg.relid, prev, rb))   # for pending_carry_part
        else:
            self._builders_for(self.catalog.apply_relation(msg, m.lsn))
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
            # event rows (pending_side) or typed rows (pending_tb_for), this change's rows are written
            # into it and stay.
            c.pos = start
            seq = self.ctx.seq
            was_dirty = rb.dirty
            side = pending_side(self)
            sp = self.cur
            w = pending_tb_for(self, sp, rb)          # where the check writes
            if w is None:
                w = rb
            else:
                tb_row0 = w.meta.rows
                self.ctx.seq = sp.seq_next
            if side:
                row0 = sp.ev.meta.rows
                pending_ev_swap(self, sp)
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
                    pending_tb_drop(self, sp)         # (the change raised: the commit replays)
                    tb_row0 = -1
                if side:
                    ev_truncate(&self.ev, row0 + 1 if ok else row0)
                    pending_ev_swap(self, sp)
                else:
                    self._ev_truncate(self.ev_committed)
                self.ctx.seq = seq
            self._spool(m, REC_DML, rb.id, xid, row0, tb_row0, 1)
            if side or sp.tb_side:
                pending_side_check(self, sp)
            if self.state == ST_TXN:
                self.ctx.seq += 1               # open_changes of pending()
            return 0
        self._fail("change outside a transaction", m, 0)


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
            self._ev_row(rb, m, insert_op(&self.ctx) if t == MSG_INSERT else (b'u' if t == MSG_UPDATE else b'd'), -1)
        if rd_u8(c, &b) < 0:
            self._fail_cursor(c)
        if t == MSG_INSERT:
            if b != TUPLE_NEW:
                self._fail("Insert: expected 'N' before the new tuple", m, c.pos - 1)
            if self.want_events:
                map_end_row(&self.ev.before, 0)
                self._ev_kind(0)
            self._scan_new(m, c, rb)
        elif t == MSG_UPDATE:
            if b == TUPLE_KEY or b == TUPLE_OLD:
                old_kind = b
                self._scan_old(m, c, rb, old_kind)
                at = c.pos
                if rd_u8(c, &b) < 0:
                    self._fail_cursor(c)
                if b != TUPLE_NEW:
                    self._fail("Update: expected 'N' after the old tuple", m, at)
            elif b != TUPLE_NEW:
                self._fail(f"Update: expected 'K', 'O' or 'N', got 0x{b:02x}", m, c.pos - 1)
            else:
                if self.want_events:
                    map_end_row(&self.ev.before, 0)
                    self._ev_kind(0)
            self._scan_new(m, c, rb)
        else:
            if b != TUPLE_KEY and b != TUPLE_OLD:
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
            if meta_append(&rb.meta, m.lsn, &self.ctx, insert_op(&self.ctx) if t == MSG_INSERT else (b'u' if t == MSG_UPDATE else b'd')) < 0:
                raise MemoryError()
        if self.want_events:
            self._ev_toast_end()
        self.ctx.seq += 1
        return 0

    cdef int _run_typed_blocks(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
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
            j = block_end(refs, i, nrefs, relid, ncols, xo, &olds, &nbytes, True)
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
                meta_put(meta, m.lsn, ctx, insert_op(ctx) if p[0] == MSG_INSERT else b'u')
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
        also built, its rows for these changes are already written (_run_blocks): the
        typed tables go on here instead of stopping the run, after which the event rows
        past the stop would be cut and written again from there."""
        cdef bint events = self.want_events
        self.want_events = False
        try:
            return self._dml_rows(refs, i, j, index, rb, xo)
        finally:
            self.want_events = events

    cdef int _run_blocks(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
                         RelBuilders rb, int xo) except -1:
        """The block writers for what this decoder builds: _run_typed_blocks (typed tables),
        _run_event_blocks (change-event table), or both over the same changes: the events
        first, then the typed tables over the changes the events took, and the events cut
        back to where the typed tables stopped (one event row per change). *index ends at
        the first change not written (or, when the typed tables raise, at the change that
        raised), which the caller dispatches row-wise."""
        cdef Py_ssize_t i = index[0], k
        cdef Py_ssize_t ev_base = self.ev.meta.rows
        cdef int64_t seq = self.ctx.seq
        if not self.want_events:
            return self._run_typed_blocks(refs, index, nrefs, rb, xo)
        if self.want_tables and self.helper != NULL and rb.ncols > 0:
            k = ev_run_end(refs, i, nrefs, rb.relid, rb.ncols, xo)
            if k - i >= g_helper_min_changes:
                return self._run_blocks_beside(refs, index, k, rb, xo)
        self._run_event_blocks(refs, index, nrefs, rb, xo)
        if not self.want_tables:
            return 0
        k = index[0]
        if k == i:
            return 0
        index[0] = i
        self.ctx.seq = seq
        try:
            self._run_typed_blocks(refs, index, k, rb, xo)
        finally:
            if index[0] < k:
                ev_truncate(&self.ev, ev_base + (index[0] - i))
        return 0

    cdef void _helper_verdict(self, int64_t wall, int64_t alone):
        """After a hand-over: wall, the time from the job's start to its end as this
        thread saw it; alone, what the two threads' work took each (the sum: one thread
        would have taken about that). A hand-over that took as long as one thread
        would have (the machine's cores are busy with other work, and the helper waits
        to be run) is a strike; HELPER_STRIKES in a row and the feed gives its helper
        back and goes on on this thread (the next feed tries again)."""
        global g_helper_dropped
        if g_helper_guard == 0 or (g_helper_guard == 1 and wall * 10 < alone * 9):
            self.helper_strikes = 0
            return
        self.helper_strikes += 1
        if self.helper_strikes >= HELPER_STRIKES and self.helper != NULL:
            helper_give(self.helper)
            self.helper = NULL
            g_helper_dropped += 1

    cdef int _run_blocks_beside(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t end,
                                RelBuilders rb, int xo) except -1:
        """_run_blocks with both outputs, the change events on the helper thread: the
        events' blocks of the run up to end (ev_run_end: where _run_event_blocks would
        stop at the latest) written there (ev_run) while this thread writes the typed
        rows of the same changes (_run_typed_blocks), then both cut back to where the
        first of the two stopped, as _run_blocks leaves them: the typed rows past a
        change the events' writer does not take are dropped (the caller writes that
        change row-wise, both outputs, and goes on), and an error the typed rows raise
        before that change is raised with the events cut back to it."""
        cdef Py_ssize_t i = index[0], kev, kty, cut, nb
        cdef Py_ssize_t ev_base = self.ev.meta.rows, rows0 = rb.meta.rows
        cdef int64_t seq = self.ctx.seq
        cdef EvRunJob job
        cdef EvRel v
        cdef const int32_t *brow
        cdef object err = None
        cdef int64_t t0, t1
        if not rb.dirty:
            self._touch(rb)
        ev_rel(&v, rb)
        job.e = &self.ev
        job.v = &v
        job.ctx = self.ctx
        job.refs = refs
        job.i = i
        job.end = end
        job.xo = xo
        t0 = pgo_now_ns()
        with nogil:
            pgo_helper_start(self.helper, ev_run_job, &job)
        try:
            self._run_typed_blocks(refs, index, end, rb, xo)
        except DecodeError as exc:
            err = exc
        finally:
            t1 = pgo_now_ns()
            with nogil:
                pgo_helper_wait(self.helper)
        global g_helper_jobs
        g_helper_jobs += 1
        self._helper_verdict(pgo_now_ns() - t0, (t1 - t0) + job.ns)
        kev = job.k
        if kev < 0:
            raise MemoryError()
        kty = index[0]                       # (on an error: the change that raised)
        if kty < kev:
            ev_truncate(&self.ev, ev_base + (kty - i))
            if err is not None:
                raise err
            return 0
        if kty > kev or err is not None:
            # the typed rows of the changes from kev on are dropped: rb's rows are this
            # run's in order (one per change), and its old images name their rows
            cut = rows0 + (kev - i)
            nb = rb.nbefore
            brow = <const int32_t *>rb.before_rows.data
            while nb > 0 and brow[nb - 1] >= cut:
                nb -= 1
            rb.truncate(cut, nb)
            index[0] = kev
            self.ctx.seq = seq + (kev - i)
        return 0

    cdef int _run_event_blocks(self, const MsgRef *refs, Py_ssize_t *index, Py_ssize_t nrefs,
                               RelBuilders rb, int xo) except -1:
        """The change-event table's _run_typed_blocks: the run of changes of rb's relation from
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
            if j - i < CP_MIN_ROWS and self.want_tables:
                break                    # (the caller writes it row-wise, both outputs)
            k = self._ev_block(refs, i, j, nrefs, rb, olds, xo)
            if k < j:
                i = k
                break
            i = j
        index[0] = i
        return 0

    cdef Py_ssize_t _ev_block(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                              Py_ssize_t nrefs, RelBuilders rb, int olds, int xo) except -1:
        """ev_block (block_writers.pxi) of the rows i..j, without the GIL when the block
        is large enough to pay for it. Returns the first row not written."""
        cdef EvRel v
        cdef Py_ssize_t k
        ev_rel(&v, rb)
        if block_drops_gil(i, j, v.ncols):
            with nogil:
                k = ev_block(&self.ev, &v, &self.ctx, refs, i, j, nrefs, olds, xo)
        else:
            k = ev_block(&self.ev, &v, &self.ctx, refs, i, j, nrefs, olds, xo)
        if k < 0:
            raise MemoryError()
        return k

    cdef Py_ssize_t _column_block(self, const MsgRef *refs, Py_ssize_t i, Py_ssize_t j,
                                  Py_ssize_t nrefs, RelBuilders rb, int olds, int xo) except -1:
        """cp_block or cp_mixed_block (block_writers.pxi) of the rows i..j of a
        _run_typed_blocks block (room reserved), without the GIL when the block is large
        enough to pay for it. Returns the first row not written, from which the row-wise
        scan goes on."""
        cdef BlockDest d
        cdef Py_ssize_t k
        cdef bint mixed = olds == BLOCK_MIXED
        block_dest(&d, rb)
        if block_drops_gil(i, j, d.ncols):
            with nogil:
                if mixed:
                    k = cp_mixed_block(&d, &self.cp_scratch, &self.scratch, &self.ctx, refs, i, j, nrefs, xo)
                else:
                    k = cp_block(&d, &self.cp_scratch, &self.ctx, refs, i, j, nrefs, olds, xo)
        elif mixed:
            k = cp_mixed_block(&d, &self.cp_scratch, &self.scratch, &self.ctx, refs, i, j, nrefs, xo)
        else:
            k = cp_block(&d, &self.cp_scratch, &self.ctx, refs, i, j, nrefs, olds, xo)
        if k < 0:
            raise MemoryError()
        return k

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
            if kind == COL_TEXT or kind == COL_BINARY:           # 't' / 'b'
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
                if kind == COL_TEXT:
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
            elif kind == COL_NULL:                        # 'n'
                if col_end_row(col, 0, 0) < 0:
                    raise MemoryError()
            elif kind == COL_TOAST:                        # 'u'
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
        cdef bint key_only = old_kind == TUPLE_KEY
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
            if kind == COL_TEXT or kind == COL_BINARY:           # 't' / 'b'
                if rd_i32(c, &n) < 0:
                    self._fail_cursor(c)
                if n < 0:
                    self._fail(f"negative value length {n} in column {i}", m, c.pos - 4)
                if rd_bytes(c, n, &p) < 0:
                    self._fail_cursor(c)
                if cols != NULL:
                    col = cols[i]
                    if kind == COL_TEXT:
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
            elif kind == COL_NULL:                        # 'n'
                if cols != NULL:
                    if col_end_row(cols[i], 0, 0) < 0:
                        raise MemoryError()
                elif not (key_only and not rb.is_key[i]):
                    self._ev_key(mb, rb, i, m)
                    if col_end_row(mb.values, 0, 0) < 0:
                        raise MemoryError()
            elif kind == COL_TOAST:                        # 'u'
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
            if kind == COL_TEXT or kind == COL_BINARY:
                if rd_i32(c, &n) < 0:
                    self._fail_cursor(c)
                if n < 0:
                    self._fail(f"negative value length {n} in column {i}", m, c.pos - 4)
                if rd_bytes(c, n, &p) < 0:
                    self._fail_cursor(c)
            elif kind == COL_TOAST:
                if is_old:
                    self._fail(f"unchanged-TOAST marker 'u' in an old tuple (column "
                               f"{rb.version.column_names[i]!r})", m, at)
            elif kind != COL_NULL:
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
                   f"(type oid {v.columns[i].type_oid}, {'text' if kind == COL_TEXT else 'binary'}) "
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
        if kind == COL_TEXT:
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


    def export(self):
        """(tables: [(RelationVersion, pa.Table)], events: pa.Table | None, messages: list).

        With both outputs, after a feed whose helper thread paid its way, the change-event
        table's schema and table columns (names_build: the one part of its export that is
        C loops over every row) are written on a helper while this thread exports the
        typed tables."""
        cdef RelBuilders rb
        cdef NamesJob nj[2]
        cdef NamesJob *njp[2]
        cdef pgo_helper *h = NULL
        cdef tuple names = None
        global g_helper_jobs, g_export_names
        memset(nj, 0, sizeof(nj))
        self._enter()
        try:
            if (self.helper_kept and self.want_events and self.want_tables
                    and not self.ev_chunks and self.ev_committed >= g_export_beside_rows
                    and self.ev.meta.rows == self.ev_committed):
                keep = (names_prep(&nj[0], [rb.version.schema for rb in self.rb_all],
                                   <const int32_t *>self.ev.rb.data, self.ev_committed),
                        names_prep(&nj[1], [rb.version.relname for rb in self.rb_all],
                                   <const int32_t *>self.ev.rb.data, self.ev_committed))
                # (keep: the encoded names the jobs read, alive until they are wrapped)
                h = helper_take()
                if h != NULL:
                    njp[0] = &nj[0]
                    njp[1] = &nj[1]
                    pgo_helper_start(h, export_names_run, njp)
            try:
                tables = []
                for rb in self.rb_all:
                    if rb.committed:
                        tables.append((rb.version, rb.export(self)))
            finally:
                if h != NULL:
                    with nogil:
                        pgo_helper_wait(h)
                    helper_give(h)
                    g_helper_jobs += 1
                    g_export_names += 1
            if h != NULL:
                names = (names_wrap(&nj[0]), names_wrap(&nj[1]))
            events = export_events(self, names) if self.want_events else None
            msgs = self.out_messages
            self.out_messages = []
        finally:
            names_free(&nj[0])
            names_free(&nj[1])
            self.busy = False
        return tables, events, msgs


    def _event_rows_held(self):
        """{top-level xid or GID: bytes of the event rows its spool holds, or None once
        they were dropped} (tests: the bound of pending_side_check)."""
        cdef Spool sp
        out = {}
        for key, sp in list(self.streams.items()) + list(self.prepared.items()):
            out[key] = ev_nbytes(&sp.ev) if sp.ev_side else None
        return out

    def _typed_rows_held(self):
        """{top-level xid or GID: bytes of the typed rows its spool holds, or None once
        they were dropped} (tests: the bound of pending_side_check)."""
        cdef Spool sp
        out = {}
        for key, sp in list(self.streams.items()) + list(self.prepared.items()):
            out[key] = pending_tb_nbytes(self, sp) if sp.tb_side else None
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
    if pg_us > INT64_MAX - PGO_UNIX_EPOCH_US:     # (C constants: the literal made it Python ints)
        raise DecodeError(f"commit timestamp {pg_us} out of range", offset, mtype)
    return pg_us + PGO_UNIX_EPOCH_US
