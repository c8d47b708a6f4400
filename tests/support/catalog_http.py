"""A catalog-svc process with its two HTTP ports (the Paimon REST API and the console), and raw sockets at them
from chosen loopback peers: what the HTTP abuse and limit tests drive.

Every loopback address 127.x.y.z reaches the server on Linux, and the server counts each as its own peer, so a
test can open connections from many peers by binding its client sockets to 127.0.1.1, 127.0.1.2, ...
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import grpc

from lsmlake.kafka.broker import free_port
from tests.support.health_check import serving

START_TIMEOUT_S = 90.0
MiB = 1 << 20


@dataclass
class CatalogProcess:
    """A running catalog-svc: gRPC on `port`, the REST API on `rest_port`, the console on `ui_port`."""

    proc: subprocess.Popen[bytes]
    port: int
    health_port: int
    rest_port: int
    ui_port: int
    log: Path
    tls: ssl.SSLContext | None  # a client context trusting the server's CA, when the ports speak TLS

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mib(self) -> float:
        """The process's resident memory now."""
        return rss_mib(self.pid)

    def sockets(self) -> int:
        """How many sockets the process holds open: its listeners and every connection it accepted."""
        n = 0
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            with suppress(OSError):  # a file closed while we look
                n += os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith("socket:")
        return n

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text()[-n:] if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None


def rss_mib(pid: int) -> float:
    """VmRSS of a process, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


@contextmanager
def catalog_process(workdir: Path, tokens_file: str, tls_cert: str | None = None, tls_key: str | None = None,
                    ca: str | None = None, extra_args: tuple[str, ...] = ()) -> Iterator[CatalogProcess]:
    """catalog-svc with `--rest-port` and `--ui-port`, tokens checked, TLS when a certificate is given; ready once
    its plaintext health port answers SERVING and both HTTP ports accept."""
    warehouse = workdir / "wh"
    port, health, rest, ui = free_port(), free_port(), free_port(), free_port()
    args = ["--warehouse", str(warehouse), "--port", str(port), "--health-port", str(health), "--rest-port", str(rest),
            "--ui-port", str(ui), "--auth-tokens", tokens_file, "--expire-interval", "0", "--orphan-interval", "0"]
    if tls_cert and tls_key:
        args += ["--tls-cert", tls_cert, "--tls-key", tls_key]
    args += extra_args
    log = workdir / f"catalog-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "catalog_svc", *args], stdout=subprocess.DEVNULL, stderr=out,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    tls = ssl.create_default_context(cafile=ca) if ca else None
    cat = CatalogProcess(proc, port, health, rest, ui, log, tls)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        with grpc.insecure_channel(f"127.0.0.1:{health}") as ch:
            while not (serving(ch) and _accepts(rest) and _accepts(ui)):
                assert cat.alive(), f"catalog-svc exited: {cat.tail()}"
                assert time.monotonic() < deadline, f"catalog-svc never became ready: {cat.tail()}"
                time.sleep(0.1)  # polling interval, bounded by the deadline
        yield cat
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def peer(i: int, block: int = 1) -> str:
    """The i-th loopback peer address of a block: 127.<block>.<i // 250>.<i % 250 + 1>, each a peer of its own."""
    return f"127.{block}.{i // 250}.{i % 250 + 1}"


def connect(port: int, source: str = "127.0.0.1", tls: ssl.SSLContext | None = None,
            timeout_s: float = 10.0) -> socket.socket:
    """A client socket to the loopback `port` from the loopback address `source` (TLS: handshake done)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout_s)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        if tls is not None:
            return tls.wrap_socket(s, server_hostname="127.0.0.1")
    except BaseException:
        s.close()
        raise
    return s


def is_open(s: socket.socket) -> bool:
    """The server has neither closed the connection nor sent anything on it (a refusal would be either)."""
    if isinstance(s, ssl.SSLSocket) and s.pending():
        return False
    try:
        readable, _, _ = select.select([s], [], [], 0)
    except (OSError, ValueError):
        return False  # closed on our side
    if not readable:
        return True
    if not isinstance(s, ssl.SSLSocket):
        return False
    # TLS 1.3 servers send session tickets after the handshake: readable, but no data for the application
    timeout = s.gettimeout()
    s.settimeout(0)
    try:
        s.recv(1)
    except ssl.SSLWantReadError:
        return True
    except OSError:
        return False
    finally:
        s.settimeout(timeout)
    return False


def closed_within(s: socket.socket, timeout_s: float) -> tuple[bool, bytes]:
    """Whether the server closed the connection within `timeout_s`, and what it sent before (read and dropped
    beyond 64 KiB)."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            return False, got
        except OSError:  # a reset (TLS errors are OSErrors too)
            return True, got
        if not chunk:
            return True, got
        got = (got + chunk)[:65536]
    return False, got


def status_of(raw: bytes) -> int | None:
    """The status code of the first HTTP answer in `raw`; None when there is none."""
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[0].startswith(b"HTTP/") and line[1].isdigit() else None


def answer(s: socket.socket, timeout_s: float) -> tuple[int | None, bytes]:
    """The first answer on `s` (its status and all the bytes read) within `timeout_s`; None when none came."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        head, sep, body = got.partition(b"\r\n\r\n")
        if sep:
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                           if line.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                return status_of(got), got
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except OSError:  # the time is up (TimeoutError), or a reset
            break
        if not chunk:
            break
        got += chunk
    return status_of(got), got


class RssPeak:
    """The process's peak resident memory while the block runs, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = rss_mib(pid)
        self.peak = self.before
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            with suppress(OSError, StopIteration):
                self.peak = max(self.peak, rss_mib(self.pid))

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(5)
        with suppress(OSError, StopIteration):
            self.peak = max(self.peak, rss_mib(self.pid))

    @property
    def growth(self) -> float:
        return self.peak - self.before


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        with suppress(OSError):
            s.close()
