"""The catalog as the one authority of a table's sequence numbers and (dynamic-bucket tables) bucket assignments,
shared by every writer replica and ingestion path (docs/writer-service.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.table.dynamic_bucket import Assignment
from lsmlake.table.write import CommitMessage


class CatalogSequences:
    """The catalog as the sequence-number authority of one table (see `lsmlake.table.sequence_numbers`)."""

    def __init__(self, client: CatalogClient, table_id: str, table_uuid: str) -> None:
        self.client = client
        self.table_id = table_id
        self.table_uuid = table_uuid

    def allocate(self, counts: Mapping[tuple[bytes, int], int]) -> dict[tuple[bytes, int], int]:
        return self.client.allocate_sequences(self.table_id, counts, self.table_uuid)


class CatalogBuckets:
    """The catalog as the bucket assigner of one dynamic-bucket table (see `lsmlake.table.dynamic_bucket`)."""

    def __init__(self, client: CatalogClient, table_id: str, table_uuid: str) -> None:
        self.client = client
        self.table_id = table_id
        self.table_uuid = table_uuid

    def assign(self, keys: Sequence[tuple[bytes, np.ndarray]]) -> list[Assignment]:
        return self.client.assign_buckets(self.table_id, keys, self.table_uuid)

    def index_messages(self) -> list[CommitMessage]:
        return []  # the catalog committed every assignment before answering
