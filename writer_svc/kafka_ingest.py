"""Exactly-once ingestion of Kafka topics into tables.

Each configured table `db.t` is fed by the topic `lake.ingest.db.t` (plain JSON or Debezium JSON values);
malformed messages go to `lake.deadletter.db.t` with the reason. The writers form one consumer group, so
the partitions of the topics are split between them.

Exactly once, across crashes at any point:
1. the next offset of every partition a commit covers is stored in the snapshot's properties
   (`lsmlake.kafka-offset.<topic>.<partition>`), in the same catalog commit as the rows, and no commit
   takes rows without their offsets: a table altered under the ingestion is not moved to its new schema by
   committing what was buffered under the old one (see `_catch_up`);
2. Kafka offsets are committed only after the catalog commit (they are a hint for tools, not the truth);
3. when partitions are assigned (at start, after a crash, after a rebalance) the buffers are dropped and
   the consumer seeks to the offsets found in the newest snapshot that records them, so rows in a lost
   buffer are read again and rows already committed are not;
4. a dead letter is acknowledged by the broker before the offsets past it are committed;
5. the Kafka topic id (a UUID the broker gives each topic when it creates it) is stored next to the
   offsets (`lsmlake.kafka-topic-id.<topic>`). Offsets recorded under another id belong to a log that
   no longer exists (a broker that lost its storage, a topic deleted and created again): they are not
   used; the new log is read from its beginning, and a snapshot carrying only the new id is committed at
   once, which marks the moment the old log's progress became final. Messages the lost log had
   acknowledged past the offsets recorded under its id never reached the table: their producers must
   send them again (see docs/reliability.md).
A catalog commit whose outcome is unknown (the catalog does not answer) is sent again, with the same
identifier and files, until the catalog answers: rewinding while the catalog may still apply the last
attempt would read its rows again and commit them twice. A commit that definitely failed drops the
buffers and rewinds every partition to the snapshot's offsets. Only a writer stopping while the catalog
is still unreachable gives up an unknown commit (then the next writer's rewind decides).

All Kafka calls happen on the ingestion thread (kafka-python consumers are not thread-safe); the
rebalance listener only flags the rebalance, which that thread handles when `poll` returns.
Not handled: a writer that lost its partitions without noticing (a long pause past the session timeout)
may still commit the rows it buffered before; Kafka's group generation does not fence catalog commits.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
from kafka import TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.structs import OffsetAndMetadata

from lsmlake.catalog.filesystem import FileSystemCatalog, split_identifier
from lsmlake.errors import BackPressureError, InvalidInputError
from lsmlake.ingest.dead_letter import dead_letter_value
from lsmlake.ingest.decode import FORMATS, Format, decode_messages, needs_retractions
from lsmlake.ingest.kafka_offsets import (
    DEAD_LETTER_PREFIX,
    TOPIC_PREFIX,
    committed_offsets,
    offset_key,
    recorded_topic_id,
    topic_id_key,
)
from lsmlake.kafka.broker import ensure_topics
from lsmlake.kafka.client import Publisher, consumer
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.errors import relayed
from lsmlake.runtime.background import BackgroundLoop
from writer_svc.metrics import WriterMetrics
from writer_svc.table_ingest import TableAlteredError, TableIngest, TableReplacedError

_log = logging.getLogger(__name__)

GROUP_ID = "lsmlake-writer"
PAUSE_S = 1.0  # a partition whose table's buckets are full is read again after this


class _TableChanged(Exception):
    """A table was altered, or dropped and created again, under the ingestion: its messages are neither refused
    against the old schema nor committed to adopt the new one, but read again from the snapshots' offsets and
    decoded with the current schema."""

    def __init__(self, ingest: TableIngest) -> None:
        super().__init__(f"table {ingest.table_id} changed under the ingestion")
        self.ingest = ingest


@dataclass(frozen=True)
class IngestTopic:
    """A table fed from Kafka, and the format of its messages."""

    table_id: str
    fmt: Format = "json"

    @property
    def topic(self) -> str:
        return TOPIC_PREFIX + self.table_id

    @property
    def dead_letter_topic(self) -> str:
        return DEAD_LETTER_PREFIX + self.table_id


def parse_ingest(spec: str) -> IngestTopic:
    """`db.table` or `db.table:json` / `db.table:debezium`."""
    table_id, _, fmt = spec.partition(":")
    split_identifier(table_id)  # InvalidInputError for a bad name
    fmt = fmt or "json"
    if fmt not in FORMATS:
        raise InvalidInputError(f"ingest {spec!r}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    return IngestTopic(table_id, cast(Format, fmt))


class _Rebalance(ConsumerRebalanceListener):
    """Notes the rebalance for the ingestion thread: kafka-python calls listeners on its IO thread, where
    no blocking consumer call may run, so the work happens after `poll` returns (see `_after_rebalance`)."""

    def __init__(self, ingest: KafkaIngest) -> None:
        self.ingest = ingest

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self.ingest.rebalanced.set()

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self.ingest.rebalanced.set()


class KafkaIngest:
    """The ingestion thread of one writer process."""

    def __init__(self, bootstrap: str, topics: Sequence[IngestTopic], warehouse: str, client: CatalogClient,
                 metrics: WriterMetrics, writer_id: str, commit_interval_s: float, spill_root: str | None,
                 max_poll_records: int = 20_000, topic_partitions: int = 4) -> None:
        self.bootstrap = bootstrap
        self.topics = {t.topic: t for t in topics}
        self.catalog = FileSystemCatalog(warehouse)
        self.client = client
        self.metrics = metrics
        self.commit_user = f"{writer_id}-{uuid.uuid4().hex[:8]}"
        self.commit_interval_s = commit_interval_s
        self.spill_root = spill_root
        self.max_poll_records = max_poll_records
        self.topic_partitions = topic_partitions
        self._loop = BackgroundLoop("kafka-ingest", self._loop_step, interval_s=0.0, error_wait_s=1.0,
                                    on_error=self._step_failed, on_exit=self._close, what="Kafka ingestion",
                                    logger=_log)
        self._consumer: Any | None = None
        self._dead_letters: Publisher | None = None
        self._tables: dict[str, TableIngest] = {}
        self._retract: dict[str, bool] = {}
        self._pending: dict[TopicPartition, int] = {}  # next offset of what is buffered, per partition
        self._known: dict[TopicPartition, int] = {}  # next offset committed (or restored), per partition
        self._paused: dict[TopicPartition, float] = {}  # partitions paused by back-pressure, until
        self._first_pending: float | None = None
        self._topic_ids: dict[str, str] = {}  # the id of the log the positions were read from, per topic
        self.ready = threading.Event()  # set once the first assignment has been handled
        self.rebalanced = threading.Event()  # set by the rebalance listener, handled after `poll`

    def start(self) -> KafkaIngest:
        self._loop.start()
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Commit what is buffered and the offsets, leave the group, stop the thread."""
        self._loop.stop(timeout_s)

    def _table(self, table_id: str) -> TableIngest:
        ingest = self._tables.get(table_id)
        user = self.commit_user
        if ingest is not None and ingest.stale:  # dropped and created again: the rows are read again from Kafka
            ingest.close()
            ingest = None
            user = f"{self.commit_user}-{uuid.uuid4().hex[:4]}"  # identifiers start again at 1
        if ingest is None:
            table = self.catalog.get_table(table_id)
            ingest = self._tables[table_id] = TableIngest(table, self.client, user, self.metrics, self.spill_root)
            self._retract[table_id] = needs_retractions(table.schema)
        return ingest

    def _loop_step(self) -> float | None:
        """Until the topics and tables exist, try to start every 2 s; then one poll-and-buffer step."""
        if self._consumer is None:
            try:
                ensure_topics(self.bootstrap, [*self.topics, *(t.dead_letter_topic for t in self.topics.values())],
                              self.topic_partitions, timeout_s=10)
                for t in self.topics.values():
                    self._table(t.table_id)  # NotFoundError until the table exists
            except Exception as e:
                _log.warning("Kafka ingestion cannot start yet: %s", e)
                return 2.0
            if self._dead_letters is None:
                self._dead_letters = Publisher(self.bootstrap)
            self._consumer = consumer(self.bootstrap, GROUP_ID, list(self.topics), listener=_Rebalance(self),
                                      max_poll_records=self.max_poll_records, max_partition_fetch_bytes=8 << 20)
        self._step(self._consumer)
        return 0.0  # the poll waits for records itself

    def _step_failed(self, e: Exception) -> None:
        """Anything unexpected: start over from the committed offsets (after the loop's 1 s error wait)."""
        _log.exception("ingestion step failed (%s): reading again from the offsets in the snapshots", e)
        if self._consumer is None:
            return
        try:
            self._reset()
        except Exception:  # the thread must live on: the next step starts over again
            _log.exception("resetting the ingestion failed; trying again")
            self.rebalanced.set()

    def _close(self) -> None:
        """On the ingestion thread as it ends: commit what is buffered, then close what the steps opened."""
        try:
            if self._consumer is not None:
                self.commit_all()
        finally:
            try:
                if self._consumer is not None:
                    self._consumer.close(autocommit=False)
            finally:
                if self._dead_letters is not None:
                    self._dead_letters.close()
                for ingest in self._tables.values():
                    ingest.close()

    def _step(self, c: Any) -> None:
        now = time.monotonic()
        for tp, until in list(self._paused.items()):
            if now >= until:
                del self._paused[tp]
                resume(c, tp)
        free_parked_records(c)  # parked records come back one partition per poll: every poll may need it
        batches = c.poll(timeout_ms=200)
        if self._topic_replaced(c):
            self.rebalanced.set()  # the positions point into a log that is gone: start over as after a rebalance
        if self.rebalanced.is_set():
            self._after_rebalance()
            return  # what this poll returned was fetched from positions the rewind replaced
        try:
            for tp, records in batches.items():
                if tp in self._paused:
                    continue
                if not self._consume(tp, records):  # the table's buckets are full: read these again later
                    c.seek(tp, records[0].offset)
                    c.pause(tp)
                    self._paused[tp] = time.monotonic() + PAUSE_S
                    continue
                high = c.highwater(tp)
                if high is not None:
                    self.metrics.consumer_lag.labels(tp.topic).set(max(0, high - records[-1].offset - 1))
        except _TableChanged as e:
            self._catch_up(e)
            return  # the rest of this poll was fetched from positions the rewind replaced
        if self._first_pending is not None and time.monotonic() - self._first_pending >= self.commit_interval_s:
            self.commit_all()

    def _topic_replaced(self, c: Any) -> bool:
        """Whether a topic read from now has another id than when the positions were restored."""
        for topic, known in self._topic_ids.items():
            current = _topic_id(c, topic)
            if current is not None and current != known:
                _log.warning("topic %s was created again (id %s, was %s)", topic, current, known)
                return True
        return False

    def _consume(self, tp: TopicPartition, records: Sequence[object]) -> bool:
        """Buffer the records of one partition; False (nothing buffered) when back-pressure refuses them."""
        spec = self.topics[tp.topic]
        ingest = self._table(spec.table_id)
        values = [r.value for r in records]  # type: ignore[attr-defined]
        result = decode_messages(ingest.table.schema, values, spec.fmt, self._retract[spec.table_id],
                                 table=spec.table_id)
        rejected = list(result.rejected)
        if rejected and ingest.outdated():  # a dead letter is final: not for a field of the table's new schema
            raise _TableChanged(ingest)
        if result.batch.num_rows:
            try:
                self._write(ingest, result.batch)
            except BackPressureError as e:
                if relayed(e):
                    # the catalog's, met while flushing a full buffer: that failed the whole group, so the rows
                    # of every partition buffered since the last commit are gone; only reading again from the
                    # committed offsets gets them back (a pause would commit the others' offsets without them)
                    raise
                _log.info("%s: pausing %s", e, tp)  # refused before anything was buffered
                return False
            except (TableReplacedError, TableAlteredError) as e:
                raise _TableChanged(ingest) from e
            except InvalidInputError as e:
                if relayed(e):  # the catalog's refusal, not the rows' fault: a dead letter would be final
                    raise
                # the table refused the batch (e.g. a delete its merge engine does not take): find the
                # messages at fault one by one; the others are written in order
                try:
                    rejected += self._write_each(ingest, result.batch, result.source_index)
                except (TableReplacedError, TableAlteredError) as e:
                    raise _TableChanged(ingest) from e
                rejected.sort()
        for index, reason in rejected:
            r = records[index]
            assert self._dead_letters is not None
            self._dead_letters.publish(spec.dead_letter_topic, r.key,  # type: ignore[attr-defined]
                                       dead_letter_value(r.value, reason, tp.topic, tp.partition,  # type: ignore
                                                         r.offset), timeout_s=30)  # type: ignore[attr-defined]
        self.metrics.messages.labels(tp.topic, "dead_letter").inc(len(rejected))
        self.metrics.messages.labels(tp.topic, "tombstone").inc(result.tombstones)
        self.metrics.messages.labels(tp.topic, "rows").inc(len(values) - len(rejected) - result.tombstones)
        self.metrics.bytes_in.labels("kafka").inc(sum(len(v) for v in values if v))
        self._pending[tp] = records[-1].offset + 1  # type: ignore[attr-defined]
        if self._first_pending is None:
            self._first_pending = time.monotonic()
        return True

    def _write_each(self, ingest: TableIngest, batch: pa.Table, source: np.ndarray) -> list[tuple[int, str]]:
        """Write the rows of each message alone (the error path only); the messages the table refused."""
        refused = []
        starts = np.flatnonzero(np.r_[True, source[1:] != source[:-1]])
        for a, b in zip(starts, np.r_[starts[1:], len(source)], strict=True):
            try:
                self._write(ingest, batch.slice(int(a), int(b - a)))
            except InvalidInputError as e:
                if relayed(e):
                    raise
                refused.append((int(source[a]), str(e)))
        return refused

    def _write(self, ingest: TableIngest, batch: pa.Table) -> None:
        """Buffer rows, never waiting (the consumer must keep polling) nor committing them without their offsets:
        an altered table is not adopted by committing the buffer but raises TableAlteredError (see `_catch_up`)."""
        ingest.write(batch, time.monotonic(), adopt_by_commit=False)

    def commit_all(self) -> None:
        """Commit every table's buffer with its partitions' offsets, then commit those offsets to Kafka."""
        if not self._pending:
            return
        by_table: dict[str, dict[TopicPartition, int]] = defaultdict(dict)
        # every known position of the table's partitions, so a quiet partition's offset stays in recent
        # snapshots and never expires with old ones
        for tp, offset in {**self._known, **self._pending}.items():
            by_table[self.topics[tp.topic].table_id][tp] = offset
        for table_id in list(by_table):
            if not any(self.topics[tp.topic].table_id == table_id for tp in self._pending):
                del by_table[table_id]
        done: dict[TopicPartition, OffsetAndMetadata] = {}
        try:
            for table_id, offsets in by_table.items():
                props = {offset_key(tp.topic, tp.partition): str(o) for tp, o in offsets.items()}
                props.update({topic_id_key(t): self._topic_ids[t] for t in {tp.topic for tp in offsets}
                              if t in self._topic_ids})
                self._table(table_id).commit(props, resend_until=self._loop.stopping)
                done.update({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
        except Exception as e:
            _log.warning("ingestion commit failed (%s): dropping the buffers and reading again from the offsets "
                         "in the latest snapshots", e)
            self._reset(e)
            return
        self._known.update({tp: om.offset for tp, om in done.items()})
        self._pending.clear()
        self._first_pending = None
        if done and self._consumer is not None:
            try:
                self._consumer.commit(done)
            except Exception as e:  # only a hint: the snapshot holds the truth
                _log.info("Kafka offset commit failed: %s", e)

    def _reset(self, reason: BaseException | None = None) -> None:
        """Drop every buffer and rewind every assigned partition to the offsets the snapshots record."""
        self._pending.clear()
        self._first_pending = None
        for ingest in self._tables.values():
            ingest.discard(reason or RuntimeError("ingestion restarted from the committed offsets"))
        c = self._consumer
        if c is not None:
            assigned = set(c.assignment())
            for tp in list(self._paused):
                if tp in assigned:  # a partition that left with a rebalance cannot be resumed (KeyError)
                    resume(c, tp)
            self._paused.clear()
            self.rewind(list(c.assignment()))

    def _catch_up(self, changed: _TableChanged) -> None:
        """A table changed under the ingestion: drop every buffer, rewind every partition to the snapshots'
        offsets (as after a rebalance: the buffers mix the tables' partitions), then move the table's ingest
        to its current schema, or let `_table` open the new table, so the messages are decoded again with it."""
        _log.warning("%s: reading again from the offsets in the snapshots with the table's current schema",
                     changed)
        self._reset(changed)
        changed.ingest.catch_up()  # nothing is buffered now: adopting a newer schema commits nothing

    def _after_rebalance(self) -> None:
        """Drop every buffer and rewind every assigned partition to the offsets the snapshots record.

        The buffers mix rows of several partitions, so keeping the partitions that stayed would still lose
        the rows of those that left: everything uncommitted is read again instead (at most one commit
        interval of messages). A partition that moved to another writer is read by it from the same offsets.
        """
        self.rebalanced.clear()
        self._known.clear()  # partitions that left are no longer this writer's to record
        self._reset(RuntimeError("Kafka partitions were reassigned; the rows are read again"))

    def rewind(self, partitions: list[TopicPartition]) -> None:
        """Seek each partition to the next offset the table's snapshots record (or keep Kafka's position)."""
        c = self._consumer
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp.topic].append(tp.partition)
        for topic, parts in by_topic.items():
            spec = self.topics.get(topic)
            if spec is None:
                continue
            current = _topic_id(c, topic) if c is not None else None
            if current is None:
                self._topic_ids.pop(topic, None)
            else:
                self._topic_ids[topic] = current
                recorded = recorded_topic_id(self.catalog, spec.table_id, topic)
                if recorded is not None and recorded != current and c is not None:
                    self._start_new_log(spec, [TopicPartition(topic, p) for p in parts], recorded, current)
                    continue
            offsets = committed_offsets(self.catalog, spec.table_id, topic, parts, current)
            for p in parts:
                if p in offsets and c is not None:
                    c.seek(TopicPartition(topic, p), offsets[p])
                    self._known[TopicPartition(topic, p)] = offsets[p]
                elif c is not None:
                    # no kept snapshot records it: Kafka's committed offset (made only after a catalog commit,
                    # so never ahead of the tables), else the beginning of the partition
                    tp = TopicPartition(topic, p)
                    kafka_offset = c.committed(tp)
                    if kafka_offset is None:
                        c.seek_to_beginning(tp)
                    else:
                        c.seek(tp, kafka_offset)
        self.ready.set()

    def _start_new_log(self, spec: IngestTopic, parts: list[TopicPartition], old: str, new: str) -> None:
        """Read a topic whose log was replaced from the new log's beginning, and commit a snapshot recording
        the new id with those offsets: from it on the old log's offsets are final (every buffer read from
        the old log was dropped before the rewind). Kafka's committed offsets are not used: a writer may
        have committed old-log offsets to the new broker before it noticed."""
        _log.warning("topic %s is a new log (id %s, the snapshots recorded %s): the old log is gone, reading the "
                     "new one from its beginning; messages of the old log past the offsets the snapshots record "
                     "must be produced again", spec.topic, new, old)
        c: Any = self._consumer
        starts = c.beginning_offsets(parts)
        for tp in parts:
            c.seek(tp, starts[tp])
            self._known[tp] = starts[tp]
        props = {offset_key(tp.topic, tp.partition): str(starts[tp]) for tp in parts}
        props[topic_id_key(spec.topic)] = new
        try:
            self._table(spec.table_id).commit(props)
        except Exception as e:  # only a marker: the next commit records the same; a later rewind starts over
            _log.warning("cannot record the new log of %s yet: %s", spec.topic, e)


def resume(c: Any, tp: TopicPartition) -> None:
    """Resume a paused partition so that it is fetched again (see `free_parked_records`)."""
    c.resume(tp)
    free_parked_records(c)


def free_parked_records(c: Any) -> None:
    """Let the consumer hand back the records it parked for partitions that were paused; call before `poll`.

    kafka-python 3.0.12 parks the records it had in hand for a partition that gets paused, and gives them
    back, one partition per `poll`, only when its in-line batch slot is None; but a drained batch stays in
    that slot (falsy, not None), and a partition with parked records is never fetched again: after a
    back-pressure pause it stayed silent for ever (seen after a broker restart, where empty partitions
    leave drained batches behind). A drained batch holds nothing, so the slot is freed.
    """
    fetcher = getattr(c, "_fetcher", None)  # no public API: kafka-python internals, checked by a test
    in_line = getattr(fetcher, "_next_partition_records", None)
    if in_line is not None and not in_line:
        fetcher._next_partition_records = None  # type: ignore[union-attr]


def _topic_id(c: Any, topic: str) -> str | None:
    """The broker's id of `topic` from the consumer's metadata (None when the broker gives none)."""
    cluster = getattr(getattr(c, "_client", None), "cluster", None)  # kafka-python has no public accessor
    tid = cluster.topic_id(topic) if cluster is not None and hasattr(cluster, "topic_id") else None
    return str(tid) if tid is not None else None
