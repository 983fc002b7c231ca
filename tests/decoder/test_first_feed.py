"""The first feed() of a process: nothing on the decode path imports pandas.

pyarrow imports pandas on the first ``pa.array`` / ``Array.to_numpy`` / ``pa.scalar``
of a process, whatever their input (about half a second of CPU); the export builds
its arrays from buffers instead. Each check runs in a fresh interpreter.
"""

import json
import os
import subprocess
import sys

import pytest

import pgoutput_fast
from tests.support.captures import FIXTURE_NAMES, FIXTURES

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(pgoutput_fast.__file__)))

_CHILD = r"""
import json, sys
import numpy as np
import pyarrow as pa
import pgoutput_fast
from pgoutput_fast.framing import read_capture

paths, lsn_form, kwargs = json.loads(sys.argv[1])
out = []
for path in paths:
    lsns, msgs = read_capture(path)
    if lsn_form == "arrow":            # an Arrow LSN column with a null (read as 0)
        lsns = pa.Array.from_buffers(pa.int64(), len(lsns), [
            pa.py_buffer(np.packbits(np.arange(len(lsns)) != 1, bitorder="little")),
            pa.py_buffer(np.ascontiguousarray(np.asarray(lsns).astype(np.int64)))], 1)
    changes = pgoutput_fast.Decoder(**kwargs).feed(msgs, lsns)
    tables = changes.tables
    n_events = changes.events.num_rows if changes.events is not None else -1
    out.append([sum(t.num_rows for t in tables.values()), n_events])
print(json.dumps({"pandas": "pandas" in sys.modules, "pgoutput_fast": pgoutput_fast.__file__,
                  "impl": pgoutput_fast.IMPL, "rows": out}))
"""


def _first_feed(lsn_form, **kwargs):
    paths = [os.path.join(FIXTURES, name + ".pgoc") for name in FIXTURE_NAMES]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([paths, lsn_form, kwargs])],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(pgoutput_fast.IMPL != "native", reason="the native decode path (the reference twin is a test oracle)")
@pytest.mark.parametrize("kwargs", [{}, {"events": False}, {"tables": False}], ids=["both", "typed", "events"])
@pytest.mark.parametrize("lsn_form", ["numpy", "arrow"])
def test_first_feed_does_not_import_pandas(kwargs, lsn_form):
    got = _first_feed(lsn_form, **kwargs)
    assert os.path.dirname(got["pgoutput_fast"]) == os.path.dirname(pgoutput_fast.__file__)
    assert got["impl"] == "native"
    assert any(rows > 0 for rows, _ in got["rows"]) or not kwargs.get("tables", True)
    assert any(events > 0 for _, events in got["rows"]) or not kwargs.get("events", True)
    assert got["pandas"] is False


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_arrow_lsn_column_reads_as_numpy(name):
    """An Arrow LSN column (int64 or uint64, chunked or not, nulls read as 0) decodes as
    its numpy form does."""
    import numpy as np
    import pyarrow as pa

    from tests.support.captures import load_fixture

    lsns, msgs = load_fixture(name)
    plain = np.asarray(lsns).astype(np.int64)
    plain[1::7] = 0
    want = pgoutput_fast.Decoder().feed(msgs, plain)
    valid = plain != 0
    forms = [
        pa.array(plain, pa.int64(), mask=~valid),
        pa.array(plain.astype(np.uint64), pa.uint64(), mask=~valid),
        pa.chunked_array([pa.array(plain[:5], mask=~valid[:5]), pa.array(plain[5:], mask=~valid[5:])]),
        pa.array(np.concatenate([[7], plain]), mask=np.concatenate([[False], ~valid])).slice(1),
    ]
    for form in forms:
        got = pgoutput_fast.Decoder().feed(msgs, form)
        assert _same(got.events, want.events)
        assert got.tables.keys() == want.tables.keys()
        for key, table in want.tables.items():
            assert _same(got.tables[key], table), key


def _same(a, b):
    # (Arrow equality says NaN != NaN; their printed forms agree)
    if a.equals(b):
        return True
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    return all(ca.equals(cb) or all(str(ca.slice(i, 1)) == str(cb.slice(i, 1)) for i in range(len(ca)))
               for ca, cb in zip(a.columns, b.columns))
