"""The catalog service process: settings, the gRPC server with health checking, and graceful shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from catalog_svc.console import SESSION_COOKIE, Console, error_page
from catalog_svc.health_history import HealthHistory
from catalog_svc.iceberg_rest import IcebergRestApi
from catalog_svc.maintenance import Maintenance, reconcile_all
from catalog_svc.metrics import CatalogMetrics
from catalog_svc.relay import KEEP_DELIVERED_S, KEEP_UNDELIVERED_S, OutboxRelay
from catalog_svc.rest_api import RestCatalogApi
from catalog_svc.servicer import CatalogService
from catalog_svc.status_servicer import CatalogBeat, StatusService, add_to_server
from lsmlake.auth.sessions import SessionStore
from lsmlake.catalog.commit.catalog_commits import AFTER_COMMIT, AFTER_SNAPSHOT
from lsmlake.catalog.data_tokens import (
    DEFAULT_LIFETIME_S,
    DataTokenMode,
    DataTokenVendor,
    Grants,
    GrantsFile,
    check_lifetime,
)
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.operations import KEEP_WRITES_MS, CatalogOperations
from lsmlake.errors import InvalidInputError
from lsmlake.metastore import MetaStore, open_store
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc
from lsmlake.rest.http_server import HttpSettings, JsonHttpServer
from lsmlake.rest.iceberg_json import ICEBERG_PREFIX
from lsmlake.rest.iceberg_json import error_body as iceberg_error_body
from lsmlake.rpc import convert
from lsmlake.rpc.events import snapshot_events
from lsmlake.rpc.heartbeat import interval_from_env
from lsmlake.rpc.service_main import (
    ServiceProcess,
    ServiceSettings,
    add_service_arguments,
    int_or_none,
    run_until_signal,
    service_settings,
)
from lsmlake.runtime.observability import configure_logging

_log = logging.getLogger(__name__)

SERVICE_NAME = catalog_pb2.DESCRIPTOR.services_by_name["CatalogService"].full_name
METASTORE_FILE = "_lsmlake_catalog.sqlite"
WORKERS = 16
FAULTS = (None, "exit-after-snapshot", "exit-after-commit")
_FAULT_POINTS = {AFTER_SNAPSHOT: "exit-after-snapshot", AFTER_COMMIT: "exit-after-commit"}


def crash_at(fault: str | None) -> Callable[[str], None]:
    """The hook that ends the process at `fault`'s point of a commit, for the recovery tests: "exit-after-snapshot"
    after the snapshot is published and before the metadata store commits, "exit-after-commit" after the store
    commits and before the relay publishes the events."""
    if fault not in FAULTS:
        raise InvalidInputError(f"fault {fault!r} is not one of {', '.join(f for f in FAULTS if f)}")

    def crash_if(point: str) -> None:
        if fault is not None and fault == _FAULT_POINTS.get(point):
            _log.error("fault injection: exiting at %s", fault)
            logging.shutdown()
            os._exit(137)
    return crash_if


class CommitCounter:
    """Counts the catalog's commits in the service's metrics and wakes the event relay after each."""

    def __init__(self, metrics: CatalogMetrics, on_commit: Callable[[], None]) -> None:
        self.metrics = metrics
        self._on_commit = on_commit

    def counted(self, kind: str, outcome: str, seconds: float) -> None:
        self.metrics.commits.labels(kind, outcome).inc()
        if outcome == "conflict":
            self.metrics.conflicts.labels(kind).inc()
        if outcome in ("committed", "already_committed"):
            self.metrics.commit_seconds.labels(kind).observe(seconds)

    def committed(self) -> None:
        self._on_commit()

    def reconciled(self, snapshot_ids: list[int]) -> None:
        self.metrics.reconciled.inc(len(snapshot_ids))


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    """Settings of one catalog service process, read once from flags and environment."""

    warehouse: str
    metastore: str
    kafka: str | None = None
    grace_s: float = 10.0
    workers: int = WORKERS
    expire_interval_s: float = 300.0
    orphan_interval_s: float = 86_400.0
    request_id_retention_s: float = KEEP_WRITES_MS / 1000  # how long a committed request id answers a resend
    reconcile_interval_s: float = 10.0
    health_interval_s: float = 15.0  # seconds between updates of the per-table health gauges (0: off)
    iceberg_interval_s: float = 30.0  # seconds between passes publishing Iceberg metadata a crash left behind
    outbox_retention_s: float = KEEP_DELIVERED_S  # delivered outbox events are purged this long after delivery
    outbox_undelivered_retention_s: float = KEEP_UNDELIVERED_S  # undelivered ones are dropped this long after commit
    rest_port: int | None = None  # Paimon's REST catalog API (and Iceberg's under /iceberg); None: off, 0: free
    ui_port: int | None = None  # the web console over HTTP (catalog_svc/console.py); None: off, 0: a free port
    http_max_connections: int = 512  # open connections of each HTTP port (REST, console), refused at accept beyond
    http_max_connections_per_peer: int = 64  # of them from one IP address
    data_tokens: str = DataTokenMode.GRANTED.value  # who gets storage credentials over REST (data_tokens.py)
    data_token_grants: str | None = None  # the JSON file of principals' table patterns, for `granted`
    data_token_lifetime_s: float = DEFAULT_LIFETIME_S  # the expiry a token of static keys is given
    fault: str | None = None  # crash injection for the recovery tests

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over the environment: `LSMLAKE_WAREHOUSE`, `LSMLAKE_METASTORE`, `LSMLAKE_CATALOG_HOST`,
        `LSMLAKE_CATALOG_PORT`, `LSMLAKE_KAFKA`, `LSMLAKE_METRICS_PORT`, `LSMLAKE_EXPIRE_INTERVAL`,
        `LSMLAKE_ORPHAN_INTERVAL`, `LSMLAKE_RECONCILE_INTERVAL`, `LSMLAKE_REQUEST_ID_RETENTION`,
        `LSMLAKE_OUTBOX_RETENTION`, `LSMLAKE_OUTBOX_UNDELIVERED_RETENTION`, `LSMLAKE_REST_PORT`, `LSMLAKE_UI_PORT`,
        `LSMLAKE_HEALTH_INTERVAL`, `LSMLAKE_HTTP_MAX_CONNECTIONS`, `LSMLAKE_HTTP_MAX_CONNECTIONS_PER_PEER`,
        `LSMLAKE_DATA_TOKENS`, `LSMLAKE_DATA_TOKEN_GRANTS`, `LSMLAKE_DATA_TOKEN_LIFETIME`,
        `LSMLAKE_CATALOG_FAULT`, those of TLS, tokens and Kafka security and those of the worker threads
        and the limits on open streams and calls (`LSMLAKE_WORKERS`, `LSMLAKE_MAX_STREAMS`, ...;
        docs/security.md)."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="catalog-svc", description="lsmlake catalog service (gRPC)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"),
                       help="warehouse folder or pyarrow.fs URI")
        p.add_argument("--metastore", default=env.get("LSMLAKE_METASTORE"),
                       help=f"sqlite:///path or postgresql://...; default: {METASTORE_FILE} in a local warehouse")
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA") or None, help="Kafka bootstrap host:port")
        p.add_argument("--expire-interval", type=float, default=float(env.get("LSMLAKE_EXPIRE_INTERVAL", "300")),
                       help="seconds between snapshot expirations of every table (0: off)")
        p.add_argument("--orphan-interval", type=float, default=float(env.get("LSMLAKE_ORPHAN_INTERVAL", "86400")),
                       help="seconds between orphan-file cleanups of every table (0: off)")
        p.add_argument("--health-interval", type=float, default=float(env.get("LSMLAKE_HEALTH_INTERVAL", "15")),
                       help="seconds between updates of the per-table compaction lag and health gauges "
                            "(0: off; ListTableHealth always answers fresh figures)")
        p.add_argument("--iceberg-interval", type=float, default=float(env.get("LSMLAKE_ICEBERG_INTERVAL", "30")),
                       help="seconds between passes that publish the Iceberg metadata a crash between a commit and "
                            "its publication left behind, for tables with metadata.iceberg.storage (0: off)")
        p.add_argument("--reconcile-interval", type=float,
                       default=float(env.get("LSMLAKE_RECONCILE_INTERVAL", "10")),
                       help="seconds between looks for snapshots written by other engines (0: off)")
        p.add_argument("--request-id-retention", type=float,
                       default=float(env.get("LSMLAKE_REQUEST_ID_RETENTION", str(KEEP_WRITES_MS / 1000))),
                       help="seconds a committed write's request id keeps answering resends (default: a day); "
                            "longer than any client retries a write")
        p.add_argument("--outbox-retention", type=float,
                       default=float(env.get("LSMLAKE_OUTBOX_RETENTION", str(KEEP_DELIVERED_S))),
                       help="seconds a delivered event stays in the outbox (default: an hour)")
        p.add_argument("--outbox-undelivered-retention", type=float,
                       default=float(env.get("LSMLAKE_OUTBOX_UNDELIVERED_RETENTION", str(KEEP_UNDELIVERED_S))),
                       help="seconds an event waits for Kafka before it is dropped with a warning (default: a day)")
        p.add_argument("--rest-port", type=int, default=int_or_none(env.get("LSMLAKE_REST_PORT")),
                       help="also serve Paimon's REST catalog API (metastore=rest) over HTTP on this port, with the "
                            "same TLS and tokens, and Iceberg's, read-only, under /iceberg (env LSMLAKE_REST_PORT; "
                            "0 picks one); off when not set")
        p.add_argument("--ui-port", type=int, default=int_or_none(env.get("LSMLAKE_UI_PORT")),
                       help="also serve the web console (tables by health, buckets, the compaction timeline) over "
                            "HTTP on this port, with the same TLS and tokens (env LSMLAKE_UI_PORT; 0 picks one); "
                            "off when not set")
        p.add_argument("--http-max-connections", type=int,
                       default=int(env.get("LSMLAKE_HTTP_MAX_CONNECTIONS", "512")),
                       help="open connections each HTTP port (REST, console) holds; more are closed at accept")
        p.add_argument("--http-max-connections-per-peer", type=int,
                       default=int(env.get("LSMLAKE_HTTP_MAX_CONNECTIONS_PER_PEER", "64")),
                       help="open connections of one IP address on each HTTP port (a proxy's clients share its "
                            "address); more are closed at accept")
        p.add_argument("--data-tokens", default=env.get("LSMLAKE_DATA_TOKENS") or DataTokenMode.GRANTED.value,
                       choices=[m.value for m in DataTokenMode],
                       help="who gets an object-store warehouse's storage settings from the REST catalog (Paimon's "
                            "data tokens): off; granted (default: callers with a token and a grant for the table "
                            "in --data-token-grants); open (every caller that may read the table, also without a "
                            "token file: one machine only). docs/security.md")
        p.add_argument("--data-token-grants", default=env.get("LSMLAKE_DATA_TOKEN_GRANTS") or None,
                       help='JSON file {"grants": [{"principal": "etl", "tables": ["db.*"]}]}: which principals get '
                            "which tables' data tokens (--data-tokens granted)")
        p.add_argument("--data-token-lifetime", type=float,
                       default=float(env.get("LSMLAKE_DATA_TOKEN_LIFETIME", str(DEFAULT_LIFETIME_S))),
                       help="seconds until a data token of the catalog's static keys says it expires (default: 3 "
                            "hours, at most 7 days; Paimon's clients ask again with less than an hour left)")
        p.add_argument("--fault", default=env.get("LSMLAKE_CATALOG_FAULT") or None, choices=[f for f in FAULTS if f],
                       help="testing only: crash at this point of the first commit")
        add_service_arguments(p, env, port_env="LSMLAKE_CATALOG_PORT", host_env="LSMLAKE_CATALOG_HOST",
                              workers=WORKERS, grace_s=10.0, grace_help="seconds for in-flight RPCs at shutdown")
        a = p.parse_args(argv)
        common = service_settings(p, a)
        if not a.warehouse:
            p.error("--warehouse (or LSMLAKE_WAREHOUSE) is required")
        for flag, port in (("--port", a.port), ("--rest-port", a.rest_port), ("--ui-port", a.ui_port)):
            if port is not None and not 0 <= port <= 65535:
                p.error(f"{flag} {port} is not a port number")
        if not 1 <= a.http_max_connections_per_peer <= a.http_max_connections:
            p.error(f"--http-max-connections-per-peer must be in 1..--http-max-connections "
                    f"({a.http_max_connections}), got {a.http_max_connections_per_peer}")
        metastore = a.metastore
        if not metastore:
            if "://" in a.warehouse and not a.warehouse.startswith("file://"):
                p.error("--metastore is required for a remote warehouse")
            local = a.warehouse.removeprefix("file://")
            metastore = f"sqlite:///{os.path.abspath(os.path.join(local, METASTORE_FILE))}"
        for name in ("expire_interval", "orphan_interval", "reconcile_interval", "health_interval",
                     "iceberg_interval"):
            if getattr(a, name) < 0:
                p.error(f"--{name.replace('_', '-')} must not be negative")
        if not a.request_id_retention >= 1:  # also refuses nan
            p.error(f"--request-id-retention must be at least 1 second, got {a.request_id_retention}")
        if not (a.outbox_retention >= 0 and a.outbox_undelivered_retention >= 1):  # also refuses nan
            p.error("--outbox-retention must not be negative and --outbox-undelivered-retention must be at least "
                    f"1 second, got {a.outbox_retention} and {a.outbox_undelivered_retention}")
        try:
            check_lifetime(a.data_token_lifetime)
        except InvalidInputError as e:
            p.error(f"--data-token-lifetime: {e}")
        try:
            if a.data_token_grants is not None:
                Grants.load(a.data_token_grants)  # a grants file that does not parse stops the start, naming the entry
        except InvalidInputError as e:
            p.error(str(e))
        if a.data_token_grants is not None and a.data_tokens != DataTokenMode.GRANTED.value:
            p.error(f"--data-token-grants is only read with --data-tokens granted, not {a.data_tokens}")
        return Settings(warehouse=a.warehouse, metastore=metastore, kafka=a.kafka,
                        expire_interval_s=a.expire_interval, orphan_interval_s=a.orphan_interval,
                        reconcile_interval_s=a.reconcile_interval, health_interval_s=a.health_interval,
                        iceberg_interval_s=a.iceberg_interval,
                        request_id_retention_s=a.request_id_retention,
                        outbox_retention_s=a.outbox_retention,
                        outbox_undelivered_retention_s=a.outbox_undelivered_retention, rest_port=a.rest_port,
                        ui_port=a.ui_port, http_max_connections=a.http_max_connections,
                        http_max_connections_per_peer=a.http_max_connections_per_peer,
                        data_tokens=a.data_tokens, data_token_grants=a.data_token_grants,
                        data_token_lifetime_s=a.data_token_lifetime, fault=a.fault, **common)


class CatalogServer(ServiceProcess[Settings]):
    """The running service: store, warehouse, relay, gRPC server and health, started and stopped in order.

    Health turns SERVING only once the store and the warehouse are open. At shutdown, after NOT_SERVING the
    snapshot streams end; in-flight RPCs (commits) get `grace_s`; then the maintenance thread and the relay
    stop (the relay's current publish ends within its timeout); the metrics endpoint and the metadata
    store close last.
    """

    service_name = SERVICE_NAME

    def __init__(self, settings: Settings) -> None:
        self.metrics = CatalogMetrics()
        super().__init__(settings, self.metrics.registry)
        self._store: MetaStore | None = None
        self._relay: OutboxRelay | None = None
        self._servicer: CatalogService | None = None
        self._maintenance: Maintenance | None = None
        self._operations: CatalogOperations | None = None
        self._rest: JsonHttpServer | None = None
        self.rest_port: int | None = None
        self.ui_port: int | None = None
        self._ui: JsonHttpServer | None = None
        self.history = HealthHistory()
        self._status: StatusService | None = None
        self._beat: CatalogBeat | None = None

    def _open(self, server: grpc.Server) -> None:
        s = self.settings
        self._store = open_store(s.metastore)
        # commits run under the metastore's commit lock: the warehouse needs no conditional create of its own
        catalog = FileSystemCatalog(s.warehouse, publications_serialized=True)
        catalog.io.mkdirs(catalog.root)
        self.metrics.watch_outbox(self._store)
        self._relay = OutboxRelay(self._store, s.kafka, on_published=self.metrics.events_published.inc,
                                  keep_delivered_s=s.outbox_retention_s,
                                  keep_undelivered_s=s.outbox_undelivered_retention_s, on_purged=self.metrics.purged)
        # snapshots a crash left unannounced get their events before the first new commit
        ops = self._operations = CatalogOperations(
            catalog, self._store, snapshot_events, convert.ProtoPlanCodec(),
            listener=CommitCounter(self.metrics, self._relay.wake), fault_point=crash_at(s.fault),
            keep_writes_ms=round(s.request_id_retention_s * 1000))
        found = reconcile_all(ops, self.metrics)
        if found:
            _log.warning("recorded %d snapshot(s) that had no commit record", found)
        self._servicer = CatalogService(ops, metrics=self.metrics)
        catalog_pb2_grpc.add_CatalogServiceServicer_to_server(self._servicer, server)
        self._status = StatusService(self._store)
        add_to_server(self._status, server)
        if s.rest_port is not None:
            sec = s.security
            tokens = self._data_tokens()  # Iceberg's API under /iceberg shares the port, the tokens and the policy
            routes = RestCatalogApi(ops, tokens).routes() + IcebergRestApi(ops, tokens).routes()
            self._rest = JsonHttpServer(routes, HttpSettings(
                host=s.host, port=s.rest_port, tls_cert=sec.tls_cert, tls_key=sec.tls_key,
                tls_client_ca=sec.tls_client_ca, auth_tokens=sec.auth_tokens, workers=s.workers,
                max_connections=s.http_max_connections, max_connections_per_peer=s.http_max_connections_per_peer),
                observe=self.metrics.rest_call, error_bodies=[(ICEBERG_PREFIX, iceberg_error_body)])
            self.metrics.watch_http("rest", self._rest)
        if s.ui_port is not None:
            sec = s.security
            console = Console(ops, self.history, tls=sec.tls_cert is not None)
            ui = self._ui = JsonHttpServer(console.routes(), HttpSettings(
                host=s.host, port=s.ui_port, tls_cert=sec.tls_cert, tls_key=sec.tls_key,
                tls_client_ca=sec.tls_client_ca, auth_tokens=sec.auth_tokens, workers=4,
                max_connections=s.http_max_connections, max_connections_per_peer=s.http_max_connections_per_peer),
                session_cookie=SESSION_COOKIE, session_principal=console.session_principal,
                error_page=error_page, accept_forms=True)
            self.metrics.watch_http("ui", self._ui)
            if ui.tokens is not None:  # logins check, and sessions re-check, the tokens of the server's own file
                console.sessions = SessionStore(ui.tokens)
                console.admins.tokens = ui.tokens

    def _data_tokens(self) -> DataTokenVendor:
        s = self.settings
        mode = DataTokenMode.parse(s.data_tokens)
        grants = GrantsFile(s.data_token_grants) if s.data_token_grants else None
        checks = s.security.auth_tokens is not None
        vendor = DataTokenVendor.for_warehouse(s.warehouse, mode, checks, grants, s.data_token_lifetime_s)
        if vendor.vends:
            _log.info("REST data tokens: %s, expiring after %.0f s; %s", mode.value, s.data_token_lifetime_s,
                      "every reader gets them" if mode is DataTokenMode.OPEN and not checks else
                      "to authenticated callers" + (" with a grant" if mode is DataTokenMode.GRANTED else ""))
            if mode is DataTokenMode.OPEN and not checks:
                _log.warning("--data-tokens open without a token file: anyone who reaches the REST port gets the "
                             "warehouse's storage credentials")
        elif mode is DataTokenMode.GRANTED and vendor.object_store:
            _log.warning("REST data tokens: none vended, since %s; engines need storage settings of their own",
                         "the catalog checks no tokens (--data-tokens granted needs --auth-tokens)" if not checks
                         else "--data-token-grants grants none")
        return vendor

    def _run(self) -> None:
        assert self._relay is not None and self._operations is not None
        s = self.settings
        self._relay.start()
        if self._rest is not None:
            self.rest_port = self._rest.start()
        if self._ui is not None:
            self.ui_port = self._ui.start()
        assert self._status is not None
        self._beat = CatalogBeat(self._status.registry, f"{socket.gethostname()}:{self.port}",
                                 f"{s.host}:{self.port}", interval_from_env()).start()
        self._maintenance = Maintenance(self._operations, self.metrics, s.expire_interval_s,
                                        s.orphan_interval_s, s.reconcile_interval_s,
                                        health_interval_s=s.health_interval_s, history=self.history,
                                        iceberg_interval_s=s.iceberg_interval_s).start()

    def _refuse(self) -> None:
        if self._servicer is not None:
            self._servicer.stopping.set()
        if self._rest is not None:
            self._rest.refuse()
        if self._ui is not None:
            self._ui.refuse()

    def _stop_parts(self) -> None:
        if self._beat is not None:  # shown down at once
            self._beat.stop()
        if self._rest is not None:  # its calls in flight had the grace of the gRPC calls
            self._rest.stop(grace_s=min(5.0, self.settings.grace_s))
        if self._ui is not None:
            self._ui.stop(grace_s=min(5.0, self.settings.grace_s))
        if self._maintenance is not None:
            self._maintenance.stop()
        if self._relay is not None:
            self._relay.stop()

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    return run_until_signal(CatalogServer(settings), "catalog_svc", settings.host)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `catalog-svc` and `python -m catalog_svc`."""
    configure_logging("catalog_svc")
    return serve(Settings.from_args(argv))
