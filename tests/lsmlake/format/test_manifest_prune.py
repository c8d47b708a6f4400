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
