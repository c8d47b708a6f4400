"""What the fault harness verifies after each round, once the cluster is quiet."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from lsmlake.catalog import FileSystemCatalog
from lsmlake.errors import NotFoundError
from lsmlake.expire import referenced_files
from lsmlake.writer_svc.kafka_ingest import OFFSET_PROPERTY, topic_id_key

from ..test_interop_pypaimon import pypaimon_read

# files in these folders are not reached through snapshots and orphan cleanup keeps them
KEPT_DIRS = ("schema/", "tag/", "consumer/", "branch/", "changelog/", "statistics/")


@dataclass
class Findings:
    """Counts and problems of one round's checks; a round passes when `problems` is empty."""

    lost: int = 0
    duplicates: int = 0
    unknown_landed: int = 0
    problems: list[str] = field(default_factory=list)


def read(warehouse: Path, table_id: str) -> pa.Table:
    return FileSystemCatalog(str(warehouse)).get_table(table_id).to_arrow()


def check_counts(found: Findings, what: str, got: dict[int, int], expected: dict[int, int],
                 unknown: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    """Each key must read back its expected count; a key of unknown outcome may add 0 or 1."""
    lost = dup = 0
    for k, n in expected.items():
        g = got.get(k, 0)
        lost += max(0, n - g)
        dup += max(0, g - n)
    for k, g in got.items():
        if k in expected:
            continue
        if k in unknown and g == 1:
            found.unknown_landed += 1
        else:
            dup += g
    found.lost += lost
    found.duplicates += dup
    if lost or dup:
        found.problems.append(f"{what}: {lost} lost, {dup} duplicated")


def check_equal(found: Findings, what: str, got: dict[int, tuple], expected: dict[int, tuple]) -> None:
    if got != expected:
        missing = expected.keys() - got.keys()
        extra = got.keys() - expected.keys()
        wrong = sum(1 for k in expected.keys() & got.keys() if got[k] != expected[k])
        found.problems.append(f"{what}: differs from the model ({len(missing)} missing, {len(extra)} extra, "
                              f"{wrong} different; e.g. {sorted(missing)[:3]} {sorted(extra)[:3]})")


def check_pypaimon(found: Findings, warehouse: Path, table_id: str, columns: list[str]) -> None:
    ours = read(warehouse, table_id).select(columns).sort_by("id")
    theirs = pypaimon_read(str(warehouse), table_id).select(columns).sort_by("id")
    if not theirs.cast(ours.schema).equals(ours):
        found.problems.append(f"{table_id}: pypaimon reads {theirs.num_rows} rows, we read {ours.num_rows}; "
                              "they differ")


def _referenced(warehouse: Path, table_id: str) -> tuple[Any, set[str]]:
    """The table and every path its retained snapshots reach; read again when a snapshot expires meanwhile
    (the catalog expires snapshots on its schedule, also while the checks run)."""
    for attempt in range(5):
        table = FileSystemCatalog(str(warehouse)).get_table(table_id)
        try:
            return table, referenced_files(table, table.snapshots.snapshots())
        except (OSError, NotFoundError):  # a snapshot or manifest expired while being read
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def check_files(found: Findings, warehouse: Path, table_id: str) -> None:
    """Every file a retained snapshot references exists. A file is missing only if a snapshot that is
    still retained after the look references it (expiration deletes a snapshot and then its files)."""
    table, keep = _referenced(warehouse, table_id)
    missing = [p for p in keep if not table.io.exists(p)]
    if missing:
        _, still = _referenced(warehouse, table_id)
        missing = [p for p in missing if p in still and not table.io.exists(p)]
    if missing:
        found.problems.append(f"{table_id}: {len(missing)} referenced files are missing, e.g. {missing[:2]}")


def check_no_orphans(found: Findings, warehouse: Path, table_id: str) -> None:
    """After orphan cleanup, no file outside a retained snapshot is left in the table folder (a file of a
    snapshot expiring meanwhile counts only if it is still there once expiration is done with it)."""
    table, keep = _referenced(warehouse, table_id)
    left = []
    for info in table.io.list(table.path, recursive=True):
        if info.is_dir:
            continue
        rel = info.path[len(table.path) + 1:]
        if rel.startswith(KEPT_DIRS) or rel in ("snapshot/LATEST", "snapshot/EARLIEST") or info.path in keep:
            continue
        left.append(info.path)
    if left:
        time.sleep(2.0)  # an expiration in progress deletes the files of the snapshots it removed
        _, keep = _referenced(warehouse, table_id)
        left = [p for p in left if p not in keep and table.io.exists(p)]
    if left:
        found.problems.append(f"{table_id}: {len(left)} unreferenced files survived orphan cleanup, e.g. {left[:3]}")


def offsets_under(warehouse: Path, table_id: str, topic: str, topic_id: str) -> dict[int, int]:
    """The newest offsets the table's snapshots record for `topic` while its id was `topic_id`."""
    snapshots = FileSystemCatalog(str(warehouse)).get_table(table_id).snapshots
    found: dict[int, int] = {}
    prefix = f"{OFFSET_PROPERTY}{topic}."
    for s in reversed(snapshots.snapshots()):
        props = s.properties or {}
        if props.get(topic_id_key(topic)) != topic_id:
            continue
        for k, v in props.items():
            if k.startswith(prefix):
                found.setdefault(int(k[len(prefix):]), int(v))
    return found


def recorded_ids(warehouse: Path, table_id: str, topic: str) -> set[str]:
    snapshots = FileSystemCatalog(str(warehouse)).get_table(table_id).snapshots
    return {s.properties[topic_id_key(topic)] for s in snapshots.snapshots()
            if s.properties and topic_id_key(topic) in s.properties}
