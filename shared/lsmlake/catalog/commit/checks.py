"""The shape checks of the file changes a commit carries, against the table they are committed to.

A manifest entry is trusted by every later reader, so a commit is refused before anything is written
when a file change could not have come from a writer of this table: a file name that is a path, a
negative size or count, a level the table does not have, sequence numbers out of order, a schema the
table never had, a partition that does not decode with the table's partition columns, a negative bucket
in a table of fixed buckets, a new data file that is not in its bucket folder with the size the commit
says (one stat per new file: an accepted commit of a file that is not there breaks every reader), or an
`external_path` that is not a normal path under one of the table's external roots (expiration deletes
it once unreachable, so it must never name a file the table does not own).

None of these depends on who commits: the catalog service runs them under the table's commit lock, and
`FileSystemCatalog.commit` runs them for writers that commit straight into the warehouse (Spark).
"""

from __future__ import annotations

from collections.abc import Sequence

from lsmlake.errors import CorruptMetadataError, InvalidInputError, NotFoundError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.external_paths import check_external_path
from lsmlake.format.index_manifest import IndexEntry
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.write import CommitMessage

MAX_FILE_NAME_CHARS = 255
#: creation times a manifest can hold (Paimon stores them as a timestamp: years 1 to 9999)
MIN_TIME_MS, MAX_TIME_MS = -62_135_596_800_000, 253_402_300_799_999
#: sequence numbers count up from 0; a file near int64's end would leave later writers of the bucket no room
MAX_SEQUENCE = 2**62


def check_file_name(name: str, where: str) -> None:
    """A file name inside a bucket (or index) folder: never a path, never empty."""
    if not name or len(name) > MAX_FILE_NAME_CHARS or name in (".", "..") or any(c in name for c in "/\\\x00"):
        shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name)} chars)"
        raise InvalidInputError(f"{where}: file name {shown!r} is not a file name (1 to {MAX_FILE_NAME_CHARS} "
                                "characters, no '/', '\\' or NUL, not '.' or '..')")


def check_partition(table: FileStoreTable, partition: bytes, where: str) -> list[object]:
    """The partition's values; InvalidInputError when the bytes are not a row of the partition columns."""
    try:
        return table.partition_values(partition)
    except (CorruptMetadataError, ValueError, IndexError) as e:
        names = ", ".join(table.schema.partition_keys) or "none"
        raise InvalidInputError(f"{where}: {len(partition)} bytes are not a serialized row of the partition "
                                f"columns of {table.identifier} ({names}): {e}") from None


def _check_file(f: DataFileMeta, where: str, max_level: int, max_schema: int) -> None:
    check_file_name(f.file_name, where)
    for extra in f.extra_files:
        check_file_name(extra, f"{where}.extra_files")
    for name, value in (("file_size", f.file_size), ("row_count", f.row_count),
                        ("delete_row_count", f.delete_row_count or 0)):
        if value < 0:
            raise InvalidInputError(f"{where}: {name} {value} must not be negative")
    if f.delete_row_count is not None and f.delete_row_count > f.row_count:
        raise InvalidInputError(f"{where}: delete_row_count {f.delete_row_count} exceeds row_count {f.row_count}")
    if not 0 <= f.level <= max_level:
        raise InvalidInputError(f"{where}: level {f.level} is outside 0..{max_level}")
    if not 0 <= f.min_sequence_number <= f.max_sequence_number < MAX_SEQUENCE:
        raise InvalidInputError(f"{where}: sequence numbers {f.min_sequence_number}..{f.max_sequence_number} are "
                                f"not an ascending range inside 0..2^62")
    if f.creation_time_ms is not None and not MIN_TIME_MS <= f.creation_time_ms <= MAX_TIME_MS:
        raise InvalidInputError(f"{where}: creation_time_ms {f.creation_time_ms} is not a time of years 1 to 9999")
    if not 0 <= f.schema_id <= max_schema:
        raise InvalidInputError(f"{where}: schema_id {f.schema_id} is not a schema of the table (0..{max_schema})")


def _check_written(table: FileStoreTable, path: str, size: int, where: str) -> None:
    try:
        found = table.io.size_or_none(path)  # one HEAD on an object store
    except (OSError, NotFoundError):
        found = None
    if found is None:
        raise InvalidInputError(f"{where}: {path} does not exist; commit only files that were written")
    if found != size:
        raise InvalidInputError(f"{where}: {path} has {found} bytes, not the {size} the commit says")


def _check_index(e: IndexEntry, where: str, new: bool) -> None:
    check_file_name(e.file_name, where)
    if new and e.external_path is not None:
        # a checker of index changes reads index files: only the table's own, in its index folder
        raise InvalidInputError(f"{where}: index file {e.file_name} has an external path; lsmlake keeps index files "
                                "in the table's index folder")
    if e.file_size < 0 or e.row_count < 0:
        raise InvalidInputError(f"{where}: file_size {e.file_size} and row_count {e.row_count} must not be negative")
    for j, r in enumerate(e.dv_ranges or ()):
        check_file_name(r.file_name, f"{where}.deletion_vector_ranges[{j}]")
        if r.offset < 0 or r.length < 0:
            raise InvalidInputError(f"{where}.deletion_vector_ranges[{j}]: offset {r.offset} and length {r.length} "
                                    "must not be negative")


def check_changes(table: FileStoreTable, changes: Sequence[CommitMessage],
                  overwrite_partitions: Sequence[bytes] = ()) -> None:
    """InvalidInputError naming the first file change that cannot belong to `table`."""
    max_level = table.options.num_levels() - 1
    max_schema = table.schema.id
    fixed = table.options.bucket() > 0
    for i, c in enumerate(changes):
        values = check_partition(table, c.partition, f"changes[{i}].partition")
        if c.total_buckets > 0 and c.bucket >= c.total_buckets:
            raise InvalidInputError(f"changes[{i}]: bucket {c.bucket} is not below total_buckets {c.total_buckets}")
        if fixed and (c.bucket < 0 or c.total_buckets <= 0):
            raise InvalidInputError(f"changes[{i}]: bucket {c.bucket} of {c.total_buckets} is not a bucket of "
                                    f"{table.identifier}, which has {table.options.bucket()} fixed buckets")
        for kind, files in (("new_files", c.new_files), ("deleted_files", c.deleted_files),
                            ("changelog_files", c.changelog_files)):
            for j, f in enumerate(files):
                _check_file(f, f"changes[{i}].{kind}[{j}]", max_level, max_schema)
        folder = bucket_dir(table.path, table.schema.partition_dir(values), c.bucket)
        for kind, files in (("new_files", c.new_files), ("changelog_files", c.changelog_files)):
            for j, f in enumerate(files):
                where = f"changes[{i}].{kind}[{j}]"
                if f.external_path is not None:
                    check_external_path(f.external_path, table.options, where)
                    _check_written(table, f.external_path, f.file_size, where)
                else:
                    _check_written(table, f"{folder}/{f.file_name}", f.file_size, where)
        for j, f in enumerate(c.deleted_files):
            if f.external_path is not None:
                check_external_path(f.external_path, table.options, f"changes[{i}].deleted_files[{j}]")
        for kind, entries in (("new_index_files", c.new_index_files), ("deleted_index_files", c.deleted_index_files)):
            for j, e in enumerate(entries):
                _check_index(e, f"changes[{i}].{kind}[{j}]", new=kind == "new_index_files")
    for i, p in enumerate(overwrite_partitions):
        check_partition(table, p, f"overwrite_partitions[{i}]")
