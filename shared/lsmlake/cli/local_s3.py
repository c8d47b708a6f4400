"""A local S3 server to try lsmlake on object storage: moto in server mode, its own process on a loopback port.

`lake up --s3` starts one (`LocalS3.start`), creates the warehouse's bucket in it and runs the cluster against it;
the tests' `s3_server` fixture starts it the same way. moto keeps the objects in memory: they are gone when the
server stops. It accepts any key pair; `ACCESS_KEY` and `SECRET_KEY` are fixed, throw-away values so that every
S3 client signs its requests the same way (they are no secret and are recorded in the cluster's state).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from lsmlake.errors import LakeError
from lsmlake.fs.storage_settings import StorageSettings

ACCESS_KEY = "lsmlake-test"
SECRET_KEY = "lsmlake-test-secret"
REGION = "us-east-1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class LocalS3Error(LakeError):
    """The local S3 server is not installed, did not start, or refused the bucket; the message says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings(endpoint: str) -> StorageSettings:
    """The S3 settings of a client of the local server at `endpoint`."""
    return StorageSettings(endpoint=endpoint, region=REGION, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                           path_style=True)


def aws_env(endpoint: str) -> dict[str, str]:
    """The AWS_* variables that point an S3 client without URI parameters at the local server; instance metadata
    is switched off, so that a client missing a setting fails at once instead of probing 169.254.169.254."""
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION, "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"}


def check_installed() -> None:
    """LocalS3Error when moto's server mode cannot be imported, saying how to install it."""
    missing = [m for m in ("moto", "flask", "flask_cors") if importlib.util.find_spec(m) is None]
    if missing:
        raise LocalS3Error(f"the local S3 server needs moto in server mode ({', '.join(missing)} not installed): "
                           'pip install "moto[server]"')


@dataclass
class LocalS3:
    """A running moto server: its process and endpoint (`http://127.0.0.1:PORT`)."""

    process: subprocess.Popen[bytes]
    endpoint: str
    log_path: str

    @staticmethod
    def start(log_path: str, port: int | None = None) -> LocalS3:
        """Start `python -m moto.server` on `port` (default: a free one) and wait until it answers.

        LocalS3Error, with the end of moto's output, when it exits or does not answer within START_TIMEOUT_S.
        """
        check_installed()
        port = port or free_port()
        endpoint = f"http://127.0.0.1:{port}"
        os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env={**os.environ, **aws_env(endpoint)}, start_new_session=True)
        server = LocalS3(proc, endpoint, log_path)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise LocalS3Error(f"the local S3 server (moto) exited with code {proc.returncode}: "
                                   f"{server.log_tail()}")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    return server
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                server.stop()
                raise LocalS3Error(f"the local S3 server (moto) did not answer on {endpoint} within "
                                   f"{START_TIMEOUT_S:.0f} s: {server.log_tail()}")
            time.sleep(0.1)  # polling interval, bounded by the deadline

    def settings(self) -> StorageSettings:
        return settings(self.endpoint)

    def env(self) -> dict[str, str]:
        return aws_env(self.endpoint)

    def create_bucket(self, bucket: str) -> None:
        """Create `bucket` (an existing one is kept)."""
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(**self.settings().filesystem_options(), allow_bucket_creation=True)
        try:
            fs.create_dir(bucket)
        except OSError as e:
            raise LocalS3Error(f"cannot create bucket {bucket!r} on the local S3 server {self.endpoint}: {e}") from e

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if it is still there after STOP_TIMEOUT_S; its exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        return self.process.returncode

    def log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:] or "(no output)"
        except OSError as e:
            return f"(no log: {e})"
