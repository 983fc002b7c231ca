"""An in-memory image of tables, built by applying decoded changes (the demo's check; the
ground-truth tests use it too).

``TableImage`` replays what a consumer of ``pgoutput_fast`` would do with its output:
insert, update, delete and truncate rows of every relation, keyed by the relation's
replica identity, honouring unchanged-TOAST columns and schema changes. After replaying
a whole capture, ``rows("schema.table")`` must equal ``SELECT * FROM schema.table``::

    img = TableImage()
    img.apply_changeset(pgoutput_fast.decode_changes(messages, lsns))   # typed tables
    img.rows("pgo.alltypes")            # [{column: value, ...}, ...]

    txt = TableImage()
    txt.apply_events(changeset.events, key_columns=decoder.catalog)    # text images

Values in an image built from typed tables (``apply_changeset``) are plain Python values
of the column's Arrow type, chosen so that every value the decoder can produce is
representable (``pgoutput_fast.arrow_values.column_values``):

* date32 as ``int`` days since 1970-01-01, time64/timestamp as ``int`` in the column's
  unit (µs): ``infinity`` is then simply INT32_MAX / INT64_MAX, and BC or far-future
  values need no ``datetime``;
* month_day_nano_interval as a ``(months, days, nanoseconds)`` tuple;
* decimal128 as ``Decimal``, float as ``float``, binary as ``bytes``, lists as ``list``;
* a value the decoder reported in ``_special`` (e.g. NaN in a ``numeric(p,s)`` column,
  a multi-dimensional array) as ``Special(text)``, with PostgreSQL's text form.

An image built from the change-event table (``apply_events``) holds PostgreSQL text
values (``str``) or None.

Applying a change that does not fit the image (an update or delete of a row that is not
there, an insert of a key that already is, an unchanged-TOAST value for a row the image
does not know) raises ``ImageError``: in a ground-truth test that is a decoder bug, or a
capture that does not start at the table's creation.

Schema changes: when a row arrives with a different column list than the image has for
its table (a new relation version), columns are added and dropped accordingly. PostgreSQL
does not replicate DDL, so a column added with a DEFAULT shows that default for existing
rows while the stream never says so: pass ``added_column_defaults`` to fill them.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import pyarrow as pa

from ..arrow_values import Special, column_values, freeze

__all__ = ["TableImage", "ImageError", "META_COLUMNS", "TRAILING_COLUMNS"]

#: metadata columns in front of the data columns of a typed table
META_COLUMNS = ("_op", "_lsn", "_commit_lsn", "_commit_ts", "_xid", "_seq", "_origin")
#: columns after the data columns of a typed table
TRAILING_COLUMNS = ("_before", "_before_kind", "_unchanged_toast", "_special")


def _short(value, limit=60):
    """repr() of a locator/row for error messages, long values abbreviated."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_short(v, limit)}" for k, v in value.items()) + "}"
    s = repr(value)
    return s if len(s) <= limit else f"{s[:limit]}...({len(s)} chars)"


class ImageError(AssertionError):
    """A change that cannot be applied to the image (a decoder or capture problem)."""


# -- the image ---------------------------------------------------------------------


class _Table:
    __slots__ = ("name", "columns", "types", "key_columns", "rows", "next_id", "index")

    def __init__(self, name):
        self.name = name
        self.columns: list[str] | None = None
        self.types: dict = {}
        self.key_columns: tuple = ()
        self.rows: dict[int, dict] = {}
        self.next_id = 0
        self.index: dict | None = None  # frozen key values -> [row ids]

    # index over the key columns (built lazily, dropped when the key changes)
    def _key_of(self, row, cols):
        return tuple(freeze(row.get(c)) for c in cols)

    def _ensure_index(self):
        if self.index is None:
            self.index = {}
            for rid, row in self.rows.items():
                self.index.setdefault(self._key_of(row, self.key_columns), []).append(rid)
        return self.index

    def find(self, locator: dict):
        cols = tuple(locator)
        want = tuple(freeze(locator[c]) for c in cols)
        if cols and cols == self.key_columns:
            ids = self._ensure_index().get(want, ())
            return ids[0] if ids else None
        for rid, row in self.rows.items():
            if self._key_of(row, cols) == want:
                return rid
        return None

    def add(self, row):
        rid = self.next_id
        self.next_id += 1
        self.rows[rid] = row
        if self.index is not None:
            self.index.setdefault(self._key_of(row, self.key_columns), []).append(rid)
        return rid

    def remove(self, rid):
        row = self.rows.pop(rid)
        if self.index is not None:
            k = self._key_of(row, self.key_columns)
            ids = self.index[k]
            ids.remove(rid)
            if not ids:
                del self.index[k]
        return row

    def clear(self):
        self.rows.clear()
        self.index = None

    def set_shape(self, columns, key_columns, types, defaults):
        columns = list(columns)
        if self.columns is not None and columns != self.columns:
            added = [c for c in columns if c not in self.columns]
            fill = defaults or {}
            for row in self.rows.values():
                for c in list(row):
                    if c not in columns:
                        del row[c]
                for c in added:
                    row[c] = fill.get(c)
                # keep the column order of the new version
                reordered = {c: row[c] for c in columns}
                row.clear()
                row.update(reordered)
            self.index = None
        self.columns = columns
        if types is not None:
            self.types = dict(types)
        if tuple(key_columns) != self.key_columns:
            self.key_columns = tuple(key_columns)
            self.index = None


class TableImage:
    """Tables rebuilt from decoded changes. See the module docstring.

    Args:
        added_column_defaults: ``{"schema.table": {column: value}}``: the value existing
            rows get when a new relation version adds that column (PostgreSQL fills
            existing rows with the column's DEFAULT, which the stream does not carry).
        strict: raise ``ImageError`` on changes that do not fit the image (default).
    """

    def __init__(self, added_column_defaults: Mapping | None = None, *, strict: bool = True):
        self._tables: dict[str, _Table] = {}
        self._defaults = {k: dict(v) for k, v in (added_column_defaults or {}).items()}
        self.strict = strict
        self.applied = 0  # number of changes applied
        self._last_pos = None

    # -- inspection ----------------------------------------------------------------
    def table_names(self) -> list[str]:
        return sorted(self._tables)

    def columns(self, qualified_name: str) -> list[str]:
        t = self._tables.get(qualified_name)
        return list(t.columns or []) if t else []

    def column_types(self, qualified_name: str) -> dict:
        """Arrow type of each column (typed images; the latest version's types)."""
        t = self._tables.get(qualified_name)
        return dict(t.types) if t else {}

    def key_columns(self, qualified_name: str) -> tuple:
        t = self._tables.get(qualified_name)
        return t.key_columns if t else ()

    def rows(self, qualified_name: str) -> list[dict]:
        """The current rows (``{column: value}``; an updated row moves to the end)."""
        t = self._tables.get(qualified_name)
        if t is None:
            return []
        return [dict(r) for r in t.rows.values()]

    def __contains__(self, qualified_name):
        return qualified_name in self._tables

    def __repr__(self):
        return "TableImage(" + ", ".join(f"{n}: {len(t.rows)} rows" for n, t in sorted(self._tables.items())) + ")"

    # -- core ----------------------------------------------------------------------
    def _fail(self, msg):
        if self.strict:
            raise ImageError(msg)

    def _table(self, name) -> _Table:
        t = self._tables.get(name)
        if t is None:
            t = self._tables[name] = _Table(name)
        return t

    def _check_order(self, pos, where):
        if self._last_pos is not None and pos <= self._last_pos:
            self._fail(f"{where}: change at (commit_lsn, seq) {pos} is not after {self._last_pos}")
        self._last_pos = pos

    def _apply(self, t: _Table, op, new, before, before_kind, toast, where):
        """new/before: {column: value} (before may hold only key columns)."""
        self.applied += 1
        if op == "t":
            t.clear()
            return
        if op in ("c", "r"):     # r: a snapshot row (an insert)
            if toast:
                self._fail(f"{where}: insert with unchanged-TOAST columns {toast} (value unknown)")
            self._check_unique(t, new, where)
            t.add(dict(new))
            return
        if op not in ("u", "d"):
            raise ImageError(f"{where}: unknown op {op!r}")
        # locate the target row: old key / old row when sent, else the new row's key
        if before_kind == "O":
            locator = dict(before)
        elif before_kind == "K":
            if not t.key_columns:
                self._fail(f"{where}: old key sent but the relation has no key columns")
            locator = {c: before.get(c) for c in (t.key_columns or before)}
        else:
            if op == "d":
                self._fail(f"{where}: delete without an old key")
                return
            if not t.key_columns:
                self._fail(f"{where}: update without old tuple on a relation without key")
                return
            locator = {c: new.get(c) for c in t.key_columns}
            if any(c in toast for c in t.key_columns):
                self._fail(f"{where}: update without old key has its key column as unchanged TOAST")
                return
        rid = t.find(locator)
        if rid is None:
            self._fail(f"{where}: {'update' if op == 'u' else 'delete'} of a row not in the image: {_short(locator)}")
            return
        old = t.remove(rid)
        if op == "d":
            return
        row = {}
        for c in t.columns:
            row[c] = old.get(c) if c in toast else new.get(c)
        self._check_unique(t, row, where)
        t.add(row)

    def _check_unique(self, t: _Table, row, where):
        if t.key_columns and tuple(t.key_columns) != tuple(t.columns):
            key = {c: row.get(c) for c in t.key_columns}
            if t.find(key) is not None:
                self._fail(f"{where}: a row with key {_short(key)} is already in the image")

    # -- typed tables --------------------------------------------------------------
    def apply_changeset(self, changeset) -> int:
        """Apply a ``ChangeSet``'s typed tables (``table_versions``); returns the change count.

        Rows of all relations are applied in ``(_commit_lsn, _seq)`` order.
        """
        return self.apply_table_versions(changeset.table_versions)

    def apply_table_versions(self, table_versions: Iterable) -> int:
        items = []
        for version, table in table_versions:
            items.extend(self._typed_rows(version, table))
        items.sort(key=lambda it: it[0])
        for pos, name, shape, op, new, before, kind, toast, where in items:
            self._check_order(pos, where)
            t = self._table(name)
            t.set_shape(shape[0], shape[1], shape[2], self._defaults.get(name))
            self._apply(t, op, new, before, kind, toast, where)
        return len(items)

    def _typed_rows(self, version, table: pa.Table):
        md = table.schema.metadata or {}
        names = table.schema.names
        nmeta, ntrail = len(META_COLUMNS), len(TRAILING_COLUMNS)
        if tuple(names[:nmeta]) != META_COLUMNS or tuple(names[-ntrail:]) != TRAILING_COLUMNS:
            raise ImageError(f"not a typed change table: {names}")
        cols = names[nmeta:len(names) - ntrail]
        name = getattr(version, "qualified_name", None)
        if name is None:
            name = md[b"pgoutput_fast.qualified_name"].decode()
        keys_raw = md.get(b"pgoutput_fast.key_columns", b"").decode("utf-8", "surrogateescape")
        key_columns = tuple(k for k in keys_raw.split(",") if k) if keys_raw else ()
        types = {c: table.schema.field(c).type for c in cols}
        shape = (tuple(cols), key_columns, types)
        n = table.num_rows
        ops = table.column("_op").to_pylist()
        commit_lsn = table.column("_commit_lsn").to_pylist()
        seq = table.column("_seq").to_pylist()
        values = {c: column_values(table.column(c)) for c in cols}
        before_col = table.column("_before")
        befores = column_values(before_col) if before_col.null_count < n else [None] * n
        kinds = table.column("_before_kind").to_pylist()
        toasts = table.column("_unchanged_toast").to_pylist()
        specials = table.column("_special").to_pylist()
        for i in range(n):
            new = {c: values[c][i] for c in cols}
            before = befores[i]
            before = dict(before) if before is not None else None
            for key, text in specials[i] or ():
                if key.startswith("_before.") and key[8:] in cols:
                    if before is None:
                        raise ImageError(f"{name}: _special {key!r} for a row without _before")
                    before[key[8:]] = Special(text)
                elif key in cols:
                    new[key] = Special(text)
                else:
                    raise ImageError(f"{name}: _special names an unknown column {key!r}")
            where = f"{name} (commit_lsn {commit_lsn[i]}, seq {seq[i]}, op {ops[i]})"
            kind = kinds[i]
            if kind == "K" and before is not None:
                before = {c: before[c] for c in key_columns} if key_columns else before
            yield ((commit_lsn[i], seq[i]), name, shape, ops[i], new, before, kind,
                   set(toasts[i] or ()), where)

    # -- change-event table --------------------------------------------------------
    def apply_events(self, events: pa.Table, key_columns=None) -> int:
        """Apply a change-event table (``ChangeSet.events``); returns the change count.

        ``key_columns`` says which columns identify a row when an update carries no old
        key: a ``RelationCatalog`` (e.g. ``Decoder.catalog``; looked up per change by relid
        and LSN) or a mapping ``{"schema.table": (column, ...)}``. An old key (``'K'``)
        or old row (``'O'``) in ``before`` always takes precedence.
        """
        cols = events.column_names
        get = {c: events.column(c).to_pylist() for c in cols
               if c in ("commit_lsn", "seq", "op", "schema", "table", "relid", "lsn",
                        "before", "before_kind", "after", "unchanged_toast")}
        n = events.num_rows
        for i in range(n):
            name = f"{get['schema'][i]}.{get['table'][i]}"
            pos = (get["commit_lsn"][i], get["seq"][i])
            op = get["op"][i]
            where = f"{name} (commit_lsn {pos[0]}, seq {pos[1]}, op {op})"
            self._check_order(pos, where)
            t = self._table(name)
            after = dict(get["after"][i]) if get["after"][i] is not None else None
            before = dict(get["before"][i]) if get["before"][i] is not None else None
            toast = list(get["unchanged_toast"][i] or ())
            kind = get["before_kind"][i]
            keys = self._event_keys(key_columns, name, get["relid"][i], get["lsn"][i], t)
            if op in ("c", "r", "u"):
                shape = [c for c in after] + [c for c in toast if c not in after]
                known = self._event_columns(key_columns, name, get["relid"][i], get["lsn"][i])
                if known is not None:
                    if set(shape) != set(known):
                        raise ImageError(f"{where}: columns {shape} do not match the relation's {known}")
                    shape = list(known)
                t.set_shape(shape, keys if keys is not None else t.key_columns, None,
                            self._defaults.get(name))
            elif keys is not None and t.columns is not None:
                t.set_shape(t.columns, keys, None, None)
            elif t.columns is None and op == "d":
                self._fail(f"{where}: delete in a table the image never saw")
                continue
            if t.columns is None:  # a truncate of a table never seen
                t.columns = []
            self._apply(t, op, after or {}, before, kind, set(toast), where)
        return n

    @staticmethod
    def _version(catalog, relid, lsn):
        v = catalog.at(relid, lsn) if lsn is not None else None
        return v if v is not None else catalog.current(relid)

    def _event_keys(self, key_columns, name, relid, lsn, t):
        if key_columns is None:
            return None
        if hasattr(key_columns, "at"):
            v = self._version(key_columns, relid, lsn)
            return tuple(v.key_columns) if v is not None else None
        k = key_columns.get(name)
        return tuple(k) if k is not None else None

    def _event_columns(self, key_columns, name, relid, lsn):
        if key_columns is not None and hasattr(key_columns, "at"):
            v = self._version(key_columns, relid, lsn)
            return list(v.column_names) if v is not None else None
        return None
