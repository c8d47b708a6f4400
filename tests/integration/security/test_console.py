"""The catalog's web console (`--ui-port`) over real HTTP on a loopback port: pages with a token (header) or a
console session (the login cookie), refusals without one or with an unknown one, logins and logouts posted from
another site refused, the ranked tables, a table's bucket pictures and compaction timeline."""

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
from lsmlake.auth.tokens import TokenStore
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.errors import PermissionDeniedError
from lsmlake.metastore import open_store
from lsmlake.rest.http_server import Request, Response
from lsmlake.rpc.events import snapshot_events
from tests.support.local_server import local_server
from tests.support.security import Tokens


def get(port: int, path: str, token: str | None = None, cookie: str | None = None, method: str = "GET",
        form: dict[str, str] | None = None, sent: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of one call; `sent`: more request headers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers.update(sent or {})
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


def log_in(port: int, token: str, sent: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """The answer to the login form posted as a browser posts it from the console's own page (unless `sent` says
    otherwise)."""
    return get(port, "/login", method="POST", form={"token": token},
               sent={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"} if sent is None else sent)


def session(port: int, token: str) -> str:
    """`lsmlake_session=<id>`: the cookie a login with `token` sets, as a browser sends it back."""
    status, body, headers = log_in(port, token)
    assert status == 303, body
    return headers["set-cookie"].split(";")[0]


def test_pages_need_a_token(ui: int, tokens: Tokens) -> None:
    for path in ("/", "/table/db/busy"):
        status, body, headers = get(ui, path)
        assert status == 401 and 'href="/login"' in body and headers["content-type"].startswith("text/html")
        assert get(ui, path, tokens.unknown)[0] == 401
        assert get(ui, path, cookie=f"lsmlake_session={tokens.unknown}")[0] == 401
        assert get(ui, path, cookie=f"lsmlake_session={tokens.reader}")[0] == 401  # a token is not a session
    status, body, headers = get(ui, "/login")  # the login form itself is public, and runs no script
    assert status == 200 and 'id="token"' in body and "<script" not in body
    assert "script-src" not in headers["content-security-policy"]  # default-src 'none': no script at all
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_the_login_form_sets_an_http_only_session_cookie_that_opens_the_pages(ui: int, tokens: Tokens) -> None:
    status, _, headers = log_in(ui, tokens.reader)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    name, _, value = cookie.split(";")[0].partition("=")
    flags = {f.strip().lower() for f in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= flags and "secure" not in flags  # no TLS here
    # the cookie holds a random session id, not the token: a stolen cookie is no API token
    assert name == "lsmlake_session" and tokens.reader not in cookie and len(value) >= 43
    assert get(ui, "/", cookie=f"{name}={value}")[0] == 200
    assert get(ui, "/table/db/busy", cookie=f"{name}={value}")[0] == 200
    assert session(ui, tokens.reader) != f"{name}={value}"  # every login its own session
    assert get(ui, "/login", method="POST", form={})[0] == 400
    assert get(ui, "/login", method="POST", form={"token": "x" * 5000})[0] == 400


def test_an_unknown_token_gets_the_login_form_again_and_no_cookie(ui: int, tokens: Tokens) -> None:
    status, body, headers = log_in(ui, tokens.unknown)
    assert status == 401 and 'id="token"' in body and "not valid" in body and "set-cookie" not in headers
    assert tokens.unknown not in body  # a token sent is never echoed


@pytest.mark.parametrize("sent", [
    {"Origin": "http://evil.example"},
    {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port or subdomain of the console's site: still another origin
    {"Origin": "null"},  # a sandboxed frame or a redirect's privacy
    {"Origin": "http://127.0.0.1:1"},  # the console's host, another port
    {"Origin": "https://127.0.0.1:{port}"},  # the console's host and port, another scheme
], ids=["origin", "origin-and-fetch-site", "fetch-site", "same-site", "null", "other-port", "other-scheme"])
def test_a_login_or_logout_posted_from_another_site_is_refused(ui: int, tokens: Tokens, sent: dict[str, str]) -> None:
    """Login CSRF: another site's page must not log the browser in to the console (as someone else) or out."""
    sent = {k: v.format(port=ui) for k, v in sent.items()}
    status, body, headers = log_in(ui, tokens.reader, sent)
    assert status == 403 and "set-cookie" not in headers and headers["content-type"].startswith("text/html")
    assert "another site" in body and 'href="/login"' in body, body
    cookie = session(ui, tokens.reader)
    status, body, headers = get(ui, "/logout", method="POST", cookie=cookie, sent=sent)
    assert status == 403 and "set-cookie" not in headers and "another site" in body
    assert get(ui, "/", cookie=cookie)[0] == 200  # the session stays open


@pytest.mark.parametrize("sent", [
    {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},  # a browser, from the login page
    {"Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "none"},  # typed or bookmarked by the user
    {"Origin": "http://127.0.0.1:{port}"},  # a browser without Sec-Fetch-* headers
    {"Origin": "HTTP://127.0.0.1:{port}"},
    {},  # no browser (curl): no cookie of a victim to abuse
], ids=["browser", "fetch-site", "fetch-site-none", "origin", "origin-upper-case", "curl"])
def test_a_login_from_the_console_itself_or_from_no_browser_is_accepted(ui: int, tokens: Tokens,
                                                                         sent: dict[str, str]) -> None:
    sent = {k: v.format(port=ui) for k, v in sent.items()}
    status, _, headers = log_in(ui, tokens.reader, sent)
    assert status == 303 and headers["set-cookie"].startswith("lsmlake_session=")
    cookie = headers["set-cookie"].split(";")[0]
    status, _, headers = get(ui, "/logout", method="POST", cookie=cookie, sent=sent)
    assert status == 303 and headers["location"] == "/login"


def test_logging_out_ends_the_session_on_the_server(ui: int, tokens: Tokens) -> None:
    """A copy of the cookie (stolen, or kept by the browser) stops working at logout, not only the browser's."""
    cookie = session(ui, tokens.reader)
    assert get(ui, "/", cookie=cookie)[0] == 200
    status, _, headers = get(ui, "/logout", method="POST", cookie=cookie, sent={"Sec-Fetch-Site": "same-origin"})
    assert status == 303 and headers["location"] == "/login"
    assert headers["set-cookie"].startswith("lsmlake_session=;") and "max-age=0" in headers["set-cookie"].lower()
    status, body, _ = get(ui, "/", cookie=cookie)  # the old cookie, replayed
    assert status == 401 and "log in again" in body
    assert get(ui, "/logout", method="POST")[0] == 303  # without a session, logging out is harmless


def test_the_session_cookie_is_no_bearer_token(ui: int, tokens: Tokens) -> None:
    """Only the cookie carries a session: sent as `Authorization: Bearer`, the session id is an unknown token."""
    session_id = session(ui, tokens.admin).partition("=")[2]
    assert get(ui, "/", token=session_id)[0] == 401
    assert get(ui, "/", token=tokens.admin)[0] == 200


def test_the_tables_ranked_by_health(ui: int, tokens: Tokens) -> None:
    status, body, headers = get(ui, "/", tokens.reader)
    assert status == 200 and headers["cache-control"] == "no-store" and "default-src 'none'" in headers[
        "content-security-policy"]
    rows = re.findall(r'<tr class="table-row">.*?href="/table/db/(\w+)"', body)
    assert rows == ["busy", "calm"]  # busy is past its stop trigger: stalled, first
    assert "STALLED" in body.split('href="/table/db/calm"')[0]
    # the browser's cookie works like the header
    status, by_cookie, _ = get(ui, "/", cookie=f"other=1; {session(ui, tokens.reader)}")
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
        status, _, headers = log_in(local.server.ui_port, "anything at all")  # and a login opens no session
        assert (status, headers["location"]) == (303, "/") and "lsmlake_session" not in headers["set-cookie"]
        rows = re.findall(r'<tr class="table-row">(.*?)</tr>', body)
        assert [re.search(r'href="/table/db/(\w+)"', r).group(1) for r in rows] == ["broken", "fine"]  # type: ignore
        assert "UNREADABLE" in rows[0] and "UNREADABLE" not in rows[1]


def test_under_tls_the_cookie_is_secure_and_the_console_s_origin_is_https(tmp_path: Path, tokens: Tokens) -> None:
    from lsmlake.auth.sessions import SessionStore  # the module of the fix: imported here, the other tests fail first

    cat = FileSystemCatalog(str(tmp_path))
    for tls in (False, True):
        with open_store(f"sqlite:///{tmp_path}/store-{tls}.sqlite") as store:
            console = Console(CatalogOperations(cat, store, snapshot_events), HealthHistory(), tls=tls,
                              sessions=SessionStore(TokenStore(tokens.file)))

            def post(origin: str, host: str = "lake:8080", console: Console = console) -> Response:
                try:
                    return console.log_in(Request("POST", "/login", {}, {}, {"token": tokens.reader}, None,
                                                  {"origin": origin, "host": host}))
                except PermissionDeniedError as e:  # the server answers it with a 403 page
                    return Response(str(e), 403)

            own, other = ("https", "http") if tls else ("http", "https")
            answer = post(f"{own}://lake:8080")
            assert answer.status == 303
            cookies = [v for k, v in answer.headers if k == "Set-Cookie" and v.startswith("lsmlake_session=")]
            assert len(cookies) == 1 and ("; Secure" in cookies[0]) is tls
            assert post(f"{own}://LAKE:8080/").status == 303
            assert post(f"{own}://lake", host=f"lake:{443 if tls else 80}").status == 303  # the default port
            assert post(f"{other}://lake:8080").status == 403
            assert post(f"{own}://lake").status == 403
            assert post(f"{own}://lake:8080", host="").status == 403  # no Host to compare with
            assert post(f"{own}://lake:8080", host="lake:x").status == 403
