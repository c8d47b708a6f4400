"""A commit as the catalog receives it, and the bounds of its shape.

The catalog service reads one from each Commit (and CompleteCompaction) request; the checks here need no
table: they bound the work a request can ask for and refuse combinations no writer sends, before the
table's commit lock is taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lsmlake.auth.tokens import Principal
from lsmlake.catalog.commit.identity import request_id_limit
from lsmlake.catalog.reconcile import WRITES_PROPERTY
from lsmlake.errors import InvalidInputError
from lsmlake.format.snapshot import APPEND, COMPACT, OVERWRITE
from lsmlake.metastore.request_ids import check_request_ids
from lsmlake.table.dynamic_bucket import HASH_INDEX
from lsmlake.table.write import CommitMessage

# Bounds on one commit (gRPC's message size limit bounds the bytes; these bound the work).
MAX_CHANGES_PER_COMMIT = 10_000
MAX_FILES_PER_COMMIT = 100_000
MAX_PROPERTIES = 1_000
MAX_PROPERTY_CHARS = 64 * 1024
MAX_REQUEST_IDS = 100_000  # client writes in one commit
COMMIT_KINDS = (APPEND, COMPACT, OVERWRITE)


@dataclass(frozen=True)
class CommitRequest:
    """File changes to commit to a table as one snapshot, with the names that make a resend idempotent.

    `table_uuid`, when set, is the identity the writer saw (`FileStoreTable.table_uuid`); `request_ids`
    name the client writes an APPEND holds; `overwrite_all` / `overwrite_partitions` say what an
    OVERWRITE replaces (neither: only what its changes delete).
    """

    table_id: str
    kind: str
    commit_user: str
    identifier: int
    changes: Sequence[CommitMessage]
    properties: Mapping[str, str] = field(default_factory=dict)
    request_ids: Sequence[str] = ()
    table_uuid: str = ""
    overwrite_all: bool = False
    overwrite_partitions: Sequence[bytes] = ()


def check_request(request: CommitRequest, principal: Principal | None) -> None:
    """InvalidInputError naming the field of a commit whose shape no writer sends or whose size is out of bounds."""
    kind = request.kind
    if kind not in COMMIT_KINDS:
        raise InvalidInputError(f"kind {kind} is not accepted: use {', '.join(COMMIT_KINDS)}")
    if not request.commit_user:
        raise InvalidInputError("commit_user must not be empty")
    changes = request.changes
    if len(changes) > MAX_CHANGES_PER_COMMIT:
        raise InvalidInputError(f"changes has {len(changes)} entries; at most {MAX_CHANGES_PER_COMMIT}")
    files = sum(len(c.new_files) + len(c.deleted_files) + len(c.changelog_files) for c in changes)
    if files > MAX_FILES_PER_COMMIT:
        raise InvalidInputError(f"the commit names {files} files; at most {MAX_FILES_PER_COMMIT}")
    props = request.properties
    if len(props) > MAX_PROPERTIES or any(len(k) + len(v) > MAX_PROPERTY_CHARS for k, v in props.items()):
        raise InvalidInputError(f"properties: at most {MAX_PROPERTIES} entries of at most {MAX_PROPERTY_CHARS} chars")
    for i, c in enumerate(changes):
        if c.bucket < -2 or c.total_buckets < -2:  # -1 / -2: Paimon's dynamic and postpone bucket modes
            raise InvalidInputError(f"changes[{i}]: bucket {c.bucket} / total_buckets {c.total_buckets} is invalid")
        # an APPEND may replace a bucket's HASH index (a dynamic-bucket assignment), never delete data
        if kind == APPEND and (c.deleted_files or any(e.index_type != HASH_INDEX for e in c.deleted_index_files)):
            raise InvalidInputError(f"changes[{i}]: an APPEND commit cannot delete files; use COMPACT or OVERWRITE")
    if kind != OVERWRITE and (request.overwrite_all or request.overwrite_partitions):
        raise InvalidInputError("overwrite_all_partitions and overwrite_partitions are for OVERWRITE commits only")
    if request.request_ids:
        if kind != APPEND:
            raise InvalidInputError("request_ids are for APPEND commits only")
        if WRITES_PROPERTY in props:
            raise InvalidInputError(f"property {WRITES_PROPERTY!r} is the catalog's: pass request_ids instead")
        if len(request.request_ids) > MAX_REQUEST_IDS:
            raise InvalidInputError(f"request_ids has {len(request.request_ids)} entries; at most {MAX_REQUEST_IDS}")
        check_request_ids(request.request_ids, request_id_limit(principal))
