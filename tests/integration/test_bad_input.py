"""Bad input gets a clear error naming the problem, and changes nothing on disk."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError, SchemaMismatchError, UnknownOptionError


def _snapshot_of_disk(root) -> dict[str, int]:
    return {os.path.join(d, f): os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs}


@pytest.fixture
def table(tmp_path):
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT NOT NULL, dt STRING NOT NULL, v DECIMAL(10,2), d DATE",
                         partition_keys=["dt"], primary_keys=["id", "dt"], options={"bucket": "2"})
    t.write_arrow(pa.table({"id": [1], "dt": ["a"], "v": ["1.5"], "d": ["2024-01-01"]}))
    return t


@pytest.mark.parametrize("rows,message", [
    ({"id": [1], "dt": ["a"], "nope": [1]}, "nope"),
    ({"id": ["x"], "dt": ["a"]}, "'id'"),
    ({"id": [None], "dt": ["a"]}, "primary-key column 'id'"),
    ({"id": [1], "dt": [None]}, "'dt'"),
    ({"id": [1], "dt": ["a"], "d": ["not a date"]}, "'d'"),
    ({"id": [1], "dt": ["a"], "v": ["12345678901.5"]}, "'v'"),
    ({"id": [1], "dt": ["a"], "_row_kind": ["+X"]}, "_row_kind"),
    ({"dt": ["a"]}, "'id'"),
])
def test_bad_rows_are_rejected_and_change_nothing(table, rows, message) -> None:
    before = _snapshot_of_disk(table.path)
    with pytest.raises(InvalidInputError) as e:
        table.write_arrow(pa.table(rows))
    assert message in str(e.value)
    assert _snapshot_of_disk(table.path) == before


def test_json_rows_with_a_field_that_is_not_a_column_are_refused(table) -> None:
    from lsmlake.ingest.json_rows import rows_from_json

    rows = ['{"id": 1, "dt": "a"}', '{"id": 2, "dt": "a", "colour": "red"}', '{"id": 3, "dt": "a", "_row_kind": "-D"}']
    with pytest.raises(InvalidInputError) as e:
        rows_from_json(table.schema, rows, "db.t")
    assert str(e.value) == ('1 row(s) are invalid, nothing was written: '
                            'rows_json[1]: field "colour" is not a column of db.t (columns: id, dt, v, d)')


def test_schema_mismatch_is_a_schema_error(table) -> None:
    with pytest.raises(SchemaMismatchError):
        table.write_arrow(pa.table({"id": [1], "dt": ["a"], "v": [[1, 2]]}))


@pytest.mark.parametrize("kwargs,message", [
    (dict(fields="id BIGINT, v STRING", primary_keys=["id"]), "bucket"),
    (dict(fields="id BIGINT, v STRING", primary_keys=["id"], options={"bucket": "-3"}), "bucket"),
    (dict(fields="id BIGINT, v STRING", options={"colour": "blue"}), "colour"),
    (dict(fields="id BIGINT, v STRANGE", options={}), "STRANGE"),
    (dict(fields="id BIGINT, v STRING", primary_keys=["nope"], options={"bucket": "1"}), "nope"),
    (dict(fields="id BIGINT, dt STRING", primary_keys=["id"], partition_keys=["dt"], options={"bucket": "1"}),
     "partition"),
    (dict(fields="id BIGINT, v STRING", options={"bucket": "3"}), "bucket-key"),
    (dict(fields="id BIGINT, id STRING"), "defined twice"),
    (dict(fields="_KEY_id BIGINT"), "reserved"),
    (dict(fields="id BIGINT, v DECIMAL(40, 2)"), "DECIMAL"),
])
def test_bad_table_definitions(tmp_path, kwargs, message) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    fields = kwargs.pop("fields")
    with pytest.raises(InvalidInputError) as e:
        cat.create_table("db.t", fields, **kwargs)
    assert message in str(e.value)
    assert not cat.table_exists("db.t")


def test_unknown_option_error_type(tmp_path) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    with pytest.raises(UnknownOptionError):
        cat.create_table("db.t", "id BIGINT", options={"colour": "blue"})


@pytest.mark.parametrize("name", ["../x", "db.t.u", "db/x.t", "db.", ".t", "db.t t"])
def test_path_like_names_are_refused(tmp_path, name) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    with pytest.raises(InvalidInputError):
        cat.create_table(name, "id BIGINT")
    assert os.listdir(tmp_path / "wh") == ["db.db"]


def test_missing_things_are_not_found(tmp_path) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    with pytest.raises(NotFoundError):
        cat.get_table("db.t")
    cat.create_database("db")
    t = cat.create_table("db.t", "id BIGINT")
    with pytest.raises(NotFoundError):
        t.to_arrow(7)
