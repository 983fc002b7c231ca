"""Delta Lake tables from decoded changes: incremental MERGE, exactly once.

One Delta table per PostgreSQL table, at ``TARGET/schema.table`` (a local path or an
object-store URI with ``storage_options``, as delta-rs takes them). Each row holds the
table's columns in their stored types (``pgoutput_fast.storage_types``) and
``_commit_lsn``, ``_seq`` (the change that wrote it) and ``_special`` (values no typed
column can hold); a REPLICA IDENTITY FULL table also ``_row_hash`` and ``_dup``. Spark
with Delta Lake, DuckDB (``delta_scan``), Polars (``read_delta``), Trino and delta-rs
read them as any Delta table.

* ``apply_changeset(changeset, target)``: the typed tables of a ``ChangeSet``
  (``Decoder``), reduced and merged in this process.
* ``apply_table(typed, target, version)``: one table's typed changes.
* ``pgoutput_fast.spark.apply_changes``: the same from Spark DataFrames, the reduction
  on the executors.

How a batch is reduced (``reduce``) and committed (``commit``) is described there;
``read_table`` and ``DeltaImage`` read a table back (tests compare it with PostgreSQL).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .commit import (APP_ID, BACKFILL_APP_ID, POSITION_KEY, BackfillRefused, BatchResult,
                     DeltaApplyError, DeltaConflict, applied_columns, applied_position,
                     backfill_needed, check_renames, commit_batch, open_table, table_uri)
from .reduce import change_events, full_events, reduce_events, reduce_full


class ApplyError(DeltaApplyError):
    """A run over several tables failed for some: ``results`` holds the tables that
    committed (with their positions), ``errors`` the others (they are at their previous
    positions; a rerun continues)."""

    def __init__(self, results: dict, errors: dict):
        self.results, self.errors = results, errors
        done = ", ".join(f"{n} at {r.get('applied')}" for n, r in sorted(results.items())) or "none"
        failed = "; ".join(f"{n}: {e}" for n, e in sorted(errors.items()))
        super().__init__(f"{len(errors)} of {len(errors) + len(results)} tables not applied "
                         f"({failed}); committed: {done}; run the apply again to continue: "
                         "each table resumes from its own position")

__all__ = ["apply_changeset", "apply_table", "ApplyError", "read_table", "DeltaImage", "table_uri",
           "applied_position", "table_mode", "filter_after", "BatchResult", "DeltaApplyError",
           "DeltaConflict", "APP_ID", "POSITION_KEY", "HIDDEN_COLUMNS", "apply_backfill",
           "BackfillRefused", "BACKFILL_APP_ID", "backfill_needed"]

#: columns of a stored row that are not the table's own
HIDDEN_COLUMNS = ("_commit_lsn", "_seq", "_special", "_row_hash", "_dup")


def table_mode(replident: str, keys) -> str:
    """``full`` (REPLICA IDENTITY FULL: rows counted by value), ``key`` (a primary key or
    replica identity index) or ``append`` (no identity: inserts only)."""
    if replident == "f":
        return "full"
    return "key" if keys else "append"


def filter_after(t: pa.Table, position) -> pa.Table:
    """The rows of ``t`` after ``position`` ``(commit_lsn, seq)`` (all of them if None)."""
    if position is None or t.num_rows == 0:
        return t
    c0, s0 = position
    lsn, seq = t.column("_commit_lsn"), t.column("_seq")
    keep = pc.or_(pc.greater(lsn, c0), pc.and_(pc.equal(lsn, c0), pc.greater(seq, s0)))
    return t.filter(keep)


def _last_position(t: pa.Table, where=None):
    if where is not None:
        t = t.filter(where)
    if t.num_rows == 0:
        return None
    lsn = t.column("_commit_lsn").to_numpy()
    seq = t.column("_seq").to_numpy()
    i = int(np.lexsort((seq, lsn))[-1])
    return int(lsn[i]), int(seq[i])


def apply_table(typed: pa.Table, target, table: str, *, keys, replident: str, columns,
                storage_options: dict | None = None, change_data_feed: bool = False,
                configuration: dict | None = None, column_defaults: dict | None = None,
                version_columns: list | None = None,
                renames: dict | None = None, backfill: int | None = None) -> BatchResult:
    """Merge one table's typed changes (the decoder's typed table, one or several
    relation versions concatenated; storage or decoder types) into its Delta table.
    ``version_columns``: the relation's column names, in order, of each version the
    batch's new changes use, oldest first (checked against the table's last ones for a
    rename); ``renames``: ``{old: new}`` or ``{old: None}`` settles a change that may be
    a rename (``check_renames``). ``backfill``: the batch is a backfill taken at that
    hand-over point (``apply_backfill``): it replaces the table's rows when
    ``backfill_needed`` says so, whatever the table's position."""
    from ..storage_types import to_storage_table

    keys, columns = list(keys), list(columns)
    uri = table_uri(target, table)
    dt = open_table(uri, storage_options)
    position = applied_position(dt)
    if backfill is not None:
        if not backfill_needed(dt, table, backfill):
            return BatchResult(table=table, uri=uri, changes=0, skipped=True,
                               applied=list(position) if position else None,
                               version=dt.version() if dt is not None else None, missing=0,
                               inserted=0, updated=0, deleted=0, files_added=0,
                               files_removed=0, seen=typed.num_rows, backfill=int(backfill))
        position = None              # the backfill's rows, all of them, replace the table's
        version_columns = None       # (and so do its columns)
    renamed: dict = {}
    if version_columns and dt is not None:
        prev = applied_columns(dt)
        for cols in version_columns:
            for old, new in check_renames(table, prev, list(cols), renames or {}).items():
                # the table's column 'old' is the batch's 'new' (or a later rename of it)
                first = next((k for k, v in renamed.items() if v == old), old)
                renamed[first] = new
            prev = list(cols)
    columns = [c for c in columns if c not in renamed]
    t = to_storage_table(typed)
    total = t.num_rows
    t = filter_after(t, position)
    last = _last_position(t)
    if last is None:
        return BatchResult(table=table, uri=uri, changes=0, skipped=True,
                           applied=list(position) if position else None,
                           version=dt.version() if dt is not None else None, missing=0,
                           inserted=0, updated=0, deleted=0, files_added=0, files_removed=0,
                           seen=total)
    trunc = _last_position(t, pc.equal(t.column("_op"), "t"))
    if backfill is not None:
        late = pc.sum(pc.cast(pc.greater_equal(t.column("_commit_lsn"), backfill), pa.int64()))
        if trunc is None or late.as_py():
            raise DeltaApplyError(f"{table}: not a backfill taken at {backfill} (no Truncate "
                                  "first, or changes at or past its point): nothing applied")
    if trunc is not None:
        t = filter_after(t, trunc)
    t = t.filter(pc.not_equal(t.column("_op"), "t"))
    mode = table_mode(replident, keys)
    carries = None
    if mode == "full":
        final = reduce_full(full_events(t, columns), columns)
    elif mode == "key":
        final, carries = reduce_events(change_events(t, columns, keys), columns, keys)
    else:
        bad = pc.sum(pc.cast(pc.is_in(t.column("_op"), pa.array(["u", "d"])), pa.int64())).as_py()
        if bad:
            raise DeltaApplyError(f"{table}: {bad} updates or deletes in a table without a "
                                  "replica identity (PostgreSQL refuses them): nothing applied")
        final = t.select(columns + ["_commit_lsn", "_seq", "_special"])
    config = dict(configuration or {})
    if change_data_feed:
        config["delta.enableChangeDataFeed"] = "true"
    return commit_batch(dt, uri, table, mode=mode, keys=keys, columns=columns, final=final,
                        carries=carries, truncate=trunc is not None, position=last,
                        changes=t.num_rows + (trunc is not None), storage_options=storage_options,
                        configuration=config or None, column_defaults=column_defaults,
                        renamed=renamed, backfill=backfill)


def _unify(tables: list, table: str = "") -> pa.Table:
    try:
        schema = pa.unify_schemas([t.schema for t in tables], promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        seen: dict = {}
        for t in tables:
            for f in t.schema:
                old = seen.setdefault(f.name, f.type)
                if old != f.type:
                    try:
                        pa.unify_schemas([pa.schema([pa.field("x", old)]),
                                          pa.schema([pa.field("x", f.type)])],
                                         promote_options="permissive")
                    except (pa.ArrowTypeError, pa.ArrowInvalid):
                        raise DeltaApplyError(
                            f"{table}: column {f.name!r} changed type from {old} to {f.type} "
                            "(ALTER COLUMN ... TYPE in PostgreSQL), which a Delta table cannot "
                            "take in place: rewrite the table's column, or apply to a new "
                            "target (nothing of this batch was written)") from None
        raise
    out = []
    for t in tables:
        cols = []
        for f in schema:
            if f.name in t.column_names:
                c = t.column(f.name)
                cols.append(c.cast(f.type) if c.type != f.type else c)
            else:
                cols.append(pa.nulls(t.num_rows, f.type))
        out.append(pa.Table.from_arrays(cols, schema=schema))
    return pa.concat_tables(out)


def _mode_types(t: pa.Table, version, binary: bool | None) -> pa.Table:
    """All-null columns in the type the capture mode gives them (``binary``)."""
    if binary is None:
        return t
    for c, ct in zip(version.columns, version.column_types):
        i = t.schema.get_field_index(c.name)
        want = ct.arrow_type(binary)
        if i >= 0 and t.field(i).type != want and t.column(i).null_count == t.num_rows:
            t = t.set_column(i, pa.field(c.name, want), pa.nulls(t.num_rows, want))
    return t


def _rename(t: pa.Table, old: str, new: str) -> pa.Table:
    """Column ``old`` of a typed table as ``new``, in its unchanged-TOAST lists too."""
    t = t.rename_columns([new if c == old else c for c in t.column_names])
    toast = t.column("_unchanged_toast").combine_chunks()
    flat = pc.list_flatten(toast)
    if len(flat):
        flat = pc.if_else(pc.equal(flat, old), pa.scalar(new), flat)
        toast = pa.ListArray.from_arrays(toast.offsets, flat, mask=toast.is_null())
        t = t.set_column(t.schema.get_field_index("_unchanged_toast"), "_unchanged_toast", toast)
    return t


def _with_defaults(t: pa.Table, version, defaults: dict) -> pa.Table:
    """Rows of a relation version without a column that has a default: the default
    (what PostgreSQL shows in rows that predate ADD COLUMN ... DEFAULT)."""
    for c, value in defaults.items():
        if c not in version.column_names and c not in t.column_names:
            t = t.append_column(c, pa.array([value] * t.num_rows))
    return t


def apply_changeset(changeset, target, *, tables=None, storage_options: dict | None = None,
                    change_data_feed: bool = False, column_defaults: dict | None = None,
                    binary: bool | None = None, renames: dict | None = None,
                    backfills=(), backfill_storage_options: dict | None = None,
                    _backfill: int | None = None) -> dict:
    """Merge a ``ChangeSet``'s typed tables (``Decoder(tables=True)``) into Delta tables
    under ``target``; ``{table: BatchResult}``. Each table commits on its own (Delta has
    no transaction across tables); a table that cannot be applied (a type change Delta
    cannot take, updates without a key) is left at its position while the others
    commit, and ``ApplyError`` then names every table's state: a rerun continues from
    each table's own position.

    ``binary``: whether the capture was in binary mode. Types PostgreSQL's stream does
    not name (enums, domains of them, extension types) are bytes in binary mode and
    text otherwise; a batch with no value of such a column cannot tell, so say it when
    you know it (``column_defaults``: ``{table: {column: value}}``, the DEFAULT of a
    column added by ALTER TABLE, which PostgreSQL gives the rows that predate it).
    ``renames``: ``{table: {old: new}}`` (or ``{old: None}``) settles a change of the
    column list that may be a RENAME COLUMN (the error that stops on one says so).

    ``backfills``: backfill directories (``pgoutput-fast snapshot``, local or URIs with
    ``backfill_storage_options``), applied first (``apply_backfill``): a backfilled
    table's rows are replaced by the backfill's, and of the changeset only its changes
    at or after the backfill's point apply on top. A table whose backfill is refused
    (``BackfillRefused``) is not applied further; ``ApplyError`` names it. A result
    holds the backfill's own ``BatchResult`` under ``"backfill"``."""
    from ..storage_types import to_storage_table

    results: dict = {}
    errors: dict = {}
    done_backfills: dict = {}
    for bf in backfills or ():
        try:
            got = apply_backfill(bf, target, tables=tables, storage_options=storage_options,
                                 change_data_feed=change_data_feed,
                                 column_defaults=column_defaults,
                                 backfill_storage_options=backfill_storage_options)
        except ApplyError as exc:
            got = exc.results
            errors.update(exc.errors)
        done_backfills.update(got)
    by_name: dict = {}
    for version, t in changeset.table_versions:
        by_name.setdefault(version.qualified_name, []).append((version, t))
    for name in sorted(by_name):
        if tables is not None and name not in tables:
            continue
        if name in errors:      # its backfill was refused: nothing more of it
            continue
        parts = sorted(by_name[name], key=lambda p: p[0].version)
        last = parts[-1][0]
        # the versions with changes past the table's position (renames are checked
        # along them, from the table's own columns)
        position = applied_position(open_table(table_uri(target, name), storage_options))
        if _backfill is not None:
            position = None
        new_parts = [(v, t) for v, t in parts if filter_after(t, position).num_rows]
        defaults = (column_defaults or {}).get(name) or {}
        table_renames = (renames or {}).get(name) or {}
        try:
            tables_ = []
            parts = new_parts or parts[-1:]
            # a rename between two versions of this batch: the older rows' column under
            # its latest name (renames compose along the versions)
            final_name: list = [dict() for _ in parts]
            for i in range(len(parts) - 2, -1, -1):
                step = check_renames(name, list(parts[i][0].column_names),
                                     list(parts[i + 1][0].column_names), table_renames)
                later = final_name[i + 1]
                final_name[i] = {c: later.get(step.get(c, c), step.get(c, c))
                                 for c in parts[i][0].column_names
                                 if later.get(step.get(c, c), step.get(c, c)) != c}
            for i, (version, t) in enumerate(parts):
                t = _with_defaults(to_storage_table(_mode_types(t, version, binary)), version,
                                   defaults)
                for old, new in final_name[i].items():
                    if old in t.column_names and new not in t.column_names:
                        t = _rename(t, old, new)
                tables_.append(t)
            typed = _unify(tables_, name)
            results[name] = apply_table(typed, target, name, keys=last.key_columns,
                                        replident=last.replident,
                                        columns=[c for c in typed.column_names
                                                 if not c.startswith("_")],
                                        storage_options=storage_options,
                                        change_data_feed=change_data_feed,
                                        column_defaults=defaults,
                                        version_columns=[list(v.column_names)
                                                         for v, _ in new_parts],
                                        renames=table_renames, backfill=_backfill)
        except DeltaApplyError as exc:    # the other tables still apply
            errors[name] = exc
    for name, r in done_backfills.items():
        if name in results:
            results[name]["backfill"] = r
        else:
            results[name] = r
    if errors:
        raise ApplyError(results, errors) from next(iter(errors.values()))
    return results


def apply_backfill(backfill, target, *, tables=None, storage_options: dict | None = None,
                   change_data_feed: bool = False, column_defaults: dict | None = None,
                   backfill_storage_options: dict | None = None) -> dict:
    """Apply a backfill directory (``pgoutput-fast snapshot``; a path, a URI, or a
    ``capture.backfill.Backfill``) to the Delta tables under ``target``, by the
    hand-over rule (``capture/backfill.py``): each of its tables (or those in
    ``tables``) whose applied position is still below the backfill's point gets the
    backfill's rows instead of its own, and the position ``(point - 1, max)``, so
    that the capture's changes at or after the point apply on top; a table that has
    the backfill (or a later one) already is skipped; one past the point is refused
    (``BackfillRefused`` in ``ApplyError``). Decoded in this process (memory in
    proportion to the backfill; the Spark pipeline's ``--backfill`` decodes on
    executors). ``{table: BatchResult}``."""
    from ..capture.backfill import Backfill, read_backfill
    from ..capture.segments import read_segments
    from ..decoder import Decoder

    bf = backfill if isinstance(backfill, Backfill) else read_backfill(
        backfill, storage_options=backfill_storage_options)
    names = [n for n in bf.tables if tables is None or n in tables]
    if not names:
        return {}
    seg = read_segments(bf.directory, storage_options=backfill_storage_options)
    cs = Decoder(events=False, tables=True).feed(seg.column("data"), lsn=seg.column("lsn"))
    return apply_changeset(cs, target, tables=names, storage_options=storage_options,
                           change_data_feed=change_data_feed, column_defaults=column_defaults,
                           binary=bf.binary, _backfill=bf.point)


def read_table(target, table: str, storage_options: dict | None = None,
               hidden: bool = False) -> pa.Table:
    """The current rows of ``table``'s Delta table (stored types); the bookkeeping
    columns only with ``hidden``."""
    from deltalake import DeltaTable

    from .commit import unview

    t = unview(DeltaTable(table_uri(target, table), storage_options=storage_options)
               .to_pyarrow_table())
    if not hidden:
        t = t.drop_columns([c for c in HIDDEN_COLUMNS if c in t.column_names])
    return t


class DeltaImage:
    """Delta tables under ``target`` seen like ``demo.image.TableImage`` (``rows``,
    ``columns``, ``column_types``, ``in``), in the decoder's own types, to compare with
    PostgreSQL's rows (``demo.compare_with_truth``)."""

    def __init__(self, target, catalog, binary_unknown=False, storage_options=None):
        self.target = target
        self.catalog = catalog
        self.binary_unknown = binary_unknown
        self.storage_options = storage_options
        self._cache: dict = {}

    def _schema(self, name) -> pa.Schema:
        last = sorted(self.catalog.by_name(name), key=lambda v: v.version)[-1]
        return pa.schema([pa.field(c.name, ct.arrow_type(self.binary_unknown))
                          for c, ct in zip(last.columns, last.column_types)])

    def _load(self, name):
        if name not in self._cache:
            from ..arrow_values import Special, column_values
            from ..storage_types import from_storage_array

            schema = self._schema(name)
            t = read_table(self.target, name, self.storage_options, hidden=True)
            values = {f.name: column_values(from_storage_array(t.column(f.name), f.type))
                      if f.name in t.column_names else [None] * t.num_rows for f in schema}
            specials = t.column("_special").to_pylist()
            rows = []
            for i in range(t.num_rows):
                r = {f.name: values[f.name][i] for f in schema}
                for k, v in specials[i] or ():
                    if k in r:
                        r[k] = Special(v)
                rows.append(r)
            self._cache[name] = ([f.name for f in schema], rows)
        return self._cache[name]

    def __contains__(self, name):
        return open_table(table_uri(self.target, name), self.storage_options) is not None \
            and bool(self.catalog.by_name(name))

    def rows(self, name):
        return self._load(name)[1]

    def columns(self, name):
        return self._load(name)[0]

    def column_types(self, name):
        return {f.name: f.type for f in self._schema(name)}
