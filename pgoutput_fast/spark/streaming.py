"""Structured Streaming over a growing capture directory: decode + apply per micro-batch.

    query = start_stream(spark, "/data/cdc", "/data/tables",
                         checkpoint="/data/tables/_stream_checkpoint")
    query.awaitTermination()

The stream source is Spark's file source over the directory's ``*.parquet`` files. It
only says *that* new segments arrived, and its checkpoint makes Spark remember which.
``foreachBatch`` then works on segment groups, not on the batch's rows.
``segment_groups`` of the durable segments (those ``checkpoint.json`` lists), minus the
groups already done, gives the closed groups. Those are read in order, the catalog is
extended with their Relation/Type messages, and every table is decoded and applied.
The progress (the last segment done and the catalog) is kept in
``OUT/_stream_state.json``, replaced atomically after the tables' commits (locally a
rename; on an object store one PUT of the whole object). ``segments`` and ``OUT`` may be
object-store URIs (``storage_options``, as ``run_pipeline``).

Exactly once: a batch that crashes after some tables committed but before the state
file was replaced is run again, and each Delta table's recorded position skips what it
already holds. A group that is still open waits for a later batch, which only a new segment
triggers. The capture writes one at least every ``--segment-seconds`` while data flows.
"""

from __future__ import annotations

import json
import os

__all__ = ["start_stream", "process_new_segments", "STATE_FILE"]

STATE_FILE = "_stream_state.json"


def _load(out, storage_options=None):
    from ..storage import Store

    store, where = Store.of(out, storage_options)
    path = store.join(where if not store.local else os.fspath(out), STATE_FILE)
    try:
        return json.loads(store.read_bytes(path))
    except FileNotFoundError:
        return {"last_segment": 0, "catalog": None}


def _save(out, state, storage_options=None):
    from ..storage import Store

    store, where = Store.of(out, storage_options)
    path = store.join(where if not store.local else os.fspath(out), STATE_FILE)
    store.write_bytes(path, json.dumps(state).encode())


def process_new_segments(spark, segments, out, *, column_defaults=None, storage_options=None,
                         filesystem=None, segments_storage_options=None,
                         max_batch_changes=None) -> dict:
    """Decode and apply the closed segment groups not done yet (one micro-batch).
    ``segments`` and ``out`` may be URIs (``s3://...``): one ``storage_options`` (delta-rs's
    keys) serves both, as in ``run_pipeline``; ``segments_storage_options`` or
    ``filesystem`` replace it for the segments. The state file lives in ``out``.
    ``max_batch_changes`` bounds each table's commits (``apply_changes``)."""
    seg_opts = segments_storage_options if segments_storage_options is not None else storage_options
    from .apply import ApplyError, apply_changes
    from .decode import (SegmentCatalog, task_slots, build_catalog, read_segments,
                         segment_groups, table_source, tables_of)

    state = _load(out, storage_options)
    last = int(state["last_segment"])

    def segno(p):
        return int(os.path.basename(p).split(".")[0])

    groups = [g for g in segment_groups(segments, storage_options=seg_opts,
                                        max_pieces=task_slots(spark),
                                        filesystem=filesystem)
              if segno(g["paths"][0]) > last]
    if not groups:
        return {"groups": 0, "changes": 0}
    df = read_segments(spark, segments, groups=groups, storage_options=seg_opts,
                       filesystem=filesystem)
    new = build_catalog(df)
    old = SegmentCatalog.from_dict(state["catalog"]) if state["catalog"] else SegmentCatalog()
    rows = [(o, lsn, data) for o, lsn, data in old.control + new.control]
    catalog = SegmentCatalog.from_control(rows, binary=new.binary or old.binary)
    changes = 0
    results, errors = {}, {}
    decoded = table_source(df, catalog, tables_of(catalog))   # (one decode, from 8 tables)
    try:
        for name in decoded.tables:
            try:
                r = apply_changes(decoded.table(name), out,
                                  column_defaults=(column_defaults or {}).get(name),
                                  storage_options=storage_options,
                                  max_batch_changes=max_batch_changes)
            except Exception as exc:  # the others still apply; the batch then fails as a whole
                errors[name] = exc
                continue
            results[name] = r
            changes += r["changes"]
    finally:
        decoded.unpersist()
    if errors:
        raise ApplyError(results, errors) from next(iter(errors.values()))
    _save(out, {"last_segment": segno(groups[-1]["paths"][-1]), "catalog": catalog.to_dict()},
          storage_options)
    return {"groups": len(groups), "changes": changes}


def start_stream(spark, segments, out, *, checkpoint, trigger_seconds=None, available_now=False,
                 column_defaults=None, storage_options=None, segments_storage_options=None,
                 max_batch_changes=None):
    """Start the streaming query (returns the ``StreamingQuery``).

    The trigger is Spark's file source over ``segments``: on an object store Spark must
    reach it itself (``s3a://`` with the cluster's Hadoop S3 connector, as on EMR or
    Databricks); each micro-batch then reads the segments and writes the tables through
    pyarrow and delta-rs with ``storage_options`` (``process_new_segments``)."""
    from ..capture.segments import SEGMENT_SCHEMA
    from pyspark.sql.pandas.types import from_arrow_schema

    src = (spark.readStream.schema(from_arrow_schema(SEGMENT_SCHEMA))
           .option("pathGlobFilter", "*.parquet").parquet(segments))

    def batch(_df, _batch_id):
        process_new_segments(spark, segments, out, column_defaults=column_defaults,
                             storage_options=storage_options,
                             segments_storage_options=segments_storage_options,
                             max_batch_changes=max_batch_changes)

    w = src.writeStream.foreachBatch(batch).option("checkpointLocation", checkpoint)
    if available_now:
        w = w.trigger(availableNow=True)
    elif trigger_seconds:
        w = w.trigger(processingTime=f"{trigger_seconds} seconds")
    return w.start()
