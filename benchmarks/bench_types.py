"""What each column type costs: one table per type, the same rows, against an int8 column.

Corpus: real pgoutput from a private PostgreSQL 15 (built on first use, cached beside the
other workloads as ``types-<type>-<mode>-<rows>.pgoc``): for each type a table
``(id int8 PRIMARY KEY, v <type>)`` of ``ROWS`` inserts, 1,000 per transaction,
protocol 1, text and binary mode. The values are what such columns hold in production
(a uuid key, a small jsonb document, an unconstrained numeric, dates, timestamps with
microseconds, a two-element text array, a 16-byte bytea digest, ...).

Each timed run (median of 9) is a new Decoder over a whole table in one ``feed`` (input in
memory as a ``pa.BinaryArray``), after three untimed ones: ``typed`` = ``Decoder(events=False)``,
``events`` = ``Decoder(tables=False)``. The notes give nanoseconds per row and, the
same table with an int8 ``v`` being the baseline of the same run, what the type's value
costs over an int8 value: that is what a column of the type adds to a row of any table.

    pytest benchmarks/bench_types.py --benchmark-only
"""

import os
import sys

import numpy as np
import pytest

from benchutil import NOTES, RESULTS, record
from pgoutput_fast.bench import corpus
from pgoutput_fast.decoder import Decoder

ROWS = int(os.environ.get("PGOUTPUT_FAST_TYPES_ROWS", "100000"))

#: name -> (SQL type, the value of row g)
TYPES = {
    "int8": ("int8", "g * 7"),
    "int2": ("int2", "(g % 1000)::int2"),
    "oid": ("oid", "(g % 100000)::oid"),
    "uuid": ("uuid", "md5(g::text)::uuid"),
    "jsonb": ("jsonb", "jsonb_build_object('k', g, 'name', 'item-' || g, 'tags', jsonb_build_array('a', 'b'))"),
    "numeric": ("numeric", "round((g * 1.2345)::numeric, 4)"),
    "date": ("date", "date '2024-01-01' + (g % 400)::int4"),
    "timestamptz": ("timestamptz", "timestamptz '2024-01-01 00:00:00+00' + (g * 1234567 || ' microseconds')::interval"),
    "time": ("time", "time '10:00' + (g % 1000 || ' seconds')::interval"),
    "interval": ("interval", "(g % 100 || ' minutes')::interval"),
    "real": ("real", "(g / 3.0)::real"),
    "varchar": ("varchar(200)", "repeat('v', 20 + (g % 30)::int4)"),
    "char8": ("char(8)", "'c' || (g % 100)"),
    "bytea": ("bytea", "decode(md5(g::text), 'hex')"),
    "inet": ("inet", "('10.0.' || (g % 256) || '.' || (g % 200))::inet"),
    "text[]": ("text[]", "ARRAY['x' || g, 'y']"),
    "int8[]": ("int8[]", "ARRAY[g, g + 1, g + 2]::int8[]"),
}
OUTPUTS = {"typed": dict(events=False), "events": dict(tables=False)}


def _path(name, mode):
    return os.path.join(corpus.CACHE, f"types-{name.replace('[]', '_array')}-{mode}-{ROWS}.pgoc")


def _build():
    """Capture the tables whose files are missing (one server for all of them)."""
    from pgoutput_fast.local_server import PostgresServer
    from pgoutput_fast.sqlcapture import session_settings, wait_for_wal_flush

    todo = [n for n in TYPES if not all(os.path.exists(_path(n, m)) for m in ("text", "binary"))]
    if not todo:
        return
    os.makedirs(corpus.CACHE, exist_ok=True)
    sys.stderr.write(f"\nbench_types: capturing {len(todo)} tables of {ROWS:,} rows from a private PostgreSQL\n")
    with PostgresServer() as srv:
        conn = srv.connect()
        cur = conn.cursor()
        session_settings(conn)
        for k, name in enumerate(todo):
            sql_type, expr = TYPES[name]
            table, slot = f"bench_type_{k}", f"slot_type_{k}"
            cur.execute(f"DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int8 PRIMARY KEY, v {sql_type})")
            cur.execute(f"DROP PUBLICATION IF EXISTS pub_{table}; CREATE PUBLICATION pub_{table} FOR TABLE {table}")
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            for lo in range(0, ROWS, 1000):
                cur.execute(f"INSERT INTO {table} SELECT g, {expr} FROM generate_series({lo}::int8, {min(ROWS, lo + 1000) - 1}::int8) g")
            wait_for_wal_flush(conn)
            for mode in ("text", "binary"):
                opts = {"proto_version": "1", "publication_names": f"pub_{table}"}
                if mode == "binary":
                    opts["binary"] = "true"
                corpus._copy_capture(conn, slot, opts, _path(name, mode))
            cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            sys.stderr.write(f"bench_types: {name} ({k + 1}/{len(todo)})\n")
        conn.close()


_DATA: dict = {}


def _data(name, mode):
    if (name, mode) not in _DATA:
        from pgoutput_fast.framing import read_capture

        lsns, msgs = read_capture(_path(name, mode), arrow=True)
        _DATA[name, mode] = (np.asarray(lsns), msgs)
    return _DATA[name, mode]


@pytest.fixture(scope="module", autouse=True)
def _captures(request):
    if not request.config.getoption("benchmark_skip", False):
        _build()
    yield
    for output in OUTPUTS:                          # (the notes, once every type has run)
        for mode in ("text", "binary"):
            base = RESULTS.get(f"types/{output}/int8/{mode}")
            for name in TYPES:
                key = f"types/{output}/{name}/{mode}"
                if key not in RESULTS:
                    continue
                per_row = RESULTS[key]["median"] / ROWS * 1e9
                line = f"{key:34s} {per_row:6.1f} ns a row"
                if base and name != "int8":
                    RESULTS[key]["baseline"] = f"types/{output}/int8/{mode}"
                    line += f", {per_row - base['median'] / ROWS * 1e9:+6.1f} ns a value over an int8 column"
                NOTES.append(line)


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("mode", ["text", "binary"])
@pytest.mark.parametrize("output", list(OUTPUTS))
@pytest.mark.benchmark(group="types")
def test_type(benchmark, name, mode, output):
    lsns, msgs = _data(name, mode)
    kw = OUTPUTS[output]
    for _ in range(3):                              # (untimed: the block cache, shaped by the
        Decoder(**kw).feed(msgs, lsns)             # table before, takes a few calls to fit)
    cs = benchmark.pedantic(lambda: Decoder(**kw).feed(msgs, lsns), rounds=9, iterations=1)
    assert cs.num_changes == ROWS
    record(benchmark, f"types/{output}/{name}/{mode}", rows=ROWS)
