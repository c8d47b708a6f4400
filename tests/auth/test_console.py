"""The catalog's web console (`--ui-port`) over real HTTP on a loopback port: pages with a token (header or the
login cookie), refusals without one or with an unknown one, the ranked tables, a table's bucket pictures and
compaction timeline."""

from __future__ import annotations

import http.client
import re
from pathlib import Path
from urllib.parse import urlencode

import pyarrow as pa
import pytest

from catalog_svc.console import Console
from catalog_svc.console_svg import window_ms
from catalog_svc.health_history import HealthHistory
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.metastore import open_store
from lsmlake.rest.http_server import Request

from ..catalog_svc.local_server import local_server
from .conftest import Tokens


def get(port: int, path: str, token: str | None = None, cookie: str | None = None, method: str = "GET",
        form: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    body = None
    if form is not None:
        body, headers["Content-Type"] = urlencode(form), "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def test_pages_need_a_token(ui: int, tokens: Tokens) -> None:
    for path in ("/", "/table/db/busy"):
        status, body, headers = get(ui, path)
        assert status == 401 and 'href="/login"' in body and headers["content-type"].startswith("text/html")
        assert get(ui, path, tokens.unknown)[0] == 401
        assert get(ui, path, cookie=f"lsmlake_token={tokens.unknown}")[0] == 401
    status, body, headers = get(ui, "/login")  # the login form itself is public, and runs no script
    assert status == 200 and 'id="token"' in body and "<script" not in body
    assert "script-src" not in headers["content-security-policy"]  # default-src 'none': no script at all
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_the_login_form_sets_an_http_only_cookie_that_opens_the_pages(ui: int, tokens: Tokens) -> None:
    status, _, headers = get(ui, "/login", method="POST", form={"token": tokens.reader})
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    flags = {f.strip().lower() for f in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags and "secure" not in flags  # no TLS here
    assert get(ui, "/", cookie=cookie.split(";")[0])[0] == 200
    # an unknown token is taken into the cookie, but the pages refuse it
    _, _, headers = get(ui, "/login", method="POST", form={"token": tokens.unknown})
    assert get(ui, "/", cookie=headers["set-cookie"].split(";")[0])[0] == 401
    assert get(ui, "/login", method="POST", form={})[0] == 400
    assert get(ui, "/login", method="POST", form={"token": "x" * 5000})[0] == 400
    status, _, headers = get(ui, "/logout", method="POST")
    assert status == 303 and headers["location"] == "/login" and "max-age=0" in headers["set-cookie"].lower()


def test_the_tables_ranked_by_health(ui: int, tokens: Tokens) -> None:
    status, body, headers = get(ui, "/", tokens.reader)
    assert status == 200 and headers["cache-control"] == "no-store" and "default-src 'none'" in headers[
        "content-security-policy"]
    rows = re.findall(r'<tr class="table-row">.*?href="/table/db/(\w+)"', body)
    assert rows == ["busy", "calm"]  # busy is past its stop trigger: stalled, first
    assert "STALLED" in body.split('href="/table/db/calm"')[0]
    # the browser's cookie works like the header
    status, by_cookie, _ = get(ui, "/", cookie=f"other=1; lsmlake_token={tokens.reader}")
    assert status == 200 and re.findall(r'href="/table/db/(\w+)"', by_cookie) == ["busy", "calm"]


def test_a_table_page_draws_buckets_and_the_timeline(ui: int, tokens: Tokens) -> None:
    status, body, _ = get(ui, "/table/db/busy", tokens.reader)
    assert status == 200
    assert len(re.findall(r'<svg class="lsm"', body)) == 2  # two buckets of one partition
    assert len(re.findall(r'<rect class="run" data-level="0"', body)) == 12  # 6 level-0 runs in each
    assert '<svg class="timeline"' in body and body.count('<svg class="line"') == 3
    assert "<i>2026</i>" not in body and "&lt;i&gt;2026&lt;/i&gt;" in body  # partition values are escaped
    assert "STALLED" in body


def test_unknown_tables_and_bad_names_are_refused_with_a_page(ui: int, tokens: Tokens) -> None:
    status, body, _ = get(ui, "/table/db/nope", tokens.reader)
    assert status == 404 and "<html>" in body
    status, body, _ = get(ui, "/table/..%2Fx/t", tokens.reader)
    assert status == 400 and "database" in body
    assert get(ui, "/nothing", tokens.reader)[0] == 404


def test_a_writer_token_reads_the_console_too(ui: int, tokens: Tokens) -> None:
    """Pages need the reader role, which every role includes."""
    assert all(get(ui, "/", tokens.of(role))[0] == 200 for role in ("reader", "writer", "service", "admin"))


@pytest.mark.parametrize(("earliest_ago_s", "minutes"), [
    (None, 60), (0, 5), (299, 5), (301, 10), (600, 10), (601, 15), (20 * 60, 30), (45 * 60, 60), (3 * 3600, 60)])
def test_the_charts_reach_back_to_the_earliest_thing_drawn(earliest_ago_s: int | None, minutes: int) -> None:
    now = 10**12
    assert window_ms(None if earliest_ago_s is None else now - earliest_ago_s * 1000, now) == minutes * 60_000


def test_an_unreadable_table_is_listed_first_with_its_error(tmp_path: Path) -> None:
    """A table whose files cannot be listed is not left out of the page: it ranks first, saying why."""
    warehouse = str(tmp_path / "wh")
    with local_server(warehouse, ui_port=0, expire_interval_s=0, orphan_interval_s=0, reconcile_interval_s=0,
                      health_interval_s=0) as local:
        cat = FileSystemCatalog(warehouse)
        cat.create_database("db")
        for name in ("fine", "broken"):
            cat.create_table(f"db.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                             options={"bucket": "1"})
            cat.get_table(f"db.{name}").write_arrow(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
        broken = cat.get_table("db.broken")
        snap = broken.snapshots.latest()
        assert snap is not None
        broken.io.delete(f"{broken.path}/manifest/{snap.base_manifest_list}")
        assert local.server.ui_port is not None
        status, body, _ = get(local.server.ui_port, "/", token="any")  # no token file: the console is open
        assert status == 200
        rows = re.findall(r'<tr class="table-row">(.*?)</tr>', body)
        assert [re.search(r'href="/table/db/(\w+)"', r).group(1) for r in rows] == ["broken", "fine"]  # type: ignore
        assert "UNREADABLE" in rows[0] and "UNREADABLE" not in rows[1]


def test_the_cookie_is_sent_over_tls_only_when_the_console_is_served_over_tls(tmp_path: Path) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    for tls in (False, True):
        with open_store(f"sqlite:///{tmp_path}/store-{tls}.sqlite") as store:
            console = Console(cat, store, HealthHistory(), tls=tls)
            answer = console.log_in(Request("POST", "/login", {}, {}, {"token": "t+/="}, None))
        cookie = dict(answer.headers)["Set-Cookie"]
        assert cookie.startswith("lsmlake_token=t%2B%2F%3D;") and ("; Secure" in cookie) is tls
