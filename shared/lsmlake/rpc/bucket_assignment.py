"""Asking the catalog for the buckets of many key hashes: distinct hashes only, in requests of bounded size."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.table.dynamic_bucket import Assignment, elsewhere_of

ASSIGN_BATCH = 500_000  # distinct key hashes per AssignBuckets request (the catalog takes up to 1,000,000)


def assign_in_batches(keys: Sequence[tuple[bytes, np.ndarray]],
                      send: Callable[[list[catalog_pb2.PartitionKeys]], catalog_pb2.AssignBucketsResponse]
                      ) -> list[Assignment]:
    """The assignment of each (partition, key hashes) of `keys`, from `send`ing the distinct hashes in requests of
    at most `ASSIGN_BATCH` hashes (a partition larger than one request is split, and no request names a
    partition twice)."""
    distinct = [(p, *np.unique(np.asarray(h, np.int32), return_inverse=True)) for p, h in keys]
    replies: list[catalog_pb2.PartitionBuckets] = []
    pending: list[catalog_pb2.PartitionKeys] = []
    size = 0
    for partition, uniq, _ in distinct:
        for at in range(0, len(uniq), ASSIGN_BATCH):
            piece = uniq[at:at + ASSIGN_BATCH]
            if size + len(piece) > ASSIGN_BATCH or any(p.partition == partition for p in pending):
                replies.extend(send(pending).partitions)
                pending, size = [], 0
            pending.append(catalog_pb2.PartitionKeys(partition=partition, key_hashes=piece.tolist()))
            size += len(piece)
    if pending:
        replies.extend(send(pending).partitions)
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
