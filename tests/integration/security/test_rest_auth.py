"""The Paimon REST catalog port against callers who hold valid tokens and misuse them, and against none.

A catalog serving REST checks bearer tokens of the same token file and roles as gRPC: reading needs
reader, `commit` writer (an OVERWRITE admin, a `lsmlake.*` snapshot property service), definitions and
deletions admin. Each role is tried with pypaimon (what an engine does) and with raw HTTP (what its
refusal looks like): a refusal is 401 or 403 with Paimon's error body, and leaves every database, table
and snapshot as it was. Last, the port's TLS: trusted https works, plain http does not.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pypaimon.api.rest_exception import ForbiddenException, NotAuthorizedException

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.security import ServerSecurity
from tests.support.certs import Certs
from tests.support.local_server import local_server
from tests.support.paimon_rest import (
    TableState,
    call,
    capture_commit,
    check_error,
    no_retries,
    pk_schema,
    pypaimon_catalog,
    pypaimon_write,
    rows,
    table_path,
    table_state,
)
from tests.support.security import Tokens

TABLE = "db.t"


@dataclass
class Rest:
    warehouse: str
    port: int
    tokens: Tokens

    def catalog(self, role: str) -> Any:
        return pypaimon_catalog(self.port, self.tokens.of(role))

    def table(self, role: str) -> Any:
        """The table as `role` loads it, with pypaimon's commit retries off (a refusal raises at once)."""
        return no_retries(self.catalog(role).get_table(TABLE))

    def state(self) -> tuple[dict[str, list[str]], dict[str, TableState]]:
        """Every database, table and snapshot of the warehouse."""
        cat = FileSystemCatalog(self.warehouse)
        tables = {db: cat.list_tables(db) for db in cat.list_databases()}
        return tables, {f"{db}.{t}": table_state(self.warehouse, f"{db}.{t}") for db, ts in tables.items()
                        for t in ts}

    def ids(self) -> list[int]:
        return table_state(self.warehouse, TABLE).ids

    def row_count(self) -> int:
        return FileSystemCatalog(self.warehouse).get_table(TABLE).to_arrow().num_rows


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[Rest]:
    warehouse = str(Path(tmp_path_factory.mktemp("rest-auth")) / "wh")
    with local_server(warehouse, rest_port=0, security=ServerSecurity(auth_tokens=tokens.file), expire_interval_s=0,
                      orphan_interval_s=0, reconcile_interval_s=0) as local:
        assert local.server.rest_port is not None
        r = Rest(warehouse, local.server.rest_port, tokens)
        admin = r.catalog("admin")
        admin.create_database("db", False)
        admin.create_table(TABLE, pk_schema(), False)
        for i in range(2):
            pypaimon_write(admin.get_table(TABLE), rows(range(i * 5, i * 5 + 5), f"a{i}-"))
        yield r


def forbidden(call_: Callable[[], Any]) -> str:
    """Run a pypaimon call that the server must refuse with 403; the server's message."""
    with pytest.raises(Exception) as info:
        call_()
    e: BaseException | None = info.value
    while e is not None and not isinstance(e, ForbiddenException):
        e = e.__cause__ or e.__context__
    assert e is not None, f"not refused with 403: {info.value!r}"
    return str(e)


def refused(rest: Rest, method: str, path: str, body: Any, token: str | None, status: int,
            headers: dict[str, str] | None = None) -> str:
    """A raw call refused with `status` and Paimon's error body, that changed nothing; the message."""
    before = rest.state()
    answer = call(rest.port, method, path, body, token=token, headers=headers)
    err = check_error(answer, status, what=f"{method} {path}")
    assert rest.state() == before, f"{method} {path}: refused with {status} but changed the warehouse"
    return str(err["message"])


def _calls(rest: Rest, commit: tuple[str, dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """One call of each kind: reads, definitions, a deletion and a commit."""
    return [("GET", "/v1/config?warehouse=lake", None), ("GET", "/v1/databases", None),
            ("GET", table_path("db", "t"), None), ("GET", table_path("db", "t") + "/snapshot", None),
            ("POST", "/v1/databases", {"name": "intruder"}), ("DELETE", table_path("db", "t"), None),
            ("POST", commit[0], commit[1]), ("GET", "/v1/nope", None)]


def test_no_token_or_an_unknown_one_is_401(rest: Rest) -> None:
    commit = capture_commit(rest.port, TABLE, rows(range(100, 103), "x"), rest.tokens.writer)
    admin = rest.tokens.admin
    bad_headers = [{}, {"Authorization": f"Bearer {rest.tokens.unknown}"}, {"Authorization": "Bearer"},
                   {"Authorization": "Bearer "}, {"Authorization": f"Basic {admin}"},  # a real token, wrong scheme
                   {"Authorization": f"Bearer {admin}x"}, {"Authorization": f"Bearer {admin[:-1]}"},
                   {"Authorization": f"Bearer {rest.tokens.file}"}]
    for method, path, body in _calls(rest, commit):
        for headers in bad_headers:
            message = refused(rest, method, path, body, None, 401, headers)
            assert "token" in message, message
            assert admin not in message  # a token sent is never echoed
    with pytest.raises(NotAuthorizedException):
        pypaimon_catalog(rest.port, rest.tokens.unknown)
    # the commit was refused for want of a token, not for being bad: the writer's token commits it
    answer = call(rest.port, "POST", commit[0], commit[1], token=rest.tokens.writer)
    assert (answer.status, answer.json()) == (200, {"success": True}), answer.text


def test_reader_reads_and_changes_nothing(rest: Rest) -> None:
    reader = rest.catalog("reader")
    assert reader.list_databases() == ["db"]
    assert reader.list_tables("db") == ["t"]
    table = reader.get_table(TABLE)
    rb = table.new_read_builder()
    assert rb.new_read().to_arrow(rb.new_scan().plan().splits()).num_rows == rest.row_count()
    before = rest.state()
    assert "role reader" in forbidden(lambda: reader.create_database("mine", False))
    assert "role reader" in forbidden(lambda: reader.create_table("db.mine", pk_schema(), False))
    assert "role reader" in forbidden(lambda: reader.drop_table(TABLE))
    assert "role reader" in forbidden(lambda: pypaimon_write(rest.table("reader"), rows(range(50, 53), "r")))
    assert rest.state() == before
    reader_token = rest.tokens.reader
    commit = capture_commit(rest.port, TABLE, rows(range(60, 63), "r"), reader_token)
    for method, path, body in [
            ("POST", "/v1/databases", {"name": "mine"}),
            ("POST", "/v1/databases/db/tables", {"identifier": {"database": "db", "object": "mine"}, "schema": {
                "fields": [{"id": 0, "name": "a", "type": "INT"}]}}),
            ("DELETE", table_path("db", "t"), None), ("DELETE", "/v1/databases/db", None),
            ("POST", commit[0], commit[1]), ("POST", table_path("db", "t") + "/tags", {"tagName": "mine"})]:
        assert "needs role" in refused(rest, method, path, body, reader_token, 403)


def test_writer_appends_and_nothing_more(rest: Rest) -> None:
    writer = rest.catalog("writer")
    ids, count = rest.ids(), rest.row_count()
    pypaimon_write(rest.table("writer"), rows(range(200, 203), "w"))
    assert rest.ids() == [*ids, ids[-1] + 1]
    assert rest.row_count() == count + 3
    before = rest.state()
    assert "role writer" in forbidden(lambda: writer.create_table("db.mine", pk_schema(), False))
    assert "role writer" in forbidden(lambda: writer.drop_table(TABLE))
    assert "OVERWRITE" in forbidden(lambda: pypaimon_write(rest.table("writer"), rows(range(5), "o"), overwrite=True))
    assert "lsmlake." in forbidden(lambda: pypaimon_write(rest.table("writer"), rows(range(5), "p"),
                                                          properties={"lsmlake.kafka.offsets": "{}"}))
    assert rest.state() == before
    token = rest.tokens.writer
    assert "needs role admin" in refused(rest, "DELETE", table_path("db", "t"), None, token, 403)
    assert "needs role admin" in refused(rest, "POST", "/v1/databases/db/tables", {
        "identifier": {"database": "db", "object": "mine"}, "schema": {"fields": [{"id": 0, "name": "a",
                                                                                  "type": "INT"}]}}, token, 403)
    # the same commits, raw: refused for what they do, so the admin's token publishes them as they are
    path, overwrite = capture_commit(rest.port, TABLE, rows(range(5), "o"), token, overwrite=True)
    assert overwrite["snapshot"]["commitKind"] == "OVERWRITE"
    assert "OVERWRITE" in refused(rest, "POST", path, overwrite, token, 403)
    steering = capture_commit(rest.port, TABLE, rows(range(5), "p"), token, properties={"lsmlake.kafka.offsets": "{}"})
    assert "lsmlake.kafka.offsets" in refused(rest, "POST", *steering, token, 403)
    # a writer may not claim another principal's commit users either
    _, plain = capture_commit(rest.port, TABLE, rows(range(5), "u"), token)
    as_root = {**plain, "snapshot": {**plain["snapshot"], "commitUser": "root/nightly"}}
    assert "another principal" in refused(rest, "POST", path, as_root, token, 403)
    answer = call(rest.port, "POST", path, overwrite, token=rest.tokens.admin)
    assert (answer.status, answer.json()) == (200, {"success": True}), answer.text
    assert rest.row_count() == 5  # the overwrite replaced every row


def test_service_steers_but_does_not_define(rest: Rest) -> None:
    """The services' role sets `lsmlake.*` properties (Kafka offsets) but is no admin."""
    ids = rest.ids()
    pypaimon_write(rest.table("service"), rows(range(300, 302), "s"), properties={"lsmlake.kafka.offsets": "{}"})
    assert rest.ids() == [*ids, ids[-1] + 1]
    latest = FileSystemCatalog(rest.warehouse).get_table(TABLE).snapshots.latest()
    assert latest is not None and (latest.properties or {}).get("lsmlake.kafka.offsets") == "{}"
    service = rest.catalog("service")
    before = rest.state()
    assert "role service" in forbidden(lambda: service.create_database("mine", False))
    assert "OVERWRITE" in forbidden(lambda: pypaimon_write(rest.table("service"), rows(range(5), "o"),
                                                           overwrite=True))
    assert rest.state() == before


def test_admin_does_everything(rest: Rest) -> None:
    admin = rest.catalog("admin")
    admin.create_database("adm", False)
    admin.create_table("adm.x", pk_schema(), False)
    table = no_retries(admin.get_table("adm.x"))
    pypaimon_write(table, rows(range(10), "a"))
    pypaimon_write(table, rows(range(3), "o"), overwrite=True, properties={"lsmlake.note": "admin"})
    t = FileSystemCatalog(rest.warehouse).get_table("adm.x")
    latest = t.snapshots.latest()
    assert latest is not None and latest.commit_kind == "OVERWRITE" and latest.id == 2
    assert (latest.properties or {}).get("lsmlake.note") == "admin"
    assert t.to_arrow().num_rows == 3
    admin.drop_table("adm.x")
    admin.drop_database("adm", False)
    assert "adm" not in FileSystemCatalog(rest.warehouse).list_databases()


def test_tls(tmp_path: Path, certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    """The REST port takes the gRPC port's certificate: https with the CA trusted works; plain http, or https
    without trusting the CA, does not."""
    security = ServerSecurity(tls_cert=certs.server_cert, tls_key=certs.server_key)
    with local_server(str(tmp_path / "wh"), rest_port=0, security=security, expire_interval_s=0,
                      orphan_interval_s=0, reconcile_interval_s=0) as local:
        port = local.server.rest_port
        assert port is not None
        trusted = ssl.create_default_context(cafile=certs.ca)
        answer = call(port, "GET", "/v1/config?warehouse=lake", tls=trusted)
        assert answer.status == 200 and answer.json() == {"defaults": {}, "overrides": {}}, answer.text
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            call(port, "GET", "/v1/config?warehouse=lake")
        with pytest.raises(ssl.SSLCertVerificationError):
            call(port, "GET", "/v1/config?warehouse=lake", tls=ssl.create_default_context())
        # the refused connections did not take the port down; an engine trusting the CA works through it
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", certs.ca)
        cat = pypaimon_catalog(port, scheme="https")
        cat.create_database("db", False)
        assert cat.list_databases() == ["db"]
