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

cdef bint g_windows = True           # off: every transaction the usual way (tests compare)


def _set_txn_windows(bint on):
    """Turn the windows on or off for this process (for tests that compare the two
    paths); returns the previous setting."""
    global g_windows
    cdef bint was = g_windows
    g_windows = on
    return was


cdef Py_ssize_t g_windows_taken = 0     # windows written (tests: the path ran)


def _txn_windows_taken():
    """Windows written in this process so far (for tests)."""
    return g_windows_taken


DEF WIN_MAX_CHANGES = 4096           # changes one window gathers at most
DEF WIN_MAX_TXNS = 4096              # transactions one window holds at most
DEF WIN_MAX_BYTES = 4 << 20          # a window ends after the transaction that passes this
DEF WIN_MAX_GROUPS = 64              # relations one window writes at most


cdef struct WinTxn:
    int64_t commit_lsn
    int64_t commit_ts                # Unix-epoch µs
    int64_t xid
    Py_ssize_t begin                 # index of its Begin in the batch
    Py_ssize_t first                 # index of its first change in the window's lists
    Py_ssize_t nchanges


cdef struct WinRow:                  # a gathered change's per-transaction metadata
    int64_t seq
    int32_t txn


cdef Py_ssize_t window_run(DecoderCore self, const MsgRef *refs, Py_ssize_t i,
                           Py_ssize_t nrefs, Py_ssize_t *skip_until) except -1:
    """Decode the window of whole transactions starting at the Begin refs[i] (see the top
    of this file). Returns the index after its last Commit; or i when there is no window
    worth gathering (then *skip_until is set past what the usual path should take
    first: this Begin, or the whole window when it failed to decode)."""
    cdef Py_ssize_t k = i, q, c0, nch = 0, ntx = 0, nbytes = 0, ngroups = 0
    cdef Py_ssize_t r, g, n, base, idx, a, b, a0
    cdef const MsgRef *m
    cdef const unsigned char *p
    cdef uint8_t t
    cdef uint32_t relid, last_relid = 0
    cdef int32_t last_group = -1
    cdef uint64_t final_lsn
    cdef int64_t ts
    cdef uint32_t gid[WIN_MAX_GROUPS]
    cdef Py_ssize_t count[WIN_MAX_GROUPS + 1]
    cdef Py_ssize_t off[WIN_MAX_GROUPS + 1]
    cdef WinTxn *txns
    cdef WinTxn *tx
    cdef int32_t *grp
    cdef int32_t *chg_at             # each change's index in the batch, minus the Begin's
    cdef WinRow *rows
    cdef WinRow *wr
    cdef MsgRef *grefs
    cdef Meta *mt
    cdef RelBuilders rb
    cdef list groups = []
    cdef bint stop = False, ok = False, events = self.want_events, tables = self.want_tables
    cdef int64_t v
    if (buf_reserve(&self.win_txn, sizeof(WinTxn) * WIN_MAX_TXNS) < 0
            or buf_reserve(&self.win_grp, 8 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_rows, sizeof(WinRow) * 2 * WIN_MAX_CHANGES) < 0
            or buf_reserve(&self.win_refs, sizeof(MsgRef) * WIN_MAX_CHANGES) < 0):
        raise MemoryError()
    txns = <WinTxn *>self.win_txn.data
    grp = <int32_t *>self.win_grp.data
    chg_at = grp + WIN_MAX_CHANGES
    rows = <WinRow *>self.win_rows.data
    grefs = <MsgRef *>self.win_refs.data

    # 1. the window: whole transactions of changes only
    while k < nrefs and ntx < WIN_MAX_TXNS and nbytes < WIN_MAX_BYTES and not stop:
        m = &refs[k]
        if m.n != 21 or m.p[0] != MSG_BEGIN:
            break
        final_lsn = pgo_be64(m.p + 1)
        ts = pgo_be64s(m.p + 9)
        if ts > INT64_MAX - PGO_UNIX_EPOCH_US:
            break                            # (the usual path reports it)
        c0 = nch
        q = k + 1
        while q < nrefs:
            m = &refs[q]
            p = m.p
            if m.n < 5:
                break
            t = p[0]
            if t != MSG_INSERT and t != MSG_UPDATE and t != MSG_DELETE:
                break
            relid = pgo_be32(p + 1)
            if last_group < 0 or relid != last_relid:
                last_group = -1
                for g in range(ngroups):
                    if gid[g] == relid:
                        last_group = <int32_t>g
                        break
                if last_group < 0:
                    rb = self.rb_current.get(relid)
                    if rb is None or ngroups == WIN_MAX_GROUPS:
                        stop = True
                        break
                    gid[ngroups] = relid
                    groups.append(rb)
                    last_group = <int32_t>ngroups
                    ngroups += 1
                last_relid = relid
            if nch == WIN_MAX_CHANGES:
                stop = True
                break
            grp[nch] = last_group
            chg_at[nch] = <int32_t>(q - k)
            rows[nch].seq = nch - c0
            rows[nch].txn = <int32_t>ntx
            nch += 1
            nbytes += m.n
            q += 1
        if (stop or q >= nrefs or refs[q].n != 26 or refs[q].p[0] != MSG_COMMIT
                or refs[q].p[1] != 0 or pgo_be64(refs[q].p + 2) != final_lsn):
            nch = c0                         # (this transaction goes the usual way)
            break
        tx = &txns[ntx]
        tx.commit_lsn = <int64_t>final_lsn
        tx.commit_ts = ts + PGO_UNIX_EPOCH_US
        tx.xid = pgo_be32(refs[k].p + 17)
        tx.begin = k
        tx.first = c0
        tx.nchanges = nch - c0
        ntx += 1
        k = q + 1
    if ntx == 0 or (ntx == 1 and (ngroups <= 1 or not tables)):
        skip_until[0] = i + 1                # (nothing to gather: the usual path)
        return i

    # 2.-4. write; on a decode error undo all of it and let the usual path report it
    self._drop_carry()
    try:
        if events:
            self.want_tables = False
            try:
                for r in range(ntx):
                    tx = &txns[r]
                    window_ctx(&self.ctx, tx)
                    a = tx.begin + 1
                    b = a + tx.nchanges
                    while a < b:
                        rb = groups[grp[tx.first + (a - tx.begin - 1)]]
                        a0 = a
                        self._run_event_blocks(refs, &a, b, rb, 0)
                        if a == a0:
                            # a change the block writer does not take ('u', a value it
                            # does not format itself...): the row-wise writer, which
                            # raises what is wrong with it
                            a = self._dml_rows(refs, a, a + 1, &a0, rb, 0)
            finally:
                self.want_tables = tables
        # the typed rows: each relation's changes gathered (a stable counting sort)
        if tables:
            for g in range(ngroups + 1):
                count[g] = 0
            for r in range(nch):
                count[grp[r]] += 1
            off[0] = 0
            for g in range(ngroups):
                off[g + 1] = off[g] + count[g]
                count[g] = off[g]
            wr = rows + WIN_MAX_CHANGES          # (the gathered rows' metadata)
            for r in range(nch):
                g = grp[r]
                grefs[count[g]] = refs[txns[rows[r].txn].begin + chg_at[r]]
                wr[count[g]] = rows[r]
                count[g] += 1
            self.ctx.snapshot = 0
            self.ctx.origin = -1
            for g in range(ngroups):
                n = off[g + 1] - off[g]
                if n == 0:
                    continue
                rb = groups[g]
                base = rb.meta.rows
                idx = 0
                self.ctx.seq = 0
                self._run_typed_blocks(grefs + off[g], &idx, n, rb, 0)
                if idx < n or rb.meta.rows != base + n:
                    raise DecodeError("window", 0, None)
                # the per-transaction metadata, per row
                mt = &rb.meta
                for r in range(n):
                    tx = &txns[wr[off[g] + r].txn]
                    memcpy(mt.commit_lsn.data + 8 * (base + r), &tx.commit_lsn, 8)
                    memcpy(mt.commit_ts.data + 8 * (base + r), &tx.commit_ts, 8)
                    memcpy(mt.xid.data + 8 * (base + r), &tx.xid, 8)
                    v = wr[off[g] + r].seq
                    memcpy(mt.seq.data + 8 * (base + r), &v, 8)
                    if tx.xid == 0 and mt.op.data[base + r] == b'c':
                        mt.op.data[base + r] = b'r'      # (the initial snapshot's inserts)
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
    self.ctx.snapshot = 0
    self.txn_part_start = tx.begin + 1
    if self.txn_messages:
        self.txn_messages = []
    self._commit_rows()
    global g_windows_taken
    g_windows_taken += 1
    if tx.nchanges:
        self.last_rb = groups[grp[tx.first + tx.nchanges - 1]]
    return k


cdef inline void window_ctx(Ctx *ctx, const WinTxn *tx) noexcept nogil:
    """The context _on_begin sets for transaction tx."""
    ctx.commit_lsn = tx.commit_lsn
    ctx.commit_ts = tx.commit_ts
    ctx.xid = tx.xid
    ctx.snapshot = tx.xid == 0
    ctx.seq = 0
    ctx.origin = -1
