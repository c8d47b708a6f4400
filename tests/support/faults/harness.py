"""Fault injection over the whole cluster on loopback: kill -9 one process at a random moment, restart it,
check that no acknowledged row is lost or duplicated and the tables are sound.

The cluster: the embedded broker (Tansu, memory storage), catalog_svc, two writer_svc replicas (each with
gRPC and the Kafka ingestion of three topics, in one consumer group), one compactor_svc (Spark local[2]);
every service on a fixed port, so that a restarted one is found where the old one was. The load (see
`load.py` and `order_load.py`) runs all the time, except while a round's checks run. A round:
1. wait a random time (the load goes on), then inject one fault (kinds in `KINDS`) and restart the process;
2. recovery time: from the kill until the process serves again and the cluster commits its next snapshot
   of the kind that process makes (that writer replica's, a compactor's, any for the catalog, the new-log
   markers of both replicas' Kafka ingestion for the broker);
3. pause the load, wait until the writers have ingested every acknowledged Kafka message, the catalog's
   outbox relay has delivered every event to the (maybe new) broker and the compactor is idle, then
   check (see `checks.py`): acknowledged rows present exactly once, primary-key tables equal their
   models, every key of `db.g_order` holds its last acknowledged change and its data files number its
   versions in order, every file of a retained snapshot exists, orphan cleanup through the catalog
   (older than 1 ms) leaves only referenced files, pypaimon reads the same rows; resume.
"""

from __future__ import annotations

import logging
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import grpc

import tests.support.faults.checks as checks
import tests.support.writer_procs as procs
from catalog_svc.server import METASTORE_FILE
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets, topic_id_key
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.kafka.client import producer
from lsmlake.metastore import open_store
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, compactor_pb2, compactor_pb2_grpc
from tests.support.faults.load import GrpcClient, GrpcModel, KafkaLoad, ident
from tests.support.faults.order_load import (
    ORDER_ID,
    ORDER_TABLE,
    ORDER_TOPIC,
    GrpcOrderLane,
    KafkaOrderLane,
    OrderModel,
)
from tests.support.health_check import serving

_log = logging.getLogger(__name__)

KINDS = ("writer", "writer-2", "compactor", "compactor-mid-job", "catalog", "catalog-after-snapshot",
         "catalog-after-commit", "broker")
WRITER_IDS = ("writer-1", "writer-2")  # the replicas' --writer-id: their commit users start with it
WRITER_KINDS = {"writer": 0, "writer-2": 1}  # the fault kind that kills each replica
K_TOPICS = {"db.k_count": "lake.ingest.db.k_count", "db.k_pk": "lake.ingest.db.k_pk"}
INGEST_TOPICS = {**K_TOPICS, ORDER_ID: ORDER_TOPIC}  # what both replicas ingest
TABLES = ("g_count", "g_once", "g_pk", "k_count", "k_pk", ORDER_TABLE)  # in database db
TABLE_OPTIONS = {"bucket": "2", "num-sorted-run.compaction-trigger": "2", "num-sorted-run.stop-trigger": "8",
                 "snapshot.num-retained.min": "5", "snapshot.time-retained": "1 min"}
SETTLE_S = 600.0  # bound of every wait for the cluster; a wait that runs out fails the round
POLL_S = 0.25


SLOW_START_S = 240.0  # more time for a start that procs.Service gave up on (a JVM launch on a busy box)


class Proc(procs.Service):
    """A `procs.Service` that waits longer for a slow start and is killed when it never serves."""

    def __init__(self, module: str, args: list[str], log_dir: Path, port: int | None = None) -> None:
        try:
            super().__init__(module, args, log_dir, port)
            return
        except AssertionError:
            if not hasattr(self, "proc") or self.proc.poll() is not None:
                raise  # it exited: nothing to wait for
        deadline = time.monotonic() + SLOW_START_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            if serving(self.channel):
                return
            time.sleep(POLL_S)
        self.kill()  # never leave a half-started process behind
        raise AssertionError(f"{module} never became SERVING: {self.tail()}")


FAULT_FIRED = "fault injection: exiting at"  # what an armed catalog logs when it exits


class ArmedProc(Proc):
    """A catalog started with `--fault`: its crash at the first commit is the fault, even when a commit
    that was waiting for it arrives before the start is seen SERVING."""

    def __init__(self, module: str, args: list[str], log_dir: Path, port: int | None = None) -> None:
        try:
            super().__init__(module, args, log_dir, port)
        except AssertionError:
            if not hasattr(self, "proc") or self.proc.poll() is None or FAULT_FIRED not in self.tail():
                raise


class HarnessError(AssertionError):
    """The cluster did not recover, or a check failed."""


def _wait(what: str, cond: Any, timeout_s: float = SETTLE_S) -> float:
    """Poll `cond` until true; the seconds it took. Fails after `timeout_s`."""
    start = time.monotonic()
    while True:
        try:
            if cond():
                return time.monotonic() - start
        except Exception as e:  # a reader racing an expiring snapshot, a service still starting
            _log.debug("%s: %s", what, e)
        if time.monotonic() - start > timeout_s:
            raise HarnessError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(POLL_S)


@dataclass
class RoundResult:
    kind: str
    recovery_s: float
    detail: str = ""
    order: checks.OrderFindings | None = None  # the check of db.g_order after this round


@dataclass
class Report:
    """What the run did and found; `table()` is the fault table of docs/reliability.md."""

    seed: int
    rounds: list[RoundResult] = field(default_factory=list)
    rows_acked: int = 0
    rows_unknown: int = 0
    unknown_landed: int = 0
    lost: int = 0
    duplicates: int = 0
    kafka_resent: int = 0
    once_resends: int = 0  # db.g_once calls sent again with their request id after a failure
    once_answered: int = 0  # ... answered from an earlier attempt that had been committed
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    order_acked: dict[str, int] = field(default_factory=dict)  # db.g_order changes acknowledged, per lane
    order_resends: int = 0  # db.g_order calls and messages sent again after a failure
    order_answered: int = 0  # ... gRPC calls among them answered as already written
    order_worst: checks.OrderFindings = field(default_factory=checks.OrderFindings)  # each count's maximum

    def by_kind(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {k: [] for k in KINDS}
        for r in self.rounds:
            out[r.kind].append(r.recovery_s)
        return out

    def table(self) -> str:
        lines = ["| fault | injected | recovery median s | recovery max s |", "|---|---:|---:|---:|"]
        for kind, times in self.by_kind().items():
            if times:
                s = sorted(times)
                lines.append(f"| {kind} | {len(s)} | {s[len(s) // 2]:.1f} | {s[-1]:.1f} |")
            else:
                lines.append(f"| {kind} | 0 | - | - |")
        lines += ["", "| rounds | rows acknowledged | rows lost | rows duplicated | unknown-outcome rows "
                      "(landed) | Kafka messages re-sent after broker loss | problems | seconds |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {len(self.rounds)} | {self.rows_acked:,} | {self.lost} | {self.duplicates} | "
                  f"{self.rows_unknown:,} ({self.unknown_landed:,}) | {self.kafka_resent:,} | "
                  f"{len(self.problems)} | {self.seconds:.0f} |",
                  "", f"Writes with a request id sent again after a failure: {self.once_resends:,}, of which "
                      f"{self.once_answered:,} were answered as already written."]
        w = self.order_worst
        acked = self.order_acked
        lines += ["", f"`{ORDER_ID}`, one set of keys changed through gRPC to replica 1, gRPC to replica 2 and "
                      "Kafka (worst round):", "",
                  "| changes acknowledged (gRPC 1 / gRPC 2 / Kafka) | lost | duplicated | out of order | "
                  "never sent | versions inverted in files (rows compared) | sequence numbers shared | resent "
                  "(answered as already written) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {sum(acked.values()):,} ({acked.get('grpc-1', 0):,} / {acked.get('grpc-2', 0):,} / "
                  f"{acked.get('kafka', 0):,}) | {w.lost} | {w.duplicated} | {w.out_of_order} | {w.never_sent} | "
                  f"{w.inverted} ({w.file_rows:,}) | {w.shared_numbers} | {self.order_resends:,} "
                  f"({self.order_answered:,}) |"]
        return "\n".join(lines)

    def rounds_table(self) -> str:
        """One line per round: the fault, its recovery, and the check of db.g_order after it."""
        lines = [f"| round | fault | recovery s | {ORDER_ID} changes acknowledged | lost | duplicated | out of order | "
                 "versions inverted in files |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(self.rounds, 1):
            o = r.order or checks.OrderFindings()
            lines.append(f"| {i} | {r.kind} | {r.recovery_s:.1f} | {o.acked:,} | {o.lost} | {o.duplicated} | "
                         f"{o.out_of_order} | {o.inverted} |")
        return "\n".join(lines)

    def order_ok(self) -> bool:
        w = self.order_worst
        return not (w.lost or w.duplicated or w.out_of_order or w.never_sent or w.inverted or w.shared_numbers)

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "rounds": len(self.rounds), "faults": dict(Counter(r.kind for r in self.rounds)),
                "rows_acked": self.rows_acked, "rows_lost": self.lost, "rows_duplicated": self.duplicates,
                "rows_unknown": self.rows_unknown, "unknown_landed": self.unknown_landed,
                "kafka_resent": self.kafka_resent, "once_resends": self.once_resends,
                "once_answered": self.once_answered, "problems": self.problems,
                "order": {"acked": self.order_acked, "resends": self.order_resends,
                          "answered": self.order_answered, "worst": asdict(self.order_worst),
                          "rounds": [[r.kind, asdict(r.order)] for r in self.rounds if r.order is not None]},
                "recovery_max_s": {k: round(max(v), 1) for k, v in self.by_kind().items() if v},
                "seconds": round(self.seconds)}


class Cluster:
    """The processes, each restartable on its port."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.warehouse = root / "wh"
        self.warehouse.mkdir(parents=True)
        self.broker = EmbeddedBroker(log_dir=root / "kafka").start()
        self.incarnation = 1  # of the broker: offsets of different incarnations are different logs
        self._topic_ids: dict[str, str] = {}
        self.catalog_port = free_port()
        self.writer_ports = [free_port() for _ in WRITER_IDS]
        self.catalog = self._catalog()
        self._create_tables()
        self.writers = [self._writer(n) for n in range(len(WRITER_IDS))]
        self.compactor = self._compactor()

    def _catalog(self, fault: str | None = None) -> procs.Service:
        args = ["--warehouse", str(self.warehouse), "--kafka", self.broker.bootstrap, "--expire-interval", "20",
                "--reconcile-interval", "2"]
        if fault:
            return ArmedProc("catalog_svc", [*args, "--fault", fault], self.root, self.catalog_port)
        return Proc("catalog_svc", args, self.root, self.catalog_port)

    def _writer(self, n: int) -> procs.Service:
        """Replica `n`: the replicas differ only in their port and id (they share one Kafka consumer group)."""
        ingest = [a for t in INGEST_TOPICS for a in ("--ingest", f"{t}:json")]
        return Proc("writer_svc", ["--warehouse", str(self.warehouse), "--catalog",
                                           f"127.0.0.1:{self.catalog_port}", "--kafka", self.broker.bootstrap,
                                           *ingest, "--writer-id", WRITER_IDS[n],
                                           "--commit-interval", "0.5", "--max-poll-records", "2000"],
                    self.root, self.writer_ports[n])

    def _compactor(self) -> procs.Service:
        return Proc("compactor_svc", ["--warehouse", str(self.warehouse), "--catalog",
                                              f"127.0.0.1:{self.catalog_port}", "--kafka", self.broker.bootstrap,
                                              "--spark-master", "local[2]", "--reconcile-interval", "3"], self.root)

    def catalog_stub(self) -> Any:
        return catalog_pb2_grpc.CatalogServiceStub(self.catalog.channel)

    def _create_tables(self) -> None:
        stub = self.catalog_stub()
        stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True), timeout=30)
        count = [("id", "BIGINT NOT NULL"), ("cnt", "BIGINT")]
        sums = {"merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum"}
        for name, columns, key, options in (
                ("g_count", count, "id", sums),
                ("g_once", count, "id", sums),
                ("g_pk", [("id", "BIGINT NOT NULL"), ("v", "STRING"), ("n", "BIGINT")], "id", {}),
                ("k_count", count, "id", sums),
                ("k_pk", [("id", "BIGINT NOT NULL"), ("name", "STRING"), ("amount", "DOUBLE")], "id", {}),
                # every path changes the same few keys: the deduplicate engine keeps each key's highest number
                (ORDER_TABLE, [("k", "BIGINT NOT NULL"), ("ver", "BIGINT"), ("lane", "STRING")], "k",
                 {"bucket": "4"})):
            stub.CreateTable(catalog_pb2.CreateTableRequest(
                table=ident(name), columns=[catalog_pb2.Column(name=n, type=t) for n, t in columns],
                primary_keys=[key], options={**TABLE_OPTIONS, **options}), timeout=30)

    def restart_catalog(self, fault: str | None = None) -> None:
        self.catalog = self._start(self._catalog, fault)

    def restart_writer(self, n: int) -> None:
        self.writers[n] = self._start(self._writer, n)

    def restart_compactor(self) -> None:
        self.compactor = self._start(self._compactor)

    @staticmethod
    def _start(factory: Any, *args: Any) -> procs.Service:
        """Start a service; a start that fails (a JVM launch on a busy box, a port still held) is retried."""
        for attempt in range(3):
            try:
                return factory(*args)  # type: ignore[no-any-return]
            except AssertionError:
                if attempt == 2:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    def latest(self, table_id: str) -> int:
        return FileSystemCatalog(str(self.warehouse)).get_table(table_id).snapshots.latest_id() or 0

    def snapshots_after(self, table_id: str, after: int) -> list[Any]:
        snaps = FileSystemCatalog(str(self.warehouse)).get_table(table_id).snapshots
        latest = snaps.latest_id() or 0
        return [snaps.snapshot(i) for i in range(after + 1, latest + 1)]

    def topic_id(self, topic: str) -> str:
        """The current id of a topic, from a producer's metadata (kept until the broker restarts)."""
        if topic in self._topic_ids:
            return self._topic_ids[topic]
        p = producer(self.broker.bootstrap)
        try:
            p.partitions_for(topic)
            tid = p._metadata.topic_id(topic)  # kafka-python has no public accessor
            if tid is None:
                raise HarnessError(f"the broker gives no id for topic {topic}")
            self._topic_ids[topic] = str(tid)
            return str(tid)
        finally:
            p.close(timeout=2)

    def close(self) -> None:
        for s in (self.compactor, *self.writers, self.catalog):
            try:
                s.stop(30)
            except Exception:
                pass
        self.broker.close()


class Harness:
    """Runs rounds of faults over a `Cluster` under the mixed load."""

    def __init__(self, seed: int, root: Path | None = None, clients: int = 2) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self._tmp = root is None
        self.root = Path(tempfile.mkdtemp(prefix="lsmlake-faults-")) if root is None else root
        self.cluster = Cluster(self.root)
        self.model = GrpcModel()
        self.clients = [GrpcClient(n, self.cluster.writer_ports[0], self.model, seed) for n in range(clients)]
        self.kafka = KafkaLoad(self.cluster.broker.bootstrap, seed, lambda: self.cluster.incarnation)
        self.order = OrderModel()
        ports = self.cluster.writer_ports
        self.order_grpc = [GrpcOrderLane(f"grpc-{n + 1}", ports, n, self.order, seed) for n in range(len(ports))]
        self.order_kafka = KafkaOrderLane(self.cluster.broker.bootstrap, str(self.cluster.warehouse), self.order,
                                          seed, lambda: self.cluster.incarnation, self.cluster.topic_id)
        self.report = Report(seed)

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in self.clients:
            c.stop()
            c.close()
        for lane in self.order_grpc:
            lane.stop()
            lane.close()
        self.order_kafka.stop()
        self.order_kafka.reset_producer()
        self.kafka.stop()
        self.kafka.reset_producer()
        self.cluster.close()
        if self._tmp and not self.report.problems:
            shutil.rmtree(self.root, ignore_errors=True)

    def _loads(self) -> list[Any]:
        return [*self.clients, self.kafka, *self.order_grpc, self.order_kafka]

    def run(self, rounds: int, kinds: list[str] | None = None, pause_s: tuple[float, float] = (2.0, 8.0)) -> Report:
        """`rounds` rounds; the kinds cycle through a seeded shuffle of `kinds` (default: all)."""
        started = time.monotonic()
        plan: list[str] = []
        for load in self._loads():
            load.start()
        try:
            for i in range(rounds):
                if not plan:
                    plan = list(kinds or KINDS)
                    self.rng.shuffle(plan)
                kind = plan.pop()
                time.sleep(self.rng.uniform(*pause_s))  # the random moment: the load goes on meanwhile
                for load in self._loads():
                    load.check()
                try:
                    result = self.inject(kind)
                    self.report.rounds.append(result)
                    found = self.verify()
                except HarnessError as e:  # the cluster did not recover: a finding, reported with the table
                    self.report.problems.append(f"round {i + 1} ({kind}): {e}")
                    break
                o = result.order = found.order
                assert o is not None, "verify checks db.g_order every round"
                _log.warning("round %d/%d %s: recovered in %.1f s %s; %s: %d changes acknowledged, %d lost, %d "
                             "duplicated, %d out of order, %d inverted in files; %s", i + 1, rounds, kind,
                             result.recovery_s, result.detail, ORDER_ID, o.acked, o.lost, o.duplicated,
                             o.out_of_order, o.inverted, "; ".join(found.problems) or "all checks pass")
                if found.problems:
                    self.report.problems += [f"round {i + 1} ({kind}): {p}" for p in found.problems]
                    break
        finally:
            self.report.seconds = time.monotonic() - started
        return self.report

    # -- faults ------------------------------------------------------------------------------------

    def inject(self, kind: str) -> RoundResult:
        c = self.cluster
        t0 = time.monotonic()
        if kind in WRITER_KINDS:
            n = WRITER_KINDS[kind]
            before = {t: c.latest(t) for t in ("db.g_pk", "db.k_count", ORDER_ID)}
            c.writers[n].kill()
            c.restart_writer(n)
            user = f"{WRITER_IDS[n]}-"  # the other replica goes on committing: only this one's commits count
            _wait(f"a commit by the restarted {WRITER_IDS[n]}", lambda: any(
                s.commit_kind == "APPEND" and s.commit_user.startswith(user)
                for t in before for s in c.snapshots_after(t, before[t])))
            return RoundResult(kind, time.monotonic() - t0)
        if kind in ("compactor", "compactor-mid-job"):
            detail = ""
            if kind == "compactor-mid-job":
                waited = _wait("a compaction plan in flight", self._plan_in_flight, 120)
                detail = f"(a plan was in flight after {waited:.1f} s)"
                t0 = time.monotonic()
            before = {f"db.{t}": c.latest(f"db.{t}") for t in TABLES}
            c.compactor.kill()
            c.restart_compactor()
            _wait("a compaction commit by the restarted compactor", lambda: any(
                s.commit_kind == "COMPACT" for t in before for s in c.snapshots_after(t, before[t])))
            return RoundResult(kind, time.monotonic() - t0, detail)
        if kind == "catalog":
            before = c.latest("db.g_pk")
            c.catalog.kill()
            c.restart_catalog()
            _wait("a commit through the restarted catalog", lambda: c.latest("db.g_pk") > before)
            return RoundResult(kind, time.monotonic() - t0)
        if kind.startswith("catalog-after-"):
            # restart the catalog armed: it exits (as kill -9 would leave it) on the next commit, between
            # writing the snapshot and recording it ("after-snapshot") or between recording the commit and
            # publishing its event ("after-commit"); then it comes back unarmed
            c.catalog.kill()
            c.restart_catalog(f"exit-{kind.removeprefix('catalog-')}")
            armed = c.catalog
            _wait("the armed catalog to crash at its next commit", lambda: armed.proc.poll() is not None, 300)
            t0 = time.monotonic()
            armed.channel.close()
            before = c.latest("db.g_pk")
            c.restart_catalog()
            _wait("a commit through the restarted catalog", lambda: c.latest("db.g_pk") > before)
            return RoundResult(kind, time.monotonic() - t0, f"(exit code {armed.proc.returncode})")
        if kind == "broker":
            return self._broker_fault(t0)
        raise ValueError(f"unknown fault kind {kind!r}")

    def _plan_in_flight(self) -> bool:
        stub = self.cluster.catalog_stub()
        for t in TABLES:
            plans = stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
                table=ident(t), states=[catalog_pb2.COMPACTION_PLAN_STATE_INFLIGHT]), timeout=10).plans
            if plans:
                return True
        return False

    def _broker_fault(self, t0: float) -> RoundResult:
        """Kill the broker (memory storage: every topic, offset and group is gone) and restart it empty.

        The producers are paused first, so each message's fate in the old log is known (acknowledged at an
        offset, or not sent; the lane of db.g_order pauses only once its messages are committed, and goes on
        at once in the new log); the writers, relay and compactor are hit at a random moment. Then: wait
        until both ingest topics record the new log and each writer replica has committed a snapshot
        recording a new log (it dropped every buffer it read from the old log), which makes the old log's
        committed offsets final; re-send every message of the old log past them, in order.
        """
        c = self.cluster
        self.kafka.pause()
        self.order_kafka.pause()
        old_ids = {t: c.topic_id(topic) for t, topic in INGEST_TOPICS.items()}
        old_inc = c.incarnation
        before = {t: c.latest(t) for t in INGEST_TOPICS}
        t0 = time.monotonic()
        c.broker.kill()
        c._topic_ids.clear()
        c.incarnation += 1
        c.broker.start()
        self.kafka.reset_producer()
        # a replica that finds the new id already recorded (by the other) rewinds without a marker and commits
        # nothing while the producers are paused: the lane's messages in the new log make each replica commit
        # (both have partitions of its topic)
        self.order_kafka.resume()
        _wait("the writers to read the new logs", lambda: all(
            checks.recorded_ids(c.warehouse, t, topic) - {old_ids[t]} for t, topic in K_TOPICS.items())
            and all(self._switched(w, old_ids, before) for w in WRITER_IDS))
        recovery = time.monotonic() - t0
        final = {topic: checks.offsets_under(c.warehouse, t, topic, old_ids[t]) for t, topic in K_TOPICS.items()}
        resent = self.kafka.reproduce_lost(old_inc, final)
        self.report.kafka_resent += resent
        self.kafka.resume()
        return RoundResult("broker", recovery, f"({resent} messages re-sent)")

    def _switched(self, writer_id: str, old_ids: dict[str, str], before: dict[str, int]) -> bool:
        """Whether the replica's Kafka ingestion committed, after `before`, a snapshot recording a topic id other
        than the old one: it has then dropped its buffers and reads only the new logs (with two replicas, one
        replica's marker does not stop the other from still committing rows it read from the old log)."""
        for t, topic in INGEST_TOPICS.items():
            for s in self.cluster.snapshots_after(t, before[t]):
                recorded = (s.properties or {}).get(topic_id_key(topic))
                if s.commit_user.startswith(f"{writer_id}-") and recorded not in (None, old_ids[t]):
                    return True
        return False

    # -- checks ------------------------------------------------------------------------------------

    def _caught_up(self) -> bool:
        c = self.cluster
        ends = self.kafka.ends(c.incarnation)
        for t, topic in K_TOPICS.items():
            want = ends.get(topic, {})
            tid = c.topic_id(topic)
            got = committed_offsets(FileSystemCatalog(str(c.warehouse)), t, topic, list(want), tid)
            if any(got.get(p) != o for p, o in want.items()):
                return False
        return True

    def _compactor_idle(self) -> bool:
        stub = compactor_pb2_grpc.CompactorServiceStub(self.cluster.compactor.channel)
        s = stub.CompactionStatus(compactor_pb2.CompactionStatusRequest(), timeout=10)
        return not s.running and s.pending_buckets == 0 and not self._plan_in_flight() and not self._requested()

    def _requested(self) -> bool:
        stub = self.cluster.catalog_stub()
        return any(stub.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
            table=ident(t), states=[catalog_pb2.COMPACTION_PLAN_STATE_REQUESTED]), timeout=10).plans
            for t in TABLES)

    def verify(self) -> checks.Findings:
        """Pause the load, let the cluster settle, check everything, resume."""
        c = self.cluster
        for load in self._loads():
            load.pause()
        try:
            _wait("the writer to ingest every acknowledged Kafka message", self._caught_up)
            store = open_store(f"sqlite:///{c.warehouse / METASTORE_FILE}")
            try:
                _wait("the outbox relay to deliver every event to the broker",
                      lambda: not store.outbox.pending_events(1))
            finally:
                store.close()
            _wait("the compactor to be idle twice in a row", lambda: self._compactor_idle()
                  and (time.sleep(2.0) is None) and self._compactor_idle())
            found = checks.Findings()
            w = c.warehouse
            # gRPC count table: acknowledged ids once, unknown ones at most once
            got = {r["id"]: r["cnt"] for r in checks.read(w, "db.g_count").to_pylist()}
            with self.model.lock:
                acked, unknown, pk = set(self.model.acked), set(self.model.unknown), dict(self.model.pk)
                once = set(self.model.once)
                self.report.once_resends, self.report.once_answered = self.model.once_resends, self.model.once_answered
            checks.check_counts(found, "db.g_count", got, dict.fromkeys(acked, 1), unknown)
            # gRPC writes with request ids, resent after failures: every id exactly once
            got = {r["id"]: r["cnt"] for r in checks.read(w, "db.g_once").to_pylist()}
            checks.check_counts(found, "db.g_once", got, dict.fromkeys(once, 1))
            got_pk = {r["id"]: (r["v"], r["n"]) for r in checks.read(w, "db.g_pk").to_pylist()}
            checks.check_equal(found, "db.g_pk", got_pk, pk)
            k_counts, k_pk = self.kafka.models()
            got = {r["id"]: r["cnt"] for r in checks.read(w, "db.k_count").to_pylist()}
            checks.check_counts(found, "db.k_count", got, k_counts)
            got_pk = {r["id"]: (r["name"], r["amount"]) for r in checks.read(w, "db.k_pk").to_pylist()}
            checks.check_equal(found, "db.k_pk", got_pk, k_pk)
            stub = c.catalog_stub()
            for t in TABLES:
                tid = f"db.{t}"
                checks.check_files(found, w, tid)
                try:
                    stub.RemoveOrphanFiles(catalog_pb2.RemoveOrphanFilesRequest(table=ident(t), older_than_ms=1),
                                           timeout=120)
                except grpc.RpcError as e:  # a finding of the round, reported with the table (not retried away)
                    found.problems.append(f"{tid}: RemoveOrphanFiles failed: {e.code().name}: {e.details()}")
                    continue
                checks.check_no_orphans(found, w, tid)
                checks.check_files(found, w, tid)
            checks.check_pypaimon(found, w, "db.g_pk", ["id", "v", "n"])
            checks.check_pypaimon(found, w, "db.k_pk", ["id", "name", "amount"])
            checks.check_pypaimon(found, w, "db.g_count", ["id", "cnt"])
            checks.check_pypaimon(found, w, "db.g_once", ["id", "cnt"])
            checks.check_pypaimon(found, w, "db.k_count", ["id", "cnt"])
            # every path, both replicas, the same keys: each key holds its last acknowledged change
            last, upserts = self.order.expected()
            order = checks.check_order(found, w, ORDER_ID, last, upserts)
            checks.check_pypaimon(found, w, ORDER_ID, ["k", "ver", "lane"], key="k")
            with self.order.lock:
                order.acked = sum(self.order.acked.values())
                self.report.order_acked = dict(self.order.acked)
                self.report.order_resends, self.report.order_answered = self.order.resends, self.order.answered
            worst = self.report.order_worst
            for f in fields(order):
                setattr(worst, f.name, max(getattr(worst, f.name), getattr(order, f.name)))
            # the state is checked whole each round: a row lost once stays lost, so keep the worst round
            self.report.rows_acked = len(acked) + len(once) + self.model.pk_rows_acked + \
                sum(1 for m in self.kafka.messages if m.acked is not None)
            self.report.rows_unknown = len(unknown)
            self.report.unknown_landed = found.unknown_landed
            self.report.lost = max(self.report.lost, found.lost)
            self.report.duplicates = max(self.report.duplicates, found.duplicates)
            return found
        finally:
            for load in self._loads():
                load.resume()
