"""The catalog service's data tokens: its flags, and what its REST port answers in each mode on an S3 warehouse
(a real catalog server on a loopback port, the local S3 server). The engines themselves, with only the catalog's
URI and a token: tests/integration/interop/test_rest_on_s3.py."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from catalog_svc.server import CatalogServer, Settings
from lsmlake.catalog.data_tokens import DEFAULT_LIFETIME_S
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.security import ServerSecurity
from tests.support.paimon_rest import call, check_error
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, S3Server

TOKEN_PATH = "/v1/databases/db/tables/t/token"
READER = "reader-token-0123456789"
RELOAD_WITHIN_S = 30.0  # a bound on the wait for the catalog to see a changed grants file (it looks once a second)


def _args(*extra: str) -> list[str]:
    return ["--warehouse", "/tmp/wh", *extra]


def test_flags_default_to_granted_and_read_the_environment() -> None:
    s = Settings.from_args(_args(), env={})
    assert (s.data_tokens, s.data_token_grants, s.data_token_lifetime_s) == ("granted", None, DEFAULT_LIFETIME_S)
    s = Settings.from_args(_args(), env={"LSMLAKE_DATA_TOKENS": "off", "LSMLAKE_DATA_TOKEN_LIFETIME": "7200"})
    assert (s.data_tokens, s.data_token_lifetime_s) == ("off", 7200.0)
    assert Settings.from_args(_args("--data-tokens", "open"), env={"LSMLAKE_DATA_TOKENS": "off"}).data_tokens == "open"


@pytest.mark.parametrize(("extra", "problem"), [
    (("--data-tokens", "always"), "invalid choice: 'always'"),
    (("--data-token-lifetime", "600"), "--data-token-lifetime: data token lifetime 600.0 s is too short"),
    # old code started with these, then failed every token request (inf) or answered an expiry past 2^63 ms
    (("--data-token-lifetime", "inf"), "--data-token-lifetime: data token lifetime inf s is too long"),
    (("--data-token-lifetime", "1e20"), "--data-token-lifetime: data token lifetime 1e+20 s is too long"),
    (("--data-token-grants", "/nonexistent/grants.json"), "cannot read the data token grants /nonexistent/grants.json"),
])
def test_bad_flags_stop_the_start_naming_the_problem(extra: tuple[str, ...], problem: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(_args(*extra), env={})
    assert problem in capsys.readouterr().err


def test_a_grants_file_that_does_not_parse_or_is_not_read_stops_the_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "grants.json"
    bad.write_text('{"grants": [{"principal": "etl", "tables": ["orders"]}]}')
    with pytest.raises(SystemExit):
        Settings.from_args(_args("--data-token-grants", str(bad)), env={})
    assert "grants[0]: table pattern 'orders' names no database" in capsys.readouterr().err
    bad.write_text('{"grants": [{"principal": "etl", "tables": ["db.*"]}]}')
    with pytest.raises(SystemExit):
        Settings.from_args(_args("--data-token-grants", str(bad), "--data-tokens", "open"), env={})
    assert "--data-token-grants is only read with --data-tokens granted" in capsys.readouterr().err


@contextmanager
def _serving(s3: S3Server, tmp_path: Path, **settings: Any) -> Iterator[int]:
    """A catalog with a REST port on a fresh S3 warehouse holding table db.t; its REST port."""
    warehouse = s3.warehouse()
    FileSystemCatalog(warehouse).create_database("db", ignore_if_exists=True)
    FileSystemCatalog(warehouse).create_table("db.t", "id BIGINT NOT NULL", primary_keys=["id"],
                                              options={"bucket": "1"})
    server = CatalogServer(Settings(warehouse=warehouse, metastore=f"sqlite:///{tmp_path}/meta.sqlite", rest_port=0,
                                    expire_interval_s=0, orphan_interval_s=0, health_interval_s=0, **settings))
    server.start()
    try:
        assert server.rest_port is not None
        yield server.rest_port
    finally:
        server.stop()


def _config(port: int, token: str | None = None) -> dict[str, Any]:
    answer = call(port, "GET", "/v1/config?warehouse=lake", token=token)
    assert answer.status == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_open_hands_every_caller_the_warehouse_settings(s3_server: S3Server, tmp_path: Path) -> None:
    with _serving(s3_server, tmp_path, data_tokens="open") as port:
        assert _config(port)["defaults"] == {"data-token.enabled": "true"}
        answer = call(port, "GET", TOKEN_PATH)
        assert answer.status == 200, answer.text
        body = answer.json()
        token = body["token"]
        assert (token["s3.access-key"], token["s3.secret-key"]) == (ACCESS_KEY, SECRET_KEY)
        assert token["fs.s3.endpoint"] == token["s3.endpoint"] == s3_server.endpoint
        assert token["s3.path.style.access"] == "true" and token["s3.region"] == "us-east-1"
        assert isinstance(body["expiresAtMillis"], int) and set(body) == {"token", "expiresAtMillis"}
        check_error(call(port, "GET", "/v1/databases/db/tables/nope/token"), 404, what="no such table")


def test_locations_are_reported_as_uris_without_credentials(s3_server: S3Server, tmp_path: Path) -> None:
    with _serving(s3_server, tmp_path, data_tokens="open") as port:
        table = call(port, "GET", "/v1/databases/db/tables/t").json()
        db = call(port, "GET", "/v1/databases/db").json()
    # the engines open these with the token's settings: the scheme picks S3, and no secret is in them
    assert re.fullmatch(rf"s3://{s3_server.bucket}/wh-[0-9a-f]+/db\.db/t", table["path"]), table["path"]
    assert db["location"] == table["path"].rsplit("/", 1)[0]


def test_off_hands_out_nothing(s3_server: S3Server, tmp_path: Path) -> None:
    with _serving(s3_server, tmp_path, data_tokens="off") as port:
        assert _config(port)["defaults"] == {}
        body = check_error(call(port, "GET", TOKEN_PATH), 501, what="tokens off")
        assert "--data-tokens off" in body["message"] and ACCESS_KEY not in json.dumps(body)


def test_granted_without_a_token_file_tells_engines_nothing_and_refuses_the_token(s3_server: S3Server,
                                                                                    tmp_path: Path) -> None:
    with _serving(s3_server, tmp_path) as port:  # the default mode
        assert _config(port)["defaults"] == {}
        body = check_error(call(port, "GET", TOKEN_PATH), 403, what="nobody is named")
        assert "checks no tokens" in body["message"]


def test_granted_with_tokens_needs_a_token_and_a_grant(s3_server: S3Server, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": "etl", "role": "reader", "token": READER},
                                             {"principal": "bi", "role": "reader", "token": "bi-token-0123456789"}]}))
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps({"grants": [{"principal": "etl", "tables": ["db.t"]}]}))
    with _serving(s3_server, tmp_path, security=ServerSecurity(auth_tokens=str(tokens)),
                  data_token_grants=str(grants)) as port:
        check_error(call(port, "GET", "/v1/config?warehouse=lake"), 401, what="config without a token")
        assert _config(port, READER)["defaults"] == {"data-token.enabled": "true"}
        # bi has no grant: its engines are not told to ask (they bring their own storage settings)
        assert _config(port, "bi-token-0123456789")["defaults"] == {}
        check_error(call(port, "GET", TOKEN_PATH), 401, what="token without a token")
        body = check_error(call(port, "GET", TOKEN_PATH, token="bi-token-0123456789"), 403, what="no grant")
        assert "bi has no data token grant on table db.t" in body["message"]
        answer = call(port, "GET", TOKEN_PATH, token=READER)
        assert answer.status == 200 and answer.json()["token"]["fs.s3.accessKeyId"] == ACCESS_KEY

        # etl's grant taken away while the catalog runs: its next request is refused, without a restart
        grants.write_text(json.dumps({"grants": [{"principal": "bi", "tables": ["db.t"]}]}))
        deadline = time.monotonic() + RELOAD_WITHIN_S
        while (status := call(port, "GET", TOKEN_PATH, token=READER).status) == 200:
            assert time.monotonic() < deadline, f"etl still gets the token {RELOAD_WITHIN_S} s after its grant went"
            time.sleep(0.2)
        assert status == 403
        assert call(port, "GET", TOKEN_PATH, token="bi-token-0123456789").status == 200
        assert _config(port, "bi-token-0123456789")["defaults"] == {"data-token.enabled": "true"}
        assert _config(port, READER)["defaults"] == {}
