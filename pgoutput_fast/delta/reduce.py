"""A batch of one table's changes -> the final state of each key it touches.

This is the per-key reduction ``apply_changes`` runs before a Delta MERGE, on Spark's
executors (``pgoutput_fast.spark.apply``: partitioned by key) or in one process
(``pgoutput_fast.delta.apply_changeset``). It works on Arrow tables of storage types
(``pgoutput_fast.storage_types``) with the typed tables' columns: the data columns,
``_op``, ``_commit_lsn``, ``_seq``, ``_before``, ``_before_kind``, ``_unchanged_toast``,
``_special``. Truncates are handled by the caller (only the changes after the batch's
last truncate reach here).

Semantics, as PostgreSQL's apply worker:

* Keyed tables (primary key or replica identity index): per key, the last change by
  ``(_commit_lsn, _seq)`` wins; a delete removes the row; an update that changes the key
  deletes the old key and writes the new one.
* Unchanged TOAST (``_unchanged_toast``): such a column keeps the value it had, which
  is the last value written for that key earlier in the batch, or else the target's
  (read for these keys only, ``resolve``). An update that changes the key takes these
  values from the old key's row (a *carry* row holds the old key's state at that
  change). A FULL old image holds the values itself.
* REPLICA IDENTITY FULL (every column is the key): duplicates are kept. Each change
  counts +1 (insert) or -1 (delete) on the row's value, identified by a hash of its
  values (``row_hashes``); the net count per value says how many copies to add or remove.

``change_events`` turns changes into events at keys; ``reduce_events`` gives, per key,
the final row (``_action`` ``w``) or a delete (``d``), plus the carry rows; columns
still unknown are listed in ``_toast`` with where to find them (``_ref_lsn``,
``_ref_seq``: a carry row's position, or null: the target's row at the same key).
Nothing here converts values to Python objects: rows are assembled with ``take``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["change_events", "reduce_events", "full_events", "reduce_full", "row_hashes",
           "POSITION", "STORED_META"]

POSITION = ["_commit_lsn", "_seq"]
#: the columns a stored row has besides the table's own
STORED_META = ["_commit_lsn", "_seq", "_special"]
_STR_LIST = pa.list_(pa.string())


def _col(t: pa.Table, name: str) -> pa.Array:
    c = t.column(name)
    return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c


def _toast_masks(toast: pa.Array, n: int) -> dict:
    """``{column: bool ndarray}``: rows whose ``_unchanged_toast`` lists the column."""
    if toast.null_count == n or len(pc.list_flatten(toast)) == 0:
        return {}
    flat = pc.list_flatten(toast).to_numpy(zero_copy_only=False)
    parent = pc.list_parent_indices(toast).to_numpy()
    out = {}
    for name in set(flat):
        m = np.zeros(n, bool)
        m[parent[flat == name]] = True
        out[name] = m
    return out


def _null_safe_equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    eq = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
    return eq | both_null


def _special_without_before(special: pa.Array) -> pa.Array:
    """``_special`` without its ``_before.`` entries (a stored row has no old image)."""
    if special.null_count == len(special) or len(special.values) == 0:
        return special
    keys = special.keys.to_numpy(zero_copy_only=False)
    if not any(k.startswith("_before.") for k in keys):
        return special
    rows = special.to_pylist()
    kept = [None if r is None else ([kv for kv in r if not kv[0].startswith("_before.")] or None)
            for r in rows]
    return pa.array(kept, special.type)


def change_events(t: pa.Table, columns: list, keys: list) -> pa.Table:
    """Changes of a keyed table -> events at keys: ``w`` (insert, snapshot row or
    update: the row at its new key), ``d`` (delete at the old key), ``m`` (an update
    that changed the key: a delete at the old key whose state a ``w`` may need). Columns:
    ``columns``, ``_commit_lsn``, ``_seq``, ``_sub`` (0 before 1 at one position),
    ``_kind``, ``_special``, ``_toast`` (columns whose value is the one before),
    ``_carry`` (a key-changing update with unchanged TOAST: on its ``w``, the values come
    from the ``m``'s carry row; on its ``m``, emit that row)."""
    n = t.num_rows
    op = _col(t, "_op").to_numpy(zero_copy_only=False).astype(object)
    bkind = _col(t, "_before_kind")
    has_before = pc.is_valid(bkind).to_numpy(zero_copy_only=False)
    full_before = pc.fill_null(pc.equal(bkind, "O"), False).to_numpy(zero_copy_only=False)
    before = _col(t, "_before")
    masks = _toast_masks(_col(t, "_unchanged_toast"), n)

    def before_of(c):
        return before.field(c) if before.type.get_field_index(c) >= 0 else pa.nulls(n, t.schema.field(c).type)

    old_key = {k: pc.if_else(pa.array(has_before), before_of(k), _col(t, k)) for k in keys}
    values = {}
    for c in columns:
        v = _col(t, c)
        m = masks.get(c)
        if m is not None:
            if c in old_key:                     # a key sent as unchanged TOAST: the old key
                v = pc.if_else(pa.array(m), old_key[c], v)
                masks[c] = np.zeros(n, bool)
            elif full_before.any():              # a FULL old image holds the value
                v = pc.if_else(pa.array(m & full_before), before_of(c), v)
                masks[c] = m & ~full_before
        values[c] = v
    changed = np.zeros(n, bool)
    for k in keys:
        changed |= ~_null_safe_equal(values[k], old_key[k])
    toast_names = [c for c in columns if c in masks and masks[c].any()]
    any_toast = np.zeros(n, bool)
    for c in toast_names:
        any_toast |= masks[c]

    is_write = np.isin(op, ["c", "r", "u"])
    is_delete = op == "d"
    is_move = (op == "u") & changed
    toast_lists = pa.array([[c for c in toast_names if masks[c][i]] if any_toast[i] else []
                            for i in range(n)] if toast_names else [[]] * n, _STR_LIST)
    special = _special_without_before(_col(t, "_special"))
    lsn, seq = _col(t, "_commit_lsn"), _col(t, "_seq")

    parts = []
    w = np.flatnonzero(is_write)
    if len(w):
        idx = pa.array(w)
        parts.append({**{c: values[c].take(idx) for c in columns},
                      "_commit_lsn": lsn.take(idx), "_seq": seq.take(idx),
                      "_sub": pa.array(np.ones(len(w), np.int8)),
                      "_kind": pa.array(["w"] * len(w)), "_special": special.take(idx),
                      "_toast": toast_lists.take(idx),
                      "_carry": pa.array(is_move[w] & any_toast[w])})
    d = np.flatnonzero(is_delete | is_move)
    if len(d):
        idx = pa.array(d)
        parts.append({**{c: (old_key[c].take(idx) if c in old_key
                             else pa.nulls(len(d), t.schema.field(c).type)) for c in columns},
                      "_commit_lsn": lsn.take(idx), "_seq": seq.take(idx),
                      "_sub": pa.array(np.zeros(len(d), np.int8)),
                      "_kind": pa.array(np.where(is_move[d], "m", "d").tolist(), pa.string()),
                      "_special": pa.nulls(len(d), special.type),
                      "_toast": pa.array([[]] * len(d), _STR_LIST),
                      "_carry": pa.array(is_move[d] & any_toast[d])})
    schema = pa.schema([t.schema.field(c) for c in columns] + [
        pa.field("_commit_lsn", pa.int64()), pa.field("_seq", pa.int64()),
        pa.field("_sub", pa.int8()), pa.field("_kind", pa.string()),
        pa.field("_special", special.type), pa.field("_toast", _STR_LIST),
        pa.field("_carry", pa.bool_())])
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([pa.table(p, schema=schema) for p in parts])


def _group_starts(sorted_keys: list, n: int) -> np.ndarray:
    """Start index of each run of equal keys in sorted order."""
    if n == 0:
        return np.zeros(0, np.int64)
    new = np.zeros(n, bool)
    new[0] = True
    for a in sorted_keys:
        new[1:] |= ~_null_safe_equal(a.slice(1), a.slice(0, n - 1))
    return np.flatnonzero(new)


def output_schema(ev_schema: pa.Schema, columns: list) -> pa.Schema:
    """The schema of ``reduce_events``'s output for events of ``ev_schema``."""
    return pa.schema([ev_schema.field(c) for c in columns] + [
        pa.field("_commit_lsn", pa.int64()), pa.field("_seq", pa.int64()),
        ev_schema.field("_special"), pa.field("_action", pa.string()),
        pa.field("_toast", _STR_LIST), pa.field("_ref_lsn", pa.int64()),
        pa.field("_ref_seq", pa.int64())])


def reduce_events(ev: pa.Table, columns: list, keys: list) -> tuple[pa.Table, pa.Table]:
    """``(final, carries)``: one row per key of ``ev`` (``change_events``), the key's
    state after the batch (``_action`` ``w`` or ``d``), and the carry rows (``_action``
    ``c``: a key's state just before an update moved it away). ``_toast`` lists the
    columns still to be filled from ``_ref_lsn``/``_ref_seq``'s carry row, or from the
    target's row at the same key when those are null."""
    schema = output_schema(ev.schema, columns)
    n = ev.num_rows
    if n == 0:
        return schema.empty_table(), schema.empty_table()
    order = pc.sort_indices(ev, [(k, "ascending") for k in keys] +
                            [("_commit_lsn", "ascending"), ("_seq", "ascending"),
                             ("_sub", "ascending")])
    ev = ev.take(order)
    starts = _group_starts([_col(ev, k) for k in keys], n)
    ends = np.append(starts[1:], n)
    kind = _col(ev, "_kind").to_numpy(zero_copy_only=False).astype(object)
    toast = _col(ev, "_toast")
    toast_len = pc.fill_null(pc.list_value_length(toast), 0).to_numpy(zero_copy_only=False)
    carry = pc.fill_null(_col(ev, "_carry"), False).to_numpy(zero_copy_only=False)
    slow_event = (toast_len > 0) | carry
    slow_group = np.add.reduceat(slow_event.astype(np.int64), starts) > 0

    # fast groups: the last event says it all
    last = ends[~slow_group] - 1
    # slow groups: walk them; each output row takes column c from event src[c] (or null)
    data_cols = [c for c in columns if c not in keys]
    rows_src: list = []          # per output row: {column: event index or -1}
    rows_meta: list = []         # (event index of the position, action, toast list, ref)
    carries_src: list = []
    carries_meta: list = []
    toast_list: list = toast.to_pylist() if slow_group.any() else []
    lsn = _col(ev, "_commit_lsn").to_numpy()
    seq = _col(ev, "_seq").to_numpy()
    for g in np.flatnonzero(slow_group):
        s, e = starts[g], ends[g]
        # None: the target's row; "d": deleted; else (src, unresolved, ref)
        state: Any = None
        for i in range(s, e):
            k = kind[i]
            if k == "w":
                src = {c: i for c in data_cols}
                unres: set = set()
                ref = None
                names = toast_list[i] or ()
                if carry[i]:
                    unres = set(names)
                    ref = (int(lsn[i]), int(seq[i]))
                    for c in names:
                        src[c] = -1
                elif names:
                    if state is None:
                        unres = set(names)
                        for c in names:
                            src[c] = -1
                    elif state == "d":
                        for c in names:       # no row to keep a value from: null
                            src[c] = -1
                    else:
                        psrc, punres, pref = state
                        for c in names:
                            src[c] = psrc[c]
                            if c in punres:
                                unres.add(c)
                                ref = pref
                state = (src, unres, ref)
            else:
                if k == "m" and carry[i]:
                    if state is None:
                        c_src = {c: -1 for c in data_cols}
                        c_unres, c_ref = set(data_cols), None
                    elif state == "d":
                        c_src, c_unres, c_ref = {c: -1 for c in data_cols}, set(), None
                    else:
                        c_src, c_unres, c_ref = state
                    carries_src.append(c_src)
                    carries_meta.append((i, "c", sorted(c_unres), c_ref))
                state = "d"
        if state is None or state == "d":
            rows_src.append(None)
            rows_meta.append((e - 1, "d", [], None))
        else:
            src, unres, ref = state
            rows_src.append(src)
            rows_meta.append((e - 1, "w", sorted(unres), ref))

    final = _assemble(ev, schema, columns, keys, last, kind, rows_src, rows_meta, starts,
                      slow_group)
    carries = _assemble(ev, schema, columns, keys, np.zeros(0, np.int64), kind, carries_src,
                        carries_meta, None, None)
    return final, carries


def _assemble(ev, schema, columns, keys, fast_last, kind, rows_src, rows_meta, starts,
              slow_group) -> pa.Table:
    """Output rows: the fast groups' last events, then the walked rows (``rows_src``:
    per row the event index of each non-key column, -1 for null; None: a delete)."""
    nf = len(fast_last)
    pos_idx = np.concatenate([fast_last, np.array([m[0] for m in rows_meta], np.int64)])
    out = {}
    for c in columns:
        if c in keys:
            idx = pos_idx
        else:
            idx = np.concatenate([fast_last, np.array(
                [-1 if src is None else src[c] for src in rows_src], np.int64)])
        out[c] = _col(ev, c).take(pa.array(idx, mask=idx < 0))
    out["_commit_lsn"] = _col(ev, "_commit_lsn").take(pa.array(pos_idx))
    out["_seq"] = _col(ev, "_seq").take(pa.array(pos_idx))
    fast_action = np.where(kind[fast_last] == "w", "w", "d") if nf else np.zeros(0, object)
    action = list(fast_action) + [m[1] for m in rows_meta]
    out["_special"] = _col(ev, "_special").take(pa.array(pos_idx))
    out["_action"] = pa.array(action, pa.string())
    out["_toast"] = pa.array([[]] * nf + [m[2] for m in rows_meta], _STR_LIST)
    refs = [None] * nf + [m[3] for m in rows_meta]
    out["_ref_lsn"] = pa.array([r and r[0] for r in refs], pa.int64())
    out["_ref_seq"] = pa.array([r and r[1] for r in refs], pa.int64())
    table = pa.table(out, schema=schema)
    # a delete carries its key only
    deletes = pc.equal(table.column("_action"), "d")
    if pc.any(deletes).as_py():
        cols = []
        for f in schema:
            col = table.column(f.name)
            if f.name in columns and f.name not in keys:
                col = pc.if_else(deletes, pa.nulls(len(table), f.type), col)
            elif f.name == "_special":
                col = pc.if_else(deletes, pa.nulls(len(table), f.type), col)
            cols.append(col)
        table = pa.Table.from_arrays(cols, schema=schema)
    return table


# ---------------------------------------------------------------------------------------
# REPLICA IDENTITY FULL: rows counted by value
# ---------------------------------------------------------------------------------------

def _canonical(v):
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, (bytes, bytearray)):
        return {"b": bytes(v).hex()}
    if isinstance(v, dict):
        return {k: _canonical(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_canonical(x) for x in v]
    if isinstance(v, (int, str, bool)) or v is None:
        return v
    return str(v)


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with dates and timestamps as their integers (Python's datetime cannot hold
    PostgreSQL's ±infinity)."""
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_date64(t) or pa.types.is_timestamp(t) or pa.types.is_time(t) \
            or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_list(t):
        return pa.list_(_plain_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(t.field(i).name, _plain_type(t.field(i).type))
                          for i in range(t.num_fields)])
    return t


def row_hashes(t: pa.Table, columns: list) -> pa.Array:
    """A SHA-256 (hex) of each row's non-null values by column name: the identity of a
    row in a REPLICA IDENTITY FULL table (a column added later, null, leaves it as is)."""
    cols = {}
    for c in columns:
        a = _col(t, c)
        plain = _plain_type(a.type)
        cols[c] = (a.cast(plain) if plain != a.type else a).to_pylist()
    out = []
    for i in range(t.num_rows):
        items = [[c, _canonical(cols[c][i])] for c in columns if cols[c][i] is not None]
        out.append(hashlib.sha256(json.dumps(items, separators=(",", ":")).encode()).hexdigest())
    return pa.array(out, pa.string())


def full_events(t: pa.Table, columns: list) -> pa.Table:
    """Changes of a REPLICA IDENTITY FULL table -> ``(_row_hash, _n, values)`` events:
    +1 for the new row of an insert or update, -1 for the old row of a delete or
    update (the old image holds every column)."""
    n = t.num_rows
    op = _col(t, "_op").to_numpy(zero_copy_only=False).astype(object)
    before = _col(t, "_before")
    bkind = _col(t, "_before_kind")
    has_before = pc.is_valid(bkind).to_numpy(zero_copy_only=False)
    masks = _toast_masks(_col(t, "_unchanged_toast"), n)
    new_vals = {}
    for c in columns:
        v = _col(t, c)
        if c in masks and before.type.get_field_index(c) >= 0:
            v = pc.if_else(pa.array(masks[c] & has_before), before.field(c), v)
        new_vals[c] = v
    plus = np.flatnonzero(np.isin(op, ["c", "r", "u"]))
    minus = np.flatnonzero(np.isin(op, ["u", "d"]) & has_before)
    if np.isin(op, ["u", "d"]).sum() != len(minus):
        raise ValueError("an update or delete of a REPLICA IDENTITY FULL table has no old row")
    special = _special_without_before(_col(t, "_special"))
    lsn, seq = _col(t, "_commit_lsn"), _col(t, "_seq")
    parts = []
    for rows, sign, vals in ((plus, 1, new_vals), (minus, -1, None)):
        if not len(rows):
            continue
        idx = pa.array(rows)
        part = {c: (vals[c].take(idx) if vals is not None else
                    (before.field(c).take(idx) if before.type.get_field_index(c) >= 0
                     else pa.nulls(len(rows), t.schema.field(c).type))) for c in columns}
        part.update({"_commit_lsn": lsn.take(idx), "_seq": seq.take(idx),
                     "_special": special.take(idx) if sign > 0 else pa.nulls(len(rows), special.type),
                     "_n": pa.array(np.full(len(rows), sign, np.int64))})
        parts.append(part)
    schema = pa.schema([t.schema.field(c) for c in columns] + [
        pa.field("_commit_lsn", pa.int64()), pa.field("_seq", pa.int64()),
        pa.field("_special", special.type), pa.field("_n", pa.int64())])
    if not parts:
        out = schema.empty_table()
    else:
        out = pa.concat_tables([pa.table(p, schema=schema) for p in parts])
    return out.append_column("_row_hash", row_hashes(out, columns))


def reduce_full(ev: pa.Table, columns: list) -> pa.Table:
    """Per row value (``_row_hash``): the net count ``_n`` of copies to add (> 0) or
    remove (< 0), with the values and the position of its last change."""
    if ev.num_rows == 0:
        return ev
    order = pc.sort_indices(ev, [("_row_hash", "ascending"), ("_commit_lsn", "ascending"),
                                 ("_seq", "ascending")])
    ev = ev.take(order)
    n = ev.num_rows
    starts = _group_starts([_col(ev, "_row_hash")], n)
    net = np.add.reduceat(_col(ev, "_n").to_numpy(), starts)
    last = np.append(starts[1:], n) - 1
    # the values of the group's last insert if any (it has the _special), else its last
    ins = _col(ev, "_n").to_numpy() > 0
    pick = last.copy()
    for g, (s, e) in enumerate(zip(starts, last + 1)):
        w = np.flatnonzero(ins[s:e])
        if len(w):
            pick[g] = s + w[-1]
    out = ev.take(pa.array(pick))
    out = out.set_column(out.schema.get_field_index("_n"), "_n", pa.array(net, pa.int64()))
    keep = np.flatnonzero(net != 0)
    return out.take(pa.array(keep))
