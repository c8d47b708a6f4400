"""The health score of a table, its colour band and the reasons it lost points (docs/operating-tables.md).

The score is 100 minus penalties, each capped at its weight; a penalty counts only what compaction would change:

| cause | primary-key tables | append tables | no penalty | full penalty at |
|---|---|---|---|---|
| runs: sorted runs of the worst bucket | 40 | - | up to `num-sorted-run.compaction-trigger` | the stop trigger |
| files: small files of the worst append bucket | - | 40 | below `compaction.min.file-num` | `compaction.max.file-num` |
| lag: how long a due compaction has waited | 30 | 30 | nothing due | 15 minutes |
| small_files: files a compaction would not leave / files | 15 | - | none | all |
| deleted: rows deletion vectors mark / rows | 15 | 15 | up to the delete ratio (*) | half the rows (**) |

(*) `compaction.delete-ratio-threshold`, 0.2 by default; (**) or twice that ratio when it is higher.

A stalled table (writers wait) scores at most 49; a table that cannot be read, or that lsmlake does not compact,
scores 0. Bands, for a UI to colour: `good` (80 and above), `warning` (50 to 79), `bad` (below 50).
"""

from __future__ import annotations

from dataclasses import dataclass

LAG_FULL_PENALTY_MS = 15 * 60_000
DELETED_FULL_PENALTY = 0.5
WEIGHTS = {"runs": 40.0, "files": 40.0, "lag": 30.0, "small_files": 15.0, "deleted": 15.0}
GOOD, WARNING, BAD = "good", "warning", "bad"
GOOD_FROM, WARNING_FROM = 80, 50
STALLED_AT_MOST = WARNING_FROM - 1
#: a penalty below this is not worth a reason (a few deleted rows, a minute of lag)
REASON_FROM_POINTS = 1.0


def band(score: int, stalled: bool = False, error: str | None = None) -> str:
    """The colour band of a score; a stalled or failing table is `bad` whatever its score."""
    if error is not None or stalled or score < WARNING_FROM:
        return BAD
    return GOOD if score >= GOOD_FROM else WARNING


def ramp(value: float, start: float, full: float) -> float:
    """0 up to `start`, 1 from `full`, linear between (1 past `start` when `full` is not above it)."""
    if value <= start:
        return 0.0
    if full <= start:
        return 1.0
    return min(1.0, (value - start) / (full - start))


def penalties(shares: dict[str, float]) -> dict[str, float]:
    """Each cause's share (0..1 and more) times its weight, capped at the weight."""
    return {k: WEIGHTS[k] * min(1.0, max(0.0, v)) for k, v in shares.items()}


def score_of(points: dict[str, float], stalled: bool) -> int:
    s = round(100 - sum(points.values()))
    return min(s, STALLED_AT_MOST) if stalled else s


@dataclass(frozen=True)
class Reason:
    """Why a table lost points: a cause (`error`, `stalled`, or a penalty's key) and a sentence for people."""

    cause: str
    detail: str

    def __str__(self) -> str:
        return f"{self.cause}: {self.detail}"
