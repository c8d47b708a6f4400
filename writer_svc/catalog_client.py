"""The writer's view of the catalog service: commits with retries that never apply twice, and run counts.

A commit without a definite answer (a status in `lsmlake.rpc.errors.UNDECIDED`: UNAVAILABLE, DEADLINE_EXCEEDED,
INTERNAL...) is retried with the same commit user and identifier: the catalog answers `already_committed` with
the first attempt's snapshot, so a retry never applies the files twice. Only a definite refusal (a bad
request, a conflict) lets the caller delete files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import grpc
import numpy as np

from lsmlake.errors import CommitStateUnknownError, LakeError, ServiceUnavailableError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.rpc.errors import UNDECIDED
from lsmlake.rpc.security import ChannelSecurity
from lsmlake.table.dynamic_bucket import Assignment, elsewhere_of
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)
T = TypeVar("T")
ASSIGN_BATCH = 500_000  # distinct key hashes per AssignBuckets request (the catalog takes up to 1,000,000)


class CommitRefusedError(LakeError):
    """The catalog definitely did not commit (the files may be deleted); carries the catalog's status, which
    the writer answers its own client with (`lsmlake.rpc.errors.status_for`)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CatalogSequences:
    """The catalog as the sequence-number authority of one table (see `lsmlake.table.sequence_numbers`)."""

    def __init__(self, client: CatalogClient, table_id: str, table_uuid: str) -> None:
        self.client = client
        self.table_id = table_id
        self.table_uuid = table_uuid

    def allocate(self, counts: Mapping[tuple[bytes, int], int]) -> dict[tuple[bytes, int], int]:
        return self.client.allocate_sequences(self.table_id, counts, self.table_uuid)


class CatalogBuckets:
    """The catalog as the bucket assigner of one dynamic-bucket table (see `lsmlake.table.dynamic_bucket`)."""

    def __init__(self, client: CatalogClient, table_id: str, table_uuid: str) -> None:
        self.client = client
        self.table_id = table_id
        self.table_uuid = table_uuid

    def assign(self, keys: Sequence[tuple[bytes, np.ndarray]]) -> list[Assignment]:
        return self.client.assign_buckets(self.table_id, keys, self.table_uuid)

    def index_messages(self) -> list[CommitMessage]:
        return []  # the catalog committed every assignment before answering


def ident(table_id: str) -> common_pb2.TableIdentifier:
    db, _, name = table_id.partition(".")
    return common_pb2.TableIdentifier(database=db, table=name)


class CatalogClient:
    """One channel to the catalog service, shared by every table of the writer."""

    def __init__(self, target: str, timeout_s: float = 30.0, retry_for_s: float = 60.0,
                 security: ChannelSecurity | None = None) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.retry_for_s = retry_for_s
        self.channel = (security or ChannelSecurity()).open_channel(
            target, options=[("grpc.max_send_message_length", 64 << 20),
                             ("grpc.max_receive_message_length", 64 << 20)])
        self.stub = catalog_pb2_grpc.CatalogServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def commit(self, table_id: str, user: str, identifier: int, messages: Sequence[CommitMessage],
               properties: dict[str, str] | None = None, request_ids: Sequence[str] = (), table_uuid: str = "") -> int:
        """Commit APPEND files holding the rows of the client writes `request_ids`; the snapshot id. Raises
        CommitRefusedError (definite; ALREADY_EXISTS when the table committed one of the writes before) or
        CommitStateUnknownError (the catalog could not be reached for `retry_for_s`: do not delete the files)."""
        request = catalog_pb2.CommitRequest(table=ident(table_id), commit_user=user, commit_identifier=identifier,
                                            kind=common_pb2.COMMIT_KIND_APPEND,
                                            changes=[changes_to_proto(m) for m in messages],
                                            properties=properties or {}, request_ids=list(request_ids),
                                            table_uuid=table_uuid)
        def unknown(e: grpc.RpcError) -> LakeError:
            return CommitStateUnknownError(f"commit {identifier} of {table_id} by {user}: the catalog at "
                                           f"{self.target} did not answer ({e.code().name}: {e.details()})")
        return self._retrying(lambda: self.stub.Commit(request, timeout=self.timeout_s).snapshot_id,
                              f"commit {identifier} of {table_id}", "the commit", unknown)

    def allocate_sequences(self, table_id: str, counts: Mapping[tuple[bytes, int], int],
                           table_uuid: str = "") -> dict[tuple[bytes, int], int]:
        """The first of `counts[key]` sequence numbers reserved for each bucket by the catalog.

        A lost reply is asked again for up to `retry_for_s` (a lost range only leaves a gap). Raises
        ServiceUnavailableError when the catalog cannot be reached, CommitRefusedError when it refuses.
        """
        keys = list(counts)
        request = catalog_pb2.AllocateSequencesRequest(
            table=ident(table_id), table_uuid=table_uuid,
            ranges=[catalog_pb2.SequenceRange(partition=p, bucket=b, count=counts[(p, b)]) for p, b in keys])
        def unknown(e: grpc.RpcError) -> LakeError:
            return ServiceUnavailableError(f"the catalog at {self.target} gave no sequence numbers for {table_id} "
                                           f"({e.code().name}: {e.details()}); nothing was written, retry")
        first = self._retrying(lambda: self.stub.AllocateSequences(request, timeout=self.timeout_s).first,
                               f"sequence numbers for {table_id}", "sequence numbers", unknown)
        return dict(zip(keys, first, strict=True))

    def assign_buckets(self, table_id: str, keys: Sequence[tuple[bytes, np.ndarray]],
                       table_uuid: str = "") -> list[Assignment]:
        """The bucket of each key hash per partition, assigned (and committed) by the catalog, and where else the
        table holds the hashes (cross-partition tables).

        The distinct hashes are sent, in requests of at most `ASSIGN_BATCH` hashes; a lost reply is asked
        again (an assignment is committed before its answer, so the same question gets the same buckets).
        """
        distinct = [(p, *np.unique(np.asarray(h, np.int32), return_inverse=True)) for p, h in keys]
        replies: list[catalog_pb2.PartitionBuckets] = []
        pending: list[catalog_pb2.PartitionKeys] = []
        size = 0

        def send() -> None:
            request = catalog_pb2.AssignBucketsRequest(table=ident(table_id), partitions=pending,
                                                       table_uuid=table_uuid)
            def unknown(e: grpc.RpcError) -> LakeError:
                return ServiceUnavailableError(f"the catalog at {self.target} assigned no buckets for {table_id} "
                                               f"({e.code().name}: {e.details()}); nothing was written, retry")
            def ask() -> catalog_pb2.AssignBucketsResponse:
                return self.stub.AssignBuckets(request, timeout=self.timeout_s)
            replies.extend(self._retrying(ask, f"buckets for {table_id}", "to assign buckets", unknown).partitions)

        for partition, uniq, _ in distinct:
            for at in range(0, len(uniq), ASSIGN_BATCH):  # a partition larger than one request is split
                piece = uniq[at:at + ASSIGN_BATCH]
                if size + len(piece) > ASSIGN_BATCH or any(p.partition == partition for p in pending):
                    send()
                    pending, size = [], 0
                pending.append(catalog_pb2.PartitionKeys(partition=partition, key_hashes=piece.tolist()))
                size += len(piece)
        if pending:
            send()
        out = []
        answers = iter(replies)
        for _, uniq, inverse in distinct:
            buckets: list[np.ndarray] = [np.zeros(0, np.int32)]
            positions: list[np.ndarray] = [np.zeros(0, np.int32)]
            parts: list[bytes] = []
            where_buckets: list[np.ndarray] = [np.zeros(0, np.int32)]
            taken = 0
            while taken < len(uniq):
                reply = next(answers)
                buckets.append(np.fromiter(reply.buckets, np.int32))
                positions.append(np.fromiter(reply.elsewhere_positions, np.int32) + taken)
                parts.extend(reply.elsewhere_partitions)
                where_buckets.append(np.fromiter(reply.elsewhere_buckets, np.int32))
                taken += len(buckets[-1])
            inverse = inverse.reshape(-1)
            out.append(Assignment(np.concatenate(buckets)[inverse], elsewhere_of(
                inverse, np.concatenate(positions), parts, np.concatenate(where_buckets))))
        return out

    def _retrying(self, call: Callable[[], T], what: str, refused: str,
                  unknown: Callable[[grpc.RpcError], LakeError]) -> T:
        """`call`, asked again with backoff while the catalog's answer is lost, for up to `retry_for_s`.

        A definite refusal raises CommitRefusedError ("the catalog refused <refused>"); an answer still
        missing at the end raises `unknown(last error)`. Only for calls that are safe to repeat.
        """
        deadline = time.monotonic() + self.retry_for_s
        backoff = 0.1
        while True:
            try:
                return call()
            except grpc.RpcError as e:
                code = e.code()
                if code not in UNDECIDED:
                    raise CommitRefusedError(code, f"the catalog refused {refused}: {e.details()}") from e
                if time.monotonic() + backoff > deadline:
                    raise unknown(e) from e
                _log.warning("%s: %s, asking again", what, code.name)
                time.sleep(backoff)  # bounded by `retry_for_s`
                backoff = min(backoff * 2, 2.0)

    def find_writes(self, table_id: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The snapshot of each of these client writes the table committed; ServiceUnavailableError when the
        catalog cannot tell (the write must not go ahead: it might be a resend of a committed one)."""
        request = catalog_pb2.FindWritesRequest(table=ident(table_id), request_ids=list(request_ids))
        try:
            return dict(self.stub.FindWrites(request, timeout=self.timeout_s).snapshot_ids)
        except grpc.RpcError as e:
            if e.code() in UNDECIDED:
                raise ServiceUnavailableError(f"the catalog at {self.target} cannot say whether write "
                                              f"{request_ids[0]!r} was committed ({e.code().name}); resend it "
                                              "with the same request id") from e
            raise CommitRefusedError(e.code(), f"the catalog refused to look the write up: {e.details()}") from e

    def sorted_runs(self, table_id: str, buckets: Sequence[int] | None = None) -> dict[tuple[bytes, int], int]:
        """Sorted runs per (partition, bucket) in the latest snapshot: each level-0 file plus each non-empty level."""
        plan = self.stub.PlanScan(catalog_pb2.PlanScanRequest(table=ident(table_id), buckets=list(buckets or ()),
                                                              all_levels=True), timeout=self.timeout_s)
        out = {}
        for s in plan.splits:
            levels = [f.level for f in s.files]
            out[(s.partition, s.bucket)] = levels.count(0) + len({lv for lv in levels if lv > 0})
        return out
