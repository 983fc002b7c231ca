"""Build of the native extension ``pgoutput_fast._native`` from ``src/``.

Environment switches:
  PGOUTPUT_FAST_DEBUG=1     -O0 -g, Cython line tracing off, annotate HTML
  PGOUTPUT_FAST_SANITIZE=   a comma list of sanitizers, compiled and linked as
                            -fsanitize=...: "address,undefined" (or "1", the same) for
                            the sanitizer test suite (scripts/sanitize.sh), and
                            "fuzzer-no-link,address,undefined" for the coverage-guided
                            fuzzers (fuzz/run.sh). Use clang (CC=clang) for "fuzzer-no-link".
                            -O1 -g; undefined behaviour aborts instead of printing.
"""

import os
import sys

from setuptools import Extension, setup
from Cython.Build import cythonize

debug = os.environ.get("PGOUTPUT_FAST_DEBUG") == "1"
sanitize = os.environ.get("PGOUTPUT_FAST_SANITIZE", "").strip()
if sanitize == "1":
    sanitize = "address,undefined"

if sys.platform == "win32":
    compile_args = ["/O2"]
    link_args = []
else:
    # -g0: no debug info in release builds (Python's own CFLAGS often carry -g, which
    # makes the module ~6x larger); the symbol table stays, for profilers.
    compile_args = ["-O0", "-g"] if debug else ["-O1", "-g"] if sanitize else ["-O3", "-g0"]
    compile_args += ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code", "-std=c99"]
    link_args = []
    if sanitize:
        flags = [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"]
        if "undefined" in sanitize.split(","):
            flags.append("-fno-sanitize-recover=undefined")
        compile_args += flags
        link_args += flags

ext = Extension(
    "pgoutput_fast._native",
    sources=["src/_native.pyx"],
    include_dirs=["src"],
    extra_compile_args=compile_args,
    extra_link_args=link_args,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

setup(
    ext_modules=cythonize(
        [ext],
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
            "freethreading_compatible": False,
        },
        annotate=debug,
        include_path=["src"],
    ),
)
