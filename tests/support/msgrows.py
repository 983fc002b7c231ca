"""Captured segments -> one committed message per row with its transaction context.

This is the input ``pgoutput_fast.spark.decode_udf`` is for (data held one message per
row, e.g. by another capture tool). Tests build it from a real capture with a plain,
independent replay of the transaction framing (docs/protocol.md §3): Begin..Commit, stream
blocks until Stream Commit/Abort (a subtransaction abort discards by position, from
where that subxid first appeared), Begin Prepare..Prepare (and Stream Prepare) until
Commit/Rollback Prepared. Only committed messages are kept; each keeps its bytes as
sent (stream-framed inside stream blocks).
"""

from __future__ import annotations

import struct

import pyarrow as pa

__all__ = ["message_rows", "ROW_SCHEMA"]

ROW_SCHEMA = pa.schema([
    pa.field("data", pa.binary()), pa.field("lsn", pa.int64()), pa.field("ordinal", pa.int64()),
    pa.field("commit_lsn", pa.int64()), pa.field("commit_ts", pa.int64()),
    pa.field("xid", pa.int64()), pa.field("seq", pa.int64()),
    pa.field("in_stream", pa.bool_()),
])
_U32 = struct.Struct(">I")
_KEEP = b"IUDTRY"           # what the rows hold (changes and the catalog messages)
_XID_FRAMED = b"IUDTRYM"    # messages carrying the (sub)xid inside a stream block


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


class _Spool:
    def __init__(self):
        self.msgs: list = []
        self.first: dict = {}


def message_rows(directory) -> pa.Table:
    """``ROW_SCHEMA`` rows of every committed change/Relation/Type message of a capture
    directory; ``seq`` is the change's ordinal in its transaction (as the decoder's
    ``seq``: a Truncate takes one per relation), null for Relation/Type rows;
    ``in_stream``: sent inside a stream block (the xid follows the type byte);
    ``ordinal``: the capture's message ordinal (the sending order)."""
    from pgoutput_fast import decode_message
    from pgoutput_fast.capture import iter_segments

    out: dict[str, list] = {f.name: [] for f in ROW_SCHEMA}

    def emit(msgs, commit_lsn, commit_ts, xid):
        seq = 0
        for data, lsn, ordinal, framed in msgs:
            t = data[:1]
            if t not in _KEEP:
                continue
            out["data"].append(data)
            out["lsn"].append(lsn)
            out["ordinal"].append(ordinal)
            out["commit_lsn"].append(_signed(commit_lsn))
            out["commit_ts"].append(commit_ts)
            out["xid"].append(xid)
            out["in_stream"].append(framed)
            if t in b"RY":
                out["seq"].append(None)
                continue
            out["seq"].append(seq)
            if t == b"T":
                seq += _U32.unpack_from(data, 5 if framed else 1)[0]
            else:
                seq += 1

    txn: list | None = None
    txn_xid = None
    stream: _Spool | None = None
    streams: dict = {}
    prepared: dict = {}
    prep_gid = None
    for t in iter_segments(directory):
        for lsn, data, ordinal in zip(t.column("lsn").to_pylist(), t.column("data").to_pylist(),
                                      t.column("ordinal").to_pylist()):
            k = data[:1]
            if stream is not None and k in _XID_FRAMED:
                stream.first.setdefault(_U32.unpack_from(data, 1)[0], len(stream.msgs))
                stream.msgs.append((data, lsn, ordinal, True))
            elif txn is not None and k not in b"CP":
                txn.append((data, lsn, ordinal, False))
            elif k == b"B":
                txn, txn_xid = [], decode_message(data).xid
            elif k == b"b":
                m = decode_message(data)
                txn, txn_xid, prep_gid = [], m.xid, m.gid
            elif k == b"C":
                m = decode_message(data)
                emit(txn, m.commit_lsn, m.commit_ts, txn_xid)
                txn = None
            elif k == b"P":
                prepared[prep_gid] = txn
                txn = None
            elif k == b"S":
                stream = streams.setdefault(decode_message(data).xid, _Spool())
            elif k == b"E":
                stream = None
            elif k == b"c":
                m = decode_message(data)
                emit(streams.pop(m.xid).msgs, m.commit_lsn, m.commit_ts, m.xid)
            elif k == b"A":
                m = decode_message(data)
                if m.xid == m.subxid:
                    streams.pop(m.xid, None)
                elif m.xid in streams and m.subxid in streams[m.xid].first:
                    sp = streams[m.xid]
                    pos = sp.first[m.subxid]
                    del sp.msgs[pos:]
                    sp.first = {x: p for x, p in sp.first.items() if p < pos}
            elif k == b"p":
                m = decode_message(data)
                prepared[m.gid] = streams.pop(m.xid).msgs
            elif k == b"K":
                m = decode_message(data)
                emit(prepared.pop(m.gid), m.commit_lsn, m.commit_ts, m.xid)
            elif k == b"r":
                prepared.pop(decode_message(data).gid, None)
            # M outside transactions, O, keepalive-free: nothing to keep
    return pa.Table.from_pydict(out, schema=ROW_SCHEMA)
