"""Delta tables from real PostgreSQL captures equal ``SELECT *``.

The workload of ``tests/decoder/test_decoder_pg.py`` (``demo.workload``: every type,
inserts, updates with and without key change, unchanged TOAST, deletes, truncate, ADD
COLUMN, REPLICA IDENTITY FULL with duplicates, streamed and prepared transactions) is
captured in each protocol variant, decoded, and applied to Delta tables with
``pgoutput_fast.delta.apply_changeset``: in one batch and in many small ones, then
everything again. Each table read back through delta-rs equals PostgreSQL's rows.
"""

import pytest

from pgoutput_fast.delta import DeltaImage, apply_changeset, table_uri
# the module-scoped fixtures of the decoder's PostgreSQL tests: one workload, captured
from tests.decoder.test_decoder_pg import (ADDED_COLUMN_DEFAULTS, BY_NAME, VARIANT_NAMES,
                                           _diff_key, _diff_rows, _report)
from tests.decoder.test_decoder_pg import decoded, world  # noqa: F401

pytestmark = pytest.mark.postgres


def _compare(world, v, target, catalog, label):
    img = DeltaImage(target, catalog, v.binary)
    problems = []
    for name, pgt in sorted(world.tables.items()):
        rows = pgt.rows[v.binary]
        if name not in img:
            if rows:
                problems.append(f"[{label}] {name}: no Delta table, PostgreSQL has {len(rows)} rows")
            continue
        cols = [c.name for c in pgt.columns]
        got = [{c: r.get(c) for c in cols} for r in img.rows(name)]
        problems += [f"[{label}] {p}" for p in _diff_rows(name, rows, got, _diff_key(pgt),
                                                          ("PostgreSQL", "Delta"))]
    return problems


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_delta_tables_equal_postgres(world, decoded, variant, tmp_path):
    v = BY_NAME[variant]
    d = decoded(variant)
    target = tmp_path / "one"
    apply_changeset(d.oneshot, target, column_defaults=ADDED_COLUMN_DEFAULTS, binary=v.binary)
    problems = _compare(world, v, target, d.catalog, "one batch")
    # the same changes again: nothing changes, no new commit
    versions = {n: _version(target, n) for n in world.tables if _exists(target, n)}
    again = apply_changeset(d.oneshot, target, column_defaults=ADDED_COLUMN_DEFAULTS, binary=v.binary)
    assert all(r["skipped"] for r in again.values()), again
    assert versions == {n: _version(target, n) for n in versions}
    # many small batches (one Decoder fed 1..40 messages at a time), each applied
    target = tmp_path / "many"
    for cs in d.batches:
        apply_changeset(cs, target, column_defaults=ADDED_COLUMN_DEFAULTS, binary=v.binary)
    problems += _compare(world, v, target, d.catalog, "small batches")
    _report(problems)


def _exists(target, name):
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(table_uri(target, name))


def _version(target, name):
    from deltalake import DeltaTable

    return DeltaTable(table_uri(target, name)).version()
