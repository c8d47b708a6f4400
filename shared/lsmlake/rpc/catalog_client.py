"""The one client of the catalog service: one channel, typed calls, one retry policy, lsmlake errors only.

The `Client`, the writer service and the compactor service all call the catalog through `CatalogClient`.
Every failure arrives as the lsmlake error the catalog raised (`lsmlake.rpc.errors.error_for`), never as a
`grpc.RpcError`.

Retries (`RetryPolicy`) only for calls that are safe to repeat. A writer's commit without a definite answer
(a status in `UNDECIDED`: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL...) is sent again with the same commit user
and identifier: the catalog answers `already_committed` with the first attempt's snapshot, so a retry never
applies the files twice; only a definite refusal (a bad request, a conflict) lets the caller delete files. The
compaction timeline's calls are asked again while they get no answer at all (`NO_ANSWER`): its transitions are
checked by state (a repeated start or rollback is refused, not applied twice), and a repeated completion
carries the same commit user and identifier.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
import numpy as np

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.errors import CommitStateUnknownError, ServiceUnavailableError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.bucket_assignment import assign_in_batches
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.rpc.errors import NO_ANSWER, UNDECIDED
from lsmlake.rpc.retry import CHANNEL_OPTIONS, ONCE, RetryPolicy, call, stream
from lsmlake.rpc.security import ChannelSecurity
from lsmlake.table.dynamic_bucket import Assignment
from lsmlake.table.write import CommitMessage

R = TypeVar("R")


def table_ident(identifier: str) -> common_pb2.TableIdentifier:
    """`db.table` as the services name a table; InvalidInputError for any other form."""
    db, name = split_identifier(identifier)
    return common_pb2.TableIdentifier(database=db, table=name)


class CatalogClient:
    """One channel to the catalog service at `target`.

    `timeout_s` bounds each attempt; `retry_for_s` how long the calls that are safe to repeat are asked again
    (the writer's and compactor's calls below); `call` with its default sends once."""

    def __init__(self, target: str, timeout_s: float = 30.0, retry_for_s: float = 60.0,
                 security: ChannelSecurity | None = None) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self.channel = (security or ChannelSecurity()).open_channel(target, options=CHANNEL_OPTIONS)
        self.stub = catalog_pb2_grpc.CatalogServiceStub(self.channel)
        self.timeline = CompactionTimeline(self)

    def close(self) -> None:
        self.channel.close()

    def call(self, method: Callable[..., R], request: Any, *, changes_state: bool, timeout_s: float | None = None,
             retry: RetryPolicy = ONCE, refused: str | None = None) -> R:
        """`method` (of `stub`) with `request`; see `lsmlake.rpc.retry.call`."""
        return call(method, request, timeout_s=timeout_s or self.timeout_s, changes_state=changes_state,
                    retry=retry, refused=refused)

    def retrying(self, on: frozenset[grpc.StatusCode]) -> RetryPolicy:
        """Asking again on the statuses `on` for `retry_for_s`."""
        return RetryPolicy(self.retry_for_s, on)

    # -- the writer's calls ------------------------------------------------------------------------

    def commit(self, table_id: str, user: str, identifier: int, messages: Sequence[CommitMessage],
               properties: dict[str, str] | None = None, request_ids: Sequence[str] = (), table_uuid: str = "") -> int:
        """Commit APPEND files holding the rows of the client writes `request_ids`; the snapshot id.

        Raises the catalog's definite refusal ("the catalog refused the commit: ..."; AlreadyExistsError when the
        table committed one of the writes before), or CommitStateUnknownError when the catalog could not be
        reached for `retry_for_s` (do not delete the files)."""
        request = catalog_pb2.CommitRequest(table=table_ident(table_id), commit_user=user,
                                            commit_identifier=identifier, kind=common_pb2.COMMIT_KIND_APPEND,
                                            changes=[changes_to_proto(m) for m in messages],
                                            properties=properties or {}, request_ids=list(request_ids),
                                            table_uuid=table_uuid)
        return call(self.stub.Commit, request, timeout_s=self.timeout_s, changes_state=True,
                    retry=self.retrying(UNDECIDED), what=f"commit {identifier} of {table_id}",
                    refused="the catalog refused the commit", no_answer=lambda status, details: CommitStateUnknownError(
                        f"commit {identifier} of {table_id} by {user}: the catalog at {self.target} did not answer "
                        f"({status}: {details})")).snapshot_id

    def allocate_sequences(self, table_id: str, counts: Mapping[tuple[bytes, int], int],
                           table_uuid: str = "") -> dict[tuple[bytes, int], int]:
        """The first of `counts[key]` sequence numbers reserved for each bucket by the catalog.

        A lost reply is asked again for up to `retry_for_s` (a lost range only leaves a gap). Raises
        ServiceUnavailableError when the catalog cannot be reached, its definite refusal otherwise.
        """
        keys = list(counts)
        request = catalog_pb2.AllocateSequencesRequest(
            table=table_ident(table_id), table_uuid=table_uuid,
            ranges=[catalog_pb2.SequenceRange(partition=p, bucket=b, count=counts[(p, b)]) for p, b in keys])
        def no_answer(status: str, details: str) -> ServiceUnavailableError:
            return ServiceUnavailableError(f"the catalog at {self.target} gave no sequence numbers for {table_id} "
                                           f"({status}: {details}); nothing was written, retry")
        reply = call(self.stub.AllocateSequences, request, timeout_s=self.timeout_s, changes_state=True,
                     retry=self.retrying(UNDECIDED), what=f"sequence numbers for {table_id}",
                     refused="the catalog refused sequence numbers", no_answer=no_answer)
        return dict(zip(keys, reply.first, strict=True))

    def assign_buckets(self, table_id: str, keys: Sequence[tuple[bytes, np.ndarray]],
                       table_uuid: str = "") -> list[Assignment]:
        """The bucket of each key hash per partition, assigned (and committed) by the catalog, and where else the
        table holds the hashes (cross-partition tables); see `lsmlake.rpc.bucket_assignment`. A lost reply is
        asked again (an assignment is committed before its answer, so the same question gets the same buckets).
        """
        def send(partitions: list[catalog_pb2.PartitionKeys]) -> catalog_pb2.AssignBucketsResponse:
            request = catalog_pb2.AssignBucketsRequest(table=table_ident(table_id), partitions=partitions,
                                                       table_uuid=table_uuid)
            return call(self.stub.AssignBuckets, request, timeout_s=self.timeout_s, changes_state=True,
                        retry=self.retrying(UNDECIDED), what=f"buckets for {table_id}",
                        refused="the catalog refused to assign buckets", no_answer=lambda status, details:
                        ServiceUnavailableError(f"the catalog at {self.target} assigned no buckets for {table_id} "
                                                f"({status}: {details}); nothing was written, retry"))
        return assign_in_batches(keys, send)

    def find_writes(self, table_id: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The snapshot of each of these client writes the table committed; ServiceUnavailableError when the
        catalog cannot tell (the write must not go ahead: it might be a resend of a committed one)."""
        request = catalog_pb2.FindWritesRequest(table=table_ident(table_id), request_ids=list(request_ids))
        return dict(call(self.stub.FindWrites, request, timeout_s=self.timeout_s, changes_state=False,
                         retry=RetryPolicy(0.0, UNDECIDED), refused="the catalog refused to look the write up",
                         no_answer=lambda status, _: ServiceUnavailableError(
                             f"the catalog at {self.target} cannot say whether write {request_ids[0]!r} was committed "
                             f"({status}); resend it with the same request id")).snapshot_ids)

    def sorted_runs(self, table_id: str, buckets: Sequence[int] | None = None) -> dict[tuple[bytes, int], int]:
        """Sorted runs per (partition, bucket) in the latest snapshot: each level-0 file plus each non-empty level."""
        plan = self.call(self.stub.PlanScan, catalog_pb2.PlanScanRequest(
            table=table_ident(table_id), buckets=list(buckets or ()), all_levels=True), changes_state=False)
        out = {}
        for s in plan.splits:
            levels = [f.level for f in s.files]
            out[(s.partition, s.bucket)] = levels.count(0) + len({lv for lv in levels if lv > 0})
        return out

    # -- table names and tags (sent once: a caller decides whether to ask again) --------------------

    def rename_table(self, table_id: str, new_table_id: str) -> catalog_pb2.TableInfo:
        """Move `table_id` to `new_table_id` (an existing database, no table of that name); the table as renamed."""
        request = catalog_pb2.RenameTableRequest(table=table_ident(table_id), new_table=table_ident(new_table_id))
        return self.call(self.stub.RenameTable, request, changes_state=True).table

    def list_tags(self, table_id: str) -> list[str]:
        """The names of the table's tags, sorted."""
        request = catalog_pb2.ListTagsRequest(table=table_ident(table_id))
        return list(self.call(self.stub.ListTags, request, changes_state=False).tags)

    def get_tag(self, table_id: str, tag: str) -> common_pb2.Snapshot:
        """The snapshot tag `tag` names; NotFoundError when there is no such tag."""
        request = catalog_pb2.GetTagRequest(table=table_ident(table_id), tag=tag)
        return self.call(self.stub.GetTag, request, changes_state=False).snapshot

    def create_tag(self, table_id: str, tag: str, snapshot_id: int | None = None) -> common_pb2.Snapshot:
        """Tag snapshot `snapshot_id` (the newest when None); the snapshot tagged. AlreadyExistsError when the name
        is taken."""
        request = catalog_pb2.CreateTagRequest(table=table_ident(table_id), tag=tag, snapshot_id=snapshot_id)
        return self.call(self.stub.CreateTag, request, changes_state=True).snapshot

    def delete_tag(self, table_id: str, tag: str) -> None:
        """Delete tag `tag`; NotFoundError when there is none."""
        request = catalog_pb2.DeleteTagRequest(table=table_ident(table_id), tag=tag)
        self.call(self.stub.DeleteTag, request, changes_state=True)

    # -- streams -----------------------------------------------------------------------------------

    def watch_snapshots(self, table_id: str, after_snapshot_id: int | None = None,
                        timeout_s: float | None = None) -> Iterator[catalog_pb2.WatchSnapshotsResponse]:
        """The table's snapshots as they are committed; a failure while streaming is raised as an lsmlake error."""
        request = catalog_pb2.WatchSnapshotsRequest(table=table_ident(table_id), after_snapshot_id=after_snapshot_id)
        return stream(self.stub.WatchSnapshots, request, timeout_s=timeout_s)


class CompactionTimeline:
    """The catalog's compaction timeline, as the compactor calls it: each call asked again while it gets no answer
    at all (`NO_ANSWER`) for the client's `retry_for_s`; a refusal is the lsmlake error the catalog raised."""

    def __init__(self, client: CatalogClient) -> None:
        self.client = client

    def _call(self, method: Callable[..., R], request: Any) -> R:
        return self.client.call(method, request, changes_state=False, retry=self.client.retrying(NO_ANSWER))

    def request(self, table_id: str, units: Sequence[catalog_pb2.CompactionUnit],
                full: bool) -> catalog_pb2.CompactionPlan:
        return self._call(self.client.stub.RequestCompaction, catalog_pb2.RequestCompactionRequest(
            table=table_ident(table_id), units=units, full=full)).plan

    def start(self, table_id: str, plan_id: str, owner: str) -> catalog_pb2.CompactionPlan:
        return self._call(self.client.stub.StartCompaction, catalog_pb2.StartCompactionRequest(
            table=table_ident(table_id), plan_id=plan_id, owner=owner)).plan

    def complete(self, table_id: str, plan_id: str, owner: str, identifier: int,
                 changes: Sequence[common_pb2.FileChanges]) -> catalog_pb2.CompleteCompactionResponse:
        return self._call(self.client.stub.CompleteCompaction, catalog_pb2.CompleteCompactionRequest(
            table=table_ident(table_id), plan_id=plan_id, owner=owner, commit_user=owner, commit_identifier=identifier,
            changes=changes))

    def rollback(self, table_id: str, plan_id: str, reason: str,
                 requeue: bool) -> catalog_pb2.RollbackCompactionResponse:
        return self._call(self.client.stub.RollbackCompaction, catalog_pb2.RollbackCompactionRequest(
            table=table_ident(table_id), plan_id=plan_id, reason=reason, requeue=requeue))

    def plans(self, table_id: str | None,
              states: Sequence[catalog_pb2.CompactionPlanState.ValueType]) -> list[catalog_pb2.CompactionPlan]:
        """One table's plans in `states`, or (`table_id` None) every table's, each naming its table, in one call."""
        request = catalog_pb2.ListCompactionPlansRequest(states=states)
        if table_id is not None:
            request.table.CopyFrom(table_ident(table_id))
        return list(self._call(self.client.stub.ListCompactionPlans, request).plans)
