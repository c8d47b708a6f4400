"""`lake write` through a cluster as ONE commit, whatever its size: the data files are written here, into the
shared warehouse, and committed once through the catalog service, as a Spark job's are.

1. rows are numbered with sequence numbers the catalog hands out (`AllocateSequences`), the one authority every
   writer replica and ingestion path numbers with, so a change written later still wins; a dynamic-bucket
   table's keys get their buckets from the catalog too (`AssignBuckets`, committed by the catalog itself);
2. the files are committed in one `Commit` (APPEND) under a commit user of this write (`lake-write-<request
   id>` with --request-id): a commit whose outcome is unknown is sent again with the same user and identifier,
   which the catalog applies once; a run of the same --request-id after a success finds the first run's
   snapshot and writes nothing;
3. a commit that definitely failed deletes the files; after an unknown outcome they stay (a snapshot may name
   them).

Readers see all of the rows or none. The catalog's sequence numbers and bucket assignments are the writer
service's calls (role `service` when tokens are checked): a caller without it gets PermissionDeniedError before
anything is committed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa

from lsmlake.cli.progress import Progress, duration
from lsmlake.cli.records import human_size, plural
from lsmlake.client.client import Client
from lsmlake.errors import CommitStateUnknownError
from lsmlake.rpc.catalog_authorities import CatalogBuckets, CatalogSequences
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.table.dynamic_bucket import is_dynamic
from lsmlake.table.file_store_table import FileStoreTable

COMMIT_ATTEMPTS = 3  # a commit whose outcome is unknown is sent again, idempotently


@dataclass(frozen=True)
class StagedWrite:
    """What a staged write committed: its snapshot (an earlier run's, with `again`), its data files, bytes."""

    snapshot_id: int
    again: bool
    files: int
    size: int
    seconds: float

    def report(self, identifier: str, rows: int, files: str) -> str:
        if self.again:
            return (f"wrote 0 rows from {files} to {identifier}: this --request-id was written before, in snapshot "
                    f"{self.snapshot_id} (nothing written again)")
        return (f"wrote {plural(rows, 'row')} from {files} to {identifier} in snapshot {self.snapshot_id}, one commit "
                f"through the catalog service: {plural(self.files, 'data file')}, {human_size(self.size)}, "
                f"{duration(self.seconds)}")


def staged_write(client: Client, catalog: CatalogClient, table: FileStoreTable, batches: list[pa.Table],
                 request_id: str | None, progress: Progress) -> StagedWrite:
    """Write `batches` into `table` (opened on the shared warehouse) and commit them once through the catalog."""
    table_uuid = table.table_uuid
    write = table.new_write(CatalogSequences(catalog, table.identifier, table_uuid),
                            CatalogBuckets(catalog, table.identifier, table_uuid) if is_dynamic(table.schema)
                            else None)
    user = f"lake-write-{request_id}" if request_id else f"lake-write-{uuid.uuid4()}"
    if request_id:
        # a run after a success: the catalog would refuse a second commit under this name with other files
        earlier = next((s.id for s in table.snapshots.snapshots() if s.commit_user == user), None)
        if earlier is not None:
            progress.close()
            return StagedWrite(earlier, True, 0, 0, progress.seconds)
    try:
        for batch in batches:
            write.write(batch)
            progress.add(batch.num_rows)
        messages = write.prepare_commit()
        result = None
        unknown = False  # an earlier attempt may have been applied: then "already committed" names THESE files
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                result = client.commit(table.identifier, messages, commit_user=user, commit_identifier=1)
                break
            except CommitStateUnknownError:
                unknown = True
                if attempt == COMMIT_ATTEMPTS:
                    raise
        assert result is not None
    except CommitStateUnknownError:
        raise  # the files stay: the snapshot may name them
    except BaseException:
        write.abort()
        raise
    finally:
        progress.close()
    again = result.already_committed and not unknown
    if again:
        write.abort()  # this run's files: the earlier run's snapshot holds the rows
    # after an unknown outcome the snapshot is this run's own: its files must stay (at worst, orphans to clean)
    new = [f for m in messages for f in m.new_files]
    return StagedWrite(result.snapshot_id, again, len(new), sum(f.file_size for f in new), progress.seconds)
