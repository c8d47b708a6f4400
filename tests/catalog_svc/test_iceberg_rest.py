"""The catalog's Iceberg REST API (`catalog_svc.iceberg_rest`, under `/iceberg` on the REST port) with pyiceberg 0.12's
REST catalog and raw HTTP, against a real catalog server on a loopback port (in this process), tokens checked.

The tables have `metadata.iceberg.storage=table-location`, so the catalog publishes their Iceberg metadata after
each commit (one has not: it has none). pyiceberg, given only the catalog's URI and a reader token, lists the
databases as namespaces and the tables that have Iceberg metadata, and scans exactly the rows lsmlake reads; a
missing namespace or table raises its own error (the 404's type says which); every write is refused with the reason
(406, Iceberg's error body) and changes nothing; without a token nothing is answered (401). On an S3 warehouse the
storage settings come in a table's config for a caller the data token policy gives them to, and pyiceberg scans with
nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.snapshot import APPEND, COMPACT
from lsmlake.fs.storage_settings import StorageSettings
from lsmlake.iceberg import current_metadata_location
from lsmlake.rest.iceberg_json import MAX_PAGE, file_io_config, page_of
from lsmlake.rpc.security import ServerSecurity
from lsmlake.table.compact import compact_buckets
from lsmlake.table.write import CommitMessage
from tests.support.fuzz.hostile import FUZZ, texts
from tests.support.local_server import Local, local_server
from tests.support.paimon_rest import ERROR_KEYS, LEAKS, Answer, call
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, S3Server
from tests.support.security import Tokens

pyiceberg_catalog = pytest.importorskip("pyiceberg.catalog", reason="pyiceberg (the test extra) is not installed")
from pyiceberg.exceptions import (  # noqa: E402 - after the skip that names what is missing
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    RESTError,
    UnauthorizedError,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
#: the option of a table whose Iceberg metadata the catalog publishes after each commit
ICEBERG = {"metadata.iceberg.storage": "table-location"}
_COMMITS = iter(range(1, 1_000_000))


@dataclass
class Lake:
    local: Local
    port: int
    tokens: Tokens

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/iceberg"

    def catalog(self, role: str = "reader") -> Any:
        return pyiceberg_catalog.load_catalog("lake", type="rest", uri=self.uri, token=self.tokens.of(role))

    def rows(self, tid: str) -> list[dict[str, Any]]:
        """What lsmlake reads of the table."""
        return _sorted(FileSystemCatalog(self.local.warehouse).get_table(tid).to_arrow())

    def snapshots(self) -> dict[str, int | None]:
        cat = FileSystemCatalog(self.local.warehouse)
        return {tid: cat.get_table(tid).snapshots.latest_id() for tid in cat.table_ids()}


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _create(warehouse: str, tid: str, options: dict[str, str], primary_key: bool = True) -> None:
    cat = FileSystemCatalog(warehouse)
    cat.create_database(tid.split(".")[0], ignore_if_exists=True)
    cat.create_table(tid, "id BIGINT NOT NULL, v STRING", primary_keys=["id"] if primary_key else [],
                     options={"bucket": "1" if primary_key else "-1", **options})


def _commit(local: Local, tid: str, rows: list[dict[str, Any]]) -> None:
    """Rows written with the library and committed through the catalog, which publishes the Iceberg metadata of
    a table with the option."""
    w = FileSystemCatalog(local.warehouse).get_table(tid).new_write()
    w.write(pa.Table.from_pylist(rows, schema=SCHEMA))
    _commit_changes(local, tid, APPEND, w.prepare_commit())


def _compact(local: Local, tid: str) -> None:
    """A full compaction committed through the catalog: a primary-key table's Iceberg readers see the top level
    only (Paimon's rule), so after it they see every row."""
    _, messages = compact_buckets(FileSystemCatalog(local.warehouse).get_table(tid), full=True)
    _commit_changes(local, tid, COMPACT, messages)


def _commit_changes(local: Local, tid: str, kind: str, messages: list[CommitMessage]) -> None:
    ops = local.server._operations
    assert ops is not None
    ops.writes.commit(CommitRequest(tid, kind, "iceberg-rest-test", next(_COMMITS), messages))


def _rows(ids: range, tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{tag}{i}"} for i in ids]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[Lake]:
    warehouse = str(tmp_path_factory.mktemp("iceberg-rest") / "wh")
    Path(warehouse).mkdir()
    _create(warehouse, "db.t", ICEBERG)
    _create(warehouse, "db.u", ICEBERG, primary_key=False)
    _create(warehouse, "db.plain", {})  # no Iceberg metadata: not an Iceberg table
    FileSystemCatalog(warehouse).create_database("empty")
    with local_server(warehouse, rest_port=0, security=ServerSecurity(auth_tokens=tokens.file), expire_interval_s=0,
                      orphan_interval_s=0, reconcile_interval_s=0, health_interval_s=0) as local:
        assert local.server.rest_port is not None
        _commit(local, "db.t", _rows(range(0, 10), "a"))
        _commit(local, "db.t", _rows(range(5, 15), "b"))  # overwrites half the keys
        _compact(local, "db.t")
        _commit(local, "db.u", _rows(range(3), "u"))
        _commit(local, "db.plain", _rows(range(3), "p"))
        yield Lake(local, local.server.rest_port, tokens)


def _check_error(answer: Answer, status: int, error_type: str, what: str) -> dict[str, Any]:
    """The answer is a refusal with this status and Iceberg's error body of this type; the error."""
    assert answer.status == status, f"{what}: {answer.status} (wanted {status}) {answer.text[:500]!r}"
    assert not any(leak in answer.text for leak in LEAKS), f"{what}: {answer.text[:500]!r}"
    body = answer.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"{what}: not an Iceberg error body: {answer.text[:500]}"
    error = body["error"]
    assert set(error) == {"message", "type", "code"} and error["code"] == status, f"{what}: {error}"
    assert error["type"] == error_type, f"{what}: type {error['type']!r}"
    assert isinstance(error["message"], str) and error["message"].strip(), f"{what}: no message"
    return dict(error)


# -- reading ---------------------------------------------------------------------------------------------------


def test_pyiceberg_lists_and_loads_the_published_tables_and_scans_what_lsmlake_reads(lake: Lake) -> None:
    cat = lake.catalog("reader")
    assert cat.list_namespaces() == [("db",), ("empty",)]
    assert cat.list_namespaces("db") == []  # nothing below a database
    assert cat.list_tables("db") == [("db", "t"), ("db", "u")]  # not db.plain: it has no Iceberg metadata
    assert cat.list_tables("empty") == []
    assert cat.load_namespace_properties("db")["location"].endswith("db.db")
    for tid in ("db.t", "db.u"):
        table = cat.load_table(tid)
        ours = FileSystemCatalog(lake.local.warehouse).get_table(tid)
        assert table.metadata_location == current_metadata_location(ours)
        assert table.metadata.current_snapshot_id is not None
        assert _sorted(table.scan().to_arrow()) == lake.rows(tid)
    assert lake.rows("db.t") == sorted(_rows(range(0, 5), "a") + _rows(range(5, 15), "b"), key=lambda r: r["id"])


def test_the_load_answer_is_the_current_metadata_file_as_it_is(lake: Lake) -> None:
    answer = call(lake.port, "GET", "/iceberg/v1/namespaces/db/tables/t", token=lake.tokens.reader)
    assert answer.status == 200, answer.text
    body = answer.json()
    assert set(body) == {"metadata-location", "metadata", "config"}
    location = current_metadata_location(FileSystemCatalog(lake.local.warehouse).get_table("db.t"))
    assert body["metadata-location"] == location and location is not None
    assert body["metadata"] == json.loads(Path(location.removeprefix("file:")).read_bytes())
    assert body["metadata"]["format-version"] == 2
    assert body["config"] == {}  # a local warehouse: the engine opens the files as they are


def test_head_endpoints_answer_204_or_404_without_a_body(lake: Lake) -> None:
    token = lake.tokens.reader
    for path, status in (("/iceberg/v1/namespaces/db", 204), ("/iceberg/v1/namespaces/empty", 204),
                         ("/iceberg/v1/namespaces/nope", 404), ("/iceberg/v1/namespaces/db/tables/t", 204),
                         ("/iceberg/v1/namespaces/db/tables/plain", 404),
                         ("/iceberg/v1/namespaces/db/tables/nope", 404), ("/iceberg/v1/namespaces/nope/tables/t", 404),
                         ("/iceberg/v1/namespaces/db/views/v", 404)):
        answer = call(lake.port, "HEAD", path, token=token)
        assert (answer.status, answer.text) == (status, ""), path
    cat = lake.catalog("reader")  # the config lists the HEAD endpoints, so pyiceberg uses them
    assert cat.namespace_exists("db") and not cat.namespace_exists("nope")
    assert not cat.namespace_exists(("db", "t"))  # namespaces have one level
    assert cat.table_exists("db.t") and not cat.table_exists("db.plain") and not cat.table_exists("db.nope")
    assert not cat.table_exists("nope.t")


def test_missing_namespaces_tables_and_views_raise_their_own_errors(lake: Lake) -> None:
    cat = lake.catalog("reader")
    with pytest.raises(NoSuchTableError, match="does not exist"):
        cat.load_table("db.nope")
    with pytest.raises(NoSuchTableError, match="metadata.iceberg.storage=table-location"):
        cat.load_table("db.plain")
    with pytest.raises(NoSuchTableError):
        cat.load_table("nope.t")
    with pytest.raises(NoSuchNamespaceError, match="nope"):
        cat.list_tables("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_namespaces("nope")
    with pytest.raises(NoSuchViewError):
        cat.load_view("db.v")
    assert cat.list_views("db") == []
    # the 404's type tells the two apart for clients that look at it (Iceberg Java)
    r = lake.tokens.reader
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces/nope/tables", token=r), 404,
                 "NoSuchNamespaceException", "tables of a missing namespace")
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces/db/tables/nope", token=r), 404,
                 "NoSuchTableException", "a missing table")
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces/a%1Fb", token=r), 404, "NoSuchNamespaceException",
                 "a nested namespace")
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces/db/tables/t/nothing", token=r), 404,
                 "NotFoundException", "a path the API does not have")
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces/d..b", token=r), 400, "BadRequestException",
                 "a name lsmlake cannot have")


def test_paimon_errors_keep_their_own_body_beside_icebergs(lake: Lake) -> None:
    for path in ("/v1/databases/nope", "/v1/nothing"):
        answer = call(lake.port, "GET", path, token=lake.tokens.reader)
        assert answer.status == 404 and set(answer.json()) == ERROR_KEYS, answer.text
    answer = call(lake.port, "GET", "/v1/databases")
    assert answer.status == 401 and set(answer.json()) == ERROR_KEYS, answer.text


def test_pages_of_namespaces_and_tables_walk_every_name_once(lake: Lake) -> None:
    def walk(path: str, key: str) -> list[Any]:
        seen: list[Any] = []
        token: str | None = None
        while True:
            query = "?pageSize=1" + (f"&pageToken={token}" if token else "")
            body = call(lake.port, "GET", path + query, token=lake.tokens.reader).json()
            assert len(body[key]) <= 1
            seen += body[key]
            token = body["next-page-token"]
            if token is None:
                return seen
    assert walk("/iceberg/v1/namespaces", "namespaces") == [["db"], ["empty"]]
    assert walk("/iceberg/v1/namespaces/db/tables", "identifiers") == [{"namespace": ["db"], "name": "t"},
                                                                       {"namespace": ["db"], "name": "u"}]
    _check_error(call(lake.port, "GET", "/iceberg/v1/namespaces?pageSize=0", token=lake.tokens.reader), 400,
                 "BadRequestException", "a page of nothing")


@given(names=st.lists(st.text("abc", min_size=1, max_size=3), unique=True), size=st.integers(1, 5),
       token=st.none() | st.text("abc", max_size=3))
def test_a_page_is_the_sorted_names_after_the_token_and_says_whether_more_follow(
        names: list[str], size: int, token: str | None) -> None:
    query = {"pageSize": str(size), **({"pageToken": token} if token else {})}
    shown, next_token = page_of(sorted(names), query)
    after = [n for n in sorted(names) if not token or n > token]  # the model
    assert shown == after[:size]
    assert next_token == (shown[-1] if len(after) > size else None)


def test_a_page_size_that_is_not_a_positive_number_is_refused_naming_it() -> None:
    for bad in ("0", "-1", "x", "1.5"):
        with pytest.raises(InvalidInputError, match="pageSize"):
            page_of(["a"], {"pageSize": bad})
    assert page_of([str(i) for i in range(MAX_PAGE + 5)], {"pageSize": str(MAX_PAGE * 2)})[0].__len__() == MAX_PAGE


# -- writing and auth ------------------------------------------------------------------------------------------

#: every write of Iceberg's REST spec a client may send, as raw calls
_WRITES = (
    ("POST", "/iceberg/v1/namespaces", {"namespace": ["x"]}),
    ("DELETE", "/iceberg/v1/namespaces/db", None),
    ("POST", "/iceberg/v1/namespaces/db/properties", {"removals": [], "updates": {"a": "b"}}),
    ("POST", "/iceberg/v1/namespaces/db/tables", {"name": "x", "schema": {"type": "struct", "fields": []}}),
    ("POST", "/iceberg/v1/namespaces/db/register", {"name": "x", "metadata-location": "/etc/passwd"}),
    ("POST", "/iceberg/v1/namespaces/db/tables/t", {"requirements": [], "updates": []}),
    ("DELETE", "/iceberg/v1/namespaces/db/tables/t?purgeRequested=true", None),
    ("POST", "/iceberg/v1/tables/rename", {"source": {"namespace": ["db"], "name": "t"},
                                           "destination": {"namespace": ["db"], "name": "x"}}),
    ("POST", "/iceberg/v1/transactions/commit", {"table-changes": []}),
    ("POST", "/iceberg/v1/namespaces/db/views", {"name": "v"}),
    ("POST", "/iceberg/v1/namespaces/db/register-view", {"name": "v", "metadata-location": "/x"}),
    ("POST", "/iceberg/v1/namespaces/db/views/v", {"requirements": [], "updates": []}),
    ("DELETE", "/iceberg/v1/namespaces/db/views/v", None),
    ("POST", "/iceberg/v1/views/rename", {"source": {"namespace": ["db"], "name": "v"},
                                          "destination": {"namespace": ["db"], "name": "w"}}),
)


def test_every_write_is_refused_saying_writes_go_through_paimon_and_changes_nothing(lake: Lake) -> None:
    before = (FileSystemCatalog(lake.local.warehouse).list_databases(), lake.snapshots())
    for role in ("reader", "admin"):
        for method, path, body in _WRITES:
            error = _check_error(call(lake.port, method, path, body, token=lake.tokens.of(role)), 406,
                                 "UnsupportedOperationException", f"{role} {method} {path}")
            assert "through Paimon" in error["message"], error
    cat = lake.catalog("admin")
    table = cat.load_table("db.t")
    attempts = (lambda: cat.create_namespace("x"), lambda: cat.drop_namespace("db"),
                lambda: cat.update_namespace_properties("db", updates={"a": "b"}),
                lambda: cat.create_table("db.x", table.schema()), lambda: cat.drop_table("db.t"),
                lambda: cat.rename_table("db.t", "db.x"),
                lambda: cat.register_table("db.x", table.metadata_location),
                lambda: table.transaction().set_properties(a="b").commit_transaction())
    for attempt in attempts:
        with pytest.raises(RESTError, match="lsmlake serves Iceberg read-only"):
            attempt()
    assert (FileSystemCatalog(lake.local.warehouse).list_databases(), lake.snapshots()) == before


def test_without_a_valid_token_nothing_is_answered(lake: Lake) -> None:
    for token in (None, lake.tokens.unknown):
        for path in ("/iceberg/v1/config", "/iceberg/v1/namespaces", "/iceberg/v1/namespaces/db/tables/t"):
            _check_error(call(lake.port, "GET", path, token=token), 401, "NotAuthorizedException", path)
        _check_error(call(lake.port, "POST", "/iceberg/v1/namespaces", {"namespace": ["x"]}, token=token), 401,
                     "NotAuthorizedException", "a write without a token")
    with pytest.raises(UnauthorizedError):
        pyiceberg_catalog.load_catalog("lake", type="rest", uri=lake.uri)
    with pytest.raises(UnauthorizedError):
        pyiceberg_catalog.load_catalog("lake", type="rest", uri=lake.uri, token=lake.tokens.unknown)


def test_the_config_lists_the_endpoints_served(lake: Lake) -> None:
    answer = call(lake.port, "GET", "/iceberg/v1/config?warehouse=anything", token=lake.tokens.reader)
    assert answer.status == 200, answer.text
    body = answer.json()
    assert (body["defaults"], body["overrides"]) == ({}, {})
    endpoints = set(body["endpoints"])
    for wanted in ("GET /v1/{prefix}/namespaces", "HEAD /v1/{prefix}/namespaces/{namespace}",
                   "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
                   "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
                   "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}"):
        assert wanted in endpoints, wanted
    assert all(e.split(" ")[1].startswith("/v1/{prefix}/") for e in endpoints), endpoints


# -- storage settings on S3 ------------------------------------------------------------------------------------


def test_file_io_config_names_the_settings_under_icebergs_keys() -> None:
    s = StorageSettings(endpoint="http://127.0.0.1:9000", region="eu-west-1", access_key_id="AK",
                        secret_access_key="SK", session_token="ST")
    assert file_io_config(s, 123) == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1", "client.region": "eu-west-1",
        "s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.session-token": "ST",
        "s3.path-style-access": "true", "s3.force-virtual-addressing": "false",
        "s3.session-token-expires-at-ms": "123"}
    aws = file_io_config(StorageSettings(region="us-east-1", path_style=False))
    assert aws == {"s3.region": "us-east-1", "client.region": "us-east-1", "s3.path-style-access": "false",
                   "s3.force-virtual-addressing": "true"}
    assert file_io_config(StorageSettings()) == {}


def test_s3_settings_go_in_the_config_to_callers_with_a_grant_only(s3_server: S3Server, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)  # pyiceberg gets the store's settings from the catalog or not at all
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    warehouse = s3_server.warehouse()
    _create(warehouse, "db.t", ICEBERG, primary_key=False)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": "etl", "role": "reader", "token": "etl-token-0123456789"},
                                             {"principal": "bi", "role": "reader", "token": "bi-token-0123456789"}]}))
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps({"grants": [{"principal": "etl", "tables": ["db.*"]}]}))
    with local_server(warehouse, rest_port=0, security=ServerSecurity(auth_tokens=str(tokens)),
                      data_token_grants=str(grants), expire_interval_s=0, orphan_interval_s=0,
                      reconcile_interval_s=0, health_interval_s=0) as local:
        port = local.server.rest_port
        assert port is not None
        _commit(local, "db.t", _rows(range(20), "s"))
        uri = f"http://127.0.0.1:{port}/iceberg"
        etl = pyiceberg_catalog.load_catalog("lake", type="rest", uri=uri, token="etl-token-0123456789")
        table = etl.load_table("db.t")
        assert table.metadata_location.startswith(f"s3://{s3_server.bucket}/")
        config = call(port, "GET", "/iceberg/v1/namespaces/db/tables/t", token="etl-token-0123456789").json()["config"]
        assert (config["s3.access-key-id"], config["s3.secret-access-key"]) == (ACCESS_KEY, SECRET_KEY)
        assert config["s3.endpoint"] == s3_server.endpoint and config["s3.path-style-access"] == "true"
        expected = _sorted(FileSystemCatalog(warehouse).get_table("db.t").to_arrow())
        assert _sorted(table.scan().to_arrow()) == expected == _rows(range(20), "s")
        creds = call(port, "GET", "/iceberg/v1/namespaces/db/tables/t/credentials",
                     token="etl-token-0123456789").json()["storage-credentials"]
        assert len(creds) == 1 and table.metadata.location.startswith(creds[0]["prefix"])
        expiry = "s3.session-token-expires-at-ms"  # stamped at each call
        assert {k: v for k, v in creds[0]["config"].items() if k != expiry} == \
            {k: v for k, v in config.items() if k != expiry}

        # bi may read the table but has no grant: its engines bring their own storage settings
        answer = call(port, "GET", "/iceberg/v1/namespaces/db/tables/t", token="bi-token-0123456789")
        assert answer.status == 200 and answer.json()["config"] == {} and ACCESS_KEY not in answer.text
        answer = call(port, "GET", "/iceberg/v1/namespaces/db/tables/t/credentials", token="bi-token-0123456789")
        assert answer.json() == {"storage-credentials": []}


# -- hostile calls ---------------------------------------------------------------------------------------------

_TEMPLATES = ("/iceberg/v1/namespaces/{0}", "/iceberg/v1/namespaces/{0}/tables",
              "/iceberg/v1/namespaces/{0}/tables/{1}", "/iceberg/v1/namespaces/db/tables/{1}",
              "/iceberg/v1/namespaces/{0}/tables/{1}/credentials", "/iceberg/v1/namespaces/{0}/tables/{1}/metrics",
              "/iceberg/v1/namespaces/{0}/views/{1}", "/iceberg/v1/namespaces?parent={0}&pageToken={1}",
              "/iceberg/v1/namespaces/db/tables?pageSize={0}",
              "/iceberg/v1/namespaces/db/tables?pageToken={0}&pageSize={1}", "/iceberg/{0}/{1}")
_HEAD_TOO_LARGE = 431  # a 100k-char name: refused before any path is known, in Paimon's shape


@FUZZ
@given(method=st.sampled_from(("GET", "HEAD", "POST", "DELETE", "PUT")), template=st.sampled_from(_TEMPLATES),
       a=texts, b=texts)
def test_hostile_names_and_queries_are_answered_in_icebergs_shape_and_change_nothing(
        lake: Lake, method: str, template: str, a: str, b: str) -> None:
    before = lake.snapshots()
    path = template.format(quote(a, safe=""), quote(b, safe=""))
    answer = call(lake.port, method, path, token=lake.tokens.reader)
    assert answer.status in (200, 204, 400, 404, 405, 406, _HEAD_TOO_LARGE), (path[:300], answer.text[:300])
    assert not any(leak in answer.text for leak in LEAKS), answer.text[:500]
    if answer.status >= 400 and answer.status != _HEAD_TOO_LARGE and method != "HEAD":
        body = answer.json()
        assert set(body) == {"error"} and body["error"]["code"] == answer.status, answer.text[:500]
    assert lake.snapshots() == before
