"""The role a commit needs follows its index changes as it follows its data changes (`check_rights`), the same for
the gRPC commit (index entries from its changes) and the REST commit (the diff of the index manifest it sent)."""

from __future__ import annotations

import pytest

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal
from lsmlake.catalog.commit.identity import check_rights
from lsmlake.errors import PermissionDeniedError
from lsmlake.format.deletion_vector import DvRange
from lsmlake.format.index_manifest import DELETION_VECTORS, HASH_INDEX, IndexEntry

WRITER, SERVICE, ADMIN = (Principal(n, r) for n, r in (("w", Role.WRITER), ("s", Role.SERVICE), ("a", Role.ADMIN)))


def _entry(kind: str, bucket: int, name: str) -> IndexEntry:
    ranges = (DvRange("data-1.parquet", 1, 10, 2),) if kind == DELETION_VECTORS else None
    return IndexEntry(b"", bucket, kind, name, 10, 1, ranges)


def test_hash_index_changes_need_the_assigners_role() -> None:
    added, removed = _entry(HASH_INDEX, 3, "index-new"), _entry(HASH_INDEX, 0, "index-old")
    for change in ({"index_added": [added]}, {"index_removed": [removed]},
                   {"index_added": [added], "index_removed": [removed]}):
        with pytest.raises(PermissionDeniedError, match="HASH index"):
            check_rights("APPEND", {}, WRITER, **change)  # type: ignore[arg-type]
        check_rights("APPEND", {}, SERVICE, **change)  # type: ignore[arg-type]
        check_rights("APPEND", {}, None, **change)  # type: ignore[arg-type]  # no tokens checked


def test_deletion_vectors_may_grow_in_an_append_and_are_removed_only_by_what_removes_data() -> None:
    old, new = _entry(DELETION_VECTORS, 0, "index-old"), _entry(DELETION_VECTORS, 0, "index-new")
    # a delete: a bucket's vector file replaced by one with more positions (its content is checked elsewhere)
    check_rights("APPEND", {}, WRITER, index_added=[new], index_removed=[old])
    check_rights("APPEND", {}, WRITER, index_added=[new])
    # a bucket's vectors removed without a replacement bring deleted rows back: an admin's, as an OVERWRITE is
    with pytest.raises(PermissionDeniedError, match="deletion vectors"):
        check_rights("APPEND", {}, WRITER, index_removed=[old])
    with pytest.raises(PermissionDeniedError, match="deletion vectors"):
        check_rights("APPEND", {}, SERVICE, index_removed=[old])
    with pytest.raises(PermissionDeniedError, match="deletion vectors"):  # another bucket's file is no replacement
        check_rights("APPEND", {}, WRITER, index_added=[_entry(DELETION_VECTORS, 1, "index-x")],
                     index_removed=[old])
    check_rights("APPEND", {}, ADMIN, index_removed=[old])
    # a planned compaction (the compactor's) rewrites files and drops their vectors; unplanned, it is an admin's
    check_rights("COMPACT", {}, SERVICE, planned=True, index_removed=[old])
    with pytest.raises(PermissionDeniedError, match="COMPACT"):
        check_rights("COMPACT", {}, WRITER, index_removed=[old])
