"""``pgoutput-fast pipeline``: segments -> Spark decode -> Delta Lake tables.

``run_pipeline(spark, segments, out)`` reads a capture directory (``read_segments``),
builds the catalog, decodes the typed changes of every table (in one pass kept while
the tables are applied, ``decode_tables``, from ``DECODE_ONCE_TABLES`` tables on; else
one ``decode(table=)`` per table) and merges each table's into
the Delta table ``out/<schema.table>`` (``apply_changes``). It is idempotent: run it
again on the same or a grown segment directory and only new changes are applied. A
table that fails does not stop the others; the run then ends with ``ApplyError``, which
names the tables committed (with their positions) and those not.

``segments`` and ``out`` may each be a local directory or a URI (``s3://bucket/cdc``,
``s3://bucket/tables``, ...). ``storage_options`` (delta-rs's keys: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...) serve both: the segment reader (``pgoutput_fast.storage``)
and the Delta tables, since both usually live in one account. When the segments live
elsewhere, ``segments_storage_options`` (or ``segments_filesystem``, a
``pyarrow.fs.FileSystem``) are used for them instead. Keys one side does not know are
ignored by it.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

__all__ = ["run_pipeline", "add_arguments", "run", "DESCRIPTION"]

DESCRIPTION = """\
Decodes a capture directory (pgoutput-fast capture) with Spark and merges the changes
into one Delta Lake table per table under --out (only the files holding the changed keys
are rewritten; each commit records its position, so re-running is safe).
"""


def _imports(batches):
    """Runs in a Python worker: unpickling this function there imports this package
    (and pyarrow, for the Arrow batches)."""
    yield from batches


def check_executors(spark) -> None:
    """One task, alone, that imports this package in an executor's Python: a node
    without it fails here with ``executor_setup_error``'s one line, before any work, and
    not in the middle of concurrent jobs whose cancelled tasks make Spark's Python
    daemon print its own tracebacks."""
    from .errors import executor_setup_error

    probe = spark.range(1, numPartitions=1)
    try:
        probe.mapInArrow(_imports, probe.schema).collect()
    except Exception as exc:
        known = executor_setup_error(exc)
        if known is not None:
            raise known from exc
        raise


def run_pipeline(spark, segments, out, *, tables=None, column_defaults=None, events_rate=False,
                 log=None, threads=4, storage_options=None, change_data_feed=False,
                 segments_storage_options=None, segments_filesystem=None,
                 max_batch_changes=None, backfills=()) -> dict:
    """Decode + apply every table (or ``tables``). Returns timings and per-table results.
    ``storage_options`` serve the segments and the tables, unless
    ``segments_storage_options`` or ``segments_filesystem`` are given (module doc).
    ``backfills``: backfill directories (``pgoutput-fast snapshot``) of this capture,
    applied first (``capture/backfill.py``, the hand-over rule): a backfilled table's
    rows are replaced by the backfill's, then the capture's changes at or after its
    point apply on top; a table whose backfill is refused is not applied further."""
    from .apply import ApplyError, apply_changes
    from .decode import (task_slots, build_catalog, decode, read_segments, segment_groups,
                         table_source, tables_of)

    say = log or (lambda *a: None)
    t0 = time.perf_counter()
    check_executors(spark)
    seg_opts = segments_storage_options if segments_storage_options is not None \
        else storage_options
    groups = segment_groups(segments, storage_options=seg_opts, filesystem=segments_filesystem,
                            max_pieces=task_slots(spark))
    df = read_segments(spark, segments, groups=groups, storage_options=seg_opts,
                       filesystem=segments_filesystem).cache()
    n_messages = df.count()
    catalog = build_catalog(df)
    t_read = time.perf_counter() - t0
    say(f"read {n_messages:,} messages in {sum(len(g['paths']) for g in groups)} segments, "
        f"{len(groups)} segment groups; catalog: {catalog!r} ({t_read:.1f} s)")
    res: dict = {"messages": n_messages, "groups": len(groups), "catalog": catalog,
                 "read_seconds": t_read, "tables": {}}
    if events_rate:
        t1 = time.perf_counter()
        ev = decode(df, catalog)
        ev.write.format("noop").mode("overwrite").save()
        res["events_seconds"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    errors: dict = {}
    res["backfills"] = {}
    for bf_dir in backfills or ():
        bf_res, bf_err = _apply_backfill(spark, bf_dir, segments, out, tables, column_defaults,
                                         storage_options, seg_opts, segments_filesystem,
                                         change_data_feed, say)
        res["backfills"].update(bf_res)
        errors.update(bf_err)

    names = [n for n in tables or tables_of(catalog) if n not in errors]
    # many tables: one decode for all, kept while they are applied (decode_tables; each
    # table's rows are read back from it); a few: decode(table=) each (table_source)
    decoded: Any = None
    t2 = time.perf_counter()
    if names:
        try:
            decoded = table_source(df, catalog, names)
        except Exception as failure:  # reported as every table's, as apply_changes' are
            errors.update((n, failure) for n in names)
            names = []
        else:
            if decoded.once:
                res["decode_seconds"] = time.perf_counter() - t2
                say(f"decoded {len(names)} tables in one pass ({res['decode_seconds']:.1f} s)")

    def one(name):
        try:
            typed = decoded.table(name)
            return name, apply_changes(typed, out,
                                       column_defaults=(column_defaults or {}).get(name),
                                       storage_options=storage_options,
                                       change_data_feed=change_data_feed,
                                       max_batch_changes=max_batch_changes), None
        except Exception as exc:  # reported below with the other tables' positions
            return name, None, exc

    # tables are independent: a few at a time keeps the cores busy between small jobs
    from concurrent.futures import ThreadPoolExecutor

    try:
        with ThreadPoolExecutor(max(1, threads)) as pool:
            done = list(pool.map(one, names))
    finally:
        if decoded is not None:
            decoded.unpersist()
    changes = 0
    for name, r, exc in done:
        if exc is not None:
            errors[name] = exc
            continue
        res["tables"][name] = r
        changes += r["changes"]
        say(f"{name}: {r['changes']:,} changes -> Delta version {r['version']}"
            + (" (nothing new)" if r["skipped"] else
               f" (+{r['inserted']:,} ~{r['updated']:,} -{r['deleted']:,} rows, "
               f"{r['files_added']} files written, {r['files_removed']} replaced"
               + (f", in {r['parts']} commits" if r.get("parts", 1) > 1 else "") + ")"))
    df.unpersist()
    if errors:
        from .errors import executor_setup_error

        for exc in errors.values():     # the executors cannot run any table: say that alone
            known = executor_setup_error(exc)
            if known is not None:
                raise known from exc
        raise ApplyError(res["tables"], errors) from next(iter(errors.values()))
    res["apply_seconds"] = time.perf_counter() - t1
    res["changes"] = changes
    return res


def _positive(text: str) -> int:
    try:
        n = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive whole number")
    return n


def _apply_backfill(spark, bf_dir, segments, out, tables, column_defaults, storage_options,
                    seg_opts, filesystem, change_data_feed, say):
    """One backfill directory, decoded on Spark, applied table by table."""
    from ..capture import load_state
    from ..capture.backfill import read_backfill
    from ..capture.errors import DirectoryRefused
    from ..lsn import format_lsn
    from .apply import apply_changes
    from .decode import build_catalog, read_segments, segment_groups, table_source, task_slots

    bf = read_backfill(bf_dir, storage_options=seg_opts, filesystem=filesystem)
    main = load_state(segments, storage_options=seg_opts, filesystem=filesystem)
    if main is not None and (main.system_identifier, main.database) != (bf.system_identifier,
                                                                       bf.database):
        raise DirectoryRefused(f"{bf_dir}: a backfill of database {bf.database!r} of server "
                               f"{bf.system_identifier}, the capture {segments} is of "
                               f"{main.database!r} of {main.system_identifier}: give a backfill "
                               "taken from the capture's database")
    if main is not None and bool((main.options or {}).get("binary")) != bf.binary:
        raise DirectoryRefused(f"{bf_dir}: taken in {'binary' if bf.binary else 'text'} mode, "
                               "the capture is not: take it again with the capture's mode "
                               "(pgoutput-fast snapshot --binary when capture has --binary)")
    names = [n for n in bf.tables if not tables or n in tables]
    results: dict = {}
    errors: dict = {}
    if not names:
        return results, errors
    groups = segment_groups(bf_dir, storage_options=seg_opts, filesystem=filesystem,
                            max_pieces=task_slots(spark))
    df = read_segments(spark, bf_dir, groups=groups, storage_options=seg_opts,
                       filesystem=filesystem).cache()
    try:
        catalog = build_catalog(df)
        decoded = table_source(df, catalog, names)
    except BaseException:
        df.unpersist()
        raise
    try:
        for name in names:
            try:
                r = apply_changes(decoded.table(name), out,
                                  column_defaults=(column_defaults or {}).get(name),
                                  storage_options=storage_options,
                                  change_data_feed=change_data_feed, backfill=bf.point)
            except Exception as exc:  # reported with the other tables
                errors[name] = exc
                continue
            results[name] = r
            say(f"{name}: backfill at {format_lsn(bf.point)} "
                + ("already applied" if r["skipped"] else
                   f"applied: {r['inserted']:,} rows -> Delta version {r['version']}"))
    finally:
        decoded.unpersist()
        df.unpersist()
    return results, errors


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--segments", required=True, metavar="DIR",
                   help="capture directory, local or a URI (s3://bucket/cdc, gs://, abfss://, "
                        "hdfs://)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory (or URI) of the Delta tables, one per table")
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE", default=[],
                   help="an object-store option for --segments and --out, as delta-rs takes "
                        "it (AWS_ENDPOINT_URL=..., AWS_REGION=..., repeatable); the standard "
                        "environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                        "AWS_ENDPOINT_URL, AWS_REGION, AWS_ALLOW_HTTP) are read too")
    p.add_argument("--change-data-feed", action="store_true",
                   help="create the tables with Delta's change data feed on")
    p.add_argument("--master", default="local[*]",
                   help="Spark master (default local[*]; a cluster: spark://host:7077, yarn, k8s://...)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, as spark-submit's --conf (repeatable), e.g. "
                        "spark.executor.memory=4g, spark.pyspark.python=./env/bin/python, "
                        "spark.archives=env.tar.gz#env")
    p.add_argument("--table", action="append", metavar="SCHEMA.NAME",
                   help="only these tables (repeatable)")
    p.add_argument("--max-batch-changes", type=_positive, default=None, metavar="N",
                   help="at most about N changes of a table in one Delta commit (default "
                        "1,000,000): more are applied in consecutive commits of whole "
                        "transactions; the driver holds one such part per table at a time")
    p.add_argument("--backfill", action="append", default=[], metavar="DIR",
                   help="a backfill directory of this capture (pgoutput-fast snapshot; "
                        "repeatable): applied first, its tables' rows replace theirs, then "
                        "only the capture's changes at or after its point apply")


def run(args) -> int:
    from ..capture import segment_entries
    from ..storage import parse_storage_options
    from .decode import get_spark

    options = parse_storage_options(getattr(args, "storage_option", None))
    # a missing, empty or damaged capture directory, an unreachable bucket: one line,
    # before Spark starts
    if not list(segment_entries(args.segments, storage_options=options)):
        from ..capture.errors import SegmentError

        raise SegmentError(f"{args.segments}: the capture directory holds no segment yet: "
                           "nothing to apply (run pgoutput-fast capture into it first)")
    conf = {}
    for item in getattr(args, "conf", None) or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            from .errors import SparkConfError

            raise SparkConfError(f"--conf {item!r}: expected KEY=VALUE, e.g. spark.executor.memory=4g")
        conf[key.strip()] = value
    spark = get_spark(args.master, **conf)
    if not getattr(args, "debug", False):
        # a failed task comes back as the job's exception, which ends the command with
        # one line; Spark's own log of it (the worker's traceback) only with --debug
        spark.sparkContext.setLogLevel("OFF")
    try:
        res = run_pipeline(spark, args.segments, args.out, tables=args.table,
                           log=lambda m: print(m, flush=True),
                           change_data_feed=args.change_data_feed, storage_options=options,
                           max_batch_changes=getattr(args, "max_batch_changes", None),
                           backfills=args.backfill)
    finally:
        spark.stop()
    secs = max(res["apply_seconds"], 1e-9)
    print(f"{res['changes']:,} changes decoded and applied to {len(res['tables'])} tables in "
          f"{res['apply_seconds']:.1f} s ({res['changes'] / secs:,.0f} changes/s)")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="pgoutput-fast pipeline", description=DESCRIPTION)
    add_arguments(p)
    sys.exit(run(p.parse_args()))
