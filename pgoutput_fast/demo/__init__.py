"""``pgoutput-fast demo``: PostgreSQL changes -> pgoutput -> typed Arrow tables, checked.

1. Starts a private PostgreSQL (``pgoutput_fast.local_server.PostgresServer``), or connects to
   ``--dsn``, creates the workload's tables and loads a first set of rows into every one
   of them (``workload.run_preload``: every type with its edge values, TOAST, NULLs,
   each replica identity, each partition).
2. Starts the real capture in this process (``capture.run_capture`` with
   ``--create-slot --snapshot initial``, the highest protocol version the server
   supports, binary mode or ``--text``): the slot is created with an exported snapshot,
   the existing rows are copied inside it as synthetic transactions (op ``'r'``), then
   the stream follows, into a capture directory.
3. Runs the workload (``demo.workload``): changes to the preloaded rows and an OLTP-like
   bulk load *while the snapshot is being copied*; then, once it is durable, inserts,
   updates and deletes under each replica identity, TOAST, TRUNCATE, schema changes, a
   replication origin, logical messages, a large streamed transaction with a savepoint
   rollback, an aborted transaction and, from PostgreSQL 15 on, two-phase commit. The
   capture stops once everything up to the workload's last WAL is durable and
   confirmed (``CaptureConfig.until_lsn``).
4. Decodes the capture directory (``iter_segments``) with one ``pgoutput_fast.Decoder``
   (typed tables only), fed in several batches cut at transaction boundaries, timed with
   ``perf_counter`` around ``feed()`` alone; checks that the rows of op ``'r'`` are
   exactly what the snapshot copied, all below its consistent point.
5. Replays the typed tables into a ``demo.image.TableImage`` and compares every
   table with PostgreSQL's own rows (``demo.truth``): row count, an
   order-independent checksum of the rows' canonical values (``arrow_values.freeze``), the
   columns and their Arrow types. Unless ``--no-spark``, the same capture directory goes
   through the Spark pipeline into Delta tables, compared the same way. Exit status 1 if
   anything differs.

Without PostgreSQL server binaries (and no ``--dsn``), or with ``--fixtures``, it decodes
the captures bundled in a source checkout (``tests/fixtures``) instead and checks that
the text-mode and binary-mode captures of the same workload decode to the same tables.
"""

# Only the standard library is imported at module level: the CLI imports this module
# to build its parser.

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import shutil
import sys
import tempfile
import time

from ..lsn import format_lsn

__all__ = ["add_arguments", "run", "main", "DemoError", "transaction_cuts", "plan_batches",
           "rows_checksum", "TableResult", "ROW_PRESETS"]

#: ``--rows`` presets: rows of the bulk load (the other workloads scale with it).
ROW_PRESETS = {"small": 2_000, "medium": 20_000, "large": 200_000}
DEFAULT_ROWS = "medium"

#: the schema the demo creates (and, with ``--dsn``, drops again)
SCHEMA = "pgoutput_fast_demo"
#: COMMENT ON SCHEMA marker: a schema without it is never dropped
SCHEMA_MARK = "created by pgoutput-fast demo; safe to drop"

#: logical_decoding_work_mem of capture's sessions (the walsender's): the bulk load's
#: small transactions arrive whole, the large workload transactions are streamed.
DECODING_WORK_MEM = "256kB"

def added_column_defaults(schema):
    """Defaults of the columns ``workload.run_basic`` adds by DDL: PostgreSQL fills
    existing rows with them, and the stream cannot say so (``TableImage``)."""
    return {f"{schema}.evolve": {"b": 7}, f"{schema}.alltypes": {"c_extra": "dflt"}}


#: bundled captures (a source checkout only: the wheel has no tests/)
FIXTURES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "tests", "fixtures")
#: (label, text-mode capture, binary-mode capture) of the same workload
FIXTURE_PAIRS = [
    ("v1", "v1_text", "v1_binary"),
    ("v2 streaming", "v2_stream_text", "v2_stream_binary"),
    ("v3 two-phase", "v3_twophase_text", "v3_twophase_binary"),
]
FIXTURE_SCHEMA = "pgo"

# message types that can end the last open transaction (commit, abort, prepared outcome)


#: ``pgoutput-fast demo --help``
DESCRIPTION = """\
Checks the whole path from PostgreSQL to typed Arrow tables against PostgreSQL itself.

1. Starts a private PostgreSQL (or uses --dsn), creates the tables and loads a first
   set of rows: every supported type with edge values, TOAST, NULLs, each replica
   identity, each partition.
2. Captures with pgoutput-fast capture's own machinery (--create-slot --snapshot
   initial, in this process): a new slot with an exported snapshot, the existing rows
   copied inside it (op 'r'), then the stream, with the highest protocol version the
   server supports, in binary mode (--text: text mode), into a capture directory.
3. Meanwhile runs a workload: changes to the first rows and a bulk load while the
   snapshot is copied; then inserts/updates/deletes under each replica identity, TOAST,
   TRUNCATE, schema changes, an origin, logical messages, a large streamed transaction
   with a savepoint rolled back, an aborted transaction and two-phase commit (15+).
   The capture stops once all of it is durable and confirmed.
4. Decodes the capture directory with pgoutput_fast.Decoder in several feed() calls
   cut at transaction boundaries, reports the decoder's throughput (feed() timed
   alone), and checks that the op 'r' rows are exactly the snapshot's.
5. Replays the typed tables into a TableImage (and, unless --no-spark, runs the Spark
   pipeline into Delta tables) and compares each table with PostgreSQL's rows: count,
   an order-independent checksum, columns and Arrow types.

Exit status: 0 all tables match, 1 a table differs, 2 the demo could not run.
Without PostgreSQL server binaries it decodes the captures bundled in a source
checkout (tests/fixtures) instead: see --fixtures.
"""


class DemoError(Exception):
    """The demo could not run (not a mismatch): message for the user, exit status."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


# ======================================================================================
# command line
# ======================================================================================

def _rows_arg(text):
    t = text.strip().lower()
    if t in ROW_PRESETS:
        return ROW_PRESETS[t]
    try:
        n = int(t.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number or one of {', '.join(ROW_PRESETS)}, not {text!r}") from None
    if n < 100:
        raise argparse.ArgumentTypeError("at least 100 rows")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=_rows_arg, default=ROW_PRESETS[DEFAULT_ROWS], metavar="N",
                   help="size of the bulk load: a number of rows or "
                        + ", ".join(f"{k} ({v:,})" for k, v in ROW_PRESETS.items())
                        + f"; default {DEFAULT_ROWS}. The streamed and two-phase "
                          "transactions grow with it")
    p.add_argument("--text", action="store_true",
                   help="capture in text mode (default: binary mode)")
    p.add_argument("--dsn", metavar="DSN",
                   help="use this PostgreSQL (wal_level=logical, a superuser) instead of a "
                        f"private one: creates schema {SCHEMA}, a publication and a "
                        "slot with unique names, and drops them afterwards")
    p.add_argument("--keep", action="store_true",
                   help="keep the capture directory (for `pgoutput-fast inspect DIR`, "
                        "`decode DIR`) and the Delta tables, and print where they are")
    p.add_argument("--batches", type=int, default=8, metavar="N",
                   help="feed the decoder about N batches, cut at transaction boundaries "
                        "(default 8)")
    p.add_argument("--no-spark", dest="spark", action="store_false",
                   help="skip the Spark pipeline (decode in-process and replay only)")
    p.add_argument("--master", default="local[*]",
                   help="Spark master for the pipeline (default local[*])")
    p.add_argument("--fixtures", action="store_true",
                   help="decode the captures bundled in a source checkout instead of "
                        "running PostgreSQL (the fallback when no server is found)")
    p.add_argument("--fixtures-dir", metavar="DIR", default=None,
                   help="where the bundled captures are (default: tests/fixtures of the "
                        "source checkout this package runs from)")


def run(args) -> int:
    out = sys.stdout
    try:
        if args.fixtures:
            return _run_fixtures(args, out, reason=None)
        if not args.dsn:
            from ..local_server import find_bindir

            try:
                bindir = find_bindir(required=False)
            except RuntimeError as exc:  # PGOUTPUT_FAST_PG_BIN set but unusable
                raise DemoError(str(exc)) from None
            if bindir is None:
                return _run_fixtures(
                    args, out,
                    reason="no PostgreSQL server binaries found (install Debian's 'postgresql' "
                           "package or set PGOUTPUT_FAST_PG_BIN; or use --dsn)")
        return _run_server(args, out)
    except DemoError as exc:
        out.flush()
        print(f"pgoutput-fast demo: {exc}", file=sys.stderr)
        return exc.status


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pgoutput-fast demo", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return run(p.parse_args(argv))


# ======================================================================================
# batches cut at transaction boundaries
# ======================================================================================

def transaction_cuts(messages) -> list:
    """Indexes ``i`` such that no transaction is open before message ``i`` and one
    ended just before it (``protocol.Grammar.at_rest`` after a ``UNIT_ENDS``
    message). A ``feed()`` that ends at such an index leaves the decoder holding
    nothing."""
    from ..protocol import UNIT_ENDS, Grammar

    cuts = []
    grammar = Grammar()
    for i, data in enumerate(messages):
        if grammar.step(data) in UNIT_ENDS and grammar.at_rest:
            cuts.append(i + 1)
    return cuts


def plan_batches(messages, n_batches: int) -> list:
    """``[(start, end)]`` covering all messages, about ``n_batches`` of similar byte size,
    each ending at a transaction boundary (``transaction_cuts``)."""
    n = len(messages)
    if n == 0:
        return []
    total = sum(len(m) for m in messages)
    target = max(1, total // max(1, n_batches))
    out, start, acc = [], 0, 0
    sizes = [len(m) for m in messages]
    prev = 0
    for cut in transaction_cuts(messages):
        acc += sum(sizes[prev:cut])
        prev = cut
        if acc >= target and cut < n:
            out.append((start, cut))
            start, acc = cut, 0
    out.append((start, n))
    return out


# ======================================================================================
# decode, replay, compare
# ======================================================================================

class Decoded:
    """The typed output of one capture fed in batches, and how long ``feed()`` took."""

    def __init__(self, messages, lsns, n_batches):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401  imported by the first feed() otherwise (~0.1 s, once)

        from .. import Decoder

        self.n_messages = len(messages)
        self.n_bytes = sum(len(m) for m in messages)
        self.batches = plan_batches(messages, n_batches)
        # the input as a replication reader would hand it over (Arrow), built untimed
        inputs = [(pa.array(messages[a:b], pa.binary()), np.asarray(lsns[a:b], dtype=np.int64))
                  for a, b in self.batches]
        dec = Decoder(events=False, tables=True)
        self.changesets = []
        self.seconds = 0.0
        for arr, lsn in inputs:
            t0 = time.perf_counter()
            cs = dec.feed(arr, lsn=lsn)
            self.seconds += time.perf_counter() - t0
            self.changesets.append(cs)
        self.pending = dec.pending()
        self.catalog = dec.catalog
        self.n_changes = sum(t.num_rows for cs in self.changesets for _, t in cs.table_versions)
        self.n_logical_messages = sum(len(cs.messages) for cs in self.changesets)

    def untyped_columns(self) -> dict:
        """``{"schema.table": {column}}`` of columns of types without a value parser:
        string in text mode, the raw binary value in binary mode (arrays of such types:
        list<string> / list<binary>)."""
        from ..types import K_ARRAY, K_UNKNOWN

        out = collections.defaultdict(set)
        for v in self.catalog.versions():
            for col, ct in zip(v.columns, v.column_types):
                if ct.kind == K_UNKNOWN or (ct.kind == K_ARRAY and ct.elem_kind == K_UNKNOWN):
                    out[v.qualified_name].add(col.name)
        return out


def replay(changesets, defaults):
    """A ``TableImage`` of the changesets; ``(image, error or None, seconds)``.

    A change that does not fit (``ImageError``) is reported, and the image is then rebuilt
    leniently so that the per-table comparison still shows where the damage is.
    """
    from .image import ImageError, TableImage

    t0 = time.perf_counter()
    img = TableImage(defaults)
    error = None
    try:
        for cs in changesets:
            img.apply_changeset(cs)
    except ImageError as exc:
        error = str(exc)
        img = TableImage(defaults, strict=False)
        for cs in changesets:
            img.apply_changeset(cs)
    return img, error, time.perf_counter() - t0


def rows_checksum(rows) -> int:
    """Order-independent checksum of rows: the sum mod 2**64 of a 64-bit BLAKE2b of each
    row's canonical form (``image.freeze``, as the image comparison uses). Equal
    multisets of rows give equal checksums; duplicates count."""
    from ..arrow_values import freeze

    return _checksum_frozen(freeze(r) for r in rows)


def _checksum_frozen(frozen_rows) -> int:
    total = 0
    for f in frozen_rows:
        h = hashlib.blake2b(repr(f).encode("utf-8", "surrogatepass"), digest_size=8)
        total = (total + int.from_bytes(h.digest(), "big")) & 0xFFFF_FFFF_FFFF_FFFF
    return total


def _short(v, limit=60):
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"...({len(s)} chars)"


def _diff_frozen(left, fleft, right, fright, key, what, limit=3) -> list:
    """A few readable differences between two multisets of rows (``[]`` if equal);
    ``fleft``/``fright`` are the rows' ``freeze`` forms."""
    from ..arrow_values import freeze

    cl, cr = collections.Counter(fleft), collections.Counter(fright)
    if cl == cr:
        return []
    by_frozen: dict = {}
    for f, r in zip(fleft + fright, left + right):
        by_frozen.setdefault(f, r)
    missing, extra = list((cl - cr).elements()), list((cr - cl).elements())

    def label(r):
        if key and all(k in r for k in key):
            return ", ".join(f"{k}={_short(r[k], 40)}" for k in key)
        return _short(r, 160)

    out = [f"{len(missing)} row(s) only in {what[0]}, {len(extra)} only in {what[1]}"]
    extra_by_key = collections.defaultdict(list)
    for f in extra:
        r = by_frozen[f]
        extra_by_key[tuple(freeze(r.get(k)) for k in key)].append(r)
    shown = 0
    for f in missing:
        if shown >= limit:
            break
        r = by_frozen[f]
        other = extra_by_key.get(tuple(freeze(r.get(k)) for k in key)) if key else None
        if other:
            o = other.pop(0)
            cols = [c for c in r if freeze(r.get(c)) != freeze(o.get(c))]
            out.append(f"[{label(r)}] " + "; ".join(
                f"{c}: {what[0]} {_short(r.get(c))} != {what[1]} {_short(o.get(c))}" for c in cols[:3]))
        else:
            out.append(f"only in {what[0]}: {label(r)}")
        shown += 1
    for rs in extra_by_key.values():
        for r in rs:
            if shown >= limit:
                break
            out.append(f"only in {what[1]}: {label(r)}")
            shown += 1
    return out


class TableResult:
    """One table compared: rows and checksum of each side, and what differs."""

    __slots__ = ("name", "left_rows", "left_sum", "right_rows", "right_sum", "problems")

    def __init__(self, name, left, right, problems, key=(), what=("source", "decoded")):
        from ..arrow_values import freeze

        left, right = list(left), list(right)
        fleft, fright = [freeze(r) for r in left], [freeze(r) for r in right]
        self.name = name
        self.left_rows, self.left_sum = len(left), _checksum_frozen(fleft)
        self.right_rows, self.right_sum = len(right), _checksum_frozen(fright)
        self.problems = list(problems) + _diff_frozen(left, fleft, right, fright, key, what)

    @property
    def ok(self):
        return not self.problems


def compare_with_truth(truth, img, binary) -> TableResult:
    """One table: PostgreSQL's rows (``groundtruth.TableTruth``) against the image."""
    import pyarrow as pa

    name = truth.name
    source = truth.rows[binary]
    decoded = img.rows(name) if name in img else []
    problems = []
    if name in img:
        cols = [c.name for c in truth.columns]
        if img.columns(name) != cols:
            problems.append(f"columns {img.columns(name)} != PostgreSQL's {cols}")
        types = img.column_types(name)
        for c in truth.columns:
            want, got = c.spec.arrow_type(binary), types.get(c.name)
            # a type without a binary parser (or an array of one) is string (list<string>)
            # in a batch that had no binary value of it
            unknown = c.spec.kind == "unknown" or (c.spec.kind == "array" and c.spec.elem.kind == "unknown")
            if got != want and not (unknown and binary and got in (pa.string(), pa.list_(pa.string()))):
                problems.append(f"column {c.name}: Arrow type {got}, documented {want}")
    key = truth.key_columns if truth.replident in ("d", "i") else ()
    return TableResult(name, source, decoded, problems, key)


# ======================================================================================
# output
# ======================================================================================

def _marks(out):
    enc = getattr(out, "encoding", None) or "ascii"
    try:
        "✓✗→".encode(enc)
        return "✓", "✗"
    except (UnicodeEncodeError, LookupError):
        return "ok", "MISMATCH"


def _mb(n):
    return n / 1e6


def _message_counts(messages) -> str:
    order = "BCORYIUDTMSEcAbPKrp"
    counts = collections.Counter(chr(m[0]) for m in messages)
    keys = sorted(counts, key=lambda t: (order.index(t) if t in order else 99, t))
    return "  ".join(f"{t} {counts[t]:,}" for t in keys)


def _print_decode(out, d: Decoded, mode):
    secs = max(d.seconds, 1e-9)
    print(f"decode     {d.n_messages:,} messages, {_mb(d.n_bytes):.2f} MB of pgoutput ({mode}) in "
          f"{len(d.batches)} Decoder.feed() calls cut at transaction boundaries", file=out)
    print(f"           typed tables only: {d.seconds * 1e3:.1f} ms = {_mb(d.n_bytes) / secs:,.0f} MB/s, "
          f"{d.n_messages / secs:,.0f} messages/s, {d.n_changes / secs:,.0f} rows/s "
          f"({d.n_changes:,} rows, {d.n_logical_messages} logical messages)", file=out)
    pend = d.pending
    if any(pend.values()):
        print(f"           held back at the end (not committed): {pend}", file=out)


def _print_typed(out, changesets, name):
    """The Arrow types of one decoded table, wrapped."""
    import textwrap

    from .image import META_COLUMNS, TRAILING_COLUMNS

    schema = None
    for cs in changesets:
        for version, table in cs.table_versions:
            if version.qualified_name == name:
                schema = table.schema  # the last version
    if schema is None:
        return
    data = schema.names[len(META_COLUMNS):len(schema.names) - len(TRAILING_COLUMNS)]
    cols = ", ".join(f"{c} {schema.field(c).type}" for c in data)
    head = (f"typed      {name}: a pa.Table with {len(data)} typed columns (+ "
            f"{len(META_COLUMNS) + len(TRAILING_COLUMNS)} metadata columns): ")
    print(textwrap.fill(head + cols, width=110, subsequent_indent=" " * 11), file=out)


def _print_table(out, results, headers):
    ok_mark, bad_mark = _marks(out)
    w = max([len(headers[0])] + [len(r.name) for r in results])
    print(file=out)
    print(f"{headers[0]:<{w}}  {headers[1]:>24}   {headers[2]:>24}   match", file=out)
    print(f"{'':<{w}}  {'rows':>7} {'checksum':>16}   {'rows':>7} {'checksum':>16}", file=out)
    for r in results:
        print(f"{r.name:<{w}}  {r.left_rows:>7,} {r.left_sum:016x}   {r.right_rows:>7,} "
              f"{r.right_sum:016x}   {ok_mark if r.ok else bad_mark}", file=out)
    bad = [r for r in results if not r.ok]
    for r in bad:
        print(f"{bad_mark} {r.name}:", file=out)
        for p in r.problems[:8]:
            print(f"    {p}", file=out)
        if len(r.problems) > 8:
            print(f"    ... and {len(r.problems) - 8} more", file=out)
    return bad


# ======================================================================================
# with PostgreSQL
# ======================================================================================

def _protocol_for(version_num):
    """Highest pgoutput protocol and the options that go with it (docs/protocol.md §1.2)."""
    if version_num >= 160000:
        return 4, "parallel"
    if version_num >= 150000:
        return 3, True
    if version_num >= 140000:
        return 2, True
    return 1, None


def _preflight(cur):
    cur.execute("SELECT current_setting('wal_level'), current_setting('server_version_num')::int, "
                "current_setting('server_version'), current_setting('max_prepared_transactions')::int, "
                "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user), current_database()")
    wal_level, version_num, version, max_prepared, superuser, db = cur.fetchone()
    if wal_level != "logical":
        raise DemoError(
            f"this server runs with wal_level = {wal_level}; logical decoding needs "
            "wal_level = logical. Run `ALTER SYSTEM SET wal_level = logical;` as a superuser "
            "and restart PostgreSQL, then try again.")
    if version_num < 100000:
        raise DemoError(f"PostgreSQL {version} has no pgoutput (10 or later is needed)")
    for sch in (SCHEMA, SCHEMA + "_priv"):
        cur.execute("SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace "
                    "WHERE nspname = %s", (sch,))
        row = cur.fetchone()
        if row is not None and row[0] != SCHEMA_MARK:
            raise DemoError(f"schema {sch} already exists and was not created by this demo; "
                            "drop or rename it (the demo drops and recreates its schemas)")
    return version_num, version.split()[0], max_prepared, bool(superuser), db


def _run_server(args, out) -> int:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        raise DemoError("psycopg2 is needed to talk to PostgreSQL: "
                        "pip install 'pgoutput-fast[capture]'") from None
    workdir = tempfile.mkdtemp(prefix="pgoutput_fast_demo_")
    try:
        return _run_server_in(args, out, workdir)
    finally:
        if not args.keep or not os.listdir(workdir):
            shutil.rmtree(workdir, ignore_errors=True)


def _run_server_in(args, out, workdir) -> int:
    import secrets

    import psycopg2

    from .. import sqlcapture
    from . import workload
    from .truth import PgCatalog, published_tables, table_truth
    from ..local_server import PostgresServer

    binary = not args.text
    t_start = time.perf_counter()
    server = None
    conn = cap = None
    live = None
    created = False
    origin_existed = True
    pub = slot = None
    print("pgoutput-fast demo", file=out)
    try:
        if args.dsn:
            dsn = args.dsn
            where = "the server given by --dsn"
        else:
            t0 = time.perf_counter()
            server = PostgresServer()
            try:
                server.start()
            except Exception as exc:
                raise DemoError(f"could not start a private PostgreSQL: {exc}") from None
            dsn = server.dsn()
            where = (f"a private cluster on {server.host}:{server.port} ({server.bindir}), "
                     f"started in {time.perf_counter() - t0:.1f} s")
        try:
            conn = psycopg2.connect(dsn)
            cap = psycopg2.connect(dsn)
        except psycopg2.Error as exc:
            raise DemoError(f"cannot connect to PostgreSQL: {str(exc).strip()}") from None
        conn.autocommit = cap.autocommit = True
        with conn.cursor() as cur:
            version_num, version, max_prepared, superuser, db = _preflight(cur)
        print(f"server     PostgreSQL {version} (database {db}), {where}", file=out)

        proto, streaming = _protocol_for(version_num)
        messages_opt = version_num >= 140000
        if binary and version_num < 140000:
            print("           binary mode needs PostgreSQL 14+: capturing in text mode", file=out)
            binary = False
        two_phase = proto >= 3 and max_prepared > 0
        use_origin = superuser

        suffix = f"{os.getpid()}_{secrets.token_hex(3)}"
        pub = f"pgoutput_fast_demo_pub_{suffix}"
        slot = f"pgoutput_fast_demo_{suffix}"
        try:
            created = True  # from here on, clean up the schemas, the publication, the slot
            workload.create_schema(conn, SCHEMA, publication=pub)
            for sch in (SCHEMA, SCHEMA + "_priv"):
                workload._exec(conn, f"COMMENT ON SCHEMA {sch} IS %s", (SCHEMA_MARK,))
            sqlcapture.session_settings(cap)   # the text forms PostgreSQL's rows are read in
            if use_origin:
                origin_existed = bool(workload._exec(
                    conn, "SELECT 1 FROM pg_replication_origin WHERE roname = %s", (workload.ORIGIN_NAME,)))
        except psycopg2.Error as exc:
            raise DemoError(f"could not set up the demo schema and publication: "
                            f"{str(exc).strip()} (the demo needs a superuser, or a role that may "
                            "create publications and replication slots)") from None

        # -- the rows the tables hold before the slot exists ---------------------------
        rows = args.rows
        preload_rows = max(500, rows // 10)
        t0 = time.perf_counter()
        try:
            loaded = workload.run_preload(conn, SCHEMA, rows=preload_rows, seed=5)
        except psycopg2.Error as exc:
            raise DemoError(f"loading the first rows failed: {str(exc).strip()}") from None
        print(f"preload    {sum(loaded.values()):,} rows in every table before the slot exists: "
              f"every type and edge value ({loaded['alltypes']:,} rows), TOAST, NULLs, each replica "
              f"identity, each partition ... {time.perf_counter() - t0:.1f} s", file=out)

        # -- capture: a new slot, its snapshot copied, then the stream ----------------
        capdir = os.path.join(workdir, "capture")
        cfg = _capture_config(dsn, slot, pub, capdir, proto, binary, messages_opt, streaming,
                              two_phase, rows)
        t0 = time.perf_counter()
        live = _LiveCapture(cfg, dsn)
        live.start()
        point = live.wait_snapshot(("copying", "done"), "the slot's creation")
        print(f"capture    pgoutput-fast capture --snapshot initial, in this process: slot {slot} "
              f"created with an exported snapshot, consistent point {point} ... "
              f"{time.perf_counter() - t0:.1f} s", file=out)

        # -- workload: the first part while the snapshot is being copied --------------
        stream_rows = max(5_000, rows // 4)
        twophase_rows = max(2_000, rows // 10)
        during = [
            ("changes to the preloaded rows: updates (a key, TOAST unchanged and new, a "
             "partition move), deletes under each replica identity",
             lambda: workload.run_preload_changes(conn, SCHEMA)),
            (f"bulk: {rows:,} random rows in transactions of 100, then updates, key changes, deletes",
             lambda: workload.run_bulk(conn, SCHEMA, rows=rows, seed=11)),
        ]
        after = [
            ("basic: every type and edge value, updates/deletes per replica identity, TOAST, "
             "TRUNCATE, schema changes, logical messages, a rolled-back transaction"
             + (", an origin" if use_origin else ""),
             lambda: workload.run_basic(conn, SCHEMA, seed=7, origin=use_origin)),
            (f"large transactions: {stream_rows:,} rows with a savepoint rolled back, "
             f"and {stream_rows // 2:,} rows aborted" + (" (streamed)" if streaming else ""),
             lambda: workload.run_streaming(conn, SCHEMA, rows=stream_rows, origin=use_origin)),
        ]
        if max_prepared > 0:
            after.append((f"two-phase: prepared + committed, prepared + rolled back, {twophase_rows:,} "
                          "rows prepared" + ("" if two_phase else " (decoded as ordinary commits)"),
                          lambda: workload.run_two_phase(conn, SCHEMA, rows=twophase_rows,
                                                         origin=use_origin)))
        t0 = time.perf_counter()
        _run_steps(out, "workload", "(during the copy)", during)
        # DDL and TRUNCATE wait for the copy: they are not MVCC-safe for a snapshot
        # that is still being read (docs/demo.md)
        snap = live.wait_snapshot(("done",), "the end of the snapshot")
        _run_steps(out, "", "(after the snapshot)", after)
        if max_prepared <= 0:
            print("           (max_prepared_transactions = 0 on this server: no two-phase workload)",
                  file=out)
        print(f"{'':<10} ... {time.perf_counter() - t0:.1f} s", file=out)

        # -- the stop: everything the workload wrote is durable and confirmed ---------
        t0 = time.perf_counter()
        end = sqlcapture.wait_for_wal_flush(conn)
        result = live.finish(end)
        t_stop = time.perf_counter() - t0
        state = live.state()
        summary = state.snapshot["summary"]

        # -- ground truth, while the server is up -------------------------------------
        t0 = time.perf_counter()
        with cap.cursor() as cur:
            cat = PgCatalog(cur)
            truths = [table_truth(cur, s, t, cat) for s, t in published_tables(cur, pub) if s == SCHEMA]
        t_truth = time.perf_counter() - t0
    finally:
        if live is not None:
            live.abandon()
        _cleanup_server(out, conn, cap, server, created, pub, slot, origin_existed, dsn_mode=bool(args.dsn))

    # -- the capture directory, as any reader sees it -----------------------------------
    lsns, messages, nseg = _read_directory(capdir)
    opts = [f"proto_version {proto}", "binary" if binary else "text"]
    if streaming:
        opts.append(f"streaming {'parallel' if streaming == 'parallel' else 'on'}")
    if two_phase:
        opts.append("two_phase on")
    if messages_opt:
        opts.append("messages on")
    _print_snapshot(out, summary, snap)
    print(f"{'stream':<10} until {format_lsn(end)}, durable and confirmed {t_stop:.1f} s after the "
          f"workload's last commit", file=out)
    print(f"{'directory':<10} {len(messages):,} messages ({', '.join(opts)}) in {nseg} Parquet segments "
          f"(manifest, checkpoint), {_mb(_dir_bytes(capdir)):.2f} MB, "
          f"{result.transactions:,} transactions", file=out)
    print(f"{'':<10} {_message_counts(messages)}", file=out)

    # -- decode, replay, compare ---------------------------------------------------
    d = Decoded(messages, lsns, args.batches)
    _print_decode(out, d, "binary" if binary else "text")
    _print_typed(out, d.changesets, f"{SCHEMA}.alltypes")
    snap_problems = _check_snapshot_ops(out, d, summary, snap)
    img, replay_error, t_replay = replay(d.changesets, added_column_defaults(SCHEMA))
    print(f"replay     {img.applied:,} changes applied to a TableImage in {t_replay:.1f} s; "
          f"PostgreSQL's rows read in {t_truth:.1f} s", file=out)
    results = [compare_with_truth(t, img, binary) for t in truths]
    right = "decoded + replayed"
    if getattr(args, "spark", False):
        results = _spark_pipeline(args, out, workdir, capdir, binary, d, truths, results)
        right = "Delta table (Spark)"
    bad = _print_table(out, results, ("table", "PostgreSQL (SELECT)", right))
    print(file=out)
    print("checksum: sum mod 2^64 of BLAKE2b-64 over each row's canonical values "
          "(arrow_values.freeze); match = same columns, Arrow types and rows", file=out)
    ok_mark, bad_mark = _marks(out)
    for p in snap_problems:
        print(f"{bad_mark} snapshot: {p}", file=out)
    if replay_error:
        print(f"{bad_mark} replay error: {replay_error}", file=out)
    if bad or replay_error or snap_problems:
        print(f"{bad_mark} {len(bad)} of {len(results)} tables differ", file=out)
    else:
        print(f"{ok_mark} all {len(results)} tables match", file=out)
    if args.keep:
        print(f"capture kept: {capdir}\n  pgoutput-fast inspect {capdir} | less", file=out)
    print(f"total {time.perf_counter() - t_start:.1f} s", file=out)
    return 1 if (bad or replay_error or snap_problems) else 0


def _run_steps(out, head, note, steps):
    import psycopg2

    for i, (label, step) in enumerate(steps):
        print(f"{head if i == 0 else '':<10} {label}" + (f" {note}" if i == 0 else ""), file=out)
        out.flush()
        try:
            step()
        except psycopg2.Error as exc:
            raise DemoError(f"the workload failed: {str(exc).strip()}") from None


def _capture_dsn(dsn):
    """``dsn`` with ``logical_decoding_work_mem`` set for capture's sessions (the
    walsender's): the bulk load's small transactions arrive whole, the large ones are
    streamed."""
    from psycopg2.extensions import make_dsn, parse_dsn

    opts = parse_dsn(dsn).get("options") or ""
    return make_dsn(dsn, options=(opts + " " if opts else "")
                    + f"-c logical_decoding_work_mem={DECODING_WORK_MEM}")


def _capture_config(dsn, slot, pub, capdir, proto, binary, messages_opt, streaming, two_phase,
                    rows):
    from ..capture import CaptureConfig

    return CaptureConfig(
        _capture_dsn(dsn), slot, [pub], capdir, create_slot=True, snapshot="initial",
        proto_version=str(proto), binary=binary, messages=messages_opt,
        streaming=("parallel" if streaming == "parallel" else "on") if streaming else None,
        two_phase=two_phase,
        # about 16 segments at any --rows (~850 bytes of stream per bulk row): the
        # decoder and Spark read several, as they would a long capture
        segment_bytes=max(1 << 20, rows * 56), segment_seconds=60.0,
        progress="off", max_reconnects=0, slot_busy_timeout=5.0)


class _LiveCapture:
    """``capture.run_capture`` in a thread of this process, as ``pgoutput-fast capture
    --create-slot --snapshot initial`` would run it, stopped at an LSN."""

    #: how long the demo waits for the snapshot and for the end of the stream
    TIMEOUT = 600.0

    def __init__(self, cfg, dsn):
        import threading

        self.cfg = cfg
        self.dsn = dsn
        self.stop = threading.Event()
        self.result = None
        self.error = None
        self.thread = threading.Thread(target=self._run, name="pgoutput-fast demo capture",
                                       daemon=True)

    def _run(self):
        from ..capture import run_capture

        try:
            self.result = run_capture(self.cfg, self.stop)
        except BaseException as exc:
            self.error = exc

    def start(self):
        self.thread.start()

    def state(self):
        from ..capture import load_state

        try:
            return load_state(self.cfg.out)
        except Exception:      # being replaced, or not there yet
            return None

    def _failed(self, what):
        from ..capture.dsn import redact

        exc = self.error
        if exc is None:
            return DemoError(f"the capture stopped before {what} (no error reported)")
        text = "; ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
        hint = ""
        if self.result is None and not os.path.exists(os.path.join(self.cfg.out, "checkpoint.json")):
            hint = (" (capture streams over a replication connection: the server needs free "
                    "max_wal_senders and max_replication_slots, and pg_hba.conf must let the "
                    "role connect for replication)")
        return DemoError(f"the capture failed before {what}: {redact(text, self.dsn)}{hint}")

    def wait_snapshot(self, states, what):
        """Wait until the checkpoint's snapshot state is one of ``states`` (``what``
        that means, for messages); returns the consistent point (text) or the snapshot
        record (``done``)."""
        from ..lsn import format_lsn

        deadline = time.monotonic() + self.TIMEOUT
        while True:
            st = self.state()
            snap = (st.snapshot if st is not None else None) or {}
            if snap.get("state") in states:
                return snap if states == ("done",) else format_lsn(snap["consistent_point"])
            if not self.thread.is_alive():
                raise self._failed(what)
            if time.monotonic() > deadline:
                raise DemoError(f"the capture did not reach {what} in {self.TIMEOUT:.0f} s")
            time.sleep(0.01)

    def finish(self, until_lsn):
        """Stop once everything up to ``until_lsn`` is durable and confirmed."""
        self.cfg.until_lsn = until_lsn
        self.thread.join(self.TIMEOUT)
        if self.thread.is_alive():
            raise DemoError(f"the capture did not reach the end of the workload in {self.TIMEOUT:.0f} s")
        if self.error is not None or self.result is None:
            raise self._failed("the end of the workload")
        return self.result

    def abandon(self):
        """After a failure: stop the capture (it confirms nothing more) and wait for it."""
        if self.thread.is_alive():
            self.stop.set()
            self.thread.join(60)


def _read_directory(capdir):
    """``(lsns, messages, segments)`` of a capture directory, through ``iter_segments``
    (every segment verified against the manifest and checkpoint)."""
    from ..capture import iter_segments

    lsns, messages, n = [], [], 0
    for table in iter_segments(capdir, columns=("lsn", "data")):
        lsns += table.column("lsn").to_pylist()
        messages += table.column("data").to_pylist()
        n += 1
    return lsns, messages, n


def _dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def _print_snapshot(out, summary, snap):
    """What the initial snapshot copied, and what the workload did meanwhile."""
    tables = summary["tables"]
    nonempty = sum(1 for t in tables.values() if t["rows"])
    print(f"{'snapshot':<10} {summary['rows']:,} rows of {nonempty} tables ({len(tables)} published) copied "
          f"in {summary['seconds']:.2f} s inside the slot's exported snapshot, consistent point "
          f"{summary['consistent_point']}; {summary['transactions']:,} synthetic transactions "
          f"(xid 0, committed below it) in {summary['segments']} segment{'' if summary['segments'] == 1 else 's'}", file=out)


def _check_snapshot_ops(out, d, summary, snap) -> list:
    """The decoded rows of op 'r' are the snapshot's, all below the consistent point;
    every streamed row is above it. Prints the counts, and how many streamed
    transactions committed while the copy ran; returns the problems."""
    import datetime

    from ..lsn import parse_lsn

    point = parse_lsn(summary["consistent_point"])
    ops: collections.Counter = collections.Counter()
    per_table: collections.Counter = collections.Counter()
    misplaced = 0
    utc = datetime.timezone.utc
    started = datetime.datetime.fromtimestamp(snap["started"], utc)
    finished = datetime.datetime.fromtimestamp(snap["finished"], utc)
    during = set()
    for cs in d.changesets:
        for version, t in cs.table_versions:
            op = t.column("_op").to_pylist()
            clsn = t.column("_commit_lsn").to_pylist()
            cts = t.column("_commit_ts").to_pylist()
            ops.update(op)
            for o, c, ts in zip(op, clsn, cts):
                if (o == "r") != (c < point):
                    misplaced += 1
                elif o == "r":
                    per_table[version.qualified_name] += 1
                elif ts is not None and started <= ts <= finished:
                    during.add(c)
    order = "rcud"
    print(f"{'ops':<10} " + "  ".join(f"{o} {ops[o]:,}" for o in sorted(
        ops, key=lambda o: (order.index(o) if o in order else 9, o)))
        + " (r: a row of the snapshot, ahead of every streamed change); "
        f"{len(during):,} streamed transactions committed while the copy ran", file=out)
    problems = []
    if misplaced:
        problems.append(f"{misplaced:,} rows on the wrong side of the consistent point "
                        f"{summary['consistent_point']} (op 'r' must be below it, every other op above)")
    want = {name: t["rows"] for name, t in summary["tables"].items() if t["rows"]}
    if dict(per_table) != want:
        diff = sorted(n for n in set(want) | set(per_table) if want.get(n, 0) != per_table.get(n, 0))
        problems.append("decoded op 'r' rows differ from what the snapshot copied: " + ", ".join(
            f"{n} {per_table.get(n, 0):,} decoded, {want.get(n, 0):,} copied" for n in diff[:5]))
    return problems


def _spark_pipeline(args, out, workdir, segdir, binary, d, truths, replay_results):
    """The capture directory -> local Spark: decode + apply -> Delta tables, compared
    with PostgreSQL."""
    try:
        import pyspark
    except ImportError:
        raise DemoError("the Spark pipeline needs pyspark: pip install 'pgoutput-fast[spark]' "
                        "(or run with --no-spark)") from None
    from ..delta import DeltaImage
    from ..spark import get_spark
    from ..spark.pipeline import run_pipeline

    out.flush()
    t0 = time.perf_counter()
    spark = get_spark(args.master, "pgoutput-fast demo")
    t_start = time.perf_counter() - t0
    print(f"spark      PySpark {pyspark.__version__}, master {args.master} "
          f"({spark.sparkContext.defaultParallelism} cores), started in {t_start:.1f} s", file=out)
    out.flush()
    snapdir = os.path.join(workdir, "tables")
    try:
        res = run_pipeline(spark, segdir, snapdir, column_defaults=added_column_defaults(SCHEMA),
                           events_rate=True)
        # identity mapInArrow over the same messages: Spark's own cost, for scale
        from ..spark.decode import read_segments

        t1 = time.perf_counter()
        raw = read_segments(spark, segdir)
        raw.mapInArrow(lambda it: it, raw.schema).write.format("noop").mode("overwrite").save()
        t_identity = time.perf_counter() - t1
        img = DeltaImage(snapdir, res["catalog"], binary)
        results = [compare_with_truth(t, img, binary) for t in truths]
    finally:
        spark.stop()
    n = res["messages"]
    ev_s = max(res.get("events_seconds", 0.0), 1e-9)
    ap_s = max(res["apply_seconds"], 1e-9)
    print(f"pipeline   read_segments + build_catalog: {res['groups']} segment groups, "
          f"{res['read_seconds']:.1f} s", file=out)
    print(f"{'':<10} identity mapInArrow over the messages: {n / max(t_identity, 1e-9):,.0f} messages/s; "
          f"decode (change events) in mapInArrow: {n / ev_s:,.0f} messages/s, "
          f"{d.n_changes / ev_s:,.0f} rows/s", file=out)
    print(f"{'':<10} decode typed + apply_changes, {len(res['tables'])} tables: {ap_s:.1f} s = "
          f"{res['changes'] / ap_s:,.0f} changes/s (Spark jobs per table dominate at this size)",
          file=out)
    print(f"{'':<10} tables: one Delta Lake table per table"
          + (f" in {snapdir}" if args.keep else ""), file=out)
    # a table is right only if the in-process replay agrees too
    by_name = {r.name: r for r in replay_results}
    for r in results:
        other = by_name.get(r.name)
        if other is not None and not other.ok:
            r.problems += [f"in-process replay: {p}" for p in other.problems]
    return results


def _drop_slot(cap, slot, timeout=10.0):
    """Drop the demo's slot once no walsender holds it; a problem (text) or None."""
    deadline = time.monotonic() + timeout
    try:
        with cap.cursor() as cur:
            while True:
                cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
                row = cur.fetchone()
                if row is None:
                    return None
                if row[0] is None:
                    cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                    return None
                if time.monotonic() > deadline:
                    cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    deadline = time.monotonic() + timeout
                time.sleep(0.05)
    except Exception as exc:
        return f"SELECT pg_drop_replication_slot('{slot}'): {str(exc).strip()}"


def _cleanup_server(out, conn, cap, server, created, pub, slot, origin_existed, dsn_mode):
    """Drop what the demo made (--dsn), close the sessions, stop a private server."""
    problems = []
    if dsn_mode and conn is not None and created:
        from . import workload

        stmts = [f"DROP PUBLICATION IF EXISTS {pub}",
                 f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE",
                 f"DROP SCHEMA IF EXISTS {SCHEMA}_priv CASCADE"]
        if not origin_existed:
            stmts.append(f"SELECT pg_replication_origin_drop('{workload.ORIGIN_NAME}') "
                         f"WHERE EXISTS (SELECT 1 FROM pg_replication_origin "
                         f"WHERE roname = '{workload.ORIGIN_NAME}')")
        for sql in stmts:
            try:
                workload._exec(conn, sql)
            except Exception as exc:
                problems.append(f"{sql}: {str(exc).strip()}")
    if dsn_mode and cap is not None and slot is not None:
        # capture's slot is permanent: its walsender exits just after capture returns
        problem = _drop_slot(cap, slot)
        if problem:
            problems.append(problem)
    for c in (conn, cap):
        if c is not None:
            try:
                c.close()
            except Exception:
                pass
    if server is not None:
        server.stop()
    if problems:
        print("cleanup problems (drop these yourself):\n  " + "\n  ".join(problems), file=sys.stderr)


# ======================================================================================
# without PostgreSQL: the bundled captures
# ======================================================================================

def _run_fixtures(args, out, reason) -> int:
    from ..framing import read_capture

    t_start = time.perf_counter()
    print("pgoutput-fast demo", file=out)
    fixtures_dir = getattr(args, "fixtures_dir", None) or FIXTURES_DIR
    missing = [n for _, a, b in FIXTURE_PAIRS for n in (a, b)
               if not os.path.exists(os.path.join(fixtures_dir, n + ".pgoc"))]
    if missing:
        why = f"{reason}, and the" if reason else "The"
        raise DemoError(
            f"{why} bundled capture files are not available: they live in tests/fixtures of "
            f"a source checkout and are not part of an installed wheel (looked in "
            f"{fixtures_dir}). Install PostgreSQL, use --dsn with your own server, or run "
            "the demo from a git clone.")
    if reason:
        print(f"note       {reason}:", file=out)
        print(f"{'':<10} decoding the captures bundled in tests/fixtures instead (PostgreSQL 15, "
              "real server output)", file=out)
    mode = "text" if args.text else "binary"
    print("check      the text-mode and binary-mode captures of each workload must decode to "
          "the same tables", file=out)
    defaults = added_column_defaults(FIXTURE_SCHEMA)
    results, errors, notes = [], [], set()
    all_msgs, total_secs, total_changes, total_batches = 0, 0.0, 0, 0
    total_bytes = 0
    for label, text_name, bin_name in FIXTURE_PAIRS:
        images = {}
        untyped = {}
        for name in (text_name, bin_name):
            lsns, messages = read_capture(os.path.join(fixtures_dir, name + ".pgoc"))
            d = Decoded(messages, lsns, args.batches)
            if (name == bin_name) != args.text:  # throughput of the selected mode
                all_msgs += d.n_messages
                total_bytes += d.n_bytes
                total_secs += d.seconds
                total_changes += d.n_changes
                total_batches += len(d.batches)
            untyped = d.untyped_columns()
            img, err, _ = replay(d.changesets, defaults)
            if err:
                errors.append(f"{name}: {err}")
            images[name] = img
        ti, bi = images[text_name], images[bin_name]
        for table in sorted(set(ti.table_names()) | set(bi.table_names())):
            # types without a value parser are string in text mode, binary in binary mode
            same = [c for c in ti.columns(table) if c in bi.columns(table) and c not in untyped[table]]
            skipped = [c for c in ti.columns(table) if c not in same]
            left = [{c: r.get(c) for c in same} for r in ti.rows(table)]
            right = [{c: r.get(c) for c in same} for r in bi.rows(table)]
            problems = []
            if ti.columns(table) != bi.columns(table):
                problems.append(f"columns {ti.columns(table)} (text) != {bi.columns(table)} (binary)")
            results.append(TableResult(f"{label:<13}{table}", left, right, problems,
                                       ti.key_columns(table), what=("text", "binary")))
            if skipped:
                notes.add(f"{table}: {', '.join(skipped)}")
    print(f"decode     {all_msgs:,} messages, {_mb(total_bytes):.2f} MB of pgoutput ({mode} captures) "
          f"in {total_batches} Decoder.feed() calls cut at transaction boundaries", file=out)
    secs = max(total_secs, 1e-9)
    print(f"           typed tables only: {total_secs * 1e3:.1f} ms = {_mb(total_bytes) / secs:,.0f} MB/s, "
          f"{all_msgs / secs:,.0f} messages/s, {total_changes / secs:,.0f} rows/s "
          f"({total_changes:,} rows; small captures, so these figures are rough)", file=out)
    bad = _print_table(out, results, ("capture       table", "text capture", "binary capture"))
    ok_mark, bad_mark = _marks(out)
    print(file=out)
    if notes:
        print(f"not compared (types without a value parser, e.g. enums: text in text mode, "
              f"raw bytes in binary mode): {'; '.join(sorted(notes))}", file=out)
    for e in errors:
        print(f"{bad_mark} replay error: {e}", file=out)
    if bad or errors:
        print(f"{bad_mark} {len(bad)} of {len(results)} tables differ between text and binary mode", file=out)
    else:
        print(f"{ok_mark} all {len(results)} tables agree between text and binary mode "
              "(no server, so not compared with PostgreSQL's rows)", file=out)
    print(f"total {time.perf_counter() - t_start:.1f} s", file=out)
    return 1 if (bad or errors) else 0
