"""`CompactorService`: triggers, status and the LSM shape of buckets."""

from __future__ import annotations

import time
from typing import Any

import grpc

from ..catalog import FileSystemCatalog
from ..catalog_svc.convert import table_id as checked_table_id
from ..errors import InvalidInputError
from ..partition import partition_value_string
from ..proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from ..rpc_errors import guarded
from .ownership import Ownership
from .scheduler import Scheduler
from .timeline_client import ident

DEFAULT_WAIT_S = 300.0


class CompactorService(compactor_pb2_grpc.CompactorServiceServicer):
    def __init__(self, warehouse: str, scheduler: Scheduler, ownership: Ownership, compactor_id: str) -> None:
        self.catalog = FileSystemCatalog(warehouse)
        self.scheduler = scheduler
        self.ownership = ownership
        self.compactor_id = compactor_id

    @guarded
    def TriggerCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        table_id = checked_table_id(request.table)
        if request.HasField("bucket") and request.bucket < 0:
            raise InvalidInputError(f"bucket {request.bucket} must not be negative")
        table = self.catalog.get_table(table_id)
        unknown = set(request.partition) - set(table.schema.partition_keys)
        if unknown:
            raise InvalidInputError(f"partition names {sorted(unknown)}, which are not partition keys of {table_id} "
                                    f"({list(table.schema.partition_keys)})")
        since = time.time()
        queued, elsewhere = self.scheduler.request(table_id, dict(request.partition),
                                                   request.bucket if request.HasField("bucket") else None,
                                                   request.full)
        out = compactor_pb2.TriggerCompactionResponse(buckets_queued=len(queued), buckets_elsewhere=elsewhere)
        if request.wait and queued:
            remaining = context.time_remaining()
            results = self.scheduler.wait_for(queued, since, DEFAULT_WAIT_S if remaining is None else remaining)
            out.plan_ids.extend(p for p, _ in results)
            out.snapshot_ids.extend(s for _, s in results)
        return out

    @guarded
    def CompactionStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        out = compactor_pb2.CompactionStatusResponse(
            compactor_id=self.compactor_id, owned_partitions=sorted(self.ownership.owned),
            pending_buckets=self.scheduler.pending(), plans_completed=self.scheduler.completed,
            plans_failed=self.scheduler.failed)
        r = self.scheduler.running
        if r is not None:
            out.running.append(compactor_pb2.RunningPlan(table=ident(r.table_id), plan_id=r.plan_id,
                                                         buckets=r.buckets, full=r.full,
                                                         running_ms=int((time.monotonic() - r.started) * 1000)))
        return out

    @guarded
    def BucketLevels(self, request: Any, context: grpc.ServicerContext) -> Any:
        table_id = checked_table_id(request.table)
        table = self.catalog.get_table(table_id)
        snap = table.latest_snapshot()
        out = compactor_pb2.BucketLevelsResponse(snapshot_id=snap.id if snap else 0)
        if snap is None:
            return out
        names = list(table.schema.partition_keys)
        types = table.schema.types_of(names)
        for s in table.new_scan(None, snap, all_levels=True).plan():
            levels: dict[int, list[Any]] = {}
            for f in s.files:
                levels.setdefault(f.level, []).append(f)
            shape = compactor_pb2.BucketShape(partition=s.partition, bucket=s.bucket,
                                              owned=self.ownership.owns(table_id, s.partition, s.bucket))
            for n, t, v in zip(names, types, s.partition_values, strict=True):
                text = partition_value_string(v, t)
                if text is not None:
                    shape.partition_values[n] = text
            for level in sorted(levels):
                fs = levels[level]
                shape.levels.append(compactor_pb2.LevelShape(
                    level=level, sorted_runs=len(fs) if level == 0 else 1, files=len(fs),
                    bytes=sum(f.file_size for f in fs), rows=sum(f.row_count for f in fs)))
            shape.sorted_runs = sum(lv.sorted_runs for lv in shape.levels)
            out.buckets.append(shape)
        return out
