"""What only the tests use: Hypothesis strategies, the bundled captures, message rows.

Imported as ``tests.support`` (pyproject.toml's pytest ``pythonpath`` puts the directory
above ``tests/`` on ``sys.path``). Not part of the wheel.
"""
