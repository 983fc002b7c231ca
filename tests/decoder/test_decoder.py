"""Transaction semantics of the columnar Decoder (docs/protocol.md §3, docs/design.md).

Runs against whichever implementation PGOUTPUT_FAST_IMPL selects, through the public
``pgoutput_fast.Decoder`` / ``decode_changes``. Streams are built from message objects
with ``encode_message``: no server needed. Every produced table is checked with
``validate(full=True)``.
"""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import pgoutput_fast
from pgoutput_fast import (
    UNCHANGED_TOAST,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    DecodeError,
    Decoder,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    Prepare,
    Relation,
    RelationCatalog,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Update,
    Value,
    decode_changes,
    encode_message,
)

NATIVE = pgoutput_fast.IMPL == "native"
UNIX_2000 = 946_684_800_000_000  # PostgreSQL epoch in Unix µs


def crash_safe(test):
    """Under the native implementation run the test in a child pytest process, so that
    a crash of the extension fails this test instead of the whole run."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        if not NATIVE or os.environ.get("PGOUTPUT_FAST_TEST_CHILD"):
            return test(*args, **kwargs)
        child = subprocess.run(
            [sys.executable, "-m", "pytest", f"{__file__}::{test.__name__}", "-q", "--runxfail",
             "-p", "no:cacheprovider", "--import-mode=importlib"],
            env={**os.environ, "PGOUTPUT_FAST_TEST_CHILD": "1"}, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            capture_output=True, text=True, timeout=300)
        assert child.returncode == 0, (f"child process failed (exit {child.returncode}):\n"
                                       f"{child.stdout[-3000:]}\n{child.stderr[-3000:]}")
    return run


def native_bug(reason):
    """Known bug of the native core (the reference behaves as specified)."""
    return pytest.mark.xfail(NATIVE, reason=f"native bug: {reason}", strict=True)


# -- building streams -----------------------------------------------------------------

ORDERS = 16384
ITEMS = 16390


def t(text):
    return Value("t", str(text).encode())


def rel_orders(xid=None, extra=False):
    cols = [RelationColumn(1, "id", 23, -1), RelationColumn(0, "note", 25, -1),
            RelationColumn(0, "qty", 20, -1)]
    if extra:
        cols.append(RelationColumn(0, "flag", 16, -1))
    return Relation(ORDERS, "public", "orders", "d", tuple(cols), xid)


def rel_items(xid=None):
    cols = (RelationColumn(1, "sku", 25, -1), RelationColumn(0, "n", 23, -1))
    return Relation(ITEMS, "shop", "items", "f", cols, xid)


def ins(i, note="x", qty=1, xid=None, relid=ORDERS):
    return Insert(relid, (t(i), None if note is None else t(note), t(qty)), xid)


def enc(*msgs):
    return [encode_message(m) for m in msgs]


def txn(xid, final_lsn, *body, ts=1000, origin=None):
    head = [Begin(final_lsn, ts, xid)] + ([Origin(0, origin)] if origin else [])
    return head + list(body) + [Commit(0, final_lsn, final_lsn + 8, ts)]


def prepared(gid, xid, lsn, *body, origin=None):
    head = [BeginPrepare(lsn, lsn + 8, 50, xid, gid)] + ([Origin(0, origin)] if origin else [])
    return head + list(body) + [Prepare(0, lsn, lsn + 8, 50, xid, gid)]


def check(cs):
    """Every table of a ChangeSet is valid Arrow data (full validation)."""
    if cs.events is not None:
        cs.events.validate(full=True)
        assert cs.events.schema.equals(pgoutput_fast._impl.EVENT_SCHEMA)
    for _, table in cs.table_versions:
        table.validate(full=True)
    return cs


def feed(dec, *msgs, lsn=None):
    return check(dec.feed(enc(*msgs), lsn=lsn))


def decode(*msgs, **kwargs):
    return check(decode_changes(enc(*msgs), **kwargs))


def col(cs, name, column):
    return cs.tables[name].column(column).to_pylist()


def ids(cs, name="public.orders"):
    return col(cs, name, "id") if name in cs.tables else []


# -- ordinary transactions ---------------------------------------------------------------

@pytest.mark.skipif(pgoutput_fast.IMPL != "native",
                    reason="the native core's block cache (the reference twin has none)")
@pytest.mark.parametrize("one_decoder", [False, True], ids=["new-decoders", "one-decoder"])
def test_output_buffers_grow_through_the_block_cache(one_decoder):
    """Batches whose buffers grow past the sizes the block cache keeps (64 KiB and up;
    page mappings from 256 KiB, grown by mremap or copied into a released block),
    decoded one after the other with the output of each dropped before the next, in
    sizes that go up and down: every value is still the one that was encoded, in both
    outputs. One Decoder fed every batch starts each buffer at the size of the batch
    before (a cached block of that size, or the one it was handed over in), then grows
    it when this batch is bigger."""
    import random

    rnd = random.Random(7)
    dec = Decoder()
    for n in (40_000, 9_000, 70_000, 25_000, 70_000, 71_000):
        if not one_decoder:
            dec = Decoder()
        notes = ["".join(rnd.choice("abcdefghij") for _ in range(rnd.choice((0, 3, 17, 90, 400))))
                 for _ in range(n)]
        qty = [rnd.randrange(-10**12, 10**12) for _ in range(n)]
        raw = enc(rel_orders(), *txn(700, 9000, *[ins(i, notes[i], qty[i]) for i in range(n)]))
        cs = check(dec.feed(raw))
        assert col(cs, "public.orders", "id") == list(range(n))
        assert col(cs, "public.orders", "note") == notes
        assert col(cs, "public.orders", "qty") == qty
        after = cs.events.column("after").to_pylist()
        assert [dict(m) for m in after] == [{"id": str(i), "note": notes[i], "qty": str(qty[i])}
                                            for i in range(n)]
        del cs, after



def _empty_block_cache():
    """Empty the process's block cache (what earlier tests left there is gone), keeping
    its limit."""
    from pgoutput_fast import _native

    limit = _native.buffer_cache_info()["limit"]
    _native.set_buffer_cache_limit(0)
    _native.set_buffer_cache_limit(limit)


def _insert_batch(rnd, n, width, alphabet):
    """One transaction of n inserts into orders, notes of `width` characters of alphabet."""
    notes = ["".join(rnd.choice(alphabet) for _ in range(width)) for _ in range(n)]
    return enc(rel_orders(), *txn(700, 9000, *[ins(i, notes[i], i) for i in range(n)]))


@pytest.mark.skipif(not NATIVE, reason="the native block cache")
def test_change_event_buffers_come_from_the_cache_after_a_workload_switch():
    """The change-event table of one workload, then of another whose outputs are of other
    sizes (new Decoders, each batch's output dropped before the next): from the new
    workload's second batch on, no buffer of 64 KiB or more is given fresh memory. Every
    block comes back to the cache (the outputs handed to Arrow, the Decoder's and the
    MessageBatch's own buffers when they die) and is found again: the exports' buffers
    and the message refs are reserved at their exact size, so that they do not take a
    block another buffer needs, and a buffer whose size hint is stale (the first
    workload's values were bigger) takes the smaller block it was handed over in."""
    import random

    from pgoutput_fast import _native

    rnd = random.Random(11)

    def batch(n, width):
        return _insert_batch(rnd, n, width, "abcdefghij")

    def fresh():
        return _native.buffer_cache_info()["fresh_bytes"]

    first, second = batch(20_000, 300), batch(150_000, 4)
    _empty_block_cache()
    for _ in range(3):
        Decoder(tables=False).feed(first)
    before = fresh()
    Decoder(tables=False).feed(second)
    assert fresh() > before                 # (the switch: other sizes, some fresh memory)
    for _ in range(3):
        before = fresh()
        cs = Decoder(tables=False).feed(second)
        assert cs.events.num_rows == 150_000
        del cs
        assert fresh() - before == 0


@pytest.mark.skipif(not NATIVE, reason="the native block cache")
@pytest.mark.parametrize("width", [36, 120])
def test_change_event_buffers_come_from_the_cache_after_a_switch_to_longer_values(width):
    """Short values, then longer ones (new Decoders, each batch's output dropped before
    the next): from the new workload's second batch on, no buffer of 64 KiB or more is
    given fresh memory. The kept sizes are scaled by the bytes of the feed, which grow
    with the values but not the per-row metadata columns: a next Decoder's sizes must
    come from the last batch's hand-over, not stay at the first guess (that left the
    metadata buffers asking for more than they held, taking the blocks the values were
    handed over in, and the values buffer grew into fresh pages on every batch)."""
    import random

    from pgoutput_fast import _native

    rnd = random.Random(5)

    def batch(n, w):
        return _insert_batch(rnd, n, w, "0123456789abcdef")

    def fresh():
        return _native.buffer_cache_info()["fresh_bytes"]

    short, long = batch(100_000, 5), batch(100_000, width)
    _empty_block_cache()
    for _ in range(3):
        Decoder(tables=False).feed(short)
    before = fresh()
    Decoder(tables=False).feed(long)
    assert fresh() > before                 # (the switch: longer values, some fresh memory)
    grown = []
    for _ in range(4):
        before = fresh()
        cs = Decoder(tables=False).feed(long)
        assert cs.events.num_rows == 100_000
        del cs
        grown.append(fresh() - before)
    assert grown == [0, 0, 0, 0], (grown, _native._buffer_cache_blocks())


def _small_txn_stream(ntx, seed):
    """(messages, changes): two relations (orders and a copy of it), then ntx
    transactions of 1 to 59 inserts, seven in ten to orders, notes of 0 to 39 bytes."""
    import random

    rnd = random.Random(seed)
    first = rel_orders()
    msgs = [first, Relation(16385, "public", "orders2", "d", first.columns)]
    for x in range(ntx):
        body = [ins(x * 100 + k, "n" * rnd.randrange(0, 40), k, relid=ORDERS if rnd.random() < 0.7 else 16385)
                for k in range(rnd.randrange(1, 60))]
        msgs += txn(1000 + x, 0x10000 + x * 1000, *body)
    return pa.array(enc(*msgs), pa.binary()), len(msgs) - 2 - 2 * ntx


@pytest.mark.skipif(not NATIVE, reason="the native block cache")
@pytest.mark.parametrize("events", [False, True], ids=["typed", "both"])
def test_small_transactions_steady_state_takes_few_fresh_blocks(events):
    """A stream of small transactions (1 to 60 changes of two tables), each batch decoded
    by a new Decoder and its output dropped before the next, as a replay of segments
    does: from the fourth batch on, at most two buffers of 64 KiB or more per batch get
    memory not from the cache (0 to 2: a new Decoder's buffer growing past 1 MiB may
    find the block it would take taken by a smaller one). With every block trimmed when
    handed to Arrow, 5 to 10 did, each a run of page faults on fresh pages."""
    from pgoutput_fast import _native

    raw, changes = _small_txn_stream(4000, 5)
    _empty_block_cache()
    fresh = []
    for _ in range(8):
        before = _native.buffer_cache_info()["fresh_blocks"]
        cs = Decoder(events=events).feed(raw)
        assert cs.num_changes == changes
        del cs
        fresh.append(_native.buffer_cache_info()["fresh_blocks"] - before)
    assert max(fresh[3:]) <= 2, fresh


@pytest.mark.skipif(not NATIVE, reason="the native block cache")
def test_a_cache_filled_by_a_bigger_workload_makes_room_for_the_next():
    """A bound of 64 MiB filled by the outputs of one big batch (50,000 small
    transactions, both outputs), then batches of 4,000 of the same shape, each by a new
    Decoder, its output dropped before the next: the blocks released longest ago are
    freed to make room for the new ones, so from the fourth batch on at most two buffers
    per batch get fresh memory (0 to 1 measured). Refusing blocks once full kept the
    big batch's blocks for good: 18 to 23 fresh blocks every batch."""
    from pgoutput_fast import _native

    old_limit = _native.buffer_cache_info()["limit"]
    try:
        _native.set_buffer_cache_limit(64 << 20)
        big, big_changes = _small_txn_stream(50000, 5)
        cs = Decoder().feed(big)
        assert cs.num_changes == big_changes
        del cs, big
        info = _native.buffer_cache_info()
        assert info["bytes"] <= 64 << 20, info
        evicted = info["evicted_blocks"]
        raw, changes = _small_txn_stream(4000, 5)
        fresh = []
        for _ in range(8):
            before = _native.buffer_cache_info()["fresh_blocks"]
            cs = Decoder().feed(raw)
            assert cs.num_changes == changes
            del cs
            fresh.append(_native.buffer_cache_info()["fresh_blocks"] - before)
        info = _native.buffer_cache_info()
        assert max(fresh[3:]) <= 2, fresh
        assert info["bytes"] <= 64 << 20, info
        assert info["evicted_blocks"] > evicted, info
    finally:
        _native.set_buffer_cache_limit(old_limit)


@pytest.mark.skipif(not NATIVE, reason="the native block cache")
@pytest.mark.parametrize("events", [False, True], ids=["typed", "both"])
def test_steady_state_writes_into_resident_pages(events):
    """Each batch decoded by a new Decoder, its output dropped before the next: the
    cache counts each block at the bytes of it that may be resident, so its total grows
    by what buffers wrote past an earlier user's pages (fresh pages, faulted in and
    zeroed by the kernel). Blocks of one size are told apart by those bytes (a buffer
    takes the least resident block that covers what it will write, else the most
    resident): after the third batch the total grows by at most 4 %. Taking any block
    of the size, bigger writers landed in less resident blocks batch after batch (the
    total grew 7 % and 10 % after the third batch; page faults on every batch)."""
    from pgoutput_fast import _native

    raw, changes = _small_txn_stream(8000, 5)
    _empty_block_cache()
    held = []
    for _ in range(10):
        cs = Decoder(events=events).feed(raw)
        assert cs.num_changes == changes
        del cs
        held.append(_native.buffer_cache_info()["bytes"])
    assert held[-1] - held[2] <= held[-1] // 25, held


@pytest.mark.skipif(not NATIVE, reason="the native builders' size hints")
@pytest.mark.parametrize("kw", [dict(events=False), dict(tables=False)], ids=["typed", "events"])
def test_a_batch_without_old_images_keeps_their_sizes(kw):
    """Batches of updates with old images (REPLICA IDENTITY FULL) and batches of inserts
    alone, each decoded by a new Decoder: a batch that wrote no old image says nothing of
    the next one's, so the old images' buffers of the next batch of updates still start
    at the sizes the last one handed over, and grow through no copies. (Keeping the
    empty batch's sizes made them grow from nothing again after every batch of
    inserts.)"""
    from pgoutput_fast import _native

    n = 40_000
    updates = enc(rel_orders(), *txn(1, 0x1000, *[
        Update(ORDERS, "O", (t(i), t("old note %d" % i), t(i)), (t(i), t("new note %d" % i), t(i + 1)))
        for i in range(n)]))
    inserts = enc(rel_orders(), *txn(2, 0x2000, *[ins(i, "note %d" % i, i) for i in range(2 * n)]))

    def grown(raw):
        before = _native.buffer_cache_info()["grown_bytes"]
        cs = Decoder(**kw).feed(raw)
        del cs
        return _native.buffer_cache_info()["grown_bytes"] - before

    for _ in range(3):
        grown(updates)
    steady = grown(updates)             # (the sizes as kept: small buffers, under 64 KiB, grow)
    assert steady < 64 << 10, steady
    after_inserts = []
    for _ in range(3):
        grown(inserts)
        after_inserts.append(grown(updates))
    assert after_inserts == [steady] * 3, (steady, after_inserts)
    if kw.get("events", True) is False:
        # each kept size goes with the feed that wrote it: the old images' with the
        # updates' (a batch of inserts left them as they were), the rest with the last
        fixed, ncols = 9, 3                  # (rel_hint_bufs' order: the old images last)
        old_images = _native._kept_sizes(ORDERS, 3)[fixed + 3 * ncols:]
        grown(inserts)
        kept = _native._kept_sizes(ORDERS, 3)
        assert kept[fixed + 3 * ncols:] == old_images, kept
        feeds_updates = {f for s_, f in old_images if s_}
        feeds_inserts = {f for s_, f in kept[:7] if s_}
        assert len(feeds_updates) == 1 and len(feeds_inserts) == 1, kept
        assert feeds_updates != feeds_inserts, kept


@pytest.mark.skipif(not NATIVE, reason="the native builders' size hints")
def test_a_new_decoder_starts_typed_buffers_at_the_last_hand_over_sizes():
    """Each batch decoded by a new Decoder (a Spark task, a piece of decode_parallel):
    the typed tables' buffers start at the sizes the same relations' buffers were handed
    over with in this process, so they do not grow through copies into ever larger
    blocks (with the hints off, the same batches copy about a tenth of what they hand
    over, each time). The output is the same either way."""
    from pgoutput_fast import _native

    raw, _ = _small_txn_stream(3000, 9)

    def copied(hints):
        was = _native._set_size_hints(hints)
        try:
            out, tables = [], None
            for _ in range(5):
                before = _native.buffer_cache_info()["grown_bytes"]
                cs = Decoder(events=False).feed(raw)
                out.append(_native.buffer_cache_info()["grown_bytes"] - before)
                tables = {k: v for k, v in cs.tables.items()}
                del cs
            return out, tables
        finally:
            _native._set_size_hints(was)

    off, t_off = copied(False)
    on, t_on = copied(True)
    assert t_on.keys() == t_off.keys() and all(t_on[k].equals(t_off[k]) for k in t_on)
    held = sum(b.size for t in t_on.values() for c in t.columns for ch in c.chunks
               for b in ch.buffers() if b is not None)
    assert min(off[2:]) > held // 40, (off, held)           # (the test can fail: copies without hints)
    assert max(on[2:]) * 20 < min(off[2:]), (on, off)


@pytest.mark.skipif(not NATIVE, reason="the native builders' size hints")
@pytest.mark.parametrize("kw", [dict(events=False), dict(tables=False)], ids=["typed", "events"])
def test_size_hints_scale_with_the_bytes_of_the_feed(kw):
    """The kept sizes go with the bytes of the feed that wrote them: a new Decoder fed
    four times as much starts its buffers at four times the sizes (no growth through
    copies), where the sizes as kept would have it grow as a Decoder without hints
    does. The same for a Decoder that starts from a catalog (as the pieces of
    decode_parallel do): its builders, made before any feed, take their sizes at the
    first one; and the same for the change-event table's buffers."""
    from pgoutput_fast import _native

    (small, _), (large, _) = _small_txn_stream(1000, 3), _small_txn_stream(4000, 4)
    assert len(small.buffers()[2]) >= 1 << 20                 # (what scaling up asks of the kept feed)
    _empty_block_cache()
    first = Decoder(**kw)
    first.feed(small)
    catalog = first.catalog                                   # (both relations: a piece of decode_parallel)

    def grown(hints, with_catalog):
        was = _native._set_size_hints(hints)
        try:
            out = []
            for _ in range(3):
                cs = Decoder(**kw).feed(small)
                del cs
                before = _native.buffer_cache_info()["grown_bytes"]
                d = Decoder(catalog, **kw) if with_catalog else Decoder(**kw)
                cs = d.feed(large)
                out.append(_native.buffer_cache_info()["grown_bytes"] - before)
                del cs, d
            return out
        finally:
            _native._set_size_hints(was)

    for with_catalog in (False, True):
        off = grown(False, with_catalog)
        on = grown(True, with_catalog)
        assert min(off[1:]) > 0, off
        assert max(on[1:]) * 5 < min(off[1:]), (with_catalog, on, off)


def test_begin_commit_rows_and_metadata():
    msgs = [rel_orders()] + txn(
        700, 0x5000, ins(1, "a", 10),
        Update(ORDERS, None, None, (t(1), t("b"), t(11))),
        Delete(ORDERS, "K", (t(1), None, None)),
        ts=123)
    lsns = [0] + [0x4000 + i for i in range(len(msgs) - 1)]
    lsns[1] = 0   # unknown LSN -> null
    cs = check(decode_changes(enc(*msgs), lsn=lsns))
    tab = cs.tables["public.orders"]
    assert tab.column_names == ["_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin",
                                "id", "note", "qty", "_before", "_before_kind", "_unchanged_toast",
                                "_special"]
    assert tab.schema.field("id").type == pa.int32()
    assert tab.schema.field("qty").type == pa.int64()
    assert tab.schema.field("note").type == pa.string()
    assert col(cs, "public.orders", "_op") == ["c", "u", "d"]
    assert col(cs, "public.orders", "_lsn") == [0x4001, 0x4002, 0x4003]
    assert set(col(cs, "public.orders", "_commit_lsn")) == {0x5000}
    assert col(cs, "public.orders", "_xid") == [700] * 3
    assert col(cs, "public.orders", "_seq") == [0, 1, 2]
    assert tab.column("_commit_ts").cast(pa.int64()).to_pylist() == [UNIX_2000 + 123] * 3
    assert ids(cs) == [1, 1, 1]
    assert col(cs, "public.orders", "note") == ["a", "b", None]
    md = tab.schema.metadata
    assert md[b"pgoutput_fast.relid"] == str(ORDERS).encode()
    assert md[b"pgoutput_fast.key_columns"] == b"id"
    assert md[b"pgoutput_fast.replident"] == b"d"
    ev = cs.events.to_pylist()
    assert [e["op"] for e in ev] == ["c", "u", "d"]
    assert ev[0]["after"] == [("id", "1"), ("note", "a"), ("qty", "10")]
    assert ev[0]["before"] is None and ev[2]["after"] is None
    assert ev[0]["lsn"] == 0x4001 and ev[0]["schema"] == "public" and ev[0]["table"] == "orders"
    assert [e["seq"] for e in ev] == [0, 1, 2]


def test_zero_lsn_is_null_and_transactions_keep_order():
    msgs = [rel_orders()] + txn(1, 100, ins(1)) + txn(2, 200, ins(2), ins(3))
    cs = decode(*msgs)
    assert ids(cs) == [1, 2, 3]
    assert col(cs, "public.orders", "_lsn") == [None] * 3
    assert col(cs, "public.orders", "_xid") == [1, 2, 2]
    assert col(cs, "public.orders", "_seq") == [0, 0, 1]


def test_empty_transaction_and_zero_column_table():
    empty = Relation(16500, "public", "nocols", "n", ())
    cs = decode(empty, *txn(5, 10), *txn(6, 20, Insert(16500, ())))
    tab = cs.tables["public.nocols"]
    assert tab.num_rows == 1 and tab.column("_before").type == pa.struct([])


STREAM_SPLIT = (
    [rel_orders()]
    + txn(10, 1000, ins(1, "a"), rel_items(), Insert(ITEMS, (t("s1"), t(5))),
          Update(ORDERS, "O", (t(1), t("a"), t(1)), (t(1), t("b"), t(2))),
          LogicalMessage(1, 1001, "audit", b"in-txn"), Truncate(1, (ITEMS,)),
          Delete(ORDERS, "K", (t(1), None, None)), origin="up")
    + txn(11, 2000, ins(2, "z"))
)


def _combined(changesets):
    """One feed's worth of output from several: events, rows per version, messages."""
    evs = [c.events for c in changesets if c.events is not None and c.events.num_rows]
    per_version = {}
    for c in changesets:
        for v, tab in c.table_versions:
            per_version.setdefault((v.relid, v.version), []).append(tab)
    tables = {k: pa.concat_tables(ts) for k, ts in per_version.items()}
    return (pa.concat_tables(evs) if evs else None, tables, [m for c in changesets for m in c.messages])


def _assert_same_output(parts, whole):
    ev, tables, msgs = _combined(parts)
    wev, wtables, wmsgs = _combined([whole])
    assert ev.equals(wev)
    assert tables.keys() == wtables.keys()
    for k in tables:
        assert tables[k].equals(wtables[k]) and tables[k].schema == wtables[k].schema
    assert msgs == wmsgs


def test_split_at_every_point_same_as_one_feed():
    raw = enc(*STREAM_SPLIT)
    lsns = list(range(1, len(raw) + 1))
    whole = check(Decoder().feed(raw, lsn=lsns))
    assert whole.num_changes == 6 and len(whole.messages) == 1
    for k in range(len(raw) + 1):
        dec = Decoder()
        a = check(dec.feed(raw[:k], lsn=lsns[:k]))
        b = check(dec.feed(raw[k:], lsn=lsns[k:]))
        _assert_same_output([a, b], whole)
        assert dec.pending()["open_transaction"] is None


MIXED_SPLIT = (
    [rel_orders()]
    + [StreamStart(50, 1), Origin(0, "o"), ins(1, xid=50), StreamStop()]
    + txn(60, 500, ins(2))
    + [StreamStart(50, 0), ins(3, xid=51), LogicalMessage(1, 7, "s", b"", 50), StreamStop(),
       StreamAbort(50, 51)]
    + prepared("g", 70, 600, ins(4), Truncate(0, (ORDERS,)))
    + [LogicalMessage(0, 8, "nt", b"")]
    + [StreamStart(50, 0), ins(5, xid=50), StreamStop(), StreamCommit(50, 0, 700, 708, 3)]
    + [CommitPrepared(0, 800, 808, 4, 70, "g")]
)


def test_split_streams_and_prepared_at_every_point():
    raw = enc(*MIXED_SPLIT)
    whole = check(Decoder().feed(raw))
    assert ids(whole) == [2, 1, 5, 4, None]
    for k in range(len(raw) + 1):
        dec = Decoder()
        _assert_same_output([check(dec.feed(raw[:k])), check(dec.feed(raw[k:]))], whole)


def test_split_at_every_pair_of_points():
    raw = enc(*STREAM_SPLIT)
    whole = Decoder().feed(raw)
    for i in range(1, len(raw)):
        for j in range(i, len(raw)):
            dec = Decoder()
            parts = [dec.feed(raw[:i]), dec.feed(raw[i:j]), dec.feed(raw[j:])]
            _assert_same_output(parts, whole)


@pytest.mark.parametrize("defined_before", [True, False], ids=["defined-before-begin", "defined-inside"])
def test_split_inside_transaction_that_redefines_a_relation(defined_before):
    head = [rel_orders()] if defined_before else []
    body = [] if defined_before else [rel_orders()]
    msgs = head + [Begin(10, 1, 5), *body, ins(1), rel_items(), rel_orders(extra=True),
                   Insert(ORDERS, (t(2), t("x"), t(1), t("t"))), Commit(0, 10, 18, 1)]
    raw = enc(*msgs)
    whole = check(Decoder().feed(raw))
    assert [v.version for v, _ in whole.table_versions] == [0, 1]
    begin = len(head)
    for k in range(begin + 1, len(raw)):
        dec = Decoder()
        parts = [check(dec.feed(raw[:k])), check(dec.feed(raw[k:]))]
        _assert_same_output(parts, whole)
        assert [v.version for v, _ in parts[1].table_versions] == [0, 1]
        assert sum(1 for _ in dec.catalog.versions()) == 3     # orders v0, v1; items v0


def test_open_transaction_is_held_until_commit():
    dec = Decoder()
    msgs = [rel_orders(), Begin(100, 1, 9), ins(1), ins(2)]
    cs = feed(dec, *msgs)
    assert cs.num_changes == 0 and cs.table_versions == [] and cs.messages == []
    assert dec.pending()["open_transaction"] == 9 and dec.pending()["open_changes"] == 2
    cs = feed(dec, ins(3))
    assert cs.num_changes == 0 and dec.pending()["open_changes"] == 3
    cs = feed(dec, Commit(0, 100, 108, 1))
    assert ids(cs) == [1, 2, 3]
    assert col(cs, "public.orders", "_seq") == [0, 1, 2]
    assert dec.pending()["open_transaction"] is None and dec.pending()["open_changes"] == 0


def test_open_transaction_rows_survive_export_of_committed_rows():
    """Committed rows and an open transaction's rows in the same builders: the export
    splits them (every column layout, old images, specials, nulls, events)."""
    dec = Decoder()
    first = feed(dec, rel_orders(), *txn(1, 100, ins(1, note=None), Update(ORDERS, "K", (t(1), None, None), (t(1), t("u"), t(5)))),
                 Begin(200, 2, 2), ins(2, note=None), ins(3, note="z" * 50),
                 Delete(ORDERS, "K", (t(1), None, None)))
    assert ids(first) == [1, 1]
    assert first.events.num_rows == 2
    second = feed(dec, ins(4), Commit(0, 200, 208, 2))
    assert ids(second) == [2, 3, 1, 4]
    assert col(second, "public.orders", "note") == [None, "z" * 50, None, "x"]
    assert col(second, "public.orders", "_seq") == [0, 1, 2, 3]
    assert col(second, "public.orders", "_before_kind") == [None, None, "K", None]
    assert [e["op"] for e in second.events.to_pylist()] == ["c", "c", "d", "c"]
    whole = decode(rel_orders(), *txn(1, 100, ins(1, note=None), Update(ORDERS, "K", (t(1), None, None), (t(1), t("u"), t(5)))),
                   Begin(200, 2, 2), ins(2, note=None), ins(3, note="z" * 50),
                   Delete(ORDERS, "K", (t(1), None, None)), ins(4), Commit(0, 200, 208, 2))
    _assert_same_output([first, second], whole)


def test_huge_open_transaction_over_many_feeds_is_linear():
    """An open transaction spread over many feeds is not decoded again at every feed."""
    n = 20_000
    raw = enc(rel_orders(), Begin(10, 1, 3), *[ins(i) for i in range(n)], Commit(0, 10, 18, 1))
    dec = Decoder()
    out = []
    for k in range(0, len(raw), 100):               # 200 feeds
        out.append(check(dec.feed(raw[k:k + 100])))
    assert sum(cs.num_changes for cs in out) == n
    assert ids(out[-1]) == list(range(n))


# A plain transaction open across feeds whose raw size passes max_pending_bytes is held
# as raw messages (spilling to a file) and decoded at its Commit. Its body has every
# kind of message a transaction carries: an Origin, a relation redefined (and another
# defined) inside it, old images, unchanged-TOAST values, truncates before and after
# the redefinition, transactional and non-transactional logical messages.
SPOOLED_PLAIN = (
    [rel_orders()]
    + txn(1, 500, ins(1, "before"))
    + [Begin(1000, 7, 20), Origin(0, "up"), ins(10, "a" * 30), ins(11, None),
       Update(ORDERS, "O", (t(10), t("a" * 30), t(1)), (t(10), UNCHANGED_TOAST, t(2))),
       LogicalMessage(1, 1001, "audit", b"in-txn"), LogicalMessage(0, 1002, "nt", b"now"),
       Truncate(1, (ORDERS,)), rel_items(), Insert(ITEMS, (t("s1"), t(5))),
       Update(ORDERS, "K", (t(10), None, None), (t(10), UNCHANGED_TOAST, t(3))),
       rel_orders(extra=True), Insert(ORDERS, (t(12), UNCHANGED_TOAST, t(4), t("t"))),
       Delete(ORDERS, "O", (t(12), t("n"), t(4), t("f"))), Truncate(2, (ITEMS, ORDERS)),
       Insert(ITEMS, (t("s2"), None)), LogicalMessage(1, 1003, "audit", b"late"),
       Insert(ORDERS, (t(13), t("b" * 40), t(5), None)), Commit(0, 1000, 1008, 7)]
    + txn(21, 2000, Insert(ORDERS, (t(14), t("after"), t(6), t("t"))))
)


def _fds_in(directory):
    """Open files of this process that live in (or were unlinked from) directory."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory) + os.sep):
            out.append(target)
    return out


@pytest.mark.parametrize("limit", [0, 64, 400, 1 << 30])
def test_open_plain_transaction_over_the_limit_is_spooled(limit, tmp_path):
    """Every chunk size: the same output as one feed; past the limit the open
    transaction is held as raw messages (on disk), not as decoded rows."""
    raw = enc(*SPOOLED_PLAIN)
    whole = check(Decoder().feed(raw))
    assert ids(whole) == [1, 10, 11, 10, None, 10, 12, 12, None, 13, 14]
    ever_spooled = False
    for step in (1, 2, 3, 5, 8):
        dec = Decoder(max_pending_bytes=limit, spill_dir=str(tmp_path))
        parts, spooled = [], {}
        for k in range(0, len(raw), step):
            parts.append(check(dec.feed(raw[k:k + step])))
            p = dec.pending()
            xid = p["open_transaction"]
            if xid is not None:
                # spooled once its raw copy passed the limit at a feed's end, until Commit
                assert p["open_spooled"] == (spooled.get(xid, False) or p["open_bytes"] > limit), p
                spooled[xid] = p["open_spooled"]
                assert bool(p["spilled_bytes"]) == p["open_spooled"], p   # (spooled = spilled here)
                assert bool(_fds_in(tmp_path)) == p["open_spooled"], "the spill file in spill_dir"
            else:
                assert p["open_bytes"] == 0 and not p["open_spooled"] and not p["spilled_bytes"], p
        _assert_same_output(parts, whole)
        if limit <= 64:
            assert spooled[20], (step, spooled)
        ever_spooled |= spooled.get(20, False)
        assert not _fds_in(tmp_path)          # the spool's file is gone with the commit
    assert ever_spooled == (limit < 1 << 30)
    assert os.listdir(tmp_path) == []


def test_spooled_plain_transaction_metadata_and_pending():
    dec = Decoder(max_pending_bytes=0)
    raw = enc(*SPOOLED_PLAIN)
    first = check(dec.feed(raw[:9]))         # Begin, Origin, two inserts, an update
    assert ids(first) == [1]
    p = dec.pending()
    assert p["open_spooled"] and p["open_changes"] == 3
    assert p["open_bytes"] == sum(18 + len(m) for m in raw[5:9])   # Origin + 3 changes
    middle = check(dec.feed(raw[9:-4]))
    assert middle.num_changes == 0
    assert [m.message.prefix for m in middle.messages] == ["nt"]   # not transactional: now
    assert dec.pending()["open_changes"] == 12
    last = check(dec.feed(raw[-4:]))
    orders = last.tables["public.orders"]
    assert orders.column("_xid").to_pylist() == [20] * 9 + [21]
    assert orders.column("_commit_lsn").to_pylist() == [1000] * 9 + [2000]
    assert orders.column("_origin").to_pylist() == ["up"] * 9 + [None]
    assert last.events.column("seq").to_pylist() == list(range(12)) + [0]
    assert last.events.column("commit_ts").to_pylist()[0].timestamp() * 1e6 == UNIX_2000 + 7
    assert [m.message.prefix for m in last.messages] == ["audit", "audit"]
    assert dec.pending()["open_transaction"] is None


@pytest.mark.parametrize("spooled", [False, True], ids=["decoded", "spooled"])
def test_bad_change_in_an_open_plain_transaction_fails_on_arrival(spooled):
    """Spooled or not, a bad change fails at its own message (index and offset), the
    transaction is dropped, and the decoder decodes what follows."""
    raw = enc(rel_orders(), Begin(100, 1, 5), ins(1), ins(2))
    bad = enc(ins(3), Insert(ORDERS, (t(4), t("x"), t("not a number"))), Commit(0, 100, 108, 1))
    dec = Decoder(max_pending_bytes=0 if spooled else 1 << 30)
    check(dec.feed(raw))
    assert dec.pending()["open_spooled"] == spooled
    with pytest.raises(DecodeError) as info:
        dec.feed(bad)
    err = info.value
    assert (err.message_index, err.message_type, err.offset) == (1, "I", 20)   # qty's kind byte
    assert err.changes.num_changes == 0
    assert dec.pending()["open_transaction"] is None and dec.pending()["open_bytes"] == 0
    cs = feed(dec, *txn(6, 200, ins(7)))
    assert ids(cs) == [7]


def test_lsn_array_forms():
    msgs = enc(rel_orders(), *txn(1, 100, ins(1), ins(2)))
    for lsn in ([0, 1, 2, 3, 4], pa.array([0, 1, 2, 3, 4], pa.int64()),
                pa.array([None, 1, 2, 3, 4], pa.int64()), pa.chunked_array([[0, 1], [2, 3, 4]])):
        cs = check(decode_changes(msgs, lsn=lsn))
        assert col(cs, "public.orders", "_lsn") == [2, 3]
    for messages in (pa.array(msgs, pa.large_binary()),
                     pa.chunked_array([msgs[:2], msgs[2:]], pa.binary()),
                     [memoryview(m) for m in msgs], [bytearray(m) for m in msgs]):
        assert ids(check(decode_changes(messages))) == [1, 2]
    # Arrow messages take their LSNs in the same pass: whole, in chunks, and a slice
    # (its offsets start past the array's buffers)
    padded = pa.array([b"x", b"yy"] + msgs, pa.binary()).slice(2)
    for messages in (pa.array(msgs, pa.binary()), pa.array(msgs, pa.large_binary()), padded,
                     pa.chunked_array([msgs[:1], [], msgs[1:3], msgs[3:]], pa.binary())):
        for lsn in ([0, 7, 8, 9, 10], pa.chunked_array([[0, 7, 8], [9, 10]]), np.array([0, 7, 8, 9, 10])):
            cs = check(decode_changes(messages, lsn=lsn))
            assert col(cs, "public.orders", "_lsn") == [8, 9]
            assert [e["lsn"] for e in cs.events.to_pylist()] == [8, 9]
        with pytest.raises(ValueError):
            decode_changes(messages, lsn=[1, 2])
    with pytest.raises(ValueError):
        decode_changes(msgs, lsn=[1, 2])
    with pytest.raises(TypeError):
        decode_changes(pa.array([1, 2]))


def test_null_message_in_arrow_array():
    msgs = enc(rel_orders(), *txn(1, 100, ins(1)))
    arr = pa.array(msgs[:2] + [None] + msgs[2:], pa.binary())
    with pytest.raises(DecodeError) as info:
        Decoder().feed(arr)
    assert info.value.message_index == 2


def test_null_message_in_list():
    msgs = enc(rel_orders(), *txn(1, 100, ins(1)))
    with pytest.raises(DecodeError) as info:
        Decoder().feed(msgs[:3] + [None])
    assert info.value.message_index == 3


def test_null_message_index_after_carry():
    dec = Decoder()
    feed(dec, rel_orders(), Begin(100, 1, 9), ins(1))
    with pytest.raises(DecodeError) as info:
        dec.feed(pa.array([encode_message(ins(2)), None], pa.binary()))
    assert info.value.message_index == 1
    # the rejected batch lost nothing: the carried transaction still completes
    assert ids(feed(dec, ins(2), Commit(0, 100, 108, 1))) == [1, 2]


# -- streamed transactions ------------------------------------------------------------------

def test_stream_with_interleaved_transactions():
    X = 900
    msgs = [
        rel_orders(),
        StreamStart(X, 1), rel_orders(X), ins(1, xid=X), ins(2, xid=X), StreamStop(),
        *txn(901, 5000, ins(100)),
        StreamStart(X, 0), ins(3, xid=X), StreamStop(),
        StreamStart(X, 0), StreamStop(),                         # an empty block
        *txn(902, 6000, ins(101)),
        StreamCommit(X, 0, 7000, 7008, 77),
    ]
    dec = Decoder()
    cs = feed(dec, *msgs[:12])
    assert ids(cs) == [100]
    cs = feed(dec, *msgs[12:])
    assert ids(cs) == [101, 1, 2, 3]
    assert col(cs, "public.orders", "_xid") == [902, X, X, X]
    assert col(cs, "public.orders", "_commit_lsn") == [6000, 7000, 7000, 7000]
    assert col(cs, "public.orders", "_seq") == [0, 0, 1, 2]
    assert cs.tables["public.orders"].column("_commit_ts").cast(pa.int64()).to_pylist()[1:] == \
        [UNIX_2000 + 77] * 3


def test_stream_subtransaction_abort_is_positional():
    X, S1, S2, S3 = 1000, 1001, 1002, 1003
    msgs = [
        rel_orders(),
        StreamStart(X, 1),
        ins(1, xid=X),
        ins(2, xid=S1),               # savepoint 1
        ins(3, xid=S2),               # savepoint 2 is S1's child
        StreamStop(),
        StreamStart(X, 0),
        rel_items(S3),                # R of another xid inside the discarded range
        LogicalMessage(1, 5, "in-sub", b"gone", X),   # M carries the top-level xid
        Insert(ITEMS, (t("k"), t(1)), S3),
        ins(4, xid=S1),               # S1 again, after its child
        StreamStop(),
        StreamAbort(X, S1),           # ROLLBACK TO savepoint 1: drops 2, 3, M, k, 4
        StreamStart(X, 0),
        ins(5, xid=X),
        ins(6, xid=S2),               # S2 reappears after the abort: kept
        LogicalMessage(1, 6, "kept", b"ok", X),
        StreamStop(),
        StreamAbort(X, 4242),         # a subxid never seen: nothing happens
        StreamCommit(X, 0, 9000, 9008, 1),
    ]
    cs = decode(*msgs)
    assert ids(cs) == [1, 5, 6]
    assert "shop.items" not in cs.tables
    assert [m.message.prefix for m in cs.messages] == ["kept"]
    assert cs.messages[0].commit_lsn == 9000 and cs.messages[0].xid == X
    assert [e["op"] for e in cs.events.to_pylist()] == ["c", "c", "c"]


def test_stream_abort_of_a_child_keeps_the_parent():
    X, S1, S2 = 1000, 1001, 1002
    cs = decode(rel_orders(), StreamStart(X, 1), ins(1, xid=S1), ins(2, xid=S2), ins(3, xid=S1),
                StreamStop(), StreamAbort(X, S2), StreamCommit(X, 0, 50, 58, 1))
    assert ids(cs) == [1]   # positional: S1's row after S2's first appearance goes too


@pytest.mark.parametrize("v4", [False, True], ids=["v2", "v4-parallel"])
def test_stream_top_level_abort_and_stray_aborts(v4):
    X = 1000
    extra = (777, 1234) if v4 else ()
    cs = decode(
        rel_orders(),
        StreamAbort(555, 555, *extra),                      # stray: never streamed
        StreamAbort(556, 557, *extra),                      # stray subtransaction abort
        StreamStart(X, 1), ins(1, xid=X), LogicalMessage(1, 1, "tx", b"", X), StreamStop(),
        LogicalMessage(0, 2, "nontx", b"now"),
        StreamAbort(X, X, *extra),
        StreamAbort(X, X, *extra),                          # again: ignored
        *txn(1001, 300, ins(2)),
    )
    assert ids(cs) == [2]
    assert [m.message.prefix for m in cs.messages] == ["nontx"]
    assert cs.messages[0].commit_lsn is None and cs.messages[0].xid is None


def test_stream_restarted_after_abort_and_empty_first_block():
    X = 1000
    cs = decode(rel_orders(),
                StreamStart(X, 1), StreamStop(), StreamAbort(X, X),
                StreamStart(X, 1), StreamStop(), StreamStart(X, 0), ins(7, xid=X), StreamStop(),
                StreamCommit(X, 0, 80, 88, 1))
    assert ids(cs) == [7]


def test_stream_relation_applies_immediately():
    """A Relation inside a block updates the catalog at once (PROTOCOL §3.3): a plain
    transaction between the blocks uses it even though the stream later aborts."""
    X = 1000
    cs = decode(StreamStart(X, 1), rel_orders(X), ins(1, xid=X), StreamStop(),
                *txn(5, 100, ins(2)), StreamAbort(X, X))
    assert ids(cs) == [2]


def test_stream_commit_with_no_changes():
    cs = decode(StreamStart(3, 1), StreamStop(), StreamCommit(3, 0, 10, 18, 1))
    assert cs.num_changes == 0 and cs.table_versions == []


# -- two-phase -------------------------------------------------------------------------------

def test_prepare_then_commit_prepared():
    dec = Decoder()
    cs = feed(dec, rel_orders(), *prepared("g1", 70, 1000, ins(1), LogicalMessage(1, 3, "p", b"", None)))
    assert cs.num_changes == 0 and cs.messages == []
    cs = feed(dec, *txn(71, 1500, ins(2)), CommitPrepared(0, 2000, 2008, 99, 70, "g1"))
    assert ids(cs) == [2, 1]
    assert col(cs, "public.orders", "_commit_lsn") == [1500, 2000]
    assert col(cs, "public.orders", "_xid") == [71, 70]
    assert cs.tables["public.orders"].column("_commit_ts").cast(pa.int64()).to_pylist()[1] == UNIX_2000 + 99
    assert cs.messages[0].commit_lsn == 2000


def test_rollback_prepared_drops():
    cs = decode(rel_orders(), *prepared("g1", 70, 1000, ins(1)),
                RollbackPrepared(0, 1008, 3000, 50, 60, 70, "g1"),
                *txn(80, 4000, ins(2)))
    assert ids(cs) == [2]
    with pytest.raises(DecodeError):      # it is gone
        decode(rel_orders(), *prepared("g1", 70, 1000, ins(1)),
               RollbackPrepared(0, 1008, 3000, 50, 60, 70, "g1"),
               CommitPrepared(0, 5000, 5008, 1, 70, "g1"))


def test_rollback_of_an_older_prepare_with_the_same_gid_is_ignored():
    cs = decode(rel_orders(), *prepared("g1", 70, 1000, ins(1)),
                RollbackPrepared(0, 555, 3000, 50, 60, 70, "g1"),       # other prepare_end_lsn
                RollbackPrepared(0, 1, 3000, 50, 60, 70, "unknown"),    # never seen
                CommitPrepared(0, 5000, 5008, 1, 70, "g1"))
    assert ids(cs) == [1]


def test_prepare_replayed_before_commit_prepared_and_duplicates():
    dec = Decoder()
    feed(dec, rel_orders(), *prepared("g1", 70, 1000, ins(1)))
    # after a reconnect the same b..P arrives again (replacing the first copy) ...
    feed(dec, *prepared("g1", 70, 1000, ins(1)))
    # ... and a K for a transaction prepared before two-phase was enabled comes with
    # its b..P replayed just before it
    cs = feed(dec, *prepared("g2", 72, 1100, ins(5)), CommitPrepared(0, 1200, 1208, 1, 72, "g2"),
              CommitPrepared(0, 1300, 1308, 1, 70, "g1"))
    assert ids(cs) == [5, 1]
    assert col(cs, "public.orders", "_commit_lsn") == [1200, 1300]


def test_stream_prepare_then_commit_prepared():
    X = 3000
    cs = decode(rel_orders(), StreamStart(X, 1), Origin(0, "up"), ins(1, xid=X), StreamStop(),
                StreamStart(X, 0), ins(2, xid=X + 1), StreamStop(),
                StreamPrepare(0, 600, 608, 5, X, "sg"),
                *txn(3001, 650, ins(3)),
                CommitPrepared(0, 700, 708, 6, X, "sg"))
    assert ids(cs) == [3, 1, 2]
    assert col(cs, "public.orders", "_commit_lsn") == [650, 700, 700]
    assert col(cs, "public.orders", "_origin") == [None, "up", "up"]


def test_stream_prepare_then_rollback():
    X = 3000
    cs = decode(rel_orders(), StreamStart(X, 1), ins(1, xid=X), StreamStop(),
                StreamPrepare(0, 600, 608, 5, X, "sg"), RollbackPrepared(0, 608, 700, 5, 6, X, "sg"))
    assert cs.num_changes == 0


# -- origins, truncate, messages ------------------------------------------------------------

def test_origin_names_on_rows_and_events():
    cs = decode(rel_orders(), *txn(1, 100, ins(1), origin="node_a"), *txn(2, 200, ins(2)),
                *prepared("g", 3, 300, ins(3), origin="node_b"), CommitPrepared(0, 400, 408, 1, 3, "g"),
                StreamStart(4, 1), Origin(0, "node_c"), ins(4, xid=4), StreamStop(),
                StreamStart(4, 0), ins(5, xid=4), StreamStop(), StreamCommit(4, 0, 500, 508, 1))
    assert col(cs, "public.orders", "_origin") == ["node_a", None, "node_b", "node_c", "node_c"]
    assert cs.events.column("origin").to_pylist() == ["node_a", None, "node_b", "node_c", "node_c"]


def test_truncate_several_relations():
    cs = decode(rel_orders(), rel_items(), *txn(1, 100, ins(1), Truncate(3, (ORDERS, ITEMS)), ins(2)))
    assert col(cs, "public.orders", "_op") == ["c", "t", "c"]
    assert col(cs, "public.orders", "_seq") == [0, 1, 3]
    assert col(cs, "shop.items", "_op") == ["t"] and col(cs, "shop.items", "_seq") == [2]
    assert col(cs, "shop.items", "sku") == [None]
    ev = cs.events.to_pylist()
    assert [(e["op"], e["table"], e["seq"]) for e in ev] == [
        ("c", "orders", 0), ("t", "orders", 1), ("t", "items", 2), ("c", "orders", 3)]
    assert ev[1]["before"] is None and ev[1]["after"] is None and ev[1]["unchanged_toast"] == []
    assert [e["truncate_options"] for e in ev] == [None, ["cascade", "restart_identity"],
                                                   ["cascade", "restart_identity"], None]


def test_truncate_options_each_bit_and_spooled():
    cs = decode(rel_orders(), rel_items(),
                *txn(1, 100, Truncate(0, (ORDERS,)), Truncate(1, (ITEMS,)), Truncate(2, (ORDERS,))),
                StreamStart(9, 1), Truncate(2, (ITEMS,), 9), StreamStop(), StreamCommit(9, 0, 200, 208, 1),
                *prepared("g", 10, 300, Truncate(1, (ORDERS,))), CommitPrepared(0, 400, 408, 1, 10, "g"))
    assert cs.events.column("truncate_options").to_pylist() == [
        [], ["cascade"], ["restart_identity"], ["restart_identity"], ["cascade"]]


def test_truncate_in_stream_and_prepared():
    cs = decode(rel_orders(), rel_items(),
                StreamStart(9, 1), Truncate(0, (ITEMS, ORDERS), 9), StreamStop(),
                StreamCommit(9, 0, 100, 108, 1),
                *prepared("g", 10, 200, Truncate(1, (ITEMS,))), CommitPrepared(0, 300, 308, 1, 10, "g"))
    assert col(cs, "shop.items", "_commit_lsn") == [100, 300]
    assert col(cs, "public.orders", "_seq") == [1]


def test_truncate_in_stream_keeps_its_relation_version():
    cs = decode(rel_orders(), StreamStart(9, 1), Truncate(0, (ORDERS,), 9), StreamStop(),
                *txn(5, 50, rel_orders(extra=True)),
                StreamCommit(9, 0, 100, 108, 1))
    [(version, table)] = cs.table_versions
    assert version.version == 0 and table.column_names[7:10] == ["id", "note", "qty"]


def test_logical_messages():
    X = 40
    dec = Decoder()
    cs = feed(dec, LogicalMessage(0, 10, "nt1", b"a\x00b"),
              Begin(100, 5, 7), LogicalMessage(1, 11, "tx1", b"x"))
    # the non-transactional one is out at once, the transactional one waits for Commit
    assert [(m.message.prefix, m.lsn, m.commit_lsn, m.xid, m.origin) for m in cs.messages] == [
        ("nt1", 0, None, None, None)]
    assert cs.messages[0].message.content == b"a\x00b"
    cs = feed(dec, Commit(0, 100, 108, 5),
              StreamStart(X, 1), LogicalMessage(1, 12, "dropped", b"", X), StreamStop(),
              StreamAbort(X, X),
              StreamStart(X + 1, 1), LogicalMessage(1, 13, "streamed", b"", X + 1), StreamStop(),
              StreamCommit(X + 1, 0, 300, 308, 6), lsn=[0, 0, 501, 0, 0, 0, 502, 0, 0])
    got = [(m.message.prefix, m.lsn, m.commit_lsn, m.commit_ts, m.xid) for m in cs.messages]
    assert got == [("tx1", 0, 100, UNIX_2000 + 5, 7), ("streamed", 502, 300, UNIX_2000 + 6, X + 1)]
    assert cs.messages[1].message.xid == X + 1


# -- relation changes, replica identity, TOAST ----------------------------------------------

def test_relation_redefined_mid_transaction():
    cs = decode(*txn(1, 100, rel_orders(), ins(1), rel_orders(extra=True),
                     Insert(ORDERS, (t(2), t("n"), t(5), t("t"))), rel_orders(extra=True),
                     Insert(ORDERS, (t(3), None, None, None))))
    versions = cs.table_versions
    assert [v.version for v, _ in versions] == [0, 1]
    assert [tab.num_rows for _, tab in versions] == [1, 2]
    assert "flag" not in versions[0][1].column_names
    assert versions[1][1].schema.field("flag").type == pa.bool_()
    assert versions[1][1].schema.field("_before").type.num_fields == 4
    merged = cs.tables["public.orders"]
    assert merged.column("id").to_pylist() == [1, 2, 3]
    assert merged.column("flag").to_pylist() == [None, True, None]
    assert [e["after"][-1] for e in cs.events.to_pylist()][1:] == [("flag", "t"), ("flag", None)]


def test_identical_relation_repeats_keep_the_version():
    cs = decode(rel_orders(), *txn(1, 100, ins(1), rel_orders(), ins(2)), rel_orders(), *txn(2, 200, ins(3)))
    assert len(cs.table_versions) == 1 and ids(cs) == [1, 2, 3]


def test_key_tuple_nulls_are_not_part_of_the_key():
    cs = decode(rel_orders(), *txn(
        1, 100,
        Update(ORDERS, "K", (t(1), None, None), (t(2), t("n"), t(3))),
        Delete(ORDERS, "K", (t(2), None, None)),
        Delete(ORDERS, "O", (t(3), None, t(4)))))
    ev = cs.events.to_pylist()
    assert ev[0]["before"] == [("id", "1")] and ev[0]["before_kind"] == "K"
    assert ev[1]["before"] == [("id", "2")]
    assert ev[2]["before"] == [("id", "3"), ("note", None), ("qty", "4")] and ev[2]["before_kind"] == "O"
    tab = cs.tables["public.orders"]
    assert tab.column("_before").to_pylist() == [
        {"id": 1, "note": None, "qty": None}, {"id": 2, "note": None, "qty": None},
        {"id": 3, "note": None, "qty": 4}]
    assert tab.column("_before_kind").to_pylist() == ["K", "K", "O"]
    # a delete's typed row is its old key / old row
    assert tab.column("id").to_pylist() == [2, 2, 3]
    assert tab.column("qty").to_pylist() == [3, None, 4]


def test_unchanged_toast():
    cs = decode(rel_orders(), rel_items(), *txn(
        1, 100,
        Update(ORDERS, None, None, (t(1), UNCHANGED_TOAST, UNCHANGED_TOAST)),
        Update(ORDERS, "K", (t(1), None, None), (t(2), UNCHANGED_TOAST, t(3))),
        Insert(ITEMS, (t("a"), t(1))),
        Insert(ORDERS, (t(4), None, t(5)))))
    tab = cs.tables["public.orders"]
    assert tab.column("note").to_pylist() == [None, None, None]
    assert tab.column("_unchanged_toast").to_pylist() == [["note", "qty"], ["note"], []]
    assert cs.tables["shop.items"].column("_unchanged_toast").to_pylist() == [[]]
    ev = cs.events.to_pylist()
    assert ev[0]["after"] == [("id", "1")] and ev[0]["unchanged_toast"] == ["note", "qty"]
    assert ev[1]["after"] == [("id", "2"), ("qty", "3")] and ev[1]["unchanged_toast"] == ["note"]
    assert ev[3]["after"] == [("id", "4"), ("note", None), ("qty", "5")] and ev[3]["unchanged_toast"] == []


@pytest.mark.parametrize("old_kind", ["K", "O"])
def test_unchanged_toast_in_old_tuple_is_an_error(old_kind):
    msgs = [rel_orders()] + txn(1, 100, ins(1), Update(ORDERS, old_kind, (t(1), UNCHANGED_TOAST, None),
                                                      (t(1), t("x"), t(2))))
    with pytest.raises(DecodeError) as info:
        decode(*msgs)
    assert info.value.message_index == 3 and info.value.message_type == "U"
    assert info.value.offset == 1 + 4 + 1 + 2 + 6   # type, relid, marker, ncols, column 0 ('t', len, '1')


@pytest.mark.parametrize("kw", [{"events": False}, {"tables": False}])
def test_events_or_tables_only(kw):
    msgs = [rel_orders()] + txn(1, 100, ins(1), Update(ORDERS, "K", (t(1), None, None), (t(2), UNCHANGED_TOAST, t(1))),
                                Delete(ORDERS, "O", (t(2), t("b"), t(1))))
    cs = decode(*msgs, **kw)
    if kw.get("events") is False:
        assert cs.events is None and ids(cs) == [1, 2, 2]
    else:
        assert cs.table_versions == [] and cs.events.num_rows == 3
    assert cs.num_changes == 3


def test_messages_only_decoder():
    cs = decode(rel_orders(), *txn(1, 100, ins(1), LogicalMessage(1, 1, "m", b"")), events=False, tables=False)
    assert cs.events is None and cs.table_versions == [] and len(cs.messages) == 1


def test_unknown_type_column_ignores_uncommitted_rows():
    rel = Relation(16600, "public", "u", "d", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "mood", 17001, -1)))
    dec = Decoder()
    cs = feed(dec, rel, *txn(1, 100, Insert(16600, (t(1), t("happy")))),
              Begin(200, 1, 2), Insert(16600, (t(2), Value("b", b"sad"))))
    assert cs.tables["public.u"].schema.field("mood").type == pa.string()


def test_unknown_type_flag_is_per_batch_across_an_open_transaction():
    """A 'b' value committed in one batch does not make the next batch's column binary
    when the open transaction's rows are split off at export (found by hypothesis)."""
    rel = Relation(16600, "public", "u", "d", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "mood", 17001, -1)))
    dec = Decoder()
    first = feed(dec, rel, *txn(1, 100, Insert(16600, (t(1), Value("b", b"sad")))),
                 Begin(200, 1, 2), Insert(16600, (t(2), t("happy"))))
    assert first.tables["public.u"].schema.field("mood").type == pa.binary()
    second = feed(dec, Insert(16600, (t(3), t("calm"))), Commit(0, 200, 208, 1))
    assert second.tables["public.u"].schema.field("mood").type == pa.string()
    assert col(second, "public.u", "mood") == ["happy", "calm"]


def test_unknown_type_binary_old_value():
    rel = Relation(16600, "public", "u", "f", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "mood", 17001, -1)))
    cs = decode(rel, *txn(1, 100, Update(16600, "O", (t(1), Value("b", b"\x80\x01")), (t(1), None))))
    tab = cs.tables["public.u"]
    assert tab.schema.field("mood").type == pa.binary()
    assert tab.column("_before").to_pylist() == [{"id": 1, "mood": b"\x80\x01"}]
    assert cs.events.column("before").to_pylist() == [[("id", "1"), ("mood", "\\x8001")]]


ACCT = Relation(16700, "public", "acct", "f", (RelationColumn(1, "id", 23, -1),
                                              RelationColumn(0, "amount", 1700, (10 << 16 | 2) + 4)))
NAN_B = Value("b", b"\x00\x00\x00\x00\xc0\x00\x00\x00")    # binary numeric NaN


def _amounts(values):
    return [None if v is None else str(v) for v in values]


def test_special_values_new_image():
    """Values the Arrow type cannot hold: null in the typed column, PostgreSQL text in
    _special."""
    cs = decode(ACCT, *txn(1, 100,
                           Insert(16700, (t(1), t("NaN"))),
                           Insert(16700, (t(2), t("1.50"))),
                           Update(16700, "O", (t(2), t("1.50")), (t(2), NAN_B))))
    tab = cs.tables["public.acct"]
    assert tab.schema.field("amount").type == pa.decimal128(10, 2)
    assert _amounts(tab.column("amount").to_pylist()) == [None, "1.50", None]
    assert tab.column("_special").to_pylist() == [[("amount", "NaN")], None, [("amount", "NaN")]]
    assert _amounts(b and b["amount"] for b in tab.column("_before").to_pylist()) == [None, None, "1.50"]
    assert cs.events.column("after").to_pylist()[2] == [("id", "2"), ("amount", "NaN")]


@crash_safe
def test_special_values_old_image():
    cs = decode(ACCT, *txn(1, 100,
                           Update(16700, "O", (t(1), t("NaN")), (t(1), t("2.00"))),
                           Delete(16700, "O", (t(1), t("NaN")))))
    tab = cs.tables["public.acct"]
    assert _amounts(tab.column("amount").to_pylist()) == ["2.00", None]
    # old-image entries (prefixed with _before.) first, then the row's own
    assert tab.column("_special").to_pylist() == [
        [("_before.amount", "NaN")], [("_before.amount", "NaN"), ("amount", "NaN")]]
    assert [b["amount"] for b in tab.column("_before").to_pylist()] == [None, None]


@crash_safe
def test_special_values_split_feed():
    msgs = enc(ACCT, *txn(1, 100, *[Insert(16700, (t(i), t("1.00"))) for i in range(3)]),
               *txn(2, 200, Update(16700, "O", (t(0), t("NaN")), (t(0), t("2.00")))))
    whole = check(Decoder().feed(msgs))
    dec = Decoder()
    parts = [check(dec.feed(msgs[:7])), check(dec.feed(msgs[7:]))]
    _assert_same_output(parts, whole)


def test_binary_values_and_unknown_types():
    rel = Relation(16600, "public", "u", "d", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "mood", 17001, -1)))
    t_only = decode(rel, *txn(1, 100, Insert(16600, (t(1), t("happy")))))
    assert t_only.tables["public.u"].schema.field("mood").type == pa.string()
    assert t_only.tables["public.u"].column("mood").to_pylist() == ["happy"]
    forced = decode(rel, *txn(1, 100, Insert(16600, (t(1), t("happy")))), binary_unknown=True)
    assert forced.tables["public.u"].schema.field("mood").type == pa.binary()
    assert forced.tables["public.u"].column("mood").to_pylist() == [b"happy"]
    binary = decode(rel, *txn(1, 100, Insert(16600, (Value("b", b"\x00\x00\x00\x07"), Value("b", b"sad")))))
    assert binary.tables["public.u"].column("id").to_pylist() == [7]
    assert binary.tables["public.u"].schema.field("mood").type == pa.binary()
    assert binary.events.column("after").to_pylist()[0][0] == ("id", "7")


# -- errors -------------------------------------------------------------------------------------

def _error(dec, msgs):
    with pytest.raises(DecodeError) as info:
        dec.feed(enc(*msgs))
    return info.value


GOOD = [rel_orders()] + txn(1, 100, ins(1))


@pytest.mark.parametrize("bad, index, mtype, offset", [
    ([Commit(0, 5, 6, 0)], 0, "C", 0),                                  # Commit without Begin
    ([Begin(5, 0, 1), ins(1, relid=4242)], 1, "I", 1),                   # unknown relid
    ([Begin(5, 0, 1), Insert(ORDERS, (t(1), t(2)))], 1, "I", 6),         # column count
    ([StreamCommit(99, 0, 1, 2, 3)], 0, "c", 1),                         # never streamed
    ([CommitPrepared(0, 1, 2, 3, 4, "nope")], 0, "K", 0),               # unknown GID
    ([Begin(5, 0, 1), Begin(6, 0, 2)], 1, "B", 0),                       # nested Begin
    ([Begin(5, 0, 1), Commit(0, 6, 7, 0)], 1, "C", 2),                   # LSN mismatch
    ([ins(1)], 0, "I", 0),                                               # outside a transaction
    ([StreamStop()], 0, "E", 0),
    ([StreamStart(5, 0)], 0, "S", 5),                                    # not first segment
    ([Prepare(0, 1, 2, 3, 4, "g")], 0, "P", 0),
    ([StreamPrepare(0, 1, 2, 3, 4, "g")], 0, "p", 0),
    ([Origin(0, "o")], 0, "O", 0),
    ([Truncate(0, (ORDERS,))], 0, "T", 0),
    ([LogicalMessage(1, 0, "p", b"")], 0, "M", 0),
    ([BeginPrepare(1, 2, 3, 4, "g"), Prepare(0, 1, 2, 3, 4, "other")], 1, "P", 0),
    ([Begin(5, 0, 1), Truncate(0, (ORDERS, 4242))], 1, "T", 0),
])
def test_decode_errors_and_recovery(bad, index, mtype, offset):
    dec = Decoder()
    feed(dec, rel_orders())
    err = _error(dec, bad)
    assert (err.message_index, err.message_type, err.offset) == (index, mtype, offset)
    assert err.changes.num_changes == 0
    # the decoder is usable again
    cs = feed(dec, *txn(2, 200, ins(7)))
    assert ids(cs) == [7]


def test_truncated_message_keeps_earlier_commits():
    raw = enc(*GOOD, *txn(2, 200, ins(2)))
    bad = raw[:5] + [raw[5][:-3]] + raw[6:]
    dec = Decoder()
    with pytest.raises(DecodeError) as info:
        dec.feed(bad)
    err = info.value
    assert err.message_index == 5 and err.message_type == "I"
    assert err.offset is not None and 0 < err.offset <= len(raw[5]) - 3
    assert ids(check(err.changes)) == [1]      # the transaction before the bad message
    assert ids(feed(dec, *txn(3, 300, ins(3)))) == [3]


def test_error_index_counts_from_the_batch_not_the_carry():
    dec = Decoder()
    feed(dec, rel_orders(), Begin(100, 1, 9), ins(1))       # carried: Begin, ins
    err = _error(dec, [ins(2), Insert(ORDERS, (t(3),))])
    assert err.message_index == 1 and err.offset == 6
    assert ids(feed(dec, *txn(4, 400, ins(4)))) == [4]


def test_empty_and_unknown_messages():
    for raw, mtype in ((b"", None), (b"Z\x00", "Z")):
        with pytest.raises(DecodeError) as info:
            Decoder().feed(enc(*GOOD) + [raw])
        assert info.value.message_index == 4 and info.value.message_type == mtype
        assert info.value.offset == 0


def test_trailing_bytes_in_a_change():
    raw = enc(*GOOD)
    raw[2] += b"\x00"
    with pytest.raises(DecodeError) as info:
        Decoder().feed(raw)
    assert (info.value.message_index, info.value.offset) == (2, len(raw[2]) - 1)


def test_events_only_bad_binary_value():
    rel = Relation(16800, "public", "d", "d", (RelationColumn(1, "id", 23, -1),
                                               RelationColumn(0, "day", 1082, -1)))
    dec = Decoder(tables=False)
    err = _error(dec, [rel, *txn(1, 100, Insert(16800, (t(1), Value("b", b"\x00"))))])
    assert (err.message_index, err.offset) == (2, 14)
    assert err.changes.events.num_rows == 0
    assert feed(dec, *txn(2, 200, Insert(16800, (t(2), None)))).events.num_rows == 1


def test_stream_column_count_checked_on_arrival():
    dec = Decoder()
    err = _error(dec, [rel_orders(), StreamStart(5, 1), Insert(ORDERS, (t(1),), 5), StreamStop(),
                       StreamCommit(5, 0, 10, 18, 1)])
    assert (err.message_index, err.message_type, err.offset) == (2, "I", 10)


def test_stream_block_error_recovery():
    """A bad message inside a block: later blocks and transactions still decode."""
    dec = Decoder()
    err = _error(dec, [rel_orders(), StreamStart(5, 1), ins(1, xid=5), ins(2, relid=999, xid=5)])
    assert err.message_index == 3
    cs = feed(dec, *txn(6, 60, ins(3)), StreamStart(5, 0), ins(4, xid=5), StreamStop(),
              StreamCommit(5, 0, 70, 78, 1))
    assert ids(cs) == [3, 1, 4]


# -- spooling, pending, catalogs ------------------------------------------------------------

def _big_mixed_stream():
    X, Y = 700, 800
    msgs = [rel_orders(), StreamStart(X, 1)]
    msgs += [ins(i, "n" * 40, xid=X if i % 3 else X + 1) for i in range(60)]
    msgs += [StreamStop(), *prepared("g", Y, 5000, *[ins(1000 + i, "p" * 30) for i in range(40)]),
             StreamStart(X, 0), ins(999, xid=X + 2), StreamStop(), StreamAbort(X, X + 2),
             StreamCommit(X, 0, 6000, 6008, 1), CommitPrepared(0, 7000, 7008, 2, Y, "g")]
    return msgs


def test_tiny_spool_spills_and_gives_the_same_result(tmp_path):
    raw = enc(*_big_mixed_stream())
    ref = check(Decoder().feed(raw))
    spilled = Decoder(max_pending_bytes=64, spill_dir=str(tmp_path))
    parts = [check(spilled.feed(raw[:70])), check(spilled.feed(raw[70:]))]
    _assert_same_output(parts, ref)
    assert ids(ref) == list(range(60)) + list(range(1000, 1040))


def test_spilled_stream_subtransaction_abort(tmp_path):
    """The aborted subtransaction starts inside the part already spilled to disk."""
    X = 700
    msgs = [rel_orders(), StreamStart(X, 1)] + [ins(i, "a" * 30, xid=X) for i in range(5)]
    msgs += [ins(100, xid=X + 1)] + [ins(200 + i, "b" * 30, xid=X + 2) for i in range(20)]
    msgs += [StreamStop(), StreamAbort(X, X + 1), StreamStart(X, 0), ins(300, xid=X), StreamStop(),
             StreamCommit(X, 0, 900, 908, 1)]
    for limit in (1 << 20, 100, 0):
        cs = decode(*msgs, max_pending_bytes=limit, spill_dir=str(tmp_path))
        assert ids(cs) == [0, 1, 2, 3, 4, 300], limit


def test_pending_summary():
    dec = Decoder()
    raw = enc(rel_orders(), StreamStart(5, 1), ins(1, xid=5), StreamStop(),
              *prepared("g", 6, 100, ins(2)), Begin(300, 1, 7), ins(3))
    dec.feed(raw)
    pending = dec.pending()
    spool_record = 18   # per spooled message: an 18-byte record header + the message
    # (a streamed change without its 4-byte xid)
    assert pending == {"streams": {5: spool_record + len(raw[2]) - 4},
                       "prepared": {"g": spool_record + len(raw[5])},
                       "open_transaction": 7, "open_changes": 1,
                       "open_bytes": spool_record + len(raw[-1]), "open_spooled": False,
                       "spilled_bytes": 0}


def test_catalog_from_json_and_pickle_decodes_later_batches():
    first = Decoder()
    feed(first, rel_orders(), rel_items(), *txn(1, 100, ins(1)))
    later = enc(*txn(2, 200, ins(2), Insert(ITEMS, (t("a"), t(3)))))
    for catalog in (RelationCatalog.from_json(first.catalog.to_json()), pickle.loads(pickle.dumps(first.catalog))):
        dec = Decoder(catalog=catalog)
        cs = check(dec.feed(later))
        assert ids(cs) == [2]
        assert cs.tables["shop.items"].column("n").to_pylist() == [3]
        assert catalog == first.catalog        # the decoder works on its own copy
    with pytest.raises(DecodeError):
        Decoder().feed(later)                   # without the catalog: unknown relation


def test_catalog_versions_and_seeded_redefinition():
    dec = Decoder()
    feed(dec, rel_orders(), *txn(1, 100, ins(1)))
    seeded = Decoder(catalog=dec.catalog)
    cs = check(seeded.feed(enc(*txn(2, 200, ins(2)), rel_orders(extra=True),
                               *txn(3, 300, Insert(ORDERS, (t(3), None, None, t("f")))))))
    assert [v.version for v, _ in cs.table_versions] == [0, 1]
    assert cs.tables["public.orders"].column("flag").to_pylist() == [None, False]


def test_lsn_above_2_63_wraps_to_int64_like_the_reference():
    big = (1 << 63) + 5
    cs = decode(rel_orders(), *txn(7, big, ins(1)))
    commit_lsn = col(cs, "public.orders", "_commit_lsn")
    assert commit_lsn == [big - (1 << 64)]          # the same 64 bits, as int64
    assert commit_lsn[0] & 0xFFFFFFFFFFFFFFFF == big


@pytest.mark.parametrize("where", ["begin", "stream_commit", "commit_prepared"])
def test_commit_timestamp_out_of_range_points_at_the_field(where):
    huge = (1 << 63) - 1
    if where == "begin":
        msgs, offset, mtype = [rel_orders()] + txn(1, 100, ins(1), ts=huge), 9, "B"
    elif where == "stream_commit":
        X = 77
        msgs = [rel_orders(), StreamStart(X, 1), ins(1, xid=X), StreamStop(),
                StreamCommit(X, 0, 300, 308, huge)]
        offset, mtype = 22, "c"
    else:
        msgs = [rel_orders()] + prepared("g1", 5, 200, ins(1)) + [
            CommitPrepared(0, 400, 408, huge, 5, "g1")]
        offset, mtype = 18, "K"
    err = _error(Decoder(), msgs)
    assert "commit timestamp" in err.reason
    assert (err.offset, err.message_type) == (offset, mtype)
    assert err.message_index == len(msgs) - (1 if where != "begin" else 3)
