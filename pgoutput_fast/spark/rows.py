"""Decoding messages that are held one per row, in any order (``decode_udf``).

``decode()`` reads whole segments in stream order: each task replays transactions the
way PostgreSQL sent them. Some users instead hold pgoutput messages **one per row with
the context of their transaction**, e.g. a table or topic written by another capture
tool, with the committed Insert/Update/Delete/Truncate messages and the Relation/Type
messages, each row carrying

* ``data``: the message as pgoutput sent it (inside a streamed transaction the change
  and Relation/Type messages carry the (sub)transaction xid after the type byte: both
  framings are accepted and told apart per row);
* ``commit_lsn``: the commit LSN of its transaction (for a streamed transaction: the
  Stream Commit's; for a prepared one: the Commit Prepared's);
* ``position``: any number that orders the messages of one transaction as they were
  sent: the message's ordinal in its transaction or in the whole stream (the capture's
  ``ordinal``). Not the LSN: pgoutput sends Relation and Type messages with LSN 0/0.

Rows can be in any order and any partitioning. The only state a row needs is the
schema version of its relation, and the row's own LSN cannot give it: pgoutput sends
a Relation message (at LSN 0/0) once, before the first change that uses a new schema
*in decoding (= commit) order*, so a transaction that wrote earlier in the WAL but
committed later uses a schema first sent for a change with a higher LSN than its own,
and gets no Relation message of its own. ``RowCatalog`` therefore places each version
at the ``(commit_lsn, position)`` of the first Relation message that carried it, and a
row's version is the last one at or before the row's own ``(commit_lsn, position)``.
That is exact given PostgreSQL's locking: DDL on a table takes an ACCESS EXCLUSIVE
lock held to its commit, so every transaction that wrote the table under the old
schema commits no later than the DDL, every transaction writing under the new one
commits no earlier, and inside the DDL's own transaction the sending order
(``position``) separates the two.

``decode_rows`` is the Arrow function (no Spark); ``decode_udf`` wraps it as a scalar
Arrow UDF; ``row_catalog`` builds the catalog from such a DataFrame.
"""

from __future__ import annotations

import json
import struct
from bisect import bisect_right
from typing import Any

import numpy as np
import pyarrow as pa

from ..catalog import RelationCatalog, RelationVersion

__all__ = ["RowCatalog", "row_catalog", "decode_rows", "decode_udf", "udf_return_type",
           "EVENT_FIELDS"]

#: the fields of one decoded change event (the context columns are the caller's own)
EVENT_FIELDS = ("op", "schema", "table", "relid", "before", "before_kind", "after",
                "unchanged_toast", "truncate_options")
#: the typed struct drops the transaction context columns (the caller has them)
_TYPED_CONTEXT = ("_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin")

_U32 = struct.Struct(">I")
_BEGIN = struct.Struct(">cqqI")    # 'B', final_lsn, commit_ts, xid
_COMMIT = struct.Struct(">cBqqq")  # 'C', flags, commit_lsn, end_lsn, commit_ts


def _parse_either(data: bytes, in_stream=None, oids=None):
    """(message, stream_framed) of a Relation/Type message sent inside or outside a
    stream block.

    Without ``in_stream`` both framings are tried, and both often parse: the stream
    framing only inserts an Int32 before the OID, so read the other way the OID comes
    from the first bytes of the next string. Then the one whose OID is in ``oids`` (the
    relation OIDs the change rows use, the type OIDs the Relation messages use) wins;
    ValueError if that does not decide."""
    from .. import DecodeError, decode_message

    found = []
    for framed in ((False, True) if in_stream is None else (bool(in_stream),)):
        try:
            found.append((decode_message(data, in_stream=framed), framed))
        except DecodeError:
            if in_stream is not None:
                raise
    if len(found) == 2 and oids is not None:
        oid = "relid" if data[:1] == b"R" else "typid"
        found = [f for f in found if getattr(f[0], oid) in oids]
    if len(found) != 1:
        raise ValueError(f"cannot tell whether message {data[:24]!r}... was sent inside a "
                         f"stream block ({'both' if found else 'neither'} framings fit): pass "
                         "the in_stream column")
    return found[0]


def _change_oid_candidates(m: bytes) -> tuple:
    """The relation OIDs a change message names under either framing (for ``_parse_either``)."""
    out = []
    for off in (1, 5):
        if len(m) >= off + 4:
            out.append(_U32.unpack_from(m, off)[0])
    if m[:1] == b"T":   # every relid after nrels and options, either framing
        for base in (6, 10):
            out.extend(_U32.unpack_from(m, k)[0] for k in range(base, len(m) - 3, 4))
    return tuple(out)


class RowCatalog(RelationCatalog):
    """A RelationCatalog whose versions are placed at the ``(commit_lsn, lsn)`` of the
    first Relation message that carried them (module doc). ``version_at`` gives the
    version a change row was sent with."""

    def __init__(self):
        super().__init__()
        self.positions: dict[tuple[int, int], tuple[int, int]] = {}
        self._index: dict | None = None

    @classmethod
    def from_messages(cls, rows, change_relids=None) -> "RowCatalog":
        """rows: ``(data, commit_lsn, position)`` or ``(.., in_stream)`` of
        Relation and Type messages, any order (other messages are ignored).
        ``in_stream`` (sent inside a stream block: the xid follows the type byte) can be
        left out (None); then ``change_relids``, the OIDs the change rows could name
        (``_change_oid_candidates``), tell the framings apart."""
        cat = cls()
        todo = []
        for row in rows:
            data, commit_lsn, position = row[:3]
            in_stream = row[3] if len(row) > 3 else None
            data = bytes(data)
            if data[:1] not in (b"R", b"Y"):
                continue
            if commit_lsn is None:
                raise ValueError("a Relation/Type row without commit_lsn (pgoutput sends "
                                 "them only inside transactions)")
            # (a Type message goes before the Relation sent for the same change)
            todo.append((int(commit_lsn), int(position or 0), 0 if data[:1] == b"Y" else 1, data,
                         in_stream))
        todo.sort(key=lambda r: r[:3])
        relids = set(change_relids) if change_relids is not None else None
        relations = {i: _parse_either(r[3], r[4], relids)[0] for i, r in enumerate(todo)
                     if r[3][:1] == b"R"}
        type_oids = {c.type_oid for m in relations.values() for c in m.columns}
        for i, (commit_lsn, position, _, data, in_stream) in enumerate(todo):
            if data[:1] == b"Y":
                cat.apply_type(_parse_either(data, in_stream, type_oids)[0])
                continue
            msg = relations[i]
            before = len(cat.relations.get(msg.relid, ()))
            v = cat.apply_relation(msg, 0)
            if len(cat.relations[msg.relid]) > before:
                cat.positions[(v.relid, v.version)] = (commit_lsn, position)
        return cat

    def _positions_of(self, relid):
        if self._index is None:
            self._index = {}
            for rid, vs in self.relations.items():
                keys = [tuple(self.positions.get((rid, v.version), (v.from_lsn, v.from_lsn)))
                        for v in vs]
                self._index[rid] = (keys, vs)
        return self._index.get(relid)

    def version_at(self, relid: int, commit_lsn: int, position: int) -> RelationVersion | None:
        """The version a change of ``relid`` at ``(commit_lsn, position)`` was sent with."""
        found = self._positions_of(relid)
        if found is None:
            return None
        keys, vs = found
        i = bisect_right(keys, (commit_lsn, position))
        return vs[i - 1] if i else None

    def slice(self, versions) -> RelationCatalog:
        """A plain catalog holding exactly ``versions`` (one per relid) and the types."""
        cat = RelationCatalog()
        cat.types = dict(self.types)
        for v in versions:
            cat.relations[v.relid] = [v]
        return cat

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["positions"] = [[r, v, c, lsn] for (r, v), (c, lsn) in sorted(self.positions.items())]
        return d

    @classmethod
    def from_dict(cls, d) -> "RowCatalog":
        cat = super().from_dict(d)        # builds a RowCatalog (cls())
        cat.positions = {(r, v): (c, lsn) for r, v, c, lsn in d.get("positions", [])}
        return cat

    def __reduce__(self):
        return (RowCatalog.from_dict, (self.to_dict(),))


def row_catalog(df, data: str = "data", commit_lsn: str = "commit_lsn",
                position: str = "position", in_stream: str | None = None) -> RowCatalog:
    """The RowCatalog of a DataFrame holding one message per row: its Relation and Type
    rows, filtered on the JVM side by the first byte and collected (tiny). Without an
    ``in_stream`` column, the distinct relation OIDs the change rows can name are
    collected too (one small aggregate) to tell the framings apart."""
    from pyspark.sql import functions as F

    first = F.substring(F.col(data), 1, 1)
    cols = [F.col(data), F.col(commit_lsn), F.col(position)]
    if in_stream is not None:
        cols.append(F.col(in_stream))
    rows = (df.where(first.isin([bytearray(b"R"), bytearray(b"Y")])).select(*cols).collect())
    change_relids = None
    if in_stream is None:
        # the 4-byte OIDs at both framings' positions (a Truncate's list: driver side)
        ch = df.where(first.isin([bytearray(x) for x in (b"I", b"U", b"D")]))
        cands = ch.select(F.explode(F.array(F.substring(F.col(data), 2, 4),
                                            F.substring(F.col(data), 6, 4))).alias("o")).distinct()
        change_relids = {int.from_bytes(bytes(r[0]), "big") for r in cands.collect() if len(r[0]) == 4}
        for r in df.where(first == bytearray(b"T")).select(F.col(data)).collect():
            change_relids.update(_change_oid_candidates(bytes(r[0])))
    return RowCatalog.from_messages([tuple(r) for r in rows], change_relids=change_relids)


# ======================================================================================
# decode_rows: the Arrow function
# ======================================================================================

def _change_relids(m: bytes, known, in_stream=None) -> tuple[bytes, list]:
    """(the message without stream framing, relids it touches), or ValueError."""
    t = m[:1]
    cands = []
    # 4: a stream-framed message has the xid after the type byte
    for off in ((0, 4) if in_stream is None else ((4,) if in_stream else (0,))):
        body = m if off == 0 else m[:1] + m[5:]
        if t == b"T":
            if len(body) < 6:
                continue
            n = _U32.unpack_from(body, 1)[0]
            if len(body) != 6 + 4 * n:
                continue
            relids = [_U32.unpack_from(body, 6 + 4 * k)[0] for k in range(n)]
        else:
            if len(body) < 6 or body[5:6] not in {b"I": (b"N",), b"U": (b"K", b"O", b"N"),
                                                   b"D": (b"K", b"O")}[t]:
                continue
            relids = [_U32.unpack_from(body, 1)[0]]
        if all(r in known for r in relids):
            cands.append((body, relids))
    if len(cands) != 1:
        raise ValueError(f"{'ambiguous' if cands else 'unknown'} message {m[:16]!r}...: "
                         + ("it parses both inside and outside a stream block" if cands else
                            "its relation is not in the catalog (no Relation message for it: "
                            "build the catalog from rows that include the Relation messages)"))
    return cands[0]


def _as_list(a):
    if a is None:
        return None
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    if isinstance(a, pa.Array):
        return a.to_pylist()
    return list(a)


def udf_return_type(catalog, table=None, binary_unknown=False) -> pa.DataType:
    """The Arrow type ``decode_rows`` returns (before Spark mapping)."""
    from ..decoder import EVENT_SCHEMA
    from .decode import typed_schema

    if table is None:
        return pa.list_(pa.struct([EVENT_SCHEMA.field(n) for n in EVENT_FIELDS]))
    schema = typed_schema(catalog, table, binary_unknown)
    # all nullable: the struct is null for rows that are not this table's changes
    return pa.struct([f.with_nullable(True) for f in schema if f.name not in _TYPED_CONTEXT])


def decode_rows(data, commit_lsn, position, catalog: RowCatalog, *, in_stream=None,
                table: str | None = None, binary_unknown: bool = False,
                spark_types: bool = False) -> pa.Array:
    """Decode change messages held one per row (module doc), in any order.

    ``table=None``: a ``list<struct>`` per row with the change events of that row (the
    ``EVENT_FIELDS`` of the change-event table): one for an Insert/Update/Delete, one per
    relation for a Truncate, none for any other message (Relation, Type, Begin, ...).
    ``table="schema.name"``: a struct per row with that table's typed columns over all
    its versions (as ``decode(df, catalog, table=...)``, without the context columns),
    null for rows that are not a change of that table. ``spark_types`` maps the Arrow
    types Spark cannot hold (``spark.types``).

    ``in_stream`` (optional, per row): the message was sent inside a stream block (it
    carries the (sub)transaction xid after its type byte). Without it the framing is
    told from the bytes (the tuple marker and the catalog's relation OIDs); a message
    that fits both raises ValueError.
    """
    from .. import Decoder
    from .decode import conform_batch, typed_schema

    if not isinstance(catalog, RowCatalog):
        raise TypeError("decode_rows/decode_udf need a RowCatalog (row_catalog(df) or "
                        "RowCatalog.from_messages): the versions must be placed by commit position")
    dv = _as_list(data)
    cv = np.asarray(_as_list(commit_lsn), dtype=object)
    lv = np.asarray(_as_list(position), dtype=object)
    sv = _as_list(in_stream)
    n = len(dv)
    known = catalog.relations
    target_relids = None
    schema = None
    if table is not None:
        schema = typed_schema(catalog, table, binary_unknown)
        target_relids = {v.relid for v in catalog.by_name(table)}
    # rows grouped by the relation versions they need: one Decoder per group
    groups: dict[tuple, list] = {}
    bodies: dict[int, bytes] = {}
    counts = np.zeros(n, np.int64)       # output items of each row
    for i in range(n):
        m = dv[i]
        if m is None or m[:1] not in (b"I", b"U", b"D", b"T"):
            continue
        m = bytes(m)
        body, relids = _change_relids(m, known, None if sv is None else sv[i])
        if target_relids is not None and not target_relids.intersection(relids):
            continue
        c, l_ = cv[i], lv[i]
        if c is None:
            raise ValueError(f"row {i}: a change without commit_lsn")
        c, l_ = int(c), int(l_ or 0)
        vs = []
        for r in dict.fromkeys(relids):
            v = catalog.version_at(r, c, l_)
            if v is None:
                raise ValueError(f"row {i}: no Relation message for relation {r} at or before "
                                 f"commit_lsn {c}, position {l_} in the catalog")
            vs.append(v)
        key = tuple((v.relid, v.version) for v in vs)
        groups.setdefault(key, []).append(i)
        bodies[i] = body
        counts[i] = (len(relids) if table is None else 1)
    if table is None:
        out_type = udf_return_type(catalog, None)
        pieces: list = []
        order: list = []
        for key, rows in groups.items():
            vers = [next(v for v in catalog.relations[r] if v.version == ver) for r, ver in key]
            dec = Decoder(catalog.slice(vers), events=True, tables=False,
                          binary_unknown=binary_unknown)
            ev = _feed_group(dec, rows, bodies, cv, lv).events
            if ev.num_rows != int(counts[rows].sum()):
                raise RuntimeError("decode_rows: events do not match the rows")
            pieces.append(ev.select(list(EVENT_FIELDS)))
            order.extend(rows)
        item_type = out_type.value_type
        if pieces:
            flat = pa.concat_tables(pieces)
            items = pa.StructArray.from_arrays([flat.column(f.name).combine_chunks() for f in item_type],
                                               fields=list(item_type))
        else:
            items = pa.array([], item_type)
        # the items are in group order: place each row's run at its row
        starts_in_items = np.zeros(n, np.int64)
        pos = 0
        for i in order:
            starts_in_items[i] = pos
            pos += int(counts[i])
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(counts, out=offsets[1:])
        take = np.empty(int(offsets[-1]), np.int64)
        for i in np.nonzero(counts)[0].tolist():
            take[offsets[i]:offsets[i + 1]] = np.arange(starts_in_items[i], starts_in_items[i] + counts[i])
        values = items.take(pa.array(take))
        # (the event fields are all types Spark holds as they are)
        return pa.ListArray.from_arrays(pa.array(offsets), values, type=out_type)

    # typed rows of one table
    assert schema is not None and target_relids is not None
    fields = [f.with_nullable(True) for f in schema if f.name not in _TYPED_CONTEXT]
    parts = []
    order = []
    for key, rows in groups.items():
        vers = [next(v for v in catalog.relations[r] if v.version == ver) for r, ver in key]
        dec = Decoder(catalog.slice(vers), events=False, tables=True, binary_unknown=binary_unknown)
        cs = _feed_group(dec, rows, bodies, cv, lv)
        got = [(v, t) for v, t in cs.table_versions if v.relid in target_relids and t.num_rows]
        if len(got) != 1 or got[0][1].num_rows != len(rows):
            raise RuntimeError("decode_rows: typed rows do not match the rows")
        v, t = got[0]
        b = conform_batch(t, v, schema) if spark_types else _conform_arrow(t, v, schema)
        parts.append(b.select([f.name for f in fields]))
        order.extend(rows)
    out_fields = [pa.field(f.name, parts[0].schema.field(f.name).type, True)
                  for f in fields] if parts else fields
    if spark_types and not parts:
        from .types import spark_arrow_type

        out_fields = [pa.field(f.name, spark_arrow_type(f.type), True) for f in fields]
    struct_type = pa.struct(out_fields)
    if not parts:
        return pa.nulls(n, struct_type)
    flat = pa.Table.from_batches(parts).combine_chunks()
    dense = pa.StructArray.from_arrays([flat.column(f.name).chunk(0) for f in out_fields],
                                       fields=out_fields)
    idx = np.full(n, -1, np.int64)
    idx[np.array(order, np.int64)] = np.arange(len(order))
    return dense.take(pa.array(idx, mask=idx < 0))


def _conform_arrow(t, version, schema):
    """``conform_batch`` without the Spark type mapping."""
    from .decode import conform_batch

    return conform_batch(t, version, schema, spark=False)


def _feed_group(dec, rows, bodies, cv, lv):
    """All rows of a group as one synthetic transaction: B, the changes, C."""
    c0 = int(cv[rows[0]])
    # xid 1, not 0: a Begin with xid 0 is the initial snapshot's (its inserts are op 'r');
    # rows given one by one carry no Begin, so their inserts are 'c'
    msgs = [_BEGIN.pack(b"B", c0, 0, 1)]
    lsns = [c0]
    for i in rows:
        msgs.append(bodies[i])
        lsns.append(0)     # the row's own LSN is the caller's (not in the output)
    msgs.append(_COMMIT.pack(b"C", 0, c0, c0, 0))
    lsns.append(c0)
    return dec.feed(msgs, lsns)


# ======================================================================================
# the Spark UDF
# ======================================================================================

def decode_udf(catalog: RowCatalog, *, table: str | None = None, binary_unknown: bool = False):
    """``decode_rows`` as a scalar Arrow UDF: ``udf(data, commit_lsn, position[, in_stream])``.

    Events (``table=None``): ``array<struct<op, schema, table, relid, before,
    before_kind, after, unchanged_toast, truncate_options>>`` per row, to ``explode``.
    Typed (``table="s.t"``): a struct of that table's typed columns (``_op``, the data
    columns, ``_before``, ``_before_kind``, ``_unchanged_toast``, ``_special``,
    ``_version``), null for rows that are not its changes; pass ``binary_unknown=True``
    for messages sent in binary mode (columns of types the decoder does not know are
    then binary, as ``decode`` makes them for a binary capture). The catalog (``row_catalog``)
    travels in the UDF's closure (works on Spark Connect). Needs PySpark >= 4.1
    (``arrow_udf``); on older versions wrap ``decode_rows`` in a UDF of your own."""
    from pyspark.sql import functions as F

    from .decode import spark_schema

    if not isinstance(catalog, RowCatalog):
        raise TypeError("decode_udf needs a RowCatalog (row_catalog(df)); build_catalog's "
                        "SegmentCatalog places versions by segment position, not by commit")
    arrow_udf = getattr(F, "arrow_udf", None)
    if arrow_udf is None:
        raise RuntimeError("decode_udf needs PySpark >= 4.1 (pyspark.sql.functions.arrow_udf); "
                           "wrap pgoutput_fast.spark.decode_rows in a UDF of your own")
    arrow_type = udf_return_type(catalog, table, binary_unknown)
    if table is None:
        from pyspark.sql.types import ArrayType

        elem = spark_schema(pa.schema(list(arrow_type.value_type)))
        spark_type: Any = ArrayType(elem, True)
    else:
        spark_type = spark_schema(pa.schema(list(arrow_type)))
    cat_json = catalog.to_json()

    def run(data, commit_lsn, position, in_stream=None):
        cat = RowCatalog.from_dict(json.loads(cat_json))
        return decode_rows(data, commit_lsn, position, cat, in_stream=in_stream, table=table,
                           binary_unknown=binary_unknown, spark_types=True)

    return arrow_udf(run, spark_type)
