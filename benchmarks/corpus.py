"""The benchmark corpus (see pgoutput_fast.bench.corpus): ``python benchmarks/corpus.py``."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pgoutput_fast.bench.corpus import *  # noqa: E402,F401,F403
from pgoutput_fast.bench.corpus import DEFAULT_ROWS, build, load, path_for  # noqa: E402,F401

if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    build(ap.parse_args().rows)
