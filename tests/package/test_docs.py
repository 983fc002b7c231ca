"""Every ``python`` code block of the README and of ``docs/`` runs as written, so that
none can go stale. A block runs in a fresh namespace, in the order of its file; blocks
of one file share nothing. A block that needs a server or a cluster says so by being
a function definition or a ``bash`` block: it is still compiled and executed (the
definitions), so a renamed import or a syntax error fails here."""

from __future__ import annotations

import os
import re

import pytest

# the documents are files of the source tree: not run against an installed wheel
pytestmark = pytest.mark.checkout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _documents():
    paths = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        paths += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return [p for p in paths if os.path.exists(p)]


def _blocks():
    out = []
    for path in _documents():
        text = open(path, encoding="utf-8").read()
        for i, m in enumerate(_BLOCK.finditer(text)):
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(path, line, m.group(1),
                                    id=f"{os.path.relpath(path, ROOT)}:{line}"))
    return out


BLOCKS = _blocks()


def test_the_documents_have_code_blocks():
    assert any("README.md" in p.values[0] for p in BLOCKS)


@pytest.mark.parametrize("path,line,code", BLOCKS)
def test_code_block_runs(path, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compiled = compile(code, f"{path}:{line}", "exec")
    exec(compiled, {"__name__": "__doc_example__"})
