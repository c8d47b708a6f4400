"""Which manifests can hold some partitions or buckets, told from a manifest list alone.

A manifest list records, per manifest, the min, max and null count of each partition field over its entries and
its lowest and highest bucket. A reader that wants a few buckets (a writer restoring its sequence numbers) or the
partitions a filter passes (a scan) opens only the manifests whose ranges can hold them, and keeps only their
entries: a DELETE always names its file's partition and bucket, so the entries of the wanted partitions replay to
the same live files as in a full replay. Statistics that cannot be read (another engine's, a changed layout) never
prune.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol

from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.data_file_meta import SimpleStats
from lsmlake.format.predicate import ColumnStats, Predicate, is_nan
from lsmlake.format.types import AnyType

BucketKey = tuple[bytes, int]  # (serialized partition, bucket)


class ManifestFilter(Protocol):
    """What a reader of a snapshot's manifests wants of them."""

    def may_hold(self, stats: SimpleStats, min_bucket: int | None, max_bucket: int | None, entries: int) -> bool:
        """Whether a manifest with these partition statistics and buckets can hold a wanted entry."""
        ...

    def partitions(self) -> Collection[bytes] | None:
        """The partitions wanted, when they are known (else any that `keeps_partition` passes)."""
        ...

    def keeps_partition(self, partition: bytes) -> bool:
        """Whether entries of this partition may be wanted."""
        ...

    def keeps(self, partition: bytes, bucket: int) -> bool:
        """Whether an entry of this partition and bucket is wanted."""
        ...


def stats_ranges(stats: SimpleStats, types: Sequence[AnyType]) -> tuple[list[Any], list[Any], list[int | None]] | None:
    """The per-field (mins, maxs, null counts) of partition statistics, or None when they do not read as such."""
    if not types:
        return [], [], []
    try:
        mins = deserialize_row(stats.min_values, types)
        maxs = deserialize_row(stats.max_values, types)
    except Exception:  # another layout: unknown, never pruned
        return None
    nulls: list[int | None] = list(stats.null_counts or ())
    nulls += [None] * (len(types) - len(nulls))
    return mins, maxs, nulls


def _in_range(v: Any, lo: Any, hi: Any, null_count: int | None) -> bool:
    if v is None:
        return null_count is None or null_count > 0
    if lo is None or hi is None:  # every value null (then it cannot be v), or unknown
        return null_count is None or (lo is None) != (hi is None)
    if is_nan(v) or is_nan(lo) or is_nan(hi):  # unordered: no comparison says it is out
        return True
    try:
        return bool(lo <= v <= hi)
    except TypeError:
        return True


class BucketFilter:
    """Entries of some (partition, bucket)s: what a writer restoring their sequence numbers reads."""

    def __init__(self, keys: Collection[BucketKey], partition_types: Sequence[AnyType]) -> None:
        self.types = list(partition_types)
        self.keys = frozenset(keys)
        values: dict[bytes, list[Any] | None] = {}
        for p, _ in self.keys:
            if p not in values:
                try:
                    values[p] = deserialize_row(p, self.types)
                except Exception:
                    values[p] = None  # cannot compare: matches every manifest
        self._wanted = [(values[p], b) for p, b in self.keys]
        self._partitions = frozenset(values)

    def may_hold(self, stats: SimpleStats, min_bucket: int | None, max_bucket: int | None, entries: int) -> bool:
        ranges = stats_ranges(stats, self.types)
        for values, bucket in self._wanted:
            if min_bucket is not None and max_bucket is not None and not min_bucket <= bucket <= max_bucket:
                continue
            if values is None or ranges is None:
                return True
            mins, maxs, nulls = ranges
            if all(_in_range(v, mins[i], maxs[i], nulls[i]) for i, v in enumerate(values)):
                return True
        return False

    def partitions(self) -> Collection[bytes] | None:
        return self._partitions

    def keeps_partition(self, partition: bytes) -> bool:
        return partition in self._partitions

    def keeps(self, partition: bytes, bucket: int) -> bool:
        return (partition, bucket) in self.keys


class PartitionFilter:
    """Entries of the partitions a predicate over partition columns passes: what a scan reads."""

    def __init__(self, predicate: Predicate, partition_keys: Sequence[str], partition_types: Sequence[AnyType]) -> None:
        self.keys = list(partition_keys)
        self.types = list(partition_types)
        self.predicate = predicate.only(self.keys)
        self._passes: dict[bytes, bool] = {}

    def may_hold(self, stats: SimpleStats, min_bucket: int | None, max_bucket: int | None, entries: int) -> bool:
        if self.predicate.accepts_all:
            return True
        ranges = stats_ranges(stats, self.types)
        if ranges is None:
            return True
        mins, maxs, nulls = ranges
        at = {k: i for i, k in enumerate(self.keys)}

        def column(name: str) -> ColumnStats | None:
            i = at.get(name)
            return None if i is None else (mins[i], maxs[i], nulls[i], max(entries, 1))

        return self.predicate.may_match(column)

    def partitions(self) -> Collection[bytes] | None:
        return None

    def keeps(self, partition: bytes, bucket: int) -> bool:
        return self.keeps_partition(partition)

    def keeps_partition(self, partition: bytes) -> bool:
        ok = self._passes.get(partition)
        if ok is None:
            try:
                values = deserialize_row(partition, self.types)
            except Exception:
                ok = True
            else:
                ok = self.predicate.test(dict(zip(self.keys, values, strict=True)))
            self._passes[partition] = ok
        return ok
