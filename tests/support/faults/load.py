"""The mixed load of the fault harness and its plain-Python models.

- gRPC, `db.g_count` (sum of `cnt`, one row per unique id, never retried): an acknowledged id must read
  back with `cnt` 1 (0 is a lost row, 2 a duplicate); an id whose call failed has an unknown outcome
  and may read back 0 or 1 times, never more.
- gRPC, `db.g_once` (like `db.g_count`, but every call has a request id and a failed call is sent again
  with the same id until it is acknowledged): every id must read back with `cnt` 1, whatever the faults.
- gRPC, `db.g_pk` (primary key, upserts and deletes of keys a client owns): a failed call is sent again,
  the same rows, until it is acknowledged; the table must equal the model of acknowledged calls.
- Kafka, `lake.ingest.db.k_count` (sum of `cnt`, one message = +1 on a key) and `lake.ingest.db.k_pk`
  (JSON upserts and deletes by `_row_kind`): a message counts once its broker acknowledged it; the
  harness re-sends what a broker lost (see `KafkaLoad.reproduce_lost`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pyarrow as pa

from lsmlake.kafka.client import producer
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2_grpc
from tests.writer_svc.test_writer_local import write_requests

_log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 60.0
REQUEST_DEADLINE_S = 300.0  # a call retried for this long is a harness failure, not a slow machine
KEYS_PER_CLIENT = 4_000
KAFKA_KEYS = 3_000


def ident(name: str) -> common_pb2.TableIdentifier:
    return common_pb2.TableIdentifier(database="db", table=name)


class Pausable:
    """A load thread that can be paused between requests; `pause` returns once it is parked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.go = threading.Event()
        self.parked = threading.Event()
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self.go.set()
        self.thread.start()

    def pause(self, timeout_s: float = REQUEST_DEADLINE_S + 60) -> None:
        self.go.clear()
        if not self.parked.wait(timeout_s):
            raise AssertionError(f"{self.name} did not pause within {timeout_s:.0f} s")
        self.check()

    def resume(self) -> None:
        self.parked.clear()
        self.go.set()

    def stop(self) -> None:
        self.stopping.set()
        self.go.set()
        self.thread.join(REQUEST_DEADLINE_S + 60)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error

    def _main(self) -> None:
        try:
            while not self.stopping.is_set():
                if not self.go.is_set():
                    self.parked.set()
                    self.go.wait(1.0)
                    continue
                self.parked.clear()
                self.step()
        except BaseException as e:
            self.error = e
        finally:
            self.parked.set()

    def step(self) -> None:
        raise NotImplementedError


@dataclass
class GrpcModel:
    """What the gRPC clients know: acknowledged and unknown-outcome ids, the primary-key model."""

    acked: set[int] = field(default_factory=set)
    unknown: set[int] = field(default_factory=set)
    once: set[int] = field(default_factory=set)  # ids of db.g_once, all acknowledged
    once_resends: int = 0  # db.g_once calls sent again after a failure
    once_answered: int = 0  # ... of which the writer answered from an earlier attempt (already written)
    pk: dict[int, tuple[str, int]] = field(default_factory=dict)
    pk_rows_acked: int = 0
    calls_failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class GrpcClient(Pausable):
    """Writes a count batch then a primary-key batch, over and over, through the writer's fixed port."""

    def __init__(self, n: int, port: int, model: GrpcModel, seed: int) -> None:
        super().__init__(f"grpc-client-{n}")
        self.n = n
        self.rng = random.Random(seed * 1000 + n)
        self.model = model
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = writer_pb2_grpc.WriterServiceStub(self.channel)
        self.next_id = n << 40  # ids of this client only: unique across the run
        self.pk: dict[int, tuple[str, int]] = {}  # this client's keys, as acknowledged
        self.seq = 0

    def _write(self, table: str, data: pa.Table, **header: Any) -> Any:
        """The reply, or None when the call failed."""
        try:
            return self.stub.Write(write_requests(ident(table), data, **header), timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            _log.info("%s: %s write failed: %s", self.name, table, e.code())
            with self.model.lock:
                self.model.calls_failed += 1
            return None

    def step(self) -> None:
        ids = list(range(self.next_id, self.next_id + 300))
        self.next_id += 300
        counts = pa.table({"id": pa.array(ids, pa.int64()), "cnt": pa.array([1] * 300, pa.int64())})
        ok = self._write("g_count", counts) is not None
        with self.model.lock:
            (self.model.acked if ok else self.model.unknown).update(ids)
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        attempts = 0
        while (reply := self._write("g_once", counts, request_id=f"{self.name}/{ids[0]}")) is None:
            if time.monotonic() > deadline:  # the same rows under the same id, until acknowledged
                raise AssertionError(f"{self.name}: a write with a request id failed for {REQUEST_DEADLINE_S:.0f} s")
            attempts += 1
            time.sleep(0.5)
        with self.model.lock:
            self.model.once.update(ids)
            self.model.once_resends += attempts
            self.model.once_answered += int(reply.already_written)
        self.seq += 1
        base = self.n * KEYS_PER_CLIENT
        keys = self.rng.sample(range(base, base + KEYS_PER_CLIENT), 300)
        kinds = ["-D" if k in self.pk and self.rng.random() < 0.2 else "+U" for k in keys]
        values = [f"c{self.n}s{self.seq}" for _ in keys]
        nums = [self.rng.randrange(1 << 40) for _ in keys]
        data = pa.table({"id": pa.array(keys, pa.int64()), "v": values, "n": pa.array(nums, pa.int64()),
                         "_row_kind": kinds})
        deadline = time.monotonic() + REQUEST_DEADLINE_S
        while self._write("g_pk", data, row_kind_column="_row_kind") is None:  # idempotent by key: send again
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: a primary-key write failed for {REQUEST_DEADLINE_S:.0f} s")
            time.sleep(0.5)
        for k, kind, v, x in zip(keys, kinds, values, nums, strict=True):
            if kind == "-D":
                self.pk.pop(k, None)
            else:
                self.pk[k] = (v, x)
        with self.model.lock:
            self.model.pk_rows_acked += len(keys)
            for k in keys:
                if k in self.pk:
                    self.model.pk[k] = self.pk[k]
                else:
                    self.model.pk.pop(k, None)

    def close(self) -> None:
        self.channel.close()


@dataclass
class Message:
    """One Kafka message and where a broker acknowledged it: (broker incarnation, partition, offset)."""

    topic: str
    key: bytes
    value: bytes
    acked: tuple[int, int, int] | None = None


class KafkaLoad(Pausable):
    """Produces batches to both ingest topics and waits for every acknowledgement; keeps every message."""

    def __init__(self, bootstrap: str, seed: int, incarnation: Callable[[], int]) -> None:
        super().__init__("kafka-producer")
        self.bootstrap = bootstrap
        self.rng = random.Random(seed * 7919)
        self.incarnation = incarnation
        self.messages: list[Message] = []
        self.pk_state: dict[int, tuple[str, float]] = {}  # the generator's view, for sensible updates
        self.producer: Any = None
        self.seq = 0
        self.send_failures = 0

    def _producer(self) -> Any:
        if self.producer is None:
            self.producer = producer(self.bootstrap, linger_ms=5)
        return self.producer

    def reset_producer(self) -> None:
        """A restarted broker needs a new idempotent producer (its producer ids are gone)."""
        if self.producer is not None:
            try:
                self.producer.close(timeout=2)
            except Exception:
                pass
        self.producer = None

    def step(self) -> None:
        batch: list[Message] = []
        for _ in range(100):
            self.seq += 1
            k = self.rng.randrange(KAFKA_KEYS)
            batch.append(Message("lake.ingest.db.k_count", str(k).encode(),
                                 json.dumps({"id": k, "cnt": 1}).encode()))
            k = self.rng.randrange(KAFKA_KEYS)
            if k in self.pk_state and self.rng.random() < 0.25:
                row: dict[str, Any] = {"id": k, "_row_kind": "-D"}
                del self.pk_state[k]
            else:
                row = {"id": k, "name": f"m{self.seq}", "amount": round(self.rng.random() * 1000, 3)}
                self.pk_state[k] = (row["name"], row["amount"])
            batch.append(Message("lake.ingest.db.k_pk", str(k).encode(), json.dumps(row).encode()))
        self.messages.extend(batch)
        self.send(batch)
        time.sleep(0.2)

    def send(self, batch: list[Message]) -> None:
        """Send, then record each acknowledgement; a failed send stays unacknowledged (re-sent later)."""
        try:
            p = self._producer()
            inc = self.incarnation()
            futures = [(m, p.send(m.topic, key=m.key, value=m.value)) for m in batch]
            p.flush(timeout=30)
        except Exception as e:
            _log.info("produce failed: %s", e)
            self.send_failures += 1
            self.reset_producer()
            return
        for m, f in futures:
            try:
                md = f.get(timeout=1)
                m.acked = (inc, md.partition, md.offset)
            except Exception:
                self.send_failures += 1

    def unacked(self) -> list[Message]:
        return [m for m in self.messages if m.acked is None]

    def reproduce_lost(self, inc: int, final: dict[str, dict[int, int]]) -> int:
        """Send again, in their first order, the messages of broker incarnation `inc` past the offsets the
        tables committed from its log (`final`: topic -> partition -> next offset), and those never
        acknowledged; how many."""
        lost = [m for m in self.messages
                if m.acked is None or (m.acked[0] == inc and m.acked[2] >= final.get(m.topic, {}).get(m.acked[1], 0))]
        for m in lost:
            m.acked = None
        # the same key goes to the same partition, so per-key order is kept
        for i in range(0, len(lost), 500):
            self.send(lost[i:i + 500])
        left = self.unacked()
        if left:
            raise AssertionError(f"{len(left)} messages still unacknowledged after re-sending to the new broker")
        return len(lost)

    def ends(self, inc: int) -> dict[str, dict[int, int]]:
        """The next offset of every partition of each topic in broker incarnation `inc`."""
        out: dict[str, dict[int, int]] = defaultdict(dict)
        for m in self.messages:
            if m.acked is not None and m.acked[0] == inc:
                part = out[m.topic]
                part[m.acked[1]] = max(part.get(m.acked[1], 0), m.acked[2] + 1)
        return out

    def models(self) -> tuple[dict[int, int], dict[int, tuple[str, float]]]:
        """(key -> count, key -> (name, amount)) from every message, in the order first sent."""
        counts: dict[int, int] = defaultdict(int)
        pk: dict[int, tuple[str, float]] = {}
        for m in self.messages:
            row = json.loads(m.value)
            if m.topic.endswith("k_count"):
                counts[row["id"]] += row["cnt"]
            elif row.get("_row_kind") == "-D":
                pk.pop(row["id"], None)
            else:
                pk[row["id"]] = (row["name"], row["amount"])
        return dict(counts), pk
