"""No acknowledged change is undone by a concurrent commit, through the real services (issue 30).

Real processes on loopback ports: catalog_svc (gRPC and `--rest-port`), writer_svc, compactor_svc (Spark
local[2]) and the embedded Kafka broker; `lake delete` runs as a subprocess of the CLI's entry point against the
warehouse folder; pypaimon 2.1.0 commits through the catalog's REST API. The compactor compacts what the
catalog's events announce, with table options that make it compact often.

1. An append table with deletion vectors (bucket -1): two threads write through the writer service and one
   through pypaimon while `lake delete --where g=<x>` deletes groups, round after round. No write of a group
   runs while that group is being deleted (a write takes its group under a lock; a delete takes a group no write
   holds, three writers leaving one of four free, and bars new writes of it until it returns), so every row is
   unambiguous: it is gone exactly when a delete of its group started after it was acknowledged. Every delete
   must exit 0: a conflict with a compaction or a concurrent write is redone, never handed to the user. Twice:
   partitioned by g (writes of other groups land in other partitions) and unpartitioned (writes of other groups
   land beside the rows a delete marks; their files' statistics exclude its predicate, so they do not make it
   conflict).
2. A primary-key table with deletion vectors and fixed buckets: two writer-service threads and pypaimon upsert
   and delete (`rowkind.field`, so pypaimon writes -D rows too) keys of their own; the table equals the last
   acknowledged change of each key.
After the writers stop, one waited full compaction runs; then lsmlake's reader and pypaimon read the model.
A pypaimon commit that fails (its own retry loop gave up) is not acknowledged and cannot be resent safely: its
rows may be there or not (all or none), and nothing else is allowed.
"""

from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitStateUnknownError
from lsmlake.format.snapshot import COMPACT
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc
from tests.support.pypaimon_io import read, write

_log = logging.getLogger(__name__)
pytestmark = pytest.mark.integration
pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

WAIT_S = 240.0  # bounded waits for Spark jobs and commits; a loaded 2-core machine is slow
RESENDS = 5  # of a writer-service write whose outcome is unknown, with the same request id
# The CLI's entry point (`lake = lsmlake.cli.main:main`) with INFO logging, so that its redone deletes show.
LAKE = [sys.executable, "-c", "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr); "
        "from lsmlake.cli.main import main; sys.exit(main())"]
REDONE = re.compile(r"delete from \S+ conflicted .*; redone on the latest snapshot")
OFTEN = {"compaction.min.file-num": "2", "compaction.max.file-num": "4"}
# pypaimon's own commit loop (Paimon's REST protocol: a lost snapshot id is rebuilt and sent again) gives up after
# `commit.max-retries`; against a writer service group-committing every 0.2 s its default of 10 runs out. Its wait
# between tries doubles up to `commit.max-retry-wait` (10 s by default), so that a run of lost races made one write
# last minutes; capped at 1 s, it tries again as often as the table changes, and `commit.timeout` bounds a write
PYPAIMON_RETRIES = {"commit.max-retries": "100", "commit.max-retry-wait": "1 s", "commit.timeout": "120 s"}


@dataclass
class Lake:
    """The running services and clients of them."""

    warehouse: Path
    catalog: procs.Service
    writer: procs.Service
    compactor: procs.Service
    rest_options: dict[str, str]

    def client(self) -> Client:
        return Client(f"127.0.0.1:{self.catalog.port}", writer=f"127.0.0.1:{self.writer.port}",
                      compactor=f"127.0.0.1:{self.compactor.port}", warehouse=str(self.warehouse), timeout_s=60)

    def pypaimon_table(self, name: str, **options: str) -> Any:
        table = pypaimon.CatalogFactory.create(self.rest_options).get_table(f"db.{name}")
        return table.copy(options) if options else table

    def lsmlake_rows(self, name: str) -> list[dict[str, Any]]:
        t = FileSystemCatalog(str(self.warehouse)).get_table(f"db.{name}")
        return sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])

    def pypaimon_rows(self, name: str) -> list[dict[str, Any]]:
        return sorted(read(self.pypaimon_table(name)).to_pylist(), key=lambda r: r["id"])

    def snapshot_kinds(self, name: str) -> list[str]:
        t = FileSystemCatalog(str(self.warehouse)).get_table(f"db.{name}")
        return [s.commit_kind for s in t.snapshots.snapshots()]

    def plans_lost(self, name: str) -> int:
        """How many compaction plans of the table lost to a concurrent commit (and were planned again)."""
        return len(re.findall(rf"plan \d+ of db\.{name} did not commit", self.compactor.tail(1 << 24)))

    def settle(self, name: str) -> None:
        """One waited full compaction of the table, then until the compactor has nothing running or pending."""
        result = self.client().compact(f"db.{name}", full=True, wait=True, timeout_s=WAIT_S)
        # the compactor's own account of its plans says which commit each lost to
        assert result.complete, f"{result}\ncompactor log: {self.compactor.tail(20_000)}"
        stub = compactor_pb2_grpc.CompactorServiceStub(self.compactor.channel)
        deadline = time.monotonic() + WAIT_S
        while True:
            status = stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=30)
            if not status.running and status.pending_buckets == 0:
                return
            assert time.monotonic() < deadline, f"the compactor never went idle: {self.compactor.tail()}"
            time.sleep(0.5)  # polling interval, bounded by the deadline


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with EmbeddedBroker() as broker:
        warehouse = tmp_path_factory.mktemp("races") / "wh"
        rest_port = free_port()
        cat = procs.catalog(warehouse, broker.bootstrap, "--rest-port", str(rest_port))
        writer = compactor = None
        try:
            writer = procs.writer(warehouse, cat.port, "--commit-interval", "0.2")
            compactor = procs.compactor(warehouse, cat.port, broker.bootstrap)
            rest = {"metastore": "rest", "uri": f"http://127.0.0.1:{rest_port}", "warehouse": "lake",
                    "token.provider": "bear", "token": "no-token-is-checked-here"}
            out = Lake(warehouse, cat, writer, compactor, rest)
            out.client().create_database("db")
            yield out
        finally:
            for s in (compactor, writer):
                if s is not None:
                    assert s.stop() == 0, s.tail()
            assert cat.stop() == 0, cat.tail()


def _write_acknowledged(client: Client, table: str, data: pa.Table, request_id: str, **kw: Any) -> None:
    """A writer-service write, resent with its request id while its outcome is unknown: when this returns the rows
    are committed once, and when it raises nothing more of them can land later."""
    for attempt in range(RESENDS):
        try:
            client.write(table, data, request_id=request_id, **kw)
            return
        except CommitStateUnknownError:
            if attempt == RESENDS - 1:
                raise


# -- 1. deletes by predicate racing writers and the compactor ----------------------------------------------------

PYPAIMON_WRITER = 3
GROUPS = 4
DELETES = 8
MAX_DELETES = 30
ROWS_PER_WRITE = 20
WRITES_BETWEEN_DELETES = 6  # acknowledged writes (of all writers) before the next delete starts


@dataclass
class Row:
    id: int
    g: int
    v: str
    acked: int  # the event clock when it was acknowledged (or its write failed)
    maybe: bool  # its write failed: the outcome is unknown (pypaimon cannot resend a commit safely)


@dataclass
class Delete:
    g: int
    started: int  # the event clock when it started
    returncode: int = -1
    redone: int = 0
    output: str = ""


@dataclass
class Groups:
    """Which groups writers may write: a group being deleted is barred until its delete returns."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    barred: int | None = None
    in_flight: dict[int, int] = field(default_factory=dict)
    clock: int = 0
    rows: list[Row] = field(default_factory=list)
    writes: int = 0
    failed: int = 0
    stop: bool = False

    def take(self, rng: random.Random) -> int:
        with self.cond:
            g = rng.choice([x for x in range(GROUPS) if x != self.barred])
            self.in_flight[g] = self.in_flight.get(g, 0) + 1
            return g

    def release(self, g: int, rows: list[tuple[int, str]], acked: bool) -> None:
        with self.cond:
            self.clock += 1
            self.rows += [Row(i, g, v, self.clock, not acked) for i, v in rows]
            self.writes += acked
            self.failed += not acked
            self.in_flight[g] -= 1
            self.cond.notify_all()

    def bar(self, first: int) -> tuple[int, int]:
        """Bar the first group from `first` on (in turn) that no write holds, and the event clock at that moment.
        A writer holds one group at a time and there are more groups than writers, so one is always free: a delete
        never waits for a write (a pypaimon write that keeps losing races to the writer service can take minutes)."""
        order = [(first + i) % GROUPS for i in range(GROUPS)]
        with self.cond:
            g = next((x for x in order if self.in_flight.get(x, 0) == 0), None)
            assert g is not None, f"every group is held by a write: {self.in_flight}"
            self.barred = g
            self.clock += 1
            return g, self.clock

    def unbar(self) -> None:
        with self.cond:
            self.barred = None

    def wait_writes(self, count: int, errors: list[BaseException]) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.writes >= count or bool(errors), WAIT_S)
        assert ok and not errors, errors or f"fewer than {count} acknowledged writes within {WAIT_S} s"


def _lake_delete(lake: Lake, table: str, g: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAKE_WAREHOUSE": str(lake.warehouse)}
    return subprocess.run([*LAKE, "delete", table, "--where", f"g={g}"], capture_output=True, text=True, env=env,
                          timeout=WAIT_S)


@pytest.mark.parametrize("layout", ["partitioned by g", "unpartitioned"])
def test_deletes_by_predicate_race_writers_and_the_compactor(lake: Lake, layout: str) -> None:
    """`layout`: with the table partitioned by g, writes of other groups land in other partitions; unpartitioned,
    every write lands where the delete reads."""
    partitioned = layout == "partitioned by g"
    name = "events_by_g" if partitioned else "events"
    table = f"db.{name}"
    client = lake.client()
    client.create_table(table, "id BIGINT NOT NULL, g INT NOT NULL, v STRING",
                        partition_keys=["g"] if partitioned else [],
                        options={"bucket": "-1", "deletion-vectors.enabled": "true", **OFTEN})
    groups = Groups()
    errors: list[BaseException] = []
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("g", pa.int32(), nullable=False),
                        pa.field("v", pa.string())])

    def writer_loop(w: int, commit: Callable[[pa.Table, str], None]) -> None:
        rng = random.Random(w)
        n = 0
        try:
            while not groups.stop:
                g = groups.take(rng)
                ids = list(range(w * 1_000_000 + n * ROWS_PER_WRITE, w * 1_000_000 + (n + 1) * ROWS_PER_WRITE))
                vs = [f"w{w}n{n}" for _ in ids]
                acked = False
                try:
                    commit(pa.table({"id": ids, "g": [g] * len(ids), "v": vs}, schema=schema), f"{name}-w{w}-{n}")
                    acked = True
                except Exception as e:
                    if w != PYPAIMON_WRITER:  # the writer service's writes are resent until acknowledged
                        raise
                    _log.warning("pypaimon's commit failed: %s", e)
                finally:
                    groups.release(g, list(zip(ids, vs, strict=True)), acked)
                n += 1
        except BaseException as e:
            errors.append(e)
            with groups.cond:
                groups.cond.notify_all()

    def by_service(data: pa.Table, request_id: str) -> None:
        _write_acknowledged(client, table, data, request_id)

    paimon_table = lake.pypaimon_table(name, **PYPAIMON_RETRIES)

    def by_pypaimon(data: pa.Table, _: str) -> None:
        write(paimon_table, data)

    threads = [threading.Thread(target=writer_loop, args=(1, by_service)),
               threading.Thread(target=writer_loop, args=(2, by_service)),
               threading.Thread(target=writer_loop, args=(PYPAIMON_WRITER, by_pypaimon))]
    for t in threads:
        t.start()
    deletes: list[Delete] = []
    try:
        r = 0
        # at least DELETES; more (up to MAX_DELETES) until the compactor has committed while they run, so that the
        # race happens however slow a loaded machine makes the compactor's Spark jobs
        while r < DELETES or (r < MAX_DELETES and COMPACT not in lake.snapshot_kinds(name)):
            groups.wait_writes((r + 1) * WRITES_BETWEEN_DELETES, errors)
            d = Delete(*groups.bar(r % GROUPS))
            try:
                done = _lake_delete(lake, table, d.g)
            finally:
                groups.unbar()
            d.returncode, d.output = done.returncode, done.stdout + done.stderr
            d.redone = len(REDONE.findall(done.stderr))
            deletes.append(d)
            r += 1
    finally:
        groups.stop = True
        for t in threads:
            t.join(WAIT_S)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    kinds_during = lake.snapshot_kinds(name)
    lake.settle(name)
    # a delete that failed says it was not applied (a conflict is definite): the model leaves it out
    applied = [d for d in deletes if d.returncode == 0]
    live = [r for r in groups.rows if not any(d.g == r.g and d.started > r.acked for d in applied)]
    expected = [{"id": r.id, "g": r.g, "v": r.v} for r in sorted(live, key=lambda r: r.id) if not r.maybe]
    # a failed write's rows may have landed (before its failure was seen: the commit is synchronous): then all of
    # them, and only where no later delete of their group removed them
    maybe = {r.id: {"id": r.id, "g": r.g, "v": r.v} for r in live if r.maybe}
    deleted = sum(not r.maybe for r in groups.rows) - len(expected)
    by_pypaimon = sum(r.v.startswith(f"w{PYPAIMON_WRITER}n") and not r.maybe for r in groups.rows) // ROWS_PER_WRITE
    print(f"\n{layout}: {groups.writes} acknowledged writes ({sum(not r.maybe for r in groups.rows)} rows; "
          f"{by_pypaimon} by pypaimon), {groups.failed} failed pypaimon commits, {len(deletes)} deletes, "
          f"{len(applied)} exited 0 ({deleted} rows deleted), redos per delete {[d.redone for d in deletes]}, "
          f"{kinds_during.count(COMPACT)} compactions while they ran ({lake.plans_lost(name)} plans lost to a "
          f"concurrent commit and redone), {len(kinds_during)} snapshots")
    assert deleted > 0 and kinds_during.count(COMPACT) > 0 and by_pypaimon > 0, \
        f"the race never happened: the test proves nothing\ncompactor log: {lake.compactor.tail(20_000)}"
    for reader, got in (("lsmlake", lake.lsmlake_rows(name)), ("pypaimon", lake.pypaimon_rows(name))):
        assert len(got) == len({r["id"] for r in got}), f"{reader}: a row is duplicated"
        landed = [r for r in got if r["id"] in maybe]
        assert all(r == maybe[r["id"]] for r in landed), reader
        whole = {r["v"] for r in landed}  # a write's rows are all there or none (unless a delete took them)
        assert sum(r["v"] in whole for r in maybe.values()) == len(landed), f"{reader}: part of a failed write"
        _assert_rows([r for r in got if r["id"] not in maybe], expected, reader)
    failed = [d for d in deletes if d.returncode != 0]
    assert not failed, "\n".join(f"lake delete --where g={d.g} exited {d.returncode}: {d.output[-3000:]}"
                                  for d in failed)


def _assert_rows(got: list[dict[str, Any]], expected: list[dict[str, Any]], reader: str) -> None:
    if got == expected:
        return
    g = {r["id"]: r for r in got}
    e = {r["id"]: r for r in expected}
    lost = sorted(set(e) - set(g))
    back = sorted(set(g) - set(e))
    changed = sorted(i for i in set(g) & set(e) if g[i] != e[i])
    pytest.fail(f"{reader}: {len(lost)} acknowledged rows lost {lost[:10]}, {len(back)} rows that should be gone "
                f"{back[:10]}, {len(changed)} changed {changed[:10]}")


# -- 2. a primary-key table with deletion vectors ----------------------------------------------------------------

PK_ROUNDS = 40
PK_KEYS = 60  # per writer
PK_CHANGES = 15  # per write


def test_upserts_and_deletes_race_the_compactor_on_a_deletion_vector_table(lake: Lake) -> None:
    name, table = "kv", "db.kv"
    client = lake.client()
    client.create_table(table, "id BIGINT NOT NULL, op STRING, v STRING", primary_keys=["id"],
                        options={"bucket": "2", "deletion-vectors.enabled": "true", "rowkind.field": "op",
                                 "num-sorted-run.compaction-trigger": "2"})
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("op", pa.string()),
                        pa.field("v", pa.string())])
    models: dict[int, dict[int, dict[str, Any]]] = {}
    # keys of a failed pypaimon write, until their next acknowledged change: the states they may be in
    unsure: dict[int, list[dict[str, Any] | None]] = {}
    errors: list[BaseException] = []
    counts = {"writes": 0, "deletes": 0, "failed": 0}
    lock = threading.Lock()

    def writer_loop(w: int, commit: Callable[[pa.Table, str], None]) -> None:
        rng = random.Random(100 + w)
        model: dict[int, dict[str, Any]] = {}
        models[w] = model
        try:
            for n in range(PK_ROUNDS):
                keys = rng.sample(range(w * 10_000, w * 10_000 + PK_KEYS), PK_CHANGES)
                rows = []
                for k in keys:
                    if k in model and rng.random() < 0.3:
                        rows.append({"id": k, "op": "-D", "v": model[k]["v"]})
                    else:
                        rows.append({"id": k, "op": "+U" if k in model else "+I", "v": f"w{w}n{n}"})
                try:
                    commit(pa.Table.from_pylist(rows, schema=schema), f"kv-w{w}-{n}")
                except Exception as e:
                    if w != PYPAIMON_WRITER:  # the writer service's writes are resent until acknowledged
                        raise
                    _log.warning("pypaimon's commit failed: %s", e)
                    for row in rows:  # landed or not: the model keeps the state before it
                        states = unsure.setdefault(row["id"], [model.get(row["id"])])
                        states.append(None if row["op"] == "-D" else row)
                    with lock:
                        counts["failed"] += 1
                    continue
                for row in rows:  # acknowledged: the last change of each key wins (one writer owns the key)
                    unsure.pop(row["id"], None)
                    if row["op"] == "-D":
                        model.pop(row["id"], None)
                    else:
                        model[row["id"]] = row
                with lock:
                    counts["writes"] += 1
                    counts["deletes"] += sum(row["op"] == "-D" for row in rows)
        except BaseException as e:
            errors.append(e)

    def by_service(data: pa.Table, request_id: str) -> None:
        _write_acknowledged(client, table, data, request_id)

    paimon_table = lake.pypaimon_table(name, **PYPAIMON_RETRIES)

    def by_pypaimon(data: pa.Table, _: str) -> None:
        write(paimon_table, data)

    threads = [threading.Thread(target=writer_loop, args=(1, by_service)),
               threading.Thread(target=writer_loop, args=(2, by_service)),
               threading.Thread(target=writer_loop, args=(PYPAIMON_WRITER, by_pypaimon))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    kinds_during = lake.snapshot_kinds(name)
    lake.settle(name)
    expected = sorted((row for m in models.values() for row in m.values() if row["id"] not in unsure),
                      key=lambda r: r["id"])
    print(f"\n{counts['writes']} acknowledged writes ({counts['deletes']} -D rows), {counts['failed']} failed "
          f"pypaimon commits, "
          f"{kinds_during.count(COMPACT)} compactions while they ran ({lake.plans_lost(name)} plans lost to a "
          f"concurrent commit and redone), {len(kinds_during)} snapshots")
    assert kinds_during.count(COMPACT) > 0, "the compactor never ran during the writes: the test proves nothing"
    for reader, got in (("lsmlake", lake.lsmlake_rows(name)), ("pypaimon", lake.pypaimon_rows(name))):
        found = {r["id"]: r for r in got}
        for k, states in unsure.items():
            assert found.get(k) in states, f"{reader}: key {k} is {found.get(k)}, not one of {states}"
        _assert_rows([r for r in got if r["id"] not in unsure], expected, reader)
