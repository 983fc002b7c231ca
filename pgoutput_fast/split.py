"""Decoding one capture in pieces cut *inside* open streamed and prepared transactions.

A capture is cut into segments only where no ``B…C``, ``b…P`` or ``S…E`` block is open,
but a streamed transaction (blocks ``S…E`` until ``c``/``A``/``p``) or a prepared one
(``b…P`` until ``K``/``r``) can span many segments: one long transaction would make the
whole span one unit of work. This module lets each segment (a *piece*) be decoded by a
``Decoder`` of its own, in parallel, with exactly the rows one sequential ``Decoder``
gives (the same values and metadata, ``seq`` included), in a different row order.

How (``plan_pieces`` on the driver, ``PiecePlan.rewrite`` in each task):

* **The outcome travels to every part.** A piece holding part of a transaction whose
  outcome (``c``, ``A``, ``p`` + ``K``/``r``, ``K``, ``r``) lies in another piece gets a
  copy of those outcome messages appended at its end, so its ``Decoder`` emits its part
  with the real commit LSN, time and xid (or drops it). A piece holding an outcome but
  no part of the transaction does not get to see that outcome.
* **A part that continues** starts with its first ``Stream Start`` marked
  ``first_segment = 1``, followed by a copy of the stream's ``Origin`` when an earlier
  piece had it (pgoutput sends the Origin in the first block only).
* **Subtransaction aborts are applied on the driver.** ``A(x, s)`` discards the
  stream's spool from where ``s`` first appeared (``docs/protocol.md``; positional, as
  PostgreSQL's apply worker does), which can reach back into earlier pieces. For a
  stream that spans pieces the driver replays that rule on the stream's spooled
  records (Insert/Update/Delete/Truncate/transactional Message, and the Relation/Type
  messages that mark where a subtransaction first appeared) and tells each piece which
  of its records to skip; the ``A(x, s)`` messages themselves are then not fed.
* **seq** (the ordinal of a change in its transaction) is shifted in each part by the
  rows the earlier parts emit: ``PiecePlan.seq_offsets`` by commit LSN.

**A plain transaction inside one segment** (a bulk load: capture cuts segments only
where nothing is open, so it is one segment) is cut by ``cut_segment``, as
``decode_parallel`` cuts a stream (``parallel._plan_cut``): the piece before the cut is
fed a copy of its Commit at its end, the piece after it copies of its Begin and Origin
before its first message (``PlainCut``, ``add_plain_cuts``), and seq is shifted by the
changes before the cut.

Relation and Type messages are never skipped: they change the catalog where they
arrive, whatever becomes of the transaction, in every piece as in one Decoder; each
piece starts from the catalog as of its first message (``SegmentCatalog.as_of``).

Only what is needed is read: one pass over each segment's type bytes (vectorized) and
the few control messages; the per-message detail of a stream is read again only for a
stream that spans pieces and has a subtransaction abort.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from . import protocol as P
from .parallel import message_layout

__all__ = ["PieceFacts", "PiecePlan", "PlainCut", "piece_facts", "merge_facts", "plan_pieces",
           "stream_detail", "cut_segment", "add_plain_cuts"]

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_CONTROL = frozenset((P.STREAM_START, P.STREAM_STOP, P.STREAM_COMMIT, P.STREAM_ABORT, P.STREAM_PREPARE,
                      P.BEGIN_PREPARE, P.PREPARE, P.COMMIT_PREPARED, P.ROLLBACK_PREPARED))
_CONTROL_MASK = np.zeros(256, bool)
for _t in _CONTROL:
    _CONTROL_MASK[_t] = True
_ROWS_1 = np.zeros(256, bool)
for _t in (P.INSERT, P.UPDATE, P.DELETE):
    _ROWS_1[_t] = True
_NOTED = np.zeros(256, bool)          # messages whose xid marks a subtransaction's place
for _t in (P.INSERT, P.UPDATE, P.DELETE, P.TRUNCATE, P.RELATION, P.TYPE, P.MESSAGE):
    _NOTED[_t] = True


def _u32_at(data, starts, lens, pos):
    """The big-endian uint32 at ``pos`` of each message (0 where a message is shorter)."""
    ok = lens >= pos + 4
    out = np.zeros(len(starts), np.uint32)
    if ok.any():
        s = starts[ok] + pos
        b = [data[s + k].astype(np.uint32) for k in range(4)]
        out[ok] = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    return out


def _u8_at(data, starts, lens, pos):
    ok = lens > pos
    out = np.zeros(len(starts), np.uint8)
    out[ok] = data[starts[ok] + pos]
    return out


class _Messages:
    """Vectorized facts of one piece's messages: type byte, inside a stream block (and
    whose), the xid a framed message carries, whether it is spooled, its rows."""

    def __init__(self, data: pa.Array):
        starts, lens, buf = message_layout(data)
        n = len(starts)
        self.n = n
        types = np.zeros(n, np.uint8)
        ne = lens > 0
        types[ne] = buf[starts[ne]]
        self.types = types
        is_s = types == P.STREAM_START
        is_e = types == P.STREAM_STOP
        depth = np.cumsum(is_s.astype(np.int64) - is_e.astype(np.int64))
        before = np.concatenate([[0], depth[:-1]]) if n else depth
        # inside a block: after its S, before its E (blocks do not nest in valid input)
        self.inside = (before > 0) & ~is_e & ~is_s
        last_s = np.maximum.accumulate(np.where(is_s, np.arange(n), -1)) if n else np.zeros(0, np.int64)
        sx = _u32_at(buf, starts, lens, 1)          # S's xid; a framed message's xid
        self.top = np.where(last_s >= 0, sx[np.maximum(last_s, 0)], 0).astype(np.uint32)
        self.sub = sx
        flags = _u8_at(buf, starts, lens, 5)        # M in a block: flags after the xid
        m = types == P.MESSAGE
        spooled = _ROWS_1[types] | (types == P.TRUNCATE) | (m & ((flags & 1) == 1))
        self.spooled = spooled & self.inside
        self.noted = (_NOTED[types] & self.inside) & ~(m & ((flags & 1) == 0))
        rows = _ROWS_1[types].astype(np.int64)
        t = types == P.TRUNCATE
        if t.any():
            rows[t] = _u32_at(buf, starts, lens, 5)[t].astype(np.int64)   # nrelids
        self.rows = np.where(self.spooled, rows, 0)


@dataclass
class PieceFacts:
    """What the planner needs of one piece (one segment): its first ordinal and count,
    its control messages ``[(ordinal, lsn, bytes)]`` (``S E c A p b P K r``), the
    Origins inside stream blocks, and the rows each stream's blocks emit here
    (``{top xid: rows}``, before subtransaction aborts)."""
    first: int
    count: int
    control: list
    stream_rows: dict
    origins: list      # [(ordinal, lsn, bytes, top xid)]


def piece_facts(data: pa.Array, lsn, ordinals) -> PieceFacts:
    """``PieceFacts`` of one piece's messages (``data``: binary array; ``lsn`` and
    ``ordinals``: int64 arrays of the same length)."""
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    m = _Messages(data)
    ords = np.asarray(ordinals, np.int64)
    lsns = np.asarray(lsn, np.int64)
    idx = np.nonzero(_CONTROL_MASK[m.types])[0]
    control = [(int(ords[i]), int(lsns[i]), data[int(i)].as_py()) for i in idx]
    o_idx = np.nonzero((m.types == P.ORIGIN) & m.inside)[0]
    origins = [(int(ords[i]), int(lsns[i]), data[int(i)].as_py(), int(m.top[i])) for i in o_idx]
    rows: dict = {}
    sp = np.nonzero(m.spooled)[0]
    if len(sp):
        tops, inv = np.unique(m.top[sp], return_inverse=True)
        sums = np.bincount(inv, weights=m.rows[sp]).astype(np.int64)
        rows = {int(x): int(s) for x, s in zip(tops, sums)}
    first = int(ords[0]) if len(ords) else 0
    return PieceFacts(first, len(ords), control, rows, origins)


def merge_facts(facts: list) -> PieceFacts:
    """The ``PieceFacts`` of consecutive pieces taken as one."""
    rows: dict = {}
    for f in facts:
        for x, n in f.stream_rows.items():
            rows[x] = rows.get(x, 0) + n
    return PieceFacts(facts[0].first, sum(f.count for f in facts),
                      [c for f in facts for c in f.control], rows,
                      [o for f in facts for o in f.origins])


def stream_detail(data: pa.Array, ordinals, xid: int):
    """(ordinal, subxid, spooled, noted, rows) arrays of stream ``xid``'s messages in one
    piece, for the subtransaction-abort replay."""
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    m = _Messages(data)
    sel = m.inside & (m.top == np.uint32(xid)) & m.noted
    ords = np.asarray(ordinals, np.int64)[sel]
    return ords, m.sub[sel].astype(np.int64), m.spooled[sel], m.rows[sel]


@dataclass
class PiecePlan:
    """How one piece's input is rewritten before its Decoder sees it, and how its seq
    values are shifted. JSON-able (``to_dict``/``from_dict``)."""
    first_segment: list = field(default_factory=list)    # ordinals of S to mark first
    inject: dict = field(default_factory=dict)           # S ordinal -> [(lsn, bytes)]
    drop: list = field(default_factory=list)             # ordinals of messages not fed
    skip: list = field(default_factory=list)             # [(xid, lo, hi)] spooled records
    append: list = field(default_factory=list)           # [(lsn, bytes)] fed at the end
    seq_offsets: dict = field(default_factory=dict)      # commit_lsn -> offset
    before: dict = field(default_factory=dict)           # ordinal -> [(lsn, bytes)] fed before it

    @property
    def empty(self) -> bool:
        return not (self.first_segment or self.inject or self.drop or self.skip or self.append
                    or self.before)

    def to_dict(self) -> dict:
        return {"first_segment": self.first_segment,
                "inject": {str(k): [[lsn, b.hex()] for lsn, b in v] for k, v in self.inject.items()},
                "drop": self.drop, "skip": [list(s) for s in self.skip],
                "append": [[lsn, b.hex()] for lsn, b in self.append],
                "seq_offsets": [[k, v] for k, v in self.seq_offsets.items()],
                "before": {str(k): [[lsn, b.hex()] for lsn, b in v] for k, v in self.before.items()}}

    @classmethod
    def from_dict(cls, d) -> "PiecePlan":
        return cls(list(d.get("first_segment", [])),
                   {int(k): [(int(lsn), bytes.fromhex(h)) for lsn, h in v]
                    for k, v in d.get("inject", {}).items()},
                   list(d.get("drop", [])), [tuple(s) for s in d.get("skip", [])],
                   [(int(lsn), bytes.fromhex(h)) for lsn, h in d.get("append", [])],
                   {int(k): int(v) for k, v in d.get("seq_offsets", [])},
                   {int(k): [(int(lsn), bytes.fromhex(h)) for lsn, h in v]
                    for k, v in d.get("before", {}).items()})

    # -- in the task -------------------------------------------------------------------
    def rewrite(self, data: pa.Array, lsn: pa.Array, ordinals) -> list:
        """One batch of the piece (in order) as ``[(data, lsn)]`` parts to feed, in order.
        ``finish()`` gives what to feed after the last batch."""
        ords = np.asarray(ordinals, np.int64)
        if self.empty or len(ords) == 0:
            return [(data, lsn)]
        if isinstance(data, pa.ChunkedArray):
            data = data.combine_chunks()
        if isinstance(lsn, pa.ChunkedArray):
            lsn = lsn.combine_chunks()
        lo, hi = int(ords[0]), int(ords[-1])
        keep = np.ones(len(ords), bool)
        if self.drop:
            d = np.asarray(self.drop, np.int64)
            keep &= ~np.isin(ords, d[(d >= lo) & (d <= hi)])
        if self.skip:
            m = None
            for xid, a, b in self.skip:
                if b <= lo or a > hi:
                    continue
                if m is None:
                    m = _Messages(data)
                keep &= ~(m.spooled & (m.top == np.uint32(xid)) & (ords >= a) & (ords < b))
        marks = sorted(o for o in set(self.first_segment) | set(self.inject) | set(self.before)
                       if lo <= o <= hi)
        out = []
        pos = 0
        for o in marks:
            i = int(o - lo)
            if pos < i:
                out.append(_take(data, lsn, keep, pos, i))
            s = data[i].as_py()
            if o in self.first_segment:
                s = s[:5] + b"\x01" + s[6:]
            pre = self.before.get(o, [])
            mine = [(lsn[i].as_py(), s)] if keep[i] else []
            extra = pre + mine + self.inject.get(o, [])
            out.append((pa.array([b for _, b in extra], pa.binary()),
                        pa.array([x for x, _ in extra], pa.int64())))
            pos = i + 1
        if pos < len(ords):
            out.append(_take(data, lsn, keep, pos, len(ords)))
        return [p for p in out if len(p[0])]

    def finish(self) -> list:
        if not self.append:
            return []
        return [(pa.array([b for _, b in self.append], pa.binary()),
                 pa.array([x for x, _ in self.append], pa.int64()))]

    def shift_seq(self, table: pa.Table, commit_col: str, seq_col: str) -> pa.Table:
        """``table`` with the seq of the split transactions' rows shifted."""
        if not self.seq_offsets or table.num_rows == 0:
            return table
        import pyarrow.compute as pc

        c = table.column(commit_col)
        keys = pa.array(list(self.seq_offsets), pa.int64())
        pos = pc.index_in(c, value_set=keys)
        if pos.null_count == len(pos):
            return table
        offs = pa.array(list(self.seq_offsets.values()), pa.int64())
        add = pc.fill_null(pc.take(offs, pos), 0)
        i = table.column_names.index(seq_col)
        return table.set_column(i, table.field(i), pc.add(table.column(i), add))


# ======================================================================================
# cuts inside a plain transaction (a segment holding one of many MiB)
# ======================================================================================

@dataclass
class PlainCut:
    """A cut before message ``ordinal``, inside the plain transaction ``B…C`` open there:
    the piece before it is fed a copy of the transaction's Commit at its end, the piece
    after it copies of its Begin and last Origin before its first message, so each
    Decoder writes its part with the real commit LSN, time, xid and origin; the later
    part's ``seq`` is shifted by the changes before the cut (``rows_before``)."""
    ordinal: int
    begin: tuple                # (lsn, bytes)
    origin: tuple | None
    commit: tuple
    commit_lsn: int             # the Begin's final LSN (the rows' commit_lsn), signed
    rows_before: int


def cut_segment(data: pa.Array, lsn, ordinals, parts: int) -> list:
    """Where to cut one segment (nothing open at either end) into about ``parts`` parts of
    equal bytes: ``[(start index, PlainCut or None)]`` of each part after the first. Each
    cut is where nothing is open near its target (within a quarter of a part), else
    inside the plain transaction there, else the nearest point where nothing is open
    (``parallel._plan_cut``: never inside a transaction with a logical message in it,
    nor inside or across stream or two-phase messages: no further cut from there)."""
    from .parallel import _NOT_SIMPLE, _find_commit, _plan_cut, message_layout_of

    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    lsns = np.asarray(lsn, np.int64)
    ords = np.asarray(ordinals, np.int64)
    n = len(data)
    if parts < 2 or n < 2:
        return []
    layout = message_layout_of(data)
    share = layout.total / parts
    out: list = []
    lo, cont = 0, None
    for k in range(1, parts):
        plan = _plan_cut(data, layout, layout.total * k / parts, lo, cont, share)
        if plan is None:
            continue
        if plan is _NOT_SIMPLE:
            break
        cut, txn, _types = plan
        if txn is not None and txn.commit is None and not _find_commit(data, txn):
            continue
        if cut <= lo or cut >= n:
            continue
        pc = None
        if txn is not None:
            at = lambda i: (int(lsns[i]), data[int(i)].as_py())      # noqa: E731
            pc = PlainCut(int(ords[cut]), at(txn.begin),
                          at(txn.origin) if txn.origin is not None else None,
                          at(txn.commit), int(txn.final_lsn),
                          _rows_between(data, txn.begin + 1, cut))
        out.append((cut, pc))
        lo, cont = cut, txn
    return out


def _rows_between(data: pa.Array, a: int, b: int) -> int:
    """The change rows (seq values) messages [a, b) of a plain transaction emit: one per
    Insert, Update and Delete, one per relation of a Truncate."""
    starts, lens, buf = message_layout(data.slice(a, b - a))
    types = np.zeros(len(starts), np.uint8)
    ne = lens > 0
    types[ne] = buf[starts[ne]]
    rows = int(_ROWS_1[types].sum())
    t = types == P.TRUNCATE
    if t.any():
        rows += int(_u32_at(buf, starts[t], lens[t], 1).astype(np.int64).sum())
    return rows


def add_plain_cuts(plans: list, starts: list) -> None:
    """The copies and seq shifts of cuts inside plain transactions, added to ``plans``
    (``plan_pieces``' plans, in order) for each piece ``k`` that starts at a
    ``PlainCut`` (``starts[k]``; None: it starts where nothing plain is open). The
    piece before gets the Commit copy first at its end (before any outcome of a stream
    or prepared transaction it is also fed there: the plain one is open, they come
    after it)."""
    for k, pc in enumerate(starts):
        if pc is None:
            continue
        plans[k - 1].append.insert(0, pc.commit)
        plans[k].before.setdefault(pc.ordinal, [])[:0] = [pc.begin] + ([pc.origin] if pc.origin else [])
        plans[k].seq_offsets[pc.commit_lsn] = plans[k].seq_offsets.get(pc.commit_lsn, 0) + pc.rows_before


def _take(data, lsn, keep, a, b):
    k = keep[a:b]
    d, l = data.slice(a, b - a), lsn.slice(a, b - a)
    if k.all():
        return d, l
    mask = pa.array(k)
    return d.filter(mask), l.filter(mask)


# ======================================================================================
# planning (driver)
# ======================================================================================

class _Stream:
    __slots__ = ("xid", "parts", "first_s", "origin_by_piece", "outcome", "gid",
                 "aborts", "commit_lsn")

    def __init__(self, xid):
        self.xid = xid
        self.parts: list = []          # pieces with a block of this stream, in order
        self.first_s: dict = {}        # piece -> ordinal of its first S of this stream
        self.origin_by_piece: dict = {}
        self.outcome: list = []        # [(piece, ordinal, lsn, bytes)]: c / A(x,x) / p
        self.gid = None                # set by a Stream Prepare
        self.aborts: list = []         # [(piece, ordinal, subxid)]
        self.commit_lsn = None


class _Prepared:
    __slots__ = ("piece", "stream", "end_lsn")

    def __init__(self, piece, stream, end_lsn):
        self.piece, self.stream, self.end_lsn = piece, stream, end_lsn


def plan_pieces(facts: list, detail=None) -> list:
    """One ``PiecePlan`` per piece (``facts``: ``PieceFacts`` in stream order, covering
    a stretch at whose end nothing is open). ``detail(piece_index, xid)`` returns
    ``stream_detail`` of that piece for that stream (needed only for a stream that
    spans pieces and has a subtransaction abort)."""
    plans = [PiecePlan() for _ in facts]
    streams: dict = {}
    done: list = []                 # streams finished (their outcome known), in order
    prepared: dict = {}             # gid -> _Prepared (the one a K/r would end)
    plain_outcomes: list = []       # (prepared, piece, ordinal, lsn, bytes) of b..P's K/r
    origins: dict = {}
    for k, f in enumerate(facts):
        for o, lsn, data, top in f.origins:
            origins.setdefault(top, []).append((k, o, lsn, data))
        for o, lsn, data in f.control:
            t = data[0]
            if t == P.STREAM_START:
                xid = _U32.unpack_from(data, 1)[0]
                s = streams.get(xid)
                if s is None:
                    s = streams[xid] = _Stream(xid)
                if not s.parts or s.parts[-1] != k:
                    s.parts.append(k)
                    s.first_s[k] = o
            elif t == P.STREAM_COMMIT:
                xid = _U32.unpack_from(data, 1)[0]
                s = streams.pop(xid, None)
                if s is not None:
                    s.outcome.append((k, o, lsn, data))
                    s.commit_lsn = _U64.unpack_from(data, 6)[0]
                    done.append(s)
            elif t == P.STREAM_ABORT:
                xid, sub = struct.unpack_from(">II", data, 1)
                s = streams.get(xid)
                if s is None:
                    continue
                if xid == sub:
                    del streams[xid]
                    s.outcome.append((k, o, lsn, data))
                    done.append(s)
                else:
                    s.aborts.append((k, o, sub))
            elif t == P.STREAM_PREPARE:
                xid = _U32.unpack_from(data, 26)[0]
                gid = P._gid(data, 30)
                s = streams.pop(xid, None)
                if s is not None:
                    s.outcome.append((k, o, lsn, data))
                    s.gid = gid
                    prepared[gid] = _Prepared(k, s, _U64.unpack_from(data, 10)[0])
            elif t == P.PREPARE:
                gid = P._gid(data, 30)
                prepared[gid] = _Prepared(k, None, _U64.unpack_from(data, 10)[0])
            elif t == P.COMMIT_PREPARED:
                gid = P._gid(data, 30)
                pr = prepared.pop(gid, None)
                if pr is None:
                    continue
                if pr.stream is not None:
                    pr.stream.outcome.append((k, o, lsn, data))
                    pr.stream.commit_lsn = _U64.unpack_from(data, 2)[0]
                    done.append(pr.stream)
                else:
                    plain_outcomes.append((pr, k, o, lsn, data))
            elif t == P.ROLLBACK_PREPARED:
                gid = P._gid(data, 38)
                pr = prepared.get(gid)
                if pr is None or pr.end_lsn != _U64.unpack_from(data, 2)[0]:
                    continue              # (the decoder keeps it: not this GID's Prepare)
                del prepared[gid]
                if pr.stream is not None:
                    pr.stream.outcome.append((k, o, lsn, data))
                    done.append(pr.stream)
                else:
                    plain_outcomes.append((pr, k, o, lsn, data))
    if streams or prepared:
        open_ = sorted(streams) + sorted(g.decode("utf-8", "replace") for g in prepared)
        raise ValueError(f"plan_pieces: transactions still open at the end: {open_[:5]}")

    # a prepared transaction written in one piece, finished in another
    for pr, k, o, lsn, data in plain_outcomes:
        if pr.piece != k:
            plans[pr.piece].append.append((lsn, data))
            plans[k].drop.append(o)

    for s in done:
        pieces = set(s.parts) | {k for k, *_ in s.outcome}
        if len(pieces) <= 1:
            continue                  # one piece has all of it: its Decoder does as one
        for j, k in enumerate(s.parts):
            if j > 0:
                plans[k].first_segment.append(s.first_s[k])
                o = _origin_before(origins.get(s.xid, ()), s.first_s[k])
                if o is not None:
                    plans[k].inject.setdefault(s.first_s[k], []).append(o)
            for ok, oo, olsn, odata in s.outcome:
                if ok != k:
                    plans[k].append.append((olsn, odata))
        for ok, oo, _, _ in s.outcome:
            if ok not in s.parts:
                plans[ok].drop.append(oo)
        rows = _part_rows(s, facts, plans, detail)
        if s.commit_lsn is not None:
            acc = 0
            for k in s.parts:
                if acc:
                    plans[k].seq_offsets[_signed(s.commit_lsn)] = acc
                acc += rows[k]
    for p in plans:
        p.drop.sort()
    return plans


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _origin_before(origins, ordinal):
    """The last Origin of the stream before ``ordinal``, as (lsn, bytes)."""
    best = None
    for _k, o, lsn, data in origins:
        if o < ordinal:
            best = (lsn, data)
    return best


def _part_rows(s: _Stream, facts, plans, detail) -> dict:
    """Rows of stream ``s`` each part emits, after its subtransaction aborts (which, for
    a split stream, the driver applies: the parts skip the discarded records)."""
    if not s.aborts:
        return {k: facts[k].stream_rows.get(s.xid, 0) for k in s.parts}
    if detail is None:
        raise ValueError("plan_pieces: a split stream with a subtransaction abort needs detail")
    for k, o, _sub in s.aborts:
        plans[k].drop.append(o)
    parts = [detail(k, s.xid) for k in s.parts]
    ords = np.concatenate([p[0] for p in parts])
    sub = np.concatenate([p[1] for p in parts])
    spooled = np.concatenate([p[2] for p in parts])
    rows = np.concatenate([p[3] for p in parts])
    piece_of = np.concatenate([np.full(len(p[0]), k, np.int64) for k, p in zip(s.parts, parts)])
    rec_idx = np.nonzero(spooled)[0]             # spooled records, in order
    # position of each noted message: the spooled records before it (in arrival order)
    before = np.concatenate([[0], np.cumsum(spooled)[:-1]]) if len(spooled) else np.zeros(0, np.int64)
    kept: list = []                  # [(a, b)]: record numbers [a, b) kept, in order
    kept_n = 0
    first_pos: dict = {}             # subxid -> position
    cur = 0                          # next message (index into ords) to note
    arrived = 0                      # records that have arrived so far (numbered)
    for _k, a_ord, subxid in sorted(s.aborts, key=lambda x: x[1]):
        end = int(np.searchsorted(ords, a_ord))
        if end > cur:
            seg_sub = sub[cur:end]
            uniq, first_idx = np.unique(seg_sub, return_index=True)
            for x, i in zip(uniq.tolist(), first_idx.tolist()):
                if x not in first_pos:
                    # position = kept records + records arrived in this stretch before it
                    first_pos[x] = kept_n + int(before[cur + i] - before[cur])
            n_new = int(before[end - 1] + spooled[end - 1] - before[cur])
            if n_new:
                kept.append((arrived, arrived + n_new))
                kept_n += n_new
                arrived += n_new
            cur = end
        pos = first_pos.get(subxid)
        if pos is None:
            continue
        # truncate the kept records to the first `pos`
        total = 0
        new = []
        for a, b in kept:
            if total + (b - a) <= pos:
                new.append((a, b))
                total += b - a
            else:
                if pos > total:
                    new.append((a, a + pos - total))
                break
        kept, kept_n = new, pos
        first_pos = {x: p for x, p in first_pos.items() if p < pos}
    if cur < len(ords):
        n_new = int(before[-1] + spooled[-1] - before[cur])
        if n_new:
            kept.append((arrived, arrived + n_new))
    keep_rec = np.zeros(len(rec_idx), bool)
    for a, b in kept:
        keep_rec[a:b] = True
    dropped = rec_idx[~keep_rec]
    if len(dropped):
        # runs of consecutive dropped records -> ordinal ranges, per piece
        run_start = np.concatenate([[True], np.diff(np.nonzero(~keep_rec)[0]) != 1])
        starts = np.nonzero(run_start)[0]
        ends = np.concatenate([starts[1:], [len(dropped)]])
        for a, b in zip(starts.tolist(), ends.tolist()):
            ia, ib = dropped[a], dropped[b - 1]
            # a run may cross pieces: one range per piece
            for k in np.unique(piece_of[ia:ib + 1]).tolist():
                sel = np.nonzero(piece_of[ia:ib + 1] == k)[0] + ia
                plans[k].skip.append((s.xid, int(ords[sel[0]]), int(ords[sel[-1]]) + 1))
    kept_rows = np.zeros(len(ords), np.int64)
    kept_rows[rec_idx[keep_rec]] = rows[rec_idx[keep_rec]]
    return {k: int(kept_rows[piece_of == k].sum()) for k in s.parts}
