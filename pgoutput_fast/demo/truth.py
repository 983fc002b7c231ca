"""What replaying a capture must give: a table's rows as PostgreSQL computes them.

``table_truth(cur, schema, table)`` reads ``pg_attribute``/``pg_type`` and ``SELECT * FROM
ONLY schema.table``, and returns the rows in exactly the representation that
``TableImage.rows()`` uses for typed images (see ``image.py``), for text and for binary
mode. The values come from PostgreSQL itself, not from ``pgoutput_fast.types``: every
column is selected in its output-function text form (what pgoutput sends as ``t``) and,
where the typed value needs it, as an exact expression computed by the server
(``float4send``, ``extract(epoch ...)``, ``uuid_send``, interval fields, the type's send
function for types the decoder does not know...). The Arrow type each column must have is
derived from the catalog in the same independent way (``TypeSpec.arrow_type``).

Call it on a connection with the capture's session settings
(``pgoutput_fast.sqlcapture.session_settings``): they shape the text forms.

The demo compares its replay with it; the ground-truth tests use it too
(``tests/decoder/test_decoder_pg.py`` also derives the change-event table's expected text).
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import NamedTuple

import pyarrow as pa

from ..arrow_values import Special

__all__ = ["TypeSpec", "PgCatalog", "PgColumn", "TableTruth", "table_truth", "published_tables"]

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def _natural(x, t):
    return x


def _text(x, t):
    return t


def _bytes(x, t):
    return bytes(x)


def _float4(x, t):
    return struct.unpack(">f", bytes(x))[0]


def _float8(x, t):
    return struct.unpack(">d", bytes(x))[0]


def _date(x, t):
    if x is None:
        return {"infinity": INT32_MAX, "-infinity": INT32_MIN}[t]
    return x


def _timestamp(x, t):
    if x is None:
        return {"infinity": INT64_MAX, "-infinity": INT64_MIN}[t]
    x = int(x)
    if not INT64_MIN < x < INT64_MAX:
        # beyond int64 µs since the Unix epoch: a value the Arrow type cannot hold
        return Special(t)
    return x


def _time(x, t):
    x = int(x)
    # 24:00:00 is a valid PostgreSQL time that Arrow's time64 (< 1 day) cannot hold
    return Special(t) if x == 86_400_000_000 else x


def _interval(x, t):
    months, days, micros = (int(f) for f in x)
    if not INT64_MIN <= micros * 1000 <= INT64_MAX:
        return Special(t)
    return (months, days, micros * 1000)


def _decimal(x, t):
    return Special(t) if t == "NaN" else Decimal(t)


_TS_EPOCH_US = "CASE WHEN isfinite({c}) THEN extract(epoch FROM {c}) * 1000000 END"
_STRING_TYPES = ("text", "varchar", "bpchar", "name", "char", "xml", "json", "jsonb", "timetz",
                 "inet", "cidr", "macaddr", "macaddr8")

#: pg_catalog type name -> (documented Arrow type, exact SQL expression or None, converter)
#: converter(x, t): x = the expression's value, t = the output-function text (never NULL)
SCALARS = {
    "bool": (pa.bool_(), "{c}", _natural),
    "int2": (pa.int16(), "{c}", _natural),
    "int4": (pa.int32(), "{c}", _natural),
    "int8": (pa.int64(), "{c}", _natural),
    "oid": (pa.uint32(), "{c}", _natural),
    "float4": (pa.float32(), "float4send({c})", _float4),
    "float8": (pa.float64(), "float8send({c})", _float8),
    "bytea": (pa.binary(), "{c}", _bytes),
    "date": (pa.date32(), "CASE WHEN isfinite({c}) THEN {c} - DATE '1970-01-01' END", _date),
    "time": (pa.time64("us"), "(extract(epoch FROM {c}) * 1000000)::int8", _time),
    "timestamp": (pa.timestamp("us"), _TS_EPOCH_US, _timestamp),
    "timestamptz": (pa.timestamp("us", tz="UTC"), _TS_EPOCH_US, _timestamp),
    "interval": (
        pa.month_day_nano_interval(),
        "ARRAY[extract(year FROM {c}) * 12 + extract(month FROM {c}), extract(day FROM {c}), "
        "extract(hour FROM {c}) * 3600000000 + extract(minute FROM {c}) * 60000000 "
        "+ extract(microseconds FROM {c})]::numeric[]",
        _interval,
    ),
    "uuid": (pa.binary(16), "uuid_send({c})", _bytes),
}
for _name in _STRING_TYPES:
    SCALARS[_name] = (pa.string(), None, _text)
del _name


class TypeSpec(NamedTuple):
    """What PostgreSQL's catalog says a column must decode to."""

    kind: str                  # 'scalar' | 'array' | 'unknown'
    arrow: pa.DataType | None  # for 'unknown' and arrays of 'unknown' it depends on the mode
    expr: str | None           # SQL template of the exact value ({c} = column)
    conv: object
    elem: "TypeSpec | None" = None
    send: str | None = None    # 'unknown': the type's send function (binary mode value)

    def arrow_type(self, binary: bool) -> pa.DataType:
        if self.kind == "unknown":
            return pa.binary() if binary else pa.string()
        if self.kind == "array" and self.elem.kind == "unknown":
            return pa.list_(self.elem.arrow_type(binary))
        return self.arrow


class PgCatalog:
    """pg_type lookups, cached."""

    def __init__(self, cur):
        self.cur = cur
        self._types = {}

    def type_row(self, oid):
        row = self._types.get(oid)
        if row is None:
            self.cur.execute(
                "SELECT t.typname, n.nspname, t.typtype, t.typbasetype, t.typtypmod, t.typelem, "
                "t.typlen, t.typsend::regproc::text, t.typinput::regproc::text, t.typdelim "
                "FROM pg_type t "
                "JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = %s", (oid,))
            row = self._types[oid] = self.cur.fetchone()
        return row

    def type_name(self, oid) -> str:
        typname, nsp, *_ = self.type_row(oid)
        return typname if nsp == "pg_catalog" else f"{nsp}.{typname}"

    def spec(self, oid, typmod, *, allow_array=True) -> TypeSpec:
        typname, nsp, typtype, base, base_typmod, elem, typlen, send, typinput, _ = self.type_row(oid)
        if typtype == "d":  # a domain decodes as its base type
            return self.spec(base, base_typmod if typmod == -1 else typmod, allow_array=allow_array)
        if nsp == "pg_catalog":
            if typname == "numeric":
                if typmod >= 4:
                    p, s = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
                    if 1 <= p <= 38 and s <= p:
                        return TypeSpec("scalar", pa.decimal128(p, s), None, _decimal)
                return TypeSpec("scalar", pa.string(), None, _text)
            if typname in SCALARS:
                arrow, expr, conv = SCALARS[typname]
                return TypeSpec("scalar", arrow, expr, conv)
            if allow_array and elem != 0 and typlen == -1:
                e = self.spec(elem, typmod, allow_array=False)
                if e.kind == "scalar" and self.type_row(elem)[2] != "d":
                    return TypeSpec("array", pa.list_(e.arrow), None, None, elem=e)
        if allow_array and typinput == "array_in" and self.type_row(elem)[9] == ",":
            # an array (of any schema) whose element is none of the above: a list of the
            # elements' text / send bytes. (An element type whose array delimiter is not
            # ',', box or PostGIS's geometry, stays one value: its text cannot be split.)
            esend = self.type_row(elem)[7]
            return TypeSpec("array", None, None, None,
                            elem=TypeSpec("unknown", None, None, None, send=esend))
        return TypeSpec("unknown", None, None, None, send=send)


class PgColumn(NamedTuple):
    name: str
    type_oid: int
    typmod: int
    spec: TypeSpec


class TableTruth(NamedTuple):
    name: str            # schema.table
    columns: list        # [PgColumn], attribute order
    replident: str       # pg_class.relreplident
    key_columns: tuple   # the replica identity's columns (all columns for FULL)
    rows: dict           # binary (bool) -> [{column: typed value as in TableImage.rows()}]
    text: dict           # binary (bool) -> [{column: text as in the change-event table}]

    def arrow_types(self, binary: bool) -> dict:
        return {c.name: c.spec.arrow_type(binary) for c in self.columns}


def _quote(ident):
    return '"' + ident.replace('"', '""') + '"'


def _output_text(c):
    """The type's output function (what pgoutput sends as 't'). ``c::text`` is a cast,
    which differs: bool gives 'true', bpchar loses its padding, inet keeps '/32'."""
    return f"CASE WHEN {c} IS NULL THEN NULL ELSE format('%s', {c}) END"


def _hex_array_text(dims, elements) -> str:
    """array_out's text of an array shaped as ``array_dims()`` says (``'[1:2][0:1]'``,
    None when empty) whose elements are bytea (``\\x`` hex, always quoted) or NULL."""
    if dims is None:
        return "{}"
    bounds = [tuple(int(x) for x in b.split(":")) for b in dims[1:-1].split("][")]
    items = iter(['NULL' if e is None else '"\\\\x' + e.hex() + '"' for e in elements])

    def nest(d):
        lo, hi = bounds[d]
        if d == len(bounds) - 1:
            return "{" + ",".join(next(items) for _ in range(hi - lo + 1)) + "}"
        return "{" + ",".join(nest(d + 1) for _ in range(hi - lo + 1)) + "}"

    prefix = dims + "=" if any(lo != 1 for lo, _ in bounds) else ""
    return prefix + nest(0)


def published_tables(cur, publication) -> list:
    """``[(schema, table)]`` of a publication (partition leaves, not their parent)."""
    cur.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
                "ORDER BY 1, 2", (publication,))
    return cur.fetchall()


def table_truth(cur, schema, table, catalog: PgCatalog | None = None) -> TableTruth:
    """The rows of ``schema.table`` (``FROM ONLY``) as a typed ``TableImage`` must hold them."""
    cat = catalog or PgCatalog(cur)
    qualified = f"{_quote(schema)}.{_quote(table)}"
    cur.execute(
        "SELECT a.attname, a.atttypid, a.atttypmod FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (qualified,))
    columns = [PgColumn(n, oid, tm, cat.spec(oid, tm)) for n, oid, tm in cur.fetchall()]
    cur.execute(
        "SELECT c.relreplident, ARRAY(SELECT a.attname FROM pg_index i JOIN pg_attribute a "
        "ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid "
        "AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)) "
        "ORDER BY a.attnum) FROM pg_class c WHERE c.oid = %s::regclass", (qualified,))
    replident, keys = cur.fetchone()
    key_columns = tuple(c.name for c in columns) if replident == "f" else tuple(keys)

    # one SELECT: per column its text, the exact expression, and for arrays the shape
    # flag, the elements' text and the elements' exact values
    exprs, slots = [], []
    for col in columns:
        c = _quote(col.name)
        slot = {"text": len(exprs)}
        exprs.append(_output_text(c))
        spec = col.spec
        if spec.kind == "scalar" and spec.expr:
            slot["x"] = len(exprs)
            exprs.append(spec.expr.format(c=c))
        elif spec.kind == "array":
            slot["special"] = len(exprs)
            exprs.append(f"(array_ndims({c}) > 1 OR array_lower({c}, 1) <> 1)")
            slot["etext"] = len(exprs)
            if spec.elem.kind == "unknown":
                # (unnest in the select list: in FROM, a composite element becomes columns)
                # (and a composite whose fields are all null IS NULL, yet is no NULL
                # element: the strict send function tells them apart)
                exprs.append(f"ARRAY(SELECT CASE WHEN {spec.elem.send}(e) IS NULL THEN NULL "
                             f"ELSE format('%s', e) END FROM (SELECT unnest({c}) AS e) AS u)")
            else:
                exprs.append(f"ARRAY(SELECT {_output_text('e')} FROM unnest({c}) WITH ORDINALITY AS u(e, i) ORDER BY i)")
            if spec.elem.expr:
                slot["ex"] = len(exprs)
                exprs.append(f"ARRAY(SELECT {spec.elem.expr.format(c='e')} "
                             f"FROM unnest({c}) WITH ORDINALITY AS u(e, i) ORDER BY i)")
            elif spec.elem.kind == "unknown":  # binary mode: the elements' send bytes
                slot["esend"] = len(exprs)
                exprs.append(f"ARRAY(SELECT {spec.elem.send}(e) FROM (SELECT unnest({c}) AS e) AS u)")
                slot["dims"] = len(exprs)
                exprs.append(f"array_dims({c})")
        elif spec.kind == "unknown":
            slot["send"] = len(exprs)
            exprs.append(f"{spec.send}({c})")
        slots.append(slot)
    cur.execute(f"SELECT {', '.join(exprs) or 'NULL'} FROM ONLY {qualified}")
    result = cur.fetchall()

    rows = {False: [], True: []}
    text = {False: [], True: []}
    for r in result:
        row_t, row_b, trow, btrow = {}, {}, {}, {}
        for col, slot in zip(columns, slots):
            t = r[slot["text"]]
            trow[col.name] = btrow[col.name] = t
            spec = col.spec
            if t is None:
                row_t[col.name] = row_b[col.name] = None
            elif spec.kind == "scalar":
                row_t[col.name] = row_b[col.name] = spec.conv(r[slot["x"]] if "x" in slot else None, t)
            elif spec.kind == "array" and spec.elem.kind == "unknown":
                # text mode: the elements' text; binary mode: their send bytes, and the
                # event table shows the array with each element as hex (bytea[]'s form)
                sends = [None if x is None else bytes(x) for x in r[slot["esend"]]]
                btrow[col.name] = _hex_array_text(r[slot["dims"]], sends)
                if r[slot["special"]]:
                    row_t[col.name], row_b[col.name] = Special(t), Special(btrow[col.name])
                else:
                    row_t[col.name], row_b[col.name] = list(r[slot["etext"]]), sends
            elif spec.kind == "array":
                if r[slot["special"]]:
                    v = Special(t)
                else:
                    etexts = r[slot["etext"]]
                    exact = r[slot["ex"]] if "ex" in slot else [None] * len(etexts)
                    v = [None if et is None else spec.elem.conv(ex, et) for ex, et in zip(exact, etexts)]
                row_t[col.name] = row_b[col.name] = v
            else:  # unknown type: text in text mode, the send function's bytes in binary
                row_t[col.name] = t
                row_b[col.name] = bytes(r[slot["send"]])
                # the event table shows a binary value of an unknown type as hex
                # (src/format_text.pxi: there is no output function to port)
                btrow[col.name] = "\\x" + row_b[col.name].hex()
        rows[False].append(row_t)
        rows[True].append(row_b)
        text[False].append(trow)
        text[True].append(btrow)
    return TableTruth(f"{schema}.{table}", columns, replident, key_columns, rows, text)
