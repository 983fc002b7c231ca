"""One reduced batch of one table -> one Delta commit, exactly once.

The applied position goes into the same Delta commit as the data: a transaction
identifier (``txn``: app id ``pgoutput_fast``, version = the commit LSN of the batch's
last change), as Spark's own Delta streaming sink records its batch ids, and the exact
position ``[commit_lsn, seq]`` in the commit's metadata. A batch is applied only past
that position, so a batch retried after a crash is a no-op; two appliers racing on one
table both read the same position, and Delta's conflict check lets only the first
commit (the second gets ``DeltaConflict``; its rerun finds the batch applied).

A batch rewrites only the data files that hold the keys it touches (delta-rs MERGE):
inserts, updates and deletes by key; unchanged TOAST filled from the target's rows
for the touched keys only; a truncate replaces the table's contents (one overwrite
commit); tables without a key are append-only; REPLICA IDENTITY FULL tables keep
duplicate rows (``_row_hash`` and ``_dup`` identify each copy).

Schema: a column the batch has and the table lacks is added (Delta schema
evolution); a column the table has and the batch lacks (dropped in PostgreSQL) stays,
null in the rows written from then on; a type that widens (int2 -> int4 -> int8,
float4 -> float8, a decimal with more digits) rewrites the table once with the wider
type; any other type change is an error naming the column.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UserError
from .reduce import STORED_META

__all__ = ["APP_ID", "POSITION_KEY", "BACKFILL_APP_ID", "DeltaApplyError", "DeltaConflict",
           "BackfillRefused", "table_uri", "applied_position", "backfill_needed",
           "backfill_position", "commit_batch", "BatchResult"]

log = logging.getLogger("pgoutput_fast.delta")

APP_ID = "pgoutput_fast"
#: the sequence number of the position, in a transaction identifier of its own
SEQ_APP_ID = "pgoutput_fast.seq"
POSITION_KEY = "pgoutput_fast.position"
#: the transaction identifier of backfills: version = the hand-over point of the last
#: backfill applied to the table (``capture/backfill.py``)
BACKFILL_APP_ID = "pgoutput_fast.backfill"
_MAX_SEQ = 2 ** 63 - 1


class DeltaApplyError(UserError):
    """A batch cannot be applied to a Delta table (the message says which and why)."""


class DeltaConflict(DeltaApplyError):
    """Another writer committed to the table while this batch was being applied."""


class BackfillRefused(DeltaApplyError):
    """A backfill whose hand-over point the table has already passed."""


def backfill_position(point: int) -> tuple:
    """The applied position a backfill taken at ``point`` leaves: every change that
    commits before ``point`` is in it, every one at or after it is not."""
    return int(point) - 1, _MAX_SEQ


def backfill_needed(dt, table: str, point: int) -> bool:
    """Whether the backfill with hand-over point ``point`` is to be applied to ``dt``
    (the hand-over rule, ``capture/backfill.py``): False when it (or a later one) is
    already applied; True while the table's applied position is below ``point``;
    ``BackfillRefused`` when the table has applied changes at or past ``point``
    (replacing its rows would lose them)."""
    if dt is None:
        return True
    done = dt.transaction_version(BACKFILL_APP_ID)
    if done is not None and int(done) >= point:
        return False
    position = applied_position(dt)
    if position is not None and position[0] >= point:
        from ..lsn import format_lsn

        raise BackfillRefused(
            f"{table}: the backfill taken at {format_lsn(point)} comes too late: the table "
            f"has already applied the stream up to {format_lsn(position[0])}, at or past that "
            "point, and its rows would replace those changes. Take the backfill again "
            f"(pgoutput-fast snapshot --table {table}): a new backfill's point is past the "
            "table's position; nothing of this table was written")
    return True


class BatchResult(dict):
    """``{"table", "uri", "version", "applied", "changes", "rows", "inserted",
    "updated", "deleted", "skipped", "files_added", "files_removed", "missing"}``."""


def table_uri(target, table: str) -> str:
    """The Delta table of ``table`` (``schema.name``) under ``target`` (a local path or a
    URI: ``s3://``, ``gs://``, ``abfss://``, ``file://``)."""
    target = os.fspath(target)
    if "://" in target:
        return target.rstrip("/") + "/" + table
    return os.path.join(os.path.abspath(target), table)


def open_table(uri: str, storage_options: dict | None = None):
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri, storage_options=storage_options):
        return None
    return DeltaTable(uri, storage_options=storage_options)


def applied_position(dt) -> tuple | None:
    """``(commit_lsn, seq)`` of the last change applied to ``dt`` by this package, or
    None. Two transaction identifiers, written in the same commit, give the commit LSN
    and the sequence number (they are part of the table's state: checkpoints and log
    clean-up keep them). Tables written before the second one existed: the commit's
    metadata, else the whole transaction."""
    if dt is None:
        return None
    version = dt.transaction_version(APP_ID)
    if version is None:
        return None
    seq = dt.transaction_version(SEQ_APP_ID)
    if seq is not None:
        return int(version), int(seq)
    for info in dt.history(200):
        raw = info.get(POSITION_KEY)
        if raw:
            pos = json.loads(raw)
            if int(pos[0]) == version:
                return int(pos[0]), int(pos[1])
            break
    return int(version), _MAX_SEQ


COLUMNS_KEY = "pgoutput_fast.columns"


def applied_columns(dt) -> list | None:
    """The relation's column names, in order, as of the last batch this package applied
    to ``dt`` (None when unknown)."""
    if dt is None:
        return None
    for info in dt.history(200):
        raw = info.get(COLUMNS_KEY)
        if raw:
            return list(json.loads(raw))
        if info.get(POSITION_KEY):
            return None
    return None


def renamed_columns(before: list, after: list) -> list:
    """``[(old, new)]``: positions where a column of ``before`` is gone and a column new
    to ``after`` is in its place, with every other column in the same order. That is
    RENAME COLUMN, or DROP of the last column and ADD of another: the Relation messages
    cannot tell (they carry no column numbers)."""
    pairs = []
    for i in range(min(len(before), len(after))):
        if before[i] != after[i] and before[i] not in after and after[i] not in before:
            pairs.append((before[i], after[i]))
    return pairs


def check_renames(table: str, before: list | None, after: list, renames: dict) -> dict:
    """The renames to apply between the column lists ``before`` and ``after``
    (``{old: new}``; ``{old: None}``: dropped, not renamed). A change that could be a
    rename and that ``renames`` does not settle is an error naming the columns."""
    if not before:
        return {}
    out = {}
    for old, new in renamed_columns(before, after):
        if old in renames:
            if renames[old] is not None:
                out[old] = new
            continue
        raise DeltaApplyError(
            f"{table}: column {old!r} is gone and {new!r} is new in its place: it was either "
            f"RENAME COLUMN {old} TO {new} or DROP COLUMN {old} and ADD COLUMN {new} (the "
            "stream does not say which); pass renames={" + repr(table) + ": {" + repr(old)
            + ": " + repr(new) + "}} if it was a rename (the rows before it keep their "
            "value, now under " + repr(new) + "), or renames={" + repr(table) + ": {"
            + repr(old) + ": None}} if not; nothing of this table was written")
    return out


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _widens(old: pa.DataType, new: pa.DataType) -> bool:
    ints = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
    if old in ints and new in ints:
        return ints.index(new) > ints.index(old)
    if old == pa.float32() and new == pa.float64():
        return True
    if pa.types.is_integer(old) and pa.types.is_decimal(new):
        return False
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_date32(old) and pa.types.is_timestamp(new) and new.tz is None:
        return True
    return False


def _target_schema(dt) -> pa.Schema:
    return pa.schema(dt.schema().to_arrow())


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    """Equal as Delta stores them (string/large_string, binary views are one type)."""
    norm = {pa.large_string(): pa.string(), pa.string_view(): pa.string(),
            pa.large_binary(): pa.binary(), pa.binary_view(): pa.binary()}
    if pa.types.is_timestamp(a) and pa.types.is_timestamp(b):
        return (a.tz is None) == (b.tz is None)
    if pa.types.is_list(a) or pa.types.is_large_list(a) or pa.types.is_list_view(a):
        return (pa.types.is_list(b) or pa.types.is_large_list(b) or pa.types.is_list_view(b)) \
            and _same_type(a.value_type, b.value_type)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fa = {a.field(i).name: a.field(i).type for i in range(a.num_fields)}
        fb = {b.field(i).name: b.field(i).type for i in range(b.num_fields)}
        return all(n not in fb or _same_type(t, fb[n]) for n, t in fa.items())
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    return norm.get(a, a) == norm.get(b, b)


def check_schema(table: str, target: pa.Schema, source: pa.Schema) -> list:
    """Columns of ``source`` whose type widens the target's: ``[(name, old, new)]``.
    Raises ``DeltaApplyError`` for a type change Delta cannot take."""
    widen = []
    for f in source:
        i = target.get_field_index(f.name)
        if i < 0:
            continue
        old = target.field(i).type
        if _same_type(old, f.type) or _same_type(f.type, old):
            continue
        if _widens(old, f.type):
            widen.append((f.name, old, f.type))
            continue
        raise DeltaApplyError(
            f"{table}: column {f.name!r} changed type from {old} to {f.type} (ALTER COLUMN "
            "... TYPE in PostgreSQL), which a Delta table cannot take in place: rewrite the "
            f"table's column, or apply to a new target (nothing of this batch was written)")
    return widen


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with exactly ``schema``'s columns and types (missing ones null)."""
    cols = []
    for f in schema:
        if f.name in t.column_names:
            c = t.column(f.name)
            if c.type != f.type:
                c = c.cast(f.type)
        else:
            c = pa.nulls(t.num_rows, f.type)
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=pa.schema([pa.field(f.name, f.type) for f in schema]))


def _unview_type(t: pa.DataType) -> pa.DataType:
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(_unview_type(t.value_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_unview_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _unview_type(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(_unview_type(t.key_type), _unview_type(t.item_type))
    return t


def unview(t: pa.Table) -> pa.Table:
    """``t`` with delta-rs's view types (string_view, ...) as the plain ones."""
    schema = pa.schema([pa.field(f.name, _unview_type(f.type), f.nullable) for f in t.schema])
    return t if schema == t.schema else t.cast(schema)


def _lookup(dt, keys: list, key_rows: pa.Table, columns: list) -> pa.Table:
    """The target's rows whose ``keys`` are among ``key_rows``, ``columns`` only. The key
    columns are read whole and matched here; only the matching rows are read in full.
    (pyarrow's dataset filters fail on delta-rs's string_view columns against their
    files' string statistics.)"""
    dset = dt.to_pyarrow_dataset()
    names = dset.schema.names
    have = [c for c in columns if c in names]
    if key_rows.num_rows == 0:
        return unview(dset.head(0, columns=have))
    kt = unview(dset.to_table(columns=keys))
    if len(keys) == 1:
        k = keys[0]
        values = pc.unique(key_rows.column(k).combine_chunks())
        if values.type != kt.column(k).type:
            values = values.cast(kt.column(k).type)
        idx = np.flatnonzero(pc.fill_null(pc.is_in(kt.column(k), value_set=values), False)
                             .to_numpy(zero_copy_only=False))
    else:
        want = _conform(key_rows.select(keys), kt.schema).group_by(keys).aggregate([])
        kt = kt.append_column("__row", pa.array(np.arange(kt.num_rows, dtype=np.int64)))
        idx = np.sort(kt.join(want, keys=keys, join_type="inner").column("__row").to_numpy())
    return unview(dset.take(pa.array(idx, pa.int64()), columns=have))


def _read_target_rows(dt, keys: list, key_rows: pa.Table, columns: list) -> pa.Table:
    """The target's rows whose keys are in ``key_rows`` (only these are read in full)."""
    return _lookup(dt, keys, key_rows, columns)


def _key_tuples(t: pa.Table, keys: list, rows=None) -> list:
    sub = t.select(keys) if rows is None else t.select(keys).take(pa.array(rows, pa.int64()))
    cols = [c.to_pylist() for c in sub.columns]
    return list(zip(*cols))


def resolve_toast(dt, final: pa.Table, carries: pa.Table, keys: list, columns: list):
    """Fill the columns ``reduce_events`` left unknown (``_toast``): from the carry row
    of the key change they name, or from the target's row at the same key (read for
    these keys only). Returns ``(rows, missing)``: the final rows complete, and how many
    values had no row to come from (left null; PostgreSQL's apply worker would not have
    found the row to update either)."""
    tl_f = pc.fill_null(pc.list_value_length(final.column("_toast")), 0).to_numpy()
    tl_c = pc.fill_null(pc.list_value_length(carries.column("_toast")), 0).to_numpy() \
        if carries.num_rows else np.zeros(0, np.int64)
    if not tl_f.any():
        return final, 0
    nf, nc = final.num_rows, carries.num_rows
    data_cols = [c for c in columns if c not in keys]
    # the target's rows at the keys that read it
    need_f = np.flatnonzero((tl_f > 0) & pc.is_null(final.column("_ref_lsn")).to_numpy(zero_copy_only=False))
    need_c = np.flatnonzero((tl_c > 0) & pc.is_null(carries.column("_ref_lsn")).to_numpy(zero_copy_only=False)) \
        if nc else np.zeros(0, np.int64)
    key_rows = pa.concat_tables([final.select(keys).take(pa.array(need_f, pa.int64())),
                                 carries.select(keys).take(pa.array(need_c, pa.int64()))])
    target = _read_target_rows(dt, keys, key_rows, columns) if dt is not None else None
    nt = 0 if target is None else target.num_rows
    pool_schema = pa.schema([final.schema.field(c) for c in columns])
    parts = [_conform(final, pool_schema), _conform(carries, pool_schema)]
    if nt:
        parts.append(_conform(target, pool_schema))
    pool = pa.concat_tables(parts).combine_chunks()
    at_key = {k: nf + nc + i for i, k in enumerate(_key_tuples(target, keys))} if nt else {}

    # src[row][column]: pool index of the value (rows: finals 0..nf-1, carries nf..)
    src: dict = {}
    carry_at = {}
    if nc:
        c_lsn = carries.column("_commit_lsn").to_pylist()
        c_seq = carries.column("_seq").to_pylist()
        for j in range(nc):
            carry_at[(c_lsn[j], c_seq[j])] = nf + j
    missing = 0

    def fill(row_index, table, local, toast, ref_lsn, ref_seq, key):
        nonlocal missing
        s = {c: row_index for c in data_cols}
        if ref_lsn is not None:
            base = carry_at.get((ref_lsn, ref_seq))
            base_src = src.get(base) if base is not None else None
            for c in toast:
                s[c] = base_src[c] if base_src is not None else -1
                missing += s[c] < 0
        else:
            t_row = at_key.get(key)
            for c in toast:
                s[c] = -1 if t_row is None else t_row
                missing += t_row is None
        src[row_index] = s

    if nc:
        order = np.lexsort((carries.column("_seq").to_numpy(), carries.column("_commit_lsn").to_numpy()))
        toasts = carries.column("_toast").to_pylist()
        rl, rs = carries.column("_ref_lsn").to_pylist(), carries.column("_ref_seq").to_pylist()
        ckeys = _key_tuples(carries, keys)
        for j in order:
            if tl_c[j]:
                fill(nf + j, carries, j, toasts[j], rl[j], rs[j], ckeys[j])
            else:
                src[nf + j] = {c: nf + j for c in data_cols}
    rows = np.flatnonzero(tl_f > 0)
    toasts = final.column("_toast").take(pa.array(rows, pa.int64())).to_pylist()
    rl = final.column("_ref_lsn").take(pa.array(rows, pa.int64())).to_pylist()
    rs = final.column("_ref_seq").take(pa.array(rows, pa.int64())).to_pylist()
    fkeys = _key_tuples(final, keys, rows)
    for r, toast, a, b, key in zip(rows, toasts, rl, rs, fkeys):
        fill(int(r), final, r, toast, a, b, key)
    cols = []
    for f in final.schema:
        col = final.column(f.name)
        if f.name in data_cols:
            idx = np.arange(nf, dtype=np.int64)
            for r in rows:
                idx[r] = src[int(r)][f.name]
            col = pool.column(f.name).take(pa.array(idx, mask=idx < 0))
        cols.append(col)
    out = pa.Table.from_arrays(cols, schema=final.schema)
    if missing:
        log.warning("%d unchanged-TOAST values had no earlier row to come from (left null)",
                    missing)
    return out, missing


#: a batch whose keys fall in at least this share of the table's files (by the files'
#: key statistics) replaces the table in one overwrite instead of a MERGE: a MERGE would
#: read and rewrite about as much, more slowly (bench_delta: merge-random)
REWRITE_SHARE = 0.6


def _touched_share(dt, key: str, keys: pa.Array) -> float:
    """The share of ``dt``'s bytes in files whose key range holds one of ``keys``
    (0 when the files carry no statistics for the key)."""
    adds = dt.get_add_actions(flatten=True)
    adds = adds if isinstance(adds, pa.Table) else pa.table(adds)
    if f"min.{key}" not in adds.column_names or adds.num_rows == 0:
        return 0.0
    lo, hi = adds.column(f"min.{key}"), adds.column(f"max.{key}")
    sizes = adds.column("size_bytes").to_numpy()
    try:
        k = np.sort(keys.cast(lo.type).drop_null().to_numpy(zero_copy_only=False))
        lo_v = lo.to_numpy(zero_copy_only=False)
        hi_v = hi.to_numpy(zero_copy_only=False)
        if lo.null_count or hi.null_count or k.dtype.kind not in "iuf":
            return 0.0
        first = np.searchsorted(k, lo_v, side="left")
        last = np.searchsorted(k, hi_v, side="right")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError, ValueError):
        return 0.0
    touched = last > first
    return float(sizes[touched].sum() / max(sizes.sum(), 1))


def _rewrite_keyed(dt, source: pa.Table, keys: list, stored: pa.Schema, props):
    """The table with the batch applied, written in one overwrite commit: its rows
    without the batch's keys, plus the batch's writes."""
    from deltalake import write_deltalake

    data = unview(dt.to_pyarrow_table())
    (key,) = keys
    values = source.column(key).combine_chunks()
    values = values.cast(data.schema.field(key).type) if values.type != data.schema.field(key).type \
        else values
    keep = data.filter(pc.invert(pc.fill_null(pc.is_in(data.column(key), value_set=values),
                                              False)))
    writes = source.filter(pc.equal(source.column("_action"), "w")).drop_columns(["_action"])
    schema = pa.schema(list(data.schema) + [f for f in writes.schema
                                            if f.name not in data.schema.names])
    new = pa.concat_tables([_conform(keep, schema), _conform(writes, schema)])
    write_deltalake(dt, new, mode="overwrite", schema_mode="merge",
                    writer_properties=_writer_properties(), commit_properties=props)
    return {"num_target_rows_inserted": writes.num_rows,
            "num_target_rows_deleted": data.num_rows - keep.num_rows}


def _commit_properties(table: str, position: tuple, extra: dict | None = None,
                       backfill: int | None = None):
    from deltalake import CommitProperties, Transaction

    meta = {POSITION_KEY: json.dumps([int(position[0]), int(position[1])]),
            "pgoutput_fast.table": table}
    meta.update(extra or {})
    txns = [Transaction(APP_ID, int(position[0])), Transaction(SEQ_APP_ID, int(position[1]))]
    if backfill is not None:
        meta["pgoutput_fast.backfill"] = str(int(backfill))
        txns.append(Transaction(BACKFILL_APP_ID, int(backfill)))
    return CommitProperties(custom_metadata=meta, app_transactions=txns)


def _conflict(table: str, uri: str, exc: Exception) -> DeltaConflict:
    return DeltaConflict(
        f"{table}: another writer committed to {uri} while this batch was applied "
        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): nothing of this "
        "batch was committed; run the apply again (it continues from the table's position)")


def _is_conflict(exc: Exception) -> bool:
    from deltalake.exceptions import CommitFailedError

    text = str(exc)
    return isinstance(exc, CommitFailedError) or "already exists" in text.lower() \
        or "conflict" in text.lower() or "concurrent" in text.lower()


def _has_date(t: pa.DataType) -> bool:
    if pa.types.is_date(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_date(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_date(t.field(i).type) for i in range(t.num_fields))
    return False


def stats_columns(schema: pa.Schema) -> str:
    """``delta.dataSkippingStatsColumns`` for a new table: every column but those holding
    dates. PostgreSQL's dates reach 5874897 AD and ±infinity; delta-rs's statistics stop
    at year 262143 (its writer panics past it), and Delta needs no statistics on them."""
    names = [f.name for f in schema if not _has_date(f.type)]
    return ",".join("`" + n.replace("`", "``") + "`" for n in names)


def _writer_properties():
    from deltalake import WriterProperties

    return WriterProperties(compression="ZSTD", compression_level=1)


def _stored_schema(final: pa.Table, columns: list, extra: list) -> pa.Schema:
    return pa.schema([final.schema.field(c) for c in columns + STORED_META + extra])


def _nulls_as_target(source: pa.Table, target: pa.Schema) -> pa.Table:
    """Columns of ``source`` without a value take the target's type (a type PostgreSQL
    does not name, sent as bytes in binary mode, is text in a batch with no value)."""
    for i, f in enumerate(source.schema):
        j = target.get_field_index(f.name)
        if j >= 0 and f.name != "_action" and source.column(i).null_count == source.num_rows \
                and not _same_type(f.type, target.field(j).type):
            source = source.set_column(i, pa.field(f.name, target.field(j).type),
                                       pa.nulls(source.num_rows, target.field(j).type))
    return source


def _rename_in_table(dt, table: str, renamed: dict, storage_options):
    """Rewrite ``dt`` once with columns renamed (``{old: new}``)."""
    from deltalake import DeltaTable, write_deltalake

    data = unview(dt.to_pyarrow_table())
    names = [renamed.get(n, n) if n in renamed and renamed[n] not in data.column_names else n
             for n in data.column_names]
    if names == data.column_names:
        return dt
    data = data.rename_columns(names)
    log.warning("%s: columns renamed %s: the table was rewritten once", table, renamed)
    write_deltalake(dt, data, mode="overwrite", schema_mode="overwrite",
                    writer_properties=_writer_properties())
    return DeltaTable(dt.table_uri, storage_options=storage_options)


def _rewrite_table(dt, table: str, widen: list, defaults: dict, stored: pa.Schema,
                   storage_options) -> object:
    """Rewrite ``dt`` once (one overwrite commit): columns widened (``widen``), and
    columns added with a default (``defaults``: PostgreSQL's ADD COLUMN ... DEFAULT
    fills the existing rows, which the stream never says)."""
    from deltalake import DeltaTable, write_deltalake

    data = unview(dt.to_pyarrow_table())
    for name, old, new in widen:
        i = data.schema.get_field_index(name)
        data = data.set_column(i, name, data.column(name).cast(new))
        log.warning("%s: column %s widened from %s to %s: the table was rewritten once",
                    table, name, old, new)
    for name, value in defaults.items():
        t = stored.field(name).type
        data = data.append_column(pa.field(name, t), pa.array([value] * data.num_rows, t))
        log.warning("%s: column %s added with its default %r in the existing rows: the "
                    "table was rewritten once", table, name, value)
    write_deltalake(dt, data, mode="overwrite", schema_mode="overwrite",
                    writer_properties=_writer_properties())
    return DeltaTable(dt.table_uri, storage_options=storage_options)


def commit_batch(dt, uri: str, table: str, *, mode: str, keys: list, columns: list,
                 final: pa.Table, carries: pa.Table | None, truncate: bool, position: tuple,
                 changes: int, storage_options: dict | None = None,
                 configuration: dict | None = None,
                 column_defaults: dict | None = None,
                 renamed: dict | None = None, backfill: int | None = None) -> BatchResult:
    """Write one reduced batch (``reduce_events`` / ``reduce_full`` / the inserts of an
    append-only table) to the Delta table at ``uri`` in one commit, with its position.
    ``dt`` is the table as it was when the batch's starting position was read (None: no
    table yet): a commit in between is a conflict, not a double write."""
    from deltalake import write_deltalake

    result = BatchResult(table=table, uri=uri, changes=changes, applied=list(position),
                         skipped=False, missing=0, inserted=0, updated=0, deleted=0,
                         files_added=0, files_removed=0,
                         # the reduced batch as it reached this commit (one Arrow table on
                         # the committing process: its memory is what a batch costs here)
                         reduced_rows=final.num_rows,
                         reduced_bytes=final.nbytes + (carries.nbytes if carries is not None else 0))
    if backfill is not None:
        # a backfill (its batch starts with a Truncate: it replaces the rows): the
        # position it leaves, and its own record
        if not truncate:
            raise AssertionError("a backfill batch without its Truncate")
        position = backfill_position(backfill)
        result.update(applied=list(position), backfill=int(backfill))
    props = _commit_properties(table, position, {"pgoutput_fast.changes": str(changes),
                                                 COLUMNS_KEY: json.dumps(list(columns))},
                               backfill)
    extra = ["_row_hash", "_dup"] if mode == "full" else []
    wp = _writer_properties()

    if mode == "key" and carries is not None:
        final, result["missing"] = resolve_toast(dt if not truncate else None, final, carries,
                                                 keys, columns)
    # the rows to write, by mode
    if mode == "full":
        source = _full_source(dt if not truncate else None, final, columns, result)
    elif mode == "key":
        source = final
    else:
        source = final.append_column("_action", pa.array(["w"] * final.num_rows, pa.string()))
    if "_action" not in source.column_names:
        raise AssertionError("a batch without actions")
    stored = pa.schema([source.schema.field(c) for c in columns + STORED_META + extra])

    if dt is not None and renamed:
        dt = _rename_in_table(dt, table, renamed, storage_options)
    if dt is not None and not truncate:
        target = _target_schema(dt)
        source = _nulls_as_target(source, target)
        stored = pa.schema([source.schema.field(c) for c in stored.names])
        widen = check_schema(table, target, stored)
        defaults = {c: v for c, v in (column_defaults or {}).items()
                    if c in stored.names and c not in target.names}
        if widen or defaults:
            dt = _rewrite_table(dt, table, widen, defaults, stored, storage_options)
            target = _target_schema(dt)
        # a column the table has and the batch lacks (dropped): null from now on
        union = list(stored) + [f for f in target if f.name not in stored.names]
        merge_schema = pa.schema([pa.field(f.name, target.field(f.name).type)
                                  if f.name in target.names else f for f in union]
                                 + [pa.field("_action", pa.string())])
        source = _conform(source, merge_schema)
    try:
        if dt is None or truncate or mode == "append":
            rows = source.filter(pc.equal(source.column("_action"), "w"))
            rows = _conform(rows, stored)
            if dt is None:
                config = {"delta.dataSkippingStatsColumns": stats_columns(stored)}
                config.update(configuration or {})
                write_deltalake(uri, rows, mode="error", configuration=config,
                                storage_options=storage_options, writer_properties=wp,
                                commit_properties=props)
            else:
                write_deltalake(dt, rows, mode="overwrite" if truncate else "append",
                                schema_mode="merge", writer_properties=wp,
                                commit_properties=props)
            result.update(inserted=rows.num_rows)
        else:
            if mode == "full":
                on = ["_row_hash", "_dup"]
            else:
                on = keys
            cdf = (dt.metadata().configuration or {}).get("delta.enableChangeDataFeed") == "true"
            if mode == "key" and len(keys) == 1 and not cdf and \
                    _touched_share(dt, keys[0], source.column(keys[0])) >= REWRITE_SHARE:
                metrics = _rewrite_keyed(dt, source, keys, stored, props)
                result.update(inserted=metrics["num_target_rows_inserted"],
                              deleted=metrics["num_target_rows_deleted"], rewritten=True)
                dt2 = open_table(uri, storage_options)
                result.update(version=dt2.version() if dt2 is not None else None)
                return result
            predicate = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in on)
            # not streamed: delta-rs then prunes the target's files by the source's key
            # ranges (a batch of recent keys reads and rewrites only the files that
            # hold them; bench_delta: 2.5x faster); the source is the reduced batch, one
            # row per touched key, already in memory
            merger = dt.merge(source, predicate, source_alias="s", target_alias="t",
                              streamed_exec=False,
                              merge_schema=True, writer_properties=wp,
                              commit_properties=props)
            if mode == "key":
                merger = merger.when_matched_update_all(predicate="s._action = 'w'",
                                                        except_cols=["_action"])
            merger = merger.when_matched_delete(predicate="s._action = 'd'")
            merger = merger.when_not_matched_insert_all(predicate="s._action = 'w'",
                                                        except_cols=["_action"])
            metrics = merger.execute()
            result.update(inserted=metrics.get("num_target_rows_inserted", 0),
                          updated=metrics.get("num_target_rows_updated", 0),
                          deleted=metrics.get("num_target_rows_deleted", 0),
                          files_added=metrics.get("num_target_files_added", 0),
                          files_removed=metrics.get("num_target_files_removed", 0))
    except Exception as exc:
        if _is_conflict(exc):
            raise _conflict(table, uri, exc) from exc
        raise
    dt2 = open_table(uri, storage_options)
    result.update(version=dt2.version() if dt2 is not None else None)
    return result


def _full_source(dt, final: pa.Table, columns: list, result) -> pa.Table:
    """REPLICA IDENTITY FULL: the net count per row value -> the copies to insert
    (``_dup`` after the target's copies) or delete (its last copies)."""
    n = final.column("_n").to_numpy()
    hashes = final.column("_row_hash")
    have = {}
    if dt is not None and final.num_rows:
        found = _lookup(dt, ["_row_hash"], final.select(["_row_hash"]), ["_row_hash"])
        if found.num_rows:
            counts = found.group_by("_row_hash").aggregate([("_row_hash", "count")])
            have = dict(zip(counts.column("_row_hash").to_pylist(),
                            counts.column("_row_hash_count").to_pylist()))
    c = np.array([have.get(h, 0) for h in hashes.to_pylist()], np.int64)
    start = np.where(n > 0, c, np.maximum(c + n, 0))
    count = np.where(n > 0, n, c - start)
    result["missing"] += int(np.maximum(-(c + n), 0).sum())
    rows = np.repeat(np.arange(len(n)), count)
    offsets = np.concatenate([[0], np.cumsum(count)[:-1]]) if len(n) else np.zeros(0, np.int64)
    dup = start[rows] + (np.arange(len(rows)) - offsets[rows])
    out = final.take(pa.array(rows, pa.int64()))
    action = np.where(n[rows] > 0, "w", "d")
    out = out.drop_columns(["_n"]).append_column("_dup", pa.array(dup, pa.int64()))
    return out.append_column("_action", pa.array(action.tolist(), pa.string()))
