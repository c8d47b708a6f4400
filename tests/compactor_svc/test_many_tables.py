"""Twenty tables with skewed write rates through one compactor (real processes: catalog_svc, compactor_svc on Spark
local[2], the embedded Kafka broker).

- Before the compactor starts, every table has level-0 files and one, `t19` (last by name, never served), has
  its writers stalled (sorted runs past its stop trigger: one commit more than it): the compactor's first plan is
  `t19`'s.
- Then each table commits at its own rate for a while, from twice a second (`t00`, `t01`) to a few times in
  all (`t19`), through the catalog's Commit as any Paimon engine would. The tables have deletion vectors, so
  every level-0 file is due at once and a table's compaction lag (the age of its oldest level-0 file, from
  `ListTableHealth`) is how stale its readers are.
- Every table's worst lag stays within two rounds of the fair queue: 2 x tables x the longest plan, plus the
  time an event takes to arrive. The bound is in plan durations measured in the same run, so a slow machine
  loosens it instead of failing it. Afterwards every table drains to no level-0 file and reads as its model.

The figures are printed (`pytest -s`) and recorded in docs/operating-tables.md. With `LSMLAKE_SCREENSHOT_DIR`
set, the console is photographed in the middle of the load (the README's pictures).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.convert import changes_to_proto

pytestmark = pytest.mark.integration

S = catalog_pb2.CompactionPlanState
TABLES = 20
STALLED = "t19"
STALLED_TRIGGER = 3
# ticks of 0.5 s between two commits of each table: two tables every tick, the last one a few times in all
PERIODS = [1, 1, 2, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100]
TICK_S = 0.5
LOAD_S = 30.0 if os.environ.get("CI") else 60.0
ROWS = 200  # per commit; keys drawn from 0..KEYS so that commits update and delete each other's rows
KEYS = 3_000
EVENT_SLACK_S = 20.0  # an event's way through Kafka, the planning tick, a reconcile pass
DRAIN_S = 600.0  # a bounded wait for the backlog to drain after the load


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


class Loader:
    """Commits rows to the tables through the catalog's Commit, keeping each table's model."""

    def __init__(self, stub: Any, warehouse: Path) -> None:
        self.stub = stub
        self.catalog = FileSystemCatalog(str(warehouse))
        self.models: dict[str, dict[int, int | None]] = {}
        self.commits: dict[str, int] = {}
        self.rng = random.Random(23)

    def create(self, name: str, options: dict[str, str]) -> None:
        self.stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
        self.stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=common_pb2.TableIdentifier(database="db", table=name),
            columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                     catalog_pb2.Column(name="v", type="BIGINT")],
            primary_keys=["id"], options={"bucket": "2", "deletion-vectors.enabled": "true", **options}), timeout=30)
        self.models[name] = {}
        self.commits[name] = 0

    def commit(self, name: str) -> None:
        n = self.commits[name] + 1
        ids = self.rng.sample(range(KEYS), ROWS)
        deletes = set(self.rng.sample(ids, ROWS // 10))
        kinds = [3 if i in deletes else 0 for i in ids]  # -D for a tenth of the keys
        w = self.catalog.get_table(f"db.{name}").new_write()
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([n] * ROWS, pa.int64()),
                          ROW_KIND_COLUMN: pa.array(kinds, pa.int8())}))
        self.stub.Commit(catalog_pb2.CommitRequest(
            table=common_pb2.TableIdentifier(database="db", table=name), commit_user=f"loader-{name}",
            commit_identifier=n, kind=common_pb2.COMMIT_KIND_APPEND,
            changes=[changes_to_proto(m) for m in w.prepare_commit()]), timeout=60)
        self.commits[name] = n
        model = self.models[name]
        for i, k in zip(ids, kinds, strict=True):
            model[i] = None if k == 3 else n

    def expected(self, name: str) -> list[tuple[int, int]]:
        return sorted((k, v) for k, v in self.models[name].items() if v is not None)


class Watch:
    """Every table's worst compaction lag and sorted runs, from the catalog's ListTableHealth once a second."""

    def __init__(self, stub: Any) -> None:
        self.stub = stub
        self.max_lag_s: dict[str, float] = {}
        self.max_runs: dict[str, int] = {}
        self.last: dict[str, catalog_pb2.TableHealth] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-watch")

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def look(self) -> dict[str, catalog_pb2.TableHealth]:
        reply = self.stub.ListTableHealth(catalog_pb2.ListTableHealthRequest(database="db"), timeout=60)
        now = {h.table.table: h for h in reply.tables}
        for name, h in now.items():
            self.max_lag_s[name] = max(self.max_lag_s.get(name, 0.0), h.lag_ms / 1000)
            self.max_runs[name] = max(self.max_runs.get(name, 0), h.max_sorted_runs)
        self.last = now
        return now

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.look()
            except BaseException as e:  # reported by the test
                self.errors.append(e)
                return
            self._stop.wait(1.0)


def _plans(stub: Any, name: str, states: list[int] | None = None) -> list[catalog_pb2.CompactionPlan]:
    return list(stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
        table=common_pb2.TableIdentifier(database="db", table=name), states=states or []), timeout=30).plans)


def _drain(watch: Watch, compactor: procs.Service) -> None:
    """Wait (bounded) until no table keeps a level-0 file."""
    deadline = time.monotonic() + DRAIN_S
    while any(h.level0_files for h in watch.look().values()):
        assert time.monotonic() < deadline, (
            f"not drained: {[(n, h.level0_files) for n, h in watch.last.items() if h.level0_files]}\n"
            f"{compactor.tail()}")
        time.sleep(1.0)


def _photograph(ui_port: int, out: Path, busiest: str, profile: Path) -> None:
    from tests.support.browser import headless_chromium, screenshot

    with headless_chromium(profile) as driver:
        driver.get(f"http://127.0.0.1:{ui_port}/")
        screenshot(driver, out / "console-tables.png")
        driver.get(f"http://127.0.0.1:{ui_port}/table/db/{busiest}")
        screenshot(driver, out / "console-table.png")


def test_twenty_skewed_tables_through_one_compactor(broker: EmbeddedBroker, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    ui_port = free_port()
    cat = procs.catalog(warehouse, broker.bootstrap, "--ui-port", str(ui_port), "--health-interval", "2")
    services = [cat]
    try:
        stub = catalog_pb2_grpc.CatalogServiceStub(cat.channel)
        loader = Loader(stub, warehouse)
        names = [f"t{i:02d}" for i in range(TABLES)]
        for name in names:
            loader.create(name, {"num-sorted-run.stop-trigger": str(STALLED_TRIGGER)} if name == STALLED else {})
        for name in names:  # a backlog everywhere; the stalled table one sorted run past its stop trigger
            for _ in range(STALLED_TRIGGER + 1 if name == STALLED else 1):
                loader.commit(name)
        watch = Watch(stub)
        assert watch.look()[STALLED].stalled

        compactor = procs.compactor(warehouse, cat.port, broker.bootstrap, "--reconcile-interval", "5")
        services.append(compactor)
        deadline = time.monotonic() + 300
        while not (first := [p for n in names for p in _plans(stub, n)]):
            assert time.monotonic() < deadline, f"no plan: {compactor.tail()}"
            time.sleep(0.2)
        first_table = min(first, key=lambda p: (p.requested_at_ms, p.plan_id)).table.table
        assert first_table == STALLED, f"the first plan was {first_table}'s, not the stalled table's"

        _drain(watch, compactor)  # the backlog of before the start: its age is the compactor's start-up
        watch.max_lag_s.clear()
        watch.max_runs.clear()
        shots = os.environ.get("LSMLAKE_SCREENSHOT_DIR")
        with watch:
            start = time.monotonic()
            tick = 0
            while (elapsed := time.monotonic() - start) < LOAD_S:
                for name, period in zip(names, PERIODS, strict=True):
                    if tick % period == 0:
                        loader.commit(name)
                if shots and tick == int(LOAD_S / TICK_S * 2 / 3):
                    _photograph(ui_port, Path(shots), names[0], tmp_path / "chromium-profile")
                tick += 1
                time.sleep(max(0.0, tick * TICK_S - (time.monotonic() - start)))
            load_s = elapsed
            _drain(watch, compactor)
            drained_s = time.monotonic() - start - load_s
        assert not watch.errors, f"{watch.errors[0]!r}"

        completed = {n: _plans(stub, n, [S.COMPACTION_PLAN_STATE_COMPLETED]) for n in names}
        durations = sorted((p.finished_at_ms - p.started_at_ms) / 1000 for ps in completed.values() for p in ps)
        longest = durations[-1]
        bound = 2 * TABLES * longest + EVENT_SLACK_S
        print(f"\n{TABLES} tables, {load_s:.0f} s of load, {sum(loader.commits.values())} commits, "
              f"{len(durations)} plans (median {durations[len(durations) // 2]:.1f} s, longest {longest:.1f} s); "
              f"drained {drained_s:.0f} s after the load; lag bound {bound:.0f} s")
        print("table  commits/s  commits  plans  worst lag s  worst runs")
        for name in names:
            print(f"{name}  {loader.commits[name] / load_s:9.2f}  {loader.commits[name]:7d}  {len(completed[name]):5d}"
                  f"  {watch.max_lag_s.get(name, 0.0):11.1f}  {watch.max_runs.get(name, 0):10d}")
        late = {n: round(watch.max_lag_s[n], 1) for n in names if watch.max_lag_s.get(n, 0.0) > bound}
        assert not late, f"lag beyond {bound:.0f} s: {late}"
        assert all(completed[n] for n in names), "a table was never compacted"

        for name in names:  # every table reads as its model
            got = FileSystemCatalog(str(warehouse)).get_table(f"db.{name}").to_arrow().sort_by("id")
            assert list(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True)) == \
                loader.expected(name), name
        assert compactor.stop() == 0, compactor.tail()
    finally:
        for s in reversed(services):
            s.stop()
