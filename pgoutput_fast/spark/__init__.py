"""PySpark integration: captured segments -> decoded changes -> Delta Lake tables.

    from pgoutput_fast import spark as pgs

    df = pgs.read_segments(spark, "/data/cdc")        # lsn, data, ordinal, segment
    catalog = pgs.build_catalog(df)                    # RelationCatalog (+ R/Y by ordinal)
    events = pgs.decode(df, catalog)                   # change-event DataFrame
    orders = pgs.decode(df, catalog, table="public.orders")   # typed DataFrame
    pgs.apply_changes(orders, "/data/tables")          # Delta table, merged exactly once
    pgs.apply_changes(events, "/data/tables", catalog=catalog)      # every table

    # messages held one per row (with commit_lsn and a position), in any order:
    rc = pgs.row_catalog(rows, position="ordinal")
    rows.select(F.explode(pgs.decode_udf(rc)("data", "commit_lsn", "ordinal")))

See ``decode`` (segment groups, catalogs per task, schema versions), ``rows``
(``decode_udf``: one message per row, relation versions by commit position), ``types``
(Arrow types Spark cannot hold and how they are mapped), ``apply`` (Delta tables,
from typed or event input) and ``streaming`` (Structured Streaming over a growing segment
directory).
"""

from .decode import (DecodedTables, SegmentCatalog, build_catalog, decode, decode_tables,
                     get_spark, read_segments, segment_groups, tables_of, typed_schema)
from .rows import EVENT_FIELDS, RowCatalog, decode_rows, decode_udf, row_catalog
from .apply import ApplyError, DeltaImage, apply_changes, events_to_typed, read_table
from .streaming import process_new_segments, start_stream
from .views import to_debezium, to_delta_cdf
from .types import from_spark_array, spark_arrow_type, to_spark_array

__all__ = ["read_segments", "build_catalog", "decode", "decode_tables", "DecodedTables",
           "decode_udf", "decode_rows", "row_catalog",
           "RowCatalog", "EVENT_FIELDS", "segment_groups",
           "SegmentCatalog", "typed_schema", "tables_of", "get_spark", "spark_arrow_type",
           "to_spark_array", "from_spark_array", "apply_changes", "events_to_typed", "read_table",
           "DeltaImage", "ApplyError", "start_stream", "process_new_segments", "to_debezium",
           "to_delta_cdf"]
