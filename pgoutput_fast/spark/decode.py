"""Segments -> Spark DataFrame -> decoded change events / typed tables (``mapInArrow``).

How tasks get whole transactions
--------------------------------

Capture cuts segments only outside ``B…C``, ``b…P`` and ``S…E``, but a streamed
transaction (``S…E`` blocks until ``c``/``A``) or a prepared one (``b…P`` until
``K``/``r``) can span segments. ``read_segments`` therefore makes a first pass over the
segments on the driver (the message-type bytes only, vectorized; the few
stream/prepare messages are parsed) and groups consecutive segments into **segment
groups**: a group ends after a segment at whose end no streamed or prepared
transaction is open. A closed group of several segments is cut into **pieces**, runs of
whole segments, as many as the session's task slots (``pgoutput_fast.split``: each piece
gets a copy of the outcome of the transactions it holds part of, subtransaction aborts
are applied on the driver, seq is shifted), so a long transaction does not make one task.
A segment holding one large plain transaction (a bulk load) is cut inside it too
(``MIN_SPLIT_BYTES``, ``split.cut_segment``). Each piece is one Spark
partition (``spark.range(n, numPartitions=n)`` + a reading ``mapInArrow``), read in
order. A trailing group that is still open (a transaction not finished when capture
stopped) is left out (``include_open=True`` keeps it, as one piece; its unfinished
work is then simply not emitted) and is read again once it closes.

Each task starts a ``Decoder`` from the catalog as of the first message of its piece
(``SegmentCatalog.as_of(ordinal)``: the Relation/Type messages before it, collected
by ``build_catalog``), which is exactly the state a single sequential decoder has
there: the same relation versions. The task checks that its input
is one piece in order (ordinals contiguous from the piece's start); a DataFrame that was
repartitioned or filtered before ``decode`` fails loudly instead of decoding wrongly.

Typed tables and schema changes
-------------------------------

``decode(df, catalog, table="s.t")`` returns one DataFrame for every version of the
table: the columns of all versions in order of first appearance (a column a version
lacks is null in its rows), types promoted permissively as ``ChangeSet.tables`` does,
and ``_version`` (the relation version of each row). Spark types follow
``pgoutput_fast.spark.types``. Key columns carry the field metadata
``{"pgoutput_fast": {"key": true}}`` and ``_op`` carries the table name, key columns
and replica identity, so ``apply_changes`` finds the keys without the catalog.

Many tables: ``decode_tables(df, catalog)`` decodes the messages once for the typed rows
of every table (or ``tables=``), kept as Arrow IPC record batches, one row per table and
feed (cut at about 256 KiB); ``.table(name)`` reads one table's back as the same DataFrame
``decode(table=name)`` gives. ``decode(table=)`` decodes every message for the one table
it returns, so a job of K tables calling it K times decodes the stream K times.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pyarrow as pa

from ..catalog import RelationCatalog
from .types import spark_arrow_type, to_spark_array

__all__ = ["read_segments", "build_catalog", "decode", "decode_tables", "DecodedTables",
           "segment_groups",
           "SegmentCatalog", "typed_schema", "get_spark", "MESSAGE_COLUMNS"]

MESSAGE_COLUMNS = ("lsn", "data", "ordinal", "segment")
META_KEY = "pgoutput_fast"
_CATALOG_BYTES = b"RYSE"


# ======================================================================================
# a local SparkSession
# ======================================================================================

def get_spark(master: str = "local[*]", app_name: str = "pgoutput_fast", *, connect: bool = False,
              **conf):
    """A SparkSession for local work: Python workers use this interpreter and import
    this package from where it is imported now (a checkout works without installing).

    ``connect=True``: a Spark Connect session on a local Connect server that PySpark
    starts (``SparkSession.builder.remote(master)``; needs ``pyspark[connect]``).

    On a cluster (``master="spark://host:7077"``, YARN, Kubernetes) the executors' Python
    is ``spark.pyspark.python`` when given in ``conf`` (``spark-submit`` honours that
    setting, a driver started by ``python`` does not: this sets ``PYSPARK_PYTHON`` from
    it), else ``PYSPARK_PYTHON``, else this interpreter's path, which must then exist on
    every node. The ``PYTHONPATH`` set here reaches local workers only: executors a
    cluster starts import the package as their node has it (docs/delta.md, 'Spark: where
    the work runs')."""
    import sys

    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if conf.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = str(conf["spark.pyspark.python"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pkg_root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([pkg_root] + paths)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.remote(master) if connect else SparkSession.builder.master(master)
    b = (b.appName(app_name)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))
    for k, v in conf.items():
        b = b.config(k, v)
    # under a sanitizer run (scripts/sanitize.sh) the JVM starts without the preloaded
    # runtime, its Python workers with it (a JVM does not run under it)
    from ..childenv import jvm_children

    if connect:
        # a Connect client cannot change these once its server runs
        import warnings

        with warnings.catch_warnings(), jvm_children():
            warnings.simplefilter("ignore", UserWarning)
            return b.getOrCreate()
    with jvm_children():
        spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ======================================================================================
# segment groups
# ======================================================================================

def _segment_facts(entry):
    """``split.PieceFacts`` of one segment (verified: ``capture.read_segment``), or None
    when it holds no message."""
    from ..capture import read_segment
    from ..split import piece_facts

    t = read_segment(entry, columns=("lsn", "data", "ordinal"))
    if t.num_rows == 0:
        return None
    return piece_facts(t.column("data"), t.column("lsn").to_numpy(),
                       t.column("ordinal").to_numpy())


def _stream_detail_fn(pieces):
    """``detail(k, xid)`` for ``plan_pieces``: ``pieces[k]`` is (entries, first ordinal,
    count): the messages of those segments from that ordinal on."""
    def detail(k, xid):
        from ..split import stream_detail

        entries, first, count = pieces[k]
        parts = []
        for entry in entries:
            t = _piece_rows(entry, first, count, ("data", "ordinal"))
            parts.append(stream_detail(t.column("data"), t.column("ordinal").to_numpy(), xid))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
    return detail


def _piece_rows(entry, first, count, columns):
    """The rows of one segment (verified: ``capture.read_segment``) with ordinals in
    [first, first + count): a piece may start or end inside a segment."""
    from ..capture import read_segment

    t = read_segment(entry, columns=columns)
    o = t.column("ordinal").to_numpy()
    a, b = np.searchsorted(o, [first, first + count])
    return t if a == 0 and b == len(o) else t.slice(int(a), int(b - a))


#: a segment is cut inside (``split.cut_segment``: where nothing is open, else inside a
#: plain transaction) into parts of at least this many bytes of its file, where it holds
#: more than one and a half times a task slot's share of the whole read: one bulk load
#: or batch job written in one transaction is one segment, which would be one task
MIN_SPLIT_BYTES = 4 << 20


class _Unit:
    """A run of one segment's messages that a piece holds whole: the segment's entry,
    its facts, and the PlainCut it starts at (None: nothing plain open there)."""

    __slots__ = ("entry", "facts", "cut")

    def __init__(self, entry, facts, cut=None):
        self.entry, self.facts, self.cut = entry, facts, cut


def _units(entries, facts, share) -> list:
    """The segments of a group as units of work: whole, or one of more than a share and a
    half of messages (``share``: the messages of the whole read over its task slots) cut
    inside into parts of about a share, each of at least MIN_SPLIT_BYTES of its file."""
    from ..capture import read_segment
    from ..split import cut_segment, piece_facts

    units: list = []
    for e, f in zip(entries, facts):
        k = int(round(f.count / share)) if share else 1
        # (a legacy manifest gives no size: its segments are not cut)
        k = min(k, int(e.bytes // MIN_SPLIT_BYTES)) if e.bytes is not None else 1
        if k < 2 or f.count < 1.5 * share:
            units.append(_Unit(e, f))
            continue
        t = read_segment(e, columns=("lsn", "data", "ordinal"))
        data = t.column("data").combine_chunks()
        lsn = t.column("lsn").to_numpy()
        ords = t.column("ordinal").to_numpy()
        cuts = cut_segment(data, lsn, ords, k)
        bounds = [0] + [c for c, _ in cuts] + [len(ords)]
        for (a, b), pc in zip(zip(bounds, bounds[1:]), [None] + [pc for _, pc in cuts]):
            units.append(_Unit(e, piece_facts(data.slice(a, b - a), lsn[a:b], ords[a:b]), pc))
    return units


def _spans(counts, n) -> list:
    """``n`` runs of consecutive segments (or parts of them) with about equal message
    counts, each boundary the one nearest its target: ``[(first segment, end)]``."""
    ends = np.cumsum(counts)
    near = set()
    for k in range(1, n):
        t = ends[-1] * k / n
        i = min(int(np.searchsorted(ends, t, side="left")), len(ends) - 1)
        # the run boundary nearest the target: after segment i - 1 or after segment i
        near.add(i if i > 0 and t - ends[i - 1] <= ends[i] - t else i + 1)
    cuts = sorted(c for c in near if 0 < c < len(counts))
    bounds = [0] + cuts + [len(counts)]
    return list(zip(bounds, bounds[1:]))


def segment_groups(directory, *, include_open: bool = False, split: bool = True,
                   max_pieces: int | None = None, storage_options=None,
                   filesystem=None) -> list:
    """``[{"paths": [...], "entries": [...], "first": ordinal, "count": n, "closed": bool,
    "pieces": [...]}]``: consecutive segments such that no streamed or prepared
    transaction is open at a group's end. ``entries`` are the segments' verified
    manifest entries (``capture.SegmentEntry``): the tasks check each file against them.
    ``directory`` may be a URI (``s3://...``) with ``storage_options`` or ``filesystem``
    (``capture.segments``); its entries then carry what reopens the file system in a
    task (pickled with the task's function, never in the DataFrame's metadata).

    ``pieces``: the units of work (one Spark task each). With ``split=True`` a closed
    group of several segments is cut into pieces of whole segments (``pgoutput_fast.split``:
    each piece gets the outcome of the transactions it holds part of): one per segment,
    or ``max_pieces`` of about equal message counts; otherwise, and for an open group,
    the group is one piece. With ``max_pieces``, a segment of more than one and a half
    times the messages of all the groups over ``max_pieces`` (and at least 2 ×
    MIN_SPLIT_BYTES of file) is cut inside too:
    where nothing is open, else inside the plain transaction there (a bulk load: each
    part is fed copies of its Begin and Commit, ``split.cut_segment``). Each piece:
    ``{"entries", "first", "count", "plan"}`` (its messages: those of ``entries`` with
    ordinals in [first, first + count); ``plan``: ``split.PiecePlan.to_dict()``, or
    None)."""
    from ..capture import segment_entries
    from ..protocol import Grammar
    from ..split import add_plain_cuts, merge_facts, plan_pieces

    groups: list[dict] = []
    grammar = Grammar()
    cur: dict | None = None
    for entry in segment_entries(directory, storage_options=storage_options,
                                 filesystem=filesystem):
        facts = _segment_facts(entry)
        if facts is None:
            continue
        if cur is None:
            cur = {"paths": [], "entries": [], "first": facts.first, "count": 0,
                   "closed": False, "facts": []}
        cur["paths"].append(entry.path)
        cur["entries"].append(entry)
        cur["facts"].append(facts)
        cur["count"] += facts.count
        for _, _, data in facts.control:
            grammar.step(data)
        if grammar.at_rest:
            cur["closed"] = True
            groups.append(cur)
            cur = None
    if cur is not None and include_open:
        groups.append(cur)
    # a segment is cut inside only where it is large against the whole read (the groups
    # are tasks of their own already): more than a piece and a half of all the messages
    # over the task slots
    cut_share = None
    if split and max_pieces is not None and int(max_pieces) > 1:
        cut_share = sum(f.count for g in groups if g["closed"] for f in g["facts"]) / int(max_pieces)
    for g in groups:
        facts = g.pop("facts")
        if cut_share and g["closed"]:
            units = _units(g["entries"], facts, cut_share)
        else:
            units = [_Unit(e, f) for e, f in zip(g["entries"], facts)]
        n = len(units) if max_pieces is None else min(len(units), max(1, int(max_pieces)))
        if split and g["closed"] and n > 1:
            spans = _spans([u.facts.count for u in units], n)
            entries = [list(dict.fromkeys(u.entry for u in units[a:b])) for a, b in spans]
            merged = [merge_facts([u.facts for u in units[a:b]]) for a, b in spans]
            plans = plan_pieces(merged, _stream_detail_fn(
                [(e, f.first, f.count) for e, f in zip(entries, merged)]))
            add_plain_cuts(plans, [units[a].cut for a, _ in spans])
            g["pieces"] = [{"entries": e, "first": f.first, "count": f.count,
                            "plan": None if p.empty and not p.seq_offsets else p.to_dict()}
                           for e, f, p in zip(entries, merged, plans)]
        else:
            g["pieces"] = [{"entries": list(g["entries"]), "first": g["first"],
                            "count": g["count"], "plan": None}]
    return groups


def _capture_options(directory, storage_options=None, filesystem=None) -> dict:
    from ..capture import load_state

    state = load_state(directory, storage_options=storage_options, filesystem=filesystem)
    return dict(state.options or {}) if state is not None else {}


# ======================================================================================
# read_segments
# ======================================================================================

def _message_schema(metadata: dict):
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType

    return StructType([
        StructField("lsn", LongType(), False),
        StructField("data", BinaryType(), False, metadata={META_KEY: metadata}),
        StructField("ordinal", LongType(), False),
        StructField("segment", IntegerType(), False),
    ])


def _read_pieces_fn(pieces, batch_rows=10_000):
    def read(batches):
        for b in batches:
            for pid in b.column(0).to_pylist():
                piece = pieces[pid]
                for entry in piece["entries"]:
                    seg = entry.seq
                    t = _piece_rows(entry, piece["first"], piece["count"], ("lsn", "data", "ordinal"))
                    t = t.append_column("segment", pa.array(np.full(t.num_rows, seg, np.int32)))
                    yield from t.to_batches(max_chunksize=batch_rows)
    return read


def task_slots(spark):
    """The session's task slots (``spark.default.parallelism``: the cores of a local
    master or of the cluster's executors), or None (one piece per segment) where the
    session does not say (Spark Connect)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:       # a Connect session has no SparkContext
        return None


def _pieces(groups) -> list:
    out: list[dict] = []
    for g in groups:
        out.extend(g.get("pieces") or [{"entries": list(g["entries"]), "first": g["first"],
                                         "count": g["count"], "plan": None}])
    return out


def read_segments(spark, path, *, include_open: bool = False, groups: list | None = None,
                  split: bool = True, max_pieces: int | str | None = "auto",
                  storage_options: dict | None = None, filesystem=None):
    """The captured messages of a segment directory: a DataFrame with ``lsn``, ``data``,
    ``ordinal`` and ``segment``, one partition per piece of work, in order: a segment
    group, or with ``split=True`` (the default) a run of whole segments of a group that
    spans several (``segment_groups``, ``pgoutput_fast.split``): at most ``max_pieces``
    per group, by default the session's task slots (``defaultParallelism``; one piece
    per segment where the session does not say). Each task costs Spark tens of
    milliseconds, so more pieces than slots only add that.

    ``path``: a local directory or a URI (``s3://bucket/cdc``, ``gs://``, ``abfss://``,
    ``hdfs://``) with ``storage_options`` (delta-rs's keys, e.g. ``AWS_ENDPOINT_URL``)
    or ``filesystem`` (a ``pyarrow.fs.FileSystem``): the executors read the segments
    from there, each verified. The options travel with the tasks' function, not in the
    DataFrame.

    The ``data`` column's metadata holds the capture options (``binary``, ...), the
    directory (local path or URI, never a credential) and the pieces (first ordinal,
    count, and how ``decode`` rewrites a piece that holds part of a transaction finished
    elsewhere): ``build_catalog`` and ``decode`` read them."""
    from ..storage import Store

    slots = task_slots(spark) if max_pieces == "auto" else max_pieces
    if groups is None:
        groups = segment_groups(path, include_open=include_open, split=split,
                                max_pieces=int(slots) if slots is not None else None,
                                storage_options=storage_options, filesystem=filesystem)
    pieces = _pieces(groups)
    store, where = Store.of(path, storage_options, filesystem)
    meta = {"options": _capture_options(path, storage_options, filesystem),
            "path": os.path.abspath(where) if store.local else where,
            "group_starts": [p["first"] for p in pieces],
            "group_counts": [p["count"] for p in pieces],
            # (Spark's field metadata holds no nested arrays: the plans as a JSON string)
            "plans": json.dumps({str(p["first"]): p["plan"] for p in pieces if p.get("plan")})}
    schema = _message_schema(meta)
    n = max(1, len(pieces))
    ids = spark.range(0, len(pieces), 1, n)
    df = ids.mapInArrow(_read_pieces_fn(pieces), schema)
    # mapInArrow drops field metadata of the declared schema: put it back
    return df.select(*[df[c].alias(c, metadata={META_KEY: meta}) if c == "data" else df[c]
                       for c in df.columns])


def _meta(df) -> dict:
    return (df.schema["data"].metadata or {}).get(META_KEY, {})


# ======================================================================================
# catalog
# ======================================================================================

class SegmentCatalog(RelationCatalog):
    """A RelationCatalog (all versions) plus the Relation/Type messages it was built from,
    by ordinal, so that a task can start from the catalog as of any position."""

    def __init__(self):
        super().__init__()
        self.control: list = []        # [(ordinal, lsn, bytes)] R/Y, stream xid stripped
        self.binary = False

    @classmethod
    def from_control(cls, rows, binary=False) -> "SegmentCatalog":
        """rows: (ordinal, lsn, data) of R, Y, S and E messages in any order."""
        from .. import Decoder

        cat = cls()
        cat.binary = bool(binary)
        in_stream = False
        for o, lsn, data in sorted(rows, key=lambda r: r[0]):
            t = data[0]
            if t == ord("S"):
                in_stream = True
            elif t == ord("E"):
                in_stream = False
            elif t in b"RY":
                body = bytes(data)
                if in_stream:  # inside S..E a Relation/Type carries the xid: drop it
                    body = body[:1] + body[5:]
                cat.control.append((int(o), int(lsn), body))
        if cat.control:
            dec = Decoder(events=False, tables=False)
            dec.feed([c[2] for c in cat.control], [c[1] for c in cat.control])
            cat.relations, cat.types = dec.catalog.relations, dec.catalog.types
        return cat

    def as_of(self, ordinal: int) -> RelationCatalog:
        """The catalog a sequential decoder has just before message ``ordinal``."""
        from .. import Decoder

        msgs = [c for c in self.control if c[0] < ordinal]
        dec = Decoder(events=False, tables=False)
        if msgs:
            dec.feed([c[2] for c in msgs], [c[1] for c in msgs])
        return dec.catalog

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["control"] = [[o, lsn, data.hex()] for o, lsn, data in self.control]
        d["binary"] = self.binary
        return d

    @classmethod
    def from_dict(cls, d) -> "SegmentCatalog":
        cat = super().from_dict(d)        # builds a SegmentCatalog (cls())
        cat.control = [(o, lsn, bytes.fromhex(h)) for o, lsn, h in d.get("control", [])]
        cat.binary = bool(d.get("binary", False))
        return cat

    def __reduce__(self):
        return (SegmentCatalog.from_dict, (self.to_dict(),))


def build_catalog(df) -> SegmentCatalog:
    """The RelationCatalog of a messages DataFrame (``read_segments``): its Relation and
    Type messages (with the stream blocks' S/E around them), filtered on the JVM side
    by the first byte and collected (tiny)."""
    from pyspark.sql import functions as F

    first = F.substring(F.col("data"), 1, 1)
    wanted = [bytearray(bytes([b])) for b in _CATALOG_BYTES]
    rows = df.where(first.isin(wanted)).select("ordinal", "lsn", "data").collect()
    binary = bool(_meta(df).get("options", {}).get("binary", False))
    return SegmentCatalog.from_control([(r[0], r[1], bytes(r[2])) for r in rows], binary=binary)


# ======================================================================================
# typed schema of a table across its versions
# ======================================================================================

def relation_versions(catalog, table):
    """The catalog's versions of ``table`` (``schema.name``), by relid and version."""
    vs = [v for v in catalog.versions() if v.qualified_name == table]
    if not vs:
        raise KeyError(f"{table}: no such relation in the catalog "
                       f"({sorted({v.qualified_name for v in catalog.versions()})})")
    return sorted(vs, key=lambda v: (v.relid, v.version))


def _meta_fields():
    return [pa.field("_op", pa.string(), False), pa.field("_lsn", pa.int64()),
            pa.field("_commit_lsn", pa.int64(), False),
            pa.field("_commit_ts", pa.timestamp("us", tz="UTC"), False),
            pa.field("_xid", pa.int64(), False), pa.field("_seq", pa.int64(), False),
            pa.field("_origin", pa.string())]


def typed_schema(catalog, table, binary_unknown=False) -> pa.Schema:
    """The decoder's typed Arrow schema of ``table`` over all its versions (permissive
    promotion, columns in order of first appearance), plus ``_version``."""
    cols: dict[str, pa.DataType] = {}
    for v in relation_versions(catalog, table):
        for c, ct in zip(v.columns, v.column_types):
            t = ct.arrow_type(binary_unknown)
            if c.name in cols and cols[c.name] != t:
                t = pa.unify_schemas([pa.schema([pa.field("x", cols[c.name])]),
                                      pa.schema([pa.field("x", t)])],
                                     promote_options="permissive").field("x").type
            cols[c.name] = t
    data = [pa.field(n, t) for n, t in cols.items()]
    return pa.schema(_meta_fields() + data + [
        pa.field("_before", pa.struct(data)), pa.field("_before_kind", pa.string()),
        pa.field("_unchanged_toast", pa.list_(pa.string())),
        pa.field("_special", pa.map_(pa.string(), pa.string())),
        pa.field("_version", pa.int32(), False)])


def spark_schema(arrow_schema: pa.Schema, table=None, catalog=None):
    """The Spark ``StructType`` of ``arrow_schema``; with ``table`` and ``catalog``, its key
    columns and the table's versions are recorded in the fields' metadata."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    keys: set = set()
    op_meta: dict = {}
    if table is not None and catalog is not None:
        last = relation_versions(catalog, table)[-1]
        keys = set(last.key_columns)
        op_meta = {META_KEY: {"table": table, "key_columns": list(last.key_columns),
                              "replident": last.replident,
                              "columns": list(last.column_names),
                              "versions": {str(v.version): list(v.column_names)
                                           for v in relation_versions(catalog, table)}}}
    fields = []
    for f in arrow_schema:
        md: dict[str, Any] = {}
        if f.name in keys:
            md = {META_KEY: {"key": True}}
        elif f.name == "_op":
            md = op_meta
        fields.append(StructField(f.name, from_arrow_type(spark_arrow_type(f.type)), f.nullable,
                                  metadata=md))
    return StructType(fields)


def conform_batch(table: pa.Table, version, schema: pa.Schema, spark: bool = True) -> pa.RecordBatch:
    """One version's typed rows in the unified schema, Spark-mapped (unless ``spark=False``)."""
    n = table.num_rows
    arrays = []
    data_fields = [f for f in schema if not f.name.startswith("_")]
    for f in schema:
        if f.name == "_version":
            arr = pa.array(np.full(n, version.version, np.int32))
        elif f.name == "_before":
            b = table.column("_before").combine_chunks()
            children = []
            for df_ in data_fields:
                idx = b.type.get_field_index(df_.name) if b.type.num_fields else -1
                if idx >= 0:
                    c = b.field(idx)
                    children.append(c if c.type == df_.type else c.cast(df_.type))
                else:
                    children.append(pa.nulls(n, df_.type))
            mask = b.is_null() if b.null_count else None
            arr = pa.StructArray.from_arrays(children, fields=data_fields, mask=mask) if data_fields \
                else pa.nulls(n, pa.struct([]))
        elif f.name in table.column_names:
            arr = table.column(f.name).combine_chunks()
            if arr.type != f.type:
                arr = arr.cast(f.type)
        else:
            arr = pa.nulls(n, f.type)
        arrays.append(to_spark_array(arr) if spark else arr)
    if not spark:
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    return pa.RecordBatch.from_arrays(arrays, schema=_spark_arrow_schema(schema))


def _spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema of ``conform_batch``'s Spark-mapped batches of ``schema``."""
    return pa.schema([pa.field(f.name, spark_arrow_type(f.type), f.nullable) for f in schema])


# ======================================================================================
# decode
# ======================================================================================

def _decode_fn(catalog: SegmentCatalog, group_starts: list, table, schema, binary_unknown,
               plans: dict | None = None, packed: dict | None = None):
    """The mapInArrow function of ``decode`` (``table`` None: the change events; else
    that table's typed rows in ``schema``) or, with ``packed`` ({name: schema}), of
    ``decode_tables``: every one of those tables' typed rows, as PACKED_SCHEMA rows."""
    starts = set(group_starts)
    plans = plans or {}

    def run(batches):
        from .. import Decoder
        from ..split import PiecePlan

        dec: Any = None
        plan = None
        expect = None

        def out(cs):
            if packed is not None:
                names, blobs = [], []
                for version, t in cs.table_versions:
                    sch = packed.get(version.qualified_name)
                    if sch is None or not t.num_rows:
                        continue
                    if plan is not None:
                        t = plan.shift_seq(t, "_commit_lsn", "_seq")
                    for blob in _pack(conform_batch(t, version, sch)):
                        names.append(version.qualified_name)
                        blobs.append(blob)
                if names:
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(names, pa.string()), pa.array(blobs, pa.binary())],
                        schema=PACKED_SCHEMA)
            elif table is None:
                if cs.events is not None and cs.events.num_rows:
                    ev = cs.events
                    if plan is not None:
                        ev = plan.shift_seq(ev, "commit_lsn", "seq")
                    yield from ev.to_batches()
            else:
                for version, t in cs.table_versions:
                    if version.qualified_name == table and t.num_rows:
                        if plan is not None:
                            t = plan.shift_seq(t, "_commit_lsn", "_seq")
                        yield conform_batch(t, version, schema)

        held: list = []            # batches read, not yet fed (in order)

        def feed_held():
            # one feed for the batches held: each feed pays a fixed export to Arrow, so
            # Spark's Arrow batches (10,000 messages) are fed FEED_MESSAGES at a time
            if not held:
                return
            data = pa.chunked_array([b.column("data") for b in held])
            lsn = pa.chunked_array([b.column("lsn") for b in held])
            if plan is None:
                yield from out(dec.feed(data, lsn=lsn))
            else:
                ov = np.concatenate([b.column("ordinal").to_numpy() for b in held])
                for d, ls in plan.rewrite(data, lsn, ov):
                    yield from out(dec.feed(d, lsn=ls))
            held.clear()

        def finish():
            yield from feed_held()
            if plan is not None:
                for data, lsn in plan.finish():
                    yield from out(dec.feed(data, lsn=lsn))
            _check_closed(dec, expect)

        for b in batches:
            if b.num_rows == 0:
                continue
            ords = b.column("ordinal")
            first = ords[0].as_py()
            if dec is None or first != expect:
                if dec is not None:
                    yield from finish()
                if starts and first not in starts:
                    raise ValueError(
                        f"pgoutput_fast.spark.decode: a task starts at message ordinal {first}, "
                        "which is not the start of a segment group: decode() needs the "
                        "DataFrame of read_segments() as it is (not repartitioned, filtered "
                        "or reordered)")
                dec = Decoder(catalog.as_of(first), events=table is None and packed is None,
                              tables=table is not None or packed is not None,
                              binary_unknown=binary_unknown)
                p = plans.get(str(first))
                plan = PiecePlan.from_dict(p) if p else None
            ov = ords.to_numpy()
            if len(ov) > 1 and not np.all(np.diff(ov) == 1):
                raise ValueError("pgoutput_fast.spark.decode: messages out of order in a task")
            expect = int(ov[-1]) + 1
            held.append(b)
            if (sum(x.num_rows for x in held) >= FEED_MESSAGES
                    or sum(x.nbytes for x in held) >= FEED_BYTES):
                yield from feed_held()
        if dec is not None:
            yield from finish()
    return run


FEED_MESSAGES = 100_000           # a task feeds its Decoder this many messages at a time
FEED_BYTES = 32 << 20             # (or this many bytes of batches, whichever comes first)


def _check_closed(dec, expect):
    p = dec.pending()
    if p.get("open_transaction") is not None:
        raise ValueError(f"pgoutput_fast.spark.decode: a transaction is still open before "
                         f"message ordinal {expect}: the input is not whole segments in order")


def _decode_setup(df, catalog, binary_unknown, caller: str):
    """What a decode of ``df`` needs from its metadata: (group starts, piece plans,
    binary_unknown: the caller's, else the capture's mode)."""
    meta = _meta(df)
    if binary_unknown is None:
        binary_unknown = bool(getattr(catalog, "binary", False) or
                              meta.get("options", {}).get("binary", False))
    if not isinstance(catalog, SegmentCatalog):
        raise TypeError(f"{caller}() needs the SegmentCatalog of build_catalog(df)")
    return (list(meta.get("group_starts", [])), json.loads(meta.get("plans") or "{}"),
            binary_unknown)


def decode(df, catalog: SegmentCatalog, *, table: str | None = None,
           binary_unknown: bool | None = None):
    """Decode a messages DataFrame (``read_segments``) with ``mapInArrow``.

    ``table=None``: the change-event DataFrame (``EVENT_SCHEMA``). ``table="schema.name"``:
    the typed DataFrame of that table over all its versions (module doc). Unknown types
    are binary when the capture was in binary mode (``binary_unknown``)."""
    group_starts, plans, binary_unknown = _decode_setup(df, catalog, binary_unknown, "decode")
    if table is None:
        from ..decoder import EVENT_SCHEMA

        out_schema = spark_schema(EVENT_SCHEMA)
        fn = _decode_fn(catalog, group_starts, None, None, binary_unknown, plans)
    else:
        schema = typed_schema(catalog, table, binary_unknown)
        out_schema = spark_schema(schema, table, catalog)
        fn = _decode_fn(catalog, group_starts, table, schema, binary_unknown, plans)
    return _with_metadata(df.select("lsn", "data", "ordinal").mapInArrow(fn, out_schema),
                          out_schema)


def _with_metadata(out, out_schema):
    """mapInArrow drops field metadata: restore it (keys, table name)."""
    return out.select(*[out[f.name].alias(f.name, metadata=f.metadata) if f.metadata else out[f.name]
                        for f in out_schema.fields])


# ======================================================================================
# decode_tables: one decode for many tables
# ======================================================================================

# A packed row: one table's typed rows of one feed (or a slice of them), in that table's
# Spark-mapped unified schema, as an Arrow IPC record batch message (the schema is known
# to both sides: typed_schema of the same catalog).
PACKED_SCHEMA = pa.schema([pa.field("table", pa.string(), False),
                           pa.field("rows", pa.binary(), False)])
_PACK_BYTES = 256 << 10           # about this much per packed row (Spark holds a row whole)
# Spark's cache builds its column batches of spark.sql.inMemoryColumnarStorage.batchSize
# rows (10,000 by default), each in one JVM buffer: rows of megabytes make batches of
# gigabytes. Rows of 8 MiB ran a local[2] driver of 1 GiB out of Java heap at 2 M
# changes of 8 tables (batches of 16 rows on local disk did not help alone); rows of
# 256 KiB do not. decode_tables' cache is built with batches of _CACHE_ROWS rows (about
# 4 MiB), uncompressed (the rows are Arrow IPC: compressing them again costs more than
# it saves); the session's settings are restored after.
_CACHE_ROWS = 16
_CACHE_SETTINGS = {"spark.sql.inMemoryColumnarStorage.batchSize": str(_CACHE_ROWS),
                   "spark.sql.inMemoryColumnarStorage.compressed": "false"}


def _pack(batch: pa.RecordBatch):
    """IPC messages of ``batch`` cut into slices of about _PACK_BYTES."""
    n = batch.num_rows
    if n == 0:
        return
    size = batch.nbytes
    step = n if size <= _PACK_BYTES else max(1, int(n * _PACK_BYTES // size))
    for at in range(0, n, step):
        yield batch.slice(at, step).serialize().to_pybytes()


def _unpack_fn(schema: pa.Schema):
    arrow_schema = _spark_arrow_schema(schema)

    def run(batches):
        for b in batches:
            for blob in b.column(0).to_pylist():
                yield pa.ipc.read_record_batch(pa.py_buffer(blob), arrow_schema)
    return run


class DecodedTables:
    """The typed rows of many tables from one decode (``decode_tables``).

    ``frame``: the decoded DataFrame (``table``, ``rows``: Arrow IPC record batches of
    that table's typed rows), to persist while its tables are read. ``table(name)``: the
    typed DataFrame of one table, the same as ``decode(df, catalog, table=name)`` (same
    schema and field metadata, same rows), read from ``frame`` instead of decoding the
    messages again."""

    def __init__(self, frame, catalog, tables, binary_unknown):
        self.frame = frame
        self.catalog = catalog
        self.tables = list(tables)
        self._binary_unknown = binary_unknown

    def table(self, name: str):
        if name not in self.tables:
            raise KeyError(f"{name}: not one of the tables decoded ({len(self.tables)}: "
                           "decode_tables(..., tables=) chooses them)")
        schema = typed_schema(self.catalog, name, self._binary_unknown)
        out_schema = spark_schema(schema, name, self.catalog)
        from pyspark.sql import functions as F

        rows = self.frame.where(F.col("table") == name).select("rows")
        return _with_metadata(rows.mapInArrow(_unpack_fn(schema), out_schema), out_schema)

    def persist(self, level=None):
        """Persist ``frame`` (on the executors' local disks by default: it holds every
        table's rows, which the JVM heap need not) and compute it: each table is then
        read from the stored rows, and the messages are decoded once."""
        from pyspark import StorageLevel

        spark = self.frame.sparkSession
        prev = {k: spark.conf.get(k, None) for k in _CACHE_SETTINGS}
        for k, v in _CACHE_SETTINGS.items():
            spark.conf.set(k, v)
        try:
            self.frame = self.frame.persist(level or StorageLevel.DISK_ONLY)
            self.frame.count()
        finally:
            for k, v in prev.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)
        return self

    def unpersist(self):
        self.frame.unpersist()

    def __enter__(self):
        return self.persist()

    def __exit__(self, *exc):
        self.unpersist()


# From this many tables on, a job that reads every table decodes once (decode_tables)
# instead of once per table: on Spark local[2] (benchmarks/bench_spark_tables.py,
# 400,000 changes) one decode read back per table took 0.66x the speed of a decode per
# table at 2 tables, 1.05x at 8 (also at 2,000,000 changes), 1.35-1.43x at 32. Spark's
# own work per table (a job, the rows moved between the JVM and Python) is most of
# either; the decode saved grows with the tables.
DECODE_ONCE_TABLES = 8


class _PerTable:
    """``DecodedTables``' reading side for a few tables: ``decode(table=)`` each."""

    once = False                 # (the stream is decoded once per table read)

    def __init__(self, df, catalog, tables, binary_unknown):
        self._df, self._catalog, self.tables = df, catalog, list(tables)
        self._binary_unknown = binary_unknown

    def table(self, name: str):
        return decode(self._df, self._catalog, table=name, binary_unknown=self._binary_unknown)

    def unpersist(self):
        pass


def table_source(df, catalog: SegmentCatalog, tables, *, binary_unknown: bool | None = None):
    """Where a job that reads each of ``tables`` gets their typed DataFrames
    (``.table(name)``; ``.unpersist()`` when done): ``decode_tables``, persisted, from
    DECODE_ONCE_TABLES tables on, else ``decode(table=)`` per table."""
    tables = list(tables)
    known = set(tables_of(catalog))
    if sum(t in known for t in tables) >= DECODE_ONCE_TABLES:
        dt = decode_tables(df, catalog, tables=[t for t in tables if t in known],
                           binary_unknown=binary_unknown).persist()
        # (a name the catalog does not know fails on its own, as decode(table=) fails)
        return _Either(dt, _PerTable(df, catalog, tables, binary_unknown))
    return _PerTable(df, catalog, tables, binary_unknown)


class _Either:
    """The tables decoded once, and decode(table=) for a name the catalog lacks."""

    once = True

    def __init__(self, decoded: DecodedTables, per_table: _PerTable):
        self.decoded, self._per_table = decoded, per_table
        self.tables = per_table.tables

    def table(self, name: str):
        if name in self.decoded.tables:
            return self.decoded.table(name)
        return self._per_table.table(name)

    def unpersist(self):
        self.decoded.unpersist()


def decode_tables(df, catalog: SegmentCatalog, *, tables=None,
                  binary_unknown: bool | None = None) -> DecodedTables:
    """Decode a messages DataFrame (``read_segments``) once for the typed rows of
    ``tables`` (default: every table of the catalog).

    ``decode(df, catalog, table=name)`` decodes every message for each table it is
    called for; a job that applies K tables pays K decodes. ``decode_tables`` runs one
    ``mapInArrow`` that keeps each table's typed rows (Arrow IPC, in the table's Spark
    schema); ``.table(name)`` reads one table's back. Persist it while its tables are
    read (``with decode_tables(...) as dt:``), else each read decodes again."""
    group_starts, plans, binary_unknown = _decode_setup(df, catalog, binary_unknown,
                                                        "decode_tables")
    names = list(dict.fromkeys(tables)) if tables is not None else tables_of(catalog)
    packed = {name: typed_schema(catalog, name, binary_unknown) for name in names}
    fn = _decode_fn(catalog, group_starts, None, None, binary_unknown, plans, packed=packed)
    from pyspark.sql.pandas.types import from_arrow_schema

    frame = df.select("lsn", "data", "ordinal").mapInArrow(fn, from_arrow_schema(PACKED_SCHEMA))
    return DecodedTables(frame, catalog, names, binary_unknown)


def tables_of(catalog) -> list:
    """Qualified names of the relations in a catalog, sorted."""
    return sorted({v.qualified_name for v in catalog.versions()})
