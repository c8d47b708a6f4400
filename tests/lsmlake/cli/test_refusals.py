"""Commands that cannot do what was asked exit non-zero with the reason, and change nothing."""

from __future__ import annotations

from pathlib import Path

from tests.lsmlake.cli.conftest import Lake


def write_csv(lake: Lake, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"input-{len(list(tmp_path.glob('*.csv')))}.csv"
    path.write_text(text)
    lake.ok("write", name, str(path))


def test_changelog_of_a_table_without_a_changelog_producer(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.t", "--schema", "k INT NOT NULL, v STRING", "--primary-key", "k",
            "--option", "bucket=1")
    write_csv(lake, tmp_path, "db.t", "k,v\n1,a\n")
    err = lake.fails("changelog", "db.t")
    assert "table db.t has no changelog producer (changelog-producer = none)" in err
    assert "--set changelog-producer=input" in err


def test_a_partition_that_does_not_exist(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.p", "--schema", "id BIGINT, dt STRING", "--partition-key", "dt")
    err = lake.fails("scan", "db.p", "--partition", "dt=x")
    assert "--partition dt=x: table db.p has no such partition (it has no data)" in err
    write_csv(lake, tmp_path, "db.p", "id,dt\n1,a\n2,b\n")
    before = lake.snapshot_ids("db.p")
    for command in ("scan", "compact"):
        err = lake.fails(command, "db.p", "--partition", "dt=c")
        assert "--partition dt=c: table db.p has no such partition (its partitions: dt=a, dt=b)" in err, command
    assert lake.snapshot_ids("db.p") == before
    assert [r["id"] for r in lake.jsonl("scan", "db.p", "--partition", "dt=b")] == [2]


def test_rows_waiting_in_a_postpone_table_still_make_their_partition(lake: Lake, tmp_path: Path) -> None:
    lake.ok("table", "create", "db.w", "--schema", "id BIGINT NOT NULL, dt STRING NOT NULL", "--primary-key",
            "id,dt", "--partition-key", "dt", "--option", "bucket=-2")
    write_csv(lake, tmp_path, "db.w", "id,dt\n1,a\n")
    assert "compacted db.w" in lake.ok("compact", "db.w", "--partition", "dt=a")


def test_a_warehouse_folder_that_does_not_exist(lake: Lake, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-warehouse"
    for args in (["table", "list", "db"], ["scan", "db.t"], ["snapshots", "db.t"], ["table", "describe", "db.t"]):
        err = lake.fails("--warehouse", str(missing), *args)
        assert f"warehouse {missing} does not exist" in err, args
    assert not missing.exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    assert f"warehouse {a_file} is not a folder" in lake.fails("--warehouse", str(a_file), "table", "list", "db")
    # creating a table creates the warehouse
    lake.ok("--warehouse", str(missing), "table", "create", "db.t", "--schema", "id INT")
    assert lake.ok("--warehouse", str(missing), "table", "list", "db", "--format", "csv") == "table\nt\n"
