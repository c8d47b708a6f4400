"""Who a commit belongs to, what it may do, and when a resend is the same commit.

A commit is answered "already committed" when its (commit user, identifier, kind) was recorded: the
protocol that lets a writer resend after a lost reply. Snapshots show their users and identifiers to
every reader, so a caller-chosen user is not an identity: with tokens, the commit users, client request
ids and plan owners a caller names live in its principal's namespace (`<principal>/<name>`), and a
recorded commit answers a resend only when the resend carries the same files (a digest kept in the
snapshot's properties). The services (role service) act for their callers: the request ids the writer
service commits are already in its clients' namespaces and are taken as they are. A REST client names
its commit user as Paimon's engines do, without a namespace; such a bare user belongs, on a table, to
the first principal that commits under it (a claim in the metadata store): Paimon's committers trust
their user's identifiers, and a stranger's commit under a job's user with a larger identifier would
make the job drop its checkpointed data on restore.

What a commit does decides the role it needs beyond the method's writer: OVERWRITE and a COMPACT
without a plan remove data (admin), and so does dropping a bucket's deletion vectors (a writer deletes
rows by replacing them with larger ones); any change of the HASH index is the bucket assigner's
(service); `lsmlake.*` snapshot properties steer the services (Kafka offsets, client writes), so only
they set them.

The digest is taken of the commit's file changes as lsmlake's value types (what the manifests will
hold), in a canonical JSON form; it is versioned, as catalogs before it digested the protobuf bytes of
the request: a recorded digest of that older form cannot be recomputed here and answers as a snapshot
expired since does (the record alone decides).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lsmlake.auth.principal import SEPARATOR, current_principal, owned
from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal
from lsmlake.errors import AlreadyExistsError, NotFoundError, PermissionDeniedError
from lsmlake.format.index_manifest import DELETION_VECTORS, HASH_INDEX, IndexEntry
from lsmlake.format.snapshot import COMPACT, OVERWRITE
from lsmlake.metastore.commit_users import CommitUserClaims
from lsmlake.metastore.request_ids import MAX_REQUEST_ID, MAX_STORED_REQUEST_ID
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

#: the snapshot property holding the digest of the files a commit carried
DIGEST_PROPERTY = "lsmlake.table.commit-digest"
RESERVED_PREFIX = "lsmlake."
#: the form of the digests this module writes (older catalogs wrote a bare hex digest of protobuf bytes)
DIGEST_VERSION = "v2:"


def require(principal: Principal | None, role: Role, what: str) -> None:
    """PermissionDeniedError unless the caller (None: a service that checks no tokens) has `role`."""
    if principal is not None and principal.role < role:
        raise PermissionDeniedError(f"{principal.name} has role {principal.role.name.lower()}; {what} needs "
                                    f"{role.name.lower()}; nothing was applied")


def check_rights(kind: str, properties: Mapping[str, str], principal: Principal | None, planned: bool = False,
                 index_added: Sequence[IndexEntry] = (), index_removed: Sequence[IndexEntry] = ()) -> None:
    """The role a commit needs for what it does (the method's own role was checked before).

    `index_added` / `index_removed` are its index changes: the index files a gRPC commit's changes carry, or how
    the index manifest a REST client sent differs from the latest one (see the module)."""
    if any(e.index_type == HASH_INDEX for e in (*index_added, *index_removed)):
        # a wrong key set sends keys to a second bucket: only the assigner (AssignBuckets) writes it
        require(principal, Role.SERVICE, "changing the HASH index of a dynamic-bucket table")
    if kind == OVERWRITE:
        require(principal, Role.ADMIN, "an OVERWRITE commit (it removes rows)")
    if kind == COMPACT and not planned:
        require(principal, Role.ADMIN, "a COMPACT commit without a compaction plan (it removes files)")
    if kind not in (OVERWRITE, COMPACT) and _drops_vectors(index_added, index_removed):
        # a writer deletes rows by replacing a bucket's vector file with a larger one; dropping it undeletes them
        require(principal, Role.ADMIN, "removing a bucket's deletion vectors without a replacement (it brings "
                                       "deleted rows back)")
    reserved = sorted(k for k in properties if k.startswith(RESERVED_PREFIX))
    if reserved:
        require(principal, Role.SERVICE, f"setting snapshot properties {', '.join(reserved[:3])} (the "
                                         f"'{RESERVED_PREFIX}*' properties belong to lsmlake's services)")


def _drops_vectors(added: Sequence[IndexEntry], removed: Sequence[IndexEntry]) -> bool:
    """Whether a deletion-vector file goes without a new one for its bucket (a grown one is checked by content)."""
    replaced = {(e.partition, e.bucket) for e in added if e.index_type == DELETION_VECTORS}
    return any(e.index_type == DELETION_VECTORS and (e.partition, e.bucket) not in replaced for e in removed)


def check_commit_user(claims: CommitUserClaims, table_id: str, commit_user: str,
                      principal: Principal | None) -> None:
    """PermissionDeniedError when a bare commit user (no principal's namespace) of the table belongs to another
    principal; else it is the caller's from now on. Call it under the table's commit lock, after the commit's
    checks and in the transaction that publishes it: a refused commit claims nothing, a failed one rolls back."""
    if principal is None or SEPARATOR in commit_user:  # no tokens, or a namespaced user (checked by its prefix)
        return
    owner = claims.claim_commit_user(table_id, commit_user, principal.name)
    if owner != principal.name:
        raise PermissionDeniedError(
            f"commit user {commit_user[:80]!r} of table {table_id} belongs to another principal (the first to "
            f"commit under it there), not to {principal.name}: its commits would pass for that principal's; use "
            "a commit user of your own; nothing was applied")


def _canonical(value: object) -> object:
    """`value` as plain JSON values: dataclasses by field name (unset optional fields left out), bytes as hex."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(v) for f in dataclasses.fields(value)
                if (v := getattr(value, f.name)) is not None}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    return value


def files_digest(kind: str, changes: Sequence[CommitMessage], overwrite_all: bool = False,
                 overwrite_partitions: Sequence[bytes] = ()) -> str:
    """A digest of what a commit changes, the same for every resend of it (the order of changes aside)."""
    h = hashlib.sha256(kind.encode())
    h.update(b"all" if overwrite_all else b"some")
    for p in sorted(bytes(p) for p in overwrite_partitions):
        h.update(len(p).to_bytes(4, "big") + p)
    blobs = (json.dumps(_canonical(c), sort_keys=True, separators=(",", ":"), default=repr).encode()
             for c in changes)
    for blob in sorted(blobs):
        h.update(len(blob).to_bytes(8, "big") + blob)
    return DIGEST_VERSION + h.hexdigest()


@dataclass(frozen=True)
class CommitIdentity:
    """The names a commit is recorded under, in its principal's namespace, and the digest of its files."""

    user: str
    request_ids: list[str]
    digest: str

    @staticmethod
    def of(kind: str, commit_user: str, request_ids: Sequence[str], changes: Sequence[CommitMessage],
           overwrite_all: bool = False, overwrite_partitions: Sequence[bytes] = ()) -> CommitIdentity:
        principal = current_principal()
        return CommitIdentity(owned(commit_user, principal), request_ids_of(request_ids, principal),
                              files_digest(kind, changes, overwrite_all, overwrite_partitions))

    def check_same_files(self, table: FileStoreTable, snapshot_id: int, identifier: int) -> None:
        """AlreadyExistsError when the recorded commit carried other files than this resend.

        A snapshot expired since (hours later), or one recorded with an older form of digest, can no longer
        be compared; the record answers then.
        """
        try:
            snap = table.snapshots.snapshot(snapshot_id)
        except NotFoundError:
            return
        recorded = (snap.properties or {}).get(DIGEST_PROPERTY)
        if recorded is not None and recorded.startswith(DIGEST_VERSION) and recorded != self.digest:
            raise AlreadyExistsError(
                f"commit ({self.user!r}, {identifier}) was committed before as snapshot {snapshot_id} with "
                "other files; nothing was applied: a resend carries the same files, a new commit a new identifier")


def request_id_limit(principal: Principal | None) -> int:
    """The longest request id a caller may name: a service names ids already in its clients' namespaces."""
    return MAX_STORED_REQUEST_ID if principal is not None and principal.role >= Role.SERVICE else MAX_REQUEST_ID


def request_ids_of(request_ids: Sequence[str], principal: Principal | None) -> list[str]:
    """Client write ids in their owner's namespace; a service passes ids already in its clients' namespaces."""
    if principal is None or principal.role >= Role.SERVICE:
        return list(request_ids)
    return [owned(r, principal) for r in request_ids]


__all__ = ["DIGEST_PROPERTY", "DIGEST_VERSION", "CommitIdentity", "check_commit_user", "check_rights", "files_digest",
           "request_id_limit", "request_ids_of", "require"]
