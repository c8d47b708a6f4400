"""A local S3 server for the object-store benchmarks: moto in server mode, a separate process on loopback, with
the bucket `lake`; its access log (one line per request answered) lets a benchmark count the requests it caused."""

from __future__ import annotations

import collections
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.fs as pafs

KEYS, BUCKET, REGION = ("bench", "bench-secret"), "lake", "us-east-1"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(r'"([A-Z]+) (\S+) HTTP/[0-9.]+" (\d{3}) ')


class LocalS3:
    """A running moto server; `warehouse(name)` is a warehouse URI in its bucket."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = log
        with open(log, "wb") as f:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                         stdout=f, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("moto server did not answer within 60 s")
            time.sleep(0.1)  # polling interval, bounded by the deadline
        pafs.S3FileSystem(access_key=KEYS[0], secret_key=KEYS[1], region=REGION, endpoint_override=self.endpoint,
                          allow_bucket_creation=True).create_dir(BUCKET)

    def warehouse(self, name: str) -> str:
        return f"s3://{KEYS[0]}:{KEYS[1]}@{BUCKET}/{name}?endpoint_override={self.endpoint}&region={REGION}"

    def mark(self) -> int:
        return self.log.stat().st_size

    def requests_since(self, mark: int) -> collections.Counter[str]:
        """The requests answered since `mark`, counted by method (a listing counts as LIST)."""
        with open(self.log, "rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", errors="replace")
        out: collections.Counter[str] = collections.Counter()
        for line in text.splitlines():
            m = _LINE.search(_ANSI.sub("", line))
            if m is not None:
                out["LIST" if m.group(1) == "GET" and "list-type=" in m.group(2) else m.group(1)] += 1
        return out

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
