"""Which manifests a reader of some partitions or buckets opens, from the manifest list's statistics alone."""

from __future__ import annotations

from lsmlake.format.binary_row import serialize_row
from lsmlake.format.data_file_meta import SimpleStats
from lsmlake.format.manifest import partition_stats
from lsmlake.format.manifest_prune import BucketFilter, PartitionFilter
from lsmlake.format.predicate import Predicate
from lsmlake.format.stats import EMPTY_STATS
from lsmlake.format.types import parse_type

TYPES = [parse_type("STRING"), parse_type("INT")]


def _p(*values: object) -> bytes:
    return serialize_row(list(values), TYPES)


STATS = partition_stats([_p("a", 1), _p("c", 5)], TYPES)


def test_a_bucket_filter_opens_manifests_whose_ranges_hold_a_wanted_bucket() -> None:
    assert BucketFilter([(_p("b", 3), 1)], TYPES).may_hold(STATS, 0, 1, 2)
    assert not BucketFilter([(_p("b", 3), 2)], TYPES).may_hold(STATS, 0, 1, 2)  # bucket out of range
    assert not BucketFilter([(_p("d", 3), 0)], TYPES).may_hold(STATS, 0, 1, 2)  # first field out of range
    assert not BucketFilter([(_p("b", 9), 0)], TYPES).may_hold(STATS, 0, 1, 2)  # second field out of range
    assert BucketFilter([(_p("d", 3), 0), (_p("b", 3), 0)], TYPES).may_hold(STATS, 0, 1, 2)  # any key
    assert BucketFilter([(_p("b", 3), 7)], TYPES).may_hold(STATS, None, None, 2)  # buckets unknown


def test_statistics_that_do_not_read_never_prune() -> None:
    assert BucketFilter([(_p("z", 3), 0)], TYPES).may_hold(EMPTY_STATS, 0, 0, 1)
    assert PartitionFilter(Predicate.of({"p": "z"}), ["p", "n"], TYPES).may_hold(EMPTY_STATS, 0, 0, 1)


def test_null_partition_values_follow_the_null_counts() -> None:
    no_nulls = partition_stats([_p("a", 1)], TYPES)
    some_nulls = partition_stats([_p("a", 1), _p(None, 1)], TYPES)
    only_nulls = partition_stats([_p(None, 1)], TYPES)
    wanted = BucketFilter([(_p(None, 1), 0)], TYPES)
    assert not wanted.may_hold(no_nulls, 0, 0, 1)
    assert wanted.may_hold(some_nulls, 0, 0, 2)
    assert wanted.may_hold(only_nulls, 0, 0, 1)
    assert not BucketFilter([(_p("a", 1), 0)], TYPES).may_hold(only_nulls, 0, 0, 1)
    unknown = SimpleStats(only_nulls.min_values, only_nulls.max_values, None)
    assert BucketFilter([(_p("a", 1), 0)], TYPES).may_hold(unknown, 0, 0, 1)


def test_a_partition_filter_prunes_by_each_term() -> None:
    def may(*terms: tuple[str, str, object]) -> bool:
        return PartitionFilter(Predicate.of(list(terms)), ["p", "n"], TYPES).may_hold(STATS, 0, 0, 2)

    assert may(("p", "=", "b")) and not may(("p", "=", "d"))
    assert may(("n", ">=", 5)) and not may(("n", ">", 5))
    assert not may(("p", "=", "b"), ("n", "<", 1))
    assert not may(("p", "is_null", None)) and may(("p", "is_not_null", None))
    keeps = PartitionFilter(Predicate.of({"p": "b"}), ["p", "n"], TYPES)
    assert keeps.keeps(_p("b", 9), 3) and not keeps.keeps(_p("c", 9), 3)


def test_a_nan_partition_value_never_prunes_a_manifest_that_holds_it() -> None:
    """NaN is unordered: statistics with a NaN bound (a Java writer orders NaN last; ours depended on the set's
    order) hold nothing by comparison, so a range test over them must answer 'maybe', and a NaN wanted value too.
    Pruned, a writer restored no sequence numbers for the NaN partition and a compaction's conflict check lost its
    files."""
    doubles = [parse_type("DOUBLE")]
    nan, one, two = (serialize_row([v], doubles) for v in (float("nan"), 1.0, 2.0))
    poisoned = SimpleStats(nan, nan, (0,))
    for wanted in (one, nan):
        assert BucketFilter([(wanted, 0)], doubles).may_hold(poisoned, 0, 0, 3)
    assert PartitionFilter(Predicate.of({"p": 1.0}), ["p"], doubles).may_hold(poisoned, 0, 0, 3)
    # our own statistics leave NaN out of the range, and never prune it
    for order in ([nan, one, two], [two, one, nan], [one, nan, two]):
        stats = partition_stats(order, doubles)
        assert (stats.min_values, stats.max_values) == (one, two)
        assert BucketFilter([(nan, 0)], doubles).may_hold(stats, 0, 0, 3)
        assert BucketFilter([(one, 0)], doubles).may_hold(stats, 0, 0, 3)
