"""A Decoder's helper thread (src/helper_thread.pxi): with both outputs and ``threads=2``,
each window's change-event rows are written on a second thread while the calling thread
writes the typed rows of the same changes. The output must be exactly what one thread
writes, and what the pure-Python reference writes: every typed table, the change-event
table, the same DecodeError (index, offset, type) with the same output before it when a
message is damaged, whatever the feed boundaries; the windows of small transactions,
the parts of large ones, and those of streamed and prepared transactions alike.

The helper takes only feeds and windows large enough to pay for the hand-over; these
tests lower both limits to nothing so that every window of their small streams goes
through it (and count that it did)."""

from __future__ import annotations

import os
import sys
import threading

import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from tests.decoder.test_decoder_parity import (
    IMPLS, allowed_cuts, assert_changesets_equal, assert_results_equal, assert_tables_equal, damage_one,
    feed_both, make_decoder, run_feed, split,
)
from tests.decoder.test_txn_window import WINDOW_SETTINGS, pending_txns, small_txns
from tests.support.captures import FIXTURE_NAMES, load_fixture

native = pytest.importorskip("pgoutput_fast._native")


def Decoder(**kwargs):  # noqa: N802 - the native core's, whatever PGOUTPUT_FAST_IMPL says
    return make_decoder(IMPLS["native"], **kwargs)


@pytest.fixture(autouse=True)
def every_window_on_the_helper():
    """Every window and run on the helper (kept, whatever its hand-overs gain), the
    calling thread's share chosen by times."""
    old = native._set_helper_limits(0, 1)
    guard = native._set_helper_guard(0)
    rows = native._set_export_beside_rows(1)     # (export(): the event names on the helper)
    try:
        yield
    finally:
        native._set_helper_limits(*old)
        native._set_helper_guard(guard)
        native._set_export_beside_rows(rows)


def feed_threads(batches, threads, **kwargs):
    dec = make_decoder(IMPLS["native"], threads=threads, **kwargs)
    assert dec.threads == threads
    return [run_feed(dec, pa.array(m, pa.binary()), list(l)) for m, l in batches]


# the calling thread's share of a window's events (-1: each Decoder's own, from its times)
SHARES = st.sampled_from([-1.0, 0.0, 0.3, 0.6, 0.95])


def assert_helper_changes_nothing(batches, share=-1.0, **kwargs):
    """The native decoder with the helper and without, feed by feed, then the
    reference (with the helper) against the native: returns the helper's jobs run.
    share: of each window's changes, the part whose events the calling thread writes
    beside the helper's (fixed for the test; -1 as a Decoder chooses)."""
    jobs = native._helper_stats()[1]
    old = native._set_helper_share(share)
    try:
        two = feed_threads(batches, 2, **kwargs)
        jobs = native._helper_stats()[1] - jobs
        one = feed_threads(batches, 1, **kwargs)
        for k, (a, b) in enumerate(zip(two, one)):
            assert_results_equal(a, b, f"feed {k}, threads 2 / 1")
        feed_both(batches, threads=2, **kwargs)
    finally:
        native._set_helper_share(old)
    return jobs


def _cuts(msgs, data):
    return allowed_cuts(msgs, data.draw(st.lists(st.integers(1, max(1, len(msgs) - 1)), max_size=3,
                                                 unique=True)) if len(msgs) > 1 else [])


@WINDOW_SETTINGS
@given(stream=small_txns(), data=st.data())
def test_small_transactions_same_with_and_without_helper(stream, data):
    msgs, lsns = stream
    options = data.draw(st.sampled_from([{}, {"binary_unknown": True}]))
    cuts = _cuts(msgs, data)
    assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), data.draw(SHARES), **options)


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=25), data=st.data())
def test_small_transactions_damaged_same_error_with_helper(stream, data):
    """A damaged message inside a window the helper wrote the events of: the window is
    undone (both outputs) and the message-at-a-time path reports the error."""
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_helper_changes_nothing([(msgs, lsns)], data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=3, plain_changes=300, relids=(16384, 16390, 16400)), data=st.data())
def test_large_transactions_same_with_and_without_helper(stream, data):
    """Parts of large open transactions (window_part_run), cut by feeds too."""
    msgs, lsns = stream
    cuts = _cuts(msgs, data)
    assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=2, plain_changes=300, relids=(16384, 16390)), data=st.data())
def test_large_transactions_damaged_same_error_with_helper(stream, data):
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_helper_changes_nothing([(msgs, lsns)], data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=3, plain_changes=300, relids=(16384,)), data=st.data())
def test_one_relation_runs_same_with_and_without_helper(stream, data):
    """Large transactions of one relation: the block writers' runs (_run_blocks), the
    events' blocks on the helper beside the typed ones, both cut back to where the
    first stops ('u' values, a short block, a Truncate or Relation among them)."""
    msgs, lsns = stream
    cuts = _cuts(msgs, data)
    assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=small_txns(max_txns=2, plain_changes=300, relids=(16384,)), data=st.data())
def test_one_relation_runs_damaged_same_error_with_helper(stream, data):
    """A damaged change in a run: the typed rows raise it (the events cut back to it),
    or the events' writer stops first and the row-wise path raises it, as without the
    helper."""
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_helper_changes_nothing([(msgs, lsns)], data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=pending_txns(relids=(16384,)), data=st.data())
def test_one_relation_pending_runs_same_with_and_without_helper(stream, data):
    """Streamed and prepared transactions of one relation: their runs checked on
    arrival through _run_blocks, into the spool's rows."""
    msgs, lsns = stream
    cuts = _cuts(msgs, data)
    assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), data.draw(SHARES))


@WINDOW_SETTINGS
@given(stream=pending_txns(), data=st.data())
def test_pending_transactions_same_with_and_without_helper(stream, data):
    """Streamed and prepared transactions' parts (pending_part_run: the events go to
    the spool's rows, the typed rows to its builders or a dry run) and the replays at
    their commits (replay_part_run)."""
    msgs, lsns = stream
    options = data.draw(st.sampled_from([{}, {"max_pending_bytes": 3000}]))
    cuts = _cuts(msgs, data)
    assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))), data.draw(SHARES), **options)


@WINDOW_SETTINGS
@given(stream=pending_txns(max_steps=6), data=st.data())
def test_pending_transactions_damaged_same_error_with_helper(stream, data):
    msgs, lsns = stream
    damage_one(msgs, data)
    assert_helper_changes_nothing([(msgs, lsns)], data.draw(SHARES))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_real_captures_same_with_and_without_helper(name):
    """Every real capture, whole: the helper wrote events of some window of each one
    that has windows (plain transactions of changes)."""
    lsns, msgs = load_fixture(name)
    for share in (-1.0, 0.0, 0.5, 0.95):
        windows = native._txn_windows_taken() + native._txn_parts_taken()
        own = native._helper_stats()[2]
        jobs = assert_helper_changes_nothing([(list(msgs), list(lsns))], share)
        windows = native._txn_windows_taken() + native._txn_parts_taken() - windows
        own = native._helper_stats()[2] - own
        if windows:
            assert jobs > 0
            if share >= 0:                  # (-1: as the times say)
                assert (own > 0) == (share > 0), (share, own)   # (the windows here are whole)


def test_helper_only_with_both_outputs_and_large_enough_feeds():
    lsns, msgs = load_fixture(FIXTURE_NAMES[0])
    batch = pa.array(list(msgs), pa.binary())
    for kwargs, used in (({}, True), ({"events": False}, False), ({"tables": False}, False)):
        jobs = native._helper_stats()[1]
        Decoder(threads=2, **kwargs).feed(batch, list(lsns))
        assert (native._helper_stats()[1] > jobs) == used, kwargs
    native._set_helper_limits(batch.nbytes + 1, 1)        # a smaller feed: not taken
    jobs = native._helper_stats()[1]
    Decoder(threads=2).feed(batch, list(lsns))
    assert native._helper_stats()[1] == jobs
    jobs = native._helper_stats()[1]
    Decoder(threads=1).feed(batch, list(lsns))
    assert native._helper_stats()[1] == jobs


def test_threads_argument_and_environment(monkeypatch):
    for bad in (0, -1):
        with pytest.raises(ValueError, match="threads must be 1 or more"):
            Decoder(threads=bad)
    monkeypatch.setenv("PGOUTPUT_FAST_DECODER_THREADS", "1")
    assert Decoder().threads == 1
    assert Decoder(threads=2).threads == 2                 # (the argument wins)
    monkeypatch.setenv("PGOUTPUT_FAST_DECODER_THREADS", "3")
    assert Decoder().threads == 3
    monkeypatch.setenv("PGOUTPUT_FAST_DECODER_THREADS", "two")
    with pytest.raises(ValueError, match="PGOUTPUT_FAST_DECODER_THREADS='two' is not a whole number"):
        Decoder()
    monkeypatch.delenv("PGOUTPUT_FAST_DECODER_THREADS")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert Decoder().threads == (2 if cpus >= 2 else 1)


def _decode_all_fixtures(threads):
    out = []
    for name in FIXTURE_NAMES:
        lsns, msgs = load_fixture(name)
        cs = Decoder(threads=threads).feed(pa.array(list(msgs), pa.binary()), list(lsns))
        out.append((cs.events, [(v.qualified_name, t) for v, t in cs.table_versions]))
    return out


def test_decoders_on_many_threads_each_with_a_helper():
    """Eight threads at once, each Decoder with its helper: the process's idle list
    hands each feed its own (more helpers start), and each result is one thread's."""
    want = _decode_all_fixtures(1)
    got: dict = {}
    errors: list = []

    def work(k):
        try:
            got[k] = _decode_all_fixtures(2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(8):
        assert_same_decodes(got[k], want, f"thread {k}")


def assert_same_decodes(got, want, what):
    assert len(got) == len(want)
    for (ea, ta), (eb, tb) in zip(got, want):
        assert_tables_equal(ea, eb, f"{what}: events")
        assert [n for n, _ in ta] == [n for n, _ in tb], what
        for (n, a), (_, b) in zip(ta, tb):
            assert_tables_equal(a, b, f"{what}: {n}")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_forked_child_starts_its_own_helper():
    """A child forked after the parent's helpers ran (a Spark worker forks from its
    daemon) has none of those threads: it starts its own, and decodes as the parent."""
    want = _decode_all_fixtures(1)
    _decode_all_fixtures(2)                                 # (the parent's helpers exist)
    assert native._helper_stats()[0] >= 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                            # the child
        code = 1
        try:
            os.close(r)
            assert native._helper_stats()[0] == 0
            got = _decode_all_fixtures(2)
            try:
                assert_same_decodes(got, want, "child")
                ok = True
            except AssertionError:
                ok = False
            started, jobs = native._helper_stats()[:2]
            os.write(w, f"{int(ok)} {started} {jobs}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        reply = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (status, reply)
    ok, started, jobs = map(int, reply.split())
    assert ok == 1
    assert started >= 1 and jobs >= 1


def test_reference_takes_the_argument():
    from pgoutput_fast import _reference
    dec = make_decoder(_reference, threads=2)
    assert dec.threads == 1
    with pytest.raises(ValueError):
        make_decoder(_reference, threads=0)
    assert sys.modules.get("pgoutput_fast._native") is native


def test_helper_given_back_when_it_gains_nothing():
    """A feed whose hand-overs gain nothing (the machine's cores busy with other work;
    here every hand-over is taken as such) gives its helper back after two, and writes
    the rest on the calling thread: the output is one thread's all the same."""
    lsns, msgs = load_fixture("v1_binary")
    batch = pa.array(list(msgs), pa.binary())
    assert native._set_helper_guard(2) == 0
    dropped, jobs = native._helper_stats()[3], native._helper_stats()[1]
    windows = native._txn_windows_taken()
    got = make_decoder(IMPLS["native"], threads=2).feed(batch, list(lsns))
    windows = native._txn_windows_taken() - windows
    want = make_decoder(IMPLS["native"], threads=1).feed(batch, list(lsns))
    assert_results_equal(("ok", got), ("ok", want), "helper given back")
    assert windows >= 3
    assert native._helper_stats()[3] == dropped + 1
    assert native._helper_stats()[1] == jobs + 2               # (two hand-overs, then none)
    native._set_helper_guard(1)                                 # (the real guard: same output)
    got = make_decoder(IMPLS["native"], threads=2).feed(batch, list(lsns))
    assert_results_equal(("ok", got), ("ok", want), "guard on")


@WINDOW_SETTINGS
@given(stream=small_txns(), data=st.data())
def test_own_share_that_does_not_fit_goes_on_row_wise(stream, data):
    """The calling thread's share of a window's events, when appending it after the
    helper's rows fails as it does past 2 GiB of int32 offsets: the share is dropped and
    the writer goes on over those changes from the helper's end; the output is one
    thread's all the same (the row-wise path is what reports a change that does not
    fit)."""
    msgs, lsns = stream
    cuts = _cuts(msgs, data)
    shares = native._helper_stats()[2]
    old = native._set_helper_append_fault(True)
    try:
        assert old is False
        assert_helper_changes_nothing(list(zip(split(msgs, cuts), split(lsns, cuts))),
                                      data.draw(st.sampled_from([0.3, 0.6, 0.95])))
    finally:
        native._set_helper_append_fault(False)
    assert native._helper_stats()[2] == shares                  # (no share was appended)



def _pg_date(days):
    import datetime
    return (datetime.date(2000, 1, 1) + datetime.timedelta(days=days)).isoformat()


def _pg_timestamptz(us):
    """timestamptz_out's text (DateStyle ISO, TimeZone UTC) of µs from 2000-01-01."""
    import datetime
    d = datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=us)
    s = d.strftime("%Y-%m-%d %H:%M:%S")
    if d.microsecond:
        s += f".{d.microsecond:06d}".rstrip("0")
    return s + "+00"


def _dates_stream(ntx=400, per_tx=50, seed=7):
    """Binary-mode transactions of a table whose date and timestamptz values all differ
    (a date of birth, an event time spread over years): each column's memo of its last
    day or hour is rewritten at nearly every value. Returns the messages, their LSNs and
    each insert's (id, date, timestamptz) text as PostgreSQL prints them."""
    import random
    import struct

    from pgoutput_fast.encode import encode_message
    from pgoutput_fast.messages import Begin, Commit, Insert, Relation, RelationColumn, Value

    rnd = random.Random(seed)
    rel = Relation(relid=16500, nspname="public", relname="people", replident="d",
                   columns=(RelationColumn(flags=1, name="id", type_oid=23, typmod=-1),
                            RelationColumn(flags=0, name="born", type_oid=1082, typmod=-1),
                            RelationColumn(flags=0, name="seen", type_oid=1184, typmod=-1)))
    msgs, lsns, want = [encode_message(rel)], [0], []
    lsn, key = 1000, 0
    for x in range(ntx):
        msgs.append(encode_message(Begin(final_lsn=lsn + per_tx + 1, commit_ts=lsn, xid=900 + x)))
        lsns.append(lsn)
        for _ in range(per_tx):
            key += 1
            lsn += 1
            days = rnd.randrange(-40000, 40000)
            us = rnd.randrange(-10**15, 10**15)
            msgs.append(encode_message(Insert(relid=16500, new=(
                Value("b", struct.pack(">i", key)), Value("b", struct.pack(">i", days)),
                Value("b", struct.pack(">q", us))))))
            lsns.append(lsn)
            want.append([("id", str(key)), ("born", _pg_date(days)), ("seen", _pg_timestamptz(us))])
        lsn += 1
        msgs.append(encode_message(Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 1, commit_ts=lsn)))
        lsns.append(lsn)
        lsn += 10
    return msgs, lsns, want


def _names_stream(schemas, tables, ntx=300, seed=3):
    """Transactions of 1-3 inserts into relations of the given schema and table names
    (one relation per pair), in a random order. Returns the messages, their LSNs and each
    insert's (schema, table) as the Relation messages name them."""
    import random
    import struct

    from pgoutput_fast.encode import encode_message
    from pgoutput_fast.messages import Begin, Commit, Insert, Relation, RelationColumn, Value

    rnd = random.Random(seed)
    rels = [Relation(relid=17000 + i, nspname=sch, relname=tab, replident="d",
                     columns=(RelationColumn(flags=1, name="id", type_oid=23, typmod=-1),))
            for i, (sch, tab) in enumerate(zip(schemas, tables))]
    msgs, lsns, want = [encode_message(r) for r in rels], [0] * len(rels), []
    lsn = 1000
    for x in range(ntx):
        k = rnd.randint(1, 3)
        msgs.append(encode_message(Begin(final_lsn=lsn + k + 1, commit_ts=lsn, xid=900 + x)))
        lsns.append(lsn)
        for _ in range(k):
            rel = rnd.choice(rels)
            lsn += 1
            msgs.append(encode_message(Insert(relid=rel.relid, new=(Value("b", struct.pack(">i", lsn)),))))
            lsns.append(lsn)
            want.append((rel.nspname, rel.relname))
        lsn += 1
        msgs.append(encode_message(Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 1, commit_ts=lsn)))
        lsns.append(lsn)
        lsn += 10
    return msgs, lsns, want


@pytest.mark.parametrize("schemas,tables", [
    (["public"] * 3, ["orders", "order_lines_by_customer", "t"]),          # one schema: one run
    (["a", "b", "a"], ["x" * 32, "y" * 63, "z" * 17]),                    # 32 and 64-byte copies
    (["s" * 70, "public", "ü" * 20], ["t" * 65, "t2", "ü" * 40]),         # past 64 bytes; UTF-8
])
def test_event_names_written_beside_the_typed_export(schemas, tables):
    """export() after a feed whose helper paid its way writes the change-event table's
    schema and table columns on the helper while the calling thread exports the typed
    tables: each row names the relation of its change, as without the helper."""
    msgs, lsns, want = _names_stream(schemas, tables)
    batch = pa.array(msgs, pa.binary())
    exports = native._helper_stats()[4]
    two = make_decoder(IMPLS["native"], threads=2).feed(batch, lsns)
    assert native._helper_stats()[4] == exports + 1               # (the names on the helper)
    one = make_decoder(IMPLS["native"], threads=1).feed(batch, lsns)
    assert native._helper_stats()[4] == exports + 1
    for cs in (two, one):
        got = list(zip(cs.events.column("schema").to_pylist(), cs.events.column("table").to_pylist()))
        assert got == want
    assert_changesets_equal(two, one, "threads 2 / 1")
    # (below the rows that pay for the hand-over: the names on this thread, the same)
    old = native._set_export_beside_rows(10**9)
    try:
        assert_changesets_equal(make_decoder(IMPLS["native"], threads=2).feed(batch, lsns), one,
                                "threads 2, names here / threads 1")
        assert native._helper_stats()[4] == exports + 1
    finally:
        native._set_export_beside_rows(old)


@pytest.mark.parametrize("share", [0.3, 0.5])
def test_own_share_formats_with_its_own_memos(share):
    """The calling thread's share of a window's events formats dates and timestamps
    while the helper formats the rest of the same columns: each thread keeps its own memo
    of the last day or hour (one memo shared by both was rewritten under the other's
    reads: ThreadSanitizer found it, and torn text reached the output). Every value here
    differs, so both threads rewrite their memo at nearly every value; each row's text
    must be what PostgreSQL prints for the values sent."""
    msgs, lsns, want = _dates_stream()
    batch = pa.array(msgs, pa.binary())
    old = native._set_helper_share(share)
    try:
        shares = native._helper_stats()[2]
        for attempt in range(3):
            cs = make_decoder(IMPLS["native"], threads=2).feed(batch, lsns)
            got = cs.events.column("after").to_pylist()
            wrong = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
            assert len(got) == len(want) and not wrong, (
                f"decode {attempt}: {len(wrong)} rows differ, the first: {got[wrong[0]]} for {want[wrong[0]]}")
        assert native._helper_stats()[2] > shares                   # (the share ran)
    finally:
        native._set_helper_share(old)


def _windows_stream(seed=11, phases=((0, 1), (2, 0), (0, 1, 2)), one_txn=False):
    """Plain transactions of 1-60 changes, more than WIN_MAX_CHANGES (4,096) in each
    phase, so that windows end at their limit and the next one starts at once (the one
    the writer scans ahead). Each phase's transactions touch its relations only (of three
    defined first): a relation the window before did not touch (the scan ahead stops
    for it), one it touched that this one does not, and a phase that starts with a
    transaction redefining a relation (a Relation message in it: the usual path).
    one_txn: all of it one transaction (its parts, window_part_run, 4,096 changes each,
    are scanned ahead the same way; the Relation message then ends a part). Returns
    the messages, their LSNs, and each relation's changes as sent ((op, id) in stream
    order), per relid."""
    import random
    import struct

    from pgoutput_fast.encode import encode_message
    from pgoutput_fast.messages import Begin, Commit, Delete, Insert, Relation, RelationColumn, Update, Value

    rnd = random.Random(seed)

    def relation(i, extra=False):
        cols = [RelationColumn(flags=1, name="id", type_oid=23, typmod=-1),
                RelationColumn(flags=0, name="note", type_oid=25, typmod=-1),
                RelationColumn(flags=0, name="amount", type_oid=20, typmod=-1)]
        if extra:
            cols.append(RelationColumn(flags=0, name="added", type_oid=16, typmod=-1))
        return Relation(relid=18000 + i, nspname="public", relname=f"r{i}", replident="d", columns=tuple(cols))

    rels = [relation(i) for i in range(3)]
    msgs, lsns = [encode_message(r) for r in rels], [0] * len(rels)
    ids = {r.relid: [] for r in rels}
    lsn, xid, n = 1000, 700, 0

    def row(rel, v):
        vals = [Value("b", struct.pack(">i", v)), Value("t", f"note {v}".encode()),
                Value("t", str(v * 7).encode())]
        if len(rel.columns) == 4:
            vals.append(Value("t", b"t" if v % 2 else b"f"))
        return tuple(vals)

    if one_txn:
        first = len(msgs)
        msgs.append(None)                    # (its Begin, once its final LSN is known)
        lsns.append(lsn)
    for p, phase in enumerate(phases):
        redefine = p == len(phases) - 1
        changes = 0
        while changes < 5000:
            k = rnd.randint(1, 60)
            if not one_txn:
                msgs.append(encode_message(Begin(final_lsn=lsn + k + 1, commit_ts=lsn, xid=xid)))
                lsns.append(lsn)
            if redefine:
                rels[0] = relation(0, extra=True)
                msgs.append(encode_message(rels[0]))
                lsns.append(0)
                redefine = False
            for _ in range(k):
                rel = rels[rnd.choice(phase)]
                lsn += 1
                n += 1
                op = rnd.random()
                if op < 0.7 or not ids[rel.relid]:
                    msgs.append(encode_message(Insert(relid=rel.relid, new=row(rel, n))))
                    ids[rel.relid].append(("c", n))
                elif op < 0.9:
                    msgs.append(encode_message(Update(relid=rel.relid, old_kind=None, old=None, new=row(rel, n))))
                    ids[rel.relid].append(("u", n))
                else:
                    key = (Value("b", struct.pack(">i", n)),) + (None,) * (len(rel.columns) - 1)
                    msgs.append(encode_message(Delete(relid=rel.relid, old_kind="K", old=key)))
                    ids[rel.relid].append(("d", n))
                lsns.append(lsn)
            changes += k
            if not one_txn:
                lsn += 1
                msgs.append(encode_message(Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 1, commit_ts=lsn)))
                lsns.append(lsn)
                lsn += 10
                xid += 1
    if one_txn:
        lsn += 1
        msgs[first] = encode_message(Begin(final_lsn=lsn, commit_ts=lsns[first], xid=xid))
        msgs.append(encode_message(Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 1, commit_ts=lsn)))
        lsns.append(lsn)
    return msgs, lsns, ids


@pytest.mark.parametrize("share", [-1.0, 0.0, 0.5])
@pytest.mark.parametrize("cuts", [0, 2])       # (pieces of more than a window)
@pytest.mark.parametrize("one_txn", [False, True])
def test_next_window_scanned_ahead(share, cuts, one_txn):
    """With the helper, the next window's scan (or the next part's, inside one large
    transaction) is made while this one is written (on the helper after its events when
    the calling thread has no share of them, else on the calling thread after its share),
    from this window's relations: the output is what one thread writes, with the scan
    ahead and without, fed whole or cut in pieces, and each table's rows are the changes
    sent to its relation (operation and id)."""
    msgs, lsns, ids = _windows_stream(one_txn=one_txn)
    at = [len(msgs) * k // (cuts + 1) for k in range(1, cuts + 1)]
    batches = list(zip(split(msgs, at), split(lsns, at)))
    old = native._set_helper_share(share)
    try:
        taken = native._scan_ahead_taken()
        two = feed_threads(batches, 2)
        assert native._scan_ahead_taken() > taken                    # (the path ran)
        one = feed_threads(batches, 1)
        was = native._set_scan_ahead(False)
        try:
            taken = native._scan_ahead_taken()
            off = feed_threads(batches, 2)
            assert native._scan_ahead_taken() == taken
        finally:
            native._set_scan_ahead(was)
    finally:
        native._set_helper_share(old)
    for k, (a, b, c) in enumerate(zip(two, one, off)):
        assert a[0] == "ok", a[:2]
        assert_results_equal(a, b, f"feed {k}, threads 2 / 1")
        assert_results_equal(c, b, f"feed {k}, no scan ahead / threads 1")
    got = {}
    for _, cs in two:
        for version, table in cs.table_versions:
            got.setdefault(version.relid, []).extend(
                zip(table.column("_op").to_pylist(), table.column("id").to_pylist()))
    assert got == ids


@pytest.mark.parametrize("where", [0.45, 0.6, 0.8])
@pytest.mark.parametrize("one_txn", [False, True])
def test_damaged_message_in_a_window_scanned_ahead(where, one_txn):
    """A message cut short inside a window (or part) whose scan was made ahead: the same
    error and the same output before it as one thread."""
    msgs, lsns, _ = _windows_stream(one_txn=one_txn)
    i = int(len(msgs) * where)
    while msgs[i][:1] not in (b"I", b"U"):
        i += 1
    msgs[i] = msgs[i][:-3]
    batch = [(msgs, lsns)]
    two = feed_threads(batch, 2)
    one = feed_threads(batch, 1)
    assert two[0][0] == "error" and two[0][1][0] == i
    assert_results_equal(two[0], one[0], "threads 2 / 1")


def test_windows_of_many_relations_with_the_helper():
    """Windows of more relations than half of those a window holds (64) are not scanned
    ahead (seeded with all of them, the next window would end at the first relation past
    the limit): the output is still what one thread writes, and the windows are taken."""
    import random
    import struct

    from pgoutput_fast.encode import encode_message
    from pgoutput_fast.messages import Begin, Commit, Insert, Relation, RelationColumn, Value

    rnd = random.Random(5)
    rels = [Relation(relid=19000 + i, nspname="public", relname=f"m{i}", replident="d",
                     columns=(RelationColumn(flags=1, name="id", type_oid=23, typmod=-1),))
            for i in range(48)]
    msgs, lsns = [encode_message(r) for r in rels], [0] * len(rels)
    lsn = 1000
    for x in range(700):
        k = rnd.randint(5, 20)
        msgs.append(encode_message(Begin(final_lsn=lsn + k + 1, commit_ts=lsn, xid=900 + x)))
        lsns.append(lsn)
        for _ in range(k):
            lsn += 1
            msgs.append(encode_message(Insert(relid=rnd.choice(rels).relid,
                                              new=(Value("b", struct.pack(">i", lsn)),))))
            lsns.append(lsn)
        lsn += 1
        msgs.append(encode_message(Commit(flags=0, commit_lsn=lsn, end_lsn=lsn + 1, commit_ts=lsn)))
        lsns.append(lsn)
        lsn += 10
    windows, ahead = native._txn_windows_taken(), native._scan_ahead_taken()
    two = feed_threads([(msgs, lsns)], 2)
    assert native._txn_windows_taken() - windows >= 2
    assert native._scan_ahead_taken() == ahead          # (48 relations in each window)
    one = feed_threads([(msgs, lsns)], 1)
    assert two[0][0] == "ok"
    assert_results_equal(two[0], one[0], "threads 2 / 1")
