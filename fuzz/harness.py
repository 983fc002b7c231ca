"""Fuzz targets for pgoutput_fast (atheris, coverage-guided; see fuzz/run.sh).

Each target takes one byte string from libFuzzer and drives both implementations, the
native Cython core and the pure-Python reference twin. A finding is anything but a
clean ``DecodeError`` in both, or a difference between them:

* ``decode_message``: one message, ``in_stream`` from the first byte. Native and
  reference must return equal objects, or raise ``DecodeError`` with the same offset
  and message type. An object that decodes re-encodes to the same bytes.
* ``feed``: a stream of messages (``u16 length + bytes`` each) fed to ``Decoder`` in two
  batches, options from the first byte. Both implementations must give the same
  ChangeSets (every table validated in full, so an invalid Arrow array is a finding)
  or the same ``DecodeError`` (index, offset, type), and each decoder must then still
  decode a fixed valid transaction.
* ``values``: the typed value parsers (``parse_values``) of one column type (from the
  first bytes) over a list of values (``u16 length + bytes`` each, 't' or 'b').
  Same array and specials from both, or ``DecodeError`` from both.

A crash (segfault, sanitizer report), a hang (``-timeout``), an unexpected exception,
or a native/reference difference stops the run and libFuzzer writes the input to
``crash-*`` / ``timeout-*``: add it as a regression test, fix it, and fuzz on.

Run one target:  python fuzz/harness.py TARGET [libFuzzer flags] [CORPUS_DIR ...]
Seeds:           python fuzz/harness.py --seeds DIR  (from the real captures in
                 tests/fixtures: whole messages, short streams, and typed values)
"""

from __future__ import annotations

import os
import struct
import sys
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures")

TARGETS = ("decode_message", "feed", "values")


# -- input formats ------------------------------------------------------------------------

def split_frames(data: bytes, limit: int = 64) -> list[bytes]:
    """``u16 length + bytes`` records; a last short record takes what is left."""
    out = []
    pos, n = 0, len(data)
    while pos + 2 <= n and len(out) < limit:
        (length,) = struct.unpack_from(">H", data, pos)
        pos += 2
        out.append(data[pos : pos + length])
        pos += length
    return out


def join_frames(items) -> bytes:
    return b"".join(struct.pack(">H", len(m)) + bytes(m) for m in items if len(m) < 65536)


# -- the implementations -------------------------------------------------------------------

def _setup():
    global pgo, DecodeError, native, reference, decoder_module, T, ref_values, encode_message
    import pgoutput_fast as pgo
    from pgoutput_fast import DecodeError, _native as native, _reference as reference
    from pgoutput_fast import decoder as decoder_module, types as T, encode_message
    from pgoutput_fast._reference import values as ref_values


def _decoder(impl, **kwargs):
    with mock.patch.object(decoder_module, "_impl", lambda: impl):
        return decoder_module.Decoder(**kwargs)


class Mismatch(AssertionError):
    """The native core and the reference twin disagree (a finding)."""


# -- target: decode_message ------------------------------------------------------------------

def _decode_outcome(fn, msg, in_stream):
    try:
        return ("ok", fn(msg, in_stream=in_stream))
    except DecodeError as exc:
        return ("error", exc.offset, exc.message_type)


def target_decode_message(data: bytes) -> None:
    if not data:
        return
    in_stream = bool(data[0] & 1)
    msg = data[1:]
    a = _decode_outcome(native.decode_message, msg, in_stream)
    b = _decode_outcome(reference.decode_message, msg, in_stream)
    if a != b:
        raise Mismatch(f"decode_message: native {a!r} vs reference {b!r}")
    if a[0] == "ok":
        again = encode_message(a[1])
        if again != msg:
            raise Mismatch(f"re-encoded {again!r} differs from the input {msg!r}")


# -- target: Decoder.feed --------------------------------------------------------------------

# A valid transaction on a relation of its own (relid 999999): after any input, each
# decoder must still decode it, to exactly one committed row.
_PROBE = None


def _probe_messages():
    global _PROBE
    if _PROBE is None:
        from pgoutput_fast import Begin, Commit, Insert, Relation, RelationColumn, Value
        rel = Relation(999999, "fuzz", "probe", "d", (RelationColumn(1, "id", 23, -1),))
        _PROBE = [encode_message(m) for m in (
            Begin(0x7000000, 0, 1), rel, Insert(999999, (Value("t", b"42"),)),
            Commit(0, 0x7000000, 0x7000010, 0))]
    return _PROBE


def _feed_outcome(dec, msgs):
    try:
        cs = dec.feed(msgs)
    except DecodeError as exc:
        return ("error", (exc.message_index, exc.offset, exc.message_type), exc.changes)
    return ("ok", None, cs)


def _same_table(a, b) -> bool:
    """Same schema (with metadata) and values; NaN equals NaN (compared as printed)."""
    if not a.schema.equals(b.schema, check_metadata=True) or a.num_rows != b.num_rows:
        return False
    if a.equals(b):
        return True
    return all(a.column(i).equals(b.column(i)) or str(a.column(i)) == str(b.column(i))
               for i in range(a.num_columns))


def _same_changeset(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    for cs in (a, b):
        if cs.events is not None:
            cs.events.validate(full=True)      # an invalid Arrow array is a finding
        for _, table in cs.table_versions:
            table.validate(full=True)
    if (a.events is None) != (b.events is None):
        return False
    if a.events is not None and not _same_table(a.events, b.events):
        return False
    if [v for v, _ in a.table_versions] != [v for v, _ in b.table_versions]:
        return False
    if not all(_same_table(ta, tb) for (_, ta), (_, tb) in zip(a.table_versions, b.table_versions)):
        return False
    return a.messages == b.messages


def target_feed(data: bytes) -> None:
    if not data:
        return
    opts = data[0]
    msgs = split_frames(data[1:])
    kwargs = dict(events=bool(opts & 1) or not (opts & 2), tables=bool(opts & 2),
                  binary_unknown=bool(opts & 4) or None)
    if opts & 8:
        kwargs["max_pending_bytes"] = 64        # spill spools to a temp file
    cut = (opts >> 4) % (len(msgs) + 1)
    results = {}
    for name, impl in (("native", native), ("reference", reference)):
        dec = _decoder(impl, **kwargs)
        outcomes = [_feed_outcome(dec, batch) for batch in (msgs[:cut], msgs[cut:])]
        # After a DecodeError the decoder must take the next batch as if fresh (the
        # catalog keeps what it learnt); otherwise the probe may meet an open transaction.
        probe = _feed_outcome(dec, _probe_messages())
        if outcomes[-1][0] == "error":
            if probe[0] != "ok":
                raise Mismatch(f"{name}: the decoder is not usable after a DecodeError: {probe[1]}")
            cs = probe[2]
            rows = (cs.tables["fuzz.probe"].column("id").to_pylist() if kwargs["tables"]
                    else [int(dict(cs.events.column("after")[0].as_py())["id"])])
            if rows != [42] or cs.num_changes != 1:
                raise Mismatch(f"{name}: the decoder is not usable after a DecodeError: {rows!r}")
        results[name] = outcomes + [probe]
    for i, (a, b) in enumerate(zip(results["native"], results["reference"])):
        if a[:2] != b[:2] or not _same_changeset(a[2], b[2]):
            raise Mismatch(f"feed #{i}: native {a[:2]} vs reference {b[:2]}")


# -- target: value parsers -------------------------------------------------------------------

def column_type_from(header: bytes):
    """A valid ColumnType from 4 bytes: kind, element kind, decimal precision, scale."""
    kind = header[0] % (T.K_ARRAY + 1)
    elem = header[1] % T.K_ARRAY
    precision = header[2] % 38 + 1
    scale = header[3] % (precision + 1)
    if kind == T.K_ARRAY:
        if elem != T.K_DECIMAL:
            precision = scale = 0
        return T.ColumnType(T.K_ARRAY, elem_kind=elem, elem_precision=precision, elem_scale=scale)
    if kind == T.K_DECIMAL:
        return T.ColumnType(T.K_DECIMAL, precision, scale)
    return T.ColumnType(kind)


def _values_outcome(fn, ct, values):
    try:
        arr, specials = fn(ct, values)
    except DecodeError:
        return ("error",)
    arr.validate(full=True)
    return ("ok", arr, specials)


def _same_values(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return True
    return (a[1].type == b[1].type and a[2] == b[2]
            and (a[1].equals(b[1]) or str(a[1]) == str(b[1])))


def target_values(data: bytes) -> None:
    if len(data) < 5:
        return
    ct = column_type_from(data[:4])
    binary = data[4]
    values = []
    for i, v in enumerate(split_frames(data[5:], limit=16)):
        if v == b"\xff\xffNULL":
            values.append(None)
        else:
            values.append(("b" if binary >> (i % 8) & 1 else "t", v))
    a = _values_outcome(native.parse_values, ct, values)
    b = _values_outcome(ref_values.parse_values, ct, values)
    if not _same_values(a, b):
        raise Mismatch(f"parse_values({ct}, {values!r}): native {a!r} vs reference {b!r}")


# -- seeds from the real captures ----------------------------------------------------------

def write_seeds(out_dir: str) -> int:
    """Seed corpora for every target from tests/fixtures: returns the number written."""
    _setup()
    from pgoutput_fast.framing import read_capture
    import hashlib

    count = 0

    def put(target, blob):
        nonlocal count
        d = os.path.join(out_dir, target)
        os.makedirs(d, exist_ok=True)
        name = hashlib.sha1(blob).hexdigest()
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)
        count += 1

    for fname in sorted(os.listdir(FIXTURES)):
        if not fname.endswith(".pgoc"):
            continue
        _, msgs = read_capture(os.path.join(FIXTURES, fname))
        msgs = [bytes(m) for m in msgs]
        binary_mode = "binary" in fname
        # decode_message: every distinct short message (in_stream where it is inside S..E)
        in_stream = False
        for m in msgs:
            if m[:1] == b"S":
                in_stream = True
            elif m[:1] == b"E":
                in_stream = False
            if len(m) <= 4096:
                put("decode_message", bytes([in_stream]) + m)
        # feed: windows of consecutive messages starting at each Begin / Stream Start
        starts = [i for i, m in enumerate(msgs) if m[:1] in (b"B", b"S", b"b")]
        for k, i in enumerate(starts):
            window = [m for m in msgs[max(0, i - 3) : i + 8] if len(m) <= 1024]
            put("feed", bytes([(k * 0x13) & 0xFF]) + join_frames(window))
        # values: each column's values from the Insert messages, typed by its Relation
        catalog = {}
        for m in msgs:
            t = m[:1]
            try:
                if t == b"R":
                    rel = native.decode_message(m)
                    catalog[rel.relid] = rel
                elif t == b"I":
                    ins = native.decode_message(m)
                    rel = catalog.get(ins.relid)
                    if rel is None:
                        continue
                    for col, v in zip(rel.columns, ins.new):
                        if not isinstance(v, pgo.Value):
                            continue
                        ct = T.resolve_column_type(col.type_oid, col.typmod)
                        p, s = ((ct.elem_precision, ct.elem_scale) if ct.kind == T.K_ARRAY
                                else (ct.precision, ct.scale))
                        head = bytes([ct.kind, max(ct.elem_kind, 0), max(p - 1, 0), s])
                        fmt = 0xFF if v.format == "b" else 0x00
                        put("values", head + bytes([fmt]) + join_frames([v.data]))
            except DecodeError:
                continue
    return count


# -- entry point ----------------------------------------------------------------------------

def main(argv):
    if len(argv) >= 2 and argv[1] == "--seeds":
        print(write_seeds(argv[2]), "seed inputs written to", argv[2])
        return 0
    if len(argv) < 2 or argv[1] not in TARGETS:
        print(__doc__)
        print("targets:", ", ".join(TARGETS))
        return 2
    import atheris

    target = argv[1]
    # Coverage of the Python glue of the native path; the reference twin is the oracle
    # and is not instrumented (it would slow every run several times).
    with atheris.instrument_imports(include=["pgoutput_fast.decoder", "pgoutput_fast.catalog",
                                             "pgoutput_fast.messages", "pgoutput_fast.types"]):
        _setup()
    fn = globals()["target_" + target]
    atheris.Setup([argv[0]] + argv[2:], fn)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
