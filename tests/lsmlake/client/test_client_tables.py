"""The Client's table calls against a real catalog on loopback: `create_table` creates a missing database as
`lake table create` does, the typed `schema`, `rename_table` and tags (RenameTable, ListTags, GetTag, CreateTag,
DeleteTag), each checked against the library's own view of the warehouse."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.tags import tag_names
from lsmlake.client.schema import TableSchemaInfo
from lsmlake.client.snapshots import SnapshotInfo
from lsmlake.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from lsmlake.format.types import ArrayType, DataType
from tests.support.client_services import ClientServices, client_services


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientServices]:
    with client_services(str(tmp_path_factory.mktemp("wh"))) as s:
        yield s


@pytest.fixture
def client(services: ClientServices) -> Iterator[Client]:
    with Client(services.catalog, writer=services.writer, timeout_s=30) as c:
        yield c


def test_create_table_creates_a_missing_database_and_refuses_a_bad_definition_first(
        client: Client, services: ClientServices) -> None:
    info = client.create_table("fresh.t", "id BIGINT NOT NULL, ok BOOLEAN", primary_keys=["id"],
                               options={"bucket": 2, "deletion-vectors.enabled": True}, comment="made here")
    assert "fresh" in client.list_databases() and client.list_tables("fresh") == ["t"]
    # option values as Paimon writes them (`lake table create --option k=true`), not Python's `True`
    assert info.options == {"bucket": "2", "deletion-vectors.enabled": "true"}
    lib = FileSystemCatalog(services.warehouse).get_table("fresh.t").schema
    assert dict(lib.options) == info.options and lib.comment == "made here"

    # a bad definition is refused before anything exists: no database left behind
    for bad in (dict(primary_keys=["nope"]), dict(options={"merge-engine": "no-such-engine"})):
        with pytest.raises(InvalidInputError):
            client.create_table("never.t", "id BIGINT NOT NULL", **bad)
        assert "never" not in client.list_databases()


@pytest.mark.parametrize(("db", "schema", "problem"), [
    ("long_name", "id INT, " + "c" * 300 + " INT", "column name 'cccc"),
    ("deep_type", "id INT, a " + "ARRAY<" * 40 + "INT" + ">" * 40, "column 'a' is nested 40 levels deep"),
    ("backtick", pa.schema([pa.field("id", pa.int32()), pa.field("a`b", pa.int32())]),
     "column name 'a`b' is invalid"),
], ids=["long_name", "deep_type", "backtick"])
def test_create_table_refuses_columns_the_catalog_refuses_before_creating_the_database(
        client: Client, db: str, schema: str | pa.Schema, problem: str) -> None:
    # the catalog's bounds on column names and types (which its schema parser needs) hold in the client too,
    # so a definition the catalog would refuse leaves no new database behind
    before = client.list_databases()
    with pytest.raises(InvalidInputError, match=re.escape(problem)):
        client.create_table(f"{db}.t", schema)
    assert client.list_databases() == before and db not in before


def test_schema_is_typed_and_agrees_with_the_library(client: Client, services: ClientServices) -> None:
    client.create_table("db.typed", "id BIGINT NOT NULL, dt STRING NOT NULL, amount DECIMAL(10, 2), "
                        "tags ARRAY<STRING>", primary_keys=["id", "dt"], partition_keys=["dt"],
                        options={"bucket": "1"}, comment="orders")
    schema = client.schema("db.typed")
    assert isinstance(schema, TableSchemaInfo)
    lib = FileSystemCatalog(services.warehouse).get_table("db.typed").schema
    assert schema.fields == lib.fields  # ids, names, Paimon types, descriptions
    assert (schema.primary_keys, schema.partition_keys, dict(schema.options), schema.comment, schema.schema_id) == (
        tuple(lib.primary_keys), tuple(lib.partition_keys), dict(lib.options), lib.comment, lib.id)
    amount = schema.type_of("amount")
    assert isinstance(amount, DataType) and (amount.kind, amount.precision, amount.scale) == ("DECIMAL", 10, 2)
    assert schema.type_of("id").nullable is False and isinstance(schema.type_of("tags"), ArrayType)
    assert schema.arrow_schema.field("amount").type == pa.decimal128(10, 2)
    assert repr(schema) == ("TableSchemaInfo(db.typed #0: id BIGINT NOT NULL, dt STRING NOT NULL, "
                            "amount DECIMAL(10, 2), tags ARRAY<STRING>, primary key (id, dt), partitioned by (dt))")
    with pytest.raises(NotFoundError, match="no column 'nope'"):
        schema.field("nope")
    with pytest.raises(NotFoundError):
        client.schema("db.none")


def test_rename_table_moves_the_table_and_its_rows(client: Client, services: ClientServices) -> None:
    client.create_table("db.old", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    client.write("db.old", [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], commit_now=True)
    before = client.scan("db.old")
    client.create_database("other")
    renamed = client.rename_table("db.old", "other.new")
    assert renamed.identifier == "other.new" and renamed.latest_snapshot_id == 1
    assert "old" not in client.list_tables("db") and client.list_tables("other") == ["new"]
    assert client.scan("other.new").equals(before)
    assert FileSystemCatalog(services.warehouse).get_table("other.new").to_arrow().sort_by("id").equals(
        before.sort_by("id"))
    with pytest.raises(NotFoundError):
        client.table("db.old")
    with pytest.raises(NotFoundError):
        client.rename_table("db.old", "db.again")
    client.create_table("db.taken", "id BIGINT")
    with pytest.raises(AlreadyExistsError):
        client.rename_table("other.new", "db.taken")
    with pytest.raises(NotFoundError, match="database"):
        client.rename_table("other.new", "nodb.x")
    with pytest.raises(InvalidInputError, match="DATABASE.TABLE"):
        client.rename_table("other.new", "nodot")
    assert client.scan("other.new").equals(before)  # every refusal left it as it was


def test_tags_are_created_listed_read_and_deleted(client: Client, services: ClientServices) -> None:
    client.create_table("db.tagged", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    with pytest.raises(NotFoundError, match="no snapshot to tag"):
        client.create_tag("db.tagged", "early")
    client.write("db.tagged", [{"id": 1, "v": "a"}], commit_now=True)
    client.write("db.tagged", [{"id": 2, "v": "b"}], commit_now=True)
    first = client.create_tag("db.tagged", "v1", snapshot_id=1)
    newest = client.create_tag("db.tagged", "latest")
    assert isinstance(first, SnapshotInfo) and (first.id, newest.id) == (1, 2)
    assert client.list_tags("db.tagged") == ["latest", "v1"]
    lib = FileSystemCatalog(services.warehouse).get_table("db.tagged")
    assert sorted(tag_names(lib)) == ["latest", "v1"]
    assert client.tag("db.tagged", "v1") == first
    with pytest.raises(AlreadyExistsError, match="v1"):
        client.create_tag("db.tagged", "v1", snapshot_id=2)
    with pytest.raises(NotFoundError):
        client.create_tag("db.tagged", "gone", snapshot_id=9)
    with pytest.raises(InvalidInputError, match="not a name"):
        client.create_tag("db.tagged", "a/b")
    client.delete_tag("db.tagged", "latest")
    assert client.list_tags("db.tagged") == ["v1"] and sorted(tag_names(lib)) == ["v1"]
    with pytest.raises(NotFoundError, match="latest"):
        client.delete_tag("db.tagged", "latest")
    with pytest.raises(NotFoundError, match="latest"):
        client.tag("db.tagged", "latest")
    assert client.list_tags("db.tagged") == ["v1"]


def test_results_have_short_reprs(client: Client) -> None:
    info = client.create_table("db.wide", ", ".join(f"c{i} INT" for i in range(20)))
    text = repr(info)
    assert text.startswith("TableInfo(db.wide: c0 INT, c1 INT,") and "(+12)" in text and len(text) < 200
    snap = client.write("db.wide", [{"c0": 1}], commit_now=True)
    assert repr(snap) == f"WriteResult(snapshot_id={snap.snapshot_id}, rows=1)"
    [s] = client.snapshots("db.wide")
    assert repr(s).startswith(f"SnapshotInfo(id={s.id}, APPEND, ") and "properties" not in repr(s)


def test_key_lists_read_as_lake_table_create_reads_them(client: Client) -> None:
    """`--primary-key id,dt` on the command line; `primary_keys="id, dt"` here (a text was split into letters)."""
    info = client.create_table("db.keys", "id BIGINT NOT NULL, dt STRING NOT NULL, v INT", primary_keys="id, dt",
                               partition_keys="dt", options={"bucket": 1})
    assert (info.primary_keys, info.partition_keys) == (("id", "dt"), ("dt",))
    assert client.create_table("db.keys2", "id BIGINT NOT NULL", primary_keys=["id"],
                               options={"bucket": 1}).primary_keys == ("id",)
