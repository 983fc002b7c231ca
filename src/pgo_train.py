"""The training run of the profile-guided build (setup.py, GCC): decodes a synthetic
pgoutput stream through every output path, so that the compiler lays out and inlines the
decoder for the paths real streams take.

It needs no server: the stream is written by ``pgoutput_fast.encode`` from values made
here, in PostgreSQL's text form and in its binary (send) form, for the common column
types. What it covers:

* a table of an int8 key and 16 columns of mixed types, a 48-column one that cycles
  through 17 kinds (integers, floats, numeric, text, varchar, bool, timestamps, date,
  time, uuid, bytea, jsonb), in text and in binary mode;
* runs of inserts, updates (with an unchanged TOASTed value, 'u', in some) and deletes
  (key images), a table with REPLICA IDENTITY FULL (old rows), nulls, a Truncate;
* streamed transactions (protocol 2, a third of the changes), each ending with a
  subtransaction aborted inside the stream, and two-phase transactions (protocol 3);
* each stream decoded into typed tables, into the change-event table, and into both,
  and a slice of it as message objects (``decode_message``).

It is deterministic (a fixed seed) and takes a few seconds with the instrumented build.
Usage: ``python src/pgo_train.py`` with the instrumented package importable.
"""

from __future__ import annotations

import datetime as _dt
import random
import struct
import sys
import uuid

import numpy as np
import pyarrow as pa

from pgoutput_fast import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Decoder,
    Delete,
    Insert,
    Prepare,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    UNCHANGED_TOAST,
    Update,
    Value,
    decode_message,
    encode_message,
    pg_timestamp_to_datetime,
)

PG_EPOCH_DATE = _dt.date(2000, 1, 1)


def _numeric_send(text: str) -> bytes:
    """numeric_send() of a decimal string with an optional sign and point."""
    neg = text.startswith("-")
    digits = text.lstrip("-")
    ip, _, fp = digits.partition(".")
    dscale = len(fp)
    ip = ip.lstrip("0")
    # groups of 4 around the point
    ip = "0" * (-len(ip) % 4) + ip
    fp = fp + "0" * (-len(fp) % 4)
    groups = [int(ip[i:i + 4]) for i in range(0, len(ip), 4)]
    weight = len(groups) - 1
    groups += [int(fp[i:i + 4]) for i in range(0, len(fp), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    sign = 0x4000 if neg and groups else 0
    return struct.pack(">hhHH", len(groups), weight, sign, dscale) + b"".join(
        struct.pack(">H", g) for g in groups)


class _Kind:
    """A column type: its OID and typmod, and a value as (text, binary)."""

    def __init__(self, name, oid, typmod, make):
        self.name, self.oid, self.typmod, self.make = name, oid, typmod, make


def _ts(rng, tz):
    us = rng.randrange(-2 * 10**15, 2 * 10**15) if rng.random() < 0.05 else rng.randrange(7 * 10**14, 9 * 10**14)
    if rng.random() < 0.5:
        us -= us % 10**6                                  # whole seconds
    t = pg_timestamp_to_datetime(us)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    if t.microsecond:
        text += (".%06d" % t.microsecond).rstrip("0")
    text += "+00" if tz else ""
    return text, struct.pack(">q", us)


def _kinds():
    def int_kind(name, oid, fmt, lo, hi):
        return _Kind(name, oid, -1, lambda r: (lambda v: (str(v), struct.pack(fmt, v)))(
            r.randrange(lo, hi) if r.random() < 0.8 else r.randrange(-9, 100)))

    def f8(r):
        v = r.choice([r.random() * 10**r.randrange(-5, 12), r.randrange(10**6) / 100,
                      float(r.randrange(-10**6, 10**6)), r.randrange(1, 10**7) / 7])
        return repr(v), struct.pack(">d", v)

    def f4(r):
        v = struct.unpack(">f", struct.pack(">f", r.random() * 10**r.randrange(-3, 6)))[0]
        return repr(v), struct.pack(">f", v)   # (text: a float4 parses its own repr)

    def num(scale):
        def make(r):
            v = r.randrange(-10**9, 10**10) if r.random() < 0.3 else r.randrange(10**7)
            s = str(abs(v)).rjust(scale + 1, "0")
            text = ("-" if v < 0 else "") + (s[:-scale] + "." + s[-scale:] if scale else s)
            return text, _numeric_send(text)
        return make

    def text_kind(r):
        s = r.choice(["customer-%d" % r.randrange(10**5), uuid.UUID(int=r.getrandbits(128)).hex,
                      "näme-%d" % r.randrange(1000), "x" * r.randrange(0, 60)])
        b = s.encode()
        return s, b

    def date(r):
        d = PG_EPOCH_DATE + _dt.timedelta(days=r.randrange(-8000, 12000))
        return d.isoformat(), struct.pack(">i", (d - PG_EPOCH_DATE).days)

    def time_(r):
        us = r.randrange(86400 * 10**6)
        t = (_dt.datetime(2000, 1, 1) + _dt.timedelta(microseconds=us)).time()
        text = t.strftime("%H:%M:%S") + ((".%06d" % t.microsecond).rstrip("0") if t.microsecond else "")
        return text, struct.pack(">q", us)

    def uuid_(r):
        u = uuid.UUID(int=r.getrandbits(128))
        return str(u), u.bytes

    def bytea(r):
        b = bytes(r.getrandbits(8) for _ in range(r.randrange(0, 24)))
        return "\\x" + b.hex(), b

    def jsonb(r):
        s = '{"a": %d, "b": "v%d"}' % (r.randrange(1000), r.randrange(1000))
        return s, b"\x01" + s.encode()

    def boolean(r):
        v = r.random() < 0.5
        return ("t" if v else "f"), (b"\x01" if v else b"\x00")

    return [
        int_kind("int4", 23, ">i", -2**31, 2**31),
        int_kind("int8", 20, ">q", -2**63, 2**63),
        int_kind("int2", 21, ">h", -2**15, 2**15),
        _Kind("text", 25, -1, text_kind),
        _Kind("varchar", 1043, 64 + 4, text_kind),
        _Kind("timestamptz", 1184, -1, lambda r: _ts(r, True)),
        _Kind("timestamp", 1114, -1, lambda r: _ts(r, False)),
        _Kind("numeric", 1700, ((12 << 16) | 2) + 4, num(2)),
        _Kind("numeric", 1700, -1, num(4)),
        _Kind("bool", 16, -1, boolean),
        _Kind("float8", 701, -1, f8),
        _Kind("float4", 700, -1, f4),
        _Kind("date", 1082, -1, date),
        _Kind("time", 1083, -1, time_),
        _Kind("uuid", 2950, -1, uuid_),
        _Kind("bytea", 17, -1, bytea),
        _Kind("jsonb", 3802, -1, jsonb),
    ]


class _Table:
    def __init__(self, relid, name, kinds, replident=b"d"):
        self.relid, self.name, self.kinds, self.replident = relid, name, kinds, replident
        self.next_id = 1

    def relation(self, xid=None):
        cols = [RelationColumn(1, "id", 20, -1)] + [
            RelationColumn(0, "c%d_%s" % (i, k.name), k.oid, k.typmod) for i, k in enumerate(self.kinds)]
        return Relation(self.relid, "public", self.name, self.replident.decode(), tuple(cols), xid)

    def row(self, rng, binary, key, nulls=0.03, toast=False):
        vals = [Value("b", struct.pack(">q", key)) if binary else Value("t", str(key).encode())]
        for k in self.kinds:
            if rng.random() < nulls:
                vals.append(None)
            elif toast and k.oid == 25 and rng.random() < 0.5:
                vals.append(UNCHANGED_TOAST)
            else:
                text, send = k.make(rng)
                vals.append(Value("b", send) if binary else Value("t", text.encode()))
        return tuple(vals)

    def key(self, binary, key):
        v = Value("b", struct.pack(">q", key)) if binary else Value("t", str(key).encode())
        return (v,) + (None,) * len(self.kinds)


def _pool(rng, table, binary, xid=None, size=600):
    """Encoded changes of a table to draw runs from: inserts, updates, deletes."""
    ins, upd, dele = [], [], []
    for _ in range(size):
        ins.append(encode_message(Insert(table.relid, table.row(rng, binary, table.next_id), xid)))
        table.next_id += 1
    for _ in range(size // 2):
        key = rng.randrange(1, table.next_id)
        if table.replident == b"f":
            upd.append(encode_message(Update(table.relid, "O", table.row(rng, binary, key),
                                             table.row(rng, binary, key), xid)))
            dele.append(encode_message(Delete(table.relid, "O", table.row(rng, binary, key), xid)))
        else:
            upd.append(encode_message(Update(table.relid, None, None,
                                             table.row(rng, binary, key, toast=rng.random() < 0.2), xid)))
            dele.append(encode_message(Delete(table.relid, "K", table.key(binary, key), xid)))
    return ins, upd, dele


def _interleaved(rng, a, b, n):
    """n changes of two tables' pools, in runs of one to three of each."""
    xs, ys = _changes(rng, a, n), _changes(rng, b, n)
    out, i, j = [], 0, 0
    while len(out) < n:
        run = rng.randrange(1, 4)
        if rng.random() < 0.7:
            out.extend(xs[i:i + run])
            i += run
        else:
            out.extend(ys[j:j + run])
            j += run
    return out[:n]


def _changes(rng, pool, n):
    """n encoded changes: runs of inserts, of updates and of deletes."""
    ins, upd, dele = pool
    out = []
    while len(out) < n:
        what = rng.random()
        src = ins if what < 0.6 else upd if what < 0.85 else dele
        k = rng.randrange(len(src))
        run = rng.randrange(1, 400)
        out.extend((src * (1 + (k + run) // len(src)))[k:k + run])
    return out[:n]


def _stream(binary: bool, seed: int, rows: int):
    """(messages, lsns, the event rows they make) of one synthetic stream."""
    rng = random.Random(seed)
    kinds = _kinds()
    narrow = _Table(16384, "train_narrow", kinds[:16])
    wide = _Table(16385, "train_wide", [kinds[i % len(kinds)] for i in range(47)])
    full = _Table(16386, "train_full", kinds[:8], replident=b"f")
    pools = {t.relid: _pool(rng, t, binary) for t in (narrow, wide, full)}
    out = []
    ts = 7 * 10**14
    xid = 1000
    lsn = 0x16B0000
    kept = 1                # changes of committed transactions (the Truncate's row)

    def put(*msgs):
        out.extend(m if isinstance(m, bytes) else encode_message(m) for m in msgs)

    def txn(items, with_rel=True):
        nonlocal xid, ts
        xid += 1
        ts += 1000
        put(Begin(lsn + 10**6, ts, xid))
        if with_rel:
            put(*(t.relation() for t in (narrow, wide, full)))
        out.extend(items)
        put(Commit(0, lsn + 10**6, lsn + 10**6 + 8, ts))

    # plain transactions
    for t, share in ((narrow, 0.35), (wide, 0.15), (full, 0.1)):
        left = int(rows * share)
        while left > 0:
            n = min(left, rng.randrange(500, 20000))
            txn(_changes(rng, pools[t.relid], n))
            left -= n
            kept += n
    # small transactions over two tables interleaved in short runs (the windows), then
    # one large transaction of that shape (its parts)
    left = int(rows * 0.1)
    while left > 0:
        n = min(left, rng.randrange(1, 60)) if left > rows * 0.05 else left
        txn(_interleaved(rng, pools[narrow.relid], pools[full.relid], n), with_rel=False)
        left -= n
        kept += n
    txn([encode_message(Truncate(0, (narrow.relid,), None))], with_rel=False)
    # streamed transactions (a third of the changes), each ending with a subtransaction
    # aborted inside the stream; every third writes two tables in short runs (its parts)
    left = int(rows * 0.3)
    streams = 0
    while left > 0:
        xid += 2
        streams += 1
        top, sub = xid - 1, xid
        in_top = _pool(rng, narrow if left % 2 else wide, binary, top, 300)
        in_other = _pool(rng, full, binary, top, 300) if streams % 3 == 0 else None
        in_sub = _pool(rng, narrow, binary, sub, 40)
        for chunk in range(12):
            put(StreamStart(top, 1 if chunk == 0 else 0))
            if chunk == 0:
                put(*(t.relation(top) for t in (narrow, wide)))
            n = rng.randrange(100, 400)
            if in_other is None:
                out.extend(_changes(rng, in_top, n))
            else:
                out.extend(_interleaved(rng, in_top, in_other, n))
            if chunk == 11:
                # the subtransaction's changes last (an abort discards from its first on)
                out.extend(_changes(rng, in_sub, rng.randrange(50, 200)))
            put(StreamStop())
            left -= n
            kept += n
        put(StreamAbort(top, sub, None, None))
        ts += 1000
        put(StreamCommit(top, 0, lsn + 10**6, lsn + 10**6 + 8, ts))
    # two-phase transactions (a tenth)
    left = int(rows * 0.1)
    while left > 0:
        xid += 1
        ts += 1000
        gid = "g%d" % xid
        n = min(left, rng.randrange(1000, 5000))
        put(BeginPrepare(lsn + 10**6, lsn + 10**6 + 8, ts, xid, gid), narrow.relation())
        out.extend(_changes(rng, pools[narrow.relid], n))
        put(Prepare(0, lsn + 10**6, lsn + 10**6 + 8, ts, xid, gid),
            CommitPrepared(0, lsn + 2 * 10**6, lsn + 2 * 10**6 + 8, ts + 1, xid, gid))
        left -= n
        kept += n
    lsns = np.arange(len(out), dtype=np.uint64) * 64 + lsn
    return pa.array(out, pa.binary()), lsns, kept


def main(rows: int = 120_000) -> int:
    for binary, seed in ((False, 1), (True, 2)):
        msgs, lsns, kept = _stream(binary, seed, rows)
        for kw in ({"tables": False}, {"events": False}, {}):
            for _ in range(2):
                cs = Decoder(**kw).feed(msgs, lsns)
                if cs.events is not None and cs.events.num_rows != kept:
                    raise SystemExit(f"pgo_train: {cs.events.num_rows} event rows, not {kept}")
        in_stream = False
        for m in msgs.slice(0, 20000).to_pylist():
            decode_message(m, in_stream=in_stream)
            if m[:1] == b"S":
                in_stream = True
            elif m[:1] == b"E":
                in_stream = False
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 120_000))
