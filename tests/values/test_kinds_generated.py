"""The generated kind tables are what scripts/gen_kinds.py writes from types.py now."""

import importlib.util
import os

import pytest

# checks files of the source tree (scripts/, src/): not run against an installed wheel
pytestmark = pytest.mark.checkout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _gen():
    spec = importlib.util.spec_from_file_location("gen_kinds", os.path.join(ROOT, "scripts", "gen_kinds.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kind_numbers_pxi_is_current():
    gen = _gen()
    with open(gen.TARGET, encoding="utf-8") as f:
        current = f.read()
    assert current == gen.render(gen.read_kinds()), (
        "src/kind_numbers.pxi differs from what scripts/gen_kinds.py writes: run it")


def test_kinds_are_types_py():
    from pgoutput_fast import types as T
    gen = _gen()
    assert dict(gen.read_kinds()) == {k: v for k, v in vars(T).items() if k.startswith("K_")}
