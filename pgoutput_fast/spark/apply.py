"""Apply change DataFrames to Parquet table snapshots, idempotently.

The input is a typed DataFrame of one table (``decode(df, catalog, table=...)``) or the
change-event DataFrame of any tables (``decode(df, catalog)``) with ``catalog=``: its
text values are parsed into each table's typed columns first (``events_to_typed``).

Layout of a target directory (one directory per table)::

    TARGET/schema.table/_current.json     {"version": 3, "applied": [commit_lsn, seq], ...}
    TARGET/schema.table/v000003/*.parquet the snapshot of version 3
    TARGET/schema.table/v000002/...       older versions (kept; remove them when you like)

``apply_changes(typed_df, TARGET)`` reads the current version, merges the changes
and writes version n+1, then switches ``_current.json`` atomically (write a temp file,
fsync, ``os.replace``): a reader sees the old or the new version, never a mix. This is
for a local or POSIX-like file system; object stores need a table format with its own
commit protocol.

Merge semantics (the same as PostgreSQL's apply worker, and as ``demo.image``):

* The LSN guard: only changes after the snapshot's ``applied`` position
  ``(commit_lsn, seq)`` are applied, so applying a batch again changes nothing (no new
  version is written).
* A truncate drops every row before it: the target's rows and earlier changes.
* Per key (the replica identity columns by default, from the typed DataFrame's field
  metadata; or ``keys=``): the last change by ``(commit_lsn, seq)`` wins; a delete
  removes the row; an update that changes the key deletes the old key and writes the
  new one.
* Unchanged TOAST (``_unchanged_toast``): such a column keeps the value it had: the
  last value written for that key before the change (in this batch or in the target).
  An update that changes the key *and* has unchanged-TOAST columns is rejected
  (``ValueError``; the value would have to follow the old key).
* Tables without key columns (REPLICA IDENTITY NOTHING, or no columns at all) are
  append-only: inserts are added, updates/deletes are rejected.
* Column sets: the snapshot has the latest relation version's columns. A column added
  by DDL is null in rows written before it existed, or ``column_defaults[column]``
  (PostgreSQL fills existing rows with the column's DEFAULT, which the stream never
  says).
* The snapshot also holds ``_commit_lsn`` and ``_seq`` of the change that wrote each
  row, and ``_special`` (values the typed column cannot hold, see ``ChangeSet.tables``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

import pyarrow as pa

from ..catalog import RelationCatalog
from ..types import K_ARRAY, K_UNKNOWN

__all__ = ["apply_changes", "events_to_typed", "snapshot_path", "read_snapshot", "snapshot_state", "ApplyResult",
           "snapshot_rows", "SnapshotImage"]

CURRENT = "_current.json"
_META = "pgoutput_fast"


class ApplyResult(dict):
    """``{"table", "version", "path", "applied", "changes", "rows", "skipped"}``."""


def _table_meta(df) -> dict:
    return (df.schema["_op"].metadata or {}).get(_META, {})


def snapshot_state(target, table) -> dict | None:
    p = os.path.join(target, table, CURRENT)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def snapshot_path(target, table) -> str | None:
    st = snapshot_state(target, table)
    return None if st is None else os.path.join(target, table, st["path"])


def read_snapshot(target, table) -> pa.Table:
    """The current snapshot of a table as an Arrow table (Spark-mapped types)."""
    from ..parquet_io import read_parquet

    path = snapshot_path(target, table)
    if path is None:
        raise FileNotFoundError(f"no snapshot of {table} in {target}")
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".parquet"))
    tables = [read_parquet(f) for f in files]
    return pa.concat_tables(tables)


def _parquet_rows(path) -> int:
    """Row count from the Parquet footers (no Spark job)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows
               for f in os.listdir(path) if f.endswith(".parquet"))


def _switch(target, table, state):
    d = os.path.join(target, table)
    fd, tmp = tempfile.mkstemp(prefix=".current.", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, CURRENT))
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def apply_changes(changes, target, keys=None, *, column_defaults: dict | None = None,
                  table: str | None = None, catalog=None):
    """Merge changes into the table snapshots under ``target`` (module doc).

    ``changes`` is either

    * a typed DataFrame of one table (``decode(df, catalog, table=...)``): returns the
      ``ApplyResult`` of that table; ``column_defaults`` is ``{column: value}``; or
    * the change-event DataFrame (``decode(df, catalog)``, any tables): needs
      ``catalog`` (types and keys); each table of the catalog (or only ``table``) is
      converted with ``events_to_typed`` and applied as above. Returns
      ``{table: ApplyResult}``; ``column_defaults`` is ``{table: {column: value}}``.
    """
    if _is_events(changes):
        if catalog is None:
            raise ValueError("apply_changes of change events needs catalog= (build_catalog): "
                             "the events hold text values, the snapshot typed columns")
        from .decode import tables_of

        names = [table] if table else tables_of(catalog)
        defaults = column_defaults or {}
        from pyspark import StorageLevel

        with _uncompressed_cache(changes.sparkSession):
            events = changes.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                return {name: apply_changes(events_to_typed(events, catalog, name), target, keys,
                                            column_defaults=defaults.get(name))
                        for name in names}
            finally:
                events.unpersist()
    return _apply_typed(changes, target, keys, column_defaults=column_defaults, table=table)


def _apply_typed(changes, target, keys=None, *, column_defaults: dict | None = None,
                 table: str | None = None) -> ApplyResult:
    from pyspark.sql import functions as F

    spark = changes.sparkSession
    meta = _table_meta(changes)
    table = table or meta.get("table")
    if not table:
        raise ValueError("apply_changes needs a typed DataFrame from decode(..., table=...) "
                         "(or table=)")
    key_cols = list(keys) if keys is not None else list(meta.get("key_columns", []))
    columns = list(meta.get("columns") or [c for c in changes.columns if not c.startswith("_")])
    versions = {int(k): set(v) for k, v in (meta.get("versions") or {}).items()}
    defaults = dict(column_defaults or {})
    os.makedirs(os.path.join(target, table), exist_ok=True)
    state = snapshot_state(target, table)
    applied = state["applied"] if state else None

    ch = changes
    if applied is not None:
        c0, s0 = applied
        ch = ch.where((F.col("_commit_lsn") > c0) | ((F.col("_commit_lsn") == c0) & (F.col("_seq") > s0)))
    # decoded once: the summary below and the merge both read it
    from pyspark import StorageLevel

    with _uncompressed_cache(spark):
        ch = ch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return _apply(spark, ch, changes, target, table, key_cols, columns, versions,
                          defaults, state, applied)
        finally:
            ch.unpersist()


_COMPRESS = "spark.sql.inMemoryColumnarStorage.compressed"


@contextlib.contextmanager
def _uncompressed_cache(spark):
    """Caches built inside are not column-compressed: a cache here lives for one apply
    and is read twice, so compressing it costs more than it saves (bench_spark: building
    it took 1.6x less time). The setting is read when a cache is filled, so it holds for
    the whole block, and is restored after it."""
    prev = spark.conf.get(_COMPRESS, None)
    spark.conf.set(_COMPRESS, "false")
    try:
        yield
    finally:
        if prev is None:
            spark.conf.unset(_COMPRESS)
        else:
            spark.conf.set(_COMPRESS, prev)


def _apply(spark, ch, changes, target, table, key_cols, columns, versions, defaults, state,
           applied) -> ApplyResult:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pos = F.struct(F.col("_commit_lsn").alias("c"), F.col("_seq").alias("s"))
    summary = ch.agg(
        F.count(F.lit(1)).alias("n"),
        F.max(pos).alias("last"),
        F.max(F.when(F.col("_op") == "t", pos)).alias("trunc"),
        F.sum(F.when(F.size(F.coalesce("_unchanged_toast", F.array())) > 0, 1).otherwise(0)).alias("toast"),
        F.sum(F.when(F.col("_op").isin("u", "d"), 1).otherwise(0)).alias("ud"),
    ).collect()[0]
    result = ApplyResult(table=table, changes=int(summary["n"]), skipped=False)
    if summary["n"] == 0 and state is not None:
        result.update(version=state["version"], path=snapshot_path(target, table),
                      applied=applied, rows=state.get("rows"), skipped=True)
        return result
    new_applied = [summary["last"]["c"], summary["last"]["s"]] if summary["last"] else applied

    data_type = {f.name: f.dataType for f in changes.schema.fields}
    snap_cols = columns + ["_commit_lsn", "_seq", "_special"]

    # -- the target's rows, as writes at position (-1, -1) -------------------------
    old = None
    if state is not None and summary["trunc"] is None:
        old = spark.read.parquet(snapshot_path(target, table))
        sel = []
        for c in snap_cols:
            if c in old.columns:
                sel.append(F.col(c).cast(data_type[c]).alias(c) if c in data_type else F.col(c))
            else:
                sel.append((F.lit(defaults[c]) if c in defaults else F.lit(None))
                           .cast(data_type.get(c, "string")).alias(c))
        old = old.select(*sel)
    if summary["trunc"] is not None:
        t = summary["trunc"]
        ch = ch.where((F.col("_commit_lsn") > t["c"]) | ((F.col("_commit_lsn") == t["c"]) & (F.col("_seq") > t["s"])))
    ch = ch.where(F.col("_op") != "t")

    def value(c):
        if c not in changes.columns:
            return F.lit(None).cast(data_type.get(c, "string"))
        if c in defaults and versions:
            lacking = [v for v, cols in versions.items() if c not in cols]
            if lacking:
                return F.when(F.col("_version").isin(lacking), F.lit(defaults[c]).cast(data_type[c])) \
                    .otherwise(F.col(c))
        return F.col(c)

    special = F.map_filter(F.col("_special"), lambda k, v: ~k.startswith("_before."))
    writes = [value(c).alias(c) for c in columns]
    if not key_cols:
        if summary["ud"]:
            raise ValueError(f"{table}: updates/deletes on a table without key columns "
                             "(replica identity NOTHING?): pass keys=")
        new = ch.select(*writes, "_commit_lsn", "_seq", special.alias("_special"))
        out = new if old is None else old.unionByName(new)
    else:
        # one event per (key, change): upserts at the new key, deletes at the old key
        old_key = [F.when(F.col("_before_kind").isNotNull(), F.col("_before")[k]).otherwise(F.col(k))
                   for k in key_cols]
        toast0 = F.coalesce(F.col("_unchanged_toast"), F.array().cast("array<string>"))
        # a key column sent as unchanged TOAST (with the old key, 'K') is that old value
        writes = [F.when(F.array_contains(toast0, c), old_key[key_cols.index(c)]).otherwise(w).alias(c)
                  if c in key_cols else w for c, w in zip(columns, writes)]
        key_changed = F.lit(False)
        for k, ok in zip(key_cols, old_key):
            k = F.when(F.array_contains(toast0, k), ok).otherwise(F.col(k))
            key_changed = key_changed | ~k.eqNullSafe(ok)
        toast = F.coalesce(F.col("_unchanged_toast"), F.array().cast("array<string>"))
        if summary["toast"]:
            # an old row ('O', REPLICA IDENTITY FULL) holds the unchanged values itself
            full = F.col("_before_kind") == "O"
            writes = [F.when(full & F.array_contains(toast, c), F.col("_before")[c])
                      .otherwise(w).alias(c) for c, w in zip(columns, writes)]
            toast = F.when(full, F.array().cast("array<string>")).otherwise(toast)
        base = ch.select(*writes, "_commit_lsn", "_seq", special.alias("_special"),
                         toast.alias("_toast"), F.col("_op"),
                         F.struct(*[ok.alias(k) for k, ok in zip(key_cols, old_key)]).alias("_old"),
                         key_changed.alias("_kc"))
        if summary["toast"]:
            bad = base.where(F.col("_kc") & (F.col("_op") == "u") & (F.size("_toast") > 0)).limit(1).count()
            if bad:
                raise ValueError(f"{table}: an update changes the key and has unchanged-TOAST "
                                 "columns; not supported by apply_changes")
        ups = base.where(F.col("_op").isin("c", "r", "u")).select(
            *columns, "_commit_lsn", "_seq", "_special", "_toast",
            F.lit(1).alias("_sub"), F.lit("w").alias("_kind"))
        dels = base.where((F.col("_op") == "d") | ((F.col("_op") == "u") & F.col("_kc"))).select(
            *[F.col("_old")[k].alias(k) if k in key_cols else F.lit(None).cast(data_type[k]).alias(k)
              for k in columns],
            "_commit_lsn", "_seq", F.lit(None).cast("map<string,string>").alias("_special"),
            F.array().cast("array<string>").alias("_toast"),
            F.lit(0).alias("_sub"), F.lit("d").alias("_kind"))
        ev = ups.unionByName(dels)
        if old is not None:
            ev = ev.unionByName(old.select(*columns, F.lit(-1).cast("long").alias("_commit_lsn"),
                                           F.lit(-1).cast("long").alias("_seq"), "_special",
                                           F.array().cast("array<string>").alias("_toast"),
                                           F.lit(0).alias("_sub"), F.lit("w").alias("_kind"),
                                           F.col("_commit_lsn").alias("_w_lsn"),
                                           F.col("_seq").alias("_w_seq")),
                                allowMissingColumns=True)
        order = [F.col("_commit_lsn"), F.col("_seq"), F.col("_sub")]
        if summary["toast"]:
            w = Window.partitionBy(*key_cols).orderBy(*order).rowsBetween(
                Window.unboundedPreceding, Window.currentRow)
            filled = []
            for c in columns:
                if c in key_cols:
                    filled.append(F.col(c))
                    continue
                keep = (F.col("_kind") == "w") & ~F.array_contains("_toast", F.lit(c))
                filled.append(F.last(F.when(keep, F.struct(F.col(c).alias("v"))), ignorenulls=True)
                              .over(w)["v"].alias(c))
            ev = ev.select(*filled, *[c for c in ev.columns if c not in columns])
        last = Window.partitionBy(*key_cols).orderBy(*[o.desc() for o in order])
        out = ev.withColumn("_rn", F.row_number().over(last)).where(
            (F.col("_rn") == 1) & (F.col("_kind") == "w"))
        if "_w_lsn" in out.columns:  # target rows keep the position that wrote them
            out = out.withColumn("_commit_lsn", F.when(F.col("_commit_lsn") < 0, F.col("_w_lsn"))
                                 .otherwise(F.col("_commit_lsn"))) \
                     .withColumn("_seq", F.when(F.col("_seq") < 0, F.col("_w_seq")).otherwise(F.col("_seq")))
        out = out.select(*snap_cols)

    version = (state["version"] if state else 0) + 1
    rel = f"v{version:06d}"
    path = os.path.join(target, table, rel)
    # INT96 (Spark's default) cannot hold ±infinity (int64 µs extremes): write micros
    prev = spark.conf.get("spark.sql.parquet.outputTimestampType", None)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    try:
        out.write.mode("overwrite").parquet(path)
    finally:
        if prev is not None and prev != "TIMESTAMP_MICROS":
            spark.conf.set("spark.sql.parquet.outputTimestampType", prev)
    rows = _parquet_rows(path)
    _switch(target, table, {"version": version, "path": rel, "applied": new_applied,
                            "rows": rows, "columns": columns, "key_columns": key_cols})
    result.update(version=version, path=path, applied=new_applied, rows=rows)
    return result


def snapshot_rows(target, table, original_schema: pa.Schema) -> tuple[list, list]:
    """``(columns, rows)`` of a snapshot in the decoder's own value forms
    (``arrow_values.column_values``; ``_special`` values as ``Special``), for checks."""
    from ..arrow_values import Special, column_values
    from .types import from_spark_array

    t = read_snapshot(target, table)
    cols = [f.name for f in original_schema]
    values: dict[str, Any] = {}
    for f in original_schema:
        values[f.name] = column_values(from_spark_array(t.column(f.name), f.type))
    specials = t.column("_special").to_pylist()
    rows = []
    for i in range(t.num_rows):
        r = {c: values[c][i] for c in cols}
        for k, v in specials[i] or ():
            if k in r:
                r[k] = Special(v)
        rows.append(r)
    return cols, rows


class SnapshotImage:
    """Snapshots under ``target`` seen like a ``demo.image.TableImage`` (``rows``,
    ``columns``, ``column_types``, ``in``), in the decoder's own types, so that they can
    be compared with PostgreSQL's rows (``demo.compare_with_truth``)."""

    def __init__(self, target, catalog, binary_unknown=False):
        self.target = target
        self.catalog = catalog
        self.binary_unknown = binary_unknown
        self._cache: dict = {}

    def _schema(self, name) -> pa.Schema:
        last = sorted(self.catalog.by_name(name), key=lambda v: v.version)[-1]
        return pa.schema([pa.field(c.name, ct.arrow_type(self.binary_unknown))
                          for c, ct in zip(last.columns, last.column_types)])

    def _load(self, name):
        if name not in self._cache:
            self._cache[name] = snapshot_rows(self.target, name, self._schema(name))
        return self._cache[name]

    def __contains__(self, name):
        return snapshot_state(self.target, name) is not None and bool(self.catalog.by_name(name))

    def rows(self, name):
        return self._load(name)[1]

    def columns(self, name):
        return self._load(name)[0]

    def column_types(self, name):
        return {f.name: f.type for f in self._schema(name)}


# ======================================================================================
# change events -> typed rows of one table
# ======================================================================================

def _is_events(df) -> bool:
    return {"op", "relid", "after", "before"}.issubset(df.columns)


def events_to_typed(events, catalog, table: str, binary_unknown: bool | None = None):
    """The typed DataFrame of ``table`` (as ``decode(df, catalog, table=...)`` gives it)
    from a change-event DataFrame, whose values are PostgreSQL text in
    ``map<string,string>``: each value is parsed with the type of its column in the
    table's latest version that has it (the type the snapshot holds), by the decoder's
    own text parsers. ``_version`` is the latest version whose column names are the
    event's (after-image names plus unchanged-TOAST names).

    Types the decoder does not know: from a text capture their values are PostgreSQL's
    text (string columns); from a binary capture (``binary_unknown``, by default the
    catalog's ``binary``) the events hold the sent bytes as ``\\x`` hex, which are
    turned back into those bytes (binary columns, as ``decode(..., table=)`` gives)."""
    from .decode import relation_versions, spark_schema, typed_schema

    versions = relation_versions(catalog, table)
    if binary_unknown is None:
        binary_unknown = bool(getattr(catalog, "binary", False))
    schema = typed_schema(catalog, table, binary_unknown)
    out_schema = spark_schema(schema, table, catalog)
    relids = sorted({v.relid for v in versions})
    fn = _events_typed_fn(RelationCatalog.to_json(catalog), table, binary_unknown)
    from pyspark.sql import functions as F

    sel = events.where(F.col("relid").isin(relids))
    out = sel.mapInArrow(fn, out_schema)
    return out.select(*[out[f.name].alias(f.name, metadata=f.metadata) if f.metadata else out[f.name]
                        for f in out_schema.fields])


def _events_typed_fn(cat_json, table, binary_unknown):
    def run(batches):
        cat = RelationCatalog.from_json(cat_json)
        for b in batches:
            if b.num_rows:
                yield events_batch_to_typed(b, cat, table, binary_unknown)
    return run


def events_batch_to_typed(batch, catalog, table, binary_unknown: bool = False,
                          spark: bool = True) -> pa.RecordBatch:
    """One Arrow batch of change events (one table's) -> typed rows (``events_to_typed``)."""
    import numpy as np

    from .. import Value, _impl
    from .decode import relation_versions, typed_schema
    from .types import spark_arrow_type, to_spark_array

    versions = relation_versions(catalog, table)
    schema = typed_schema(catalog, table, binary_unknown)
    col_type = {}
    for v in versions:
        for c, ct in zip(v.columns, v.column_types):
            col_type[c.name] = ct
    by_names = [(v.version, set(v.column_names)) for v in reversed(versions)]
    data_fields = [f for f in schema if not f.name.startswith("_")]
    n = batch.num_rows
    col = {name: batch.column(name) for name in batch.schema.names}
    ops = col["op"].to_pylist()
    befores = col["before"].to_pylist()
    afters = col["after"].to_pylist()
    toasts = col["unchanged_toast"].to_pylist()
    after_maps = [dict(a) if a is not None else None for a in afters]
    before_maps = [dict(b) if b is not None else None for b in befores]
    new_maps = [before_maps[i] if ops[i] == "d" else (after_maps[i] if ops[i] != "t" else None)
                for i in range(n)]
    specials: list[list] = [[] for _ in range(n)]
    before_specials: list[list] = [[] for _ in range(n)]
    version_ids = np.full(n, versions[-1].version, np.int32)
    for i in range(n):
        if ops[i] in ("c", "r", "u"):
            names = set(after_maps[i] or ()) | set(toasts[i] or ())
            v = next((vid for vid, cols in by_names if cols == names), None)
            if v is None:
                raise ValueError(f"{table}: an event's columns {sorted(names)} match no "
                                 "version of the relation in the catalog")
            version_ids[i] = v

    def parse(name, maps, rows, out_specials, prefix):
        ct = col_type[name]
        sent_binary = binary_unknown and (ct.kind == K_UNKNOWN or (ct.kind == K_ARRAY and
                                                                  ct.elem_kind == K_UNKNOWN))
        vals: list = []
        for r in rows:
            m = maps[r]
            s = None if m is None else m.get(name)
            if s is None:
                vals.append(None)
            elif sent_binary and s.startswith("\\x"):
                vals.append(Value("b", bytes.fromhex(s[2:])))
            else:
                vals.append(Value("t", s.encode("utf-8", "surrogateescape")))
        arr, special_idx = _impl.parse_values(col_type[name], vals)
        for j in special_idx:
            out_specials[rows[j]].append((prefix + name, maps[rows[j]][name]))
        return arr

    all_rows = list(range(n))
    arrays = {}
    for f in data_fields:
        a = parse(f.name, new_maps, all_rows, specials, "")
        arrays[f.name] = a if a.type == f.type else a.cast(f.type)
    with_before = [i for i in range(n) if before_maps[i] is not None]
    if with_before and data_fields:
        children = []
        for f in data_fields:
            a = parse(f.name, before_maps, with_before, before_specials, "_before.")
            children.append(a if a.type == f.type else a.cast(f.type))
        dense = pa.StructArray.from_arrays(children, fields=data_fields)
        idx = np.full(n, -1, np.int64)
        idx[with_before] = np.arange(len(with_before))
        before = dense.take(pa.array(idx, mask=idx < 0))
    else:
        before = pa.nulls(n, pa.struct(data_fields))
    ts = col["commit_ts"]
    ts = ts.cast(pa.timestamp("us", tz="UTC")) if ts.type != pa.timestamp("us", tz="UTC") else ts
    meta = {"_op": col["op"], "_lsn": col["lsn"], "_commit_lsn": col["commit_lsn"],
            "_commit_ts": ts, "_xid": col["xid"], "_seq": col["seq"], "_origin": col["origin"],
            "_before": before, "_before_kind": col["before_kind"],
            "_unchanged_toast": col["unchanged_toast"],
            "_special": pa.array([(b + s) or None for b, s in zip(before_specials, specials)],
                                 pa.map_(pa.string(), pa.string())),
            "_version": pa.array(version_ids, pa.int32())}
    out = []
    for f in schema:
        a = arrays[f.name] if f.name in arrays else meta[f.name]
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        if a.type != f.type:
            a = a.cast(f.type)
        out.append(to_spark_array(a) if spark else a)
    if not spark:
        return pa.RecordBatch.from_arrays(out, schema=schema)
    return pa.RecordBatch.from_arrays(out, schema=pa.schema(
        [pa.field(f.name, spark_arrow_type(f.type), f.nullable) for f in schema]))
