# Windows of small transactions: the typed tables' rows gathered per relation.
#
# Production streams commit a few to a few hundred changes per transaction, often to
# several tables at once. Changes of one relation then come in runs of a few messages,
# too short for the column pass (CP_MIN_ROWS), and every Begin..Commit costs its own
# bookkeeping. A window is a run of whole plain transactions (Begin, then only Insert /
# Update / Delete, then Commit) that starts where no transaction is open:
#
#   1. one scan of the type bytes and relids finds the window and each transaction's
#      context (commit LSN, time, xid), the relation of each change and its seq;
#   2. the change-event table (when built) is written transaction by transaction in
#      stream order, exactly as the message-at-a-time path writes it;
#   3. the typed tables are written a relation at a time: that relation's changes of
#      every transaction of the window, in stream order, gathered into one MsgRef array
#      that the block writers (_run_typed_blocks: column pass and row-wise scan) take as
#      one run; the metadata columns that differ per transaction (commit_lsn,
#      commit_ts, xid, seq, 'r' for the snapshot's inserts) are then set per row;
#   4. one commit of every builder touched.
#
# The output is the same as the message-at-a-time path's, row for row: each typed table
# gets its relation's changes in stream order, the event table all of them. Anything
# the window does not take ends it before that transaction (a Relation, Origin, Truncate
# or Logical Message inside it, an unknown relation, a malformed Begin or Commit, the
# end of the batch inside a transaction), and that transaction goes the usual way. Should
# anything in the window fail to decode, everything it wrote is rolled back (no
# transaction was open when it started, so the builders' committed marks are where it
# started) and the same messages go through the message-at-a-time path, which reports
# the error exactly as it always has, with the output up to the last good commit.
#
# A part (window_part_run) is the same gathering inside one large open transaction: its
# next changes (up to WIN_MAX_CHANGES; any other message ends them), when they touch
# several relations in short runs. Its rows stay uncommitted with the transaction's
# context (commit LSN, time, xid, origin) and each their own seq. Should it fail, the
# builders and event rows are cut back to where it started and the usual path takes
# the same changes (and raises, which undoes the whole transaction as always).

cdef bint g_windows = True           # off: every transaction the usual way (tests compare)


def _set_txn_windows(bint on):
    """Turn the windows (and parts) on or off for this process (for tests that compare the two
    paths); returns the previous setting."""
    global g_windows
    cdef bint was = g_windows
    g_windows = on
    return was


cdef bint g_scan_ahead = True       # off: each window scanned when it is reached (tests)


def _set_scan_ahead(bint on):
    """Tests: whether a window with the helper scans the next one beside its writing;
    returns the old setting."""
    global g_scan_ahead
    cdef bint was = g_scan_ahead
    g_scan_ahead = on
    return was


cdef Py_ssize_t g_ahead_taken = 0       # windows whose scan was made ahead (tests)


def _scan_ahead_taken():
    """Windows whose scan was made ahead, beside the window before, and taken (tests)."""
    return g_ahead_taken


cdef Py_ssize_t g_windows_taken = 0     # windows written (tests: the path ran)


def _txn_windows_taken():
    """Windows written in this process so far (for tests)."""
    return g_windows_taken


cdef Py_ssize_t g_parts_taken = 0       # parts of open transactions gathered (tests)


cdef Py_ssize_t g_pending_parts_taken = 0   # parts of pending transactions (tests)
cdef Py_ssize_t g_replay_parts_taken = 0    # parts of replayed spools (tests)


def _replay_parts_taken():
    """Parts of a spooled transaction's replay gathered so far (tests: the path ran)."""
    return g_replay_parts_taken


def _pending_parts_taken():
    """Parts of streamed, prepared or spooled transactions gathered so far (tests: the
    path ran)."""
    return g_pending_parts_taken


def _txn_parts_taken():
    """Parts of open transactions gathered per relation in this process so far (for
    tests)."""
    return g_parts_taken


DEF WIN_MAX_CHANGES = 4096           # changes one window gathers at most
DEF WIN_MAX_TXNS = 4096              # transactions one window holds at most
DEF WIN_MAX_BYTES = 4 << 20          # a window ends after the transaction that passes this
DEF WIN_MAX_GROUPS = 64              # relations one window writes at most
DEF WIN_NOGIL_CHANGES = 32           # a window of this many changes writes its events without the GIL
DEF WIN_NO_STOP = 0x7FFFFFFFFFFFFFFF  # window_events' a_stop: none
DEF WIN_EV_ROOM = 256                # window_events: rows' room reserved at a time
DEF WIN_SHARE_MAX = 0.45             # the calling thread's share of a window's events, at most


cdef struct WinTxn:
    int64_t commit_lsn
    int64_t commit_ts                # Unix-epoch µs
    int64_t xid
    Py_ssize_t begin                 # index of its Begin in the batch
    Py_ssize_t first                 # index of its first change in the window's lists
    Py_ssize_t nchanges
    int64_t seq0                     # the seq of its first change (0; a part's: where it is)
    int32_t origin                   # its Origin's index (-1; a part's: the transaction's)


cdef struct WinRow:                  # a gathered change's per-transaction metadata
    int64_t seq
    int32_t txn


cdef struct WinScan:                 # window_scan's state, kept across its stops
    Py_ssize_t k                     # the next transaction's Begin (the window's end so far)
    Py_ssize_t q                     # the open transaction's message being scanned
    Py_ssize_t c0                    # the open transaction's first change in the lists
    Py_ssize_t nch, ntx, nbytes
    Py_ssize_t ngroups
    bint open                        # a transaction's changes are being scanned
    bint stop                        # a limit reached: the window ends before the open one
    bint part                        # the changes of an open transaction (window_part_run):
                                     # they end at the first message that is not one, which
                                     # is not taken (no Begin, no Commit)
    int64_t seq0                     # a part's first seq
    Py_ssize_t nruns                 # runs of one relation met (a part: worth gathering?)
    uint64_t final_lsn               # the open transaction's Begin's
    int64_t ts
    uint32_t last_relid
    int32_t last_group
    uint32_t need                    # WSCAN_NEED: the relation met that is not in gid
    int xo                           # 4: changes carry a streamed transaction's xid after
                                     # the type byte (a part of an S..E block), else 0
    uint32_t gid[WIN_MAX_GROUPS]     # the relations met, in their groups' order


cdef enum:
    WSCAN_DONE = 0                   # the window is found: ws.k its end, ws.ntx > 0 or not
    WSCAN_NEED = 1                   # a relation not met yet (ws.need): the caller adds its
                                     # group (ws.gid[ws.ngroups++]) and calls again, or ends
                                     # the window before the open transaction


cdef struct WinGroup:                # a relation of the window, for window_typed
    BlockDest d
    uint32_t relid
    Py_ssize_t base                  # its rows before the window
    Py_ssize_t done                  # of its gathered run, the rows window_typed wrote


cdef inline void window_scan_init(WinScan *ws, Py_ssize_t k, bint part,
                                  int64_t seq0, int xo=0) noexcept nogil:
    """A scan from refs[k]: a window's (part False: k its first Begin), or a part's of
    the open transaction (part True: its changes from refs[k + 1] on, seq0 their first
    seq; the scan starts inside the transaction, so it meets no Begin and no Commit).
    xo: 4 for a part of a streamed transaction's changes (pending_part_run)."""
    ws.k = k
    ws.q = k + 1
    ws.c0 = 0
    ws.open = part
    ws.stop = False
    ws.part = part
    ws.seq0 = seq0
    ws.nruns = 0
    ws.nch = ws.ntx = ws.nbytes = 0
    ws.ngroups = 0
    ws.last_group = -1
    ws.last_relid = 0
    ws.final_lsn = 0
    ws.ts = 0
    ws.need = 0
    ws.xo = xo


cdef int window_lists(DecoderCore self) except -1:
    """Room for a window's lists (kept by the Decoder from one window to the next)."""
    if (buf_reserve(&self.win_txn, sizeof(WinTxn) * WIN_MAX_TXNS) < 0
            or buf_reserve(&self.win_grp, 8 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_rows, sizeof(WinRow) * 2 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_refs, sizeof(MsgRef) * WIN_MAX_CHANGES) < 0):
        raise MemoryError()
    return 0


cdef int window_lists_ahead(DecoderCore self) noexcept:
    """Room for the next window's lists (window_write scans it beside the helper); -1
    when there is none (then it is not scanned ahead)."""
    if (buf_reserve(&self.win_txn2, sizeof(WinTxn) * WIN_MAX_TXNS) < 0
            or buf_reserve(&self.win_grp2, 8 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_rows2, sizeof(WinRow) * 2 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_pre, sizeof(WinScan)) < 0):
        return -1
    return 0


cdef inline void buf_swap(Buf *a, Buf *b) noexcept nogil:
    cdef Buf t = a[0]
    a[0] = b[0]
    b[0] = t


cdef bint window_ahead_take(DecoderCore self, WinScan *ws, const MsgRef *refs,
                            Py_ssize_t i, list groups, bint part=False,
                            int64_t seq0=0) except -1:
    """The scan of the window at refs[i] (part: of the part of the open transaction from
    refs[i] on, its first seq seq0) that window_write made ahead, if it is of this batch
    and position and its relations' builders are still the current ones: its lists become
    the window's, its state ws and its groups groups'. False: none (ws and groups
    untouched)."""
    cdef int g
    cdef list pre = self.win_pre_groups
    cdef WinScan *pws = <WinScan *>self.win_pre.data
    cdef bint ok = (self.win_pre_i == i and self.win_pre_refs == refs and pre is not None
                    and pws.part == part and (not part or pws.seq0 == seq0))
    self.win_pre_i = -1
    self.win_pre_groups = None
    if not ok:
        return False
    for g in range(len(pre)):
        if self.rb_current.get(pws.gid[g]) is not pre[g]:
            return False
    buf_swap(&self.win_txn, &self.win_txn2)
    buf_swap(&self.win_grp, &self.win_grp2)
    buf_swap(&self.win_rows, &self.win_rows2)
    ws[0] = pws[0]
    groups.extend(pre)
    global g_ahead_taken
    g_ahead_taken += 1
    return True


cdef int window_scan_all(DecoderCore self, WinScan *ws, const MsgRef *refs, Py_ssize_t i,
                         Py_ssize_t nrefs, list groups, int rc=-1) except -1:
    """window_scan from refs[i] until the window is found, each relation it meets added
    to groups (its builders) and ws.gid. A relation with no builders ends it: a window
    before the transaction it is in, a part before that change. rc: what window_scan
    returned last when ws was scanned ahead (-1: scan first)."""
    cdef RelBuilders rb
    while True:
        if rc >= 0:
            pass                             # (scanned ahead: its stop is handled first)
        elif i + 64 <= nrefs:
            with nogil:
                rc = window_scan(ws, refs, nrefs, <WinTxn *>self.win_txn.data,
                                 <int32_t *>self.win_grp.data,
                                 <int32_t *>self.win_grp.data + WIN_MAX_CHANGES,
                                 <WinRow *>self.win_rows.data)
        else:
            rc = window_scan(ws, refs, nrefs, <WinTxn *>self.win_txn.data,
                             <int32_t *>self.win_grp.data,
                             <int32_t *>self.win_grp.data + WIN_MAX_CHANGES,
                             <WinRow *>self.win_rows.data)
        if rc == WSCAN_DONE:
            return 0
        rb = self.rb_current.get(ws.need)
        if rb is None:                       # (the usual path: it reports it)
            if not ws.part:
                ws.nch = ws.c0
            return 0
        groups.append(rb)
        ws.gid[ws.ngroups] = ws.need
        ws.ngroups += 1
        rc = -1


cdef Py_ssize_t window_run(DecoderCore self, const MsgRef *refs, Py_ssize_t i,
                           Py_ssize_t nrefs, Py_ssize_t *skip_until) except -1:
    """Decode the window of whole transactions starting at the Begin refs[i] (see the top
    of this file). Returns the index after its last Commit; or i when there is no window
    worth gathering (then *skip_until is set past what the usual path should take
    first: this Begin, or the whole window when it failed to decode)."""
    cdef Py_ssize_t k, nch, ntx, ngroups
    cdef WinScan ws
    cdef WinTxn *txns
    cdef WinTxn *tx
    cdef int32_t *grp
    cdef list groups = []
    cdef bint ok = False
    window_lists(self)
    txns = <WinTxn *>self.win_txn.data
    grp = <int32_t *>self.win_grp.data

    # 1. the window: whole transactions of changes only (without the GIL; the scan
    # stops at each relation it has not met yet, which the catalog of builders names)
    if window_ahead_take(self, &ws, refs, i, groups):
        # (scanned ahead, beside the helper's work on the window before: txns and grp
        # are its lists now)
        txns = <WinTxn *>self.win_txn.data
        grp = <int32_t *>self.win_grp.data
        window_scan_all(self, &ws, refs, i, nrefs, groups, self.win_pre_rc)
    else:
        window_scan_init(&ws, i, False, 0)
        window_scan_all(self, &ws, refs, i, nrefs, groups)
    k = ws.k
    nch = ws.nch
    ntx = ws.ntx
    ngroups = ws.ngroups
    if ntx == 0 or (ntx == 1 and (ngroups <= 1 or not self.want_tables)):
        skip_until[0] = i + 1                # (nothing to gather: the usual path)
        return i

    # 2.-4. write; on a decode error undo all of it and let the usual path report it
    self._drop_carry()
    try:
        window_write(self, refs, ntx, nch, groups, 0, k, nrefs)
        ok = True
    except DecodeError:
        pass
    finally:
        if not ok:
            self._rollback_open()
            self.ctx.seq = 0
    if not ok:
        skip_until[0] = k                    # (the usual path, which raises where it fails)
        return i
    tx = &txns[ntx - 1]
    window_ctx(&self.ctx, tx)
    self.ctx.seq = tx.nchanges
    self.txn_part_start = tx.begin + 1
    if self.txn_messages:
        self.txn_messages = []
    self._commit_rows()
    global g_windows_taken
    g_windows_taken += 1
    if tx.nchanges:
        self.last_rb = groups[grp[tx.first + tx.nchanges - 1]]
    return k


DEF PART_MIN_CHANGES = 32            # fewer changes ahead: a part is not gathered
DEF PART_MAX_RUN = 64                # runs of one relation this long on average: not either
DEF PART_SKIP_LONG = 1024            # changes that start with a run this long: the usual
                                     # path takes these many before the next part is looked for


cdef Py_ssize_t window_part_run(DecoderCore self, const MsgRef *refs, Py_ssize_t i,
                                Py_ssize_t nrefs, Py_ssize_t *skip_until) except -1:
    """A window over part of the open plain transaction: its changes from refs[i] on (up
    to WIN_MAX_CHANGES, and the first message that is not an Insert, Update or Delete of a
    known relation ends them), each relation's gathered as a window gathers a whole
    transaction's. A large transaction that writes several tables in turn (a batch job,
    a bulk load of parents and children) then reaches the column pass in long runs.
    The rows stay uncommitted, with the transaction's context and their own seq. Returns
    the index after the part; or i when it is not worth gathering (one relation, few
    changes, long runs already) or failed to decode: then *skip_until is past the
    changes the usual path takes first, and the builders and event rows are cut back to
    where the part started (the usual path then raises where it fails, and the error
    undoes the whole transaction as always)."""
    cdef Py_ssize_t nch, g, ngroups, ev0
    cdef WinScan ws
    cdef WinTxn *tx
    cdef int32_t *grp
    cdef list groups = []
    cdef RelBuilders rb
    cdef bint ok = False
    cdef Py_ssize_t mark_rows[WIN_MAX_GROUPS]
    cdef Py_ssize_t mark_before[WIN_MAX_GROUPS]
    window_lists(self)
    if window_ahead_take(self, &ws, refs, i, groups, True, self.ctx.seq):
        window_scan_all(self, &ws, refs, i, nrefs, groups, self.win_pre_rc)
    else:
        # (k = i - 1: where the "Begin" would be; chg_at counts from it)
        window_scan_init(&ws, i - 1, True, self.ctx.seq)
        window_scan_all(self, &ws, refs, i, nrefs, groups)
    tx = <WinTxn *>self.win_txn.data
    grp = <int32_t *>self.win_grp.data
    nch = ws.nch
    ngroups = ws.ngroups
    if nch < PART_MIN_CHANGES or ngroups < 2 or nch >= PART_MAX_RUN * ws.nruns:
        skip_until[0] = i + (PART_SKIP_LONG if ws.nruns == 1 and nch == PART_MAX_RUN
                             else nch if nch > 0 else 1)
        return i
    tx.commit_lsn = self.ctx.commit_lsn
    tx.commit_ts = self.ctx.commit_ts
    tx.xid = self.ctx.xid
    tx.begin = i - 1
    tx.first = 0
    tx.nchanges = nch
    tx.seq0 = self.ctx.seq
    tx.origin = self.ctx.origin
    for g in range(ngroups):
        rb = groups[g]
        mark_rows[g] = rb.meta.rows
        mark_before[g] = rb.nbefore
    ev0 = self.ev.meta.rows
    try:
        window_write(self, refs, 1, nch, groups, 0, i + nch, nrefs, tx.seq0 + nch)
        ok = True
    except DecodeError:
        pass
    finally:
        if not ok:
            for g in range(ngroups):
                rb = groups[g]
                rb.truncate(mark_rows[g], mark_before[g])
            self._ev_truncate(ev0)
        window_ctx(&self.ctx, tx)
    if not ok:
        skip_until[0] = i + nch              # (the usual path, which raises where it fails)
        return i
    self.ctx.seq = tx.seq0 + nch
    global g_parts_taken
    g_parts_taken += 1
    self.last_rb = groups[grp[nch - 1]]
    return i + nch


cdef Py_ssize_t pending_part_run(DecoderCore self, const MsgRef *refs, Py_ssize_t i,
                                 Py_ssize_t nrefs, Py_ssize_t *skip_until) except -1:
    """window_part_run for the changes of a pending transaction (an S..E block, a b..P,
    a plain B..C spooled past max_pending_bytes), which pending_spool_run otherwise
    checks and spools a run of one relation at a time: its changes from refs[i] on (up to
    WIN_MAX_CHANGES; any other message ends them), each relation's gathered, written
    where pending_spool_run writes them (the spool's event rows and typed builders
    where it keeps them, else a dry run undone after), then spooled in stream order
    with each subtransaction's first position and rows noted (Spool.note_xid) as
    append_dml_run notes them. Returns the index after the part; or i when it is not
    worth gathering or failed to decode: then *skip_until is past the changes the
    usual path takes first, and nothing of the part was kept or spooled."""
    cdef int xo = 4 if self.state == ST_STREAM else 0
    cdef Py_ssize_t nch, g, ngroups, ev0 = 0, r
    cdef WinScan ws
    cdef WinTxn *tx
    cdef int32_t *grp
    cdef list groups = []                 # the relation versions met (the checks')
    cdef list dest = []                   # where each one's typed rows are written
    cdef RelBuilders rb, w
    cdef Spool sp = self.cur
    cdef bint side, tb_keep, ok = False
    cdef Ctx saved
    cdef int64_t seq0
    cdef Py_ssize_t base[WIN_MAX_GROUPS]
    cdef Py_ssize_t mark_before[WIN_MAX_GROUPS]
    cdef Py_ssize_t cnt[WIN_MAX_GROUPS]
    cdef int32_t ids[WIN_MAX_GROUPS]
    cdef bint was_dirty[WIN_MAX_GROUPS]
    cdef const MsgRef *m
    cdef uint32_t xid
    cdef dict over
    if sp is None or self.ctx.snapshot:
        skip_until[0] = i + 1                # (the usual path: inserts would be 'r')
        return i
    side = pending_side(self)
    # the rows' seq as pending_spool_run sets it: the spool's event rows, else its
    # changes so far (typed rows kept), else the open transaction's
    if side:
        seq0 = sp.ev.meta.rows
    elif self.want_tables and sp.tb_side and self.state != ST_TXN:
        seq0 = sp.seq_next
    else:
        seq0 = self.ctx.seq
    window_lists(self)
    tx = <WinTxn *>self.win_txn.data
    grp = <int32_t *>self.win_grp.data
    # (k = i - 1: where the "Begin" would be; chg_at counts from it)
    window_scan_init(&ws, i - 1, True, seq0, xo)
    window_scan_all(self, &ws, refs, i, nrefs, groups)
    nch = ws.nch
    ngroups = ws.ngroups
    if nch < PART_MIN_CHANGES or ngroups < 2 or nch >= PART_MAX_RUN * ws.nruns:
        skip_until[0] = i + (PART_SKIP_LONG if ws.nruns == 1 and nch == PART_MAX_RUN
                             else nch if nch > 0 else 1)
        return i
    # the typed rows are kept by the spool for every relation or for none
    # (pending_tb_for: a relation whose Arrow types wait on the values drops them all)
    tb_keep = self.want_tables and sp.tb_side and self.state != ST_TXN
    if tb_keep:
        for g in range(ngroups):
            rb = groups[g]
            if not rb.fixed_types:
                pending_tb_drop(self, sp)
                tb_keep = False
                break
    for g in range(ngroups):
        rb = groups[g]
        ids[g] = rb.id
        w = pending_tb_for(self, sp, rb) if tb_keep else None
        if w is None:
            w = rb                           # (a dry run: checked, then undone)
        dest.append(w)
        base[g] = w.meta.rows
        mark_before[g] = w.nbefore
        was_dirty[g] = w.dirty
    tx.commit_lsn = self.ctx.commit_lsn      # (kept rows take the commit's at the commit)
    tx.commit_ts = self.ctx.commit_ts
    tx.xid = self.ctx.xid if self.ctx.xid != 0 else 1   # (not 0: window_ctx reads it
    tx.begin = i - 1                                    # as the snapshot's)
    tx.first = 0
    tx.nchanges = nch
    tx.seq0 = seq0
    tx.origin = self.ctx.origin
    saved = self.ctx
    if side:
        pending_ev_swap(self, sp)            # (the event rows go to the spool's)
    ev0 = self.ev.meta.rows
    try:
        window_write(self, refs, 1, nch, dest, xo)
        ok = True
    except DecodeError:
        pass
    finally:
        for g in range(ngroups):
            w = dest[g]
            if w is groups[g]:
                w.rollback()                 # (a dry run; the builders hold no open rows)
                if not was_dirty[g] and w in self.dirty:
                    self.dirty.remove(w)
            elif not ok:
                w.truncate(base[g], mark_before[g])
        if not ok or not side:
            ev_truncate(&self.ev, ev0)
        if side:
            pending_ev_swap(self, sp)
        self.ctx = saved
    if not ok:
        skip_until[0] = i + nch              # (the usual path, which raises where it fails)
        return i
    # the records, in stream order; a subtransaction's first change notes where it
    # starts: its record, its event row, each kept builder's rows before it
    for g in range(ngroups):
        cnt[g] = 0
    for r in range(nch):
        m = &refs[i + r]
        g = grp[r]
        if xo:
            xid = pgo_be32(m.p + 1)
            if not sp.noted_any or xid != sp.last_noted:
                over = None
                if tb_keep and xid not in sp.first_pos:
                    over = {ids[k]: base[k] + cnt[k] for k in range(ngroups)}
                sp.note_xid(xid, seq0 + r if side else r, -1, -1, sp.seq_next + r, over)
        sp.put(REC_DML, False, ids[g], m, xo)
        if sp.mem.len > self.max_pending_bytes:
            sp.spill(self.spill_dir)
        cnt[g] += 1
    sp.seq_next += nch
    if self.state == ST_TXN:
        self.ctx.seq += nch                  # (open_changes of pending())
    if side or sp.tb_side:
        pending_side_check(self, sp)
    self.last_rb = groups[grp[nch - 1]]
    global g_pending_parts_taken
    g_pending_parts_taken += 1
    return i + nch


cdef bint replay_part_run(DecoderCore self, const MsgRef *refs, const int32_t *ids,
                          Py_ssize_t n) except -1:
    """window_part_run for a replay (pending_replay_run): n consecutive spooled changes
    (refs, each a plain I/U/D; ids: their relation versions), written with the commit's
    context in ctx, each relation version's typed rows gathered. False, and nothing
    written, when they are not worth gathering or do not decode (the caller writes
    them a run at a time, and raises where that fails)."""
    cdef WinTxn *tx
    cdef int32_t *grp
    cdef int32_t *chg_at
    cdef WinRow *rows
    cdef int32_t gid[WIN_MAX_GROUPS]
    cdef Py_ssize_t mark_rows[WIN_MAX_GROUPS]
    cdef Py_ssize_t mark_before[WIN_MAX_GROUPS]
    cdef Py_ssize_t r, g, ngroups = 0, nruns = 0, ev0
    cdef int32_t last = -1
    cdef int64_t seq0 = self.ctx.seq
    cdef list groups = []
    cdef RelBuilders rb
    cdef bint ok = False
    if (not g_windows or n < PART_MIN_CHANGES or n > WIN_MAX_CHANGES
            or self.ctx.snapshot != (self.ctx.xid == 0)):
        return False
    window_lists(self)
    tx = <WinTxn *>self.win_txn.data
    grp = <int32_t *>self.win_grp.data
    chg_at = grp + WIN_MAX_CHANGES
    rows = <WinRow *>self.win_rows.data
    for r in range(n):
        if r == 0 or ids[r] != ids[r - 1]:
            nruns += 1
            last = -1
            for g in range(ngroups):
                if gid[g] == ids[r]:
                    last = <int32_t>g
                    break
            if last < 0:
                if ngroups == WIN_MAX_GROUPS:
                    return False
                gid[ngroups] = ids[r]
                groups.append(self.rb_all[ids[r]])
                last = <int32_t>ngroups
                ngroups += 1
        grp[r] = last
        chg_at[r] = <int32_t>(r + 1)         # (from tx.begin = -1: refs[r])
        rows[r].seq = seq0 + r
        rows[r].txn = 0
    if ngroups < 2 or n >= PART_MAX_RUN * nruns:
        return False
    tx.commit_lsn = self.ctx.commit_lsn
    tx.commit_ts = self.ctx.commit_ts
    tx.xid = self.ctx.xid
    tx.begin = -1
    tx.first = 0
    tx.nchanges = n
    tx.seq0 = seq0
    tx.origin = self.ctx.origin
    for g in range(ngroups):
        rb = groups[g]
        mark_rows[g] = rb.meta.rows
        mark_before[g] = rb.nbefore
    ev0 = self.ev.meta.rows
    try:
        window_write(self, refs, 1, n, groups)
        ok = True
    except DecodeError:
        pass
    finally:
        if not ok:
            for g in range(ngroups):
                rb = groups[g]
                rb.truncate(mark_rows[g], mark_before[g])
            self._ev_truncate(ev0)
        window_ctx(&self.ctx, tx)
        self.ctx.seq = seq0
    if not ok:
        return False
    self.ctx.seq = seq0 + n
    global g_replay_parts_taken
    g_replay_parts_taken += 1
    return True


cdef struct EvJob:                   # window_events' arguments, for the helper thread
    EvStore *e
    const EvRel *evr
    Ctx ctx
    const MsgRef *refs
    const WinTxn *txns
    Py_ssize_t ntx
    const int32_t *grp
    Py_ssize_t r
    Py_ssize_t a
    Py_ssize_t a_stop
    int xo
    int rc
    int64_t ns                       # the time it took
    int64_t start                    # when it started (pgo_now_ns)
    WinScan *pre                     # then the next window's scan, into the lists ahead
                                     # (NULL: none; the calling thread may make it)
    Py_ssize_t nrefs                 # its messages, and the lists ahead it writes
    WinTxn *pre_txns
    int32_t *pre_grp
    WinRow *pre_rows
    int pre_rc                       # what window_scan returned
    int64_t pre_ns                   # the time it took


cdef void ev_job_run(void *arg) noexcept nogil:
    cdef EvJob *j = <EvJob *>arg
    cdef EvJob own = j[0]
    cdef int64_t t0 = pgo_now_ns()
    own.start = t0
    own.rc = window_events(own.e, own.evr, &own.ctx, own.refs, own.txns, own.ntx, own.grp,
                           &own.r, &own.a, own.xo, own.a_stop)
    own.ns = pgo_now_ns() - t0
    if own.pre != NULL:
        own.pre_rc = ev_job_scan_ahead(&own, own.pre)
        own.pre_ns = pgo_now_ns() - t0 - own.ns
    j[0] = own


cdef inline int ev_job_scan_ahead(const EvJob *j, WinScan *pws) noexcept nogil:
    """The next window's scan into the job's lists ahead (on the helper after its
    events, or on the calling thread after its share): what window_scan returns."""
    return window_scan(pws, j.refs, j.nrefs, j.pre_txns, j.pre_grp,
                       j.pre_grp + WIN_MAX_CHANGES, j.pre_rows)


cdef inline double helper_share_rates(double share, int64_t typed_ns, int64_t late_ns,
                                      int64_t helper_ns, Py_ssize_t helper_n,
                                      int64_t own_ns, Py_ssize_t own_n) noexcept nogil:
    """The share of a window's changes whose events the calling thread writes next
    (window_write): where the two threads end together, from this window's times and
    each thread's time per change (the helper writes the window's first changes into
    the table's growing buffers, the calling thread its last ones into ev_own, warm in
    its cache: on some machines one takes half again as long a change as the other).
    With T the typed rows (and the scan ahead) and D the helper's late start, h and m the
    two times per change: D + (1 - f) h = T + f m, f = (D + h - T) / (h + m) (h and m
    per window), at most WIN_SHARE_MAX; halfway from the last share to it."""
    cdef double n = <double>(helper_n + own_n)
    cdef double h, m, f
    if helper_n <= 0 or helper_ns <= 0 or n <= 0:
        return share
    h = <double>helper_ns / <double>helper_n * n
    m = <double>own_ns / <double>own_n * n if own_n > 0 and own_ns > 0 else h
    if late_ns < 0:
        late_ns = 0
    f = (<double>late_ns + h - <double>typed_ns) / (h + m)
    if f < 0:
        f = 0
    elif f > WIN_SHARE_MAX:
        f = WIN_SHARE_MAX
    return 0.5 * share + 0.5 * f


cdef int window_write(DecoderCore self, const MsgRef *refs, Py_ssize_t ntx, Py_ssize_t nch,
                      list groups, int xo=0, Py_ssize_t ahead=-1, Py_ssize_t nrefs=0,
                      int64_t ahead_seq=-1) except -1:
    """Steps 2.-4. of a window (or part) that window_scan_all found: its ntx transactions
    and nch changes in the lists, written into groups (each group's builders: the
    decoder's, or a spool's) and self.ev. Raises DecodeError where anything does not
    decode (the caller undoes what was written). xo: 4 for a streamed part's changes.
    ahead: where the next window would start (refs[ahead], of nrefs; -1 for none): with
    the helper, its scan is made beside this window's writing, by whichever thread
    should end first (window_ahead_take). ahead_seq >= 0: the next is a part of the open
    transaction (its changes from refs[ahead] on, their first seq ahead_seq)."""
    cdef Py_ssize_t ngroups = len(groups)
    cdef Py_ssize_t r, g, n, idx, a, a0
    cdef Py_ssize_t off[WIN_MAX_GROUPS + 1]
    cdef WinTxn *txns = <WinTxn *>self.win_txn.data
    cdef WinTxn *tx
    cdef int32_t *grp = <int32_t *>self.win_grp.data
    cdef int32_t *chg_at = grp + WIN_MAX_CHANGES
    cdef WinRow *rows = <WinRow *>self.win_rows.data
    cdef WinRow *wr
    cdef MsgRef *grefs = <MsgRef *>self.win_refs.data
    cdef RelBuilders rb
    cdef bint events = self.want_events, tables = self.want_tables
    cdef EvRel evr[WIN_MAX_GROUPS]
    cdef EvRel evr_own[WIN_MAX_GROUPS]   # (this thread's share beside the helper: its own memos)
    cdef WinGroup wg[WIN_MAX_GROUPS]
    cdef int rc, trc = 0, orc = 0
    cdef EvJob job
    cdef EvJob ajob                     # (its copy for the scan ahead on this thread)
    cdef Ctx tctx, octx
    cdef Py_ssize_t q, r2, a2, r2s = 0, a2s = 0
    cdef Ctx octx0
    cdef double share
    cdef int64_t t0, t1, t2, t3
    cdef bint ahead_here = False         # this thread scans the next window
    cdef WinScan *pws = NULL
    cdef int prc = -1
    cdef bint beside = (events and tables and self.helper != NULL
                        and nch >= g_helper_min_changes)
    cdef bint ran = beside               # the events' writer already ran from (r, a)
    r = 0
    a = txns[0].begin + 1
    for g in range(ngroups):
        rb = groups[g]
        self._touch(rb)
        if events:
            ev_rel(&evr[g], rb)
            evr_own[g] = evr[g]
            evr_own[g].fmemo = rb.fmemo_own
        if tables:
            block_dest(&wg[g].d, rb)
            wg[g].relid = rb.relid
            wg[g].base = rb.meta.rows
    if beside:
        # the events' block writer on the helper thread and the typed one here, at
        # once, each with its own copy of the context: the events' moves from
        # transaction to transaction, the typed rows' is the one they are written
        # with below (only its seq changes). When the typed rows take less time than
        # the events (binary mode: each value's text is formatted), this thread then
        # writes the events of the window's last changes (ev_share of them, from the
        # last window's times) into ev_own, appended after the helper's. What either
        # leaves goes on below, on this thread, as it would after the writer had run here
        share = g_helper_share if g_helper_share >= 0 else self.ev_share
        q = nch - <Py_ssize_t>(share * nch)  # the first change of this thread's share
        if q < 1:
            q = 1
        job.e = &self.ev
        job.evr = evr
        job.ctx = self.ctx
        job.refs = refs
        job.txns = txns
        job.ntx = ntx
        job.grp = grp
        job.r = r
        job.a = a
        job.a_stop = WIN_NO_STOP
        job.xo = xo
        if q < nch:
            r2 = rows[q].txn
            a2 = txns[r2].begin + chg_at[q]
            job.a_stop = a2
            window_ctx(&octx, &txns[r2])     # (the share may start inside a transaction)
            octx.seq = rows[q].seq
            r2s = r2                         # (where the share starts: the writer goes on
            a2s = a2                         # from there if the share does not fit)
            octx0 = octx
            ev_truncate(&self.ev_own, 0)
        job.pre = NULL
        job.pre_ns = 0
        if (ahead >= 0 and ahead < nrefs and g_scan_ahead and ngroups <= WIN_MAX_GROUPS // 2
                and ((ahead_seq < 0 and refs[ahead].n == 21 and refs[ahead].p[0] == MSG_BEGIN)
                     or (ahead_seq >= 0 and refs[ahead].n >= 5
                         and (refs[ahead].p[0] == MSG_INSERT or refs[ahead].p[0] == MSG_UPDATE
                              or refs[ahead].p[0] == MSG_DELETE)))
                and window_lists_ahead(self) == 0):
            # the next window's scan (its relations this window's, in this order, so far),
            # into the lists ahead: on the helper after its events when this thread has
            # no share of them (its typed rows take longer), else here after the share.
            # (Not after a window of more than half the relations a window holds: seeded
            # with them all, the next would end at the first relation past the limit)
            pws = <WinScan *>self.win_pre.data
            if ahead_seq >= 0:
                window_scan_init(pws, ahead - 1, True, ahead_seq)   # (as window_part_run)
            else:
                window_scan_init(pws, ahead, False, 0)
            for g in range(ngroups):
                pws.gid[g] = (<RelBuilders>groups[g]).relid
            pws.ngroups = ngroups
            job.nrefs = nrefs
            job.pre_txns = <WinTxn *>self.win_txn2.data
            job.pre_grp = <int32_t *>self.win_grp2.data
            job.pre_rows = <WinRow *>self.win_rows2.data
            if q < nch:
                ahead_here = True
            else:
                job.pre = pws
        if ahead_here:
            ajob = job                       # (the helper owns job until the wait)
        tctx = self.ctx
        tctx.snapshot = 0
        tctx.origin = txns[0].origin
        with nogil:
            pgo_helper_start(self.helper, ev_job_run, &job)
            t0 = pgo_now_ns()
            trc = window_typed(wg, ngroups, refs, txns, grp, chg_at, rows, nch, grefs, off,
                               &self.cp_scratch, &self.scratch, &tctx, xo)
            t1 = pgo_now_ns()
            if q < nch and trc >= 0:
                orc = window_events(&self.ev_own, evr_own, &octx, refs, txns, ntx, grp, &r2, &a2, xo)
            t2 = pgo_now_ns()
            if ahead_here:
                prc = ev_job_scan_ahead(&ajob, pws)
            t3 = pgo_now_ns()
            pgo_helper_wait(self.helper)
        if job.pre != NULL:
            prc = job.pre_rc
        if prc >= 0:
            self.win_pre_i = ahead
            self.win_pre_refs = refs
            self.win_pre_rc = prc
            self.win_pre_groups = list(groups)
        global g_helper_jobs
        g_helper_jobs += 1
        self._helper_verdict(pgo_now_ns() - t0, (t3 - t0) + job.ns + job.pre_ns)
        if job.rc < 0 or trc < 0 or orc < 0:
            raise MemoryError()
        rc = 1                               # (this thread's share: not appended)
        if q < nch and job.a == job.a_stop:
            # the helper wrote its share whole: this thread's follows it, and the writer
            # goes on from where this thread's stopped. Past the int32 offsets (-2) it
            # is dropped, and the writer goes on over it from its start, as when the
            # helper stops early: the row-wise path then reports the change that does
            # not fit
            rc = ev_append(&self.ev, &self.ev_own, NULL) if self.ev_own.meta.rows else 0
            if rc == 0 and g_helper_append_fault:
                ev_truncate(&self.ev, self.ev.meta.rows - self.ev_own.meta.rows)
                rc = -2                      # (tests: as if past the offsets)
            if rc == -1:
                raise MemoryError()
        if rc == 0:
            global g_own_shares
            g_own_shares += 1
            self.ctx = octx
            r = r2
            a = a2
            self.ev_share = helper_share_rates(self.ev_share, (t1 - t0) + (t3 - t2),
                                               job.start - t0, job.ns, q, t2 - t1, nch - q)
        elif rc == -2:
            # (the helper wrote up to this thread's share, which did not fit: the writer
            # goes on from the share's start, with its context)
            self.ctx = octx0
            r = r2s
            a = a2s
            self.ev_share *= 0.5
        else:
            # (the helper stopped inside its share, at a change it does not take: the
            # writer goes on from there, over this thread's share too)
            self.ctx = job.ctx
            r = job.r
            a = job.a
            if q == nch:
                # (the helper's scan ahead, after its events, as a later start)
                self.ev_share = helper_share_rates(self.ev_share, t1 - t0,
                                                   job.start - t0 + job.pre_ns, job.ns, nch, 0, 0)
            else:
                self.ev_share *= 0.5         # (this thread's share was written for nothing)
        if q < nch:
            ev_truncate(&self.ev_own, 0)
    if events:
        self.want_tables = False
        try:
            while r < ntx:
                # the block writer over the window's transactions from (r, a), without
                # the GIL; it stops at a change it does not take ('u', a value it does
                # not format itself...), which the row-wise writer takes (and raises
                # what is wrong with it)
                if ran:
                    ran = False              # (on the helper, above)
                elif nch >= WIN_NOGIL_CHANGES:
                    with nogil:
                        rc = window_events(&self.ev, evr, &self.ctx, refs, txns, ntx, grp, &r, &a, xo)
                    if rc < 0:
                        raise MemoryError()
                else:
                    rc = window_events(&self.ev, evr, &self.ctx, refs, txns, ntx, grp, &r, &a, xo)
                    if rc < 0:
                        raise MemoryError()
                if r < ntx:
                    tx = &txns[r]
                    rb = groups[grp[tx.first + (a - tx.begin - 1)]]
                    a = self._dml_rows(refs, a, a + 1, &a0, rb, xo)
                    if a == tx.begin + 1 + tx.nchanges:
                        r += 1
                        if r < ntx:
                            window_ctx(&self.ctx, &txns[r])
                            a = txns[r].begin + 1
        finally:
            self.want_tables = tables
    # the typed rows: each relation's changes gathered, through the block writers
    # (without the GIL); a group the column pass does not finish (a short block, a
    # value it leaves to the full parser, no room checked yet) goes on here
    if tables:
        self.ctx.snapshot = 0
        self.ctx.origin = txns[0].origin     # (a window's: -1; a part's: its transaction's)
        if beside:
            rc = trc                         # (written above, beside the events)
            self.ctx.seq = tctx.seq
        elif nch >= WIN_NOGIL_CHANGES:
            with nogil:
                rc = window_typed(wg, ngroups, refs, txns, grp, chg_at, rows, nch, grefs, off,
                                  &self.cp_scratch, &self.scratch, &self.ctx, xo)
        else:
            rc = window_typed(wg, ngroups, refs, txns, grp, chg_at, rows, nch, grefs, off,
                              &self.cp_scratch, &self.scratch, &self.ctx, xo)
        if rc < 0:
            raise MemoryError()
        if rc == 0:
            wr = rows + WIN_MAX_CHANGES          # (the gathered rows' metadata)
            for g in range(ngroups):
                n = off[g + 1] - off[g]
                rb = groups[g]
                idx = wg[g].done
                if idx < n:
                    self.ctx.seq = 0
                    self._run_typed_blocks(grefs + off[g], &idx, n, rb, xo)
                if idx < n or rb.meta.rows != wg[g].base + n:
                    raise DecodeError("window", 0, None)
                # the per-transaction metadata, per row
                window_meta(&rb.meta, wg[g].base, txns, wr + off[g], n)
    return 0


cdef int window_scan(WinScan *ws, const MsgRef *refs, Py_ssize_t nrefs, WinTxn *txns,
                     int32_t *grp, int32_t *chg_at, WinRow *rows) noexcept nogil:
    """Step 1 of window_run: from ws.k on, whole transactions of changes only, within the
    limits; each transaction's context into txns, each change's group, index and seq into
    grp, chg_at and rows. Goes on from where it stopped (WSCAN_NEED). (The state is
    kept in locals while it runs: the stores into the lists could alias *ws.)"""
    cdef const MsgRef *m
    cdef const unsigned char *p
    cdef uint8_t t
    cdef uint32_t relid
    cdef Py_ssize_t g
    cdef WinTxn *tx
    cdef Py_ssize_t k = ws.k, q = ws.q, c0 = ws.c0, nch = ws.nch, ntx = ws.ntx
    cdef Py_ssize_t nbytes = ws.nbytes, ngroups = ws.ngroups
    cdef bint is_open = ws.open, stop = ws.stop, part = ws.part
    cdef int64_t seq0 = ws.seq0
    cdef int xo = ws.xo
    cdef Py_ssize_t nruns = ws.nruns
    cdef uint64_t final_lsn = ws.final_lsn
    cdef int64_t ts = ws.ts
    cdef uint32_t last_relid = ws.last_relid
    cdef int32_t last_group = ws.last_group
    cdef int rc = -1
    while rc < 0:
        if not is_open:
            if k >= nrefs or ntx >= WIN_MAX_TXNS or nbytes >= WIN_MAX_BYTES or stop:
                rc = WSCAN_DONE
                break
            m = &refs[k]
            if m.n != 21 or m.p[0] != MSG_BEGIN:
                rc = WSCAN_DONE
                break
            final_lsn = pgo_be64(m.p + 1)
            ts = pgo_be64s(m.p + 9)
            if ts > INT64_MAX - PGO_UNIX_EPOCH_US:
                rc = WSCAN_DONE                  # (the usual path reports it)
                break
            c0 = nch
            q = k + 1
            is_open = True
        while q < nrefs:
            m = &refs[q]
            p = m.p
            if m.n < 5 + xo:
                break
            t = p[0]
            if t != MSG_INSERT and t != MSG_UPDATE and t != MSG_DELETE:
                break
            relid = pgo_be32(p + 1 + xo)
            if last_group < 0 or relid != last_relid:
                last_group = -1
                for g in range(ngroups):
                    if ws.gid[g] == relid:
                        last_group = <int32_t>g
                        break
                if last_group < 0:
                    if ngroups == WIN_MAX_GROUPS:
                        stop = True
                        break
                    ws.need = relid
                    rc = WSCAN_NEED
                    break
                last_relid = relid
                nruns += 1
            if nch == WIN_MAX_CHANGES:
                stop = True
                break
            if part and nch == PART_MAX_RUN and nruns == 1:
                break                            # (a part: one relation so far, not worth it)
            grp[nch] = last_group
            chg_at[nch] = <int32_t>(q - k)
            rows[nch].seq = seq0 + (nch - c0)
            rows[nch].txn = <int32_t>ntx
            nch += 1
            nbytes += m.n
            q += 1
        if rc >= 0:
            break                                # (WSCAN_NEED: the transaction stays open)
        if part:
            rc = WSCAN_DONE                      # (a part: its changes, nothing after)
            break
        is_open = False
        if (stop or q >= nrefs or refs[q].n != 26 or refs[q].p[0] != MSG_COMMIT
                or refs[q].p[1] != 0 or pgo_be64(refs[q].p + 2) != final_lsn):
            nch = c0                             # (this transaction goes the usual way)
            rc = WSCAN_DONE
            break
        tx = &txns[ntx]
        tx.commit_lsn = <int64_t>final_lsn
        tx.commit_ts = ts + PGO_UNIX_EPOCH_US
        tx.xid = pgo_be32(refs[k].p + 17)
        tx.begin = k
        tx.first = c0
        tx.nchanges = nch - c0
        tx.seq0 = 0
        tx.origin = -1
        ntx += 1
        k = q + 1
    ws.k = k
    ws.q = q
    ws.c0 = c0
    ws.nch = nch
    ws.ntx = ntx
    ws.nbytes = nbytes
    ws.open = is_open
    ws.stop = stop
    ws.final_lsn = final_lsn
    ws.ts = ts
    ws.last_relid = last_relid
    ws.last_group = last_group
    ws.nruns = nruns
    return rc


cdef int window_events(EvStore *e, const EvRel *evr, Ctx *ctx, const MsgRef *refs,
                       const WinTxn *txns, Py_ssize_t ntx, const int32_t *grp,
                       Py_ssize_t *r_io, Py_ssize_t *a_io, int xo,
                       Py_ssize_t a_stop=WIN_NO_STOP) noexcept nogil:
    """The change-event rows of the window's transactions (or of a part: one
    transaction) from transaction *r_io's change refs[*a_io] on, in stream order: each
    transaction's changes, of any relations and shapes, through ev_mixed, with that
    transaction's context in ctx (set at each transaction's first change: a start inside
    one takes ctx as the caller set it). xo: 4 for a streamed part's changes. Stops at a
    change the writer does not take: *r_io and *a_io are then that change's (the caller
    writes it row-wise, then calls again from the next); *r_io == ntx when all are
    written; *a_io == a_stop when it stopped there (the change refs[a_stop], in the
    window, is not written: the helper's share of the window ends there). 0, or -1 when
    memory ran out."""
    cdef Py_ssize_t r = r_io[0], a = a_io[0], b, k, end, room = 0
    cdef const WinTxn *tx
    while r < ntx and a < a_stop:
        tx = &txns[r]
        if a == tx.begin + 1:
            window_ctx(ctx, tx)
        end = tx.begin + 1 + tx.nchanges
        b = end if end <= a_stop else a_stop
        if a < b:
            # the room of the rows' metadata (ev_mixed's), reserved for WIN_EV_ROOM rows
            # at a time: a reserve of a dozen columns per transaction was most of a
            # one-change transaction's cost outside its tuples
            if b - a > room:
                room = b - a if b - a > WIN_EV_ROOM else WIN_EV_ROOM
                if ev_reserve_rows(e, room) < 0:
                    return -1
            if xo == 0:                  # (the constant for plain changes: see window_typed)
                k = ev_mixed(e, evr, grp + tx.first + (a - tx.begin - 1), ctx, refs, a, b, 0)
            else:
                k = ev_mixed(e, evr, grp + tx.first + (a - tx.begin - 1), ctx, refs, a, b, xo)
            if k < 0:
                return -1
            room -= k - a
            if k < b:
                r_io[0] = r
                a_io[0] = k
                return 0
            a = b
        if a == end:
            r += 1
            if r < ntx:
                a = txns[r].begin + 1
    r_io[0] = r
    a_io[0] = a
    return 0


cdef int window_typed(WinGroup *wg, Py_ssize_t ngroups, const MsgRef *refs,
                      const WinTxn *txns, const int32_t *grp, const int32_t *chg_at,
                      const WinRow *rows, Py_ssize_t nch, MsgRef *grefs, Py_ssize_t *off,
                      Buf *cp_scratch, Buf *scratch, Ctx *ctx, int xo) noexcept nogil:
    """The typed rows of a window: each relation's changes gathered (a stable counting
    sort into grefs, off[g] the start of group g's run, their metadata after rows +
    WIN_MAX_CHANGES), then each group's run through the block writers as far as they
    take it with no check left to make (blocks of CP_MIN_ROWS or more, room reserved,
    old images only where _before's columns exist); wg[g].done: the rows written. 1 when
    every group is written whole (and its per-transaction metadata set), 0 when one is
    not (the caller goes on from wg[g].done and sets the metadata), -1 out of memory."""
    cdef Py_ssize_t count[WIN_MAX_GROUPS + 1]
    cdef Py_ssize_t r, g, n, i, j, k, nbytes
    cdef const MsgRef *gr
    cdef WinRow *wr = <WinRow *>rows + WIN_MAX_CHANGES
    cdef const BlockDest *d
    cdef int olds, rc
    cdef bint whole = True, with_old
    for g in range(ngroups + 1):
        count[g] = 0
    for r in range(nch):
        count[grp[r]] += 1
    off[0] = 0
    for g in range(ngroups):
        off[g + 1] = off[g] + count[g]
        count[g] = off[g]
    for r in range(nch):
        g = grp[r]
        grefs[count[g]] = refs[txns[rows[r].txn].begin + chg_at[r]]
        wr[count[g]] = rows[r]
        count[g] += 1
    for g in range(ngroups):
        d = &wg[g].d
        n = off[g + 1] - off[g]
        gr = grefs + off[g]
        i = 0
        ctx.seq = 0
        while i < n and d.ncols > 0:
            if xo == 0:                          # (as in window_events)
                j = block_end(gr, i, n, wg[g].relid, d.ncols, 0, &olds, &nbytes, True)
            else:
                j = block_end(gr, i, n, wg[g].relid, d.ncols, xo, &olds, &nbytes, True)
            if j - i < CP_MIN_ROWS:
                break
            with_old = olds != BLOCK_NEW
            if with_old and d.before == NULL:
                break
            rc = reserve_block(d.ncols, d.cols, j - i, nbytes)
            if rc < 0 or meta_reserve(d.meta, j - i) < 0:
                return -1
            if rc != 0:
                break
            if with_old:
                rc = reserve_block(d.ncols, d.before, j - i, nbytes)
                if (rc < 0 or buf_reserve(d.before_rows, 4 * (j - i)) < 0
                        or buf_reserve(d.before_kind, j - i) < 0):
                    return -1
                if rc != 0:
                    break
            if olds == BLOCK_MIXED:
                if xo == 0:
                    k = cp_mixed_block(d, cp_scratch, scratch, ctx, gr, i, j, n, 0)
                else:
                    k = cp_mixed_block(d, cp_scratch, scratch, ctx, gr, i, j, n, xo)
            else:
                if xo == 0:
                    k = cp_block(d, cp_scratch, ctx, gr, i, j, n, olds, 0)
                else:
                    k = cp_block(d, cp_scratch, ctx, gr, i, j, n, olds, xo)
            if k < 0:
                return -1
            i = k
            if k < j:
                break
        wg[g].done = i
        if i < n:
            whole = False
    if not whole:
        return 0
    for g in range(ngroups):
        window_meta(wg[g].d.meta, wg[g].base, txns, wr + off[g], off[g + 1] - off[g])
    return 1


cdef void window_meta(Meta *mt, Py_ssize_t base, const WinTxn *txns, const WinRow *wr,
                      Py_ssize_t n) noexcept nogil:
    """Set the metadata that differs per transaction on the n rows from row base of a
    relation's gathered run: commit LSN, time, xid and seq, and 'r' for the inserts of
    the initial snapshot's transactions (xid 0)."""
    cdef Py_ssize_t r
    cdef const WinTxn *tx
    cdef int64_t v
    for r in range(n):
        tx = &txns[wr[r].txn]
        memcpy(mt.commit_lsn.data + 8 * (base + r), &tx.commit_lsn, 8)
        memcpy(mt.commit_ts.data + 8 * (base + r), &tx.commit_ts, 8)
        memcpy(mt.xid.data + 8 * (base + r), &tx.xid, 8)
        v = wr[r].seq
        memcpy(mt.seq.data + 8 * (base + r), &v, 8)
        if tx.xid == 0 and mt.op.data[base + r] == b'c':
            mt.op.data[base + r] = b'r'      # (the initial snapshot's inserts)


cdef inline void window_ctx(Ctx *ctx, const WinTxn *tx) noexcept nogil:
    """The context _on_begin sets for transaction tx (a part's: where it starts)."""
    ctx.commit_lsn = tx.commit_lsn
    ctx.commit_ts = tx.commit_ts
    ctx.xid = tx.xid
    ctx.snapshot = tx.xid == 0
    ctx.seq = tx.seq0
    ctx.origin = tx.origin
