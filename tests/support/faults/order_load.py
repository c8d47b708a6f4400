"""The ordering load of the fault harness: a few keys changed through every path by two writer replicas.

`db.g_order` (primary key `k`, deduplicate engine) is written at the same time by three lanes: gRPC to
writer replica 1, gRPC to writer replica 2 (each call `Write` with Arrow or `WriteRows` with JSON, at
random) and Kafka (JSON keyed by `k` on `lake.ingest.db.g_order`, which both replicas ingest as one
consumer group). All lanes change the same `ORDER_KEYS` keys. Each change of a key carries the key's
next version `ver` (1, 2, 3, ...) and is an upsert or, for a key that is present, a delete.

A lane takes some free keys from the shared pool, sends one change of each, waits until every change is
acknowledged and only then gives the keys back. So the next change of a key, through whichever lane and
replica, is sent only after the previous one was acknowledged:
- gRPC: the reply. A call that failed (a replica killed under it, the catalog gone) has an unknown
  outcome: it is sent again, the same rows under the same request id, to either replica, until one
  acknowledges it;
- Kafka: the broker acknowledged the message at an offset, and the table's snapshots record a next
  offset past it for its partition, under the topic id it was sent to. A message the broker did not
  acknowledge is sent again; a second copy only repeats the same version of the key.
Hence, once the lanes are paused, every change sent was acknowledged, and each key must read back its
last change. The harness pauses the Kafka lane before it kills the broker (as it pauses the other
producer), so no acknowledged message of this table is lost with the broker's memory.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.client import producer
from lsmlake.proto_gen.lsmlake.v1 import writer_pb2, writer_pb2_grpc
from tests.support.faults.load import REQUEST_DEADLINE_S, RPC_TIMEOUT_S, Pausable, ident
from tests.writer_svc.test_writer_local import write_requests

_log = logging.getLogger(__name__)

ORDER_TABLE = "g_order"  # in database db
ORDER_ID = f"db.{ORDER_TABLE}"
ORDER_TOPIC = f"lake.ingest.{ORDER_ID}"
ORDER_KEYS = 64
BATCH_KEYS = 8  # a step of a lane changes 1 to this many keys
DELETE_SHARE = 0.15  # of the changes of a key that is present
STEP_PAUSE_S = (0.1, 0.4)  # between two steps of a lane
RESEND_PAUSE_S = 0.5
ACK_POLL_S = 0.2
ROWS = pa.schema([("k", pa.int64()), ("ver", pa.int64()), ("lane", pa.string()), ("_row_kind", pa.string())])
# a harness bug, not a fault: sending the same call again cannot help
FATAL = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.NOT_FOUND})


@dataclass(frozen=True)
class Change:
    """Version `ver` of key `key`: an upsert or a delete, sent by `lane` (also when another replica took a resend)."""

    key: int
    ver: int
    delete: bool
    lane: str

    def row(self) -> dict[str, Any]:
        return {"k": self.key, "ver": self.ver, "lane": self.lane, "_row_kind": "-D" if self.delete else "+U"}


class OrderModel:
    """The keys of `db.g_order`: which are free, the versions handed out, the last acknowledged change of each."""

    def __init__(self, keys: int = ORDER_KEYS) -> None:
        self.lock = threading.Lock()
        self.free = set(range(keys))
        self.versions = dict.fromkeys(range(keys), 0)  # the last version handed out, per key
        self.upserts: dict[int, set[int]] = defaultdict(set)  # every version sent as an upsert, per key
        self.last: dict[int, Change] = {}  # the last acknowledged change, per key
        self.acked: Counter[str] = Counter()  # acknowledged changes per lane
        self.resends = 0  # calls or messages sent again after a failure
        self.answered = 0  # gRPC resends answered as already written

    def take(self, rng: random.Random, lane: str, most: int) -> list[Change]:
        """The next change of up to `most` free keys; the keys are the lane's until `acknowledge`."""
        with self.lock:
            keys = rng.sample(sorted(self.free), min(most, len(self.free)))
            changes = []
            for k in keys:
                self.free.remove(k)
                self.versions[k] += 1
                present = k in self.last and not self.last[k].delete
                change = Change(k, self.versions[k], present and rng.random() < DELETE_SHARE, lane)
                if not change.delete:
                    self.upserts[k].add(change.ver)
                changes.append(change)
            return changes

    def acknowledge(self, lane: str, changes: list[Change], resends: int, answered: bool) -> None:
        with self.lock:
            for c in changes:
                self.last[c.key] = c
                self.free.add(c.key)
            self.acked[lane] += len(changes)
            self.resends += resends
            self.answered += int(answered)

    def expected(self) -> tuple[dict[int, Change], dict[int, set[int]]]:
        """(the last acknowledged change per key, the versions ever sent as upserts per key)."""
        with self.lock:
            return dict(self.last), {k: set(v) for k, v in self.upserts.items()}


class OrderLane(Pausable):
    """Takes free keys, sends one change of each, gives the keys back once every change is acknowledged."""

    def __init__(self, lane: str, model: OrderModel, seed: int) -> None:
        super().__init__(f"order-{lane}")
        self.lane = lane
        self.model = model
        self.rng = random.Random(f"{seed}/{lane}")
        self.steps = 0

    def step(self) -> None:
        changes = self.model.take(self.rng, self.lane, self.rng.randint(1, BATCH_KEYS))
        if changes:
            self.steps += 1
            resends, answered = self.send(changes, time.monotonic() + REQUEST_DEADLINE_S)
            self.model.acknowledge(self.lane, changes, resends, answered)
        time.sleep(self.rng.uniform(*STEP_PAUSE_S))

    def send(self, changes: list[Change], deadline: float) -> tuple[int, bool]:
        """Send until acknowledged: (how many times sent again, whether answered as already written)."""
        raise NotImplementedError

    def _go_on(self, deadline: float, waiting_for: str) -> None:
        """Fail the lane when it stops or `deadline` passed while still waiting."""
        if self.stopping.is_set():
            raise AssertionError(f"{self.name}: stopped while waiting for {waiting_for}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{self.name}: waited {REQUEST_DEADLINE_S:.0f} s for {waiting_for}")


class GrpcOrderLane(OrderLane):
    """Sends to its replica; a failed call goes again, same rows and request id, to either replica."""

    def __init__(self, lane: str, ports: list[int], home: int, model: OrderModel, seed: int) -> None:
        super().__init__(lane, model, seed)
        self.channels = [grpc.insecure_channel(f"127.0.0.1:{p}") for p in ports]
        self.stubs = [writer_pb2_grpc.WriterServiceStub(c) for c in self.channels]
        self.home = home

    def send(self, changes: list[Change], deadline: float) -> tuple[int, bool]:
        request_id = f"{self.name}/{self.steps}"
        as_json = self.rng.random() < 0.5
        target = self.home
        resends = 0
        while True:
            try:
                reply = self._call(self.stubs[target], changes, request_id, as_json)
                return resends, bool(reply.already_written)
            except grpc.RpcError as e:
                if e.code() in FATAL:
                    raise
                _log.info("%s: write %s to replica %d failed: %s", self.name, request_id, target + 1, e.code())
            self._go_on(deadline, f"write {request_id} to be acknowledged")
            resends += 1
            target = self.rng.randrange(len(self.stubs))
            time.sleep(RESEND_PAUSE_S)

    @staticmethod
    def _call(stub: Any, changes: list[Change], request_id: str, as_json: bool) -> Any:
        rows = [c.row() for c in changes]
        if as_json:
            return stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident(ORDER_TABLE), request_id=request_id,
                                                              rows_json=[json.dumps(r) for r in rows]),
                                  timeout=RPC_TIMEOUT_S)
        data = pa.Table.from_pylist(rows, schema=ROWS)
        return stub.Write(write_requests(ident(ORDER_TABLE), data, request_id=request_id), timeout=RPC_TIMEOUT_S)

    def close(self) -> None:
        for c in self.channels:
            c.close()


class KafkaOrderLane(OrderLane):
    """Produces JSON keyed by `k`; a change is acknowledged once the snapshots record an offset past it."""

    def __init__(self, bootstrap: str, warehouse: str, model: OrderModel, seed: int,
                 incarnation: Callable[[], int], topic_id: Callable[[str], str]) -> None:
        super().__init__("kafka", model, seed)
        self.bootstrap = bootstrap
        self.warehouse = warehouse
        self.incarnation = incarnation  # of the broker: a restarted broker needs a new idempotent producer
        self.topic_id = topic_id
        self._producer: Any = None
        self._made_for = 0

    def _producer_now(self) -> Any:
        inc = self.incarnation()
        if self._producer is None or self._made_for != inc:
            self.reset_producer()
            self._producer = producer(self.bootstrap, linger_ms=5)
            self._made_for = inc
        return self._producer

    def reset_producer(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=2)
            except Exception:
                pass
        self._producer = None

    def send(self, changes: list[Change], deadline: float) -> tuple[int, bool]:
        need, resends = self._produce(changes, deadline)
        tid = self.topic_id(ORDER_TOPIC)  # the broker is not restarted while this lane runs
        catalog = FileSystemCatalog(self.warehouse)
        while True:
            try:
                got = committed_offsets(catalog, ORDER_ID, ORDER_TOPIC, list(need), tid)
                if all(got.get(p, 0) >= o for p, o in need.items()):
                    return resends, False
            except Exception as e:  # a snapshot expiring while read
                _log.debug("%s: reading the offsets: %s", self.name, e)
            self._go_on(deadline, f"the snapshots to record offsets {need}")
            time.sleep(ACK_POLL_S)

    def _produce(self, changes: list[Change], deadline: float) -> tuple[dict[int, int], int]:
        """Send every change until the broker acknowledged it: (partition -> next offset past the changes,
        how many sends were repeated)."""
        left = {c.key: json.dumps(c.row()).encode() for c in changes}
        need: dict[int, int] = {}
        resends = 0
        while True:
            try:
                p = self._producer_now()
                futures = {k: p.send(ORDER_TOPIC, key=str(k).encode(), value=v) for k, v in left.items()}
                p.flush(timeout=30)
            except Exception as e:
                _log.info("%s: produce failed: %s", self.name, e)
                futures = {}
            for k, f in futures.items():
                try:
                    md = f.get(timeout=1)
                except Exception:
                    continue
                if md.offset < 0:  # a copy the broker took for a duplicate: the first copy's offset is unknown
                    continue
                need[md.partition] = max(need.get(md.partition, 0), md.offset + 1)
                del left[k]
            if not left:
                return need, resends
            self.reset_producer()  # a new producer session: the next copy gets an offset of its own
            self._go_on(deadline, f"the broker to acknowledge {len(left)} messages")
            resends += len(left)
            time.sleep(RESEND_PAUSE_S)
