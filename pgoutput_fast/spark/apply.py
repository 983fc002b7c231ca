"""Apply change DataFrames to Delta Lake tables: reduced on Spark, merged exactly once.

The input is a typed DataFrame of one table (``decode(df, catalog, table=...)``) or the
change-event DataFrame of any tables (``decode(df, catalog)``) with ``catalog=``: its
text values are parsed into each table's typed columns first (``events_to_typed``).

Each table is one Delta table, ``TARGET/schema.table`` (a local path, or an object-store
URI with ``storage_options`` as delta-rs takes them). ``apply_changes``:

1. reads the table's applied position from its Delta log (``pgoutput_fast.delta``) and
   keeps the changes after it;
2. on Spark's executors: turns each change into events at its keys, repartitions them
   by key and reduces each key to its final state (``pgoutput_fast.delta.reduce``: the
   last change wins, deletes, key changes, unchanged TOAST from earlier in the batch;
   REPLICA IDENTITY FULL rows counted by value);
3. brings the reduced batch, one row per touched key, to the driver as Arrow
   (``DataFrame.toArrow``: memory in proportion to the keys a batch touches, not to the
   table) and merges it into the Delta table in one commit that also records the
   batch's position (``pgoutput_fast.delta.commit``): only the data files holding the
   touched keys are rewritten, and a batch applied again is a no-op.

The driver's memory is bounded by ``max_batch_changes``: a table with more changes
after its position than that is applied in consecutive parts, each an ordinary batch
(steps 2-3) with its own commit and position. Parts end at a transaction's end (whole
transactions packed in commit order), so a reader of the Delta table between two parts
sees the table as PostgreSQL had it after some transaction; only a transaction with more
changes of this one table than the limit is cut inside (at quantiles of its ``_seq``),
and a reader may then see part of it. A crash between parts loses nothing and doubles
nothing: the next run starts after the last part's recorded position.

Merge semantics are PostgreSQL's apply worker's; see ``pgoutput_fast.delta``.
"""

from __future__ import annotations

import contextlib
import pyarrow as pa

from ..catalog import RelationCatalog
from ..delta import ApplyError
from ..types import K_ARRAY, K_BYTEA, K_UNKNOWN, ColumnType

__all__ = ["apply_changes", "events_to_typed", "ApplyError", "DeltaImage", "read_table"]

_META = "pgoutput_fast"


def _table_meta(df) -> dict:
    return (df.schema["_op"].metadata or {}).get(_META, {})


def DeltaImage(target, catalog, binary_unknown=False, storage_options=None):
    """``pgoutput_fast.delta.DeltaImage`` (tables under ``target`` as rows to compare)."""
    from ..delta import DeltaImage as _Image

    return _Image(target, catalog, binary_unknown, storage_options)


def read_table(target, table, storage_options=None):
    """``pgoutput_fast.delta.read_table``: a Delta table's current rows as Arrow."""
    from ..delta import read_table as _read

    return _read(target, table, storage_options)


def apply_changes(changes, target, keys=None, *, column_defaults: dict | None = None,
                  table: str | None = None, catalog=None, storage_options: dict | None = None,
                  change_data_feed: bool = False, renames: dict | None = None,
                  max_batch_changes: int | None = None, backfill: int | None = None):
    """Merge changes into the Delta tables under ``target`` (module doc).

    ``changes`` is either

    * a typed DataFrame of one table (``decode(df, catalog, table=...)``): returns the
      ``BatchResult`` of that table; ``column_defaults`` is ``{column: value}`` (the
      DEFAULT of a column added by ALTER TABLE: PostgreSQL gives it to the rows that
      predate it, the stream never says); or
    * the change-event DataFrame (``decode(df, catalog)``, any tables): needs
      ``catalog`` (types and keys); each table of the catalog (or only ``table``) is
      converted with ``events_to_typed`` and applied as above. Returns
      ``{table: BatchResult}``; ``column_defaults`` is ``{table: {column: value}}``. A
      table that fails does not stop the others; ``ApplyError`` then says which
      committed and which did not.

    ``change_data_feed`` creates new tables with Delta's change data feed on
    (``delta.enableChangeDataFeed``: inserts, update pre-/post-images and deletes for
    downstream readers). ``renames`` (``{column: new}``, for events ``{table: {...}}``)
    settles a change of the column list that may be a RENAME COLUMN (the error that
    stops on one says so).

    ``max_batch_changes`` (default ``MAX_BATCH_CHANGES``, one million) bounds what one
    commit of a table takes: more changes after the table's position are applied in
    consecutive parts of whole transactions (module doc), each its own commit with its
    own position. The result then sums the parts (``parts``: how many committed).
    ``backfill``: the typed DataFrame is a backfill's (``pgoutput-fast snapshot``)
    taken at that hand-over point: applied by ``pgoutput_fast.delta.backfill_needed``'s
    rule, it replaces the table's rows, in one commit whatever its size (a reader never
    sees a table half backfilled).
    """
    if _is_events(changes):
        if backfill is not None:
            raise ValueError("apply_changes(backfill=) takes a typed DataFrame of one table")
        if catalog is None:
            raise ValueError("apply_changes of change events needs catalog= (build_catalog): "
                             "the events hold text values, the tables typed columns")
        from .decode import tables_of

        names = [table] if table else tables_of(catalog)
        defaults = column_defaults or {}
        from pyspark import StorageLevel

        results, errors = {}, {}
        with _uncompressed_cache(changes.sparkSession):
            events = changes.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                for name in names:
                    try:
                        results[name] = _apply_typed(
                            events_to_typed(events, catalog, name), target, keys,
                            column_defaults=defaults.get(name), storage_options=storage_options,
                            change_data_feed=change_data_feed,
                            renames=(renames or {}).get(name),
                            max_batch_changes=max_batch_changes)
                    except Exception as exc:  # reported with the others' positions
                        errors[name] = exc
            finally:
                events.unpersist()
        if errors:
            raise ApplyError(results, errors) from next(iter(errors.values()))
        return results
    return _apply_typed(changes, target, keys, column_defaults=column_defaults, table=table,
                        storage_options=storage_options, change_data_feed=change_data_feed,
                        renames=renames, max_batch_changes=max_batch_changes,
                        backfill=backfill)


def _position_filter(df, position):
    from pyspark.sql import functions as F

    if position is None:
        return df
    c0, s0 = position
    return df.where((F.col("_commit_lsn") > c0) |
                    ((F.col("_commit_lsn") == c0) & (F.col("_seq") > s0)))


def _renames(df, table, dt, used: list, columns: list, renames: dict):
    """Renames along the versions the batch uses (``[(version, column names)]``), from
    the Delta table's last columns (``pgoutput_fast.delta.commit.check_renames``):
    the rows of older versions get the column under its latest name; returns
    ``(df, columns, {table column: new name})``."""
    from pyspark.sql import functions as F

    from ..delta.commit import applied_columns, check_renames

    renamed: dict = {}
    prev = applied_columns(dt)
    for _, cols in used:
        for old, new in check_renames(table, prev, cols, renames).items():
            first = next((k for k, v in renamed.items() if v == old), old)
            renamed[first] = new
        prev = cols
    # within the batch: version i's column under the name of the last version
    final_name: dict = {}
    for i in range(len(used) - 2, -1, -1):
        step = check_renames(table, used[i][1], used[i + 1][1], renames)
        later = final_name.get(used[i + 1][0], {})
        final_name[used[i][0]] = {c: later.get(step.get(c, c), step.get(c, c))
                                  for c in used[i][1]
                                  if later.get(step.get(c, c), step.get(c, c)) != c}
    for v, mapping in final_name.items():
        for old, new in mapping.items():
            if old in df.columns and new in df.columns:
                mine = F.col("_version") == v
                df = df.withColumn(new, F.when(mine, F.col(old)).otherwise(F.col(new)))
                df = df.withColumn("_unchanged_toast", F.when(
                    mine, F.transform("_unchanged_toast",
                                      lambda x: F.when(x == old, F.lit(new)).otherwise(x)))
                    .otherwise(F.col("_unchanged_toast")))
    gone = {old for m in final_name.values() for old in m} | set(renamed)
    last = used[-1][1] if used else columns
    columns = [c for c in columns if c not in gone or c in last]
    return df, columns, renamed


#: the changes of one table one Delta commit takes at most (``max_batch_changes``)
MAX_BATCH_CHANGES = 1_000_000
_MAX_SEQ = 2 ** 63 - 1


def _apply_typed(changes, target, keys=None, *, column_defaults: dict | None = None,
                 table: str | None = None, storage_options: dict | None = None,
                 change_data_feed: bool = False, renames: dict | None = None,
                 max_batch_changes: int | None = None, backfill: int | None = None):
    from pyspark import StorageLevel

    from ..delta import applied_position, table_uri
    from ..delta.commit import open_table

    meta = _table_meta(changes)
    table = table or meta.get("table")
    if not table:
        raise ValueError("apply_changes needs a typed DataFrame from decode(..., table=...) "
                         "(or table=)")
    limit = MAX_BATCH_CHANGES if max_batch_changes is None else int(max_batch_changes)
    if limit < 1:
        raise ValueError(f"max_batch_changes={max_batch_changes!r}: must be at least 1")
    key_cols = list(keys) if keys is not None else list(meta.get("key_columns", []))
    columns = list(meta.get("columns") or [c for c in changes.columns if not c.startswith("_")])
    columns += [c for c in changes.columns if not c.startswith("_") and c not in columns]
    uri = table_uri(target, table)
    dt = open_table(uri, storage_options)
    position = applied_position(dt)
    if backfill is not None:
        from ..delta import backfill_needed

        if not backfill_needed(dt, table, backfill):
            from ..delta import BatchResult

            return BatchResult(table=table, uri=uri, changes=0, skipped=True,
                               applied=list(position) if position else None,
                               version=dt.version(), missing=0, inserted=0, updated=0,
                               deleted=0, files_added=0, files_removed=0,
                               backfill=int(backfill))
        position = None          # its rows, all of them, replace the table's
    part = dict(meta=meta, table=table, uri=uri, keys=key_cols, columns=columns,
                column_defaults=column_defaults, storage_options=storage_options,
                change_data_feed=change_data_feed, renames=renames, backfill=backfill)

    spark = changes.sparkSession
    with _uncompressed_cache(spark):
        ch = _position_filter(changes, position).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n = ch.count()
            if n <= limit or backfill is not None:
                return _apply_part(ch, dt, position, **part)
            # over the limit: consecutive parts, each an ordinary batch with its own
            # commit and position (module doc), cut at transaction ends where it can
            results: list = []
            for hi in _part_bounds(ch, limit):
                if results:     # the position the last part committed (or a rival's)
                    dt = open_table(uri, storage_options)
                    position = applied_position(dt)
                body = _position_upto(_position_filter(ch, position), hi)
                results.append(_apply_part(body, dt, position, **part))
            return _combine(results)
        finally:
            ch.unpersist()


def _apply_part(ch, dt, position, *, meta, table, uri, keys, columns, column_defaults,
                storage_options, change_data_feed, renames, backfill):
    """One batch (``ch``: the changes after ``position``) -> one Delta commit."""
    from pyspark.sql import functions as F

    from ..delta import BatchResult, commit_batch, table_mode

    replident = meta.get("replident", "d")
    ordered = {int(k): list(v) for k, v in (meta.get("versions") or {}).items()}
    versions = {k: set(v) for k, v in ordered.items()}
    pos = F.struct(F.col("_commit_lsn").alias("c"), F.col("_seq").alias("s"))
    summary = ch.agg(F.count(F.lit(1)).alias("n"), F.max(pos).alias("last"),
                     F.max(F.when(F.col("_op") == "t", pos)).alias("trunc"),
                     F.sum(F.when(F.col("_op").isin("u", "d"), 1).otherwise(0))
                     .alias("ud"),
                     F.collect_set("_version").alias("versions")).collect()[0]
    if summary["n"] == 0:
        return BatchResult(table=table, uri=uri, changes=0, skipped=True,
                           applied=list(position) if position else None,
                           version=dt.version() if dt is not None else None,
                           missing=0, inserted=0, updated=0, deleted=0,
                           files_added=0, files_removed=0, parts=0)
    last = (int(summary["last"]["c"]), int(summary["last"]["s"]))
    trunc = summary["trunc"]
    used = sorted(int(v) for v in summary["versions"])
    if backfill is not None and (trunc is None or last[0] >= backfill):
        from ..delta import DeltaApplyError

        raise DeltaApplyError(f"{table}: not a backfill taken at {backfill} (no "
                              "Truncate first, or changes at or past its point): "
                              "nothing applied")
    body, columns, renamed = _renames(ch, table, dt if backfill is None else None,
                                      [(v, ordered[v]) for v in used if v in ordered],
                                      list(columns), dict(renames or {}))
    if trunc is not None:
        body = _position_filter(body, (trunc["c"], trunc["s"]))
    body = body.where(F.col("_op") != "t")
    mode = table_mode(replident, keys)
    if mode == "append" and summary["ud"]:
        from ..delta import DeltaApplyError

        raise DeltaApplyError(f"{table}: updates or deletes in a table without a "
                              "replica identity (PostgreSQL refuses them): pass keys=")
    final, carries = _reduce_on_spark(body, mode, columns, keys, versions,
                                      dict(column_defaults or {}))
    config = {"delta.enableChangeDataFeed": "true"} if change_data_feed else None
    result = commit_batch(dt, uri, table, mode=mode, keys=keys, columns=columns,
                          final=final, carries=carries, truncate=trunc is not None,
                          position=last, changes=int(summary["n"]),
                          storage_options=storage_options, configuration=config,
                          column_defaults=column_defaults, renamed=renamed,
                          backfill=backfill)
    result["parts"] = 1
    return result


def _part_bounds(ch, limit: int) -> list:
    """Upper positions ``(commit_lsn, seq)`` of consecutive parts of at most about
    ``limit`` changes each: whole transactions packed greedily in commit order; a
    transaction of more than ``limit`` changes of this table alone is cut inside, at
    approximate quantiles of its ``_seq`` (Spark's ``approxQuantile``)."""
    import numpy as np

    from pyspark.sql import functions as F

    per = _to_arrow(ch.groupBy("_commit_lsn").agg(F.count(F.lit(1)).alias("n")))
    lsn = per.column("_commit_lsn").to_numpy()
    cnt = per.column("n").to_numpy()
    order = np.argsort(lsn, kind="stable")
    lsn, cnt = lsn[order], cnt[order]
    cum = np.cumsum(cnt)
    bounds: list = []
    i, n_tx = 0, len(lsn)
    while i < n_tx:
        if cnt[i] > limit:
            pieces = -(-int(cnt[i]) // limit)
            probs = [k / pieces for k in range(1, pieces)]
            cuts = ch.where(F.col("_commit_lsn") == int(lsn[i])).approxQuantile(
                "_seq", probs, 1.0 / (pieces * 50))
            for q in sorted(set(int(q) for q in cuts)):
                bounds.append((int(lsn[i]), q))
            bounds.append((int(lsn[i]), _MAX_SEQ))
            i += 1
            continue
        base = cum[i] - cnt[i]
        j = max(int(np.searchsorted(cum, base + limit, side="right")), i + 1)
        bounds.append((int(lsn[j - 1]), _MAX_SEQ))
        i = j
    return bounds


def _position_upto(df, position):
    """The changes at or before ``position``."""
    from pyspark.sql import functions as F

    c1, s1 = position
    return df.where((F.col("_commit_lsn") < c1) |
                    ((F.col("_commit_lsn") == c1) & (F.col("_seq") <= s1)))


def _combine(results: list):
    """The ``BatchResult`` of a batch applied in parts: the sums, the last position and
    version, and the largest part that reached a commit (``reduced_rows`` /
    ``reduced_bytes``: what the driver held at once)."""
    from ..delta import BatchResult

    done = [r for r in results if not r["skipped"]]
    out = BatchResult(results[-1])
    for k in ("changes", "inserted", "updated", "deleted", "missing", "files_added",
              "files_removed"):
        out[k] = sum(r.get(k, 0) for r in results)
    out["parts"] = len(done)
    out["skipped"] = not done
    if done:
        out["applied"] = done[-1]["applied"]
        out["version"] = done[-1]["version"]
        out["reduced_rows"] = max(r.get("reduced_rows", 0) for r in done)
        out["reduced_bytes"] = max(r.get("reduced_bytes", 0) for r in done)
    return out


def _to_arrow(df) -> pa.Table:
    """A (small) DataFrame on the driver as Arrow."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    return pa.Table.from_batches(df._collect_as_arrow())


def _spark_struct(schema: pa.Schema):
    from ..storage_types import spark_schema_ddl

    return spark_schema_ddl(schema)


def _reduce_on_spark(body, mode, columns, keys, versions, defaults):
    """The reduced batch (``pgoutput_fast.delta.reduce``) computed on the executors:
    events by key, repartitioned by key, each partition reduced; then on the driver."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from ..delta import reduce as R

    in_schema = to_arrow_schema(body.schema, timezone="UTC")
    data_cols = list(columns)
    lacking = {c: sorted(v for v, cols in versions.items() if c not in cols)
               for c in defaults} if versions else {}

    def prepare(b: pa.RecordBatch) -> pa.Table:
        t = _conform_types(pa.Table.from_batches([b]), in_schema)
        for c, value in defaults.items():
            if lacking.get(c) and c in t.column_names:
                import pyarrow.compute as pc

                old = pc.is_in(t.column("_version"), pa.array(lacking[c], pa.int32()))
                t = t.set_column(t.schema.get_field_index(c), c,
                                 pc.if_else(old, pa.scalar(value).cast(t.schema.field(c).type),
                                            t.column(c)))
        return t

    if mode == "full":
        ev_schema = R.full_events(in_schema.empty_table(), data_cols).schema
        out_schema = ev_schema
        part_by = ["_row_hash"]

        def events(batches):
            for b in batches:
                if b.num_rows:
                    yield from R.full_events(prepare(b), data_cols).to_batches()

        def reduce(batches):
            t = _gather(batches, ev_schema)
            yield from R.reduce_full(t, data_cols).to_batches()
    elif mode == "key":
        ev_schema = R.change_events(in_schema.empty_table(), data_cols, keys).schema
        out_schema = R.output_schema(ev_schema, data_cols).append(pa.field("_part", pa.string()))
        part_by = keys

        def events(batches):
            for b in batches:
                if b.num_rows:
                    yield from R.change_events(prepare(b), data_cols, keys).to_batches()

        def reduce(batches):
            t = _gather(batches, ev_schema)
            final, carries = R.reduce_events(t, data_cols, keys)
            for part, tab in (("f", final), ("c", carries)):
                if tab.num_rows:
                    tab = tab.append_column("_part", pa.array([part] * tab.num_rows))
                    yield from tab.to_batches()
    else:
        cols = data_cols + ["_commit_lsn", "_seq", "_special"]
        return _to_arrow(body.select(*cols)), None

    ev_df = body.mapInArrow(events, _spark_struct(ev_schema))
    red = ev_df.repartition(*part_by).mapInArrow(reduce, _spark_struct(out_schema))
    got = _conform_types(_to_arrow(red), out_schema)
    if mode == "full":
        return got, None
    import pyarrow.compute as pc

    final = got.filter(pc.equal(got.column("_part"), "f")).drop_columns(["_part"])
    carries = got.filter(pc.equal(got.column("_part"), "c")).drop_columns(["_part"])
    return final, carries


def _gather(batches, schema: pa.Schema) -> pa.Table:
    """A partition's batches as one table of ``schema`` (Spark's Arrow types may differ
    in time zone or string width)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return schema.empty_table()
    return _conform_types(pa.Table.from_batches(batches), schema)


def _conform_types(t: pa.Table, schema: pa.Schema) -> pa.Table:
    if t.schema.equals(schema):
        return t
    cols = []
    for f in schema:
        c = t.column(f.name)
        cols.append(c.cast(f.type) if c.type != f.type else c)
    return pa.Table.from_arrays(cols, schema=schema)


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
        sent_binary = binary_unknown and ct.kind == K_UNKNOWN
        # an array of an unknown type from a binary capture: the event text is an array
        # of its elements' send bytes in hex, {"\\x6869",NULL} (src/format_text.pxi),
        # which bytea[]'s text form reads back as the list<binary> the typed table has
        parse_type = ct
        if binary_unknown and ct.kind == K_ARRAY and ct.elem_kind == K_UNKNOWN:
            parse_type = ColumnType(K_ARRAY, elem_kind=K_BYTEA)
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
        arr, special_idx = _impl.parse_values(parse_type, vals)
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
