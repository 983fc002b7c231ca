"""Ground truth: decoded changes replayed into a TableImage equal PostgreSQL's own tables.

One private PostgreSQL runs the workloads of ``pgoutput_fast.demo.workload`` (every
type with its special values, all replica identities, TOAST, truncates, a schema change
mid-stream, an origin, logical messages, streamed transactions with savepoint rollbacks
and aborts, two-phase commit). The changes are captured with
``pg_logical_slot_peek_binary_changes`` in text and binary mode for protocol 1, 2
(streaming) and 3 (two-phase and streaming), plus protocol 1 on a two-phase slot.

Each capture is decoded with ``decode_changes`` and, separately, fed in small batches to
one ``Decoder`` (the results must be identical), then replayed into a ``TableImage``.
The image must equal ``SELECT *`` of every published table, value for value and type for
type. Ground truth comes from PostgreSQL itself: every column is selected in its text
form (the output function, as pgoutput sends it) and, where the typed value needs it, as
an exact expression computed by the server (``float4send``, ``extract(epoch ...)``,
``uuid_send``, interval fields, the type's send function for unknown types...), then
converted as documented in ``pgoutput_fast/types.py``. The documented Arrow type of each
column is derived from PostgreSQL's catalog, independently of ``types.py``.

The change-event table is checked against an independent oracle that walks the raw
messages (transactions, stream blocks with positional subtransaction aborts, prepared
transactions): every change appears exactly once, in commit order, with the LSNs and
timestamps of the messages that committed it; nothing of aborted work appears. Text and
binary mode, and the three protocols, must agree.

``test_batch_boundary_inside_schema_change`` splits the feed() at every message of the
transaction that alters a table twice. The ``test_table_image_*`` tests check the
TableImage itself on a synthetic stream (no server).
"""

from __future__ import annotations

import collections
import random
from decimal import Decimal
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pytest

import pgoutput_fast
from pgoutput_fast import sqlcapture
from pgoutput_fast.demo import workload
from pgoutput_fast.demo.truth import PgCatalog, TableTruth, published_tables, table_truth
from pgoutput_fast.arrow_values import column_values, freeze
from pgoutput_fast.demo.image import META_COLUMNS, TRAILING_COLUMNS, ImageError, TableImage
from pgoutput_fast.local_server import find_bindir

SCHEMA = "pgo_dpg"
SLOT_PLAIN = "pgo_dpg_plain"
SLOT_2PC = "pgo_dpg_2pc"
STREAM_ROWS = 5000
TWOPC_ROWS = 2000
PG_EPOCH_US = 946_684_800_000_000

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


class Variant(NamedTuple):
    name: str
    proto: int
    binary: bool
    slot: str
    streaming: bool | None
    two_phase: bool


VARIANTS = [
    Variant("v1-text", 1, False, SLOT_PLAIN, None, False),
    Variant("v1-binary", 1, True, SLOT_PLAIN, None, False),
    Variant("v2-text", 2, False, SLOT_PLAIN, True, False),
    Variant("v2-binary", 2, True, SLOT_PLAIN, True, False),
    Variant("v3-text", 3, False, SLOT_2PC, True, True),
    Variant("v3-binary", 3, True, SLOT_2PC, True, True),
    # a two-phase slot sends b/P/K/r even to a protocol-1 client (docs/protocol.md §3.11)
    Variant("v1-text-2pc-slot", 1, False, SLOT_2PC, None, False),
]
BY_NAME = {v.name: v for v in VARIANTS}
VARIANT_NAMES = [v.name for v in VARIANTS]
MODE_PAIRS = [("v1-text", "v1-binary"), ("v2-text", "v2-binary"), ("v3-text", "v3-binary")]


# ======================================================================================
# ground truth: PostgreSQL's catalog and SELECT *
# ======================================================================================

# Ground truth lives in pgoutput_fast.demo.truth (shared with the demo):
# PgCatalog maps PostgreSQL's catalog to the documented Arrow types independently of
# types.py; table_truth() reads each table's rows with exact SQL expressions.
PgTable = TableTruth


def _pg_table(cur, cat: PgCatalog, schema, table) -> TableTruth:
    return table_truth(cur, schema, table, cat)


# ======================================================================================
# the server, the workload, the captures
# ======================================================================================

class World(NamedTuple):
    captures: dict            # variant name -> [(lsn, xid, data)]
    tables: dict              # schema.table -> PgTable
    catalog: PgCatalog
    version_num: int


#: DDL defaults the stream cannot carry (workload.run_basic step 10)
ADDED_COLUMN_DEFAULTS = {
    f"{SCHEMA}.evolve": {"b": 7},
    f"{SCHEMA}.alltypes": {"c_extra": "dflt"},
}


def _require_decoder():
    """The columnar Decoder of the selected implementation (PGOUTPUT_FAST_IMPL)."""
    if not hasattr(pgoutput_fast._impl, "DecoderCore"):
        pytest.skip(f"the {pgoutput_fast.IMPL!r} implementation has no columnar Decoder (DecoderCore)")


@pytest.fixture(scope="module")
def world(request):
    _require_decoder()
    if find_bindir(required=False) is None:
        pytest.skip("no PostgreSQL server binaries (apt-get install -y postgresql, or set PGOUTPUT_FAST_PG_BIN)")
    pg = request.getfixturevalue("pg_server")
    conn = pg.connect()
    cap = pg.connect()
    try:
        sqlcapture.session_settings(cap)
        pub = workload.create_schema(conn, SCHEMA)
        for slot in (SLOT_PLAIN, SLOT_2PC):
            workload.drop_slot(conn, slot)
        workload.create_slot(conn, SLOT_PLAIN)
        if pg.version_num >= 150000:  # two-phase decoding (and protocol 3) need 15+
            workload.create_slot(conn, SLOT_2PC, two_phase=True)
        workload.run_basic(conn, SCHEMA, seed=7)
        workload.run_streaming(conn, SCHEMA, rows=STREAM_ROWS)
        workload.run_two_phase(conn, SCHEMA, rows=TWOPC_ROWS)

        captures = {}
        for v in VARIANTS:
            if v.slot == SLOT_2PC and pg.version_num < 150000:
                continue
            captures[v.name] = sqlcapture.peek_changes(
                cap, v.slot, proto_version=v.proto, publication_names=pub, binary=v.binary,
                messages=True, streaming=v.streaming, two_phase=v.two_phase)
        # ground truth in the capture's session settings (they shape the text forms)
        cur = cap.cursor()
        cat = PgCatalog(cur)
        tables = {f"{s}.{t}": _pg_table(cur, cat, s, t) for s, t in published_tables(cur, pub)
                  if s == SCHEMA}  # before 15 the publication is FOR ALL TABLES
        yield World(captures, tables, cat, pg.version_num)
    finally:
        try:
            for slot in (SLOT_PLAIN, SLOT_2PC):
                workload.drop_slot(conn, slot)
        finally:
            conn.close()
            cap.close()


def _split(rows):
    return [d for _, _, d in rows], [lsn for lsn, _, _ in rows]


class Decoded:
    """The decodings of one capture, computed on first use and cached (errors too)."""

    def __init__(self, rows):
        self.messages, self.lsns = _split(rows)
        self._cache = {}

    def _get(self, key, make):
        if key not in self._cache:
            try:
                self._cache[key] = (True, make())
            except Exception as exc:  # re-raised by every test that needs it
                self._cache[key] = (False, exc)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    @property
    def oneshot(self):
        """``decode_changes(messages, lsns)``."""
        return self._get("oneshot", lambda: pgoutput_fast.decode_changes(self.messages, self.lsns))

    @property
    def batches(self):
        """ChangeSets of one Decoder fed in small batches."""
        return self._get("batched", lambda: _feed_in_batches(self.messages, self.lsns,
                                                             len(self.messages)))[0]

    @property
    def catalog(self):
        return self._get("batched", lambda: _feed_in_batches(self.messages, self.lsns,
                                                             len(self.messages)))[1]

    @property
    def events(self):
        """(ChangeSet, catalog) of a Decoder(tables=False): the event path on its own."""
        def make():
            dec = pgoutput_fast.Decoder(tables=False)
            return dec.feed(self.messages, lsn=self.lsns), dec.catalog
        return self._get("events", make)


def _feed_in_batches(messages, lsns, seed):
    """One Decoder, batches of 1..40 messages, alternating list / Arrow input."""
    rng = random.Random(seed)
    dec = pgoutput_fast.Decoder()
    out = []
    i = 0
    k = 0
    while i < len(messages):
        n = rng.choice((1, 2, 3, 5, 8, 13, 21, 40))
        chunk, lchunk = messages[i:i + n], lsns[i:i + n]
        if k % 2:
            out.append(dec.feed(pa.array(chunk, pa.binary()), lsn=np.array(lchunk, dtype=np.int64)))
        else:
            out.append(dec.feed(chunk, lsn=lchunk))
        i += n
        k += 1
    pending = dec.pending()
    assert not pending["streams"] and not pending["prepared"] and pending["open_transaction"] is None, pending
    return out, dec.catalog


@pytest.fixture(scope="module")
def decoded(world):
    cache = {}

    def get(name) -> Decoded:
        if name not in world.captures:
            pytest.skip(f"{name} needs PostgreSQL 15+")
        if name not in cache:
            cache[name] = Decoded(world.captures[name])
        return cache[name]

    return get


# ======================================================================================
# comparison helpers
# ======================================================================================

def _fmt(v, limit=80):
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"...({len(s)} chars)"


def _row_label(row, key):
    if key:
        return ", ".join(f"{k}={_fmt(row.get(k), 40)}" for k in key)
    return _fmt(row, 120)


def _diff_rows(name, expected, actual, key, what=("PostgreSQL", "decoded")):
    """Human-readable differences between two multisets of row dicts ([] if equal)."""
    fe = collections.Counter(freeze(r) for r in expected)
    fa = collections.Counter(freeze(r) for r in actual)
    if fe == fa:
        return []
    missing = fe - fa
    extra = fa - fe
    by_frozen = {freeze(r): r for r in list(expected) + list(actual)}
    miss_rows = [by_frozen[f] for f in missing.elements()]
    extra_rows = [by_frozen[f] for f in extra.elements()]
    out = []
    if key:
        extra_by_key = collections.defaultdict(list)
        for r in extra_rows:
            extra_by_key[tuple(freeze(r.get(k)) for k in key)].append(r)
        unmatched = []
        for r in miss_rows:
            cands = extra_by_key.get(tuple(freeze(r.get(k)) for k in key))
            if cands:
                other = cands.pop(0)
                cols = sorted(set(r) | set(other), key=lambda c: list(r).index(c) if c in r else 999)
                for c in cols:
                    if c not in other or c not in r:
                        out.append(f"{name} [{_row_label(r, key)}] column {c!r}: only in "
                                   f"{what[0] if c in r else what[1]}")
                    elif freeze(r[c]) != freeze(other[c]):
                        out.append(f"{name} [{_row_label(r, key)}] {c}: {what[0]} {_fmt(r[c])} "
                                   f"!= {what[1]} {_fmt(other[c])}")
            else:
                unmatched.append(r)
        miss_rows = unmatched
        extra_rows = [r for rs in extra_by_key.values() for r in rs]
    for r in miss_rows:
        out.append(f"{name}: row only in {what[0]}: {_row_label(r, key) if key else _fmt(r, 200)}")
    for r in extra_rows:
        out.append(f"{name}: row only in {what[1]}: {_row_label(r, key) if key else _fmt(r, 200)}")
    return out


def _report(problems, limit=60):
    if problems:
        shown = problems[:limit]
        more = f"\n... and {len(problems) - limit} more" if len(problems) > limit else ""
        pytest.fail(f"{len(problems)} problem(s):\n" + "\n".join(shown) + more, pytrace=False)


def _diff_key(pgt: PgTable):
    return pgt.key_columns if pgt.replident in ("d", "i") and pgt.key_columns else ()


def _unknown_array(spec) -> bool:
    return spec.kind == "array" and spec.elem.kind == "unknown"


def _unknown_columns(world):
    """Columns whose Arrow type depends on the mode: a type the decoder does not know
    (string / binary), or an array of one (list<string> / list<binary>)."""
    return {(name, c.name) for name, t in world.tables.items() for c in t.columns
            if c.spec.kind == "unknown" or _unknown_array(c.spec)}


def _no_binary_value_type(spec, binary, got) -> bool:
    """The type of a column of an unknown type (or an array of one) in a binary-mode batch
    where no binary value of it was sent: string (list<string>), as types.py says."""
    if not binary:
        return False
    if spec.kind == "unknown":
        return got == pa.string()
    return _unknown_array(spec) and got == pa.list_(pa.string())


def _data_columns(table: pa.Table):
    names = table.schema.names
    return names[len(META_COLUMNS):len(names) - len(TRAILING_COLUMNS)]


def _typed_rows_normalized(table: pa.Table, skip=()):
    """A typed table as a list of {column: python value} (all columns, incl. metadata)."""
    cols = [c for c in table.schema.names if c not in skip]
    vals = {c: column_values(table.column(c)) for c in cols}
    return [{c: vals[c][i] for c in cols} for i in range(table.num_rows)]


# ======================================================================================
# the independent oracle of the change-event table
# ======================================================================================

class Expected(NamedTuple):
    changes: list      # (commit_lsn, commit_ts_unix_us, xid, origin, lsn, op, relid)
    messages: list     # (prefix, content, transactional, commit_lsn)
    commit_lsns: list  # every commit-type LSN in stream order (C, c, K)
    relnames: dict     # relid -> (schema, table) of the last Relation message


def _oracle(rows) -> Expected:
    """What the event table must hold, from the raw messages (docs/protocol.md §3)."""
    dm = pgoutput_fast.decode_message
    changes, messages, commits = [], [], []
    state = None          # None | 'txn' | 'stream' | 'prepare'
    cur = None            # open transaction: dict(items=[...], origin=..)
    streams = {}          # xid -> dict(items, first_pos, origin)
    prepared = {}         # gid -> dict
    relnames = {}

    def emit(tx, commit_lsn, commit_ts, xid):
        commits.append(commit_lsn)
        for item in tx["items"]:
            if item[0] == "change":
                _, lsn, op, relid = item
                changes.append((commit_lsn, commit_ts + PG_EPOCH_US, xid, tx["origin"], lsn, op, relid))
            else:
                _, prefix, content = item
                messages.append((prefix, content, True, commit_lsn))

    for lsn, _xid, data in rows:
        t = chr(data[0])
        msg = dm(data, in_stream=(state == "stream"))
        if state == "stream" and t in "RYIUDT":
            sp = streams[cur_xid]
            sp["first_pos"].setdefault(msg.xid, len(sp["items"]))
        if t == "B":
            assert state is None
            state, cur = "txn", {"items": [], "origin": None, "final_lsn": msg.final_lsn,
                                 "ts": msg.commit_ts, "xid": msg.xid}
        elif t == "C":
            assert state == "txn" and msg.commit_lsn == cur["final_lsn"]
            emit(cur, msg.commit_lsn, cur["ts"], cur["xid"])
            state, cur = None, None
        elif t == "O":
            target = cur if state in ("txn", "prepare") else streams[cur_xid]
            target["origin"] = msg.name
        elif t == "R":
            relnames[msg.relid] = (msg.nspname, msg.relname)
        elif t in "IUD":
            op = {"I": "c", "U": "u", "D": "d"}[t]
            target = cur if state in ("txn", "prepare") else streams[cur_xid]
            target["items"].append(("change", lsn, op, msg.relid))
        elif t == "T":
            target = cur if state in ("txn", "prepare") else streams[cur_xid]
            for relid in msg.relids:
                target["items"].append(("change", lsn, "t", relid))
        elif t == "M":
            if not msg.transactional:
                messages.append((msg.prefix, msg.content, False, None))
            else:
                target = cur if state in ("txn", "prepare") else streams[cur_xid]
                target["items"].append(("message", msg.prefix, msg.content))
        elif t == "S":
            state, cur_xid = "stream", msg.xid
            streams.setdefault(msg.xid, {"items": [], "first_pos": {}, "origin": None})
        elif t == "E":
            state = None
        elif t == "A":
            if msg.xid == msg.subxid:
                streams.pop(msg.xid, None)
            else:
                sp = streams.get(msg.xid)
                if sp is not None and msg.subxid in sp["first_pos"]:
                    pos = sp["first_pos"][msg.subxid]
                    del sp["items"][pos:]
                    sp["first_pos"] = {x: p for x, p in sp["first_pos"].items() if p < pos}
        elif t == "c":
            emit(streams.pop(msg.xid), msg.commit_lsn, msg.commit_ts, msg.xid)
        elif t == "b":
            state, cur = "prepare", {"items": [], "origin": None}
        elif t == "P":
            prepared[msg.gid] = cur
            state, cur = None, None
        elif t == "p":
            prepared[msg.gid] = streams.pop(msg.xid)
        elif t == "K":
            emit(prepared.pop(msg.gid), msg.commit_lsn, msg.commit_ts, msg.xid)
        elif t == "r":
            prepared.pop(msg.gid, None)
        elif t == "Y":
            pass
        else:
            raise AssertionError(f"unexpected message {t!r}")
    assert state is None and not streams and not prepared, "capture ends inside a transaction"
    return Expected(changes, messages, commits, relnames)


# ======================================================================================
# tests
# ======================================================================================

@pytest.mark.postgres
def test_workload_captured(world):
    """The captures contain what the tests below rely on (guards against a silent workload)."""
    types = {name: collections.Counter(chr(d[0]) for _, _, d in rows) for name, rows in world.captures.items()}
    assert set(world.captures) == {v.name for v in VARIANTS if v.slot == SLOT_PLAIN or world.version_num >= 150000}
    for name, counts in types.items():
        assert set("BCRIUDTMOY") <= set(counts), (name, sorted(counts))
        v = BY_NAME[name]
        if v.streaming:
            assert {"S", "E", "c", "A"} <= set(counts), (name, sorted(counts))
        if v.slot == SLOT_2PC:
            assert {"b", "P", "K", "r"} <= set(counts), (name, sorted(counts))
            if v.streaming:
                assert "p" in counts, name
    assert len(world.tables) == len(workload.TABLES) - 1 + 3  # parted's three leaves, not parted
    assert world.tables[f"{SCHEMA}.stream_t"].rows[False], "stream_t is empty"
    assert _unknown_columns(world) == {(f"{SCHEMA}.alltypes", "c_mood"), (f"{SCHEMA}.alltypes", "c_moodarr")}
    # mood[] is a list of the labels (text) or of their send bytes (binary), not one value
    moodarr = next(c for c in world.tables[f"{SCHEMA}.alltypes"].columns if c.name == "c_moodarr")
    assert _unknown_array(moodarr.spec), moodarr.spec


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_batches_equal_oneshot(world, decoded, variant):
    """A persistent Decoder fed in small batches gives exactly what decode_changes gives."""
    d = decoded(variant)
    one, batches = d.oneshot, d.batches
    # events: concatenated batch output == one-shot output (no floats: equals() is exact)
    ev = pa.concat_tables([cs.events for cs in batches if cs.events.num_rows] or [one.events.slice(0, 0)])
    assert ev.schema == one.events.schema == pgoutput_fast.decoder.EVENT_SCHEMA
    if not ev.equals(one.events):
        a, b = ev.to_pylist(), one.events.to_pylist()
        first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        pytest.fail(f"batched events differ from one-shot ({len(a)} vs {len(b)} rows); first "
                    f"difference at row {first}: {_fmt(a[first] if first < len(a) else None, 300)} vs "
                    f"{_fmt(b[first] if first < len(b) else None, 300)}")
    # logical messages
    assert [m for cs in batches for m in cs.messages] == list(one.messages)
    # building the typed tables does not change the event table
    events_only = d.events[0]
    assert one.events.equals(events_only.events), "events differ between tables=True and tables=False"
    assert list(one.messages) == list(events_only.messages)
    # typed tables, per relation version
    grouped = collections.defaultdict(list)
    for version, table in (vt for cs in batches for vt in cs.table_versions):
        grouped[(version.relid, version.version)].append((version, table))
    problems = []
    seen = set()
    for version, table in one.table_versions:
        key = (version.relid, version.version)
        assert key not in seen, f"one-shot output has two tables for {version}"
        seen.add(key)
        parts = grouped.pop(key, [])
        if not parts:
            problems.append(f"{version}: missing from the batched output")
            continue
        for v2, t2 in parts:
            if v2 != version:
                problems.append(f"batched version {v2!r} != one-shot {version!r}")
            if t2.schema.metadata != table.schema.metadata:
                problems.append(f"{version}: schema metadata differs: {t2.schema.metadata} vs {table.schema.metadata}")
            for f in table.schema:
                if f.name not in t2.schema.names:
                    problems.append(f"{version}: column {f.name} missing in a batch")
                elif f.name == "_before":
                    before = t2.column("_before").combine_chunks()
                    if before.type.num_fields != f.type.num_fields:
                        problems.append(f"{version}: _before is {before.type} in a batch, {f.type} one-shot")
                        continue
                    for j, child in enumerate(before.flatten()):
                        problems += _batch_type_problem(version, f"_before.{f.type.field(j).name}",
                                                        child, f.type.field(j).type)
                else:
                    problems += _batch_type_problem(version, f.name, t2.column(f.name), f.type)
        rows_b = [r for _, t2 in parts for r in _typed_rows_normalized(t2)]
        rows_o = _typed_rows_normalized(table)
        if len(rows_b) != len(rows_o):
            problems.append(f"{version}: {len(rows_b)} rows batched, {len(rows_o)} one-shot")
        else:
            for i, (rb, ro) in enumerate(zip(rows_b, rows_o)):
                if freeze(rb) != freeze(ro):
                    diff = [c for c in ro if freeze(ro[c]) != freeze(rb.get(c))]
                    problems.append(f"{version.qualified_name} row {i}: batched differs in {diff}: "
                                    + "; ".join(f"{c}: {_fmt(rb.get(c))} vs {_fmt(ro[c])}" for c in diff[:4]))
    for key, parts in grouped.items():
        problems.append(f"{parts[0][0]}: only in the batched output")
    # the persistent decoder's catalog holds every version the one-shot output used
    for version, _ in one.table_versions:
        vs = d.catalog.relations.get(version.relid, [])
        if version.version >= len(vs) or vs[version.version] != version:
            problems.append(f"{version}: not in the batched Decoder's catalog")
    _report(problems)


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_decode_parallel_equals_oneshot(world, decoded, variant, monkeypatch):
    """decode_parallel of each capture, cut into 2 to 41 pieces (at rest, and inside
    the large plain transactions where no Commit is near a cut's byte target), gives the
    ChangeSet decode_changes gives, seq included."""
    from pgoutput_fast import parallel
    from tests.decoder.test_parallel import assert_same

    d = decoded(variant)
    inside: list = []
    orig = parallel._with_copies

    def count(arr, lsn, lo, hi, head, tail):
        if tail is not None:
            inside.append(hi)
        return orig(arr, lsn, lo, hi, head, tail)

    monkeypatch.setattr(parallel, "_with_copies", count)
    for pieces in (2, 7, 41):
        got = parallel.decode_parallel(d.messages, d.lsns, workers=2, pieces=pieces)
        assert_same(got, d.oneshot, f"{variant}, {pieces} pieces")
    if BY_NAME[variant].slot == SLOT_PLAIN and BY_NAME[variant].streaming is None:
        # (protocol 1: the large transactions come whole, as plain B..C)
        assert inside, "no cut inside a transaction"


def _batch_type_problem(version, name, arr, oneshot_type):
    """[] if a batch's column has the one-shot type. An all-null column of an unknown type
    (or an array of one) may legitimately be string (list<string>) in a batch where no
    binary value was sent (types.py, binary_unknown=None)."""
    if arr.type == oneshot_type or (arr.null_count == len(arr)
                                    and ({arr.type, oneshot_type} <= {pa.string(), pa.binary()} or
                                         {arr.type, oneshot_type} <= {pa.list_(pa.string()),
                                                                      pa.list_(pa.binary())})):
        return []
    return [f"{version.qualified_name} v{version.version}: column {name} is {arr.type} in a "
            f"batch, {oneshot_type} one-shot"]


def _image_from_typed(changesets):
    img = TableImage(ADDED_COLUMN_DEFAULTS)
    for cs in changesets:
        img.apply_changeset(cs)
    return img


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_typed_image_equals_postgres(world, decoded, variant):
    """Replaying the typed tables reproduces SELECT * of every published table."""
    v = BY_NAME[variant]
    d = decoded(variant)
    problems = []
    for label, get in (("decode_changes", lambda: [d.oneshot]), ("batched Decoder", lambda: d.batches)):
        try:
            changesets = get()
        except pgoutput_fast.DecodeError as exc:
            problems.append(f"[{label}] decoding failed: {exc}")
            continue
        try:
            img = _image_from_typed(changesets)
        except ImageError as exc:
            problems.append(f"[{label}] replay failed: {exc}")
            continue
        for name, pgt in sorted(world.tables.items()):
            if name not in img:
                if pgt.rows[v.binary]:
                    problems.append(f"[{label}] {name}: no changes decoded, PostgreSQL has "
                                    f"{len(pgt.rows[v.binary])} rows")
                continue
            cols = [c.name for c in pgt.columns]
            if img.columns(name) != cols:
                problems.append(f"[{label}] {name}: image columns {img.columns(name)} != {cols}")
                continue
            types = img.column_types(name)
            for c in pgt.columns:
                want = c.spec.arrow_type(v.binary)
                got = types.get(c.name)
                # unknown types in binary mode: string when a batch had no binary value
                if got != want and not _no_binary_value_type(c.spec, v.binary, got):
                    problems.append(f"[{label}] {name}.{c.name} ({_pg_type_name(world, c)}): "
                                    f"Arrow type {got}, documented {want}")
            problems += [f"[{label}] {p}" for p in
                         _diff_rows(name, pgt.rows[v.binary], img.rows(name), _diff_key(pgt))]
        if label == "decode_changes" and problems:
            break  # the batched replay would repeat the same differences
    _report(problems)


def _pg_type_name(world, col):
    typname, nsp, *_ = world.catalog.type_row(col.type_oid)
    return typname if nsp == "pg_catalog" else f"{nsp}.{typname}"


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_typed_schemas_documented(world, decoded, variant):
    """Every typed table version has the documented Arrow types and metadata."""
    v = BY_NAME[variant]
    d = decoded(variant)
    cat = world.catalog
    problems = []
    versions_seen = collections.defaultdict(set)
    for version, table in d.oneshot.table_versions:
        name = version.qualified_name
        versions_seen[name].add(version.version)
        schema = table.schema
        meta_types = [pa.string(), pa.int64(), pa.int64(), pa.timestamp("us", tz="UTC"),
                      pa.int64(), pa.int64(), pa.string()]
        for col, typ in zip(META_COLUMNS, meta_types):
            if schema.field(col).type != typ:
                problems.append(f"{name}: {col} is {schema.field(col).type}, expected {typ}")
        data_cols = _data_columns(table)
        if list(data_cols) != [c.name for c in version.columns]:
            problems.append(f"{name}: data columns {data_cols} != relation {version.column_names}")
            continue
        for rc in version.columns:
            spec = cat.spec(rc.type_oid, rc.typmod)
            want = spec.arrow_type(v.binary)
            got = schema.field(rc.name).type
            if got != want:
                if _no_binary_value_type(spec, v.binary, got) \
                        and table.column(rc.name).null_count == table.num_rows:
                    continue  # no binary value sent in this batch: string (types.py)
                typname, nsp, *_ = cat.type_row(rc.type_oid)
                problems.append(f"{name} v{version.version}: {rc.name} ({nsp}.{typname}, typmod "
                                f"{rc.typmod}) is {got}, documented {want}")
        before_type = schema.field("_before").type
        want_before = pa.struct([schema.field(c) for c in data_cols])
        if not before_type.equals(want_before):
            problems.append(f"{name}: _before is {before_type}, expected {want_before}")
        for col, typ in (("_before_kind", pa.string()), ("_unchanged_toast", pa.list_(pa.string())),
                         ("_special", pa.map_(pa.string(), pa.string()))):
            if schema.field(col).type != typ:
                problems.append(f"{name}: {col} is {schema.field(col).type}, expected {typ}")
        md = schema.metadata or {}
        if md.get(b"pgoutput_fast.relid") != str(version.relid).encode():
            problems.append(f"{name}: relid metadata {md.get(b'pgoutput_fast.relid')}")
        # a version of the table's final shape flags PostgreSQL's replica identity columns
        pgt = world.tables.get(name)
        if pgt is not None and [c.name for c in pgt.columns] == list(data_cols) \
                and version.replident == pgt.replident:
            keys = md.get(b"pgoutput_fast.key_columns", b"").decode()
            want_keys = ",".join(pgt.key_columns)
            if keys != want_keys:
                problems.append(f"{name}: key_columns metadata {keys!r}, PostgreSQL's replica "
                                f"identity is {want_keys!r}")
        if md.get(b"pgoutput_fast.replident") != version.replident.encode():
            problems.append(f"{name}: replident metadata {md.get(b'pgoutput_fast.replident')} "
                            f"!= {version.replident!r}")
        if table.column("_before").null_count < table.num_rows:
            kinds = set(table.column("_before_kind").drop_null().to_pylist())
            if not kinds <= {"K", "O"}:
                problems.append(f"{name}: _before_kind values {kinds}")
    # the schema change of evolve produced versions (add b, drop a, add c + b int8)
    assert len(versions_seen[f"{SCHEMA}.evolve"]) >= 4, versions_seen[f"{SCHEMA}.evolve"]
    assert len(versions_seen[f"{SCHEMA}.alltypes"]) >= 2, versions_seen[f"{SCHEMA}.alltypes"]
    _report(problems)


@pytest.mark.postgres
@pytest.mark.parametrize("pair", [f"{a}/{b}" for a, b in MODE_PAIRS])
def test_text_and_binary_typed_tables_identical(world, decoded, pair):
    """Text and binary mode give the same typed tables (unknown types aside: string/binary)."""
    text_name, bin_name = pair.split("/")
    t_sets, b_sets = decoded(text_name).oneshot.table_versions, decoded(bin_name).oneshot.table_versions
    unknown = _unknown_columns(world)
    problems = []
    if [(v.relid, v.version) for v, _ in t_sets] != [(v.relid, v.version) for v, _ in b_sets]:
        problems.append("the relation versions differ between text and binary mode")
    for (vt, tt), (vb, tb) in zip(t_sets, b_sets):
        name = vt.qualified_name
        skip = {c for c in _data_columns(tt) if (name, c) in unknown}
        for f in tt.schema:
            if f.name in skip:
                ft = f.type
                fb = tb.schema.field(f.name).type
                if not ((ft == pa.string() and fb in (pa.binary(), pa.string())) or
                        (ft == pa.list_(pa.string()) and fb in (pa.list_(pa.binary()), ft))):
                    problems.append(f"{name}.{f.name} (unknown type): text mode {ft}, binary mode {fb}")
                continue
            if f.name == "_before":
                continue  # compared below without the unknown-type fields
            fb = tb.schema.field(f.name)
            if fb.type != f.type:
                problems.append(f"{name}.{f.name}: text mode {f.type}, binary mode {fb.type}")
        rows_t = _typed_rows_normalized(tt, skip=skip)
        rows_b = _typed_rows_normalized(tb, skip=skip)
        for i, (rt, rb) in enumerate(zip(rows_t, rows_b)):
            for row in (rt, rb):
                if row["_before"] is not None:
                    row["_before"] = {k: x for k, x in row["_before"].items() if k not in skip}
            if freeze(rt) != freeze(rb):
                key = ", ".join(f"{k}={_fmt(rt.get(k), 30)}" for k in vt.key_columns) or f"row {i}"
                for c in rt:
                    if freeze(rt[c]) != freeze(rb.get(c)):
                        problems.append(f"{name} [{key}] {c}: text {_fmt(rt[c])} != binary {_fmt(rb.get(c))}")
        if len(rows_t) != len(rows_b):
            problems.append(f"{name}: {len(rows_t)} rows in text mode, {len(rows_b)} in binary mode")
        # enums: the binary value is the label (docs/protocol.md §4.2), also in an enum[]
        for rc in vt.columns:
            if rc.name not in skip:
                continue
            typ = world.catalog.type_row(rc.type_oid)
            if typ[2] == "e":
                for x, y in zip(tt.column(rc.name).to_pylist(), tb.column(rc.name).to_pylist()):
                    if (x is None) != (y is None) or (x is not None and x.encode() != y):
                        problems.append(f"{name}.{rc.name}: enum text {x!r} vs binary {y!r}")
            elif typ[8] == "array_in" and world.catalog.type_row(typ[5])[2] == "e":
                for x, y in zip(tt.column(rc.name).to_pylist(), tb.column(rc.name).to_pylist()):
                    enc = None if x is None else [None if e is None else e.encode() for e in x]
                    if enc != y:
                        problems.append(f"{name}.{rc.name}: enum[] text {x!r} vs binary {y!r}")
    _report(problems)


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_event_image_equals_postgres(world, decoded, variant):
    """Replaying the change-event table (text values) reproduces SELECT * in text form."""
    v = BY_NAME[variant]
    d = decoded(variant)
    img = TableImage(ADDED_COLUMN_DEFAULTS_TEXT)
    try:
        cs, catalog = d.events
        img.apply_events(cs.events, key_columns=catalog)
    except ImageError as exc:
        pytest.fail(f"replaying the event table failed: {exc}", pytrace=False)
    problems = []
    for name, pgt in sorted(world.tables.items()):
        expected = pgt.text[v.binary]
        if name not in img:
            if expected:
                problems.append(f"{name}: no changes decoded, PostgreSQL has {len(expected)} rows")
            continue
        cols = [c.name for c in pgt.columns]
        if img.columns(name) != cols:
            problems.append(f"{name}: image columns {img.columns(name)} != {cols}")
            continue
        problems += _diff_rows(name, expected, img.rows(name), _diff_key(pgt))
    _report(problems)


ADDED_COLUMN_DEFAULTS_TEXT = {
    f"{SCHEMA}.evolve": {"b": "7"},
    f"{SCHEMA}.alltypes": {"c_extra": "dflt"},
}


@pytest.mark.postgres
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_events_exactly_once_in_commit_order(world, decoded, variant):
    """Every committed change once, in commit order, with its commit's LSN/time/xid/origin."""
    decoded(variant)  # skips variants the server cannot produce
    rows = world.captures[variant]
    exp = _oracle(rows)
    cs, _ = decoded(variant).events
    ev = cs.events
    got = list(zip(ev.column("commit_lsn").to_pylist(), ev.column("commit_ts").cast(pa.int64()).to_pylist(),
                   ev.column("xid").to_pylist(), ev.column("origin").to_pylist(),
                   ev.column("lsn").to_pylist(), ev.column("op").to_pylist(),
                   ev.column("relid").to_pylist()))
    fields = ("commit_lsn", "commit_ts", "xid", "origin", "lsn", "op", "relid")
    if got != exp.changes:
        first = next((i for i in range(min(len(got), len(exp.changes))) if got[i] != exp.changes[i]),
                     min(len(got), len(exp.changes)))
        g = dict(zip(fields, got[first])) if first < len(got) else None
        e = dict(zip(fields, exp.changes[first])) if first < len(exp.changes) else None
        pytest.fail(f"event table ({len(got)} changes) differs from the raw messages "
                    f"({len(exp.changes)} changes) first at change {first}: decoded {g}, "
                    f"expected {e}", pytrace=False)
    # (commit_lsn, seq) strictly increasing; seq counts 0.. within each transaction
    pos = list(zip(ev.column("commit_lsn").to_pylist(), ev.column("seq").to_pylist()))
    assert all(a < b for a, b in zip(pos, pos[1:])), "events are not in (commit_lsn, seq) order"
    expected_seq, last = [], None
    for c, _ in pos:
        expected_seq.append(expected_seq[-1] + 1 if c == last else 0)
        last = c
    assert [s for _, s in pos] == expected_seq
    # commit_lsn values are exactly the commits that carried changes, in stream order
    order = list(dict.fromkeys(c for c, _ in pos))
    assert set(order) <= set(exp.commit_lsns), "a commit_lsn that no commit message carries"
    assert order == [c for c in exp.commit_lsns if c in set(order)], "not in commit order"
    # schema/table names come from the Relation messages (no relation is renamed here)
    assert all(exp.relnames[r] == (s, t) for r, s, t in zip(ev.column("relid").to_pylist(),
                                                           ev.column("schema").to_pylist(),
                                                           ev.column("table").to_pylist()))
    # logical messages: transactional ones with their commit, none from aborted work
    msgs = cs.messages
    got_msgs = [(m.message.prefix, m.message.content, m.message.transactional, m.commit_lsn) for m in msgs]
    assert got_msgs == exp.messages
    _check_workload_markers(ev, msgs, BY_NAME[variant])


def _check_workload_markers(ev, msgs, v):
    """What the workload committed is there; what it rolled back is not."""
    rows = ev.select(["table", "op", "before", "after", "origin", "truncate_options"]).to_pylist()
    # step 7 of the workload: a plain TRUNCATE and one with RESTART IDENTITY CASCADE
    trunc = {(r["table"], tuple(r["truncate_options"])) for r in rows if r["op"] == "t"}
    assert ("ri_nothing", ()) in trunc, trunc
    assert ("trunc_parent", ("cascade", "restart_identity")) in trunc, trunc
    assert all(r["truncate_options"] is None for r in rows if r["op"] != "t")
    by_table = collections.defaultdict(list)
    for r in rows:
        r["before"] = dict(r["before"]) if r["before"] is not None else None
        r["after"] = dict(r["after"]) if r["after"] is not None else None
        by_table[r["table"]].append(r)

    def ids(table, op=None):
        out = []
        for r in by_table[table]:
            if op is None or r["op"] == op:
                for img in (r["before"], r["after"]):
                    if img and img.get("id") is not None:
                        out.append(int(img["id"]))
        return out

    texts = [x for r in rows for img in (r["before"], r["after"]) if img for x in img.values() if x]
    assert not [t for t in texts if "rolled back" in t or t == "doomed"], \
        "changes of a rolled-back transaction, savepoint or prepared transaction were emitted"
    rd = ids("ri_default")
    assert 999 not in rd and 31 not in rd, "rolled-back ri_default rows were emitted"
    assert {30, 32, 40, 41, 50, 51, 60, 70, 71, 72} <= set(rd)
    st = ids("stream_t")
    half, quarter = STREAM_ROWS // 2, STREAM_ROWS // 4
    assert not [i for i in st if half < i <= half + quarter], "rolled-back savepoint s1 rows emitted"
    assert not [i for i in st if i > STREAM_ROWS], "the aborted streamed transaction was emitted"
    assert sorted(ids("stream_t", "c")) == list(range(1, half + 1)) + list(range(half + quarter + 1, STREAM_ROWS + 1))
    tp = ids("twophase_t")
    assert 10 not in tp and 1 not in ids("twophase_t", "d"), "rolled-back prepared transaction emitted"
    assert len(ids("twophase_t", "c")) == 3 + TWOPC_ROWS + 1
    prefixes = [m.message.prefix for m in msgs]
    assert "pgo_aborted" not in prefixes
    assert collections.Counter(prefixes) == collections.Counter(
        ["pgo_ntx", "pgo_ntx_in_tx", "pgo_tx", "pgo_tx_only", "pgo_stream", "pgo_2pc"])
    # origins: the replayed transaction; in two-phase decoding also the prepared gid1
    origins = collections.Counter((r["table"], r["origin"]) for r in rows if r["origin"])
    assert origins[("ri_default", workload.ORIGIN_NAME)] == 2
    if v.slot == SLOT_2PC:
        assert origins[("twophase_t", workload.ORIGIN_NAME)] == 4
    else:
        assert ("twophase_t", workload.ORIGIN_NAME) not in origins
    assert sum(origins.values()) == 2 + (4 if v.slot == SLOT_2PC else 0)


@pytest.mark.postgres
def test_protocols_agree(world, decoded):
    """Streaming and two-phase change the framing, never the committed changes."""
    base = decoded("v1-text").events[0].events
    problems = []
    for name in ("v2-text", "v3-text", "v1-text-2pc-slot", "v1-binary", "v2-binary", "v3-binary"):
        if name not in world.captures:
            continue
        ev = decoded(name).events[0].events
        for col in base.column_names:
            if col == "origin":
                continue  # the prepared gid1 carries its origin only under two-phase decoding
            if col in ("before", "after") and BY_NAME[name].binary:
                continue  # unknown-type text; compared in test_text_and_binary_events_identical
            if not ev.column(col).equals(base.column(col)):
                a, b = base.column(col).to_pylist(), ev.column(col).to_pylist()
                diffs = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
                problems.append(f"{name}: column {col} differs from v1-text ({len(a)} vs {len(b)} rows; "
                                f"first at {diffs[:1]})")
    _report(problems)


@pytest.mark.postgres
@pytest.mark.parametrize("pair", [f"{a}/{b}" for a, b in MODE_PAIRS])
def test_text_and_binary_events_identical(world, decoded, pair):
    """Binary values are formatted exactly as PostgreSQL's output functions do."""
    text_name, bin_name = pair.split("/")
    et, eb = decoded(text_name).events[0].events, decoded(bin_name).events[0].events
    assert et.num_rows == eb.num_rows
    unknown = _unknown_columns(world)
    problems = []
    tabs = [f"{s}.{t}" for s, t in zip(et.column("schema").to_pylist(), et.column("table").to_pylist())]
    for col in ("before", "after"):
        for i, (a, b) in enumerate(zip(et.column(col).to_pylist(), eb.column(col).to_pylist())):
            if a == b:
                continue
            a, b = dict(a or ()), dict(b or ())
            for c in a.keys() | b.keys():
                if (tabs[i], c) in unknown:
                    continue
                if a.get(c) != b.get(c):
                    problems.append(f"{tabs[i]} event {i} {col}.{c}: text {_fmt(a.get(c))} != "
                                    f"binary-formatted {_fmt(b.get(c))}")
    _report(problems)


def _schema_change_transactions(rows):
    """(begin, commit) indexes of B..C transactions in which a relation's Relation message
    arrives after a change to it (the schema changed inside the transaction)."""
    out, begin, touched, changed = [], None, set(), False
    dm = pgoutput_fast.decode_message
    for i, (_, _, data) in enumerate(rows):
        t = data[:1]
        if t == b"B":
            begin, touched, changed = i, set(), False
        elif t == b"C" and begin is not None:
            if changed:
                out.append((begin, i))
            begin = None
        elif begin is not None and t in (b"I", b"U", b"D"):
            touched.add(dm(data).relid)
        elif begin is not None and t == b"R" and dm(data).relid in touched:
            changed = True
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("variant", ["v1-text", "v1-binary"])
def test_batch_boundary_inside_schema_change(world, variant):
    """A feed() that ends inside a transaction whose Relation changed mid-transaction.

    The open transaction is carried into the next feed() and decoded again; its changes
    before the new Relation message must still be decoded with the relation as it was
    then (workload step 10: ADD COLUMN / DROP COLUMN inside one transaction).
    """
    rows = world.captures[variant]
    txns = _schema_change_transactions(rows)
    assert txns, "the workload has no transaction with a mid-transaction schema change"
    begin, commit = txns[0]
    messages, lsns = _split(rows[:commit + 1])
    probe = pgoutput_fast.Decoder(tables=False)
    probe.feed(messages, lsn=lsns)
    ref_versions = {relid: len(vs) for relid, vs in probe.catalog.relations.items()}
    problems = []
    for tables in (False, True):
        try:
            ref = pgoutput_fast.decode_changes(messages, lsns, tables=tables)
        except Exception as exc:  # the typed path is covered by the other tests
            problems.append(f"tables={tables}: one-shot decode failed: {exc!r}")
            continue
        for cut in range(begin + 1, commit + 1):
            where = (f"tables={tables}, feed() split before message {cut - begin} of the "
                     f"transaction ({chr(messages[cut][0])})")
            dec = pgoutput_fast.Decoder(tables=tables)
            try:
                parts = [dec.feed(messages[:cut], lsn=lsns[:cut]), dec.feed(messages[cut:], lsn=lsns[cut:])]
            except pgoutput_fast.DecodeError as exc:
                problems.append(f"{where}: DecodeError: {exc}")
                continue
            ev = pa.concat_tables([p.events for p in parts])
            if not ev.equals(ref.events):
                bad = [(g, r) for g, r in zip(ev.to_pylist(), ref.events.to_pylist()) if g != r]
                problems.append(f"{where}: {len(bad)} event(s) differ, e.g. {bad[0][0]['table']} "
                                f"after={bad[0][0]['after']} instead of {bad[0][1]['after']}"
                                if bad else f"{where}: events differ")
            if tables:
                got, want = collections.defaultdict(list), collections.defaultdict(list)
                for p in parts:
                    for v, t in p.table_versions:
                        got[(v.relid, v.version)] += _typed_rows_normalized(t)
                for v, t in ref.table_versions:
                    want[(v.relid, v.version)] += _typed_rows_normalized(t)
                for key in sorted(set(got) | set(want)):
                    if freeze(got.get(key)) != freeze(want.get(key)):
                        problems.append(f"{where}: typed rows of relid/version {key} differ")
            versions = {relid: len(vs) for relid, vs in dec.catalog.relations.items()}
            if versions != ref_versions:
                diff = {r: (versions.get(r), ref_versions.get(r)) for r in versions.keys() | ref_versions.keys()
                        if versions.get(r) != ref_versions.get(r)}
                problems.append(f"{where}: catalog versions per relid differ (batched, one-shot): {diff}")
    _report(problems)


# ======================================================================================
# TableImage itself (no server): a synthetic stream of int4/text columns
# ======================================================================================

def _synthetic_stream():
    from pgoutput_fast import encode_message as enc
    from pgoutput_fast.messages import (
        UNCHANGED_TOAST, Begin, Commit, Delete, Insert, Relation, RelationColumn as Col,
        Truncate, Update, Value,
    )

    def tup(*vals):
        return tuple(None if v is None else UNCHANGED_TOAST if v is UNCHANGED_TOAST
                     else Value("t", str(v).encode()) for v in vals)

    t1 = Relation(1001, "s", "t", "d", (Col(1, "id", 23, -1), Col(0, "v", 25, -1), Col(0, "big", 25, -1)))
    t2 = Relation(1001, "s", "t", "d", (Col(1, "id", 23, -1), Col(0, "big", 25, -1), Col(0, "extra", 23, -1)))
    f = Relation(1002, "s", "f", "f", (Col(1, "a", 23, -1), Col(1, "b", 25, -1)))
    k = UNCHANGED_TOAST
    msgs = [
        Begin(100, 0, 1), t1, f,
        Insert(1001, tup(1, "a", "BIG1")), Insert(1001, tup(2, "b", "BIG2")), Insert(1001, tup(3, "c", None)),
        Insert(1002, tup(1, "x")), Insert(1002, tup(1, "x")), Insert(1002, tup(2, None)),
        Commit(0, 100, 110, 0),
        Begin(200, 0, 2),
        Update(1001, None, None, tup(1, "a2", k)),                       # big: unchanged TOAST
        Update(1001, "K", tup(2, None, None), tup(20, "b2", k)),         # key change + TOAST
        Delete(1001, "K", tup(3, None, None)),
        Update(1002, "O", tup(1, "x"), tup(1, "y")),                     # one of two equal rows
        Delete(1002, "O", tup(2, None)),
        Commit(0, 200, 210, 0),
        Begin(300, 0, 3), Truncate(0, (1002,)), Insert(1002, tup(9, "after truncate")), Commit(0, 300, 310, 0),
        Begin(400, 0, 4), t2,                                            # drop v, add extra
        Insert(1001, tup(4, "BIG4", 44)), Update(1001, None, None, tup(1, k, 11)),
        Commit(0, 400, 410, 0),
    ]
    return [enc(m) for m in msgs], [10 * (i + 1) for i in range(len(msgs))]


SYNTHETIC_EXPECTED = {
    "s.t": [{"id": 20, "big": "BIG2", "extra": None},
            {"id": 4, "big": "BIG4", "extra": 44},
            {"id": 1, "big": "BIG1", "extra": 11}],
    "s.f": [{"a": 9, "b": "after truncate"}],
}


def test_table_image_semantics():
    """Keys, old keys, REPLICA IDENTITY FULL, unchanged TOAST, truncate, schema change."""
    _require_decoder()
    stream, lsns = _synthetic_stream()
    dec = pgoutput_fast.Decoder(tables=False)
    cs = dec.feed(stream, lsn=lsns)
    txt = TableImage()
    txt.apply_events(cs.events, key_columns=dec.catalog)
    for name, rows in SYNTHETIC_EXPECTED.items():
        want = [{c: None if v is None else str(v) for c, v in r.items()} for r in rows]
        assert not _diff_rows(name, want, txt.rows(name), ()), txt.rows(name)
    assert txt.columns("s.t") == ["id", "big", "extra"]
    # the same from a mapping of key columns
    txt2 = TableImage()
    txt2.apply_events(cs.events, key_columns={"s.t": ("id",), "s.f": ("a", "b")})
    assert freeze(txt2.rows("s.t")) == freeze(txt.rows("s.t"))


def test_table_image_typed_semantics():
    """The same stream through the typed tables (int4/text only)."""
    _require_decoder()
    try:
        cs = pgoutput_fast.decode_changes(*_synthetic_stream())
    except Exception as exc:  # typed export not available (value parsers missing)
        pytest.fail(f"typed decoding of a plain int4/text stream failed: {exc!r}")
    img = TableImage()
    img.apply_changeset(cs)
    for name, rows in SYNTHETIC_EXPECTED.items():
        assert not _diff_rows(name, rows, img.rows(name), ()), img.rows(name)
    assert img.column_types("s.t") == {"id": pa.int32(), "big": pa.string(), "extra": pa.int32()}
    assert img.key_columns("s.t") == ("id",) and img.key_columns("s.f") == ("a", "b")


def test_table_image_rejects_what_does_not_fit():
    _require_decoder()
    from pgoutput_fast import encode_message as enc
    from pgoutput_fast.messages import Begin, Commit, Delete, Insert, Relation, RelationColumn as Col, Value

    r = Relation(7, "s", "k", "d", (Col(1, "id", 23, -1), Col(0, "v", 25, -1)))
    v = lambda *xs: tuple(Value("t", str(x).encode()) for x in xs)  # noqa: E731
    for body, why in (([Insert(7, v(2, "y")), Delete(7, "K", v(1, "x"))], "not in the image"),
                      ([Insert(7, v(1, "x")), Insert(7, v(1, "y"))], "already in the image")):
        cs = pgoutput_fast.decode_changes([enc(m) for m in [Begin(1, 0, 1), r, *body, Commit(0, 1, 2, 0)]],
                                          tables=False)
        with pytest.raises(ImageError, match=why):
            TableImage().apply_events(cs.events, key_columns={"s.k": ("id",)})
    assert freeze([1.0, float("nan"), Decimal("1.50")]) == freeze([1.0, float("nan"), Decimal("1.50")])
    assert freeze(-0.0) != freeze(0.0) and freeze(Decimal("1.5")) != freeze(Decimal("1.50"))
    assert freeze(True) != freeze(1)
