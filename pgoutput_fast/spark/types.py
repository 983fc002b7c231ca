"""The storage mapping under its Spark names (``pgoutput_fast.storage_types``)."""

from ..storage_types import (INTERVAL_STRUCT, from_spark_array, spark_arrow_type,  # noqa: F401
                             spark_schema_ddl, to_spark_array)

__all__ = ["spark_arrow_type", "to_spark_array", "from_spark_array", "spark_schema_ddl",
           "INTERVAL_STRUCT"]
