"""`FileStoreTable`: a table with the one-call batch writes (write, commit, and compact where the table needs it)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from lsmlake.errors import CommitConflictError, CommitStateUnknownError, InvalidInputError, StorageError
from lsmlake.format import options as opts
from lsmlake.format.predicate import Predicate
from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER
from lsmlake.table.commit import CommitResult
from lsmlake.table.compact import compact_table
from lsmlake.table.dynamic_bucket import FreshAssigner, is_cross_partition, is_dynamic
from lsmlake.table.file_store import FileStore, table_identity
from lsmlake.table.write import CommitMessage

__all__ = ["FileStoreTable", "table_identity"]

_log = logging.getLogger(__name__)


class FileStoreTable(FileStore):
    """A Paimon table in a warehouse folder, with the batch writes that commit in one call."""

    def write_arrow(self, data: pa.Table | pa.RecordBatch | Iterable[pa.Table | pa.RecordBatch],
                    commit_user: str | None = None, properties: dict[str, str] | None = None,
                    identifier: int = BATCH_COMMIT_IDENTIFIER) -> CommitResult | None:
        """Write rows (one table or several) and commit them as one APPEND snapshot.

        Returns None when there was nothing to write. On any failure the written files are deleted,
        except when the commit's outcome is unknown (then they may be referenced and must stay).
        """
        w = self.new_write()
        commit = self.new_commit(commit_user)
        commit.build_base_ahead()  # on the snapshot the writer just looked at, while the rows are written
        try:
            for batch in [data] if isinstance(data, (pa.Table, pa.RecordBatch)) else data:
                w.write(batch)
            messages = w.prepare_commit()
            if not messages:
                return None
            result = commit.commit(messages, identifier=identifier, properties=properties)
        except CommitStateUnknownError:
            raise
        except BaseException:
            w.abort()
            raise
        finally:
            commit.discard_base_ahead()
        self.compact_after_write()
        return result

    def compact_after_write(self) -> None:
        """Deletion-vector tables hide level 0 from readers: move it up now, unless a compactor owns that."""
        if (self.schema.is_primary_key_table and self.options.get(opts.DELETION_VECTORS_ENABLED)
                and not self.options.get(opts.WRITE_ONLY)):
            try:
                compact_table(self)
            except CommitConflictError as e:
                # the write is committed; another writer or compactor is moving level 0 up already
                _log.info("compaction after a write to %s skipped: %s", self.identifier, e)
            except StorageError as e:
                # the write is committed (raising would invite a retry that applies it twice); the next
                # compaction moves level 0 up once the storage has room again
                _log.warning("compaction after a write to %s failed: %s", self.identifier, e)

    def overwrite_arrow(self, data: pa.Table, partition: Mapping[str, Any] | None = None) -> CommitResult:
        """Replace the partitions the rows fall into (or the given static partition, or the whole table)."""
        if is_cross_partition(self.schema):
            raise InvalidInputError(f"cannot overwrite {self.identifier}: a cross-partition upsert table's keys can be "
                                    "in partitions the overwrite does not replace; delete and write instead")
        # a dynamic-bucket table's replaced partitions lose their index with their files: assign afresh
        w = self.new_write(assigner=FreshAssigner(self.schema, self.indexes) if is_dynamic(self.schema) else None)
        try:
            w.write(data)
            messages = w.prepare_commit()
            result = self.new_commit().overwrite(messages, self.overwritten_partitions(messages, partition))
        except CommitStateUnknownError:
            raise
        except BaseException:
            w.abort()
            raise
        self.compact_after_write()
        return result

    def overwritten_partitions(self, messages: Sequence[CommitMessage],
                               partition: Mapping[str, Any] | None) -> list[bytes] | None:
        """The partitions an overwrite of `messages` replaces (None: the whole table), for `partition` or the rows'."""
        if partition is None and self.schema.partition_keys:
            parts: list[bytes] | None = sorted({m.partition for m in messages})
        elif partition is not None:
            pred = Predicate.of(partition)
            latest = self.snapshots.latest()
            parts = sorted({s.partition for s in self.new_scan(predicate=pred, snapshot=latest, all_levels=True).plan()}
                           | {m.partition for m in messages})
        else:
            parts = None
        return parts
