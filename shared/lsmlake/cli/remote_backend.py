"""The backend over the services of a cluster (`lsmlake.client.Client`).

Every change goes through a service: with a catalog service given, nothing is committed behind the catalog's back.
`lake write` writes its data files here, numbered by the catalog, and commits them once through the catalog
(`staged_write.py`), as Spark's executors do, so a write of any size is one snapshot as it is locally; a token
that may not number rows writes through the writer service in parts instead, and says so. A compaction without a
compactor service is refused with the flag that is missing (`MissingServiceError`); `lake rescale` writes its
files here and commits them through the catalog.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lsmlake.cli.backend import CompactOutcome, NewTable, Services, WriteOutcome
from lsmlake.cli.errors import UsageError
from lsmlake.cli.local_backend import LocalBackend, rescale_messages
from lsmlake.cli.progress import Progress, Waiting, duration
from lsmlake.cli.records import plural
from lsmlake.client.client import Client
from lsmlake.client.compaction import CompactResult
from lsmlake.errors import CommitStateUnknownError, PermissionDeniedError
from lsmlake.format.predicate import Predicate
from lsmlake.metastore.request_ids import part_request_id
from lsmlake.rpc.security import ChannelSecurity
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import delete_new_files
from lsmlake.table.scan import Split
from lsmlake.table.schema_change import SchemaChange

#: rows per write request; each part is committed before the next is sent
PART_ROWS = 100_000
ALTER_TIMEOUT_S = 60
#: how long `lake compact` waits for the compactor by default (`--timeout`)
COMPACT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ServiceWrite:
    """A write through the writer service in parts of PART_ROWS rows, each its own commit."""

    snapshot_id: int
    parts: int
    parts_before: int  # parts an earlier run of the command (same --request-id) had written
    seconds: float
    why: str  # why not one commit through the catalog

    def report(self, identifier: str, rows: int, files: str) -> str:
        earlier = f" ({self.parts_before} of {self.parts} part(s) had been written before)" if self.parts_before else ""
        commits = "one commit" if self.parts == 1 else (
            f"in {self.parts} commits of up to {PART_ROWS:,} rows, which readers may see one by one")
        return (f"wrote {plural(rows, 'row')} from {files} to {identifier} through the writer service, {commits}: "
                f"snapshot {self.snapshot_id}{earlier}, {duration(self.seconds)} (not one commit through the catalog: "
                f"{self.why})")


@dataclass(frozen=True)
class ServiceCompaction:
    result: CompactResult
    seconds: float

    def report(self, identifier: str) -> list[str]:
        r = self.result
        named = r.buckets_queued + r.buckets_elsewhere
        snaps = ", ".join(map(str, r.snapshot_ids)) or "none needed"
        lines = [f"compacted {identifier} through the compactor service: {len(r.compacted):,} of "
                 f"{plural(named, 'bucket')} of snapshot {r.request_snapshot_id}, COMPACT snapshot(s) {snaps}, "
                 f"{duration(self.seconds)}"]
        if r.not_compacted:
            lines.append(f"not compacted: {plural(len(r.not_compacted), 'bucket')}")
            for n in r.not_compacted:
                where = "/".join(f"{k}={v}" for k, v in n.partition.items())
                lines.append(f"  {where + ' ' if where else ''}bucket {n.bucket}: {n.reason}")
        if r.timed_out and r.wait_limit_s is not None:
            lines.append(f"the compactor stopped waiting after {r.wait_limit_s:.1f} s (the call's deadline less a "
                         "margin); the buckets still queued are compacted later (a longer --timeout waits for them)")
        return lines


class MissingServiceError(UsageError):
    """A command needs a service the cluster given does not have."""

    def __init__(self, command: str, services: Services, service: str, env: str) -> None:
        super().__init__(f"lake {command} goes through the {service} service when a catalog service is given "
                         f"({services.catalog}), and none is: pass --{service}-service HOST:PORT (or set ${env}), "
                         f"or start the cluster with a {service}")
        self.service = service


class RemoteBackend:
    """Changes through the catalog, writer and compactor services of a cluster."""

    def __init__(self, services: Services, security: ChannelSecurity, warehouse: str | None,
                 local: LocalBackend) -> None:
        self.services = services
        self.security = security
        self.warehouse = warehouse
        self.local = local

    def _client(self) -> Client:
        s, sec = self.services, self.security
        return Client(s.catalog, writer=s.writer, compactor=s.compactor, warehouse=self.warehouse,
                      token=sec.token, tls_ca=sec.tls_ca, tls_cert=sec.tls_cert, tls_key=sec.tls_key)

    def create_table(self, table: NewTable, if_not_exists: bool) -> None:
        with self._client() as client:
            client.create_table(table.identifier, table.schema_text, table.primary_keys, table.partition_keys,
                                table.options, ignore_if_exists=if_not_exists)

    def alter_table(self, identifier: str, changes: Sequence[SchemaChange]) -> int:
        with self._client() as client:
            return client.apply_schema_changes(identifier, changes, timeout_s=ALTER_TIMEOUT_S).schema_id

    def drop_table(self, identifier: str, if_exists: bool) -> bool:
        with self._client() as client:
            return client.drop_table(identifier, ignore_if_not_exists=if_exists)

    def write(self, table: FileStoreTable, batches: list[pa.Table], request_id: str | None,
              progress: Progress) -> WriteOutcome:
        """One commit through the catalog (`staged_write`); a caller the catalog does not let number rows (role
        writer, when tokens are checked) writes through the writer service instead, in parts, and is told so."""
        from lsmlake.cli.staged_write import staged_write
        from lsmlake.rpc.catalog_client import CatalogClient

        catalog = CatalogClient(self.services.catalog, security=self.security)
        try:
            with self._client() as client:
                return staged_write(client, catalog, table, batches, request_id, progress)
        except PermissionDeniedError as e:
            if not self.services.writer:
                raise
            refused = str(e)
        finally:
            catalog.close()
        return self._write_in_parts(table, batches, request_id, Progress(progress.what, progress.total), refused)

    def _write_in_parts(self, table: FileStoreTable, batches: list[pa.Table], request_id: str | None,
                        progress: Progress, refused: str) -> WriteOutcome:
        data = pa.concat_tables(batches, promote_options="default")
        parts = range(0, data.num_rows, PART_ROWS)
        before = 0
        snapshot_id = 0
        with self._client() as client:
            try:
                for n, lo in enumerate(parts):  # acknowledged part by part, so the bar means committed
                    reply = client.write(table.identifier, data.slice(lo, PART_ROWS), commit_now=True,
                                         request_id=part_request_id(request_id, n, len(parts)) or None)
                    before += reply.already_written
                    snapshot_id = reply.snapshot_id
                    progress.add(min(PART_ROWS, data.num_rows - lo))
            finally:
                progress.close()
        return ServiceWrite(snapshot_id, len(parts), before, progress.seconds, refused)

    def plan_scan(self, table: FileStoreTable, snapshot_id: int | None,
                  predicate: Predicate | None) -> tuple[FileStoreTable, list[Split]]:
        """The catalog plans (pruning by the predicate); the files are read from the warehouse as this process
        opened it (its storage settings), as `Client.scan` reads them."""
        with self._client() as client:
            return table, client.plan_splits(table, snapshot_id=snapshot_id, predicate=predicate)

    def compact(self, identifier: str, full: bool, partition: Sequence[tuple[str, str]],
                timeout_s: float | None = None) -> CompactOutcome:
        """Waits up to `timeout_s` (default COMPACT_TIMEOUT_S) for the compactor, showing how long so far."""
        if not self.services.compactor:
            raise MissingServiceError("compact", self.services, "compactor", "LAKE_COMPACTOR")
        limit = timeout_s if timeout_s is not None else COMPACT_TIMEOUT_S
        with self._client() as client, Waiting(f"compacting {identifier} through the compactor service",
                                               limit) as waiting:
            result = client.compact(identifier, full=full, wait=True, partition=dict(partition) or None,
                                    timeout_s=limit)
        return ServiceCompaction(result, waiting.seconds)

    def rescale(self, identifier: str, buckets: int, partition: Sequence[tuple[str, str]]) -> tuple[int | None, int]:
        """The new files are written into the shared warehouse, then committed through the catalog (admin)."""
        table = self.local.catalog.get_table(identifier)
        messages = rescale_messages(table, buckets, partition)
        if not messages:
            return None, 0
        try:
            with self._client() as client:
                result = client.commit(identifier, messages, commit_user=f"lake-rescale-{uuid.uuid4()}",
                                       overwrite=True, partitions=[])
        except CommitStateUnknownError:
            raise
        except BaseException:
            delete_new_files(table, messages)
            raise
        return result.snapshot_id, len({m.partition for m in messages})

    def expire(self, identifier: str, retain_min: int | None, retain_max: int | None,
               older_than_ms: int | None) -> list[int]:
        with self._client() as client:
            result = client.expire(identifier, retain_min=retain_min, retain_max=retain_max,
                                   older_than_ms=older_than_ms)
        return list(result.expired_snapshot_ids)

    def sync_iceberg(self, identifier: str) -> tuple[int, str, int]:
        with self._client() as client:
            done = client.sync_iceberg(identifier)
        return done.snapshot_id, done.metadata_location, done.published
