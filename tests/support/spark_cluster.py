"""A Spark standalone cluster for tests: a master and workers as separate processes on loopback.

`spark_cluster` (session scope, registered in conftest) starts a master and one worker (1 core, 1 GiB) with the
`spark-class` script the pyspark wheel ships, and waits until the master's web UI (`/json`) lists the worker
ALIVE. `SparkCluster.kill_worker()` kills a worker with SIGKILL (as a lost machine) and `start_worker()` starts
another and waits until it is ALIVE. Every process is stopped at the end of the session. When a process cannot
start, the test fails with the processes' logs (never skipped: the cluster tests are part of the suite).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.support.s3_server import free_port

START_TIMEOUT_S = 120.0  # a JVM start on a loaded 2-core machine takes tens of seconds


def spark_class() -> str:
    """The `spark-class` script of the installed pyspark wheel."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


@dataclass
class SparkCluster:
    """A running standalone master (`master` is its `spark://127.0.0.1:P` URL) and its workers."""

    master: str
    web_ui: str
    folder: str
    master_proc: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)

    def alive_workers(self) -> list[dict[str, object]]:
        """The workers the master lists as ALIVE."""
        with urllib.request.urlopen(f"{self.web_ui}/json/", timeout=5) as r:
            state = json.loads(r.read())
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def start_worker(self, cores: int = 1) -> subprocess.Popen[bytes]:
        """Start a worker and wait until the master lists one more ALIVE worker than before."""
        before = {w["id"] for w in self.alive_workers()}
        n = len(self.workers)
        work_dir = os.path.join(self.folder, f"worker-{n}")
        os.makedirs(work_dir, exist_ok=True)
        log = os.path.join(self.folder, f"worker-{n}.log")
        self.logs.append(log)
        proc = _spawn(["org.apache.spark.deploy.worker.Worker", self.master, "--host", "127.0.0.1",
                       "--cores", str(cores), "--memory", "1g", "--port", str(free_port()),
                       "--webui-port", str(free_port()), "--work-dir", work_dir], log)
        self.workers.append(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark worker exited with {proc.returncode}:\n{self.tails()}")
            try:
                if {w["id"] for w in self.alive_workers()} - before:
                    return proc
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no new ALIVE worker on {self.master} within {START_TIMEOUT_S:.0f} s:\n"
                                   f"{self.tails()}")
            time.sleep(0.5)

    def kill_worker(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """SIGKILL a worker (the last one started by default) and the executors it launched, as a machine lost:
        an executor is a child JVM of the worker, and a dead worker's orphaned executor would keep working."""
        proc = proc or next(p for p in reversed(self.workers) if p.poll() is None)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def tails(self) -> str:
        return "\n".join(f"--- {os.path.basename(p)}:\n{_tail(p)}" for p in self.logs)

    def stop(self) -> None:
        for proc in [*self.workers, self.master_proc]:
            _stop(proc)


def _spawn(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    """`spark-class ARGS` in a process group of its own (so that a kill reaches the JVMs it starts)."""
    env = {**os.environ, "SPARK_NO_DAEMONIZE": "1", "SPARK_LOG_DIR": os.path.dirname(log_path),
           "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_HOME", None)
    with open(log_path, "wb") as log:
        return subprocess.Popen(["bash", spark_class(), *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-3000:] or "(no output)"
    except OSError as e:
        return f"(no log: {e})"


def start_cluster(folder: str) -> SparkCluster:
    """A master and one worker; raises RuntimeError with their logs when they do not come up in time."""
    port, ui = free_port(), free_port()
    log = os.path.join(folder, "master.log")
    proc = _spawn(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                   "--webui-port", str(ui)], log)
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", folder, proc, logs=[log])
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Spark master exited with {proc.returncode}:\n{cluster.tails()}")
            try:
                cluster.alive_workers()
                break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark master did not answer on {cluster.web_ui} within "
                                   f"{START_TIMEOUT_S:.0f} s:\n{cluster.tails()}")
            time.sleep(0.5)
        cluster.start_worker()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkCluster]:
    """A standalone master with one ALIVE worker for the session; fails (never skips) when they cannot start."""
    if shutil.which("java") is None:
        pytest.fail("the Spark cluster needs Java 17 (`java` is not on PATH)", pytrace=False)
    folder = tempfile.mkdtemp(prefix="spark-cluster-")
    try:
        cluster = start_cluster(folder)
    except (RuntimeError, OSError) as e:
        pytest.fail(f"cannot start the Spark standalone cluster: {e}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
