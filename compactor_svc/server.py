"""The compactor service process: settings, Spark, the event feed, the planner, gRPC, graceful shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from compactor_svc.event_feed import EventFeed
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from compactor_svc.servicer import CompactorService
from compactor_svc.timeline_client import TimelineClient
from compactor_svc.triggers import STRATEGIES, FullCompactionTrigger
from lsmlake.errors import InvalidInputError
from lsmlake.kafka.client import configure_security
from lsmlake.kafka.security import KafkaSecurity
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from lsmlake.rpc.health import HealthServicer
from lsmlake.rpc.limits import RpcLimits
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from lsmlake.rpc.server import (
    add_limit_arguments,
    add_security_arguments,
    int_or_none,
    limits_from_args,
    new_health_server,
    new_server,
    run_until_signal,
    security_from_args,
    set_serving,
)
from lsmlake.runtime.observability import MetricsEndpoint, configure_logging
from lsmlake.spark.compaction_job import SparkCompactor

_log = logging.getLogger(__name__)

SERVICE_NAME = compactor_pb2.DESCRIPTOR.services_by_name["CompactorService"].full_name
HOST = "127.0.0.1"
WORKERS = 8


@dataclass(frozen=True)
class Settings:
    warehouse: str
    catalog: str
    kafka: str
    port: int = 0
    host: str = HOST
    compactor_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    spark_master: str = "local[*]"
    spark_conf: tuple[tuple[str, str], ...] = ()
    trigger: FullCompactionTrigger = field(default_factory=FullCompactionTrigger)
    max_plan_bytes: int = 2 << 30
    max_plan_buckets: int = 64
    reconcile_interval_s: float = 30.0
    metrics_port: int | None = None
    grace_s: float = 30.0
    workers: int = WORKERS
    limits: RpcLimits = field(default_factory=RpcLimits)  # open streams and calls (docs/security.md)
    security: ServerSecurity = field(default_factory=ServerSecurity)
    health_port: int | None = None  # plaintext health checks for probes that cannot speak TLS
    catalog_security: ChannelSecurity = field(default_factory=ChannelSecurity)  # this compactor's catalog calls
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over `LSMLAKE_WAREHOUSE`, `LSMLAKE_CATALOG`, `LSMLAKE_KAFKA`, `LSMLAKE_COMPACTOR_PORT`,
        `LSMLAKE_COMPACTOR_HOST`, `LSMLAKE_SPARK_MASTER`, `LSMLAKE_METRICS_PORT`, those of TLS, tokens and
        Kafka security and those of the worker threads and the limits on open streams and calls
        (`LSMLAKE_WORKERS`, ...; docs/security.md)."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="compactor-svc", description="lsmlake compactor service (Kafka + Spark)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"))
        p.add_argument("--catalog", default=env.get("LSMLAKE_CATALOG"), help="catalog service host:port")
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA"), help="Kafka bootstrap host:port")
        p.add_argument("--port", type=int, default=int(env.get("LSMLAKE_COMPACTOR_PORT", "0")))
        p.add_argument("--host", default=env.get("LSMLAKE_COMPACTOR_HOST", HOST))
        p.add_argument("--compactor-id", default=None, help="instance id on the timeline (default: host-random)")
        p.add_argument("--spark-master", default=env.get("LSMLAKE_SPARK_MASTER", "local[*]"),
                       help="local[*] (default), local[N], spark://host:port or k8s://https://...")
        p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                       help="extra Spark configuration (repeatable)")
        p.add_argument("--full-trigger", default="NONE", choices=STRATEGIES,
                       help="Hudi-style schedule for full compactions of a bucket (default NONE)")
        p.add_argument("--full-delta-commits", type=int, default=5)
        p.add_argument("--full-delta-seconds", type=float, default=3600.0)
        p.add_argument("--max-plan-bytes", type=int, default=2 << 30, help="IO budget of one plan")
        p.add_argument("--max-plan-buckets", type=int, default=64)
        p.add_argument("--reconcile-interval", type=float, default=30.0,
                       help="seconds between looks at every owned bucket (finds lost events)")
        p.add_argument("--metrics-port", type=int, default=int_or_none(env.get("LSMLAKE_METRICS_PORT")))
        p.add_argument("--grace", type=float, default=30.0)
        add_security_arguments(p, env)
        add_limit_arguments(p, env, WORKERS)
        ChannelSecurity.add_arguments(p, env, "catalog-", "LSMLAKE_CATALOG_", "the catalog")
        KafkaSecurity.add_arguments(p, env)
        a = p.parse_args(argv)
        security = security_from_args(p, a)
        workers, limits = limits_from_args(p, a)
        try:
            catalog_security = ChannelSecurity.from_args(a, "catalog-")
            kafka_security = KafkaSecurity.from_args(a)
        except InvalidInputError as e:
            p.error(str(e))
        if not (a.warehouse and a.catalog and a.kafka):
            p.error("--warehouse, --catalog and --kafka are required")
        conf = []
        for kv in a.spark_conf:
            k, sep, v = kv.partition("=")
            if not sep or not k:
                p.error(f"--spark-conf {kv!r}: use KEY=VALUE")
            conf.append((k, v))
        try:
            trigger = FullCompactionTrigger(a.full_trigger, a.full_delta_commits, a.full_delta_seconds)
        except InvalidInputError as e:
            p.error(str(e))
        if a.reconcile_interval <= 0 or a.max_plan_bytes <= 0 or a.max_plan_buckets <= 0:
            p.error("--reconcile-interval, --max-plan-bytes and --max-plan-buckets must be positive")
        extra = {"compactor_id": a.compactor_id} if a.compactor_id else {}
        return Settings(warehouse=a.warehouse, catalog=a.catalog, kafka=a.kafka, port=a.port, host=a.host,
                        spark_master=a.spark_master, spark_conf=tuple(conf), trigger=trigger,
                        max_plan_bytes=a.max_plan_bytes, max_plan_buckets=a.max_plan_buckets,
                        reconcile_interval_s=a.reconcile_interval, metrics_port=a.metrics_port, grace_s=a.grace,
                        security=security, health_port=a.health_port, catalog_security=catalog_security,
                        kafka_security=kafka_security, workers=workers, limits=limits, **extra)



class CompactorServer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.health = HealthServicer()  # lsmlake's: grpcio's can deadlock (health_service)
        self.metrics = CompactorMetrics()
        self.ownership = Ownership()
        self.port = 0
        self.metrics_port: int | None = None
        self._server: grpc.Server | None = None
        self._spark: SparkCompactor | None = None
        self._timeline: TimelineClient | None = None
        self._scheduler: Scheduler | None = None
        self._feed: EventFeed | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self._health_server: grpc.Server | None = None
        self.health_port: int | None = None

    def start(self) -> int:
        s = self.settings
        configure_security(s.kafka_security)
        # Spark first: its JVM is started by fork+exec, which is best done before gRPC has threads of its own;
        # warm before the first plan, since a cold session costs seconds
        self._spark = SparkCompactor(s.spark_master, conf=dict(s.spark_conf))
        self._start_spark()
        server, self.port = new_server(SERVICE_NAME, self.health, s.host, s.port, s.workers, security=s.security,
                                       limits=s.limits)
        self._server = server
        if s.health_port is not None:
            self._health_server, self.health_port = new_health_server(self.health, s.host, s.health_port,
                                                                      s.limits)
        self._timeline = TimelineClient(s.catalog, security=s.catalog_security)
        self._scheduler = Scheduler(s.warehouse, self._timeline, self._spark, self.ownership, self.metrics,
                                    s.compactor_id, s.trigger, s.max_plan_bytes, s.max_plan_buckets,
                                    s.reconcile_interval_s).start()
        compactor_pb2_grpc.add_CompactorServiceServicer_to_server(
            CompactorService(s.warehouse, self._scheduler, self.ownership, s.compactor_id), server)
        if s.metrics_port is not None:
            self._metrics_endpoint = MetricsEndpoint(self.metrics.registry, s.host, s.metrics_port)
            self.metrics_port = self._metrics_endpoint.start()
        server.start()
        self._feed = EventFeed(s.kafka, self.ownership, self._scheduler, self.metrics).start()
        set_serving(self.health, SERVICE_NAME, True)
        return self.port

    def _start_spark(self, attempts: int = 3) -> None:
        """Start the SparkSession, again after a failed JVM launch (seen on a loaded machine)."""
        assert self._spark is not None
        for attempt in range(1, attempts + 1):
            try:
                self._spark.start()
                return
            except Exception as e:
                if attempt == attempts:
                    raise
                _log.warning("Spark did not start (%s); trying again", e)
                time.sleep(2.0 * attempt)

    def stop(self) -> None:
        """Graceful shutdown: NOT_SERVING; stop RPCs; leave the consumer group (the buckets move to the other
        replicas); let the running plan finish and commit; stop Spark; close the catalog channel."""
        self.health.enter_graceful_shutdown()
        if self._server is not None:
            self._server.stop(self.settings.grace_s).wait(self.settings.grace_s + 5)
        if self._health_server is not None:
            self._health_server.stop(0)
        if self._feed is not None:
            self._feed.stop()
        if self._scheduler is not None:
            self._scheduler.stop()
        if self._spark is not None:
            self._spark.stop()
        if self._timeline is not None:
            self._timeline.close()
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    return run_until_signal(CompactorServer(settings), f"compactor_svc {settings.compactor_id}", settings.host)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `compactor-svc` and `python -m compactor_svc`."""
    configure_logging("compactor_svc")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return serve(Settings.from_args(argv))
