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
from compactor_svc.fair_queue import DatabaseWeights
from compactor_svc.heartbeat import compactor_heartbeat
from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.plan_runs import (
    DEFAULT_CONCURRENT_PLANS,
    DEFAULT_DEADLINE_PER_GIB_S,
    DEFAULT_DEADLINE_S,
    PlanDeadline,
)
from compactor_svc.scheduler import REQUESTED_INTERVAL_S, ROUND_BUDGET_S, Scheduler
from compactor_svc.servicer import CompactorService
from compactor_svc.triggers import STRATEGIES, FullCompactionTrigger
from lsmlake.catalog.filesystem import check_name
from lsmlake.errors import InvalidInputError, LakeError
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.heartbeat import HeartbeatSender
from lsmlake.rpc.security import ChannelSecurity
from lsmlake.rpc.service_main import (
    ServiceProcess,
    ServiceSettings,
    add_service_arguments,
    run_until_signal,
    service_settings,
)
from lsmlake.runtime.observability import configure_logging
from lsmlake.spark.compaction_job import SparkCompactor

_log = logging.getLogger(__name__)

SERVICE_NAME = compactor_pb2.DESCRIPTOR.services_by_name["CompactorService"].full_name
WORKERS = 8


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    warehouse: str
    catalog: str
    kafka: str
    compactor_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}")
    spark_master: str = "local[*]"
    spark_conf: tuple[tuple[str, str], ...] = ()
    trigger: FullCompactionTrigger = field(default_factory=FullCompactionTrigger)
    max_plan_bytes: int = 2 << 30
    max_plan_buckets: int = 64
    reconcile_interval_s: float = 30.0
    requested_interval_s: float = REQUESTED_INTERVAL_S  # how often to look for plans others requested
    round_budget_s: float = ROUND_BUDGET_S
    weights: DatabaseWeights = field(default_factory=DatabaseWeights)  # databases' priority and share
    grace_s: float = 30.0
    workers: int = WORKERS
    deadline: PlanDeadline = field(default_factory=PlanDeadline)  # how long one plan may run on Spark
    concurrent_plans: int = DEFAULT_CONCURRENT_PLANS
    catalog_security: ChannelSecurity = field(default_factory=ChannelSecurity)  # this compactor's catalog calls

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over `LSMLAKE_WAREHOUSE`, `LSMLAKE_CATALOG`, `LSMLAKE_KAFKA`, `LSMLAKE_COMPACTOR_PORT`,
        `LSMLAKE_COMPACTOR_HOST`, `LSMLAKE_SPARK_MASTER`, `LSMLAKE_PLAN_DEADLINE`, `LSMLAKE_PLAN_DEADLINE_PER_GIB`,
        `LSMLAKE_CONCURRENT_PLANS`, `LSMLAKE_METRICS_PORT`, those of TLS, tokens and
        Kafka security and those of the worker threads and the limits on open streams and calls
        (`LSMLAKE_WORKERS`, ...; docs/security.md)."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="compactor-svc", description="lsmlake compactor service (Kafka + Spark)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"))
        p.add_argument("--catalog", default=env.get("LSMLAKE_CATALOG"), help="catalog service host:port")
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA"), help="Kafka bootstrap host:port")
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
        p.add_argument("--requested-plans-interval", type=float, default=REQUESTED_INTERVAL_S, metavar="SECONDS",
                       help="seconds between looks for plans others requested on the catalog's timeline (the "
                            "console's compaction buttons); each look lists every table's plans "
                            f"(default {REQUESTED_INTERVAL_S:g})")
        p.add_argument("--round-budget", type=float, default=ROUND_BUDGET_S, metavar="SECONDS",
                       help="a planning round takes no new table after this long; the rest keep their place in "
                            f"the queue (default {ROUND_BUDGET_S:g})")
        p.add_argument("--database-priority", action="append", metavar="DATABASE=N",
                       default=_env_list(env, "LSMLAKE_DATABASE_PRIORITY"),
                       help="the compaction priority of the database's tables that set no "
                            "lsmlake.compaction.priority (repeatable; env: comma-separated)")
        p.add_argument("--database-share", action="append", metavar="DATABASE=N",
                       default=_env_list(env, "LSMLAKE_DATABASE_SHARE"),
                       help="the compaction share (>= 1) of the database's tables that set no lsmlake.compaction.share "
                            "(repeatable; env: comma-separated)")
        p.add_argument("--plan-deadline", type=float, metavar="SECONDS",
                       default=float(env.get("LSMLAKE_PLAN_DEADLINE", DEFAULT_DEADLINE_S)),
                       help="a plan still running on Spark after this long, plus --plan-deadline-per-gib, is "
                            f"cancelled, rolled back and planned again (default {DEFAULT_DEADLINE_S:g})")
        p.add_argument("--plan-deadline-per-gib", type=float, metavar="SECONDS",
                       default=float(env.get("LSMLAKE_PLAN_DEADLINE_PER_GIB", DEFAULT_DEADLINE_PER_GIB_S)),
                       help="more time per GiB of a plan's input files (default "
                            f"{DEFAULT_DEADLINE_PER_GIB_S:g})")
        p.add_argument("--concurrent-plans", type=int, metavar="N",
                       default=int(env.get("LSMLAKE_CONCURRENT_PLANS", DEFAULT_CONCURRENT_PLANS)),
                       help="plans (of different tables) run on Spark at once (default "
                            f"{DEFAULT_CONCURRENT_PLANS})")
        add_service_arguments(p, env, port_env="LSMLAKE_COMPACTOR_PORT", host_env="LSMLAKE_COMPACTOR_HOST",
                              workers=WORKERS, grace_s=30.0, grace_help="seconds for in-flight RPCs at shutdown",
                              catalog_client=True)
        a = p.parse_args(argv)
        common = service_settings(p, a, catalog_client=True)
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
        if min(a.reconcile_interval, a.requested_plans_interval, a.max_plan_bytes, a.max_plan_buckets,
               a.round_budget) <= 0:
            p.error("--reconcile-interval, --requested-plans-interval, --max-plan-bytes, --max-plan-buckets and "
                    "--round-budget must be positive")
        try:
            weights = DatabaseWeights(_weights(a.database_priority, "--database-priority", None),
                                      _weights(a.database_share, "--database-share", 1))
        except InvalidInputError as e:
            p.error(str(e))
        if a.concurrent_plans < 1:
            p.error(f"--concurrent-plans {a.concurrent_plans}: at least 1")
        try:
            deadline = PlanDeadline(a.plan_deadline, a.plan_deadline_per_gib)
        except InvalidInputError as e:
            p.error(f"--plan-deadline / --plan-deadline-per-gib: {e}")
        extra = {"compactor_id": a.compactor_id} if a.compactor_id else {}
        return Settings(warehouse=a.warehouse, catalog=a.catalog, kafka=a.kafka, spark_master=a.spark_master,
                        spark_conf=tuple(conf), trigger=trigger, max_plan_bytes=a.max_plan_bytes,
                        max_plan_buckets=a.max_plan_buckets, reconcile_interval_s=a.reconcile_interval,
                        requested_interval_s=a.requested_plans_interval,
                        round_budget_s=a.round_budget, weights=weights, deadline=deadline,
                        concurrent_plans=a.concurrent_plans, **common, **extra)


def _env_list(env: dict[str, str], name: str) -> list[str]:
    return [x.strip() for x in env.get(name, "").split(",") if x.strip()]


def _weights(specs: list[str], flag: str, least: int | None) -> dict[str, int]:
    """`DATABASE=N` pairs as a mapping; a bad name or number, or one below `least`, is refused with the flag."""
    out: dict[str, int] = {}
    for spec in specs:
        db, sep, n = spec.partition("=")
        try:
            check_name(db.strip(), "database")
            value = int(n)
        except (InvalidInputError, ValueError):
            raise InvalidInputError(f"{flag} {spec!r}: use DATABASE=N with an integer N") from None
        if not sep:
            raise InvalidInputError(f"{flag} {spec!r}: use DATABASE=N with an integer N")
        if least is not None and value < least:
            raise InvalidInputError(f"{flag} {spec!r}: use DATABASE=N with an integer N >= {least}")
        out[db.strip()] = value
    return out


class CompactorServer(ServiceProcess[Settings]):
    """Spark, the planner, the gRPC server and the event feed, started and stopped in order.

    At shutdown, after NOT_SERVING and the in-flight RPCs: leave the consumer group (the buckets move to
    the other replicas); let the running plan finish and commit; stop Spark; close the catalog channel.
    """

    service_name = SERVICE_NAME

    def __init__(self, settings: Settings) -> None:
        self.metrics = CompactorMetrics()
        super().__init__(settings, self.metrics.registry)
        self.ownership = Ownership()
        self._spark: SparkCompactor | None = None
        self._catalog: CatalogClient | None = None
        self._scheduler: Scheduler | None = None
        self._feed: EventFeed | None = None
        self._heartbeat: HeartbeatSender | None = None

    def _prepare(self) -> None:
        # Spark first: its JVM is started by fork+exec, which is best done before gRPC has threads of its own;
        # warm before the first plan, since a cold session costs seconds
        s = self.settings
        self._spark = SparkCompactor(s.spark_master, conf=dict(s.spark_conf), warehouse=s.warehouse)
        self._start_spark()

    def _open(self, server: grpc.Server) -> None:
        s = self.settings
        assert self._spark is not None
        self._catalog = CatalogClient(s.catalog, timeout_s=60.0, security=s.catalog_security)
        self._scheduler = Scheduler(s.warehouse, self._catalog.timeline, self._spark, self.ownership, self.metrics,
                                    s.compactor_id, s.trigger, s.max_plan_bytes, s.max_plan_buckets,
                                    s.reconcile_interval_s, round_budget_s=s.round_budget_s, weights=s.weights,
                                    deadline=s.deadline, concurrent_plans=s.concurrent_plans,
                                    requested_interval_s=s.requested_interval_s).start()
        compactor_pb2_grpc.add_CompactorServiceServicer_to_server(
            CompactorService(s.warehouse, self._scheduler, self.ownership, s.compactor_id), server)

    def _run(self) -> None:
        assert self._scheduler is not None
        self._feed = EventFeed(self.settings.kafka, self.ownership, self._scheduler, self.metrics).start()
        s = self.settings
        assert self._catalog is not None
        self._heartbeat = compactor_heartbeat(self._catalog, s.compactor_id, f"{s.host}:{self.port}", self.ownership,
                                              self._scheduler.state).start()

    def _start_spark(self, attempts: int = 3) -> None:
        """Start the SparkSession, again after a failed JVM launch (seen on a loaded machine)."""
        assert self._spark is not None
        for attempt in range(1, attempts + 1):
            try:
                self._spark.start()
                return
            except LakeError:  # the workers cannot run lsmlake's tasks (or none came): a retry would not help
                raise
            except Exception as e:
                if attempt == attempts:
                    raise
                _log.warning("Spark did not start (%s); trying again", e)
                time.sleep(2.0 * attempt)

    def _stop_parts(self) -> None:
        if self._heartbeat is not None:  # its buckets move to the other replicas now
            self._heartbeat.stop()
        if self._feed is not None:
            self._feed.stop()
        if self._scheduler is not None:
            self._scheduler.stop()
        if self._spark is not None:
            self._spark.stop()
        if self._catalog is not None:
            self._catalog.close()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    return run_until_signal(CompactorServer(settings), f"compactor_svc {settings.compactor_id}", settings.host)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `compactor-svc` and `python -m compactor_svc`."""
    configure_logging("compactor_svc")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    return serve(Settings.from_args(argv))
