"""Who gets which table's storage credentials, and what a data token carries (lsmlake.catalog.data_tokens)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal
from lsmlake.catalog.data_tokens import (
    DATA_TOKEN_ENABLED,
    MAX_LIFETIME_S,
    MIN_LIFETIME_S,
    DataToken,
    DataTokenMode,
    DataTokenVendor,
    Grants,
    GrantsFile,
    StaticCredentials,
    check_lifetime,
)
from lsmlake.errors import InvalidInputError, PermissionDeniedError, UnsupportedOperationError
from lsmlake.fs.storage_settings import StorageSettings

WAREHOUSE = "s3://AKID:SECRET@lake/wh?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1"
ETL = Principal("etl", Role.READER)
ROOT = Principal("root", Role.ADMIN)
NO_ENV: dict[str, str] = {}


def _grants(*entries: tuple[str, list[str]]) -> Grants:
    return Grants.parse(json.dumps({"grants": [{"principal": p, "tables": t} for p, t in entries]}))


def _vendor(mode: DataTokenMode = DataTokenMode.GRANTED, checks: bool = True,
            grants: Grants | GrantsFile | None = None,
            warehouse: str = WAREHOUSE) -> DataTokenVendor:
    return DataTokenVendor.for_warehouse(warehouse, mode, checks, grants, environ=NO_ENV)


def test_a_token_carries_the_warehouse_settings_under_every_engines_keys() -> None:
    token = _vendor(grants=_grants(("etl", ["db.*"]))).token("db.t", "s3://lake/wh/db.db/t", ETL)
    o = token.options
    # Paimon's keys (Java, paimon-rust) and pypaimon's, from the warehouse URI's own parameters
    assert (o["s3.endpoint"], o["fs.s3.endpoint"]) == ("http://127.0.0.1:9000", "http://127.0.0.1:9000")
    assert (o["s3.access-key"], o["fs.s3.accessKeyId"]) == ("AKID", "AKID")
    assert (o["s3.secret-key"], o["fs.s3.accessKeySecret"]) == ("SECRET", "SECRET")
    assert (o["s3.region"], o["fs.s3.region"]) == ("eu-west-1", "eu-west-1")
    assert o["s3.path.style.access"] == o["fs.s3.path-style-access"] == "true"  # a custom endpoint
    assert "s3.session.token" not in o


def test_each_token_handed_out_is_logged_without_its_secrets(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="lsmlake.catalog.data_tokens"):
        _vendor(grants=_grants(("etl", ["db.*"]))).token("db.t", "s3://lake/wh/db.db/t", ETL)
    assert [r.getMessage().split(", valid until")[0] for r in caplog.records] == ["data token of db.t for etl"]
    assert "SECRET" not in caplog.text and "AKID" not in caplog.text


def test_a_session_token_is_given_under_paimon_rust_and_javas_key_too() -> None:
    settings = StorageSettings(access_key_id="A", secret_access_key="S", session_token="SESSION")
    vendor = DataTokenVendor(DataTokenMode.OPEN, StaticCredentials(settings), "s3", checks_tokens=False)
    o = vendor.token("db.t", "s3://b/db.db/t", None).options
    assert o["s3.session.token"] == o["fs.s3.securityToken"] == "SESSION"


def test_the_expiry_is_the_lifetime_from_now() -> None:
    vendor = DataTokenVendor(DataTokenMode.OPEN, StaticCredentials(StorageSettings(), 7_200, clock=lambda: 1_000.5),
                             "s3", checks_tokens=True)
    assert vendor.token("db.t", "s3://b/t", ETL).expires_at_ms == 8_200_500  # (1000.5 s + 7200 s) in ms


def test_grants_decide_per_principal_and_table() -> None:
    vendor = _vendor(grants=_grants(("etl", ["sales.*", "ref.rates"]), ("etl", ["x.y"])))
    for table in ("sales.orders", "ref.rates", "x.y"):
        assert vendor.token(table, "", ETL).options["s3.access-key"] == "AKID"
    for table in ("ref.other", "salesx.orders", "x.yz"):
        with pytest.raises(PermissionDeniedError, match=f"etl has no data token grant on table {table}"):
            vendor.token(table, "", ETL)
    with pytest.raises(PermissionDeniedError, match="root has no data token grant"):
        vendor.token("sales.orders", "", ROOT)  # a role is no grant: an admin needs one too


def test_granted_without_a_token_file_vends_to_nobody_and_does_not_tell_engines_to_ask() -> None:
    vendor = _vendor(checks=False, grants=_grants(("etl", ["*.*"])))
    assert not vendor.vends and vendor.config_defaults(None) == {}
    with pytest.raises(PermissionDeniedError, match="checks no tokens"):
        vendor.token("db.t", "", None)


def test_granted_without_any_grant_does_not_tell_engines_to_ask() -> None:
    vendor = _vendor()
    assert not vendor.vends and vendor.config_defaults(ETL) == {}
    with pytest.raises(PermissionDeniedError, match="etl has no data token grant"):
        vendor.token("db.t", "", ETL)
    assert _vendor(grants=_grants(("etl", ["db.t"]))).config_defaults(ETL) == {DATA_TOKEN_ENABLED: "true"}


def test_only_a_principal_with_a_grant_is_told_to_ask_for_tokens() -> None:
    """Old code told every caller to ask as soon as anyone had a grant: an engine of a principal without one, that
    brings its own storage settings, then asked, was refused (403) and failed."""
    vendor = _vendor(grants=_grants(("etl", ["db.t"])))
    assert vendor.config_defaults(ETL) == {DATA_TOKEN_ENABLED: "true"}
    assert vendor.config_defaults(ROOT) == {}  # an admin without a grant too
    assert vendor.config_defaults(None) == {}


def test_open_vends_to_every_caller_and_off_to_none() -> None:
    open_ = _vendor(DataTokenMode.OPEN, checks=False)
    assert open_.config_defaults(None) == open_.config_defaults(ROOT) == {DATA_TOKEN_ENABLED: "true"}
    assert open_.token("db.t", "", None).options["s3.access-key"] == "AKID"
    off = _vendor(DataTokenMode.OFF, grants=_grants(("etl", ["*.*"])))
    assert off.config_defaults(ETL) == {}
    with pytest.raises(UnsupportedOperationError, match="--data-tokens off"):
        off.token("db.t", "", ETL)


def test_a_local_warehouse_has_nothing_to_vend() -> None:
    vendor = _vendor(DataTokenMode.OPEN, warehouse="/data/wh")
    assert vendor.config_defaults(None) == {} and vendor.token("db.t", "/data/wh/db.db/t", None).options == {}


@pytest.mark.parametrize(("text", "problem"), [
    ("[]", 'expected an object {"grants": [...]}'),
    ('{"grants": [], "more": 1}', 'expected an object {"grants": [...]}'),
    ("{", "not JSON"),
    ('{"grants": [{"principal": "a"}]}', "grants[0]: expected an object with exactly 'principal' and 'tables'"),
    ('{"grants": [{"principal": "", "tables": ["a.b"]}]}', "grants[0]: 'principal' must be a non-empty string"),
    ('{"grants": [{"principal": "a", "tables": []}]}', "grants[0]: 'tables' must be a non-empty list"),
    ('{"grants": [{"principal": "a", "tables": [3]}]}', "grants[0]: 'tables' must be a non-empty list"),
    ('{"grants": [{"principal": "a", "tables": ["orders"]}]}', "table pattern 'orders' names no database"),
])
def test_a_bad_grants_file_is_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidInputError) as e:
        Grants.parse(text, "grants.json")
    assert str(e.value).startswith("grants.json: ") and problem in str(e.value)


def test_a_lifetime_shorter_than_the_clients_refresh_margin_is_refused() -> None:
    assert check_lifetime(MIN_LIFETIME_S) == MIN_LIFETIME_S
    for bad in (MIN_LIFETIME_S - 1, 60.0, float("nan")):
        with pytest.raises(InvalidInputError, match="too short"):
            check_lifetime(bad)
    with pytest.raises(InvalidInputError, match="not one of off, granted, open"):
        DataTokenMode.parse("sometimes")


def test_an_endless_or_overlong_lifetime_is_refused() -> None:
    """Old code took `inf` (every token request then failed with an OverflowError) and 1e20 (an expiry past
    2^63 ms, which Paimon Java cannot read as a long)."""
    assert check_lifetime(MAX_LIFETIME_S) == MAX_LIFETIME_S
    for bad in (float("inf"), 1e20, MAX_LIFETIME_S + 1):
        with pytest.raises(InvalidInputError, match="too long: at most 604800 s"):
            check_lifetime(bad)
    expires = StaticCredentials(StorageSettings(), MAX_LIFETIME_S).credentials("db.t", "")[1]
    assert 0 < expires < 2**63


def test_a_token_repr_hides_its_options() -> None:
    token = DataToken({"s3.secret-key": "SECRET", "s3.access-key": "AKID"}, 1)
    assert "SECRET" not in repr(token) and "SECRET" not in str(token) and "AKID" not in repr(token)
    assert "expires_at_ms=1" in repr(token)
    assert token.to_json()["token"]["s3.secret-key"] == "SECRET"  # the answer itself still carries them


def test_a_changed_grants_file_is_read_again_and_a_broken_one_leaves_the_grants_in_force(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "grants.json"
    path.write_text(json.dumps({"grants": [{"principal": "etl", "tables": ["db.*"]}]}))
    now = [100.0]
    grants = GrantsFile(str(path), clock=lambda: now[0])
    vendor = _vendor(grants=grants)
    assert vendor.token("db.t", "", ETL).options
    path.write_text(json.dumps({"grants": [{"principal": "bi", "tables": ["db.t"]}]}))  # etl's grant taken away
    now[0] += 0.5
    assert vendor.token("db.t", "", ETL).options  # the file is looked at once a second at most
    now[0] += 0.5
    with pytest.raises(PermissionDeniedError, match="etl has no data token grant"):
        vendor.token("db.t", "", ETL)
    assert vendor.token("db.t", "", Principal("bi", Role.READER)).options
    path.write_text('{"grants": [{"principal": "bi", "tables": ["nodatabase"]}]}')
    now[0] += 1.0
    with caplog.at_level("ERROR", logger="lsmlake.catalog.data_tokens"):
        assert vendor.token("db.t", "", Principal("bi", Role.READER)).options
    assert "previous ones stay in force" in caplog.text and "names no database" in caplog.text


def test_a_grants_file_that_cannot_be_read_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read the data token grants"):
        GrantsFile(str(tmp_path / "missing.json"))


def _grant_file(path: Path, principal: str) -> None:
    path.write_text(json.dumps({"grants": [{"principal": principal, "tables": ["db.*"]}]}))


def test_deleting_the_grants_file_revokes_every_grant_and_a_new_file_is_read(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Old code took a deleted file for a broken change and kept the grants it had."""
    path = tmp_path / "grants.json"
    _grant_file(path, "etl")
    now = [100.0]
    vendor = _vendor(grants=GrantsFile(str(path), clock=lambda: now[0]))
    assert vendor.token("db.t", "", ETL).options and vendor.config_defaults(ETL)
    path.unlink()
    now[0] += 1.0
    with (caplog.at_level("WARNING", logger="lsmlake.catalog.data_tokens"),
          pytest.raises(PermissionDeniedError, match="etl has no data token grant")):
        vendor.token("db.t", "", ETL)
    assert vendor.config_defaults(ETL) == {}
    assert [r.levelname for r in caplog.records] == ["WARNING"] and "is gone: no principal has a grant" in caplog.text
    _grant_file(path, "etl")  # put back: in force again
    now[0] += 1.0
    assert vendor.token("db.t", "", ETL).options


def test_an_emptied_grants_file_keeps_the_previous_grants(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "grants.json"
    _grant_file(path, "etl")
    now = [100.0]
    vendor = _vendor(grants=GrantsFile(str(path), clock=lambda: now[0]))
    path.write_text("")  # a file being written, or truncated by mistake: not a revocation
    now[0] += 1.0
    with caplog.at_level("ERROR", logger="lsmlake.catalog.data_tokens"):
        assert vendor.token("db.t", "", ETL).options
    assert "previous ones stay in force" in caplog.text


def test_a_same_size_edit_with_the_old_mtime_is_seen(tmp_path: Path) -> None:
    """Old code stamped a file by (mtime, size) only: a replacement of the same size whose mtime was carried over
    (a copy with `cp -p`, an rsync, a coarse clock) was never read."""
    path = tmp_path / "grants.json"
    _grant_file(path, "abc")
    before = os.stat(path)
    now = [100.0]
    vendor = _vendor(grants=GrantsFile(str(path), clock=lambda: now[0]))
    new = tmp_path / "grants.json.new"
    _grant_file(new, "etl")  # same length as "abc"
    os.utime(new, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(new, path)
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    now[0] += 1.0
    assert vendor.token("db.t", "", ETL).options
    with pytest.raises(PermissionDeniedError, match="abc has no data token grant"):
        vendor.token("db.t", "", Principal("abc", Role.READER))
