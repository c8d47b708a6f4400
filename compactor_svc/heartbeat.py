"""The compactor's heartbeat to the catalog (`StatusService`): who it is, the partitions of the events topic it
owns (its share of the buckets), and the plans it runs now."""

from __future__ import annotations

import time

from compactor_svc.ownership import Ownership
from compactor_svc.state import CompactorState
from lsmlake.proto_gen.lsmlake.v1 import status_pb2
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.heartbeat import HeartbeatSender, interval_from_env


def compactor_report(compactor_id: str, address: str, ownership: Ownership,
                     state: CompactorState) -> status_pb2.HeartbeatRequest:
    now = time.monotonic()
    plans = [status_pb2.RunningPlanStatus(table=r.table_id, plan_id=r.plan_id, buckets=r.buckets, full=r.full,
                                          running_ms=max(0, round((now - r.started) * 1000)),
                                          tasks_done=r.tasks_done, tasks_total=r.tasks_total)
             for r in state.running]
    return status_pb2.HeartbeatRequest(kind=status_pb2.SERVICE_KIND_COMPACTOR, instance_id=compactor_id,
                                       address=address, owned_partitions=sorted(ownership.owned),
                                       total_partitions=ownership.partitions, running_plans=plans)


def compactor_heartbeat(client: CatalogClient, compactor_id: str, address: str, ownership: Ownership,
                        state: CompactorState, interval_s: float | None = None) -> HeartbeatSender:
    """A sender (not started) of this compactor's heartbeats."""
    return HeartbeatSender(client, lambda: compactor_report(compactor_id, address, ownership, state),
                           interval_from_env() if interval_s is None else interval_s)
