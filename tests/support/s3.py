"""A local S3-compatible server (moto, in its own process: delta-rs and pyarrow's S3
client hold the GIL while they wait on it) with one bucket, ``lake``.

``s3`` is a module-scoped fixture: import it into a test module
(``from tests.support.s3 import s3  # noqa: F401``). It yields the storage options
(delta-rs's keys) that reach the bucket."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

BUCKET = "lake"


@pytest.fixture(scope="module")
def s3():
    boto3 = pytest.importorskip("boto3", reason="moto[server] is in the test extra")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=url, aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline or srv.poll() is not None:
                    raise
                time.sleep(0.2)
        yield {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
               "AWS_ALLOW_HTTP": "true",
               # moto has no conditional put; a real bucket uses delta-rs's
               # AWS_CONDITIONAL_PUT=etag (or a DynamoDB lock) instead
               "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    finally:
        srv.terminate()
        srv.wait(10)


def s3_filesystem(options):
    """A ``pyarrow.fs.S3FileSystem`` on the server of ``options``."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(access_key=options["AWS_ACCESS_KEY_ID"],
                             secret_key=options["AWS_SECRET_ACCESS_KEY"],
                             region=options["AWS_REGION"],
                             endpoint_override=options["AWS_ENDPOINT_URL"], scheme="http")


def upload_dir(options, local_dir, prefix):
    """Copy a local directory to ``s3://lake/<prefix>``; returns the URI."""
    import pyarrow.fs as pafs

    pafs.copy_files(str(local_dir), f"{BUCKET}/{prefix}", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3_filesystem(options))
    return f"s3://{BUCKET}/{prefix}"
