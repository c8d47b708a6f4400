"""The score's bands and ramps (`lsmlake.catalog.health_score`)."""

from __future__ import annotations

import pytest

from lsmlake.catalog.health_score import WEIGHTS, band, penalties, ramp, score_of


@pytest.mark.parametrize(("score", "stalled", "error", "expected"), [
    (100, False, None, "good"), (80, False, None, "good"), (79, False, None, "warning"),
    (50, False, None, "warning"), (49, False, None, "bad"), (0, False, None, "bad"),
    (100, True, None, "bad"), (100, False, "manifest gone", "bad")])
def test_bands(score: int, stalled: bool, error: str | None, expected: str) -> None:
    assert band(score, stalled, error) == expected


def test_ramp_starts_after_its_start_and_is_full_at_its_end() -> None:
    assert [ramp(v, 5, 8) for v in (0, 5, 6, 8, 20)] == [0.0, 0.0, pytest.approx(1 / 3), 1.0, 1.0]
    assert [ramp(v, 3, 3) for v in (3, 4)] == [0.0, 1.0]  # no room between start and end: a step


def test_penalties_are_capped_at_their_weights_and_a_stalled_table_is_at_most_49() -> None:
    p = penalties({"runs": 2.0, "lag": 0.5, "deleted": -1.0})
    assert p == {"runs": WEIGHTS["runs"], "lag": WEIGHTS["lag"] / 2, "deleted": 0.0}
    assert score_of(p, stalled=False) == round(100 - 40 - 15)
    assert score_of({}, stalled=True) == 49 and score_of({}, stalled=False) == 100
