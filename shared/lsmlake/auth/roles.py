"""The role model: reader < writer < admin, and the least role each RPC needs.

Every method of every lsmlake service is listed explicitly; a method missing from the table is denied
to every caller (a new RPC stays closed until someone decides who may call it, and a test fails until
then). Health checking and reflection are open so that probes and tools like grpcurl work without a token.
"""

from __future__ import annotations

import enum


class Role(enum.IntEnum):
    """What a token may do; a higher role may do everything a lower one may."""

    READER = 1  # describe and read tables, snapshots, scan plans, compaction status
    WRITER = 2  # also write rows and commit new files (APPEND)
    SERVICE = 3  # also what the writer and compactor services do for everyone: the compaction timeline,
    #             sequence numbers, the `lsmlake.*` snapshot properties (Kafka offsets), other callers' request ids
    ADMIN = 4  # also create, alter and drop databases and tables, overwrite, expire snapshots, remove files

    @staticmethod
    def parse(text: str) -> Role:
        try:
            return Role[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown role {text!r}; expected one of "
                             f"{', '.join(r.name.lower() for r in Role)}") from None


# Services any caller may use, with or without a token.
OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
                 "grpc.reflection.v1.ServerReflection")

_C = "lsmlake.v1.CatalogService"
_W = "lsmlake.v1.WriterService"
_K = "lsmlake.v1.CompactorService"
_S = "lsmlake.v1.StatusService"

METHOD_ROLES: dict[str, Role] = {
    # catalog: reading
    f"/{_C}/ListDatabases": Role.READER,
    f"/{_C}/GetTable": Role.READER,
    f"/{_C}/ListTables": Role.READER,
    f"/{_C}/GetSnapshot": Role.READER,
    f"/{_C}/ListSnapshots": Role.READER,
    f"/{_C}/LatestSnapshot": Role.READER,
    f"/{_C}/SnapshotAtTime": Role.READER,
    f"/{_C}/PlanScan": Role.READER,
    f"/{_C}/WatchSnapshots": Role.READER,
    f"/{_C}/ListCompactionPlans": Role.READER,
    f"/{_C}/FindWrites": Role.READER,
    f"/{_C}/ListTableHealth": Role.READER,
    f"/{_C}/ListTags": Role.READER,
    f"/{_C}/GetTag": Role.READER,
    # catalog: adding data (what a commit may do beyond APPEND is checked in the commit: `commit_roles`)
    f"/{_C}/Commit": Role.WRITER,
    # catalog: the writer and compactor services' own calls (a compaction replaces a table's files)
    f"/{_C}/AllocateSequences": Role.SERVICE,
    f"/{_C}/AssignBuckets": Role.SERVICE,
    f"/{_C}/RequestCompaction": Role.SERVICE,
    f"/{_C}/StartCompaction": Role.SERVICE,
    f"/{_C}/CompleteCompaction": Role.SERVICE,
    f"/{_C}/RollbackCompaction": Role.SERVICE,
    # catalog: definitions and deletions
    f"/{_C}/CreateDatabase": Role.ADMIN,
    f"/{_C}/DropDatabase": Role.ADMIN,
    f"/{_C}/CreateTable": Role.ADMIN,
    f"/{_C}/DropTable": Role.ADMIN,
    f"/{_C}/AlterTable": Role.ADMIN,
    f"/{_C}/RenameTable": Role.ADMIN,
    f"/{_C}/CreateTag": Role.ADMIN,
    f"/{_C}/DeleteTag": Role.ADMIN,
    f"/{_C}/ExpireSnapshots": Role.ADMIN,
    f"/{_C}/RemoveOrphanFiles": Role.ADMIN,
    f"/{_C}/SyncIceberg": Role.ADMIN,
    # status: the services' heartbeats, and who is up
    f"/{_S}/ListServices": Role.READER,
    f"/{_S}/Heartbeat": Role.SERVICE,
    # writer
    f"/{_W}/Write": Role.WRITER,
    f"/{_W}/WriteRows": Role.WRITER,
    # compactor: compaction rewrites files without changing what a table holds
    f"/{_K}/CompactionStatus": Role.READER,
    f"/{_K}/BucketLevels": Role.READER,
    f"/{_K}/TriggerCompaction": Role.WRITER,
}


def is_open(method: str) -> bool:
    """Whether `/package.Service/Method` needs no token."""
    return method.lstrip("/").split("/", 1)[0] in OPEN_SERVICES


def required_role(method: str) -> Role | None:
    """The least role allowed to call `/package.Service/Method`; None: nobody may (not in the table)."""
    return METHOD_ROLES.get(method)
