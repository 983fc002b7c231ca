"""Windows of small transactions (src/txn_window.pxi): runs of whole plain transactions
whose typed rows the native core gathers per relation (and writes deletes among inserts
in one column-pass block), and parts of a large open transaction gathered the same way,
must give exactly what the message-at-a-time path gives, and what the pure-Python
reference gives: every typed table (row order, values, metadata: commit LSN, time, xid,
seq, op, origin), the change-event table, the same DecodeError (index, offset, type)
with the same output before it when a message is damaged, whatever the feed
boundaries."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pgoutput_fast import (
    Begin, BeginPrepare, Commit, CommitPrepared, Delete, Insert, Origin, Prepare, Relation,
    RelationColumn, StreamAbort, StreamCommit, StreamStart, StreamStop, Update, Value,
    DecodeError, encode_message,
)
from tests.decoder.test_decoder_parity import (
    IMPLS, StreamBuilder, allowed_cuts, assert_results_equal, damage_one, feed_both, make_decoder,
    run_feed, split,
)
from tests.support.captures import FIXTURE_NAMES, load_fixture

native = pytest.importorskip("pgoutput_fast._native")

# (scripts/tsan.sh runs fewer: its checked build is many times slower)
WINDOW_SETTINGS = settings(max_examples=int(os.environ.get("PGOUTPUT_FAST_WINDOW_EXAMPLES") or 80), deadline=None,
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class SmallTxnBuilder(StreamBuilder):
    """Many plain transactions of a few Insert / Update / Delete each over interleaved
    relations (each defined once, in the transaction that first touches it), some of
    them the initial snapshot's (xid 0: inserts are 'r'), now and then a transaction
    with a Relation repeat, an Origin or a Truncate (which the window does not take)."""

    def change(self, xid=None, top=None):
        relid = self.draw(st.sampled_from(self.relids))
        if relid not in self.rels:
            self.new_relation(relid, xid)
        elif self.draw(st.integers(0, 60)) == 0:
            self.emit(self.rels[relid]._replace(xid=xid), lsn=0)   # an identical repeat
        rel = self.rels[relid]
        op = self.draw(st.sampled_from("IIIIIUUUDD" + ("T" if self.draw(st.integers(0, 40)) == 0 else "")))
        if op == "I":
            self.emit(Insert(relid, self.tuple_for(rel, "N"), xid))
        elif op == "U":
            old_kind = self.draw(st.sampled_from([None, None, None, "K", "O"]))
            old = None if old_kind is None else self.tuple_for(rel, old_kind)
            self.emit(Update(relid, old_kind, old, self.tuple_for(rel, "N"), xid))
        elif op == "D":
            old_kind = self.draw(st.sampled_from(["K", "K", "O"]))
            self.emit(Delete(relid, old_kind, self.tuple_for(rel, old_kind), xid))
        else:
            super().change(xid, top)

    def origin(self):
        if self.draw(st.integers(0, 30)) == 0:
            super().origin()

    def snapshot_txn(self):
        final = self.lsn + 10_000
        self.emit(Begin(final, 0, 0))                      # xid 0: the initial snapshot's
        self.body(max_changes=self.plain_changes)
        self.emit(Commit(0, final, final + 40, 0), lsn=final + 40)
        self.lsn = final + 41

    def build(self, steps):
        for _ in range(steps):
            if self.draw(st.integers(0, 12)) == 0:
                self.snapshot_txn()
            else:
                self.plain()
        return self.msgs, self.lsns


@st.composite
def small_txns(draw, max_txns=40, plain_changes=12, relids=(16384, 16390)):
    builder = SmallTxnBuilder(draw, redefine=False, binary=draw(st.booleans()),
                              plain_changes=plain_changes, relids=relids)
    return builder.build(draw(st.integers(1, max_txns)))


def feed_native(batches, windows, **kwargs):
    """The native decoder's results per feed, with the windows on or off."""
    was = native._set_txn_windows(windows)
    try:
        dec = make_decoder(IMPLS["native"], **kwargs)
        return [run_feed(dec, pa.array(m, pa.binary()), list(l)) for m, l in batches]
    finally:
        native._set_txn_windows(was)


def assert_windows_change_nothing(batches, **kwargs):
    on = feed_native(batches, True, **kwargs)
    off = feed_native(batches, False, **kwargs)
    for k, (a, b) in enumerate(zip(on, off)):
        assert_results_equal(a, b, f"feed {k}, windows on / off")
    feed_both(batches, **kwargs)                     # and the reference, windows on


@WINDOW_SETTINGS
@given(stream=small_txns(), data=st.data())
def test_small_transactions_same_with_and_without_windows(stream, data):
    msgs, lsns = stream
    options = data.draw(st.sampled_from([{}, {"events": False}, {"tables": False}, {"binary_unknown": True}]))
    cuts = allowed_cuts(msgs, data.draw(st.lists(st.integers(1, max(1, len(msgs) - 1)), max_size=3,
                                                  unique=True)) if len(msgs) > 1 else [])
    assert_windows_change_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), **options)


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=25), data=st.data())
def test_small_transactions_damaged_same_error(stream, data):
    """One message damaged inside (or around) a window: the window undoes what it wrote
    and the message-at-a-time path reports the error with the output before it."""
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_windows_change_nothing([(msgs, lsns)], **data.draw(st.sampled_from([{}, {"events": False},
                                                                              {"tables": False}])))


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=30, plain_changes=30, relids=(16384,)), data=st.data())
def test_one_relation_many_transactions(stream, data):
    """One relation over many transactions: gathered into blocks of the column pass,
    inserts, key-less updates and deletes mixed in one block."""
    msgs, lsns = stream
    assert_windows_change_nothing([(msgs, lsns)], **data.draw(st.sampled_from([{}, {"events": False}])))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_real_captures_same_with_and_without_windows(name):
    lsns, msgs = load_fixture(name)
    for options in ({}, {"events": False}, {"tables": False}):
        assert_windows_change_nothing([(list(msgs), list(lsns))], **options)


def test_windows_are_taken_and_gather_across_transactions():
    """The path under test runs: 200 transactions of 3 changes over two relations
    alternating (runs of one change), inserts and deletes; the typed tables come out in
    stream order per relation with each row's own transaction's metadata."""
    rels = [Relation(16384 + k, "public", f"t{k}", "d",
                     (RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1)), None)
            for k in range(2)]
    msgs, lsns, lsn = [], [], 100
    expect = {0: [], 1: []}
    for r in rels:
        msgs.append(encode_message(r))
        lsns.append(0)
    for t in range(200):
        final = lsn + 1000
        msgs.append(encode_message(Begin(final, 1_000_000 + t, 900 + t)))
        lsns.append(lsn)
        for c in range(3):
            k = (t + c) % 2
            lsn += 8
            if c == 2 and t % 4 == 0:
                msgs.append(encode_message(Delete(16384 + k, "K", (Value("t", str(t).encode()), None))))
                expect[k].append((t, "d", c, 900 + t, final))
            else:
                msgs.append(encode_message(Insert(16384 + k, (Value("t", str(t).encode()),
                                                              Value("t", f"v{t}.{c}".encode())))))
                expect[k].append((t, "c", c, 900 + t, final))
            lsns.append(lsn)
        msgs.append(encode_message(Commit(0, final, final + 8, 1_000_000 + t)))
        lsns.append(final + 8)
        lsn = final + 16
    before = native._txn_windows_taken()
    assert_windows_change_nothing([(msgs, lsns)])
    assert native._txn_windows_taken() > before
    dec = make_decoder(IMPLS["native"])
    cs = dec.feed(pa.array(msgs, pa.binary()), lsns)
    for k in range(2):
        tb = cs.tables[f"public.t{k}"]
        got = list(zip(tb.column("id").to_pylist(), tb.column("_op").to_pylist(),
                       tb.column("_seq").to_pylist(), tb.column("_xid").to_pylist(),
                       tb.column("_commit_lsn").to_pylist()))
        assert got == expect[k]



def test_event_rows_of_text_first_tuples_with_formatted_values():
    """The change-event rows' writer for tuples with every column (ev_tuple_full, taken
    when the first value is not binary) formats the binary values among text ones, and
    a value whose text is far longer than its bytes (a numeric of 10^8000 in 10 bytes)
    leaves room for the values after it; non-ASCII text, invalid UTF-8 (a DecodeError)
    and nulls as the reference has them, in windows of small transactions and in one
    large transaction."""
    import struct
    cols = (RelationColumn(1, "id", 20, -1), RelationColumn(0, "a", 25, -1),
            RelationColumn(0, "n", 1700, -1), RelationColumn(0, "b", 25, -1),
            RelationColumn(0, "f", 701, -1), RelationColumn(0, "i", 23, -1))
    rel = Relation(16384, "public", "t", "d", cols, None)

    def numeric(weight, digit):
        return struct.pack(">hhHH", 1, weight, 0, 0) + struct.pack(">H", digit)

    def row(k):
        return (Value("t", str(k).encode()),
                None if k % 7 == 3 else Value("b", ("héllo %d" % k if k % 3 else "x%d" % k).encode()),
                Value("b", numeric(2000 if k % 5 == 0 else k % 4, 1 + k % 9999)),
                Value("t", ("long text %d " % k).encode() * (1 + k % 40)),
                None if k % 11 == 0 else Value("b", struct.pack(">d", k / 7.0)),
                Value("b", struct.pack(">i", -k)))

    def txns(sizes):
        msgs, lsns, lsn, k = [encode_message(rel)], [0], 100, 0
        for t, size in enumerate(sizes):
            final = lsn + 100_000
            msgs.append(encode_message(Begin(final, 1_000 + t, 900 + t)))
            lsns.append(lsn)
            for _ in range(size):
                lsn += 8
                msgs.append(encode_message(Insert(16384, row(k))))
                lsns.append(lsn)
                k += 1
            msgs.append(encode_message(Commit(0, final, final + 8, 1_000 + t)))
            lsns.append(final + 8)
            lsn = final + 16
        return msgs, lsns

    for sizes in ([3, 1, 5, 2] * 30, [600]):
        msgs, lsns = txns(sizes)
        for options in ({}, {"tables": False}):
            assert_windows_change_nothing([(msgs, lsns)], **options)
        cs = make_decoder(IMPLS["native"]).feed(pa.array(msgs, pa.binary()), lsns)
        after = cs.events.column("after").to_pylist()
        assert dict(after[0])["n"] == "1" + "0" * 8000     # (k = 0: 10^8000)
        assert dict(after[1])["a"] == "héllo 1" and dict(after[1])["i"] == "-1"
        # invalid UTF-8 in a text value sent as text, after the first column
        bad = list(msgs)
        bad[3] = encode_message(Insert(16384, row(1)[:3] + (Value("t", b"\xff\xfe"),) + row(1)[4:]))
        with pytest.raises(DecodeError):
            make_decoder(IMPLS["native"], tables=False).feed(pa.array(bad, pa.binary()), lsns)


# -- parts of a large open transaction ------------------------------------------------------

@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=3, plain_changes=300, relids=(16384, 16390, 16400)), data=st.data())
def test_large_transactions_same_with_and_without_parts(stream, data):
    """Transactions of up to 300 changes over three relations interleaved (with now and
    then an Origin, a Relation repeat or a Truncate inside, which ends a part), fed in
    pieces that cut transactions open, with and without a limit that spools them: the
    parts change nothing, and the reference agrees."""
    msgs, lsns = stream
    options = data.draw(st.sampled_from([{}, {"events": False}, {"tables": False}, {"max_pending_bytes": 2000},
                                         {"events": False, "binary_unknown": True}]))
    cuts = allowed_cuts(msgs, data.draw(st.lists(st.integers(1, max(1, len(msgs) - 1)), max_size=3,
                                                  unique=True)) if len(msgs) > 1 else [])
    assert_windows_change_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), **options)


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=2, plain_changes=300, relids=(16384, 16390)), data=st.data())
def test_large_transactions_damaged_same_error(stream, data):
    """One message damaged inside a part: the part is cut back to where it started, and
    the usual path reports the error (index, offset, type) with the output of the last
    commit before it."""
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_windows_change_nothing([(msgs, lsns)], **data.draw(st.sampled_from([{}, {"events": False}])))


def _large_transaction(n_txns=2, per_txn=900, origin_at=None):
    """Transactions of per_txn changes over three relations in turn (runs of one to
    three changes), inserts, key updates with an old key and deletes; the first one the
    initial snapshot's (xid 0). What each table must hold, built from the messages."""
    rels = [Relation(16384 + k, "public", f"t{k}", "d",
                     (RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1)), None)
            for k in range(3)]
    msgs, lsns, lsn = [], [], 100
    expect = {k: [] for k in range(3)}
    for r in rels:
        msgs.append(encode_message(r))
        lsns.append(0)
    for t in range(n_txns):
        final = lsn + 100_000
        xid = 0 if t == 0 else 700 + t
        origin = None
        msgs.append(encode_message(Begin(final, 2_000_000 + t, xid)))
        lsns.append(lsn)
        c = k = 0
        while c < per_txn:
            if origin_at is not None and c == origin_at and origin is None:
                msgs.append(encode_message(Origin(5, "upstream")))
                lsns.append(0)
                origin = "upstream"
            k = (k + 1 + c % 2) % 3
            for _ in range(1 + c % 3):
                if c == per_txn:
                    break
                lsn += 8
                key = (Value("t", str(c).encode()), None)
                if c % 7 == 3:
                    msgs.append(encode_message(Delete(16384 + k, "K", key)))
                    op = "d"
                elif c % 7 == 5:
                    msgs.append(encode_message(Update(16384 + k, "K", key, (Value("t", str(c).encode()),
                                                                          Value("t", f"u{c}".encode())))))
                    op = "u"
                else:
                    msgs.append(encode_message(Insert(16384 + k, (Value("t", str(c).encode()),
                                                                  Value("t", f"v{t}.{c}".encode())))))
                    op = "r" if xid == 0 else "c"
                lsns.append(lsn)
                expect[k].append((c, op, c, xid, final, lsn, origin))
                c += 1
        msgs.append(encode_message(Commit(0, final, final + 8, 2_000_000 + t)))
        lsns.append(final + 8)
        lsn = final + 16
    return msgs, lsns, expect


def _rows_per_relation(msgs, lsns, cuts, options, with_origin):
    """Fed to one native Decoder in the pieces `cuts` makes: each relation t0..t2's rows
    in stream order as (id, op, seq, xid, commit LSN, LSN[, origin]), from its typed table
    or, with tables=False, from its rows of the change-event table."""
    dec = make_decoder(IMPLS["native"], **options)
    got = {k: [] for k in range(3)}
    for m, l in zip(split(msgs, cuts), split(lsns, cuts)):
        cs = dec.feed(pa.array(m, pa.binary()), l)
        if options.get("tables") is False:
            ev = cs.events
            names = ["relid", "after", "before", "op", "seq", "xid", "commit_lsn", "lsn"]
            for row in zip(*(ev.column(c).to_pylist()
                             for c in names + (["origin"] if with_origin else []))):
                relid, after, before, op, *rest = row
                image = dict(after if after is not None else before)
                got[relid - 16384].append((int(image["id"]), op, *rest))
            continue
        names = ["id", "_op", "_seq", "_xid", "_commit_lsn", "_lsn"] + (["_origin"] if with_origin else [])
        for k in range(3):
            tb = cs.tables.get(f"public.t{k}")
            if tb is not None:
                got[k] += list(zip(*(tb.column(c).to_pylist() for c in names)))
    return got


@pytest.mark.parametrize("options", [{}, {"events": False}, {"tables": False}], ids=["both", "typed", "events"])
def test_parts_are_taken_and_keep_each_rows_seq_and_context(options):
    """The path under test runs: 2 transactions of 900 changes over three relations in
    runs of one to three; each typed table (or each relation's rows of the change-event
    table) comes out in stream order with each row's own seq (its place in the
    transaction), op, xid, commit LSN, LSN and origin (an Origin arrives after the first
    100 changes)."""
    msgs, lsns, expect = _large_transaction(origin_at=100)
    before = native._txn_parts_taken()
    assert_windows_change_nothing([(msgs, lsns)], **options)
    assert native._txn_parts_taken() > before
    # fed whole, and cut inside the transactions (a part starts each later feed)
    for cuts in ([], [500, 1400, 2500]):
        got = _rows_per_relation(msgs, lsns, cuts, options, with_origin=True)
        for k in range(3):
            assert got[k] == expect[k], (cuts, k)


# -- parts of streamed, prepared and spooled transactions ------------------------------

class PendingTxnBuilder(SmallTxnBuilder):
    """Streamed transactions (S..E blocks of up to plain_changes changes, the
    subtransaction switching now and then as PostgreSQL sends them, aborts of one, and
    commits or stream prepares), prepared ones (b..P of up to plain_changes changes) and
    small plain ones between, over interleaved relations."""

    def stream_block(self):
        open_xids = sorted(self.streams)
        if open_xids and self.draw(st.integers(0, 3)):
            top = self.draw(st.sampled_from(open_xids))      # (mostly a later segment)
            self.emit(StreamStart(top, 0))
        else:
            top = next(self.xids)
            self.streams[top] = []
            self.emit(StreamStart(top, 1))
            self.origin()
        self.pending_body = True
        xid = top
        n = self.draw(st.one_of(st.integers(0, 5), st.integers(40, self.plain_changes)))
        for _ in range(n):
            if self.draw(st.integers(0, 40)) == 0:
                subs = self.streams[top]
                xid = self.draw(st.sampled_from(subs)) if subs and self.draw(st.booleans()) else next(self.xids)
                if xid not in subs:
                    subs.append(xid)
            self.change(xid, top)
        self.pending_body = False
        self.emit(StreamStop())

    def build(self, steps):
        actions = [self.plain, self.stream_block, self.stream_block, self.stream_block,
                   self.stream_end, self.prepare, self.finish_prepared]
        for _ in range(steps):
            self.draw(st.sampled_from(actions))()
        return self.msgs, self.lsns


@st.composite
def pending_txns(draw, max_steps=10, plain_changes=150, relids=(16384, 16390, 16400)):
    builder = PendingTxnBuilder(draw, redefine=False, binary=draw(st.booleans()),
                                plain_changes=plain_changes, relids=relids)
    return builder.build(draw(st.integers(1, max_steps)))


PENDING_OPTIONS = [{}, {"events": False}, {"tables": False}, {"max_pending_bytes": 3000},
                   {"events": False, "max_pending_bytes": 3000}, {"binary_unknown": True}]


@WINDOW_SETTINGS
@given(stream=pending_txns(), data=st.data())
def test_pending_transactions_same_with_and_without_parts(stream, data):
    """Streamed transactions (with subtransactions, their aborts, stream prepares) and
    prepared ones of up to 150 changes over three relations, fed in pieces: the parts
    (rows kept by the spool, or only checked when it keeps none: max_pending_bytes)
    change nothing, and the reference agrees."""
    msgs, lsns = stream
    options = data.draw(st.sampled_from(PENDING_OPTIONS))
    cuts = allowed_cuts(msgs, data.draw(st.lists(st.integers(1, max(1, len(msgs) - 1)), max_size=3,
                                                  unique=True)) if len(msgs) > 1 else [])
    assert_windows_change_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), **options)


@WINDOW_SETTINGS
@given(stream=pending_txns(max_steps=6), data=st.data())
def test_pending_transactions_damaged_same_error(stream, data):
    """One message damaged inside a streamed or prepared part: nothing of the part is
    kept or spooled, and the usual path reports the error (index, offset, type) with
    the same output before it."""
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_windows_change_nothing([(msgs, lsns)], **data.draw(st.sampled_from(PENDING_OPTIONS[:4])))


def _streamed_transaction(per_segment=400, segments=3):
    """One transaction streamed in `segments` S..E blocks of per_segment changes over
    three relations in runs of one to three (inserts, key updates, deletes); a
    subtransaction starts halfway through the second block and is aborted at its end
    (Stream Abort of the subxid), another starts in the last block and commits; then a
    prepared transaction of the same shape, committed. What each table must hold (id,
    op, seq, xid, commit LSN, LSN), built from the messages."""
    rels = [Relation(16384 + k, "public", f"t{k}", "d",
                     (RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1)), None)
            for k in range(3)]
    msgs, lsns, lsn = [], [], 100
    top, sub_aborted, sub_kept = 900, 901, 902
    expect = {k: [] for k in range(3)}
    msgs += [encode_message(r) for r in rels]
    lsns += [0, 0, 0]
    kept = []                 # (k, id, op, lsn) of the streamed transaction, in order
    c = 0

    def change(xid, k, c, lsn):
        key = (Value("t", str(c).encode()), None)
        if c % 7 == 3:
            return encode_message(Delete(16384 + k, "K", key, xid)), "d"
        if c % 7 == 5:
            return encode_message(Update(16384 + k, "K", key, (Value("t", str(c).encode()),
                                                               Value("t", f"u{c}".encode())), xid)), "u"
        return encode_message(Insert(16384 + k, (Value("t", str(c).encode()),
                                                 Value("t", f"v{c}".encode())), xid)), "c"

    k = 0
    for s in range(segments):
        msgs.append(encode_message(StreamStart(top, 1 if s == 0 else 0)))
        lsns.append(0)
        for n in range(per_segment):
            xid = top
            if s == 1 and n >= per_segment // 2:
                xid = sub_aborted
            elif s == segments - 1 and n >= per_segment // 3:
                xid = sub_kept
            k = (k + 1 + n % 2) % 3 if n % 3 == 0 else k
            lsn += 8
            m, op = change(xid, k, c, lsn)
            msgs.append(m)
            lsns.append(lsn)
            if xid != sub_aborted:
                kept.append((k, c, op, lsn))
            c += 1
        msgs.append(encode_message(StreamStop()))
        lsns.append(0)
        if s == 1:
            msgs.append(encode_message(StreamAbort(top, sub_aborted)))
            lsns.append(0)
    commit = lsn + 1000
    msgs.append(encode_message(StreamCommit(top, 0, commit, commit + 8, 3_000_000)))
    lsns.append(commit + 8)
    for seq, (k, cid, op, l) in enumerate(kept):
        expect[k].append((cid, op, seq, top, commit, l))
    # a prepared transaction of one block of per_segment changes, then committed
    lsn = commit + 100
    prep, gid, xid = lsn + 100_000, "g1", 950
    msgs.append(encode_message(BeginPrepare(prep, prep + 8, 9, xid, gid)))
    lsns.append(0)
    seq = 0
    for n in range(per_segment):
        k = (k + 1 + n % 2) % 3 if n % 3 == 0 else k
        lsn += 8
        m, op = change(None, k, c, lsn)
        msgs.append(m)
        lsns.append(lsn)
        expect[k].append((c, op, seq, xid, prep + 500, lsn))
        seq += 1
        c += 1
    msgs.append(encode_message(Prepare(0, prep, prep + 8, 9, xid, gid)))
    lsns.append(prep + 8)
    msgs.append(encode_message(CommitPrepared(0, prep + 500, prep + 508, 4_000_000, xid, gid)))
    lsns.append(prep + 508)
    return msgs, lsns, expect


@pytest.mark.parametrize("options", [{}, {"events": False}, {"tables": False}, {"max_pending_bytes": 20_000}],
                         ids=["both", "typed", "events", "spooled"])
def test_pending_parts_are_taken_and_keep_each_rows_seq_and_context(options):
    """The path under test runs on a streamed transaction (three segments, a
    subtransaction aborted, one kept) and a prepared one, each over three relations in
    runs of one to three: each typed table (or each relation's event rows) holds exactly
    the changes not aborted, in stream order, each with its seq in the transaction, op,
    the commit's xid and LSN, and its own LSN; fed whole and cut inside the segments.
    "spooled": past max_pending_bytes the rows are only checked on arrival, and the
    commit's replay of the spool is gathered too (replay_part_run)."""
    msgs, lsns, expect = _streamed_transaction()
    before = native._pending_parts_taken()
    replays = native._replay_parts_taken()
    assert_windows_change_nothing([(msgs, lsns)], **options)
    assert native._pending_parts_taken() > before
    if "max_pending_bytes" in options:
        # rows not kept: the commit replays the spool, gathered as well
        assert native._replay_parts_taken() > replays
    for cuts in ([], [150, 700, 1000, 1400]):
        got = _rows_per_relation(msgs, lsns, cuts, options, with_origin=False)
        for k in range(3):
            assert got[k] == expect[k], (cuts, k)
