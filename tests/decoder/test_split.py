"""pgoutput_fast.split: a stream cut into pieces inside open streamed and prepared
transactions, each piece decoded by its own Decoder (rewritten by its PiecePlan), gives
exactly the rows of one Decoder: same values and metadata, seq included (row order
aside)."""

from __future__ import annotations

import importlib
import os
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

import pgoutput_fast
from pgoutput_fast import protocol as P
from pgoutput_fast.encode import encode_message
from pgoutput_fast.messages import (Insert, Origin, Relation, RelationColumn, StreamAbort,
                                    StreamCommit, StreamStart, StreamStop, Value, Begin, Commit,
                                    Delete)
from pgoutput_fast.parallel import _catalogs_at, _concat_tables
from pgoutput_fast.split import merge_facts, piece_facts, plan_pieces, stream_detail
from tests.support.captures import FIXTURE_NAMES, load_fixture
from tests.support.tables import assert_values_equal


def _boundaries(msgs):
    """Positions where a segment may end (nothing but streamed/prepared work open)."""
    g = P.Grammar()
    out = []
    for i, m in enumerate(msgs):
        g.step(bytes(m))
        if g.at_boundary and 0 < i + 1 < len(msgs):
            out.append(i + 1)
    return out


def _sorted(t, commit, seq):
    if t is None or t.num_rows == 0:
        return t
    return t.sort_by([(commit, "ascending"), (seq, "ascending")])


def decode_in_pieces(msgs, lsns, cuts, plain=None, halves=False, **options):
    """Decode ``msgs`` cut at ``cuts`` (which must end where nothing is open, or, with
    ``plain``, the PlainCut each piece starts at) piece by piece, each through its
    PiecePlan (round-tripped through JSON when ``plain`` is given); ``halves``: each
    piece read in two batches, as a task's reads may cut it. Returns (events,
    {(relid, version): typed table}) sorted by (commit_lsn, seq)."""
    from pgoutput_fast import _impl
    from pgoutput_fast.split import PiecePlan, add_plain_cuts

    arr = pa.array([bytes(m) for m in msgs], pa.binary())
    lsn = pa.array(lsns, pa.int64())
    bounds = [0] + list(cuts) + [len(msgs)]
    pieces = [(a, b) for a, b in zip(bounds, bounds[1:])]
    facts = [piece_facts(arr.slice(a, b - a), lsn.slice(a, b - a).to_numpy(), range(a, b))
             for a, b in pieces]

    def detail(k, xid):
        a, b = pieces[k]
        return stream_detail(arr.slice(a, b - a), range(a, b), xid)

    plans = plan_pieces(facts, detail)
    if plain is not None:
        add_plain_cuts(plans, plain)
        plans = [PiecePlan.from_dict(p.to_dict()) for p in plans]
    catalogs, _order, _ = _catalogs_at(arr, lsn.to_numpy(), list(cuts),
                                       pgoutput_fast.RelationCatalog(), _impl.decode_message)
    events, tables = [], {}
    for (a, b), plan, cat in zip(pieces, plans, catalogs):
        dec = pgoutput_fast.Decoder(cat.copy(), **options)
        reads = [(a, (a + b) // 2), ((a + b) // 2, b)] if halves else [(a, b)]
        parts = [p for x, y in reads for p in plan.rewrite(arr.slice(x, y - x), lsn.slice(x, y - x),
                                                           range(x, y))] + plan.finish()
        for data, l in parts:
            cs = dec.feed(data, l)
            if cs.events is not None and cs.events.num_rows:
                events.append(plan.shift_seq(cs.events, "commit_lsn", "seq"))
            for v, t in cs.table_versions:
                if t.num_rows:
                    tables.setdefault((v.relid, v.version), []).append(
                        plan.shift_seq(t, "_commit_lsn", "_seq"))
        assert dec.pending().get("open_transaction") is None
    ev = _sorted(_concat_tables(events), "commit_lsn", "seq") if events else None
    return ev, {k: _sorted(_concat_tables(v), "_commit_lsn", "_seq") for k, v in tables.items()}


def one_decoder(msgs, lsns, **options):
    cs = pgoutput_fast.Decoder(**options).feed(list(msgs), list(lsns))
    ev = _sorted(cs.events, "commit_lsn", "seq") if cs.events is not None and cs.events.num_rows else None
    return ev, {(v.relid, v.version): _sorted(t, "_commit_lsn", "_seq")
                for v, t in cs.table_versions if t.num_rows}


def assert_same(got, want, what):
    gev, gt = got
    wev, wt = want
    if wev is None:
        assert gev is None or gev.num_rows == 0, what
    else:
        assert gev is not None and gev.num_rows == wev.num_rows, what
        assert_values_equal(gev.select(wev.column_names), wev, what)
    assert set(gt) == set(wt), what
    for k in wt:
        a, b = gt[k], wt[k]
        assert a.num_rows == b.num_rows, (what, k)
        assert_values_equal(a.cast(b.schema), b, (what, k))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("every", [1, 3, 50])
def test_fixture_cut_everywhere(name, every):
    """Real captures cut at every ``every``-th position where a segment may end: the
    union of the pieces' rows is one Decoder's."""
    lsns, msgs = load_fixture(name)
    cuts = _boundaries(msgs)[::every]
    want = one_decoder(msgs, lsns)
    assert_same(decode_in_pieces(msgs, lsns, cuts), want, f"{name} every {every}")


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if n.startswith(("v2", "v3"))])
def test_fixture_random_cuts(name):
    lsns, msgs = load_fixture(name)
    pos = _boundaries(msgs)
    rng = random.Random(name)
    want = one_decoder(msgs, lsns)
    for _ in range(20):
        cuts = sorted(rng.sample(pos, rng.randint(1, min(40, len(pos)))))
        assert_same(decode_in_pieces(msgs, lsns, cuts), want, f"{name} {cuts}")


# -- synthetic streams: nested subtransactions aborted across pieces, origins ----------

_REL = Relation(relid=16400, nspname="public", relname="t", replident="d",
                columns=(RelationColumn(flags=1, name="id", type_oid=23, typmod=-1),
                         RelationColumn(flags=0, name="v", type_oid=25, typmod=-1)))


@st.composite
def streams(draw):
    """A stream of plain transactions and streamed ones (several open at once), with
    subtransactions (nested ids), subtransaction aborts, origins, commits and aborts."""
    out = [(0, encode_message(_REL))]
    lsn = 1000
    open_: dict = {}                # xid -> {"subs": [...], "started": bool}
    next_xid = 700
    key = 0
    for _ in range(draw(st.integers(3, 40))):
        lsn += 10
        choice = draw(st.sampled_from(["plain", "new", "block", "block", "block", "end"]))
        if choice == "plain":
            next_xid += 1
            out.append((lsn, encode_message(Begin(final_lsn=lsn + 5, commit_ts=lsn, xid=next_xid))))
            key += 1
            out.append((lsn + 1, encode_message(Insert(relid=16400, new=(
                Value("t", str(key).encode()), Value("t", b"plain"))))))
            out.append((lsn + 5, encode_message(Commit(flags=0, commit_lsn=lsn + 5,
                                                       end_lsn=lsn + 6, commit_ts=lsn))))
        elif choice == "new" or (choice == "block" and not open_):
            next_xid += 10
            open_[next_xid] = {"subs": [next_xid], "started": False,
                               "origin": draw(st.booleans())}
        elif choice == "block":
            xid = draw(st.sampled_from(sorted(open_)))
            s = open_[xid]
            out.append((lsn, encode_message(StreamStart(xid=xid, first_segment=int(not s["started"])))))
            if not s["started"] and s["origin"]:
                out.append((0, encode_message(Origin(origin_lsn=lsn, name=f"origin{xid}"))))
            s["started"] = True
            for _ in range(draw(st.integers(0, 6))):
                lsn += 1
                act = draw(st.sampled_from(["ins", "ins", "del", "sub", "rel"]))
                if act == "sub":
                    s["subs"].append(s["subs"][-1] + 1 if s["subs"][-1] < xid + 9 else xid + 1)
                    continue
                sub = draw(st.sampled_from(s["subs"]))
                if act == "rel":
                    out.append((0, encode_message(_REL._replace(xid=sub))))
                    continue
                key += 1
                if act == "ins":
                    m = Insert(relid=16400, new=(Value("t", str(key).encode()),
                                                 Value("t", f"s{xid}/{sub}".encode())), xid=sub)
                else:
                    m = Delete(relid=16400, old_kind="K",
                               old=(Value("t", str(key - 1).encode()), None), xid=sub)
                out.append((lsn, encode_message(m)))
            out.append((0, encode_message(StreamStop())))
            # subtransaction aborts come between blocks
            if len(s["subs"]) > 1 and draw(st.booleans()):
                sub = draw(st.sampled_from(s["subs"][1:]))
                out.append((0, encode_message(StreamAbort(xid=xid, subxid=sub))))
        else:
            ended = [x for x in open_ if open_[x]["started"]]
            if not ended:
                continue
            xid = draw(st.sampled_from(ended))
            del open_[xid]
            if draw(st.integers(0, 4)) == 0:
                out.append((0, encode_message(StreamAbort(xid=xid, subxid=xid))))
            else:
                out.append((lsn, encode_message(StreamCommit(xid=xid, flags=0, commit_lsn=lsn,
                                                             end_lsn=lsn + 1, commit_ts=lsn))))
    for xid, s in sorted(open_.items()):
        if s["started"]:
            lsn += 10
            out.append((lsn, encode_message(StreamCommit(xid=xid, flags=0, commit_lsn=lsn,
                                                         end_lsn=lsn + 1, commit_ts=lsn))))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(streams(), st.data())
def test_synthetic_streams_cut_anywhere(stream, data):
    lsns = [lsn for lsn, _ in stream]
    msgs = [m for _, m in stream]
    want = one_decoder(msgs, lsns)
    pos = _boundaries(msgs)
    cuts = sorted(data.draw(st.sets(st.sampled_from(pos), max_size=len(pos))) if pos else [])
    assert_same(decode_in_pieces(msgs, lsns, cuts), want, f"cuts {cuts}")


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if n.startswith(("v2", "v3"))])
def test_merged_facts_are_the_facts_of_the_run(name):
    """The facts of consecutive pieces merged (a task reading a run of segments) are
    those of the run read as one piece."""
    lsns, msgs = load_fixture(name)
    arr, lsn = pa.array(msgs, pa.binary()), pa.array(lsns, pa.int64())
    cuts = _boundaries(msgs)[::5]
    bounds = [0] + cuts + [len(msgs)]
    parts = [piece_facts(arr.slice(a, b - a), lsn.slice(a, b - a).to_numpy(), range(a, b))
             for a, b in zip(bounds, bounds[1:])]
    for i in range(0, len(parts) - 2, 3):
        a, b = bounds[i], bounds[i + 3]
        whole = piece_facts(arr.slice(a, b - a), lsn.slice(a, b - a).to_numpy(), range(a, b))
        assert merge_facts(parts[i:i + 3]) == whole


# -- a segment cut inside its plain transactions (the Spark reader's pieces) ------------

def decode_segment_cut(msgs, lsns, parts, **options):
    """``msgs`` taken as one segment, cut by ``cut_segment`` into about ``parts`` pieces
    (inside plain transactions where none ends near a target), planned as the Spark
    reader plans them (``plan_pieces`` + ``add_plain_cuts``), each piece decoded by its
    own Decoder through its PiecePlan (the plans travel as JSON), read in two batches;
    returns (the result as ``decode_in_pieces`` gives it, the cuts)."""
    from pgoutput_fast.split import cut_segment

    cuts = cut_segment(pa.array([bytes(m) for m in msgs], pa.binary()), lsns, range(len(msgs)), parts)
    got = decode_in_pieces(msgs, lsns, [c for c, _ in cuts], plain=[None] + [pc for _, pc in cuts],
                           halves=True, **options)
    return got, cuts


@pytest.mark.parametrize("parts", [2, 3, 5, 16, 60])
def test_segment_cut_inside_plain_transactions(parts):
    """Large plain transactions (an Origin in some, a Relation redefined inside one, a
    Truncate inside another) in one segment, cut into pieces inside them: the rows of one
    Decoder, seq included; with enough pieces, several cuts fall inside one transaction."""
    from tests.decoder.test_parallel import _large_transactions

    msgs, lsns, begins = _large_transactions()
    want = one_decoder(msgs, lsns)
    for options in ({}, {"events": False}, {"tables": False}):
        got, cuts = decode_segment_cut(msgs, lsns, parts, **options)
        assert_same(got, one_decoder(msgs, lsns, **options) if options else want, (parts, options))
    inside = [pc for _, pc in cuts if pc is not None]
    assert len(cuts) == parts - 1       # (a point where nothing is open or a transaction is near)
    if parts >= 16:
        # pieces shorter than the transactions: cuts inside, several inside one, and
        # inside transactions with an Origin
        assert inside, "the targets fall inside large transactions: cuts must go inside"
        assert len({pc.commit_lsn for pc in inside}) < len(inside)
        assert any(pc.origin is not None for pc in inside)
    # every cut inside is before a change (never before the Begin or Commit it copies)
    for pc in inside:
        assert msgs[pc.ordinal].as_py()[:1] not in (b"B", b"C")


@pytest.mark.parametrize("flags", [0, 1])
def test_segment_not_cut_inside_a_transaction_with_a_logical_message(flags):
    from tests.decoder.test_parallel import _large_transactions

    msgs, lsns, begins = _large_transactions(inside=flags)
    got, cuts = decode_segment_cut(msgs, lsns, 40)
    assert_same(got, one_decoder(msgs, lsns), flags)
    b6 = begins[5]
    end = next(i for i in range(b6, len(msgs)) if msgs[i].as_py()[:1] == b"C")
    assert not any(b6 < c <= end for c, _ in cuts)
    assert any(pc is not None for _, pc in cuts)


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("parts", [2, 7, 40])
def test_fixture_segment_cuts(name, parts):
    """Real captures (streamed and prepared transactions among plain ones) cut as one
    segment: the rows of one Decoder."""
    lsns, msgs = load_fixture(name)
    boundaries = set(_boundaries(msgs))
    got, cuts = decode_segment_cut(msgs, lsns, parts)
    assert_same(got, one_decoder(msgs, lsns), (name, parts))
    for c, pc in cuts:
        assert pc is not None or c in boundaries


@pytest.mark.parametrize("max_pieces", [3, 5, 12])
def test_segment_groups_cut_a_large_segment_and_tasks_decode_it(tmp_path, monkeypatch, max_pieces):
    """The Spark reader's driver and task code without Spark: a capture directory of
    three segments, the middle one holding most of the large plain transactions;
    ``segment_groups`` with ``max_pieces`` cuts that segment inside them, and the task
    functions of ``read_segments`` and ``decode`` (called as mapInArrow calls them, one
    piece per call) give one Decoder's change events, seq included. A legacy manifest
    (no segment sizes) is not cut."""
    from pgoutput_fast.capture import SEGMENT_SCHEMA, write_capture
    D = importlib.import_module("pgoutput_fast.spark.decode")
    from tests.decoder.test_parallel import _large_transactions

    monkeypatch.setattr(D, "MIN_SPLIT_BYTES", 1)
    msgs, lsns, begins = _large_transactions()
    msgs = [m.as_py() for m in msgs]
    n = len(msgs)
    bounds = [0, begins[1], begins[-1], n]            # (each at a Begin: nothing open there)
    d = tmp_path / "cap"
    write_capture(d, (pa.table([pa.array(lsns[a:b], pa.int64()), pa.array(msgs[a:b], pa.binary()),
                                pa.array(range(a, b), pa.int64())], schema=SEGMENT_SCHEMA)
                      for a, b in zip(bounds, bounds[1:])), {"binary": False})
    groups = D.segment_groups(str(d), max_pieces=max_pieces)
    pieces = D._pieces(groups)
    counts = [b - a for a, b in zip(bounds, bounds[1:])]
    share = n / max_pieces
    # whole segments stay whole; the one of more than a share and a half is cut in
    # about count / share parts
    want_pieces = sum(int(round(c / share)) if c >= 1.5 * share else 1 for c in counts)
    assert len(pieces) == want_pieces > 3
    plans = {str(p["first"]): p["plan"] for p in pieces if p["plan"]}
    if max_pieces >= 12:        # (pieces shorter than the transactions)
        assert any(pl.get("before") for pl in plans.values()), "cuts inside transactions expected"
    assert [p["first"] for p in pieces] == sorted(p["first"] for p in pieces)
    assert sum(p["count"] for p in pieces) == n
    catalog = D.SegmentCatalog.from_control([(i, lsns[i], m) for i, m in enumerate(msgs)
                                             if m[:1] in (b"R", b"Y", b"S", b"E")])
    run = D._decode_fn(catalog, [p["first"] for p in pieces], None, None, False, plans)
    read = D._read_pieces_fn(pieces, batch_rows=700)
    events = []
    for pid in range(len(pieces)):          # (one task per piece, any order)
        batches = read([pa.record_batch([pa.array([pid], pa.int64())], names=["id"])])
        events.extend(run(b.select(["lsn", "data", "ordinal"]) for b in batches))
    got = _sorted(pa.Table.from_batches(events), "commit_lsn", "seq")
    want, _ = one_decoder(msgs, lsns, tables=False)
    assert_values_equal(got.select(want.column_names), want, max_pieces)
    # a manifest without sizes (legacy): nothing is cut inside a segment
    import pgoutput_fast.capture as C

    real = C.segment_entries

    def sizeless(*a, **k):
        for e in real(*a, **k):
            e.bytes = None
            yield e

    monkeypatch.setattr(C, "segment_entries", sizeless)
    pieces = D._pieces(D.segment_groups(str(d), max_pieces=max_pieces))
    assert [p["first"] for p in pieces] == bounds[:3]
    assert not any(p["plan"] for p in pieces)


def _parity_streams():
    from tests.decoder.test_decoder_parity import streams as parity_streams

    return parity_streams(max_steps=20)


@settings(max_examples=int(os.environ.get("PGOUTPUT_FAST_PARALLEL_FUZZ") or 300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=_parity_streams(), data=st.data())
def test_generated_streams_cut_as_one_segment(stream, data):
    """The parity tests' generated streams (plain, streamed and prepared transactions,
    logical messages, origins, truncates, relations redefined; text and binary) taken
    as one segment and cut into 2 to 40 pieces: the rows of one Decoder, seq included."""
    from pgoutput_fast.parallel import _Tracker

    msgs, lsns = stream
    g = _Tracker()                  # (protocol.Grammar, with the decoder's Rollback Prepared)
    end = 0
    for i, m in enumerate(msgs):
        g.step(bytes(m))
        if g.at_rest:
            end = i + 1
    # (a segment group ends where nothing is open: the stream up to its last such point)
    msgs, lsns = msgs[:end], lsns[:end]
    if end < 2:
        return
    parts = data.draw(st.integers(2, 40))
    for options in ({}, {"events": False}):
        got, cuts = decode_segment_cut(msgs, lsns, parts, **options)
        assert_same(got, one_decoder(msgs, lsns, **options), (parts, options))
    event(f"cuts: {'none' if not cuts else 'inside' if any(pc for _, pc in cuts) else 'at rest'}")
