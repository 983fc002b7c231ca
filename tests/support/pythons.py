"""Python interpreters for Spark's workers, as a node may have them."""

from __future__ import annotations

import stat
import sys

#: imported at start-up (as sitecustomize): pgoutput_fast cannot be found there
_BLOCKER = '''
import sys

class _NoPgoutputFast:
    def find_spec(self, name, path=None, target=None):
        if name == "pgoutput_fast" or name.startswith("pgoutput_fast."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoPgoutputFast())
'''


def wrapper(path, body) -> str:
    """An executable shell script at ``path`` running ``body``."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def python_without_package(directory, name="bare-python") -> str:
    """A Python (a wrapper of this one, in ``directory``) that cannot import
    ``pgoutput_fast``: a node the package was not installed on."""
    blocker = directory / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_BLOCKER)
    return wrapper(directory / name,
                   f'PYTHONPATH="{blocker}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
