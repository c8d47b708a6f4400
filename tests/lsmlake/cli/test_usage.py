"""Usage errors name the command: an unknown flag gets the subcommand's usage and the closest flags it has; an
unknown table option the closest options of the registry (exit code 2, nothing changed)."""

from __future__ import annotations

import pytest

from tests.lsmlake.cli.conftest import Lake


@pytest.mark.parametrize(("args", "usage", "hint"), [
    (["scan", "db.t", "--limt", "3"], "usage: lake scan ", "unrecognized arguments: --limt 3 (did you mean --limit?)"),
    (["table", "describe", "db.t", "--formt", "json"], "usage: lake table describe ", "(did you mean --format?)"),
    (["compact", "db.t", "--ful"], "usage: lake compact ", "(did you mean --full?)"),
    (["write", "db.t", "x.csv", "--input-fromat=csv"], "usage: lake write ", "(did you mean --input-format?)"),
    (["snapshots", "db.t", "--zzz"], "usage: lake snapshots ", "unrecognized arguments: --zzz\n"),
])
def test_an_unknown_flag_gets_the_usage_of_its_command(lake: Lake, args: list[str], usage: str, hint: str) -> None:
    err = lake.fails(*args, code=2)
    assert err.startswith(usage), err
    assert hint in err


@pytest.mark.parametrize(("args", "usage", "word", "meant"), [
    (["scna", "db.t"], "usage: lake ", "scna", "scan"),
    (["table", "lst", "db"], "usage: lake table ", "lst", "list"),
    (["scan", "db.t", "--format", "jsnl"], "usage: lake scan ", "jsnl", "jsonl"),
])
def test_a_mistyped_command_or_choice_gets_the_closest_ones(lake: Lake, args: list[str], usage: str, word: str,
                                                             meant: str) -> None:
    err = lake.fails(*args, code=2)
    assert err.startswith(usage) and f"invalid choice: '{word}'" in err
    assert err.endswith(f") (did you mean {meant}?)\n")


def test_an_unknown_table_option_gets_the_closest_known_ones(lake: Lake) -> None:
    err = lake.fails("table", "create", "db.t", "--schema", "id INT", "--option", "buckt=2", code=2)
    assert err.startswith("usage: lake table create ")
    assert "unknown table option 'buckt' (did you mean bucket or bucket-key?)" in err
    assert not lake.warehouse.exists()  # nothing created
    lake.ok("table", "create", "db.t", "--schema", "id INT", "--option", "fields.id.aggregate-function=sum")
    for flag, value in (("--set", "snapshot.num-retaind.min=3"), ("--remove", "snapshot.num-retaind.min")):
        err = lake.fails("table", "alter", "db.t", flag, value, code=2)
        assert err.startswith("usage: lake table alter ")
        assert "unknown table option 'snapshot.num-retaind.min' (did you mean snapshot.num-retained.min" in err
    assert lake.table("db.t").schema.id == 0
