"""One long stream decoded on several cores: ``decode_parallel``.

    changes = decode_parallel(messages, lsns, workers=2)   # same ChangeSet as
    changes = Decoder().feed(messages, lsns)               # this

The stream is cut where nothing is open (no Begin..Commit, stream block, streamed or
prepared transaction: ``protocol.Grammar.at_rest``) into about as many pieces of equal
size as there are workers. Each piece is decoded by its own ``Decoder``, on a thread of
its own, starting from the relation catalog at its cut (the Relation and Type messages
before it, applied in order to the starting catalog), and the pieces' outputs are
joined in stream order (which is commit order): the change-event tables and each
relation version's typed tables concatenated, the logical messages in order, the
relation versions in the order one Decoder meets them.

A piece starts as soon as it is known, while the rest is still being looked at: the cut
nearest each byte target is looked for after a Commit, in the messages around it only;
one pass over the type bytes from the last cut up to it (``message_scan``, in C without
the GIL) proves that nothing is open there (only Begins and Commits in between, as many
of each) and finds the Relation and Type messages that carry the catalog to it. Where a
part holds anything else (stream blocks, prepared transactions), ``plan_cuts`` cuts the
rest of the stream with the full grammar, as before.

Where no Commit lies near a byte target (a bulk load, a batch job: transactions of many
MiB), the cut goes inside the plain transaction there (``_inside_cut``): the piece
before it is fed a copy of the transaction's Commit at its end, the piece after it
copies of its Begin and Origin at its start (a ChunkedArray; the piece's own messages
are not copied), so each writes its part with the real commit LSN, time, xid and
origin. Only ``seq``, the change's ordinal in its transaction, starts again at 0 in a
later part: the join adds the rows of that transaction the earlier pieces hold. A
transaction with a logical message in it, or not closed in the stream, is not cut
inside; a piece that fails makes one Decoder decode the whole, for its exact error.
So does a piece that fails other than on a bad message (the planner reads Relation
messages more leniently than the decoder: a name that is not UTF-8).

The native core lets go of the GIL while it writes blocks of rows (src/block_writers.pxi:
the column pass, the change-event block writer, a window of small transactions), so
the pieces do decode at the same time; what stays under the GIL (the dispatch of
Relation, Origin and other rare messages, the export to Arrow) is a small share of a
piece. A stream too small to be worth it (under MIN_PIECE_BYTES a piece) and one with
nowhere to cut are decoded by one Decoder.

The threads are kept across calls (``_shared_pool``): a pool per number of workers,
made on the first call that asks for it, made anew in a forked child. A pool made and
joined per call cost 0.8-2.2 ms of calls of about 20 ms (docs/performance.md). Calls
from several threads at once share a pool: their pieces queue for its threads, as they
would for the cores.
"""

from __future__ import annotations

import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import pyarrow as pa

from . import protocol as P
from .catalog import RelationCatalog
from .decoder import ChangeSet, Decoder
from .errors import DecodeError

__all__ = ["decode_parallel", "plan_cuts"]

_CONTROL = np.zeros(256, bool)
for _t in (P.BEGIN, P.COMMIT, P.BEGIN_PREPARE, P.PREPARE, P.STREAM_START, P.STREAM_STOP,
           P.STREAM_COMMIT, P.STREAM_ABORT, P.STREAM_PREPARE, P.COMMIT_PREPARED, P.ROLLBACK_PREPARED):
    _CONTROL[_t] = True
#: the least a piece of decode_parallel holds unless told how many pieces to make
MIN_PIECE_BYTES = 1 << 20


class _Tracker(P.Grammar):
    """Grammar as the decoder keeps it: a Rollback Prepared ends a prepared transaction
    only when its prepare end LSN is that of the Prepare seen for the GID (else the
    decoder keeps it, and a later Commit Prepared commits it)."""

    __slots__ = ("prepare_end",)

    def __init__(self):
        super().__init__()
        self.prepare_end = {}

    def step(self, data) -> int:
        t = data[0]
        if t == P.PREPARE or t == P.STREAM_PREPARE:   # flags, prepare_lsn, end_lsn, ts, xid, gid
            self.prepare_end[P._gid(data, 30)] = _U64.unpack_from(data, 10)[0]
        elif t == P.ROLLBACK_PREPARED:                # flags, prepare_end_lsn, ..., gid at 38
            gid = P._gid(data, 38)
            if gid in self.prepared and self.prepare_end.get(gid) != _U64.unpack_from(data, 2)[0]:
                return t                              # (kept: not this GID's Prepare)
        elif t == P.COMMIT_PREPARED:
            self.prepare_end.pop(P._gid(data, 30), None)
        return super().step(data)


_U64 = struct.Struct(">Q")


def _as_array(messages):
    """The messages as a pa.BinaryArray / LargeBinaryArray, or a ChunkedArray of those
    (zero copy when they are one already)."""
    if isinstance(messages, pa.ChunkedArray):
        if messages.num_chunks == 1:
            messages = messages.chunk(0)
        elif not all(pa.types.is_binary(c.type) or pa.types.is_large_binary(c.type) for c in messages.chunks):
            raise TypeError(f"messages must be binary, not {messages.type}")
        else:
            return messages
    if isinstance(messages, pa.Array):
        if not (pa.types.is_binary(messages.type) or pa.types.is_large_binary(messages.type)):
            raise TypeError(f"messages must be binary, not {messages.type}")
        return messages
    raw = [bytes(m) for m in messages]
    lens = np.fromiter((len(m) for m in raw), np.int64, len(raw))
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    return pa.Array.from_buffers(pa.large_binary(), len(raw),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))])


def message_layout(arr):
    """(start offsets of each message, its length, the data buffer as uint8) of a binary
    or large binary array (or a chunked one, combined)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    offs = np.frombuffer(arr.buffers()[1], width)[arr.offset:arr.offset + n + 1].astype(np.int64)
    data = arr.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    return offs[:-1], np.diff(offs), data


class Layout:
    """Where a stream's messages are, from its offsets alone (nothing reads the messages):
    ``total``, its bytes; ``starts(idx)``, where messages start, in bytes from the first;
    ``index_at(nbytes)``, the message holding a byte."""

    __slots__ = ("total", "_chunks")

    def __init__(self, total, chunks):
        self.total, self._chunks = total, chunks

    def starts(self, idx):
        idx = np.asarray(idx, np.int64)
        if len(self._chunks) == 1:
            _, n, _, offs = self._chunks[0]
            return offs[np.minimum(idx, n)].astype(np.int64) - int(offs[0])
        out = np.full(len(idx), self.total, np.int64)
        for first, n, base, offs in self._chunks:
            sel = (idx >= first) & (idx < first + n)
            if sel.any():
                out[sel] = offs[idx[sel] - first].astype(np.int64) + (base - int(offs[0]))
        return out

    def index_at(self, nbytes) -> int:
        """The message in which byte ``nbytes`` of the stream lies."""
        for first, n, base, offs in self._chunks:
            size = int(offs[-1]) - int(offs[0])
            if nbytes < base + size:
                # (the value in the offsets' own type: else numpy converts the whole array)
                at = offs.dtype.type(nbytes - base + int(offs[0]))
                return first + int(np.searchsorted(offs[1:], at, side="right"))
        return max(0, self.n - 1)

    @property
    def n(self) -> int:
        if not self._chunks:
            return 0
        first, n, _, _ = self._chunks[-1]
        return first + n


def _chunk_list(arr):
    """(chunk, its large flag, its offsets as numpy) of each non-empty chunk."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    out = []
    for c in chunks:
        n = len(c)
        if n == 0:
            continue
        large = pa.types.is_large_binary(c.type)
        offs = np.frombuffer(c.buffers()[1], np.int64 if large else np.int32)[c.offset:c.offset + n + 1]
        out.append((c, large, offs))
    return out


def message_layout_of(arr) -> Layout:
    """The Layout of a binary or large binary array, or a ChunkedArray of those."""
    kept, first, base = [], 0, 0
    for c, _large, offs in _chunk_list(arr):
        kept.append((first, len(c), base, offs))
        first += len(c)
        base += int(offs[-1]) - int(offs[0])
    return Layout(base, kept)


class Scan(Layout):
    """What one pass over a stream's type bytes gives (``message_scan``): a Layout, and
    ``types``, each message's type byte (0 for an empty one); ``rest``, 1 after each
    message where no Begin is open; ``depth``, Begins minus Commits after the last (from
    the depth the scan started at); ``simple``, no control message but Begin and Commit
    (else ``rest`` is not the whole story)."""

    __slots__ = ("types", "rest", "simple", "depth")

    def __init__(self, total, types, rest, simple, chunks, depth=0):
        super().__init__(total, chunks)
        self.types, self.rest, self.simple, self.depth = types, rest, simple, depth


def message_scan(arr, depth: int = 0) -> Scan:
    """One pass over the first bytes of the messages of a binary or large binary array, or
    a ChunkedArray of those, in C (nothing else touches the messages): a ``Scan``.
    depth: Begins open before the first message."""
    from . import _impl

    types, rest, kept, first, base, simple = [], [], [], 0, 0, True
    for c, large, offs in _chunk_list(arr):
        n = len(c)
        bufs = c.buffers()
        data = memoryview(bufs[2]).cast("B") if bufs[2] is not None else None
        t, r, depth, s = _impl._message_scan(memoryview(bufs[1]).cast("B"), data, c.offset, n, large, depth)
        types.append(np.frombuffer(t, np.uint8))
        rest.append(np.frombuffer(r, np.uint8))
        simple = simple and s
        kept.append((first, n, base, offs))
        first += n
        base += int(offs[-1]) - int(offs[0])
    if not types:
        return Scan(0, np.zeros(0, np.uint8), np.zeros(0, np.uint8), True, [], depth)
    one = len(types) == 1
    return Scan(base, types[0] if one else np.concatenate(types), rest[0] if one else np.concatenate(rest),
                simple, kept, depth)


def plan_cuts(messages, pieces: int, _layout=None) -> list:
    """Message indexes where ``messages`` may be cut into about ``pieces`` parts of equal
    size: each is a position where nothing is open (``Grammar.at_rest``). Sorted, without
    0 and len(messages). (_layout: message_scan of it, when already computed.)"""
    arr = _as_array(messages)
    n = len(arr)
    if pieces <= 1 or n < 2:
        return []
    scan = _layout if _layout is not None else message_scan(arr)
    types, rest = scan.types, scan.rest
    if not scan.simple:
        # streams or prepared transactions: the Grammar over the control messages
        control = np.flatnonzero(np.take(_CONTROL, types))
        g = _Tracker()
        after = np.zeros(len(control), bool)
        for k, i in enumerate(control.tolist()):
            try:
                g.step(arr[i].as_py())
            except Exception:  # noqa: BLE001 - a malformed control message: the Decoder
                break          # reports it; no cut after it
            after[k] = g.at_rest
        # rest[i]: nothing open after message i (the state of the last control message up to i)
        seg = np.diff(np.concatenate(([0], control, [n])))
        rest = np.repeat(np.concatenate(([True], after)), seg)
    # for each of the pieces - 1 byte targets, the cut nearest to it: before message i + 1
    # where rest[i], looked for in a growing window around the message holding the target
    total = scan.total
    cuts = []
    for k in range(1, pieces):
        want = total * k / pieces
        t = scan.index_at(int(want))
        found: list = []
        span = 1024
        while True:
            lo, hi = max(0, t - span), min(n - 1, t + span)
            below = np.flatnonzero(rest[lo:t + 1])
            above = np.flatnonzero(rest[t + 1:hi])
            if len(below):
                found.append(lo + int(below[-1]) + 1)
            if len(above):
                found.append(t + 1 + int(above[0]) + 1)
            if found or (lo == 0 and hi == n - 1):
                break
            span *= 8
        found = [c for c in found if 0 < c < n]
        if not found:
            continue
        ends = scan.starts(found)
        best = found[int(np.argmin(np.abs(ends - want)))]
        if best not in cuts:
            cuts.append(best)
    return sorted(cuts)


def _catalogs_at(arr, lsns, cuts, catalog, decode_message, _layout=None):
    """The catalog at each piece's start, and the relation versions in the order one
    Decoder creates their builders."""
    n = len(arr)
    types = (_layout if _layout is not None else message_scan(arr)).types
    catalog_msgs = np.flatnonzero((types == P.RELATION) | (types == P.TYPE))
    # inside a stream block before message i: Stream Starts minus Stream Stops before it
    marks = np.flatnonzero((types == P.STREAM_START) | (types == P.STREAM_STOP))
    depth = np.concatenate(([0], np.cumsum(np.where(types[marks] == P.STREAM_START, 1, -1))))
    in_block = depth[np.searchsorted(marks, catalog_msgs, side="left")] > 0
    cat = catalog.copy()
    order: dict = {}
    for v in cat.versions():
        if cat.current(v.relid) is v:
            order.setdefault((v.relid, v.version), None)
    snapshots = [cat.copy()]
    at = catalog_msgs.tolist()
    ci = 0
    for cut in cuts + [n]:
        while ci < len(at) and at[ci] < cut:
            i = at[ci]
            msg = decode_message(arr[i].as_py(), in_stream=bool(in_block[ci]))
            if types[i] == P.TYPE:
                cat.apply_type(msg)
            else:
                v = cat.apply_relation(msg, int(lsns[i]) if lsns is not None else 0)
                order.setdefault((v.relid, v.version), None)
            ci += 1
        snapshots.append(cat.copy())
    return snapshots[:-1], list(order), cat


def _join(parts, order):
    """One ChangeSet of the pieces' ChangeSets, as one Decoder would have made it."""
    events = [c.events for c in parts if c.events is not None]
    per_version: dict = {}
    for c in parts:
        for v, t in c.table_versions:
            per_version.setdefault((v.relid, v.version), (v, []))[1].append(t)
    table_versions = []
    for key in order + [k for k in per_version if k not in order]:
        if key not in per_version:
            continue
        v, tables = per_version[key]
        table_versions.append((v, _concat_tables(tables)))
    messages = [m for c in parts for m in c.messages]
    if not events:
        ev = None
    elif len(events) == 1:
        ev = events[0]
    else:
        ev = pa.concat_tables(events)
    return ChangeSet(ev, table_versions, messages)


def _concat_tables(tables):
    if len(tables) == 1:
        return tables[0]
    schemas = [t.schema for t in tables]
    if all(s.equals(schemas[0], check_metadata=True) for s in schemas[1:]):
        return pa.concat_tables(tables)
    # a column of an unknown type is string in a piece that saw only text values and
    # binary in one that saw a binary value (binary_unknown=None): binary as one Decoder
    # would have made it
    target = _unify(schemas)
    return pa.concat_tables([t.cast(target) if not t.schema.equals(target) else t for t in tables])


def _unify(schemas):
    fields = []
    for i, f in enumerate(schemas[0]):
        types = [s.field(i).type for s in schemas]
        fields.append(f.with_type(_widest(types)))
    return pa.schema(fields, metadata=schemas[-1].metadata)


def _widest(types):
    first = types[0]
    if all(t == first for t in types):
        return first
    if all(pa.types.is_struct(t) for t in types):
        return pa.struct([first.field(i).with_type(_widest([t.field(i).type for t in types]))
                          for i in range(first.num_fields)])
    if all(pa.types.is_list(t) for t in types):
        # an array of an unknown type: its elements as the scalar column's
        return pa.list_(first.value_field.with_type(_widest([t.value_type for t in types])))
    if any(pa.types.is_binary(t) for t in types):
        return pa.binary()
    return first


def decode_parallel(messages, lsn=None, *, workers: int | None = None,
                    catalog: RelationCatalog | None = None, pieces: int | None = None,
                    **decoder_kwargs) -> ChangeSet:
    """Decode one stream on ``workers`` threads (default: the CPUs this process may use);
    the same ChangeSet as ``Decoder(catalog, **decoder_kwargs).feed(messages, lsn)``.

    ``messages``, ``lsn``: as ``Decoder.feed`` takes them (a pa.BinaryArray is cut
    without a copy). ``pieces``: how many parts to cut it into (default: ``workers``).
    Where no transaction ends near a piece's end, a plain one is cut inside. A stream
    with nowhere to cut (one long streamed transaction, a transaction with a logical
    message in it, or not closed) is decoded in one piece. On a bad message raises the
    DecodeError one Decoder raises, ``message_index`` into the whole stream and
    ``changes`` the committed changes before it.
    """
    return _decode_parallel(messages, lsn, workers, catalog, pieces, decoder_kwargs)[0]


def _decode_parallel(messages, lsn, workers, catalog, pieces, decoder_kwargs):
    """decode_parallel, and the Decoder of the last piece: what it holds back (its
    pending()) is what one Decoder would hold back, since no piece ends with anything
    open (the command line's decode reports it).

    The pieces start as soon as each is known, while the rest of the stream is still
    being looked at: a cut is looked for next to each byte target (after a Commit), and
    the type bytes from the last cut up to it are scanned (``message_scan``, without the
    GIL) to prove nothing is open there and to carry the catalog to it; that piece then
    starts on its thread. A part of the stream with streams or prepared transactions in
    it (where a Commit does not close all) is cut by ``plan_cuts`` from there on."""
    from . import _impl

    if workers is None:
        workers = cpu_count()
    workers = max(1, int(workers))
    explicit = pieces is not None
    pieces = max(1, int(pieces or workers))
    catalog = catalog.copy() if catalog is not None else RelationCatalog()
    arr = _as_array(messages)
    n = len(arr)
    if lsn is not None:
        lsn_np = _lsn_numpy(lsn)
        if len(lsn_np) != n:
            raise ValueError(f"lsn has {len(lsn_np)} values for {n} messages")
    else:
        lsn_np = None
    layout = message_layout_of(arr) if pieces > 1 and n > 1 else None
    if layout is not None and not explicit:
        # (a piece of less than MIN_PIECE_BYTES costs more in its thread than it saves)
        pieces = max(1, min(pieces, layout.total // MIN_PIECE_BYTES))
    if layout is None or pieces <= 1:
        # (one piece: workers=1 is one thread; more may go to the Decoder's helper)
        one = Decoder(catalog, **(decoder_kwargs if workers > 1 or "threads" in decoder_kwargs
                                  else {**decoder_kwargs, "threads": 1}))
        return one.feed(arr, lsn_np), one

    parts_: list = []                            # [lo, hi, head, tail, catalog, Decoder], in order
    futures: list = []
    pool = _shared_pool(workers) if workers > 1 else None

    # each piece's Decoder on one thread: the pieces already keep the cores busy (a
    # Decoder's own helper thread would only contend with them)
    piece_kwargs = decoder_kwargs if "threads" in decoder_kwargs else {**decoder_kwargs, "threads": 1}

    def run(piece):
        lo, hi, head, tail, cat = piece[:5]
        try:
            dec = piece[5] = Decoder(cat, **piece_kwargs)
            if head is None and tail is None:
                part, part_lsn = arr.slice(lo, hi - lo), None if lsn_np is None else lsn_np[lo:hi]
            else:
                part, part_lsn = _with_copies(arr, lsn_np, lo, hi, head, tail)
            return dec.feed(part, part_lsn), None
        except Exception as exc:  # noqa: BLE001 - the join decides (see below)
            return getattr(exc, "changes", None), exc

    def start(lo, hi, cat, head=None, tail=None, before_last=False):
        piece = [lo, hi, head, tail, cat, None]
        at = len(parts_) - 1 if before_last else len(parts_)
        parts_.insert(at, piece)
        futures.insert(at, pool.submit(run, piece) if pool is not None else piece)

    split = False                                # a transaction cut inside (seq to shift)
    unsure = False                               # the last piece started on a guess that failed
    try:
        cat = catalog.copy()
        order = _catalog_order(cat)
        lo = 0                                   # where the next piece starts
        cont = None                              # the _Txn open at lo (a cut inside it), or None
        rest_from = None                         # where plan_cuts takes over
        last_started = False
        share = layout.total / pieces
        for k in range(1, pieces):
            plan = _plan_cut(arr, layout, layout.total * k / pieces, lo, cont, share)
            if plan is None:
                continue
            if plan is _NOT_SIMPLE:
                if cont is None:
                    rest_from = lo               # (streams, prepared: the grammar decides)
                break
            cut, txn, types = plan
            # the last piece may start before the Commit of the transaction it cuts is
            # found (the piece before it needs it; the last piece does not), when the
            # stream ends with a Commit: the search then fails only on a transaction
            # that is not plain to its end, and one Decoder decodes the whole
            guess = (txn is not None and txn.commit is None and k == pieces - 1
                     and _type_at(arr, n - 1) == P.COMMIT)
            if txn is not None and txn.commit is None and not guess and not _find_commit(arr, txn):
                continue
            snapshot = cat.copy()
            try:
                _apply_catalog(arr, lsn_np, lo, types, cat, order, _impl.decode_message)
            except Exception:  # noqa: BLE001 - the piece's Decoder reports it as it would
                cat = None
                break
            split = split or txn is not None
            if guess:
                start(cut, n, cat, txn)
                last_started = True
                if not _find_commit(arr, txn):
                    unsure = True
                    break
                start(lo, cut, snapshot, cont, txn, before_last=True)
                break
            start(lo, cut, snapshot, cont, txn)
            lo, cont = cut, txn
        if last_started:
            pass
        elif cat is None:
            start(lo, n, snapshot, cont)         # (it raises where the catalog fails)
        elif rest_from is None:
            start(lo, n, cat, cont)
        else:
            sub = arr.slice(lo, n - lo)
            sub_lsn = None if lsn_np is None else lsn_np[lo:]
            cuts = plan_cuts(sub, pieces - len(parts_))
            snaps = None
            if cuts:
                try:
                    snaps, sub_order, _ = _catalogs_at(sub, sub_lsn, cuts, cat, _impl.decode_message)
                except Exception:  # noqa: BLE001 - one Decoder reports it as it would
                    snaps = None
            if snaps is None:
                start(lo, n, cat)
            else:
                for key in sub_order:
                    order.setdefault(key, None)
                for (a, b), snap in zip(zip([0] + cuts, cuts + [n - lo]), snaps):
                    start(lo + a, lo + b, snap)
        results = [f.result() if pool is not None else run(f) for f in futures]
    finally:
        if pool is not None:
            wait(futures)                        # (nothing of this call runs on after it)
    if unsure or any(exc is not None and (split or not isinstance(exc, DecodeError)) for _, exc in results):
        # a guess that failed, a piece cut inside a transaction that failed, or a piece
        # that failed other than on a bad message (a catalog the planner took from a
        # damaged Relation message that one Decoder refuses: a name not UTF-8): one
        # Decoder decodes the whole, and says exactly where and what is wrong
        one = Decoder(catalog, **decoder_kwargs)
        return one.feed(arr, lsn_np), one
    parts: list = []
    order_list = list(order)
    for piece, (changes, exc) in zip(parts_, results):
        if exc is not None:
            if exc.message_index is not None:
                exc.message_index += piece[0]
            exc.changes = _join(parts + ([changes] if changes is not None else []), order_list)
            raise exc
        parts.append(changes)
    if split:
        parts = _shift_split_seq(parts, [(p[2], p[3]) for p in parts_])
    last = parts_[-1][5]
    if len(parts) == 1:
        return parts[0], last
    return _join(parts, order_list), last


def _type_at(arr, i) -> int:
    """The type byte of message i (0 for an empty one)."""
    m = arr[i].as_py()
    return m[0] if m else 0


class _Txn:
    """A plain transaction that a cut falls inside: its Begin, its last Origin before the
    cut (or None), its Commit (message indexes; None until ``_find_commit`` finds it,
    from message ``search_from`` on), and its final LSN (the rows' commit_lsn)."""

    __slots__ = ("begin", "origin", "commit", "final_lsn", "search_from")

    def __init__(self, begin, origin, commit, final_lsn, search_from=None):
        self.begin, self.origin, self.commit, self.final_lsn = begin, origin, commit, final_lsn
        self.search_from = search_from


def _scan_windows(arr, pos, depth, span, grow, cap=None, end=None):
    """Yields (pos, message_scan) of consecutive windows of messages from ``pos`` to the
    end: ``span`` messages first, ``grow`` times more each next (up to ``cap``); no
    window reaches past ``end`` from before it. ``depth``: the transactions open at
    ``pos``, carried from window to window."""
    n = len(arr)
    while pos < n:
        hi = min(n, pos + span)
        if end is not None and pos < end:
            hi = min(hi, end)
        win = message_scan(arr.slice(pos, hi - pos), depth)
        yield pos, win
        depth = win.depth
        pos, span = hi, span * grow if cap is None else min(span * grow, cap)


def _find_commit(arr, txn) -> bool:
    """Looks for ``txn``'s Commit from message ``txn.search_from`` on (the messages
    before it are known to be changes, Relation, Type or Origin messages): the first
    control or logical message must be it. Sets ``txn.commit``; False when the
    transaction is not closed in the stream, or holds something else first."""
    for pos, win in _scan_windows(arr, txn.search_from, 1, 16384, 2, cap=131072):
        stop = np.flatnonzero(_NO_INSIDE[win.types])
        if len(stop):
            if win.types[stop[0]] != P.COMMIT:
                return False
            txn.commit = pos + int(stop[0])
            return True
    return False


#: no cut inside a transaction with one of these in it (besides Begin and Commit): a
#: logical message (a non-transactional one is passed on where it arrives, before the
#: transaction's own; a piece would pass it on after the part of the transaction
#: before it) and every control message (Stream, prepared: only plain B..C is cut)
_NO_INSIDE = _CONTROL.copy()
_NO_INSIDE[P.MESSAGE] = True


_NOT_SIMPLE = object()
_NONE = np.zeros(0, np.intp)
#: control messages but Begin and Commit (a part with one of these is planned by plan_cuts)
_STREAMISH = _CONTROL.copy()
_STREAMISH[P.BEGIN] = _STREAMISH[P.COMMIT] = False


def _plan_cut(arr, layout, want, lo, cont, share):
    """Where the piece from ``lo`` ends, for the byte target ``want``: (cut, the _Txn cut
    inside or None, the type bytes of [lo, cut)); None for no cut; _NOT_SIMPLE when the
    part holds stream or two-phase messages (plan_cuts decides). ``cont``: the _Txn open
    at ``lo``.

    One pass over the type bytes from ``lo`` to the message holding the target (what the
    piece's catalog needs anyway) gives the last point before it where nothing is open,
    and one over the messages up to a quarter of a piece (``share``) after it the first
    such point there. The nearer of the two within a quarter of a piece is the cut; else,
    inside a plain transaction, a cut inside it at the target (``_inside_cut``; its
    Commit is looked for later, ``_find_commit``); else the nearest point where nothing is
    open, looked for on in growing windows."""
    n = layout.n
    t = layout.index_at(int(want))
    if t <= lo:
        return None
    head = message_scan(arr.slice(lo, t - lo), 1 if cont is not None else 0)
    if not head.simple:
        return _NOT_SIMPLE
    rest = np.flatnonzero(head.rest)
    below = lo + int(rest[-1]) + 1 if len(rest) else None
    end = min(n, max(t + 1, layout.index_at(int(want + share / 4)) + 1))
    windows: list = []
    close, streamish, decided = None, False, False

    def nearest(limit=None):
        # the point where nothing is open (below t, or after the first close above it)
        # nearest the target, with the type bytes of [lo, it); None if none is within limit
        near = [c for c in (below, close + 1 if close is not None else None) if c is not None and c < n]
        if not near:
            return None
        gaps = np.abs(layout.starts(near) - want)
        if limit is not None and gaps.min() > limit:
            return None
        best = near[int(np.argmin(gaps))]
        types = head.types if best <= t else np.concatenate([head.types] + windows)
        return best, None, types[:best - lo]

    for pos, win in _scan_windows(arr, t, head.depth, 256, 8, end=end):
        at = np.flatnonzero(win.rest)
        bad = np.flatnonzero(_STREAMISH[win.types]) if not win.simple else _NONE
        if len(at) and (not len(bad) or at[0] < bad[0]):
            close = pos + int(at[0])             # (after it nothing is open)
        elif len(bad):
            streamish = True
        windows.append(win.types)
        hi = pos + len(win.types)
        if not decided and (close is not None or streamish or hi >= end):
            # up to a quarter of a piece after t: a point where nothing is open there or
            # before t, near enough; else a cut inside the transaction open at t
            decided = True
            plan = nearest(share / 4)
            if plan is not None:
                return plan
            if head.depth == 1 and not streamish:
                after = windows[0] if len(windows) == 1 else np.concatenate(windows)
                inside = _inside_cut(arr, lo, t, head.types, cont, close, after, hi)
                if inside is not None:
                    return inside
        if close is not None or streamish:
            break
    plan = nearest()
    if plan is None and streamish:
        return _NOT_SIMPLE
    return plan


def _inside_cut(arr, lo, t, types, cont, close, after, after_end):
    """The cut at message ``t``, inside the plain transaction open there: (t, its _Txn,
    ``types``), or None where the transaction may not be cut (a logical message or any
    control message in it, a malformed Begin). ``types``: the type bytes of [lo, t);
    ``cont``: the _Txn open at ``lo``; ``after``: those of [t, after_end), where
    ``close``, when not None, is the transaction's Commit.

    The piece before the cut is fed a copy of the transaction's Commit after it, and
    the piece after it copies of its Begin and Origin before it: each piece's Decoder
    then writes its part of the transaction with the real commit LSN, time, xid and
    origin; only ``seq`` (the change's ordinal in its transaction) starts again at 0,
    which the join shifts (``_shift_split_seq``)."""
    if close is not None and close <= t:
        return None
    if _NO_INSIDE[after[:close - t] if close is not None else after].any():
        return None
    begins = np.flatnonzero(types == P.BEGIN)
    if len(begins):
        b = int(begins[-1])
        body = types[b + 1:]
        begin, origin = lo + b, None
    elif cont is not None:
        body = types                             # (the transaction open at lo, to t)
        begin, origin = cont.begin, cont.origin
        b = -1
    else:
        return None
    if _NO_INSIDE[body].any():
        return None
    origins = np.flatnonzero(body == P.ORIGIN)
    if len(origins):
        origin = lo + b + 1 + int(origins[-1])
    if cont is not None and begin == cont.begin:
        if origin == cont.origin:
            return t, cont, types                # (a middle piece of the transaction at lo)
        return t, _Txn(begin, origin, cont.commit, cont.final_lsn), types
    first = arr[begin].as_py()
    if len(first) != 21:
        return None                              # (a malformed Begin: one piece reports it)
    return t, _Txn(begin, origin, close, struct.unpack_from(">q", first, 1)[0], after_end), types


def _with_copies(arr, lsn_np, lo, hi, head, tail):
    """Messages [lo, hi) with copies of ``head``'s Begin (and Origin) before them and of
    ``tail``'s Commit after them (the slice not copied: a ChunkedArray), and their LSNs."""
    before = [] if head is None else [head.begin] + ([head.origin] if head.origin is not None else [])
    after = [] if tail is None else [tail.commit]
    chunks: list = []
    for idx in (before, None, after):
        if idx is None:
            part = arr.slice(lo, hi - lo)
        elif idx:
            part = arr.take(pa.array(idx, pa.int64()))
        else:
            continue
        chunks.extend(part.chunks if isinstance(part, pa.ChunkedArray) else [part])
    lsns = None
    if lsn_np is not None:
        lsns = np.concatenate([lsn_np[before], lsn_np[lo:hi], lsn_np[after]]) if before or after else lsn_np[lo:hi]
    return pa.chunked_array(chunks, arr.type), lsns


def _shift_split_seq(parts, splits):
    """The pieces' ChangeSets with the seq of each transaction cut inside shifted by the
    rows its parts in the earlier pieces hold.

    A piece's part of a transaction it continues is its first rows (of the change-event
    table, of each typed table), and of one it leaves open its last: the rows a part
    holds are one more than the seq of its last row (seq counts every change, one row
    each), and a shift adds to the leading rows of the transaction's commit LSN."""
    def tables_of(cs):
        if cs.events is not None:
            return [(cs.events, "commit_lsn", "seq")]
        return [(t, "_commit_lsn", "_seq") for _, t in cs.table_versions]

    def rows_of(cs, lsn):
        most = 0
        for t, lsn_col, seq_col in tables_of(cs):
            n = t.num_rows
            if n and t.column(lsn_col)[n - 1].as_py() == lsn:
                most = max(most, t.column(seq_col)[n - 1].as_py() + 1)
        return most

    def shifted(t, lsn_col, seq_col, lsn, off):
        n = t.num_rows
        if n == 0:
            return t
        lead = _lsn_numpy(t.column(lsn_col)) != lsn
        p = int(np.argmax(lead)) if lead.any() else n
        if p == 0:
            return t
        i = t.schema.get_field_index(seq_col)
        seq = _lsn_numpy(t.column(i)).copy()
        seq[:p] += off
        return t.set_column(i, t.field(i), pa.array(seq, pa.int64()))

    held: dict = {}                              # final LSN -> rows in the pieces so far
    out = []
    for cs, (head, tail) in zip(parts, splits):
        if head is not None:
            off = held.get(head.final_lsn, 0)
            if head is tail or (tail is not None and tail.final_lsn == head.final_lsn):
                rows = rows_of(cs, head.final_lsn)       # (all its rows are the part's)
            else:
                rows = 0
            if off:
                events = cs.events
                if events is not None:
                    events = shifted(events, "commit_lsn", "seq", head.final_lsn, off)
                versions = [(v, shifted(t, "_commit_lsn", "_seq", head.final_lsn, off))
                            for v, t in cs.table_versions]
                cs = ChangeSet(events, versions, cs.messages)
            held[head.final_lsn] = off + rows
        if tail is not None and (head is None or tail.final_lsn != head.final_lsn):
            held[tail.final_lsn] = rows_of(cs, tail.final_lsn)
        out.append(cs)
    return out


def _catalog_order(cat) -> dict:
    """The relation versions a Decoder started from cat makes builders for, in order."""
    order: dict = {}
    for v in cat.versions():
        if cat.current(v.relid) is v:
            order.setdefault((v.relid, v.version), None)
    return order


def _apply_catalog(arr, lsns, lo, types, cat, order, decode_message):
    """Apply the Relation and Type messages of arr[lo:lo + len(types)] (a part with no
    stream block: simple) to cat, noting new relation versions in order."""
    for i in np.flatnonzero((types == P.RELATION) | (types == P.TYPE)).tolist():
        msg = decode_message(arr[lo + i].as_py())
        if types[i] == P.TYPE:
            cat.apply_type(msg)
        else:
            v = cat.apply_relation(msg, int(lsns[lo + i]) if lsns is not None else 0)
            order.setdefault((v.relid, v.version), None)


_pool_lock = threading.Lock()
_pools: dict = {}                                # workers -> ThreadPoolExecutor
_pools_pid = os.getpid()


def _shared_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` decode threads, made on first use (one per
    number of workers asked for, so that a call never runs more pieces at once than it
    asked; made anew in a forked child, where the parent's threads do not exist)."""
    global _pools_pid
    with _pool_lock:
        pid = os.getpid()
        if _pools_pid != pid:
            _pools.clear()
            _pools_pid = pid
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = ThreadPoolExecutor(max_workers=workers,
                                                        thread_name_prefix=f"pgoutput_fast-decode-{workers}")
        return pool


def _forget_pools() -> None:
    """In a forked child: the parent's pool threads do not exist here, and the lock may
    have been held by a thread that does not either."""
    global _pool_lock, _pools_pid
    _pool_lock = threading.Lock()
    _pools.clear()
    _pools_pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def cpu_count() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _lsn_numpy(lsn):
    """The LSNs as a numpy array (an Arrow column's nulls as 0, unknown, as feed reads
    them; without Array.to_numpy, which imports pandas)."""
    if isinstance(lsn, pa.ChunkedArray):
        lsn = lsn.combine_chunks() if lsn.num_chunks != 1 else lsn.chunk(0)
    if isinstance(lsn, pa.Array):
        if not (pa.types.is_int64(lsn.type) or pa.types.is_uint64(lsn.type)):
            return lsn.fill_null(0).to_numpy(zero_copy_only=False)
        dtype = np.int64 if pa.types.is_int64(lsn.type) else np.uint64
        n = len(lsn)
        if n == 0:
            return np.zeros(0, dtype)
        bufs = lsn.buffers()
        out = np.frombuffer(bufs[1], dtype, count=n, offset=8 * lsn.offset)
        if lsn.null_count:
            valid = np.unpackbits(np.frombuffer(bufs[0], np.uint8), bitorder="little")[lsn.offset:lsn.offset + n]
            out = np.where(valid.astype(bool), out, 0).astype(dtype)
        return out
    return np.asarray(lsn)
