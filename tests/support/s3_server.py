"""A local S3 server for tests: moto in server mode, a separate process on a free loopback port.

`s3_server` (session scope, registered in conftest) starts it, waits until it answers and creates a bucket;
`S3Server.warehouse(name)` is a warehouse URI of a fresh prefix in that bucket, as `FileSystemCatalog` takes
it (credentials and endpoint in pyarrow's URI parameters), and `S3Server.env()` the AWS_* variables for a
client that reads them instead (this process's environment is left alone). When moto cannot start, the test fails with
moto's own output (never skipped: the object-store tests are part of the suite). The server is started as
`lake up --s3` starts it (`lsmlake.cli.local_s3`), with the same keys.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from lsmlake.cli import local_s3
from lsmlake.cli.local_s3 import ACCESS_KEY, REGION, SECRET_KEY, LocalS3, LocalS3Error

__all__ = ["ACCESS_KEY", "BUCKET", "REGION", "SECRET_KEY", "S3Server", "aws_env", "create_bucket", "free_port",
           "pypaimon_options", "s3_server", "start_moto", "stop_process"]

BUCKET = "lake"


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server: its endpoint (`http://127.0.0.1:PORT`), a bucket in it, and the file its access log
    goes to (one line per request answered: `tests.support.s3_requests` counts them)."""

    endpoint: str
    bucket: str
    log_path: str = ""

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point a client without URI parameters at this server."""
        return aws_env(self.endpoint)

    def warehouse(self, name: str | None = None) -> str:
        """A warehouse URI under a prefix of its own (`name`, or a fresh one), as pyarrow's S3 URI has it:
        credentials as user info, endpoint and region as query parameters."""
        prefix = name or f"wh-{uuid.uuid4().hex[:12]}"
        return (f"s3://{ACCESS_KEY}:{SECRET_KEY}@{self.bucket}/{prefix}"
                f"?endpoint_override={self.endpoint}&region={REGION}")


def pypaimon_options(warehouse: str, endpoint: str) -> dict[str, str]:
    """The catalog options with which pypaimon opens a warehouse URI of `S3Server.warehouse` on the server."""
    path = warehouse.split("@", 1)[1].split("?", 1)[0]
    return {"warehouse": f"s3://{path}", "fs.s3.endpoint": endpoint, "fs.s3.accessKeyId": ACCESS_KEY,
            "fs.s3.accessKeySecret": SECRET_KEY, "fs.s3.region": REGION, "fs.s3.path-style-access": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def aws_env(endpoint: str) -> dict[str, str]:
    """The AWS_* variables that point an S3 client without URI parameters at the local server."""
    return local_s3.aws_env(endpoint)


def start_moto(log_path: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start `python -m moto.server` on a free port; (the process, its endpoint) once it answers.

    Raises RuntimeError with the tail of moto's log when it exits or does not answer in time.
    """
    try:
        server = LocalS3.start(log_path)
    except LocalS3Error as e:
        raise RuntimeError(str(e)) from e
    return server.process, server.endpoint


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Stop a test server: SIGTERM, then SIGKILL if it is still there after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def create_bucket(endpoint: str, bucket: str) -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
                           endpoint_override=endpoint, allow_bucket_creation=True)
    fs.create_dir(bucket)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server for the session with the bucket `lake`; fails (never skips) when moto cannot start."""
    log_path = os.path.join(tempfile.mkdtemp(prefix="moto-"), "moto.log")
    try:
        proc, endpoint = start_moto(log_path)
    except (RuntimeError, OSError) as e:
        pytest.fail(f"cannot start the local S3 server (moto): {e}", pytrace=False)
    try:
        create_bucket(endpoint, BUCKET)
        yield S3Server(endpoint, BUCKET, log_path)
    finally:
        stop_process(proc)
