"""Peers measured in the same run: pypgoutput 0.0.3's decoder layer (text only; pip
install pypgoutput==0.0.3, the ``bench`` extra) and a minimal ``struct``-based Python
TupleData splitter, the floor any pure-Python decoder reaches."""

import struct

__all__ = ["pypgoutput_decode", "struct_split", "have_pypgoutput", "PYPGOUTPUT_BINARY",
           "PYPGOUTPUT_STREAM"]

#: what pypgoutput does with binary mode (recorded instead of a number)
PYPGOUTPUT_BINARY = ("cannot decode binary mode: its TupleData reader ignores the 'b' kind "
                     "without reading the value, so every later column is misread (no error)")
#: what it does with streamed transactions (protocol 2+)
PYPGOUTPUT_STREAM = ("cannot decode streamed transactions: it has no Stream Start/Stop/Commit/"
                     "Abort messages, and its Insert/Update/Delete readers take the xid that "
                     "streaming adds for the relation id (every change misread)")


def have_pypgoutput() -> bool:
    try:
        import pypgoutput.decoders  # noqa: F401
    except ImportError:
        return False
    return True


def pypgoutput_decode(raw):
    """Decode every B/C/R/I/U/D/T message with pypgoutput.decoders; rows seen."""
    from pypgoutput import decoders as d

    classes = {ord("B"): d.Begin, ord("C"): d.Commit, ord("R"): d.Relation, ord("I"): d.Insert,
               ord("U"): d.Update, ord("D"): d.Delete, ord("T"): d.Truncate}
    rows = 0
    for m in raw:
        cls = classes.get(m[0])
        if cls is not None:
            cls(m)
            rows += m[0] in (73, 85, 68)
    return rows


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _split_tuple(m, pos):
    (n,) = _I16.unpack_from(m, pos)
    pos += 2
    out = []
    for _ in range(n):
        k = m[pos]
        pos += 1
        if k == 116 or k == 98:
            (ln,) = _I32.unpack_from(m, pos)
            pos += 4
            out.append(m[pos:pos + ln])
            pos += ln
        else:
            out.append(None)
    return out, pos


def struct_split(raw):
    """Split every I/U/D into its column values (bytes), nothing more (inside a stream
    block, after the xid that streaming adds)."""
    rows = 0
    skip = 0                        # 4 inside Stream Start .. Stream Stop
    for m in raw:
        t = m[0]
        if t == 73:
            _split_tuple(m, 6 + skip)
        elif t == 85 or t == 68:
            pos = 5 + skip
            if m[pos] in (75, 79):
                _, pos = _split_tuple(m, pos + 1)
                if t == 85:
                    _split_tuple(m, pos + 1)
            elif t == 85:
                _split_tuple(m, pos + 1)
        else:
            if t == 83:
                skip = 4
            elif t == 69:
                skip = 0
            continue
        rows += 1
    return rows
