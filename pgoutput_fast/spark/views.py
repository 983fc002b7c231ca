"""Other shapes of the change stream: Debezium envelopes and Delta Change Data Feed rows.

* ``to_debezium(events)``: one row per change with Debezium's envelope: ``before``,
  ``after`` (``map<string,string>`` of PostgreSQL text values), ``source`` (``lsn``,
  ``commit_lsn``, ``txId``, ``seq``, ``ts_ms``, ``schema``, ``table``, ``origin``), ``op``
  (``c``, ``u``, ``d``, ``t``) and ``ts_ms`` (the commit time).
* ``to_delta_cdf(df)``: Delta Lake's change data feed shape: the row's columns plus
  ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``, ``delete``),
  ``_commit_version`` (the commit LSN) and ``_commit_timestamp``. For a typed DataFrame
  the columns are the table's typed columns (the preimage comes from ``_before``, so it
  exists only when PostgreSQL sent an old key/row); for the change-event table they
  are ``schema``, ``table`` and ``data`` (``map<string,string>``). Truncates have no
  CDF row.
"""

from __future__ import annotations

__all__ = ["to_debezium", "to_delta_cdf"]


def to_debezium(events):
    from pyspark.sql import functions as F

    ts_ms = (F.unix_micros(F.col("commit_ts")) / 1000).cast("long")
    source = F.struct(F.col("lsn"), F.col("commit_lsn"), F.col("xid").alias("txId"), F.col("seq"),
                      ts_ms.alias("ts_ms"), F.col("schema"), F.col("table"), F.col("origin"))
    return events.select(F.col("before"), F.col("after"), source.alias("source"), F.col("op"),
                         ts_ms.alias("ts_ms"))


def to_delta_cdf(df):
    from pyspark.sql import functions as F

    meta = [F.col("_commit_lsn").alias("_commit_version"), F.col("_commit_ts").alias("_commit_timestamp")]
    if "after" in df.columns:  # the change-event table
        df = df.select(F.col("schema"), F.col("table"), F.col("before"), F.col("after"), F.col("op"),
                       F.col("commit_lsn").alias("_commit_lsn"), F.col("commit_ts").alias("_commit_ts"),
                       F.col("seq").alias("_seq"))
        post = F.when(F.col("op").isin("c", "r"), F.array(F.struct(F.col("after").alias("data"), F.lit("insert").alias("t"))))
        post = post.when(F.col("op") == "u", F.filter(F.array(
            F.struct(F.col("before").alias("data"), F.lit("update_preimage").alias("t")),
            F.struct(F.col("after").alias("data"), F.lit("update_postimage").alias("t"))),
            lambda x: x["data"].isNotNull()))
        post = post.when(F.col("op") == "d", F.array(F.struct(F.col("before").alias("data"), F.lit("delete").alias("t"))))
        ex = df.select("*", F.explode(post).alias("_x"))
        return ex.select(F.col("schema"), F.col("table"), F.col("_x")["data"].alias("data"),
                         F.col("_x")["t"].alias("_change_type"), *meta, F.col("_seq"))
    cols = [c for c in df.columns if not c.startswith("_")]
    new = F.struct(*[F.col(c) for c in cols])
    old = F.struct(*[F.col("_before")[c].alias(c) for c in cols]) if cols else F.struct(F.lit(None).alias("_"))
    images = (F.when(F.col("_op").isin("c", "r"), F.array(F.struct(new.alias("r"), F.lit("insert").alias("t"))))
              .when(F.col("_op") == "u", F.filter(F.array(
                  F.struct(F.when(F.col("_before").isNotNull(), old).alias("r"), F.lit("update_preimage").alias("t")),
                  F.struct(new.alias("r"), F.lit("update_postimage").alias("t"))), lambda x: x["r"].isNotNull()))
              .when(F.col("_op") == "d", F.array(F.struct(new.alias("r"), F.lit("delete").alias("t")))))
    ex = df.select("*", F.explode(images).alias("_x"))
    return ex.select(*[F.col("_x")["r"][c].alias(c) for c in cols], F.col("_x")["t"].alias("_change_type"),
                     *meta, F.col("_seq"))
