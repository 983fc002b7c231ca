"""PySpark integration: captured segments -> decoded changes -> table snapshots.

    from pgoutput_fast import spark as pgs

    df = pgs.read_segments(spark, "/data/cdc")        # lsn, data, ordinal, segment
    catalog = pgs.build_catalog(df)                    # RelationCatalog (+ R/Y by ordinal)
    events = pgs.decode(df, catalog)                   # change-event DataFrame
    orders = pgs.decode(df, catalog, table="public.orders")   # typed DataFrame
    pgs.apply_changes(orders, "/data/snapshots")       # Parquet snapshot, LSN-guarded

See ``decode`` (segment groups, catalogs per task, schema versions), ``types`` (Arrow
types Spark cannot hold and how they are mapped), ``apply`` (snapshots) and
``streaming`` (Structured Streaming over a growing segment directory).
"""

from .decode import (SegmentCatalog, build_catalog, decode, decode_udf, get_spark,
                     read_segments, segment_groups, tables_of, typed_schema)
from .apply import ApplyResult, SnapshotImage, apply_changes, read_snapshot, snapshot_state
from .streaming import process_new_segments, start_stream
from .views import to_debezium, to_delta_cdf
from .types import from_spark_array, spark_arrow_type, to_spark_array

__all__ = ["read_segments", "build_catalog", "decode", "decode_udf", "segment_groups",
           "SegmentCatalog", "typed_schema", "tables_of", "get_spark", "spark_arrow_type",
           "to_spark_array", "from_spark_array", "apply_changes", "read_snapshot", "snapshot_state",
           "SnapshotImage", "ApplyResult", "start_stream", "process_new_segments", "to_debezium",
           "to_delta_cdf"]
