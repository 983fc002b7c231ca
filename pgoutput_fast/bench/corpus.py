"""Benchmark corpus: real pgoutput captured from a private PostgreSQL, cached on disk.

    python -m pgoutput_fast.bench.corpus [--rows N]   # build every workload (text + binary)
    python benchmarks/corpus.py [--rows N]             # the same

Workloads (each captured in text and binary mode):
  narrow   10 columns of mixed int/text/timestamp/numeric/bool types:
           inserts, then updates of a third and deletes of a sixth of the rows (protocol 1)
  wide     50 columns (the narrow mix repeated), inserts (protocol 1)
  toast    TOAST-heavy: 4 KiB values stored out of line; inserts, an update of every row
           that leaves them unchanged (sent as 'u'), an update of a quarter that
           rewrites them (protocol 1); a fortieth of the narrow row count
  stream   streamed transactions (protocol 2, streaming on, logical_decoding_work_mem
           64kB): the narrow columns inserted in transactions of 20,000 rows, each with a
           savepoint rolled back (a subtransaction abort inside the stream), a fifth of
           the narrow row count
  oltp1, oltp10, oltp50, oltp1000, oltp100000
           production-like: 1, 10, 50 or 1,000 changes per transaction (and batch jobs:
           100,000, so that the default row count makes two transactions), two tables
           interleaved in each transaction (the narrow table, three changes in four, and
           an 8-column orders table), 70 % inserts, 20 % single-row updates, 10 %
           single-row deletes, one statement per change, committed by a PL/pgSQL
           procedure; a tenth of the narrow row count in changes (protocol 1)
  oltptypes
           oltp50's shape on one table of the types production schemas add to the
           narrow mix (uuid, jsonb, unconstrained numeric, date, text[], timestamptz
           with microseconds, real, bytea, varchar, int2, bool): 50 changes per
           transaction, 70 % inserts, 20 % updates, 10 % deletes (protocol 1)
  oltpstream
           oltp100000's batch job streamed (protocol 2, streaming on,
           logical_decoding_work_mem 64kB): the two tables' changes in runs of about
           three inside each stream segment, committed by Stream Commit
Captured with COPY (SELECT lsn, data FROM pg_logical_slot_peek_binary_changes(...)) so
that millions of messages move quickly; stored as framed capture files (.pgoc) under
benchmarks/.corpus/ in a source checkout, else ~/.cache/pgoutput_fast/corpus (override:
PGOUTPUT_FAST_CORPUS); not committed, rebuilt when missing.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import textwrap
import time

def _default_cache() -> str:
    checkout = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "benchmarks")
    if os.path.isdir(checkout):
        return os.path.join(checkout, ".corpus")
    return os.path.join(os.path.expanduser("~"), ".cache", "pgoutput_fast", "corpus")


CACHE = os.environ.get("PGOUTPUT_FAST_CORPUS") or _default_cache()
DEFAULT_ROWS = int(os.environ.get("PGOUTPUT_FAST_CORPUS_ROWS", "2000000"))

NARROW_COLS = [
    ("a", "int4", "(g %% 100000)::int4"),
    ("b", "int8", "g::int8 * 7919"),
    ("c", "text", "'customer-' || (g %% 50000)::text"),
    ("d", "varchar(32)", "md5(g::text)::varchar(32)"),
    ("e", "timestamptz", "timestamptz '2024-01-01 00:00:00+00' + (g || ' seconds')::interval"),
    ("f", "timestamp", "timestamp '2023-06-01 12:00:00' + (g || ' minutes')::interval"),
    ("h", "numeric(12,2)", "((g %% 1000000)::numeric / 100)"),
    ("i", "bool", "(g %% 3 = 0)"),
    ("j", "float8", "(g::float8 / 7)"),
]


def _workloads(rows):
    """name -> (table, columns, rows, kind)."""
    wide_cols = [(f"{n}{k}", t, e) for k in range(5) for n, t, e in NARROW_COLS][:48]
    return {
        "narrow": ("bench_narrow", NARROW_COLS, rows, "churn"),
        "wide": ("bench_wide", wide_cols, max(rows // 5, 1000), "insert"),
        "toast": ("bench_toast", TOAST_COLS, max(rows // 40, 100), "toast"),
        "stream": ("bench_stream", NARROW_COLS, max(rows // 5, 1000), "stream"),
        **{f"oltp{k}": (f"bench_oltp{k}", NARROW_COLS, max(rows // 10, 1000), f"oltp{k}")
           for k in OLTP_TXN_SIZES},
        "oltpstream": ("bench_oltpstream", NARROW_COLS, max(rows // 10, 1000), "oltp100000"),
        "oltptypes": ("bench_oltptypes", TYPES_COLS, max(rows // 10, 1000), "types50"),
    }


#: workloads captured as streamed transactions (protocol 2, streaming on, a small
#: logical_decoding_work_mem in the decoding session)
STREAMED = ("stream", "oltpstream")


#: changes per transaction of the production-like workloads (oltp1 ... oltp100000)
OLTP_TXN_SIZES = (1, 10, 50, 1000, 100000)
#: the second table of the oltp workloads (the narrow table is the first)
ORDERS_COLS = [
    ("customer", "int4", "(g %% 5000)::int4"),
    ("status", "text", "(ARRAY['new','paid','shipped','returned'])[1 + g %% 4]"),
    ("amount", "numeric(12,2)", "((g * 37) %% 100000)::numeric / 100"),
    ("placed", "timestamptz", "timestamptz '2024-03-01 00:00:00+00' + (g || ' seconds')::interval"),
    ("qty", "int2", "(1 + g %% 9)::int2"),
    ("paid", "bool", "(g %% 4 <> 0)"),
    ("note", "varchar(64)", "'order ' || g::text"),
]


#: the oltptypes workload: one table of the types production schemas use beyond the
#: narrow mix (a uuid key, a jsonb document, an unconstrained numeric, a date, a text
#: array, a timestamptz with microseconds as now() gives it, a real, a bytea digest, a
#: varchar e-mail, an int2, a bool)
TYPES_COLS = [
    ("ext_id", "uuid", "md5(g::text)::uuid"),
    ("doc", "jsonb", "jsonb_build_object('sku', 'item-' || g, 'qty', g %% 7, 'tags', jsonb_build_array('a', 'b'))"),
    ("price", "numeric", "round((g * 1.2345)::numeric, 4)"),
    ("day", "date", "date '2024-01-01' + (g %% 400)::int4"),
    ("tags", "text[]", "ARRAY['t' || (g %% 100), 'new']"),
    ("created", "timestamptz", "timestamptz '2024-01-01 00:00:00+00' + (g * 1234567 || ' microseconds')::interval"),
    ("score", "real", "(g / 3.0)::real"),
    ("digest", "bytea", "decode(md5(g::text), 'hex')"),
    ("email", "varchar(120)", "'user' || g || '@example.com'"),
    ("qty", "int2", "(1 + g %% 9)::int2"),
    ("active", "bool", "(g %% 3 = 0)"),
]


def _types_procedure(table, n, k):
    """SQL of a procedure that runs the oltptypes workload on `table`: n changes, a COMMIT
    after every k, each change as in _oltp_procedure's one table (the update: the
    document, quantity and time)."""
    step = _table_step(table, "na", TYPES_COLS, "doc = doc || '{\"seen\": true}', qty = qty + 1, "
                       "created = created + interval '1.5 seconds'")
    return _procedure(table, n, k, ["na"], step)


def workload_names() -> list:
    return list(_workloads(1000))


#: the TOAST workload: a small column that changes and a 4 KiB one that mostly does not
TOAST_COLS = [
    ("a", "int4", "(g %% 1000)::int4"),
    ("body", "text", "repeat(md5(g::text), 128)"),
]
STREAM_TXN_ROWS = 20_000
STREAM_ROLLED_BACK = 1_000          # rows inserted after the savepoint, then rolled back


def expected_rows(workload: str, rows: int) -> int:
    """Row changes the workload commits (what a correct decoder must produce), from the
    SQL it runs, so that tests can check the corpus and the decode against it."""
    _, _, n, kind = _workloads(rows)[workload]
    if kind == "churn":
        return n + len(range(0, n, 3)) + len(range(1, n, 6))
    if kind == "toast":
        return n + n + len(range(0, n, 4))
    return n           # (oltp: one statement per change, each on one row)


def _table_step(table, counter, cols, update):
    """PL/pgSQL of one change to `table` (`counter`: the rows inserted so far; `op`: i %
    10): an insert during the first 60 changes and when op < 7, an update (`update`,
    its SET list) of the row inserted 3 or 4 before the last when op is 7 or 8, and a
    delete of the row inserted 50 before the last when op is 9 (never a row deleted or
    updated later, so each statement changes one row)."""
    values = ", ".join(e.replace("%%", "%") for _, _, e in cols)
    return f"""IF op < 7 OR {counter} < 60 THEN
  INSERT INTO {table} SELECT g, {values} FROM (SELECT {counter} AS g) s;
  {counter} := {counter} + 1;
ELSIF op < 9 THEN
  UPDATE {table} SET {update} WHERE id = {counter} - 3 - (op - 7);
ELSE
  DELETE FROM {table} WHERE id = {counter} - 50;
END IF;"""


def _procedure(table, n, k, counters, body):
    """SQL of a procedure `table`_run that runs `body` (PL/pgSQL, with `i` and `op` =
    i % 10 set) for i in 0..n-1, with a COMMIT after every k."""
    declare = "".join(f"  {c} int8 := 0;\n" for c in counters)
    body = textwrap.indent(body, "    ")
    return f"""
CREATE OR REPLACE PROCEDURE {table}_run() LANGUAGE plpgsql AS $$
DECLARE
{declare}  op int;
BEGIN
  FOR i IN 0..{n - 1} LOOP
    op := i % 10;
{body}
    IF (i + 1) % {k} = 0 THEN
      COMMIT;
    END IF;
  END LOOP;
  COMMIT;
END $$"""


def _oltp_procedure(table, n, k):
    """SQL of a procedure that runs the oltp workload on `table` and `table`_orders: n
    changes, a COMMIT after every k. Change i goes to the orders table when i % 4 == 3,
    else to the narrow table, each as _table_step says (the update: the narrow table's
    a, c and h; orders' status and amount)."""
    narrow = _table_step(table, "na", NARROW_COLS, "a = a + 1, c = c || '-u', h = h + 1")
    orders = _table_step(f"{table}_orders", "nb", ORDERS_COLS, "status = 'paid', amount = amount + 1")
    narrow, orders = (textwrap.indent(step, "  ") for step in (narrow, orders))
    return _procedure(table, n, k, ["na", "nb"], f"IF i % 4 <> 3 THEN\n{narrow}\nELSE\n{orders}\nEND IF;")


def _run_workload(cur, table, cols, n, kind):
    select = ", ".join(e.replace("%%", "%") for _, _, e in cols)
    if kind.startswith("oltp"):
        cur.execute(_oltp_procedure(table, n, int(kind[4:])))
        cur.execute(f"CALL {table}_run()")     # (autocommit: the procedure commits)
        return
    if kind.startswith("types"):
        cur.execute(_types_procedure(table, n, int(kind[5:])))
        cur.execute(f"CALL {table}_run()")
        return
    if kind == "toast":
        # out of line and uncompressed, so an update that leaves it alone sends 'u'
        cur.execute(f"ALTER TABLE {table} ALTER COLUMN body SET STORAGE EXTERNAL")
    batch = 100_000 if kind != "stream" else STREAM_TXN_ROWS
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        if kind == "stream":
            # one transaction, streamed (work_mem 64kB when decoding); the savepoint's
            # rows are sent inside the stream and discarded by a Stream Abort of the subxact
            cur.execute("BEGIN")             # (the connection is in autocommit mode)
            cur.execute(f"INSERT INTO {table} SELECT g, {select} FROM generate_series({lo}, {hi - 1}) g")
            cur.execute("SAVEPOINT s")
            cur.execute(f"INSERT INTO {table} SELECT g, {select} FROM generate_series({n + lo}, "
                        f"{n + lo + STREAM_ROLLED_BACK - 1}) g")
            cur.execute("ROLLBACK TO SAVEPOINT s")
            cur.execute("COMMIT")
        else:
            cur.execute(f"INSERT INTO {table} SELECT g, {select} FROM generate_series({lo}, {hi - 1}) g")
    if kind == "churn":
        cur.execute(f"UPDATE {table} SET a = a + 1, c = c || '-u', h = h + 1 WHERE id % 3 = 0")
        cur.execute(f"DELETE FROM {table} WHERE id % 6 = 1")
    elif kind == "toast":
        cur.execute(f"UPDATE {table} SET a = a + 1")
        cur.execute(f"UPDATE {table} SET body = repeat(md5((id + 1)::text), 128) WHERE id % 4 = 0")


def path_for(workload: str, mode: str, rows: int) -> str:
    return os.path.join(CACHE, f"{workload}-{mode}-{rows}.pgoc")


def _copy_capture(conn, slot, opts, out_path):
    """Stream (lsn, data) rows with COPY BINARY into a framed capture file."""
    from pgoutput_fast.framing import MAGIC
    from pgoutput_fast.lsn import parse_lsn

    opt_sql = ", ".join(f"'{k}', '{v}'" for k, v in opts.items())
    query = (f"COPY (SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes("
             f"'{slot}', NULL, NULL, {opt_sql})) TO STDOUT WITH (FORMAT binary)")
    tmp = out_path + ".copy"
    with open(tmp, "wb") as f:
        conn.cursor().copy_expert(query, f)
    n = 0
    with open(tmp, "rb") as f, open(out_path + ".tmp", "wb") as out:
        data = f.read()
        out.write(MAGIC)
        pos = 11 + 4
        ext = struct.unpack_from(">I", data, pos)[0]
        pos += 4 + ext
        while True:
            (nf,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if nf == -1:
                break
            (l1,) = struct.unpack_from(">i", data, pos)
            lsn = parse_lsn(data[pos + 4: pos + 4 + l1].decode())
            pos += 4 + l1
            (l2,) = struct.unpack_from(">i", data, pos)
            out.write(struct.pack(">QI", lsn, l2))
            out.write(data[pos + 4: pos + 4 + l2])
            pos += 4 + l2
            n += 1
    os.remove(tmp)
    os.replace(out_path + ".tmp", out_path)
    return n


def build(rows: int = DEFAULT_ROWS, verbose: bool = True, workloads=None) -> None:
    """Capture the workloads (all by default) whose files are missing, printing each
    step on stderr as it starts and ends when verbose."""
    from ..local_server import PostgresServer
    from ..sqlcapture import session_settings, wait_for_wal_flush

    os.makedirs(CACHE, exist_ok=True)
    todo = {w: spec for w, spec in _workloads(rows).items()
            if (workloads is None or w in workloads)
            and not all(os.path.exists(path_for(w, m, rows)) for m in ("text", "binary"))}
    if workloads is not None and set(workloads) - set(_workloads(rows)):
        raise ValueError(f"unknown workloads {sorted(set(workloads) - set(_workloads(rows)))}; "
                         f"known: {', '.join(_workloads(rows))}")
    if not todo:
        return

    def say(line):
        if verbose:
            print(f"corpus: {line}", file=sys.stderr, flush=True)

    say(f"building {', '.join(todo)} ({rows:,} rows) in {CACHE}: starting a private PostgreSQL")
    with PostgresServer(extra_conf={"logical_decoding_work_mem": "1GB",
                                    "max_wal_size": "8GB", "checkpoint_timeout": "30min"}) as srv:
        conn = srv.connect()
        cur = conn.cursor()
        session_settings(conn)
        for workload, (table, cols, n, kind) in todo.items():
            t0 = time.time()
            coldefs = ", ".join(f"{c} {t}" for c, t, _ in cols)
            cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int8 PRIMARY KEY, {coldefs})")
            pub_tables = table
            if kind.startswith("oltp"):
                ocoldefs = ", ".join(f"{c} {t}" for c, t, _ in ORDERS_COLS)
                cur.execute(f"DROP TABLE IF EXISTS {table}_orders; "
                            f"CREATE TABLE {table}_orders (id int8 PRIMARY KEY, {ocoldefs})")
                pub_tables = f"{table}, {table}_orders"
            cur.execute(f"DROP PUBLICATION IF EXISTS pub_{table}; CREATE PUBLICATION pub_{table} FOR TABLE {pub_tables}")
            slot = f"slot_{table}"
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            say(f"{workload}: running the workload ({n:,} rows/changes)")
            _run_workload(cur, table, cols, n, kind)
            wait_for_wal_flush(conn)
            for mode in ("text", "binary"):
                opts = {"proto_version": "1", "publication_names": f"pub_{table}"}
                if workload in STREAMED:
                    opts.update(proto_version="2", streaming="on")
                if mode == "binary":
                    opts["binary"] = "true"
                # the decoding happens in this session: a small work_mem makes it stream
                cur.execute("SET logical_decoding_work_mem = %s", ("64kB" if workload in STREAMED else "1GB",))
                say(f"{workload}/{mode}: capturing")
                count = _copy_capture(conn, slot, opts, path_for(workload, mode, rows))
                size = os.path.getsize(path_for(workload, mode, rows))
                say(f"{workload}/{mode}: {count} messages, {size / 1e6:.0f} MB ({time.time() - t0:.0f} s)")
            cur.execute(f"SELECT pg_drop_replication_slot('{slot}')")
        conn.close()


def load(workload: str, mode: str, rows: int = DEFAULT_ROWS):
    """(lsns, pa.BinaryArray of messages) of a workload, building the corpus if needed."""
    import numpy as np
    import pyarrow as pa

    path = path_for(workload, mode, rows)
    ipc = path[:-5] + ".arrow"
    if os.path.exists(ipc):
        with pa.memory_map(ipc) as source:
            table = pa.ipc.open_file(source).read_all()
        return table.column("lsn").to_numpy(), table.column("data").combine_chunks()
    if not os.path.exists(path):
        build(rows, workloads=[workload])
    with open(path, "rb") as f:
        data = f.read()
    # frames -> offsets without a Python object per message
    from pgoutput_fast.framing import MAGIC

    assert data[:8] == MAGIC
    lsns, starts, lens = [], [], []
    pos, n = 8, len(data)
    mv = memoryview(data)
    while pos < n:
        lsn, ln = struct.unpack_from(">QI", mv, pos)
        lsns.append(lsn)
        starts.append(pos + 12)
        lens.append(ln)
        pos += 12 + ln
    start_arr = np.array(starts, np.int64)
    len_arr = np.array(lens, np.int64)
    idx = np.repeat(start_arr - np.concatenate([[0], np.cumsum(len_arr)[:-1]]), len_arr) + np.arange(len_arr.sum())
    body = np.frombuffer(data, np.uint8)[idx]
    offsets = np.concatenate([[0], np.cumsum(len_arr)]).astype(np.int64)
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(len_arr), [None, pa.py_buffer(offsets), pa.py_buffer(body)])
    if offsets[-1] < 2**31:
        arr = arr.cast(pa.binary())
    lsn_arr = np.array(lsns, np.int64)
    table = pa.table({"lsn": lsn_arr, "data": arr})
    with pa.OSFile(ipc + ".tmp", "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    os.replace(ipc + ".tmp", ipc)
    return lsn_arr, arr


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    ap.add_argument("--workloads", default=None, help="comma-separated (default: all): " + ", ".join(workload_names()))
    args = ap.parse_args()
    build(args.rows, workloads=args.workloads.split(",") if args.workloads else None)
