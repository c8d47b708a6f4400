"""The catalog's web console (`--ui-port`) over real HTTP on a loopback port: pages with a token (header or the
login cookie), refusals without one or with an unknown one, the ranked tables, a table's bucket pictures and
compaction timeline."""

from __future__ import annotations

import http.client
import re

import pytest

from catalog_svc.console_svg import window_ms

from .conftest import Tokens


def get(port: int, path: str, token: str | None = None, cookie: str | None = None) -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    try:
        conn.request("GET", path, headers=headers)
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
    status, body, _ = get(ui, "/login")  # the login form itself is public
    assert status == 200 and 'id="token"' in body and "lsmlake_token" in body


def test_the_tables_ranked_by_health(ui: int, tokens: Tokens) -> None:
    status, body, headers = get(ui, "/", tokens.reader)
    assert status == 200 and headers["cache-control"] == "no-store" and "default-src 'none'" in headers[
        "content-security-policy"]
    rows = re.findall(r'<tr class="table-row">.*?href="/table/db/(\w+)"', body)
    assert rows == ["busy", "calm"]  # busy sits at its stop trigger: stalled, first
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
    assert "<script>x</script>" not in body and "&lt;i&gt;2026&lt;/i&gt;" in body  # values are escaped
    assert "STALLED" in body


def test_unknown_tables_and_bad_names_are_refused_with_a_page(ui: int, tokens: Tokens) -> None:
    status, body, _ = get(ui, "/table/db/nope", tokens.reader)
    assert status == 404 and "<html>" in body
    status, _, _ = get(ui, "/table/..%2Fx/t", tokens.reader)
    assert status in (400, 404)
    assert get(ui, "/nothing", tokens.reader)[0] == 404


def test_a_writer_token_reads_the_console_too(ui: int, tokens: Tokens) -> None:
    """Pages need the reader role, which every role includes."""
    assert all(get(ui, "/", tokens.of(role))[0] == 200 for role in ("reader", "writer", "service", "admin"))


@pytest.mark.parametrize(("earliest_ago_s", "minutes"), [
    (None, 60), (0, 5), (299, 5), (301, 10), (600, 10), (601, 15), (20 * 60, 30), (45 * 60, 60), (3 * 3600, 60)])
def test_the_charts_reach_back_to_the_earliest_thing_drawn(earliest_ago_s: int | None, minutes: int) -> None:
    now = 10**12
    assert window_ms(None if earliest_ago_s is None else now - earliest_ago_s * 1000, now) == minutes * 60_000
