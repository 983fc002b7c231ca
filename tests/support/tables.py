"""Comparing Arrow tables in tests."""

from __future__ import annotations


def assert_values_equal(a, b, what=""):
    """``a`` has ``b``'s values column by column (``b``'s columns), row by row where the
    columns differ; NaN equals NaN (Arrow equality says NaN != NaN; their printed forms
    agree)."""
    if a.equals(b):
        return
    for name in b.column_names:
        ca, cb = a.column(name), b.column(name)
        if not ca.equals(cb):
            for i in range(len(cb)):
                sa, sb = ca.slice(i, 1), cb.slice(i, 1)
                assert sa.equals(sb) or str(sa) == str(sb), f"{what}: {name} row {i}: {sa} {sb}"
