"""The typed API and the package metadata.

py.typed and the stub of the compiled module ship with the package, the stub matches
the built module (mypy.stubtest), mypy is clean on the package, and the version is
defined once. mypy is part of the ``test`` extra, so these checks always run.

The mypy settings live in pyproject.toml; a copy of tests/ needs the project's
pyproject.toml next to it (scripts/wheel.sh and cibuildwheel's test-sources do that).
"""

import importlib.metadata
import os
import subprocess
import sys

import pytest

import pgoutput_fast

HERE = os.path.dirname(os.path.abspath(__file__))
PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "pyproject.toml")
ALLOWLIST = os.path.join(HERE, "native_stubtest_allowlist.txt")
PACKAGE_DIR = os.path.dirname(os.path.abspath(pgoutput_fast.__file__))
# A checkout (editable install or in-place build) has pyproject.toml next to the
# package; mypy then finds the package from that directory. An installed wheel is found
# through site-packages, which only works if py.typed was installed with it.
CHECKOUT = os.path.dirname(PACKAGE_DIR) if os.path.isfile(
    os.path.join(os.path.dirname(PACKAGE_DIR), "pyproject.toml")) else None


def _run_mypy(module, args, tmp_path):
    if not os.path.isfile(PYPROJECT):
        pytest.fail(f"{PYPROJECT} not found: copy the project's pyproject.toml next to tests/")
    cmd = [sys.executable, "-m", module, *args]
    out = subprocess.run(cmd, cwd=CHECKOUT or tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy_cache")})
    assert out.returncode == 0, f"{' '.join(cmd[2:])} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_typing_files_ship_with_package():
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "py.typed"))
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "_native.pyi"))


def test_mypy_clean(tmp_path):
    out = _run_mypy("mypy", ["--config-file", PYPROJECT, "-p", "pgoutput_fast"], tmp_path)
    assert "Success" in out


def test_native_stub_matches_module(tmp_path):
    """Every def / cdef class / attribute of the built extension against _native.pyi."""
    import pgoutput_fast._native as native  # noqa: F401  (fails here, not in stubtest, if missing)

    _run_mypy("mypy.stubtest", ["pgoutput_fast._native", "--mypy-config-file", PYPROJECT,
                                "--allowlist", ALLOWLIST, "--ignore-disjoint-bases"], tmp_path)


def test_version_single_sourced():
    from pgoutput_fast._version import __version__

    assert pgoutput_fast.__version__ == __version__
    try:
        installed = importlib.metadata.version("pgoutput-fast")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("pgoutput-fast is not installed (bare checkout): no metadata to compare")
    assert installed == __version__
