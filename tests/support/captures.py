"""The bundled real captures (``tests/fixtures/*.pgoc``, made by make_fixtures.py)."""

import os

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")

FIXTURE_NAMES = sorted(f[:-5] for f in os.listdir(FIXTURES) if f.endswith(".pgoc"))


def load_fixture(name):
    """``(lsns, messages)`` of the capture ``tests/fixtures/<name>.pgoc``."""
    from pgoutput_fast.framing import read_capture

    return read_capture(os.path.join(FIXTURES, name + ".pgoc"))
