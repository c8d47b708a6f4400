"""No acknowledged change is lost, duplicated or undone by concurrent commits, on a local disk and on S3.

Each seeded round makes a fresh table of one kind (`concurrency_model`), runs three committers on it at once (two
threads and one worker process), and checks that the table equals the model of the acknowledged operations in
snapshot order: read by lsmlake, again after a full compaction, and by pypaimon; that no snapshot id
was acknowledged twice; and that every snapshot the committers acknowledged is there with their commit kind.
`LSMLAKE_MODEL_ROUNDS` sets the rounds per storage (a longer run: 2000), `LSMLAKE_MODEL_FIRST_SEED` the first seed.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table
from tests.support.concurrency_model import KINDS, Outcome, create_table, replay, run_committer
from tests.support.s3_server import pypaimon_options

ROUNDS = int(os.environ.get("LSMLAKE_MODEL_ROUNDS", "200"))
FIRST_SEED = int(os.environ.get("LSMLAKE_MODEL_FIRST_SEED", "0"))  # a longer run can go on where another stopped
#: operations per committer and round: fewer on S3, where the local server takes ~40 ms a request
OPS_LOCAL, OPS_S3 = 4, 2


@pytest.fixture(scope="module")
def worker() -> Iterator[ProcessPoolExecutor]:
    """One worker process for the rounds' process committers (started once: a spawn costs seconds)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _pypaimon_rows(options: dict[str, str]) -> Any:
    from pypaimon import CatalogFactory

    from tests.support.pypaimon_io import read

    return read(CatalogFactory.create(options).get_table("db.t"))


def play_round(warehouse: str, seed: int, worker: ProcessPoolExecutor, ops: int,
               pypaimon: dict[str, str]) -> dict[str, int]:
    """`pypaimon`: the catalog options with which pypaimon opens the warehouse."""
    """One round (see the module); counts of acknowledged and refused operations."""
    kind = KINDS[seed % len(KINDS)]
    catalog = FileSystemCatalog(warehouse)
    create_table(catalog, kind)
    remote: Future[list[Outcome]] = worker.submit(run_committer, warehouse, kind, 2, seed, ops)
    local: list[list[Outcome]] = [[], []]
    errors: list[BaseException] = []

    def committer(i: int) -> None:
        try:
            local[i] = run_committer(warehouse, kind, i, seed, ops)
        except BaseException as e:  # raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=committer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    outcomes = local[0] + local[1] + remote.result(timeout=300)
    if errors:
        raise errors[0]
    model = replay(kind, outcomes)
    table = catalog.get_table("db.t")
    for o in outcomes:
        if o.snapshot_id is not None:
            assert table.snapshots.snapshot(o.snapshot_id).commit_kind == o.kind, f"seed {seed}: {o}"
    if kind != "pk":  # a deletion-vector primary-key table shows level 0 only once it is compacted
        assert model.table_rows(table.to_arrow()) == model.rows, f"seed {seed} ({kind}): lsmlake's read"
    compact_table(table, full=True)
    table = catalog.get_table("db.t")
    assert model.table_rows(table.to_arrow()) == model.rows, f"seed {seed} ({kind}): after a full compaction"
    assert model.table_rows(_pypaimon_rows(pypaimon)) == model.rows, f"seed {seed} ({kind}): pypaimon's read"
    acked = sum(o.snapshot_id is not None for o in outcomes)
    return {"acknowledged": acked, "refused": sum(o.error is not None for o in outcomes)}


def test_concurrent_commits_equal_the_model_on_a_local_disk(tmp_path, worker) -> None:
    totals = {"acknowledged": 0, "refused": 0}
    for seed in range(FIRST_SEED, FIRST_SEED + ROUNDS):
        warehouse = str(tmp_path / f"wh{seed}")
        for k, v in play_round(warehouse, seed, worker, OPS_LOCAL, {"warehouse": warehouse}).items():
            totals[k] += v
    print(f"local disk: {ROUNDS} rounds, {totals}")
    assert totals["acknowledged"] > totals["refused"]


def test_concurrent_commits_equal_the_model_on_s3(s3_server, worker) -> None:
    totals = {"acknowledged": 0, "refused": 0}
    for seed in range(FIRST_SEED, FIRST_SEED + ROUNDS):
        warehouse = s3_server.warehouse()
        options = pypaimon_options(warehouse, s3_server.endpoint)
        for k, v in play_round(warehouse, seed, worker, OPS_S3, options).items():
            totals[k] += v
    print(f"S3: {ROUNDS} rounds, {totals}")
    assert totals["acknowledged"] > totals["refused"]
