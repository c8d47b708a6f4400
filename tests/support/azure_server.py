"""A local Azure Blob server for tests: Azurite (the Azure Storage emulator, from npm) in a separate process.

`make azurite` (a step of `make test`) installs the pinned Azurite under `.node/`. `azure_server` (session scope,
registered in conftest) starts its blob service on a free loopback port with in-memory storage, waits until it
answers, creates a container and stops it at the end. It fails (never skips) when Azurite is not installed or
cannot start; it skips, printing why, only when Node.js or npm is missing from this machine (outside the repository).

Azurite knows one account, `devstoreaccount1`, with a well-known key. pyarrow 19 ignores an account key given in
an `abfs://` URI (it falls back to Azure's default credential, which refuses plain http), so a warehouse URI
carries an account SAS signed with that key instead (`AzureServer.warehouse`); pyarrow sends the whole query
string as the SAS and Azure and Azurite ignore the parameters that are not part of it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow.fs as pafs
import pytest

from tests.support.paths import ROOT
from tests.support.s3_server import free_port, stop_process

ACCOUNT = "devstoreaccount1"
#: Azurite's well-known account key (public, documented by Microsoft)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "lake"
AZURITE = ROOT / ".node" / "node_modules" / ".bin" / "azurite-blob"
_SAS_VERSION = "2021-08-06"
_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class AzureServer:
    """A running Azurite blob service: its authority (`127.0.0.1:PORT`) and a container in it."""

    authority: str
    container: str

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow AzureFileSystem on this server signed with the account key (made by the constructor, which,
        unlike an `abfs://` URI, takes the key)."""
        return pafs.AzureFileSystem(ACCOUNT, account_key=ACCOUNT_KEY, blob_storage_authority=self.authority,
                                    dfs_storage_authority=self.authority, blob_storage_scheme="http",
                                    dfs_storage_scheme="http")

    def warehouse(self, name: str | None = None) -> str:
        """A warehouse URI under a prefix of its own (`name`, or a fresh one), with an account SAS as the
        credential."""
        prefix = name or f"wh-{uuid.uuid4().hex[:12]}"
        return (f"abfs://{ACCOUNT}@{self.container}/{prefix}?blob_storage_authority={self.authority}"
                f"&dfs_storage_authority={self.authority}&enable_tls=false&{account_sas()}")


def account_sas() -> str:
    """An account SAS for the blob service, every permission, valid until 2099, signed with the account key."""
    fields = {"sv": _SAS_VERSION, "ss": "b", "srt": "sco", "sp": "rwdlacup", "se": "2099-01-01T00:00:00Z",
              "spr": "http,https"}
    # string-to-sign of an account SAS from version 2020-12-06 on (empty: start, IP, encryption scope)
    to_sign = "\n".join([ACCOUNT, fields["sp"], fields["ss"], fields["srt"], "", fields["se"], "", fields["spr"],
                         fields["sv"], "", ""])
    sig = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest()
    return urllib.parse.urlencode({**fields, "sig": base64.b64encode(sig).decode()})


def start_azurite(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start Azurite's blob service on a free port, in memory; (the process, its authority) once it answers.

    Raises RuntimeError with the tail of its log when it exits or does not answer in time.
    """
    port = free_port()
    authority = f"127.0.0.1:{port}"
    log_path = os.path.join(workdir, "azurite.log")
    with open(log_path, "wb") as log:
        # cwd: where Azurite would put anything it writes despite --inMemoryPersistence
        proc = subprocess.Popen([str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
                                 "--inMemoryPersistence", "--disableTelemetry", "--skipApiVersionCheck"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    deadline = time.monotonic() + _START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"Azurite exited with {proc.returncode}: {_tail(log_path)}")
        try:  # any HTTP answer (an unsigned request is refused) means it listens
            with urllib.request.urlopen(f"http://{authority}/{ACCOUNT}?comp=list", timeout=1):
                pass
            return proc, authority
        except urllib.error.HTTPError:
            return proc, authority
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            stop_process(proc)
            raise RuntimeError(f"Azurite did not answer on {authority} within {_START_TIMEOUT_S:.0f} s: "
                               f"{_tail(log_path)}")
        time.sleep(0.1)


def _missing() -> tuple[str, bool] | None:
    """None when Azurite can run; else why not and whether the reason lies outside the repository."""
    if AZURITE.exists():
        if shutil.which("node") is None:
            return "Node.js is not installed on this machine (Azurite runs on it)", True
        return None
    if shutil.which("npm") is None:
        return "npm is not installed on this machine, so Azurite could not be installed", True
    return f"Azurite is not installed at {AZURITE}: run `make azurite` (a step of `make test`)", False


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-2000:] or "(no output)"
    except OSError as e:
        return f"(no log: {e})"


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzureServer]:
    """An Azurite blob service for the session with the container `lake`."""
    missing = _missing()
    if missing is not None:
        reason, outside = missing
        if outside:
            print(f"azure_server: skipped: {reason}")
            pytest.skip(reason)
        pytest.fail(f"cannot start the local Azure server: {reason}", pytrace=False)
    workdir = tempfile.mkdtemp(prefix="azurite-")
    try:
        proc, authority = start_azurite(workdir)
    except (RuntimeError, OSError) as e:
        pytest.fail(f"cannot start the local Azure server (Azurite): {e}", pytrace=False)
    try:
        server = AzureServer(authority, CONTAINER)
        server.filesystem().create_dir(CONTAINER)
        yield server
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)
