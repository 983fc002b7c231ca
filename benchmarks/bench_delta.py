"""The Delta sink (``pgoutput_fast.delta``): an incremental MERGE against the full
rewrite the package did before, and apply throughput against an identity pass.

    pytest benchmarks/bench_delta.py            (PGOUTPUT_FAST_BENCH_DELTA_ROWS, default 10 M)

The table: ``PGOUTPUT_FAST_BENCH_DELTA_ROWS`` rows (id int8 key, a int8, b text of 16
chars, c float8, ts timestamptz), written in id order in files of about 32 MB (delta-rs
``target_file_size``). The batches are the decoder's typed changes of that table,
built directly in Arrow (no PostgreSQL: this measures the sink, not the decoder):

* ``delta/merge-hot`` and ``delta/merge-random``: a batch touching 0.1 % of the keys
  (60 % updates, 20 % deletes, 20 % inserts of new keys), the keys among the newest 2 %
  of ids (``hot``: OLTP tables update their recent rows) or anywhere (``random``: every
  file holds one; the worst case for copy-on-write);
* ``delta/rewrite``: the same batch applied as before, reading the whole table and
  writing it all again (the baseline of both);
* ``delta/apply-inserts`` and ``delta/apply-mixed``: 100,000 changes into the table,
  inserts only / the mix above, in rows/s, against ``delta/identity``: the same batch
  converted and written as one Parquet file (the I/O floor of any sink).

Each round starts from a fresh copy of the table. The bytes each MERGE wrote are in
the printed notes, as a fraction of the table's.
"""

import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchutil import NOTES, record

deltalake = pytest.importorskip("deltalake")

ROWS = int(os.environ.get("PGOUTPUT_FAST_BENCH_DELTA_ROWS", 10_000_000))
TABLE = "public.bench"
FILE_SIZE = 32 * 1024 * 1024


def _rows(ids: np.ndarray, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    n = len(ids)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    b = letters[rng.integers(0, len(letters), n * 16)].tobytes()
    offsets = np.arange(0, 16 * (n + 1), 16, dtype=np.int32)
    return {"id": pa.array(ids, pa.int64()), "a": pa.array(rng.integers(0, 1 << 40, n)),
            "b": pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                          pa.py_buffer(b)]),
            "c": pa.array(rng.random(n)),
            "ts": pa.array(rng.integers(1_600_000_000_000_000, 1_700_000_000_000_000, n),
                           pa.timestamp("us", tz="UTC"))}


DATA = ["id", "a", "b", "c", "ts"]


def _typed_changes(ops: np.ndarray, ids: np.ndarray, lsn0: int, seed: int) -> pa.Table:
    """The decoder's typed table for these changes (one transaction per 50 changes)."""
    n = len(ids)
    cols = _rows(ids, seed)
    data_fields = [pa.field(c, cols[c].type) for c in DATA]
    before = pa.nulls(n, pa.struct(data_fields))
    seq = np.arange(n, dtype=np.int64)
    commit = lsn0 + (seq // 50) * 1000
    return pa.table({"_op": pa.array(ops.tolist(), pa.string()),
                     "_lsn": pa.array(commit - 10), "_commit_lsn": pa.array(commit),
                     "_commit_ts": pa.array(np.full(n, 1_700_000_000_000_000),
                                            pa.timestamp("us", tz="UTC")),
                     "_xid": pa.array(seq // 50), "_seq": pa.array(seq % 50),
                     "_origin": pa.nulls(n, pa.string()), **cols, "_before": before,
                     "_before_kind": pa.nulls(n, pa.string()),
                     "_unchanged_toast": pa.nulls(n, pa.list_(pa.string())),
                     "_special": pa.nulls(n, pa.map_(pa.string(), pa.string()))})


def _mixed(n: int, lo: int, hi: int, seed: int, inserts_only=False):
    rng = np.random.default_rng(seed)
    if inserts_only:
        return np.array(["c"] * n, object), np.arange(ROWS + 1, ROWS + 1 + n)
    kinds = rng.choice(["u", "d", "c"], n, p=[0.6, 0.2, 0.2])
    ids = rng.choice(np.arange(lo, hi), n, replace=False)
    new = np.arange(ROWS + 1, ROWS + 1 + n)
    ids = np.where(kinds == "c", new, ids)
    return kinds.astype(object), ids


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from deltalake import write_deltalake

    from pgoutput_fast.delta import table_uri

    root = tmp_path_factory.mktemp("delta")
    uri = table_uri(root, TABLE)
    step = 1_000_000
    for i, lo in enumerate(range(1, ROWS + 1, step)):
        hi = min(lo + step, ROWS + 1)
        t = pa.table({**_rows(np.arange(lo, hi), i),
                      "_commit_lsn": pa.array(np.full(hi - lo, 1), pa.int64()),
                      "_seq": pa.array(np.arange(hi - lo), pa.int64()),
                      "_special": pa.nulls(hi - lo, pa.map_(pa.string(), pa.string()))})
        write_deltalake(uri, t, mode="append", target_file_size=FILE_SIZE)
    size = sum(os.path.getsize(os.path.join(uri, f)) for f in os.listdir(uri)
               if f.endswith(".parquet"))
    files = sum(1 for f in os.listdir(uri) if f.endswith(".parquet"))
    NOTES.append(f"delta: table of {ROWS:,} rows, {size / 1e6:.0f} MB in {files} files")
    return root, uri, size


def _fresh(base):
    root, uri, size = base
    work = tempfile.mkdtemp(dir=os.path.dirname(os.path.dirname(uri)))
    shutil.copytree(root, work, dirs_exist_ok=True)
    return work


def _written(result_uri, before: set) -> int:
    from deltalake import DeltaTable

    adds = DeltaTable(result_uri).get_add_actions(flatten=True)
    adds = pa.table(adds) if not isinstance(adds, pa.Table) else adds
    paths, sizes = adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist()
    return sum(s for p, s in zip(paths, sizes) if p not in before)


def _apply(work, changes):
    from pgoutput_fast.delta import apply_table

    return apply_table(changes, work, TABLE, keys=["id"], replident="d", columns=DATA)


def _merge_case(benchmark, base, name, lo, hi):
    from deltalake import DeltaTable

    from pgoutput_fast.delta import table_uri

    n = max(1, ROWS // 1000)
    ops, ids = _mixed(n, lo, hi, 7)
    changes = _typed_changes(ops, ids, 10_000, 7)
    out = {}

    def setup():
        work = _fresh(base)
        uri = table_uri(work, TABLE)
        adds = DeltaTable(uri).get_add_actions(flatten=True)
        adds = pa.table(adds) if not isinstance(adds, pa.Table) else adds
        out["work"], out["uri"] = work, uri
        out["before"] = set(adds.column("path").to_pylist())
        return (work, changes), {}

    benchmark.pedantic(_apply, setup=setup, rounds=3, iterations=1)
    written = _written(out["uri"], out["before"])
    NOTES.append(f"{name}: {n:,} changes (0.1 % of the keys) wrote {written / 1e6:.1f} MB = "
                 f"{written / base[2] * 100:.1f} % of the table's {base[2] / 1e6:.0f} MB")
    record(benchmark, name, rows=n, baseline="delta/rewrite")


def test_merge_hot(benchmark, base):
    _merge_case(benchmark, base, "delta/merge-hot", int(ROWS * 0.98), ROWS + 1)


def test_merge_random(benchmark, base):
    _merge_case(benchmark, base, "delta/merge-random", 1, ROWS + 1)


def _rewrite(work, changes):
    """The former sink: the whole table read, the changes applied, everything written."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    from pgoutput_fast.delta import table_uri

    uri = table_uri(work, TABLE)
    t = DeltaTable(uri).to_pyarrow_table()
    last = changes.take(pa.array(np.unique(changes.column("id").to_numpy()[::-1],
                                           return_index=True)[1]))
    touched = pc.is_in(t.column("id"), value_set=changes.column("id"))
    keep = t.filter(pc.invert(touched))
    ups = last.filter(pc.not_equal(last.column("_op"), "d")).select(
        DATA + ["_commit_lsn", "_seq", "_special"])
    new = pa.concat_tables([keep.select(ups.column_names).cast(ups.schema), ups])
    write_deltalake(uri, new, mode="overwrite", target_file_size=FILE_SIZE)


def test_rewrite(benchmark, base):
    n = max(1, ROWS // 1000)
    ops, ids = _mixed(n, int(ROWS * 0.98), ROWS + 1, 7)
    changes = _typed_changes(ops, ids, 10_000, 7)
    benchmark.pedantic(_rewrite, setup=lambda: ((_fresh(base), changes), {}), rounds=2,
                       iterations=1)
    record(benchmark, "delta/rewrite", rows=n)


BATCH = 100_000


@pytest.mark.parametrize("kind", ["inserts", "mixed"])
def test_apply_throughput(benchmark, base, kind):
    ops, ids = _mixed(BATCH, 1, ROWS + 1, 11, inserts_only=kind == "inserts")
    changes = _typed_changes(ops, ids, 20_000, 11)
    benchmark.pedantic(_apply, setup=lambda: ((_fresh(base), changes), {}), rounds=3,
                       iterations=1)
    record(benchmark, f"delta/apply-{kind}", rows=BATCH, baseline="delta/identity")


def test_identity(benchmark, tmp_path):
    from pgoutput_fast.storage_types import to_storage_table

    ops, ids = _mixed(BATCH, 1, ROWS + 1, 11)
    changes = _typed_changes(ops, ids, 20_000, 11)

    def identity():
        pq.write_table(to_storage_table(changes).select(DATA + ["_commit_lsn", "_seq"]),
                       tmp_path / "identity.parquet", compression="zstd")

    benchmark.pedantic(identity, rounds=5, iterations=1)
    record(benchmark, "delta/identity", rows=BATCH)
