"""Which buckets a compactor owns: those whose events land on the Kafka partitions its group assigned it.

The catalog keys every event by `db.table/<partition hex>/<bucket>`; Kafka's default partitioner maps a key
to a partition with murmur2, so all events of a bucket are on one partition of each topic and the
compactor that is assigned that partition owns the bucket. Both event topics have the same number of
partitions and the group's range assignor hands out equal partition numbers of the two topics to the same
member, so the `data-files` assignment decides. Buckets are thus never compacted by two compactors at once
(except briefly around a rebalance: the catalog's timeline refuses the second plan on the same files).
"""

from __future__ import annotations

import threading

from kafka.partitioner.default import murmur2

from lsmlake.rpc.events import event_key


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a key (as the catalog's relay publishes it)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Ownership:
    """The owned Kafka partitions, updated on rebalance and read by every thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: frozenset[int] = frozenset()
        self._partitions = 0
        self.generation = 0  # grows at every change

    def update(self, owned: set[int], partitions: int) -> tuple[set[int], set[int]]:
        """Set the owned partitions; (gained, lost)."""
        with self._lock:
            before = self._owned
            self._owned = frozenset(owned)
            self._partitions = partitions
            self.generation += 1
            return set(self._owned - before), set(before - self._owned)

    @property
    def owned(self) -> frozenset[int]:
        return self._owned

    @property
    def partitions(self) -> int:
        return self._partitions

    def partition_of(self, table_id: str, partition: bytes, bucket: int) -> int | None:
        n = self._partitions
        return None if n == 0 else kafka_partition(event_key(table_id, partition, bucket), n)

    def owns(self, table_id: str, partition: bytes, bucket: int) -> bool:
        p = self.partition_of(table_id, partition, bucket)
        return p is not None and p in self._owned
