"""`CompactorService`: triggers, status and the LSM shape of buckets."""

from __future__ import annotations

import time

import grpc

from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.partition import partition_value_string
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from lsmlake.rpc.catalog_client import table_ident
from lsmlake.rpc.convert import table_id as checked_table_id
from lsmlake.rpc.errors import guarded
from lsmlake.table.file_store_table import FileStoreTable

DEFAULT_WAIT_S = 300.0  # a waited trigger's limit when the call has no deadline
WAIT_MARGIN_S = 2.0


def wait_limit(time_remaining: float | None) -> float:
    """How long a waited trigger waits: until a margin (2 s, or 10% of a short deadline) before the call's
    deadline, so that the answer with the timed-out buckets arrives before the client gives up."""
    if time_remaining is None:
        return DEFAULT_WAIT_S
    return max(0.0, time_remaining - min(WAIT_MARGIN_S, 0.1 * time_remaining))


class _PartitionTexts:
    """Partition values as text by column (what `TriggerCompactionRequest.partition` takes), by BinaryRow."""

    def __init__(self, table: FileStoreTable) -> None:
        self.table = table
        self.names = list(table.schema.partition_keys)
        self.types = table.schema.types_of(self.names)

    def __call__(self, partition: bytes) -> dict[str, str]:
        values = self.table.partition_values(partition)
        texts = {}
        for n, t, v in zip(self.names, self.types, values, strict=True):
            text = partition_value_string(v, t)
            if text is not None:
                texts[n] = text
        return texts


class CompactorService(compactor_pb2_grpc.CompactorServiceServicer):
    def __init__(self, warehouse: str, scheduler: Scheduler, ownership: Ownership, compactor_id: str) -> None:
        self.catalog = FileSystemCatalog(warehouse)
        self.scheduler = scheduler
        self.ownership = ownership
        self.compactor_id = compactor_id

    @guarded
    def TriggerCompaction(self, request: compactor_pb2.TriggerCompactionRequest,
                          context: grpc.ServicerContext) -> compactor_pb2.TriggerCompactionResponse:
        """Queue the owned buckets; with `wait`, answer once each is compacted or known not to be (waits.py)."""
        table_id = checked_table_id(request.table)
        if request.HasField("bucket") and request.bucket < 0:
            raise InvalidInputError(f"bucket {request.bucket} must not be negative")
        table = self.catalog.get_table(table_id)
        unknown = set(request.partition) - set(table.schema.partition_keys)
        if unknown:
            raise InvalidInputError(f"partition names {sorted(unknown)}, which are not partition keys of {table_id} "
                                    f"({list(table.schema.partition_keys)})")
        w = self.scheduler.request(table_id, dict(request.partition),
                                   request.bucket if request.HasField("bucket") else None, request.full,
                                   wait=request.wait)
        out = compactor_pb2.TriggerCompactionResponse(buckets_queued=len(w.queued), buckets_elsewhere=w.elsewhere,
                                                      request_snapshot_id=w.since)
        if request.wait and w.queued:
            limit = wait_limit(context.time_remaining())
            out.wait_limit_ms = int(limit * 1000)
            self.scheduler.wait(w, limit)
            out.timed_out = w.timed_out
            for plan_id, snapshot_id in w.plans():
                out.plan_ids.append(plan_id)
                out.snapshot_ids.append(snapshot_id)
        texts = _PartitionTexts(table)
        for c in sorted(w.compacted.values(), key=lambda c: (c.key[1], c.key[2])):
            out.compacted.append(compactor_pb2.BucketCompacted(
                partition=c.key[1], partition_values=texts(c.key[1]), bucket=c.key[2], plan_id=c.plan_id,
                snapshot_id=c.snapshot_id))
        for n in sorted(w.not_compacted.values(), key=lambda n: (n.key[1], n.key[2])):
            out.not_compacted.append(compactor_pb2.BucketNotCompacted(
                partition=n.key[1], partition_values=texts(n.key[1]), bucket=n.key[2], reason=n.reason))
        return out

    @guarded
    def CompactionStatus(self, request: compactor_pb2.CompactionStatusRequest,
                         context: grpc.ServicerContext) -> compactor_pb2.CompactionStatusResponse:
        out = compactor_pb2.CompactionStatusResponse(
            compactor_id=self.compactor_id, owned_partitions=sorted(self.ownership.owned),
            pending_buckets=self.scheduler.pending(), plans_completed=self.scheduler.completed,
            plans_failed=self.scheduler.failed)
        for r in self.scheduler.running:
            out.running.append(compactor_pb2.RunningPlan(table=table_ident(r.table_id), plan_id=r.plan_id,
                                                         buckets=r.buckets, full=r.full,
                                                         running_ms=int((time.monotonic() - r.started) * 1000)))
        return out

    @guarded
    def BucketLevels(self, request: compactor_pb2.BucketLevelsRequest,
                     context: grpc.ServicerContext) -> compactor_pb2.BucketLevelsResponse:
        table_id = checked_table_id(request.table)
        table = self.catalog.get_table(table_id)
        snap = table.latest_snapshot()
        out = compactor_pb2.BucketLevelsResponse(snapshot_id=snap.id if snap else 0)
        if snap is None:
            return out
        texts = _PartitionTexts(table)
        for s in table.new_scan(None, snap, all_levels=True).plan():
            levels: dict[int, list[DataFileMeta]] = {}
            for f in s.files:
                levels.setdefault(f.level, []).append(f)
            shape = compactor_pb2.BucketShape(partition=s.partition, partition_values=texts(s.partition),
                                              bucket=s.bucket,
                                              owned=self.ownership.owns(table_id, s.partition, s.bucket))
            for level in sorted(levels):
                fs = levels[level]
                shape.levels.append(compactor_pb2.LevelShape(
                    level=level, sorted_runs=len(fs) if level == 0 else 1, files=len(fs),
                    bytes=sum(f.file_size for f in fs), rows=sum(f.row_count for f in fs)))
            shape.sorted_runs = sum(lv.sorted_runs for lv in shape.levels)
            out.buckets.append(shape)
        return out
