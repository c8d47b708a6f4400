"""Lag is measured on the same clock as `now`, whatever the machine's time zone, and a gentle lookup table's level 0
is due only when the compactor service would compact it (regression tests of two review findings)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.health import table_health
from lsmlake.table.file_store_table import FileStoreTable

MINUTE_MS = 60_000


@pytest.fixture
def zone() -> Iterator[None]:
    before = os.environ.get("TZ")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def _table(root: Path, **options: str) -> FileStoreTable:
    cat = FileSystemCatalog(str(root))
    cat.create_database("db", ignore_if_exists=True)
    cat.create_table("db.t", "id INT NOT NULL, v STRING", primary_keys=["id"],
                     options={"bucket": "1", "write-only": "true", **options})
    t = cat.get_table("db.t")
    t.write_arrow(pa.table({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}))
    return cat.get_table("db.t")


@pytest.mark.parametrize("tz", ["UTC", "America/Los_Angeles", "Asia/Tokyo"])
@pytest.mark.usefixtures("zone")
def test_lag_is_the_same_in_every_time_zone(tmp_path: Path, tz: str) -> None:
    os.environ["TZ"] = tz
    time.tzset()
    # a first-row table's level-0 file is due at once (it must move up before readers see it)
    t = _table(tmp_path, **{"merge-engine": "first-row"})
    written_ms = int(time.time() * 1000)
    h = table_health(t, [], written_ms + MINUTE_MS)
    assert h.due_buckets == 1
    assert MINUTE_MS - 5_000 <= h.lag_ms <= MINUTE_MS + 5_000, (tz, h.lag_ms)


def test_a_gentle_lookup_tables_level0_waits_as_the_compactor_lets_it(tmp_path: Path) -> None:
    gentle = _table(tmp_path / "gentle", **{"changelog-producer": "lookup", "lookup-compact": "gentle"})
    h = table_health(gentle, [], int(time.time() * 1000) + 60 * MINUTE_MS)
    assert (h.due_buckets, h.lag_ms) == (0, 0)
    radical = _table(tmp_path / "radical", **{"changelog-producer": "lookup"})
    h = table_health(radical, [], int(time.time() * 1000) + 60 * MINUTE_MS)
    assert h.due_buckets == 1 and h.lag_ms >= 59 * MINUTE_MS
