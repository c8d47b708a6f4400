"""Commits that reuse another commit's identity or point their files anywhere (issue 19).

Two hostile shapes the generic mutation rarely builds: an `external_path` aimed at files the table does
not own (then expiration runs, which once deleted such a path), and a commit that reuses a recorded
(user, identifier) with other files (which was once answered "already committed" while its files were
dropped). Besides `fuzz_call`'s oracle (OK, or a clear refusal that changed nothing), a bystander file
outside the warehouse must survive, and rows of a reused identity must never vanish or appear.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lsmlake.catalog.expire import expire_snapshots
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from tests.integration.fuzz.test_commit_fuzz import PK, _fresh_files
from tests.support.fuzz.hostile import FUZZ, PATH_LIKE
from tests.support.fuzz.lake import CALL_TIMEOUT_S, OUTCOMES, Lake, fuzz_call

METHOD = "/lsmlake.v1.CatalogService/Commit"


def _rows(lake: Lake) -> list[tuple[Any, ...]]:
    t = FileSystemCatalog(str(lake.warehouse)).get_table("db.pk")
    return sorted(tuple(r.values()) for r in t.to_arrow().to_pylist())


def test_external_paths_never_reach_outside_the_table(lake: Lake) -> None:
    bystander = lake.root / "bystander.parquet"
    bystander.write_bytes(b"PAR1 not the table's PAR1")
    counter = iter(range(1, 1_000_000))
    outside = (str(bystander), str(lake.root), f"{lake.warehouse}/../bystander.parquet", "/etc/hostname",
               f"file://{bystander}", f"{lake.warehouse}/db.db/pk/dt=2024-01-01/bucket-0/../../../../bystander.parquet")

    @FUZZ
    @given(path=st.one_of(st.sampled_from(outside), st.sampled_from(PATH_LIKE), st.text(max_size=30)),
           category=st.sampled_from(("new_files", "changelog_files")))
    def run(path: str, category: str) -> None:
        n = next(counter)
        changes = _fresh_files(lake, 10_000 + n)
        target = changes[0].new_files[0]
        if category == "changelog_files":
            target = changes[0].changelog_files.add()
            target.CopyFrom(changes[0].new_files[0])
            target.file_name = f"changelog-fuzz-{n}.parquet"
        target.external_path = path
        target.file_size = bystander.stat().st_size
        request = catalog_pb2.CommitRequest(table=PK, commit_user="fuzz-ext", commit_identifier=n,
                                            kind=common_pb2.COMMIT_KIND_APPEND, changes=changes)
        reply = fuzz_call(lake, METHOD, lambda: lake.catalog.Commit(request, timeout=CALL_TIMEOUT_S))
        assert reply is None, f"the catalog accepted external_path {path!r} on a table without external roots"
        expire_snapshots(FileSystemCatalog(str(lake.warehouse)).get_table("db.pk"), retain_min=1, retain_max=1,
                         time_retained_ms=0)
        assert bystander.read_bytes() == b"PAR1 not the table's PAR1"

    try:
        run()
    finally:
        bystander.unlink()  # the lake is shared by the module: later oracles see only its own files
    print(f"\n{METHOD} (external_path):", dict(OUTCOMES.get(METHOD, {}).most_common()))


def test_a_reused_commit_identity_never_swallows_or_duplicates_rows(lake: Lake) -> None:
    counter = iter(range(1, 1_000_000))

    @FUZZ
    @given(same_files=st.booleans(), user=st.sampled_from(("fuzz-id", "fuzz-id ", "FUZZ-ID", "other/fuzz-id")),
           kind=st.sampled_from((common_pb2.COMMIT_KIND_APPEND, common_pb2.COMMIT_KIND_COMPACT)))
    def run(same_files: bool, user: str, kind: int) -> None:
        n = next(counter)
        first = catalog_pb2.CommitRequest(table=PK, commit_user="fuzz-id", commit_identifier=n,
                                          kind=common_pb2.COMMIT_KIND_APPEND, changes=_fresh_files(lake, 20_000 + n))
        done = lake.catalog.Commit(first, timeout=CALL_TIMEOUT_S)
        rows = _rows(lake)
        again = catalog_pb2.CommitRequest()
        again.CopyFrom(first)
        again.commit_user, again.kind = user, kind
        if not same_files:
            del again.changes[:]
            again.changes.extend(_fresh_files(lake, 30_000 + n))
        reply = fuzz_call(lake, METHOD, lambda: lake.catalog.Commit(again, timeout=CALL_TIMEOUT_S))
        if reply is not None and reply.already_committed:
            # only the very same commit may be answered by the recorded one
            assert (user, kind, same_files) == ("fuzz-id", common_pb2.COMMIT_KIND_APPEND, True)
            assert reply.snapshot_id == done.snapshot_id
            assert _rows(lake) == rows
        elif reply is not None:  # a commit of its own: its rows landed (the same keys: the newest wins)
            assert reply.snapshot_id > done.snapshot_id

    run()
    print(f"\n{METHOD} (identity reuse):", dict(OUTCOMES.get(METHOD, {}).most_common()))
