"""The writer service process: settings, gRPC server, Kafka ingestion, health, metrics, graceful shutdown."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from lsmlake.errors import InvalidInputError
from lsmlake.proto_gen.lsmlake.v1 import writer_pb2, writer_pb2_grpc
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
from writer_svc.heartbeat import writer_heartbeat
from writer_svc.kafka_ingest import IngestTopic, KafkaIngest, parse_ingest
from writer_svc.metrics import WriterMetrics
from writer_svc.servicer import WriterService
from writer_svc.stream_budget import DEFAULT_BUDGET_BYTES, DEFAULT_MAX_MESSAGES, positive_int
from writer_svc.tables import Tables

SERVICE_NAME = writer_pb2.DESCRIPTOR.services_by_name["WriterService"].full_name
WORKERS = 32


@dataclass(frozen=True, kw_only=True)
class Settings(ServiceSettings):
    """Settings of one writer process, read once from flags and environment."""

    warehouse: str
    catalog: str  # host:port of the catalog service
    kafka: str | None = None
    ingest: tuple[IngestTopic, ...] = field(default_factory=tuple)
    writer_id: str = field(default_factory=socket.gethostname)
    commit_interval_s: float = 1.0
    commit_rows: int = 1_000_000
    spill_dir: str | None = None
    grace_s: float = 30.0
    workers: int = WORKERS
    max_request_bytes: int = 256 << 20
    max_write_messages: int = DEFAULT_MAX_MESSAGES  # chunk messages per Write stream
    max_buffered_write_bytes: int = DEFAULT_BUDGET_BYTES  # bytes of all Write streams being read at once
    max_poll_records: int = 20_000
    catalog_security: ChannelSecurity = field(default_factory=ChannelSecurity)  # this writer's calls to the catalog

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over `LSMLAKE_WAREHOUSE`, `LSMLAKE_CATALOG`, `LSMLAKE_WRITER_PORT`, `LSMLAKE_WRITER_HOST`,
        `LSMLAKE_KAFKA`, `LSMLAKE_INGEST` (comma-separated), `LSMLAKE_WRITER_ID`, `LSMLAKE_COMMIT_INTERVAL`,
        `LSMLAKE_SPILL_DIR`, `LSMLAKE_METRICS_PORT`, those of TLS, tokens and Kafka security and those of the
        worker threads and the limits on open streams and calls (`LSMLAKE_WORKERS`, ...; docs/security.md)."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="writer-svc", description="lsmlake writer service (gRPC and Kafka)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"), help="warehouse folder or URI")
        p.add_argument("--catalog", default=env.get("LSMLAKE_CATALOG"), help="catalog service host:port")
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA") or None, help="Kafka bootstrap host:port")
        p.add_argument("--ingest", action="append", default=None,
                       help="db.table[:json|debezium] to consume from topic lake.ingest.<db>.<table>; repeatable")
        p.add_argument("--writer-id", default=env.get("LSMLAKE_WRITER_ID") or socket.gethostname())
        p.add_argument("--commit-interval", type=float, default=float(env.get("LSMLAKE_COMMIT_INTERVAL", "1.0")),
                       help="seconds between group commits of a table")
        p.add_argument("--commit-rows", type=int, default=1_000_000, help="commit as soon as this many rows wait")
        p.add_argument("--max-poll-records", type=int, default=20_000, help="Kafka records per poll")
        p.add_argument("--max-write-messages", type=positive_int, default=DEFAULT_MAX_MESSAGES,
                       help="chunk messages per Write stream")
        p.add_argument("--max-buffered-write-bytes", type=positive_int, default=DEFAULT_BUDGET_BYTES,
                       help="bytes of all Write streams buffered at once")
        p.add_argument("--spill-dir", default=env.get("LSMLAKE_SPILL_DIR") or None)
        add_service_arguments(p, env, port_env="LSMLAKE_WRITER_PORT", host_env="LSMLAKE_WRITER_HOST",
                              workers=WORKERS, grace_s=30.0, grace_help="seconds for in-flight writes at shutdown",
                              catalog_client=True)
        a = p.parse_args(argv)
        common = service_settings(p, a, catalog_client=True)
        if not a.warehouse or not a.catalog:
            p.error("--warehouse and --catalog are required")
        specs = a.ingest if a.ingest is not None else [s for s in env.get("LSMLAKE_INGEST", "").split(",") if s]
        try:
            ingest = tuple(parse_ingest(s) for s in specs)
        except InvalidInputError as e:
            p.error(str(e))
        if ingest and not a.kafka:
            p.error("--ingest needs --kafka")
        if a.commit_interval <= 0:
            p.error("--commit-interval must be positive")
        return Settings(warehouse=a.warehouse, catalog=a.catalog, kafka=a.kafka, ingest=ingest,
                        writer_id=a.writer_id, commit_interval_s=a.commit_interval, commit_rows=a.commit_rows,
                        spill_dir=a.spill_dir, max_poll_records=a.max_poll_records,
                        max_write_messages=a.max_write_messages,
                        max_buffered_write_bytes=a.max_buffered_write_bytes, **common)


class WriterServer(ServiceProcess[Settings]):
    """gRPC server, tables with their committers, Kafka ingestion; started and stopped in order.

    At shutdown, after NOT_SERVING no new RPCs are taken and in-flight writes get `grace_s` to be committed
    (the committers keep running meanwhile); then Kafka ingestion commits what it holds, then its consumed
    offsets, and leaves the group; every table commits what it still holds (rows that cannot be committed
    are rejected, never dropped silently: their requests get an error); the catalog channel and the
    metrics endpoint close last.
    """

    service_name = SERVICE_NAME

    def __init__(self, settings: Settings) -> None:
        self.metrics = WriterMetrics()
        super().__init__(settings, self.metrics.registry)
        self._client: CatalogClient | None = None
        self._tables: Tables | None = None
        self._kafka: KafkaIngest | None = None
        self._heartbeat: HeartbeatSender | None = None

    def _open(self, server: grpc.Server) -> None:
        s = self.settings
        self._client = CatalogClient(s.catalog, security=s.catalog_security)
        self._tables = Tables(s.warehouse, self._client, self.metrics, s.writer_id, s.commit_interval_s,
                              s.commit_rows, s.spill_dir)
        writer_pb2_grpc.add_WriterServiceServicer_to_server(
            WriterService(self._tables, self.metrics, s.max_request_bytes, s.max_write_messages,
                          s.max_buffered_write_bytes), server)

    def _run(self) -> None:
        s = self.settings
        assert self._client is not None and self._tables is not None
        self._heartbeat = writer_heartbeat(self._client, s.writer_id, f"{s.host}:{self.port}",
                                           self._tables.commit_user).start()
        if s.ingest:
            assert s.kafka is not None and self._client is not None
            self._kafka = KafkaIngest(s.kafka, s.ingest, s.warehouse, self._client, self.metrics,
                                      f"{s.writer_id}-kafka", s.commit_interval_s, s.spill_dir,
                                      max_poll_records=s.max_poll_records).start()

    def _stop_parts(self) -> None:
        if self._heartbeat is not None:  # shown down at once: no more writes are taken
            self._heartbeat.stop()
        if self._kafka is not None:
            self._kafka.stop()
        if self._tables is not None:
            self._tables.close()
        if self._client is not None:
            self._client.close()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    return run_until_signal(WriterServer(settings), "writer_svc", settings.host)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `writer-svc` and `python -m writer_svc`."""
    configure_logging("writer_svc")
    return serve(Settings.from_args(argv))
