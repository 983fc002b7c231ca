"""Which implementation is imported, and how a missing extension fails."""

import os
import subprocess
import sys

import pgoutput_fast


def test_selected_implementation_matches_env():
    want = os.environ.get("PGOUTPUT_FAST_IMPL", "native")
    assert pgoutput_fast.IMPL == want
    if want == "native":
        from pgoutput_fast import _native

        assert pgoutput_fast.decode_message is _native.decode_message
        assert pgoutput_fast._impl is _native


def test_default_is_native():
    env = {k: v for k, v in os.environ.items() if k != "PGOUTPUT_FAST_IMPL"}
    out = subprocess.run(
        [sys.executable, "-c", "import pgoutput_fast as p; print(p.IMPL, p.decode_message.__module__)"],
        env=env, capture_output=True, text=True, check=True,
    )
    assert out.stdout.split() == ["native", "pgoutput_fast._native"]


def test_missing_extension_fails_loudly():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'pgoutput_fast._native':\n"
        "            raise ImportError('simulated: extension not built')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pgoutput_fast\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PGOUTPUT_FAST_IMPL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "could not be imported" in out.stderr and "PGOUTPUT_FAST_IMPL=python" in out.stderr


def test_unknown_impl_rejected():
    env = dict(os.environ, PGOUTPUT_FAST_IMPL="turbo")
    out = subprocess.run([sys.executable, "-c", "import pgoutput_fast"], env=env,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "must be 'native' or 'python'" in out.stderr
