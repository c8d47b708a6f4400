"""A table's tags: named snapshots that keep what they reach after the snapshot itself expires.

Paimon's layout (see `reachability`): `tag/tag-<name>` holds the tagged snapshot's JSON. Creating and
deleting a tag runs under the table's commit lock (`operations`), so that expiration never removes a
snapshot while it is being tagged.
"""

from __future__ import annotations

from lsmlake.catalog.reachability import TAG_PREFIX
from lsmlake.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from lsmlake.format.snapshot import Snapshot
from lsmlake.table.file_store_table import FileStoreTable

MAX_TAG_NAME_CHARS = 200


def check_tag_name(name: str | None) -> str:
    """InvalidInputError unless `name` can name a tag file (no path elements, a bounded length)."""
    if not name or len(name) > MAX_TAG_NAME_CHARS or any(c in name for c in "/\\\x00") or name in (".", ".."):
        raise InvalidInputError(f"tag name {str(name)[:60]!r} is not a name (1 to {MAX_TAG_NAME_CHARS} characters, "
                                "no '/', '\\' or NUL)")
    return name


def _path(table: FileStoreTable, name: str) -> str:
    return f"{table.path}/tag/{TAG_PREFIX}{name}"


def tag_names(table: FileStoreTable) -> list[str]:
    """The names of the table's tags, in the order the file system lists them."""
    return [i.name[len(TAG_PREFIX):] for i in table.io.list(f"{table.path}/tag")
            if not i.is_dir and i.name.startswith(TAG_PREFIX)]


def read_tag(table: FileStoreTable, name: str) -> Snapshot:
    """The snapshot tag `name` holds; NotFoundError when there is no such tag."""
    try:
        return Snapshot.from_json(table.io.read_bytes(_path(table, check_tag_name(name))))
    except NotFoundError:
        raise NotFoundError(f"tag {name!r} of {table.identifier} does not exist") from None


def create_tag(table: FileStoreTable, name: str, snapshot_id: int | None) -> Snapshot:
    """Tag snapshot `snapshot_id` (the latest when None); AlreadyExistsError when the name is taken."""
    check_tag_name(name)
    snap = table.snapshots.snapshot(snapshot_id) if snapshot_id is not None else table.snapshots.latest()
    if snap is None:
        raise NotFoundError(f"table {table.identifier} has no snapshot to tag")
    if not table.io.write_if_absent(_path(table, name), snap.to_json().encode()):
        raise AlreadyExistsError(f"tag {name!r} of {table.identifier} already exists")
    return snap


def delete_tag(table: FileStoreTable, name: str) -> None:
    """Delete tag `name`; NotFoundError when there is none."""
    if not table.io.delete_quietly(_path(table, check_tag_name(name))):
        raise NotFoundError(f"tag {name!r} of {table.identifier} does not exist")


def branch_names(table: FileStoreTable) -> list[str]:
    """The names of the table's branches (`branch/branch-<name>` folders), sorted."""
    return sorted(i.name[len("branch-"):] for i in table.io.list(f"{table.path}/branch")
                  if i.is_dir and i.name.startswith("branch-"))
