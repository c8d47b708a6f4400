"""The filesystem catalog: databases are `<name>.db` folders, tables are folders inside them.

`FileSystemCatalog.commit` is how a writer without the catalog service (a Spark job on a warehouse folder)
commits: with the file-change checks the service runs (`commit.checks`), so that neither path can publish
a manifest entry for a file that is not there or that the table does not own.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from lsmlake.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from lsmlake.format.schema import SchemaManager, TableSchema
from lsmlake.format.snapshot import settle_hints
from lsmlake.format.types import DataField, parse_schema_fields
from lsmlake.fs import StorageSettings, open_path

if TYPE_CHECKING:  # the table layer loads when a table is opened: `lake table list` needs none of it
    from lsmlake.table.commit import CommitResult
    from lsmlake.table.file_store_table import FileStoreTable
    from lsmlake.table.schema_change import SchemaChange
    from lsmlake.table.write import CommitMessage

#: a database folder is `<name>.db` and file systems cap a path element at 255 bytes
MAX_NAME_CHARS = 200
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


def check_name(name: str, what: str) -> str:
    """A database or table name: letters, digits, '_' and '-' (nothing path-like), at most 200 of them."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 60 else f"{name[:40]!r}... ({len(name)} chars)"
        raise InvalidInputError(f"invalid {what} name {shown}: use letters, digits, '_' and '-' "
                                f"(at most {MAX_NAME_CHARS})")
    return name


def split_identifier(identifier: str) -> tuple[str, str]:
    """`db.table` -> (db, table)."""
    if not isinstance(identifier, str) or identifier.count(".") != 1:
        raise InvalidInputError(f"table identifier {identifier!r} must be DATABASE.TABLE")
    db, table = identifier.split(".")
    return check_name(db, "database"), check_name(table, "table")


class FileSystemCatalog:
    """Databases and tables of one warehouse (a local folder or an object-store URI)."""

    def __init__(self, warehouse: str, filesystem: pafs.FileSystem | None = None,
                 publications_serialized: bool = False, storage: StorageSettings | None = None) -> None:
        """`publications_serialized`: the caller serialises commits across processes (the catalog service's commit
        lock), so an object store without conditional create is a warning, not an error (`lsmlake.fs.FileIO`).
        `storage`: S3 settings over this process's environment (`lsmlake.fs.storage_settings`)."""
        self.io, self.root = open_path(warehouse, filesystem, publications_serialized, storage=storage)
        self.warehouse = warehouse

    def database_path(self, db: str) -> str:
        return f"{self.root}/{check_name(db, 'database')}.db"

    def table_path(self, identifier: str) -> str:
        db, t = split_identifier(identifier)
        return f"{self.database_path(db)}/{t}"

    def location(self, path: str) -> str:
        """A path of this warehouse as other engines open it: a local path, or `<scheme>://` and the object path."""
        if self.io.local:
            return path
        return f"{self.warehouse.split('://', 1)[0]}://{path}"

    # -- databases -----------------------------------------------------------------------------

    def list_databases(self) -> list[str]:
        return sorted(i.name[:-3] for i in self.io.list(self.root) if i.is_dir and i.name.endswith(".db"))

    def create_database(self, db: str, ignore_if_exists: bool = False) -> None:
        path = self.database_path(db)
        if self.io.exists(path):
            if ignore_if_exists:
                return
            raise AlreadyExistsError(f"database {db!r} already exists")
        self.io.mkdirs(path)

    def drop_database(self, db: str, cascade: bool = False) -> None:
        path = self.database_path(db)
        if not self.io.exists(path):
            raise NotFoundError(f"database {db!r} does not exist")
        if self.list_tables(db) and not cascade:
            raise InvalidInputError(f"database {db!r} is not empty; drop its tables first or use cascade")
        self._remove_tree(path)

    # -- tables --------------------------------------------------------------------------------

    def table_ids(self, database: str | None = None) -> list[str]:
        """`db.table` of every table of `database` (unknown: NotFoundError), or of every database; a database
        dropped while they are listed is left out."""
        if database is not None:
            return [f"{database}.{t}" for t in self.list_tables(database)]
        ids = []
        for db in self.list_databases():
            try:
                ids += [f"{db}.{t}" for t in self.list_tables(db)]
            except NotFoundError:
                continue
        return ids

    def list_tables(self, db: str) -> list[str]:
        path = self.database_path(db)
        if not self.io.exists(path):
            raise NotFoundError(f"database {db!r} does not exist")
        return sorted(i.name for i in self.io.list(path)
                      if i.is_dir and self.io.exists(f"{i.path}/schema"))

    def create_table(self, identifier: str, fields: Sequence[DataField] | str,
                     partition_keys: Sequence[str] = (), primary_keys: Sequence[str] = (),
                     options: dict[str, str] | None = None, comment: str | None = None,
                     ignore_if_exists: bool = False) -> FileStoreTable:
        """Create a table; `fields` is a field list or a column string such as `id BIGINT NOT NULL, v STRING`."""
        db, _ = split_identifier(identifier)
        if isinstance(fields, str):
            fields = parse_schema_fields(fields)
        from lsmlake.table.definition import define_table
        from lsmlake.table.file_store_table import FileStoreTable

        schema = define_table(tuple(fields), tuple(partition_keys), tuple(primary_keys), options, comment)
        _check_iceberg(schema)
        if not self.io.exists(self.database_path(db)):
            raise NotFoundError(f"database {db!r} does not exist")
        path = self.table_path(identifier)
        manager = SchemaManager(self.io, path)
        if manager.ids():
            if ignore_if_exists:
                return self.get_table(identifier)
            raise AlreadyExistsError(f"table {identifier!r} already exists")
        try:
            manager.commit(schema)
        except AlreadyExistsError:
            if ignore_if_exists:
                return self.get_table(identifier)
            raise AlreadyExistsError(f"table {identifier!r} already exists") from None
        return FileStoreTable(self.io, path, identifier, schema)

    def get_table(self, identifier: str) -> FileStoreTable:
        path = self.table_path(identifier)
        from lsmlake.table.file_store_table import FileStoreTable

        schema = SchemaManager(self.io, path).latest()
        if schema is None:
            raise NotFoundError(f"table {identifier!r} does not exist")
        return FileStoreTable(self.io, path, identifier, schema)

    def alter_table(self, identifier: str, changes: Sequence[SchemaChange]) -> FileStoreTable:
        """Apply schema changes (in order, all or nothing) as the table's next schema; returns the altered table.

        Raises NotFoundError, InvalidInputError naming the refused change, or CommitConflictError when
        another alter published the same schema id first (nothing changed).
        """
        table = self.get_table(identifier)
        from lsmlake.table.schema_change import alter_table

        alter_table(table, changes, check=lambda new: _check_iceberg(new, table))
        return table

    def commit(self, table: FileStoreTable, messages: Sequence[CommitMessage], overwrite: bool = False,
               partitions: Sequence[bytes] | None = None, commit_user: str | None = None) -> CommitResult:
        """Commit written files to a table of this catalog as one snapshot, after checking every file change.

        An APPEND snapshot (COMPACT when the messages delete files), or with `overwrite` an OVERWRITE one
        replacing `partitions` (every partition when None). InvalidInputError naming the first file change
        the table cannot hold (see `commit.checks`); nothing is written then.
        """
        from lsmlake.catalog.commit.checks import check_changes

        check_changes(table, messages, partitions or ())
        commit = table.new_commit(commit_user)
        result = commit.overwrite(messages, partitions) if overwrite else commit.commit(messages)
        if _iceberg_enabled(table.schema):
            from lsmlake.catalog.iceberg_publisher import IcebergPublisher

            IcebergPublisher(self.get_table).after_commit(table)
        return result

    def table_exists(self, identifier: str) -> bool:
        return bool(SchemaManager(self.io, self.table_path(identifier)).ids())

    def drop_table(self, identifier: str) -> None:
        path = self.table_path(identifier)
        if not self.table_exists(identifier):
            raise NotFoundError(f"table {identifier!r} does not exist")
        self._remove_tree(path)

    def _remove_tree(self, path: str) -> None:
        settle_hints(path)  # a LATEST hint this process still has to write would come back after the delete
        if self.io.local:
            shutil.rmtree(path)
        else:
            self.io.fs.delete_dir(path)


def _iceberg_enabled(schema: TableSchema) -> bool:
    from lsmlake.iceberg import iceberg_enabled

    return iceberg_enabled(schema.options)


def _check_iceberg(schema: TableSchema, table: FileStoreTable | None = None) -> None:
    """A table that publishes Iceberg metadata must have options and column types Iceberg readers read back, and
    (`table`: the schema is its next one) no name that stood for another of its columns before."""
    from lsmlake.iceberg import check_iceberg

    if _iceberg_enabled(schema):
        earlier = [table.schemas.schema(i) for i in table.schemas.ids()] if table is not None else []
        check_iceberg(schema, schema.options, earlier)

