"""Manifest pruning by a predicate tree: a manifest is opened when any branch of an OR may match in it."""

from __future__ import annotations

from lsmlake.format.binary_row import serialize_row
from lsmlake.format.manifest import partition_stats
from lsmlake.format.manifest_prune import PartitionFilter
from lsmlake.format.predicate import Or, Predicate, Spec
from lsmlake.format.types import parse_type

TYPES = [parse_type("STRING"), parse_type("INT")]
STATS = partition_stats([serialize_row(["a", 1], TYPES), serialize_row(["c", 5], TYPES)], TYPES)


def _may(spec: Spec) -> bool:
    return PartitionFilter(Predicate.of(spec), ["p", "n"], TYPES).may_hold(STATS, 0, 0, 2)


def test_a_manifest_is_opened_when_some_branch_may_match() -> None:
    assert _may(Or(("p", "=", "z"), ("n", "=", 3)))
    assert not _may(Or(("p", "=", "z"), ("n", "=", 9)))
    assert not _may(Or(("p", "=", "z"), ("p", "=", "b") & Predicate.of([("n", ">", 5)])))
    assert _may(Or(("p", "=", "z"), ("other", "=", 1)))  # a branch on no partition column: anything may match


def test_partitions_are_kept_by_the_whole_tree() -> None:
    keeps = PartitionFilter(Or(("p", "=", "b"), ("n", ">", 4)), ["p", "n"], TYPES)
    assert keeps.keeps_partition(serialize_row(["b", 0], TYPES))
    assert keeps.keeps_partition(serialize_row(["x", 5], TYPES))
    assert not keeps.keeps_partition(serialize_row(["x", 4], TYPES))
    assert not keeps.keeps_partition(serialize_row([None, None], TYPES))
