"""What the fault harness verifies after each round, once the cluster is quiet."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reachability import referenced_files
from lsmlake.errors import NotFoundError
from lsmlake.format.schema import SEQUENCE_NUMBER
from lsmlake.ingest.kafka_offsets import OFFSET_PROPERTY, topic_id_key
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.support.faults.order_load import Change

# files in these folders are not reached through snapshots and orphan cleanup keeps them
KEPT_DIRS = ("schema/", "tag/", "consumer/", "branch/", "changelog/", "statistics/")


@dataclass
class Findings:
    """Counts and problems of one round's checks; a round passes when `problems` is empty."""

    lost: int = 0
    duplicates: int = 0
    unknown_landed: int = 0
    problems: list[str] = field(default_factory=list)
    order: OrderFindings | None = None  # what the check of db.g_order found


@dataclass
class OrderFindings:
    """The check of the table every path writes (`check_order`); all counts but the first two must be 0."""

    acked: int = 0  # changes acknowledged so far
    file_rows: int = 0  # rows of the data files whose sequence numbers were compared
    lost: int = 0  # keys read back absent whose last acknowledged change is an upsert
    duplicated: int = 0  # rows of a key beyond its first, in lsmlake's read
    out_of_order: int = 0  # keys read back with an older version than their last acknowledged change
    never_sent: int = 0  # keys read back with a version that was not sent as an upsert (or not yet sent)
    inverted: int = 0  # in the data files: a key's later version under a smaller sequence number
    shared_numbers: int = 0  # in the data files: two versions of a key under one sequence number


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


def check_pypaimon(found: Findings, warehouse: Path, table_id: str, columns: list[str], key: str = "id") -> None:
    ours = read(warehouse, table_id).select(columns).sort_by(key)
    theirs = pypaimon_read(str(warehouse), table_id).select(columns).sort_by(key)
    if not theirs.cast(ours.schema).equals(ours):
        found.problems.append(f"{table_id}: pypaimon reads {theirs.num_rows} rows, we read {ours.num_rows}; "
                              "they differ")


def check_order(found: Findings, warehouse: Path, table_id: str, last: dict[int, Change],
                upserts: dict[int, set[int]]) -> OrderFindings:
    """The table every path writes, once every change sent was acknowledged (see `order_load.py`).

    1. The read: each key holds its last acknowledged change (absent after a delete); an older version is
       out of order, a version never sent as an upsert is a phantom, an absent upsert is lost.
    2. The data files of every retained snapshot (before their rows are merged away): ordered by
       sequence number, a key's versions never go down, and no sequence number carries two versions.
       A resent change may land twice, as the same version under two numbers.
    """
    out = OrderFindings()
    got: dict[int, list[int]] = {}
    for r in read(warehouse, table_id).select(["k", "ver"]).to_pylist():
        got.setdefault(r["k"], []).append(r["ver"])
    out.duplicated = sum(len(v) - 1 for v in got.values())
    examples: list[str] = []
    for k in sorted(last.keys() | got.keys()):
        change, vers = last.get(k), got.get(k)
        if vers is None:
            if change is not None and not change.delete:
                out.lost += 1
                examples.append(f"key {k} is missing, its last acknowledged change is {change}")
            continue
        ver = vers[-1]
        if change is not None and ver < change.ver:
            out.out_of_order += 1
            examples.append(f"key {k} reads version {ver}, its last acknowledged change is {change}")
        elif change is None or ver > change.ver or ver not in upserts.get(k, ()):
            out.never_sent += 1
            examples.append(f"key {k} reads version {ver}, which was never upserted; last acknowledged: {change}")
    rows = file_versions(warehouse, table_id)
    out.file_rows = rows.num_rows
    out.inverted, out.shared_numbers, inverted = _inversions(rows)
    examples += inverted
    found.lost += out.lost
    found.duplicates += out.duplicated
    if out.lost or out.duplicated or out.out_of_order or out.never_sent or out.inverted or out.shared_numbers:
        found.problems.append(
            f"{table_id}: {out.lost} lost, {out.duplicated} duplicated, {out.out_of_order} out of order, "
            f"{out.never_sent} never sent; in the files {out.inverted} versions inverted, {out.shared_numbers} "
            f"sequence numbers shared; e.g. {examples[:4]}")
    found.order = out
    return out


def file_versions(warehouse: Path, table_id: str) -> pa.Table:
    """(key `k`, `_SEQUENCE_NUMBER`, `ver`) of every row in the data files a retained snapshot references,
    each distinct triple once (a compaction copies rows into new files with their numbers)."""
    table, paths = _referenced(warehouse, table_id)
    data = sorted(p for p in paths if "/bucket-" in p and p.endswith(".parquet"))
    parts = []
    for p in data:
        try:
            f = table.io.open_input(p)
        except (NotFoundError, FileNotFoundError):  # expired with its snapshots since the look
            continue
        try:
            parts.append(pq.read_table(f, columns=["_KEY_k", SEQUENCE_NUMBER, "ver"]))
        finally:
            f.close()
    schema = pa.schema([("_KEY_k", pa.int64()), (SEQUENCE_NUMBER, pa.int64()), ("ver", pa.int64())])
    rows = pa.concat_tables([t.cast(schema) for t in parts]) if parts else schema.empty_table()
    return rows.group_by(["_KEY_k", SEQUENCE_NUMBER, "ver"]).aggregate([]) \
        .sort_by([("_KEY_k", "ascending"), (SEQUENCE_NUMBER, "ascending"), ("ver", "ascending")])


def _inversions(rows: pa.Table) -> tuple[int, int, list[str]]:
    """(neighbours by sequence number whose version goes down, sequence numbers on two versions, examples)."""
    if rows.num_rows < 2:
        return 0, 0, []
    k = rows.column("_KEY_k").to_numpy()
    seq = rows.column(SEQUENCE_NUMBER).to_numpy()
    ver = rows.column("ver").to_numpy()
    same_key = k[1:] == k[:-1]
    shared = same_key & (seq[1:] == seq[:-1])
    inverted = same_key & (seq[1:] > seq[:-1]) & (ver[1:] < ver[:-1])
    examples = [f"key {k[i]}: version {ver[i]} has sequence number {seq[i]}, version {ver[i + 1]} has "
                f"{seq[i + 1]}" for i in np.flatnonzero(inverted | shared)[:3]]
    return int(inverted.sum()), int(shared.sum()), examples


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
