"""Spark failures a user can act on, turned into one line (``ExecutorSetupError``).

Spark reports a failure of its Python workers as a ``PythonException`` (or a Py4J error)
whose text holds the worker's traceback inside a Java stack trace: hundreds of lines in
which the cause is one. The known causes are recognized here by that text; anything
else is left as it is (a bug: the traceback)."""

from __future__ import annotations

import re

from ..errors import UserError

_NO_MODULE = re.compile(r"No module named '(pgoutput_fast|pyarrow|pandas|numpy)[.']")


class ExecutorSetupError(UserError):
    """Spark's executors lack what the job's Python functions need."""

    exit_code = 2


class SparkConfError(UserError):
    """A ``--conf`` argument that is not ``KEY=VALUE``."""

    exit_code = 2


def executor_setup_error(exc: BaseException) -> ExecutorSetupError | None:
    """The one-line error for ``exc`` when its cause is an executor whose Python cannot
    import this package (or pyarrow, pandas, numpy); None for anything else."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 10:        # the error itself, then its causes
        m = _NO_MODULE.search(str(e))
        if m:
            module = m.group(1)
            what = "pgoutput-fast[spark]" if module == "pgoutput_fast" else module
            return ExecutorSetupError(
                f"Spark's executors cannot import {module} (ModuleNotFoundError in a Python "
                f"worker): install {what} on every executor node, the same version as the "
                "driver's (or ship a packed virtualenv with spark.archives and "
                "spark.pyspark.python), see docs/delta.md 'Spark: where the work runs'")
        e = e.__cause__ or e.__context__
        seen += 1
    return None
