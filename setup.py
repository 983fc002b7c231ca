"""Build of the native extension ``pgoutput_fast._native`` from ``src/``.

Environment switches:
  PGOUTPUT_FAST_DEBUG=1     -O0 -g, Cython line tracing off, annotate HTML
  PGOUTPUT_FAST_SANITIZE=   a comma list of sanitizers, compiled and linked as
                            -fsanitize=...: "address,undefined" (or "1", the same) for
                            the sanitizer test suite (scripts/sanitize.sh), and
                            "fuzzer-no-link,address,undefined" for the coverage-guided
                            fuzzers (fuzz/run.sh). Use clang (CC=clang) for "fuzzer-no-link".
                            -O1 -g; undefined behaviour aborts instead of printing.
  PGOUTPUT_FAST_PGO=        the profile-guided build (GCC): "0" off, "1" required (the
                            build fails instead of falling back to a plain one). By
                            default it is made where it can be: GCC >= 10, no debug or
                            sanitizer build, and a training run that works (it imports
                            numpy and pyarrow, which are build requirements for that).

The profile-guided build compiles the extension with -fprofile-generate, runs
src/pgo_train.py with it (a synthetic stream decoded into every output: no server, a few
seconds), and compiles it again with -fprofile-use: the compiler then lays out, inlines
and unrolls for the paths that the training took. On the change-event table that is
about 10 % less time (see the README's Performance section).
"""

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from Cython.Build import cythonize

HERE = os.path.dirname(os.path.abspath(__file__))

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

pgo = os.environ.get("PGOUTPUT_FAST_PGO", "").strip()


class BuildExt(build_ext):
    """build_ext with the profile-guided build (see the module's doc)."""

    def build_extension(self, ext):
        why = self._no_pgo()
        if why:
            if pgo == "1":
                raise RuntimeError(f"PGOUTPUT_FAST_PGO=1 but no profile-guided build: {why}")
            if pgo != "0":
                print(f"pgoutput_fast: no profile-guided build ({why})", file=sys.stderr)
            return super().build_extension(ext)
        profile = os.path.join(os.path.abspath(self.build_temp), "pgo-profile")
        shutil.rmtree(profile, ignore_errors=True)
        cargs, largs, force = list(ext.extra_compile_args), list(ext.extra_link_args), self.force
        try:
            self.force = True                      # (the second compile must not be skipped)
            ext.extra_compile_args = cargs + [f"-fprofile-generate={profile}", "-fno-vpt"]
            ext.extra_link_args = largs + ["-fprofile-generate"]
            super().build_extension(ext)
            trained = self._train(ext)
            if trained is not True:
                if pgo == "1":
                    raise RuntimeError(f"PGOUTPUT_FAST_PGO=1: the training run failed\n{trained}")
                print(f"pgoutput_fast: the training run failed; a plain build\n{trained}", file=sys.stderr)
            ext.extra_compile_args = cargs + (self._use_flags(profile) if trained is True else [])
            ext.extra_link_args = largs
            super().build_extension(ext)
        finally:
            ext.extra_compile_args, ext.extra_link_args, self.force = cargs, largs, force

    @staticmethod
    def _use_flags(profile):
        # -fprofile-partial-training: what the training did not run is compiled as
        # without a profile, not for size. -fno-vpt (both phases): no code specialised
        # for the values the training happened to see (divisors, copy sizes). On x86,
        # copies of a size known only at run time stay calls to the C library's memcpy:
        # with a profile GCC inlined them as "rep movsq", which on the spool's message
        # copies (a few hundred bytes each) made a streamed decode slower than without
        # a profile (stream binary events: 96 against 84 ms; 80 with the calls).
        flags = [f"-fprofile-use={profile}", "-fprofile-partial-training", "-Wno-missing-profile", "-fno-vpt"]
        if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86"):
            flags.append("-mstringop-strategy=libcall")
        return flags

    def _no_pgo(self):
        """Why this build is not profile-guided, or None."""
        if pgo == "0":
            return "PGOUTPUT_FAST_PGO=0"
        if debug or sanitize:
            return "a debug or sanitizer build"
        if self.compiler.compiler_type != "unix":
            return f"compiler {self.compiler.compiler_type}"
        cc = self.compiler.compiler_so[0]
        try:
            text = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
            major = int(subprocess.run([cc, "-dumpversion"], capture_output=True, text=True,
                                       timeout=60).stdout.split(".")[0])
        except (OSError, ValueError, subprocess.SubprocessError):
            return f"cannot run {cc}"
        if "clang" in text.lower() or not re.search(r"gcc|GCC|Free Software Foundation", text):
            return f"{cc} is not GCC"
        if major < 10:
            return f"GCC {major} (-fprofile-partial-training needs 10)"
        return None

    def _train(self, ext):
        """Run src/pgo_train.py with the instrumented extension: True, or what it printed."""
        built = self.get_ext_fullpath(ext.name)
        with tempfile.TemporaryDirectory(prefix="pgoutput_fast-pgo-") as tmp:
            # the package's Python files and the instrumented module, away from the source
            # tree (whose own build may be older)
            shutil.copytree(os.path.join(HERE, "pgoutput_fast"), os.path.join(tmp, "pgoutput_fast"),
                            ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
            shutil.copy2(built, os.path.join(tmp, "pgoutput_fast", os.path.basename(built)))
            env = {k: v for k, v in os.environ.items() if not k.startswith("PGOUTPUT_FAST_")}
            # one thread: the instrumented build's counters are not atomic, and a Decoder's
            # helper thread running the same functions at once made GCC refuse the profile
            # ("corrupted profile info: profile data is not flow-consistent"); the helper
            # runs the very functions the calling thread does, so their profile is the same
            env["PGOUTPUT_FAST_DECODER_THREADS"] = "1"
            # (first on the path; pip's isolated build environment has its own entry there)
            env["PYTHONPATH"] = os.pathsep.join([tmp] + [p for p in [env.get("PYTHONPATH")] if p])
            try:
                run = subprocess.run([sys.executable, os.path.join(HERE, "src", "pgo_train.py")],
                                     cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.SubprocessError) as exc:
                return str(exc)
        return True if run.returncode == 0 else (run.stdout + run.stderr)[-3000:]


ext = Extension(
    "pgoutput_fast._native",
    sources=["src/_native.pyx"],
    include_dirs=["src"],
    depends=sorted(glob.glob(os.path.join("src", "*.h"))),   # the C headers (src/*.h)
    extra_compile_args=compile_args,
    extra_link_args=link_args,
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

setup(
    cmdclass={"build_ext": BuildExt},
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
