"""Catalog and writer services as real processes on loopback ports, for the acceptance tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import grpc

from lsmlake.kafka.broker import free_port
from tests.support.health_check import serving
from tests.support.paths import ROOT

START_TIMEOUT_S = 180.0  # a compactor starts a JVM; on a loaded machine that alone can take a minute


class Service:
    """A service process; `stop` sends SIGTERM and waits, `kill` is SIGKILL.

    `faults`: a storage fault spec (`tests.support.fault_fs`) the service's FileIOs inject, through the
    `tests.support.faulty_service` launcher. `env`: variables set for the process on top of this one's (the
    AWS_* settings of an S3 warehouse, as a deployment gives them).
    """

    def __init__(self, module: str, args: list[str], log_dir: Path, port: int | None = None,
                 faults: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.log = log_dir / f"{module.rsplit('.', 1)[-1]}-{uuid.uuid4().hex[:6]}.log"
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        launch = [module]
        if faults is not None:
            launch = ["tests.support.faulty_service", faults, module]
            child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), child_env.get("PYTHONPATH")) if p)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", *launch, "--port", str(self.port), *args],
                                         stdout=subprocess.DEVNULL, stderr=log, env=child_env)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}",
                                             options=[("grpc.max_send_message_length", 64 << 20)])
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"{module} exited: {self.tail()}"
            if serving(self.channel):
                return
            assert time.monotonic() < deadline, f"{module} never became SERVING: {self.tail()}"
            time.sleep(0.1)  # polling interval, bounded by the deadline

    def tail(self, n: int = 3000) -> str:
        return self.log.read_text()[-n:] if self.log.exists() else ""

    def kill(self) -> None:
        self.channel.close()
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout_s: float = 60.0) -> int:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def catalog(warehouse: Path, bootstrap: str | None, *extra: str, faults: str | None = None) -> Service:
    args = ["--warehouse", str(warehouse), *extra]
    if bootstrap:
        args += ["--kafka", bootstrap]
    return Service("catalog_svc", args, warehouse.parent, faults=faults)


def writer(warehouse: Path, catalog_port: int, *extra: str, port: int | None = None,
           faults: str | None = None) -> Service:
    return Service("writer_svc", ["--warehouse", str(warehouse), "--catalog", f"127.0.0.1:{catalog_port}",
                                          *extra], warehouse.parent, port, faults)


def compactor(warehouse: Path, catalog_port: int, bootstrap: str, *extra: str) -> Service:
    return Service("compactor_svc", ["--warehouse", str(warehouse), "--catalog", f"127.0.0.1:{catalog_port}",
                                             "--kafka", bootstrap, "--spark-master", "local[2]", *extra],
                   warehouse.parent)
