"""``pgoutput_fast.protocol``: the type bytes agree with the message classes, and the
transaction grammar agrees with the decoder's own state machine: on generated streams
(plain, streamed with subtransaction aborts, prepared and stream-prepared transactions,
interleaved), at every point where a consumer may cut (``Grammar.at_boundary``), the
decoder holds nothing back exactly where ``Grammar.at_rest`` says."""

from __future__ import annotations

import random

import pytest

import pgoutput_fast as pgo
from pgoutput_fast import protocol as P
from pgoutput_fast.messages import (MESSAGE_TYPES, Begin, BeginPrepare, Commit, CommitPrepared,
                                    Insert, LogicalMessage, Prepare, Relation, RelationColumn,
                                    RollbackPrepared, StreamAbort, StreamCommit, StreamPrepare,
                                    StreamStart, StreamStop, Value)


def test_type_bytes_are_the_message_classes():
    names = {"BEGIN": "Begin", "COMMIT": "Commit", "ORIGIN": "Origin", "RELATION": "Relation",
             "TYPE": "Type", "INSERT": "Insert", "UPDATE": "Update", "DELETE": "Delete",
             "TRUNCATE": "Truncate", "MESSAGE": "LogicalMessage", "STREAM_START": "StreamStart",
             "STREAM_STOP": "StreamStop", "STREAM_COMMIT": "StreamCommit",
             "STREAM_ABORT": "StreamAbort", "BEGIN_PREPARE": "BeginPrepare",
             "PREPARE": "Prepare", "COMMIT_PREPARED": "CommitPrepared",
             "ROLLBACK_PREPARED": "RollbackPrepared", "STREAM_PREPARE": "StreamPrepare"}
    by_byte = {ord(k) if isinstance(k, str) else k: v.__name__ for k, v in MESSAGE_TYPES.items()}
    assert {getattr(P, const): cls for const, cls in names.items()} == by_byte
    assert sorted(P.MESSAGE_TYPE_BYTES) == sorted(by_byte)


def _stream(seed, n_units=120):
    """A valid protocol-3 stream: units of every kind, streamed ones interleaved."""
    rng = random.Random(seed)
    rel = Relation(1, "public", "t", "d", (RelationColumn(1, "id", 23, -1),))
    out = [rel]
    lsn = 1000
    xid = 500
    row = 0
    open_streams: dict = {}     # xid -> subxids
    prepared: list = []         # gids awaiting K/r

    def ins(x=None):
        nonlocal row
        row += 1
        return Insert(1, (Value("t", str(row).encode()),), x)

    for _ in range(n_units):
        lsn += 100
        k = rng.random()
        if k < 0.3:
            xid += 1
            out += [Begin(lsn + 50, 0, xid), ins(), ins(), Commit(0, lsn + 50, lsn + 60, 0)]
        elif k < 0.55:                                   # a stream block
            if open_streams and rng.random() < 0.5:
                x = rng.choice(sorted(open_streams))
                first = False
            else:
                xid += 1
                x = xid
                open_streams[x] = []
                first = True
            out.append(StreamStart(x, first))
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.3:
                    xid += 1
                    open_streams[x].append(xid)
                    out.append(ins(xid))
                else:
                    out.append(ins(x))
            out.append(StreamStop())
        elif k < 0.75 and open_streams:                 # a streamed transaction ends
            x = rng.choice(sorted(open_streams))
            subs = open_streams.pop(x)
            if subs and rng.random() < 0.5:
                out.append(StreamAbort(x, subs[0]))
                open_streams[x] = subs[1:]              # a subtransaction abort: still open
                continue
            r = rng.random()
            if r < 0.5:
                out.append(StreamCommit(x, 0, lsn + 10, lsn + 20, 0))
            elif r < 0.75:
                out.append(StreamAbort(x, x))
            else:
                gid = f"sp{x}"
                out.append(StreamPrepare(0, lsn + 10, lsn + 20, 0, x, gid))
                prepared.append(gid)
        elif k < 0.88:                                  # b..P
            xid += 1
            gid = f"g{xid}"
            out += [BeginPrepare(lsn + 50, lsn + 60, 0, xid, gid), ins(),
                    Prepare(0, lsn + 50, lsn + 60, 0, xid, gid)]
            prepared.append(gid)
        elif prepared:                                  # K or r
            gid = prepared.pop(rng.randrange(len(prepared)))
            if rng.random() < 0.6:
                out.append(CommitPrepared(0, lsn + 10, lsn + 20, 0, 1, gid))
            else:
                out.append(RollbackPrepared(0, lsn + 5, lsn + 20, 0, 0, 1, gid))
        else:
            out.append(LogicalMessage(0, lsn, "p", b"non-transactional"))
    return [pgo.encode_message(m) for m in out]


@pytest.mark.parametrize("seed", range(6))
def test_decoder_holds_nothing_exactly_at_rest(seed):
    msgs = _stream(seed)
    dec = pgo.Decoder(events=False, tables=True)
    g = P.Grammar()
    checked = rests = 0
    for data in msgs:
        t = g.step(data)
        dec.feed([data], lsn=[0])
        if not g.at_boundary:
            continue    # inside B..C, b..P or S..E: the cut points are what consumers use
        pend = dec.pending()
        holds = bool(pend["streams"] or pend["prepared"] or pend["open_transaction"] is not None)
        assert holds == (not g.at_rest), (seed, checked, chr(t), pend, g.streams, g.prepared)
        checked += 1
        rests += g.at_rest
    assert checked > 100 and 0 < rests < checked


def test_demo_batch_cuts_leave_nothing_held():
    """The demo feeds batches cut by ``transaction_cuts``: at each cut the decoder
    holds nothing, and every point where it holds nothing after a unit ended is a cut."""
    from pgoutput_fast.demo import transaction_cuts

    total = 0
    for seed in range(6):
        msgs = _stream(seed)
        cuts = set(transaction_cuts(msgs))
        dec = pgo.Decoder(events=False, tables=True)
        for i, data in enumerate(msgs, 1):
            dec.feed([data], lsn=[0])
            pend = dec.pending()
            empty = not (pend["streams"] or pend["prepared"] or pend["open_transaction"] is not None)
            if i in cuts:
                assert empty, (seed, i)
            elif data[0] in P.UNIT_ENDS:
                assert not empty, (seed, i)
        total += len(cuts)
    assert total > 0
