"""When a bucket is due for a full compaction, in the style of Hudi's compaction schedule triggers.

NUM_COMMITS: after `delta_commits` commits to the bucket since its last full compaction;
TIME_ELAPSED: after `delta_seconds`; NUM_AND_TIME: both; NUM_OR_TIME: either. NONE leaves full
compactions to the table's own options (`full-compaction.delta-commits`, universal compaction's
`compaction.optimization-interval`), which the compaction engine applies on every plan anyway.

The counts live in the compactor that owns the bucket and start over when ownership moves (a new owner
counts from the moment it took the bucket), so a rebalance can only delay a full compaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from lsmlake.errors import InvalidInputError

STRATEGIES = ("NONE", "NUM_COMMITS", "TIME_ELAPSED", "NUM_AND_TIME", "NUM_OR_TIME")


@dataclass(frozen=True)
class FullCompactionTrigger:
    strategy: str = "NONE"
    delta_commits: int = 5
    delta_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise InvalidInputError(f"full compaction trigger {self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        if self.delta_commits < 1 or self.delta_seconds <= 0:
            raise InvalidInputError("full compaction trigger: delta commits and delta seconds must be positive")

    def due(self, commits: int, seconds: float) -> bool:
        """Whether a bucket with `commits` commits and `seconds` since its last full compaction is due."""
        by_num = commits >= self.delta_commits
        by_time = seconds >= self.delta_seconds
        return {"NONE": False, "NUM_COMMITS": by_num, "TIME_ELAPSED": by_time, "NUM_AND_TIME": by_num and by_time,
                "NUM_OR_TIME": by_num or by_time}[self.strategy]
