"""The console's pages and its compaction form over real HTTP on a loopback port (what needs no browser): an open
console (no token file) shows the buttons to everyone and still wants the form's CSRF token; an API caller's admin
bearer token posts with the token of its own page; bad addresses and forms are refused naming the problem; a table
with no snapshot has a page; what a table's definition holds stays text."""

from __future__ import annotations

import dataclasses
import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.types import parse_schema_fields
from lsmlake.metastore import open_store
from lsmlake.rpc.security import ServerSecurity
from tests.support.local_server import local_server
from tests.support.security import Tokens

QUIET = {"expire_interval_s": 0, "orphan_interval_s": 0, "reconcile_interval_s": 0, "health_interval_s": 0}


def _seed(warehouse: str) -> None:
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db")
    fields = [dataclasses.replace(f, description="<b>key</b>") if f.name == "id" else f
              for f in parse_schema_fields("id BIGINT NOT NULL, v STRING")]
    cat.create_table("db.t", fields, primary_keys=["id"],
                     options={"bucket": "1", "write-only": "true", "snapshot.num-retained.max": "50"},
                     comment="<img src=x>")
    for i in range(6):  # past num-sorted-run.compaction-trigger (5): a compaction is due
        cat.get_table("db.t").write_arrow(pa.table({"id": pa.array([i, i + 10], pa.int64()), "v": ["<i>v</i>"] * 2}))
    cat.create_table("db.empty", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    cat.create_table("db.one", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    cat.get_table("db.one").write_arrow(pa.table({"id": pa.array([1], pa.int64())}))


@pytest.fixture(scope="module")
def open_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    warehouse = str(Path(tmp_path_factory.mktemp("open-console")) / "wh")
    with local_server(warehouse, ui_port=0, **QUIET) as local:
        _seed(warehouse)
        assert local.server.ui_port is not None
        yield local.server.ui_port, warehouse


@pytest.fixture(scope="module")
def token_ui(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[tuple[int, str]]:
    warehouse = str(Path(tmp_path_factory.mktemp("token-console")) / "wh")
    with local_server(warehouse, ui_port=0, security=ServerSecurity(auth_tokens=tokens.file), **QUIET) as local:
        _seed(warehouse)
        assert local.server.ui_port is not None
        yield local.server.ui_port, warehouse


def call(port: int, method: str, path: str, headers: dict[str, str] | None = None,
         form: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = dict(headers or {})
    body = None
    if form is not None:
        body, sent["Content-Type"] = urlencode(form), "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=sent)
        r = conn.getresponse()
        return r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def _csrf(page: str) -> str:
    found = re.search(r'<form class="inline" id="compact-now".*?name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page[:2000]
    return found.group(1)


def _plans(warehouse: str) -> list[tuple[int, str]]:
    with open_store(f"sqlite:///{warehouse}/_meta.sqlite") as store:
        return [(p.plan_id, p.state) for p in store.plans.list_plans("db.t")]


def test_an_open_console_shows_the_buttons_and_still_wants_the_csrf_token(open_ui: tuple[int, str]) -> None:
    port, warehouse = open_ui
    status, page, _ = call(port, "GET", "/table/db/t")
    assert status == 200 and 'id="compact-now"' in page and 'id="full-compaction"' in page
    csrf = _csrf(page)
    for form, sent in (({"full": "0"}, {}), ({"full": "0", "csrf": "0" * 64}, {}),
                       ({"full": "0", "csrf": csrf}, {"Sec-Fetch-Site": "cross-site"}),
                       ({"full": "0", "csrf": csrf}, {"Origin": "http://evil.example"})):
        status, body, _ = call(port, "POST", "/table/db/t/compact", sent, form)
        assert status == 403 and "nothing changed" in body and _plans(warehouse) == []
    status, _, headers = call(port, "POST", "/table/db/t/compact", {"Sec-Fetch-Site": "same-origin"},
                              {"full": "0", "csrf": csrf})
    assert status == 303
    (plan,) = _plans(warehouse)
    assert headers["location"] == f"/table/db/t?requested={plan[0]}" and plan[1] == "REQUESTED"
    status, page, _ = call(port, "GET", headers["location"])
    assert f"compaction plan {plan[0]} requested" in page


def test_bad_forms_and_addresses_are_refused_naming_the_problem(open_ui: tuple[int, str]) -> None:
    port, warehouse = open_ui
    csrf = _csrf(call(port, "GET", "/table/db/t")[1])
    before = _plans(warehouse)
    status, body, _ = call(port, "POST", "/table/db/t/compact", {}, {"full": "2", "csrf": csrf})
    assert status == 400 and "full=&#x27;2&#x27; must be 0 or 1" in body
    status, body, _ = call(port, "POST", "/table/db/nope/compact", {}, {"full": "0", "csrf": csrf})
    assert status == 404
    status, body, _ = call(port, "POST", "/table/db/empty/compact", {}, {"full": "1", "csrf": csrf})
    assert status == 400 and "db.empty has no snapshot yet: nothing to compact" in body
    status, body, _ = call(port, "POST", "/table/db/one/compact", {}, {"full": "0", "csrf": csrf})
    assert status == 400 and "nothing to compact in db.one now: no bucket has anything to compact" in body
    assert _plans(warehouse) == before
    for path, name in (("/?page=x", "page"), ("/?refresh=-1", "refresh"), ("/table/db/t?sp=0", "sp"),
                       ("/table/db/t?pp=abc", "pp"), ("/table/db/t?bp=1e3", "bp"), (f"/?q={'x' * 300}", "q")):
        status, body, _ = call(port, "GET", path)
        assert status == 400 and name in body, (path, body)


def test_a_table_without_a_snapshot_has_a_page_and_definitions_stay_text(open_ui: tuple[int, str]) -> None:
    port, _ = open_ui
    status, page, _ = call(port, "GET", "/table/db/empty")
    assert status == 200 and "no data files" in page and 'id="schema"' in page
    status, page, _ = call(port, "GET", "/table/db/t")
    assert status == 200
    for raw in ("<b>key</b>", "<img src=x>", "<i>v</i>"):
        assert raw not in page
    assert "&lt;b&gt;key&lt;/b&gt;" in page and "&lt;img src=x&gt;" in page
    assert '<td class="l">snapshot.num-retained.max</td><td class="l">50</td>' in page


def test_an_admin_bearer_token_posts_with_its_own_page_s_token(token_ui: tuple[int, str], tokens: Tokens) -> None:
    port, warehouse = token_ui
    admin = {"Authorization": f"Bearer {tokens.admin}"}
    reader = {"Authorization": f"Bearer {tokens.reader}"}
    assert 'id="compact-now"' not in call(port, "GET", "/table/db/t", reader)[1]
    csrf = _csrf(call(port, "GET", "/table/db/t", admin)[1])
    status, body, _ = call(port, "POST", "/table/db/t/compact", reader, {"full": "1", "csrf": csrf})
    assert status == 403 and "may not request compactions" in body
    assert call(port, "POST", "/table/db/t/compact", {}, {"full": "1", "csrf": csrf})[0] == 401
    assert _plans(warehouse) == []
    status, _, headers = call(port, "POST", "/table/db/t/compact", admin, {"full": "1", "csrf": csrf})
    assert status == 303 and [s for _, s in _plans(warehouse)] == ["REQUESTED"]
