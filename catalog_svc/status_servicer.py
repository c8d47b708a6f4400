"""The status service of the catalog (`StatusService`): writers' and compactors' heartbeats, and the list of every
service with whether it is up, from the registry in the metadata store (`lsmlake.metastore.services`), which all
catalog replicas share. Each replica reports itself there too (`CatalogBeat`)."""

from __future__ import annotations

import logging
import threading

import grpc
from google.protobuf import json_format

from lsmlake.errors import InvalidInputError
from lsmlake.metastore import MetaStore, now_ms
from lsmlake.metastore.services import MISSED_BEATS, ServiceEntry, ServiceRegistry
from lsmlake.proto_gen.lsmlake.v1 import status_pb2, status_pb2_grpc
from lsmlake.rpc.errors import guarded

_log = logging.getLogger(__name__)

SERVICE_NAME = status_pb2.DESCRIPTOR.services_by_name["StatusService"].full_name
BEAT_S = 5.0  # a catalog replica's own heartbeat interval (LSMLAKE_HEARTBEAT_INTERVAL in the server)
_KIND_NAMES: dict[status_pb2.ServiceKind.ValueType, str] = {
    status_pb2.SERVICE_KIND_CATALOG: "catalog", status_pb2.SERVICE_KIND_WRITER: "writer",
    status_pb2.SERVICE_KIND_COMPACTOR: "compactor"}
_KINDS: dict[str, status_pb2.ServiceKind.ValueType] = {v: k for k, v in _KIND_NAMES.items()}


def _report_text(request: status_pb2.HeartbeatRequest) -> str:
    """What a heartbeat says of the process beyond who it is, as JSON text for the store."""
    report = status_pb2.ServiceStatus(owned_partitions=request.owned_partitions,
                                      total_partitions=request.total_partitions,
                                      running_plans=request.running_plans, detail=request.detail)
    return json_format.MessageToJson(report, indent=None)


def service_status(entry: ServiceEntry, now: int) -> status_pb2.ServiceStatus:
    """A registry entry as the service answers it, up or down at `now`."""
    status = status_pb2.ServiceStatus()
    if entry.status:
        try:
            json_format.Parse(entry.status, status, ignore_unknown_fields=True)
        except json_format.ParseError as e:  # written by a newer or broken reporter: the rest still shows
            _log.warning("the status of %s %s does not parse: %s", entry.kind, entry.instance_id, e)
    reason = entry.down_reason(now)
    status.MergeFrom(status_pb2.ServiceStatus(
        kind=_KINDS.get(entry.kind, status_pb2.SERVICE_KIND_UNSPECIFIED), instance_id=entry.instance_id,
        address=entry.address, last_heartbeat_ms=entry.last_ms, started_ms=entry.started_ms,
        interval_ms=entry.interval_ms, up=not reason, down_reason=reason))
    return status


def kind_name(kind: status_pb2.ServiceKind.ValueType) -> str:
    return _KIND_NAMES.get(kind, "unknown")


class StatusService(status_pb2_grpc.StatusServiceServicer):
    """Heartbeats in, the services' list out; over the store's registry."""

    def __init__(self, store: MetaStore) -> None:
        self.registry = ServiceRegistry(store)

    @guarded
    def Heartbeat(self, request: status_pb2.HeartbeatRequest,
                  context: grpc.ServicerContext) -> status_pb2.HeartbeatResponse:
        kind = _KIND_NAMES.get(request.kind)
        if kind is None or kind == "catalog":  # catalog replicas report themselves, through the store
            raise InvalidInputError(f"kind {request.kind} is not a writer or compactor "
                                    f"({status_pb2.SERVICE_KIND_WRITER} or {status_pb2.SERVICE_KIND_COMPACTOR})")
        if request.interval_ms <= 0:
            raise InvalidInputError(f"interval_ms {request.interval_ms} must be positive")
        at = self.registry.beat(kind, request.instance_id, request.address, request.interval_ms,
                                _report_text(request), stopping=request.stopping)
        return status_pb2.HeartbeatResponse(received_ms=at)

    @guarded
    def ListServices(self, request: status_pb2.ListServicesRequest,
                     context: grpc.ServicerContext) -> status_pb2.ListServicesResponse:
        now = now_ms()
        return status_pb2.ListServicesResponse(
            services=[service_status(e, now) for e in self.registry.services()], now_ms=now,
            missed_beats=MISSED_BEATS)


def add_to_server(servicer: StatusService, server: grpc.Server) -> None:
    status_pb2_grpc.add_StatusServiceServicer_to_server(servicer, server)


class CatalogBeat:
    """A catalog replica's own heartbeat in the registry, every `interval_s`, and a last one saying it stops.

    Once a beat the registry also forgets the services silent for a day."""

    def __init__(self, registry: ServiceRegistry, instance_id: str, address: str, interval_s: float = BEAT_S) -> None:
        self.registry = registry
        self.instance_id = instance_id
        self.address = address
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="catalog-heartbeat", daemon=True)

    def start(self) -> CatalogBeat:
        self._beat(stopping=False)  # listed as soon as it serves
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._beat(stopping=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._beat(stopping=False)
            try:
                self.registry.forget_gone()
            except Exception as e:  # noqa: BLE001 (the store is away: the next beat tries again)
                _log.warning("cannot forget the services gone for a day: %s", e)

    def _beat(self, stopping: bool) -> None:
        try:
            self.registry.beat("catalog", self.instance_id, self.address, round(self.interval_s * 1000),
                               stopping=stopping)
        except Exception as e:  # noqa: BLE001 (a heartbeat lost is shown as one missed, never stops the catalog)
            _log.warning("cannot record this catalog's heartbeat: %s", e)
