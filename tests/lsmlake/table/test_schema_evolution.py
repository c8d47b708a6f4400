"""Schema evolution: AlterTable changes, their refusals, and reading files of older schemas by field id."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli import main as cli
from lsmlake.errors import CommitConflictError, InvalidInputError, LakeError, UnknownOptionError
from lsmlake.format.schema import TableSchema
from lsmlake.table.compact import commit_compaction, compact_split, compact_table
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.read import TableRead
from lsmlake.table.schema_change import (
    AddColumn,
    RemoveOption,
    RenameColumn,
    SetOption,
    alter_table,
    apply_changes,
)

PK_OPTIONS = {"bucket": "2"}


def catalog(path: Path | str) -> FileSystemCatalog:
    c = FileSystemCatalog(str(path))
    c.create_database("db", ignore_if_exists=True)
    return c


def rows(table: FileStoreTable, key: str = "id", **kw: Any) -> list[dict[str, Any]]:
    return sorted(table.to_arrow(**kw).to_pylist(), key=lambda r: r[key])


def schema_files(table: FileStoreTable) -> dict[str, str]:
    d = Path(table.path) / "schema"
    return {p.name: p.read_text() for p in sorted(d.iterdir())}


def pypaimon_rows(warehouse: Path, ident: str, key: str = "id") -> list[dict[str, Any]]:
    pt = CatalogFactory.create({"warehouse": str(warehouse)}).get_table(ident)
    rb = pt.new_read_builder()
    return sorted(rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist(), key=lambda r: r[key])


@pytest.fixture
def pk(tmp_path: Path) -> FileStoreTable:
    t = catalog(tmp_path).create_table("db.t", "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING, n INT",
                                       partition_keys=["dt"], primary_keys=["id", "dt"], options=PK_OPTIONS)
    t.write_arrow(pa.table({"id": [1, 2, 3], "dt": ["a", "a", "b"], "v": ["v1", "v2", "v3"], "n": [1, 2, 3]}))
    return t


# ---------------------------------------------------------------------------------------------
# each change
# ---------------------------------------------------------------------------------------------

def test_add_column_gets_next_field_id_and_old_rows_read_null(tmp_path: Path) -> None:
    c = catalog(tmp_path)
    t = c.create_table("db.a", "k INT, s STRING")
    t.write_arrow(pa.table({"k": pa.array([1, 2], pa.int32()), "s": ["x", "y"]}))
    t = c.alter_table("db.a", [AddColumn("d", "DECIMAL(10, 2)", comment="price"),
                               AddColumn("r", "ROW<x INT, y ARRAY<ROW<z STRING>>>")])
    assert t.schema.id == 1
    doc = json.loads(schema_files(t)["schema-1"])
    assert [(f["id"], f["name"]) for f in doc["fields"]] == [(0, "k"), (1, "s"), (2, "d"), (3, "r")]
    assert doc["fields"][2]["description"] == "price"
    # nested fields draw from the same counter, children before their parent (as Paimon numbers them)
    r = doc["fields"][3]["type"]
    assert [f["id"] for f in r["fields"]] == [4, 6]
    assert r["fields"][1]["type"]["element"]["fields"][0]["id"] == 5
    assert doc["highestFieldId"] == 6
    t.write_arrow(pa.table({"k": pa.array([3], pa.int32()), "s": ["z"], "d": pa.array([None], pa.decimal128(10, 2))}))
    got = rows(t, key="k")
    assert [(x["k"], x["s"], x["d"], x["r"]) for x in got] == [(1, "x", None, None), (2, "y", None, None),
                                                               (3, "z", None, None)]
    assert t.to_arrow().schema.names == ["k", "s", "d", "r"]


def test_ids_are_never_reused_after_highest_field_id(tmp_path: Path) -> None:
    """highestFieldId may exceed the live fields (a column dropped by another engine): new ids start above it."""
    s = TableSchema(0, catalog(tmp_path).create_table("db.a", "k INT").schema.fields, highest_field_id=7)
    new = apply_changes(s, [AddColumn("x", "INT")], has_snapshots=False)
    assert new.field("x").id == 8 and new.highest_field_id == 8


def test_rename_column_keeps_values_and_id(pk: FileStoreTable) -> None:
    alter_table(pk, [RenameColumn("v", "value")])
    assert pk.schema.field("value").id == 2 and pk.schema.id == 1
    assert [r["value"] for r in rows(pk)] == ["v1", "v2", "v3"]
    assert "v" not in pk.to_arrow().column_names


def test_rename_then_add_the_old_name_does_not_revive_old_values(pk: FileStoreTable) -> None:
    alter_table(pk, [RenameColumn("v", "old_v"), AddColumn("v", "STRING")])
    got = rows(pk)
    assert [(r["old_v"], r["v"]) for r in got] == [("v1", None), ("v2", None), ("v3", None)]
    pk.write_arrow(pa.table({"id": [4], "dt": ["a"], "old_v": ["v4"], "v": ["new"], "n": [4]}))
    got = rows(pk)
    assert [(r["id"], r["old_v"], r["v"]) for r in got] == [(1, "v1", None), (2, "v2", None), (3, "v3", None),
                                                           (4, "v4", "new")]


def test_set_and_remove_options(pk: FileStoreTable) -> None:
    alter_table(pk, [SetOption("snapshot.num-retained.min", "20"), SetOption("target-file-size", "64 mb")])
    assert pk.schema.options["snapshot.num-retained.min"] == "20"
    assert pk.options.target_file_size(True) == 64 << 20
    alter_table(pk, [RemoveOption("snapshot.num-retained.min"), RemoveOption("not-set-anyway.whatever")])
    assert "snapshot.num-retained.min" not in pk.schema.options and pk.schema.id == 2
    assert rows(pk)[0]["v"] == "v1"


def test_changes_apply_in_order_as_one_schema(pk: FileStoreTable) -> None:
    alter_table(pk, [AddColumn("x", "INT"), RenameColumn("x", "y"), RenameColumn("y", "z"),
                     SetOption("snapshot.num-retained.min", "3"), SetOption("snapshot.num-retained.min", "4")])
    assert sorted(schema_files(pk)) == ["schema-0", "schema-1"]
    assert pk.schema.field_names == ["id", "dt", "v", "n", "z"] and pk.schema.field("z").id == 4
    assert pk.schema.options["snapshot.num-retained.min"] == "4"


def test_immutable_options_may_change_while_the_table_is_empty(tmp_path: Path) -> None:
    c = catalog(tmp_path)
    c.create_table("db.e", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options=PK_OPTIONS)
    t = c.alter_table("db.e", [SetOption("bucket", "4"), SetOption("merge-engine", "partial-update")])
    assert t.schema.num_buckets == 4
    t.write_arrow(pa.table({"id": [1], "v": ["first"]}))
    t.write_arrow(pa.table({"id": [1], "v": pa.array([None], pa.string())}))
    assert rows(t) == [{"id": 1, "v": "first"}]


# ---------------------------------------------------------------------------------------------
# refusals: a clear message, and the schema files untouched
# ---------------------------------------------------------------------------------------------

REFUSALS = [
    ([], InvalidInputError, "at least one change"),
    ([AddColumn("v", "INT")], InvalidInputError, "'v' already exists"),
    ([AddColumn("x", "INT NOT NULL")], InvalidInputError, "NOT NULL column cannot be added"),
    ([AddColumn("x", "INTEGR")], InvalidInputError, "add column 'x'"),
    ([AddColumn("_SEQUENCE_NUMBER", "BIGINT")], InvalidInputError, "reserved"),
    ([AddColumn("a/b", "INT")], InvalidInputError, "not allowed"),
    ([RenameColumn("nope", "x")], InvalidInputError, "'nope' does not exist"),
    ([RenameColumn("v", "n")], InvalidInputError, "'n' already exists"),
    ([RenameColumn("id", "key")], InvalidInputError, "'id' is a primary key column"),
    ([RenameColumn("dt", "day")], InvalidInputError, "'dt' is a primary key column"),
    ([RenameColumn("v", "_KEY_v")], InvalidInputError, "reserved"),
    ([SetOption("no.such.option", "1")], UnknownOptionError, "unknown table option 'no.such.option'"),
    ([SetOption("snapshot.num-retained.min", "lots")], InvalidInputError, "snapshot.num-retained.min"),
    ([SetOption("bucket", "4")], InvalidInputError, "option 'bucket' cannot be changed once the table has data"),
    ([RemoveOption("bucket")], InvalidInputError, "option 'bucket' cannot be changed"),
    ([SetOption("merge-engine", "first-row")], InvalidInputError, "option 'merge-engine' cannot be changed"),
    ([SetOption("deletion-vectors.enabled", "true")], InvalidInputError, "'deletion-vectors.enabled' cannot"),
    ([SetOption("sequence.field", "n")], InvalidInputError, "'sequence.field' cannot be changed"),
    ([SetOption("path", "/elsewhere")], InvalidInputError, "'path' cannot be changed by altering"),
    ([SetOption("file.format", "orc")], InvalidInputError, "file.format=orc"),
    ([SetOption("changelog-producer", "sometimes")], InvalidInputError, "changelog-producer must be one of"),
    # all or nothing: the valid changes before the refused one are not published either
    ([AddColumn("ok", "INT"), SetOption("snapshot.num-retained.min", "3"), RenameColumn("ok", "v")],
     InvalidInputError, "'v' already exists"),
]


@pytest.mark.parametrize(("changes", "error", "message"), REFUSALS, ids=[str(i) for i in range(len(REFUSALS))])
def test_refused_changes(pk: FileStoreTable, changes: list[Any], error: type[LakeError], message: str) -> None:
    before = schema_files(pk)
    with pytest.raises(error, match=message.replace("(", r"\(")):
        alter_table(pk, changes)
    assert schema_files(pk) == before
    assert pk.schema.id == 0 and rows(pk)[0] == {"id": 1, "dt": "a", "v": "v1", "n": 1}


def test_columns_named_by_options_cannot_be_renamed(tmp_path: Path) -> None:
    c = catalog(tmp_path)
    seq = c.create_table("db.s", "id BIGINT NOT NULL, ts BIGINT, g INT, a STRING", primary_keys=["id"],
                         options={"bucket": "1", "merge-engine": "partial-update", "sequence.field": "ts",
                                  "fields.g.sequence-group": "a"})
    for old, option in (("ts", "sequence.field"), ("g", "fields.g.sequence-group"), ("a", "fields.g.sequence-group")):
        with pytest.raises(InvalidInputError, match=f"'{old}' is named by option '{option}'"):
            alter_table(seq, [RenameColumn(old, "renamed")])
    app = c.create_table("db.b", "k INT, s STRING", options={"bucket": "2", "bucket-key": "k"})
    with pytest.raises(InvalidInputError, match="'k' is a bucket key column"):
        alter_table(app, [RenameColumn("k", "kk")])
    assert sorted(schema_files(seq)) == ["schema-0"] and sorted(schema_files(app)) == ["schema-0"]


def test_racing_alter_loses_cleanly(pk: FileStoreTable, tmp_path: Path) -> None:
    stale = FileSystemCatalog(str(tmp_path)).get_table("db.t")
    schema0 = stale.schemas.latest()
    alter_table(pk, [AddColumn("winner", "INT")])
    winner = schema_files(pk)
    stale.schemas.latest = lambda: schema0  # type: ignore[method-assign]  # it read schema 0 just before
    with pytest.raises(CommitConflictError, match="altered concurrently: schema 1 already exists"):
        alter_table(stale, [AddColumn("loser", "INT")])
    assert schema_files(pk) == winner
    assert "loser" not in FileSystemCatalog(str(tmp_path)).get_table("db.t").schema.field_names


# ---------------------------------------------------------------------------------------------
# reading and writing across schema versions
# ---------------------------------------------------------------------------------------------

def test_pk_update_after_rename_merges_across_old_and_new_files(pk: FileStoreTable, tmp_path: Path) -> None:
    stale = FileSystemCatalog(str(tmp_path)).get_table("db.t")  # loaded before the alter
    alter_table(pk, [RenameColumn("v", "label"), AddColumn("extra", "DOUBLE")])
    # a writer holding the table from before the alter writes with the new schema
    stale.write_arrow(pa.table({"id": [2], "dt": ["a"], "label": ["v2-new"], "n": [20], "extra": [2.5]}))
    assert stale.schema.id == 1
    pk.write_arrow(pa.table({"id": [3], "dt": ["b"], "label": ["v3-new"], "n": pa.array([None], pa.int32())}))
    pk.write_arrow(pa.table({"id": [1], "dt": ["a"], "_row_kind": ["-D"]}))
    expected = [{"id": 2, "dt": "a", "label": "v2-new", "n": 20, "extra": 2.5},
                {"id": 3, "dt": "b", "label": "v3-new", "n": None, "extra": None}]
    assert rows(pk) == expected
    assert rows(pk, predicate=[("label", "=", "v2-new")]) == expected[:1]
    assert rows(pk, predicate=[("id", ">=", 3)]) == expected[1:]
    assert rows(pk, projection=["id", "extra"]) == [{"id": 2, "extra": 2.5}, {"id": 3, "extra": None}]
    # time travel to before the alter reads under the current schema too
    assert rows(pk, snapshot_id=1) == [{"id": i, "dt": d, "label": f"v{i}", "n": i, "extra": None}
                                       for i, d in ((1, "a"), (2, "a"), (3, "b"))]
    assert pypaimon_rows(tmp_path, "db.t") == expected


def test_key_statistics_of_old_files_still_prune_correctly(pk: FileStoreTable) -> None:
    alter_table(pk, [RenameColumn("v", "w")])
    pk.write_arrow(pa.table({"id": [10], "dt": ["a"], "w": ["ten"], "n": [10]}))
    assert [r["id"] for r in rows(pk, predicate=[("id", "<", 3)])] == [1, 2]
    assert [r["id"] for r in rows(pk, predicate=[("id", "=", 10)])] == [10]
    planned = {f.schema_id for s in pk.new_scan([("id", "=", 2)]).plan() for f in s.files}
    assert planned == {0}


def test_table_read_without_a_loaded_table_maps_by_field_id(pk: FileStoreTable) -> None:
    alter_table(pk, [RenameColumn("v", "w"), AddColumn("v", "STRING")])
    bare = TableSchema.from_json(schema_files(pk)["schema-1"])  # no history attached
    got = TableRead(pk.io, pk.path, bare).read(pk.new_scan().plan())
    assert sorted((r["id"], r["w"], r["v"]) for r in got.to_pylist()) == [(1, "v1", None), (2, "v2", None),
                                                                        (3, "v3", None)]


@pytest.mark.parametrize("dv", [False, True])
def test_compaction_after_alter_keeps_rows(tmp_path: Path, dv: bool) -> None:
    c = catalog(tmp_path)
    # deletion-vector tables: level 0 is invisible until this test's compaction moves it up
    options = dict(PK_OPTIONS, **({"deletion-vectors.enabled": "true", "write-only": "true"} if dv else {}))
    t = c.create_table("db.c", "id BIGINT NOT NULL, v STRING, n INT", primary_keys=["id"], options=options)
    t.write_arrow(pa.table({"id": [1, 2, 3, 4], "v": ["a", "b", "c", "d"], "n": [1, 2, 3, 4]}))
    alter_table(t, [RenameColumn("v", "s"), AddColumn("x", "INT")])
    t.write_arrow(pa.table({"id": [2, 5], "s": ["B", "E"], "n": [20, 50], "x": [200, 500]}))
    expected = [{"id": i, "s": s, "n": n, "x": x} for i, s, n, x in
                ((1, "a", 1, None), (2, "B", 20, 200), (3, "c", 3, None), (4, "d", 4, None), (5, "E", 50, 500))]
    if not dv:
        assert rows(t) == expected
    # compact with a table object that never planned the table: the files' schemas come from the snapshot
    fresh = c.get_table("db.c")
    splits = t.plan()
    messages = [m for m in (compact_split(fresh, s, full=True) for s in splits) if m is not None]
    assert messages
    commit_compaction(fresh, messages)
    assert rows(c.get_table("db.c")) == expected
    assert {f.schema_id for s in c.get_table("db.c").plan() for f in s.files} == {1}
    compact_table(c.get_table("db.c"), full=True)
    assert rows(c.get_table("db.c")) == expected
    assert pypaimon_rows(tmp_path, "db.c") == expected


def test_append_table_compaction_and_deletes_after_rename(tmp_path: Path) -> None:
    c = catalog(tmp_path)
    t = c.create_table("db.l", "k INT, s STRING", options={"deletion-vectors.enabled": "true"})
    for i in range(3):
        t.write_arrow(pa.table({"k": pa.array([i], pa.int32()), "s": [f"s{i}"]}))
    alter_table(t, [RenameColumn("s", "text"), AddColumn("s", "STRING")])
    t.write_arrow(pa.table({"k": pa.array([3], pa.int32()), "text": ["s3"], "s": ["new"]}))
    t.delete_where([("text", "=", "s1")])
    expected = [{"k": 0, "text": "s0", "s": None}, {"k": 2, "text": "s2", "s": None},
                {"k": 3, "text": "s3", "s": "new"}]
    assert rows(t, key="k") == expected
    compact_table(c.get_table("db.l"), full=True)
    assert rows(c.get_table("db.l"), key="k") == expected
    assert pypaimon_rows(tmp_path, "db.l", key="k") == expected


def test_pypaimon_reads_the_evolved_table(tmp_path: Path) -> None:
    c = catalog(tmp_path)
    t = c.create_table("db.p", "id BIGINT NOT NULL, dt STRING NOT NULL, v STRING, d DECIMAL(10, 2)",
                       partition_keys=["dt"], primary_keys=["id", "dt"], options=PK_OPTIONS)
    t.write_arrow(pa.table({"id": [1, 2, 3], "dt": ["x", "x", "y"], "v": ["a", "b", "c"],
                            "d": pa.array([None] * 3, pa.decimal128(10, 2))}))
    c.alter_table("db.p", [RenameColumn("v", "name"), AddColumn("tags", "ARRAY<STRING>"),
                           AddColumn("v", "BIGINT")])
    t.write_arrow(pa.table({"id": [3, 4], "dt": ["y", "x"], "name": ["C", "D"], "tags": [["t"], None],
                            "v": [30, 40]}))
    ours = rows(t)
    assert pypaimon_rows(tmp_path, "db.p") == ours
    assert [(r["id"], r["name"], r["tags"], r["v"]) for r in ours] == [
        (1, "a", None, None), (2, "b", None, None), (3, "C", ["t"], 30), (4, "D", None, 40)]
    pt = CatalogFactory.create({"warehouse": str(tmp_path)}).get_table("db.p")
    assert pt.table_schema.highest_field_id == 5 and [f.id for f in pt.table_schema.fields] == [0, 1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------------------------
# a model: random writes interleaved with add / rename, read after each step
# ---------------------------------------------------------------------------------------------

NAMES = ("a", "b", "c", "d", "e")
OPS = st.one_of(
    st.tuples(st.just("write"), st.lists(st.tuples(st.integers(0, 6), st.integers(-50, 50)), min_size=1,
                                           max_size=5)),
    st.tuples(st.just("add"), st.sampled_from(NAMES)),
    st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.tuples(st.just("compact"), st.booleans()),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=8))
def test_reads_match_a_model_across_alters(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as wh:
        t = catalog(wh).create_table("db.m", "id INT NOT NULL, a BIGINT", primary_keys=["id"],
                                     options={"bucket": "2"})
        columns: list[tuple[int, str]] = [(1, "a")]  # (field id, name) of the value columns
        model: dict[int, dict[int, int | None]] = {}  # key -> field id -> value
        next_id = 2
        for step, op in enumerate(ops):
            names = [n for _, n in columns]
            if op[0] == "write":
                data: dict[int, int] = dict(op[1])  # one row per key in a batch
                fid, name = columns[step % len(columns)]  # each write fills one column, the rest are null
                t.write_arrow(pa.table({"id": pa.array(list(data), pa.int32()),
                                        name: pa.array(list(data.values()), pa.int64())}))
                for k, v in data.items():
                    model[k] = {fid: v}
            elif op[0] == "add":
                if op[1] in names:
                    with pytest.raises(InvalidInputError, match="already exists"):
                        alter_table(t, [AddColumn(op[1], "BIGINT")])
                    continue
                alter_table(t, [AddColumn(op[1], "BIGINT")])
                columns.append((next_id, op[1]))
                next_id += 1
            elif op[0] == "rename":
                if op[1] not in names or op[2] in names:
                    with pytest.raises(InvalidInputError):
                        alter_table(t, [RenameColumn(op[1], op[2])])
                    continue
                alter_table(t, [RenameColumn(op[1], op[2])])
                columns = [(fid, op[2] if n == op[1] else n) for fid, n in columns]
            else:
                compact_table(t, full=op[1])
            expected = [{"id": k, **{n: model[k].get(fid) for fid, n in columns}} for k in sorted(model)]
            assert rows(t) == expected, (step, op)
            assert [f.id for f in t.schema.fields] == [0] + [fid for fid, _ in columns]


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------

def test_cli_table_alter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")

    def lake(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main(["--warehouse", wh, *args])
        out, err = capsys.readouterr()
        return code, out, err

    assert lake("table", "create", "db.t", "--schema", "id BIGINT NOT NULL, note STRING",
                "--primary-key", "id", "--option", "bucket=2")[0] == 0
    src = tmp_path / "a.jsonl"
    src.write_text('{"id": 1, "note": "n1"}\n')
    assert lake("write", "db.t", str(src))[0] == 0
    code, out, err = lake("table", "alter", "db.t", "--add-column", "coupon STRING", "--rename-column", "note=remark",
                          "--set", "snapshot.num-retained.min=20", "--add-column", "`price` DECIMAL(10, 2)")
    assert (code, err) == (0, "") and out.strip() == "altered table db.t (schema 1)"
    d = json.loads(lake("table", "describe", "db.t", "--format", "json")[1])
    assert [(c["id"], c["name"]) for c in d["columns"]] == [(0, "id"), (1, "remark"), (2, "coupon"), (3, "price")]
    assert d["options"]["snapshot.num-retained.min"] == "20"
    code, out, err = lake("scan", "db.t")
    assert [json.loads(line) for line in out.splitlines()] == [{"id": 1, "remark": "n1", "coupon": None,
                                                                "price": None}]
    assert lake("table", "alter", "db.t", "--remove", "snapshot.num-retained.min")[0] == 0
    code, _, err = lake("table", "alter", "db.t", "--set", "bucket=3")
    assert code == 1 and "lake: error: option 'bucket' cannot be changed once the table has data" in err
    code, _, err = lake("table", "alter", "db.t", "--rename-column", "id=key")
    assert code == 1 and "'id' is a primary key column" in err
    code, _, err = lake("table", "alter", "db.t")
    assert code == 2 and "nothing to alter" in err
    code, _, err = lake("table", "alter", "db.t", "--add-column", "lonely")
    assert code == 2 and "expected 'NAME TYPE'" in err
    assert sorted(p.name for p in (tmp_path / "wh" / "db.db" / "t" / "schema").iterdir()) == [
        "schema-0", "schema-1", "schema-2"]
    assert cli.main(["table", "alter", "--help"]) == 0
    assert "examples:" in capsys.readouterr().out
