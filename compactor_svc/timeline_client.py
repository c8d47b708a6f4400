"""The compactor's calls to the catalog's compaction timeline, with retries that never apply twice.

Every call is retried while it gets no answer (`lsmlake.rpc.errors.NO_ANSWER`: UNAVAILABLE, DEADLINE_EXCEEDED)
for `retry_for_s`: the timeline transitions are checked by state (a repeated start or rollback is refused,
not applied twice) and a repeated completion carries the same commit user and identifier, which the catalog
answers with the first attempt's snapshot. Other failures, and the last one, are raised as they came
(grpc.RpcError): the scheduler reads their status and details.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.errors import NO_ANSWER
from lsmlake.rpc.security import ChannelSecurity

_log = logging.getLogger(__name__)
T = TypeVar("T")


def ident(table_id: str) -> common_pb2.TableIdentifier:
    db, _, name = table_id.partition(".")
    return common_pb2.TableIdentifier(database=db, table=name)


class TimelineClient:
    def __init__(self, target: str, timeout_s: float = 60.0, retry_for_s: float = 60.0,
                 security: ChannelSecurity | None = None) -> None:
        self.channel = (security or ChannelSecurity()).open_channel(
            target, options=[("grpc.max_send_message_length", 64 << 20),
                             ("grpc.max_receive_message_length", 64 << 20)])
        self.stub = catalog_pb2_grpc.CatalogServiceStub(self.channel)
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s

    def close(self) -> None:
        self.channel.close()

    def _call(self, fn: Callable[..., T], request: Any) -> T:
        deadline = time.monotonic() + self.retry_for_s
        backoff = 0.1
        while True:
            try:
                return fn(request, timeout=self.timeout_s)
            except grpc.RpcError as e:
                if e.code() not in NO_ANSWER or time.monotonic() + backoff > deadline:
                    raise
                _log.warning("catalog %s: %s; retrying", type(request).__name__, e.code().name)
                time.sleep(backoff)  # bounded by retry_for_s
                backoff = min(2 * backoff, 2.0)

    def request(self, table_id: str, units: Sequence[catalog_pb2.CompactionUnit], full: bool) -> Any:
        return self._call(self.stub.RequestCompaction, catalog_pb2.RequestCompactionRequest(
            table=ident(table_id), units=units, full=full)).plan

    def start(self, table_id: str, plan_id: str, owner: str) -> Any:
        return self._call(self.stub.StartCompaction, catalog_pb2.StartCompactionRequest(
            table=ident(table_id), plan_id=plan_id, owner=owner)).plan

    def complete(self, table_id: str, plan_id: str, owner: str, identifier: int,
                 changes: Sequence[common_pb2.FileChanges]) -> Any:
        return self._call(self.stub.CompleteCompaction, catalog_pb2.CompleteCompactionRequest(
            table=ident(table_id), plan_id=plan_id, owner=owner, commit_user=owner, commit_identifier=identifier,
            changes=changes))

    def rollback(self, table_id: str, plan_id: str, reason: str, requeue: bool) -> Any:
        return self._call(self.stub.RollbackCompaction, catalog_pb2.RollbackCompactionRequest(
            table=ident(table_id), plan_id=plan_id, reason=reason, requeue=requeue))

    def plans(self, table_id: str, states: Sequence[catalog_pb2.CompactionPlanState.ValueType]) -> list[Any]:
        return list(self._call(self.stub.ListCompactionPlans, catalog_pb2.ListCompactionPlansRequest(
            table=ident(table_id), states=states)).plans)
