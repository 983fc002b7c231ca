"""Environments for native child processes (PostgreSQL, a JVM) under a sanitizer run.

``scripts/sanitize.sh`` preloads clang's AddressSanitizer runtime into the tests' Python
(``LD_PRELOAD``) and sets ``ASAN_OPTIONS``/``UBSAN_OPTIONS``. A child inherits all of
that: a Python child (``sys.executable``) needs it, since it imports the instrumented
extension, but a native program does not. PostgreSQL's ``postgres``, ``initdb`` and
``pg_ctl`` hang or fail under the preloaded runtime, and so does a JVM (Spark).

* ``native_env(env)``: a copy of ``env`` (default ``os.environ``) without the sanitizer
  preload and options, for starting a program that is not this Python.
* ``jvm_children()``: a context manager for starting a JVM whose Python workers must
  run with the sanitizer again (PySpark: ``PYSPARK_PYTHON``); without a sanitizer
  preload it does nothing.

Outside a sanitizer run both leave everything as it is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import stat
import sys
import tempfile

__all__ = ["SANITIZER_VARS", "sanitizer_preloaded", "native_env", "jvm_children"]

#: Variables a sanitizer run sets for the tests' Python and no native child needs.
SANITIZER_VARS = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")


def _is_sanitizer_lib(path: str) -> bool:
    name = os.path.basename(path)
    return "libclang_rt." in name or name.startswith(("libasan", "libubsan", "liblsan")) or \
        name.startswith("asan_with_fuzzer")


def sanitizer_preloaded(env=None) -> bool:
    """Whether ``env`` (default ``os.environ``) preloads a sanitizer runtime."""
    env = os.environ if env is None else env
    return any(_is_sanitizer_lib(p) for p in env.get("LD_PRELOAD", "").replace(":", " ").split())


def native_env(env=None) -> dict:
    """A copy of ``env`` (default ``os.environ``) for a native (non-Python) child: the
    sanitizer runtime taken out of ``LD_PRELOAD`` (other preloads stay) and the
    sanitizer options removed. Unchanged when no sanitizer runtime is preloaded."""
    env = dict(os.environ if env is None else env)
    if not sanitizer_preloaded(env):
        return env
    keep = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if not _is_sanitizer_lib(p)]
    if keep:
        env["LD_PRELOAD"] = " ".join(keep)
    else:
        env.pop("LD_PRELOAD", None)
    for k in SANITIZER_VARS:
        env.pop(k, None)
    return env


@contextlib.contextmanager
def jvm_children():
    """While inside: ``os.environ`` holds no sanitizer preload or options (a JVM started
    now, e.g. by PySpark, runs without them) and ``PYSPARK_PYTHON`` is a small wrapper
    that puts them back and runs the Python it named (default ``sys.executable``), so
    the Python workers that JVM starts import the instrumented extension with the
    runtime loaded. Everything is restored on exit; the wrapper stays until the
    interpreter exits (the JVM starts workers later). Without a sanitizer preload it
    does nothing."""
    if not sanitizer_preloaded():
        yield
        return
    saved = {k: os.environ.get(k) for k in ("LD_PRELOAD", "PYSPARK_PYTHON", *SANITIZER_VARS)}
    python = saved["PYSPARK_PYTHON"] or sys.executable
    lines = ["#!/bin/sh"]
    for k in ("LD_PRELOAD", *SANITIZER_VARS):
        if saved[k] is not None:
            lines.append(f"export {k}={shlex.quote(saved[k])}")
    lines.append(f'exec {shlex.quote(python)} "$@"')
    fd, wrapper = tempfile.mkstemp(prefix="pgoutput_fast_sanpython_", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(wrapper, stat.S_IRWXU)
    _wrappers.append(wrapper)
    try:
        stripped = native_env()
        for k in ("LD_PRELOAD", *SANITIZER_VARS):
            if k in stripped:
                os.environ[k] = stripped[k]
            else:
                os.environ.pop(k, None)
        os.environ["PYSPARK_PYTHON"] = wrapper
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_wrappers: list[str] = []


@atexit.register
def _remove_wrappers():
    for w in _wrappers:
        with contextlib.suppress(OSError):
            os.remove(w)
