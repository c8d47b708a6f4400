"""The operator's console in a real headless Chromium, against two real catalog replicas over one warehouse and
metadata store: `console` checks tokens and serves the pages, `beats` takes the heartbeats of a writer and two
compactors (sent by those services' own heartbeat modules). The tables are in known states:

- `shop.busy`: two buckets of six level-0 runs each, past its stop trigger (stalled);
- `shop.sized`: one bucket with a 10-row and a 2,000-row level-0 file (the linear LSM picture);
- `shop.compacted`: three writes, then a full compaction by the library (write amplification);
- `shop.parts`: 80 partitions (partitions and bucket pictures paged, and filtered);
- `many.t00` .. `many.t52`: empty tables, so that the table list has two pages.

Every figure the pages show is compared with the library's own numbers (the manifests' files, the snapshots, the
schema, the timeline), computed here. With `LSMLAKE_SCREENSHOT_DIR` set, the pages are saved there as PNG (the
README's pictures: `LSMLAKE_SCREENSHOT_DIR=docs/images pytest tests/integration/test_console_browser.py`).
"""

from __future__ import annotations

import http.client
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pyarrow as pa
import pytest

from catalog_svc import console_format as fmt
from compactor_svc.heartbeat import compactor_heartbeat
from compactor_svc.ownership import Ownership
from compactor_svc.state import CompactorState, RunningPlan
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.format.manifest import ADD, DELETE
from lsmlake.metastore import MetaStore, open_store
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.convert import ProtoPlanCodec
from lsmlake.rpc.events import snapshot_events
from lsmlake.rpc.heartbeat import HeartbeatSender
from lsmlake.rpc.security import ServerSecurity
from lsmlake.table.compact import compact_table, restore_levels
from lsmlake.table.postpone import every_bucket
from tests.support.browser import By, WebDriver, WebDriverWait, headless_chromium, screenshot
from tests.support.local_server import local_server
from tests.support.security import Tokens
from writer_svc.heartbeat import writer_heartbeat

BEAT_S = 0.3
EMPTY_TABLES = 53


@dataclass
class Cluster:
    ui: int
    warehouse: str
    store: MetaStore
    ops: CatalogOperations
    compactor_2: HeartbeatSender  # stopped by the services test


def _write(cat: FileSystemCatalog, tid: str, ids: range, dt: str = "d") -> None:
    cat.get_table(tid).write_arrow(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"value {i}" for i in ids],
                                             "dt": [dt] * len(ids)}))


def _seed(warehouse: str) -> None:
    cat = FileSystemCatalog(warehouse)
    for db in ("shop", "many"):
        cat.create_database(db)
    columns = "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL"
    cat.create_table("shop.busy", columns, primary_keys=["dt", "id"], partition_keys=["dt"],
                     options={"bucket": "2", "write-only": "true", "num-sorted-run.stop-trigger": "5"})
    for i in range(6):
        _write(cat, "shop.busy", range(i * 8, i * 8 + 8))
    cat.create_table("shop.sized", columns, primary_keys=["id"], options={"bucket": "1", "write-only": "true"},
                     comment="two level-0 files of different sizes")
    _write(cat, "shop.sized", range(10))
    _write(cat, "shop.sized", range(100, 2100))
    cat.create_table("shop.compacted", columns, primary_keys=["id"], options={"bucket": "1", "write-only": "true"})
    for i in range(3):
        _write(cat, "shop.compacted", range(i * 500, i * 500 + 700))
    compact_table(cat.get_table("shop.compacted"), full=True)
    cat.create_table("shop.parts", "id BIGINT NOT NULL, p INT NOT NULL", primary_keys=["p", "id"],
                     partition_keys=["p"], options={"bucket": "1", "write-only": "true"})
    cat.get_table("shop.parts").write_arrow(pa.table({"id": pa.array(range(80), pa.int64()),
                                                      "p": pa.array(range(80), pa.int32())}))
    for i in range(EMPTY_TABLES):
        cat.create_table(f"many.t{i:02d}", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, tokens: Tokens) -> Iterator[Cluster]:
    warehouse = str(Path(tmp_path_factory.mktemp("console-pages")) / "wh")
    quiet = {"expire_interval_s": 0, "orphan_interval_s": 0, "reconcile_interval_s": 0}
    with local_server(warehouse, ui_port=0, security=ServerSecurity(auth_tokens=tokens.file), health_interval_s=0.5,
                      **quiet) as console, local_server(warehouse, health_interval_s=0, **quiet) as beats:
        _seed(warehouse)
        client = CatalogClient(f"127.0.0.1:{beats.server.port}", timeout_s=10)
        ownership, state = Ownership(), CompactorState()
        ownership.update({0, 2}, 4)
        state.plan_started(RunningPlan("shop.busy", "41", 2, False, time.monotonic(), ()))
        senders = [writer_heartbeat(client, "writer-a", "10.0.0.5:50052", "writer-a-1f2e", BEAT_S),
                   compactor_heartbeat(client, "compactor-a", "10.0.0.6:50053", ownership, state, BEAT_S),
                   compactor_heartbeat(client, "compactor-b", "10.0.0.7:50053", Ownership(), CompactorState(),
                                       BEAT_S)]
        for s in senders:
            s.start()
        store = open_store(f"sqlite:///{warehouse}/_meta.sqlite")
        ops = CatalogOperations(FileSystemCatalog(warehouse), store, snapshot_events, ProtoPlanCodec())
        assert console.server.ui_port is not None
        try:
            _until("the heartbeats arrive", lambda: all(s.sent for s in senders))
            yield Cluster(console.server.ui_port, warehouse, store, ops, senders[2])
        finally:
            for s in senders:
                s.stop(goodbye=False)
            client.close()
            store.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def _until(what: str, check: object, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline_s} s: {what}")
        time.sleep(0.05)


def _shoot(driver: WebDriver, name: str) -> None:
    out = os.environ.get("LSMLAKE_SCREENSHOT_DIR")
    if out:
        screenshot(driver, Path(out) / f"{name}.png")


def _log_in(browser: WebDriver, port: int, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"http://127.0.0.1:{port}/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.execute_script("document.documentElement.dataset.form = 'login'")  # marks the form's page
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    _loaded(browser)


def _loaded(browser: WebDriver) -> None:
    """Wait for the page a click asked for: the old one was marked, the new one is not and is loaded."""
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return document.documentElement.dataset.form === undefined && document.readyState === 'complete'"))


def _click(browser: WebDriver, css: str) -> None:
    browser.execute_script("document.documentElement.dataset.form = 'clicked'")
    browser.find_element(By.CSS_SELECTOR, css).click()
    _loaded(browser)


def _open(browser: WebDriver, port: int, path: str) -> None:
    browser.get(f"http://127.0.0.1:{port}{path}")


def _rows(browser: WebDriver, css: str) -> list[list[str]]:
    return [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in browser.find_elements(By.CSS_SELECTOR, css)]


COLOURS = {"good": "green", "warning": "amber", "bad": "red"}  # of the library's health severities


def _live(ops: CatalogOperations, tid: str) -> tuple[int, int, int]:
    """(bytes, rows, files) of the table's latest snapshot, from its manifests."""
    table = ops.get_table(tid)
    snap = table.latest_snapshot()
    assert snap is not None
    files = [e.file for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values()]
    return sum(f.file_size for f in files), snap.total_record_count, len(files)


def _post(port: int, path: str, form: dict[str, str], cookie: str, sent: dict[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=urlencode(form), headers={
            "Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded",
            **({"Sec-Fetch-Site": "same-origin"} if sent is None else sent)})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _plans(cluster: Cluster, tid: str) -> list[tuple[int, str]]:
    return [(p.plan_id, p.state) for p in cluster.ops.list_compaction_plans(tid, None)]


# -- every page, and its refresh ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/services", "/table/shop/busy", "/table/shop/parts"])
def test_every_page_renders_and_refreshes_itself_unless_told_not_to(cluster: Cluster, browser: WebDriver,
                                                                    tokens: Tokens, path: str) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, path)
    title = browser.find_element(By.TAG_NAME, "h1").text
    assert title in ("Tables", "Services", "shop.busy", "shop.parts")
    refresh = browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    assert [m.get_attribute("content") for m in refresh] == ["15"]
    _click(browser, "#refresh-off")
    assert "refresh=0" in browser.current_url and browser.find_element(By.TAG_NAME, "h1").text == title
    assert not browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')
    # the links keep the page from refreshing
    hrefs = [a.get_attribute("href") or "" for a in browser.find_elements(By.CSS_SELECTOR, "nav > a")]
    assert hrefs and all("refresh=0" in h for h in hrefs)
    _click(browser, "#refresh-on")
    assert browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')


# -- the table list ------------------------------------------------------------------------------------------------


def test_the_table_list_shows_each_table_s_figures_and_health_band(cluster: Cluster, browser: WebDriver,
                                                                    tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    rows = {r.find_element(By.TAG_NAME, "a").text: r for r in browser.find_elements(By.CSS_SELECTOR, "tr.table-row")}
    for tid in ("shop.busy", "shop.sized", "shop.compacted", "shop.parts"):
        size, record_count, files = _live(cluster.ops, tid)
        row = rows[tid]
        assert row.find_element(By.CSS_SELECTOR, "td.size").text == fmt.size(size)
        assert row.find_element(By.CSS_SELECTOR, "td.rows").text == fmt.count(record_count)
        assert row.find_element(By.CSS_SELECTOR, "td.files").text == fmt.count(files)
        health = cluster.ops.table_health(tid)
        assert health is not None
        badge = row.find_element(By.CSS_SELECTOR, "td.score .band")
        assert abs(int(badge.text) - health.score) <= 1  # a second later, lag may have cost a point
        assert badge.get_attribute("data-band") == COLOURS[health.severity]
        assert row.find_element(By.CSS_SELECTOR, "td.score").get_attribute("title") == "; ".join(
            str(r) for r in health.reasons)
    assert "STALLED" in rows["shop.busy"].text and "STALLED" not in rows["shop.sized"].text
    assert rows["shop.busy"].find_element(By.CSS_SELECTOR, "td.score .band").get_attribute("data-band") == "red"

    # write amplification: (bytes written + bytes compaction wrote) / bytes written, from the snapshots' deltas
    table = cluster.ops.get_table("shop.compacted")
    written = compacted_out = 0
    for snap in table.snapshots.snapshots():
        entries = table.manifests.entries(table.manifests.read_list(snap.delta_manifest_list))
        added = sum(e.file.file_size for e in entries if e.kind == ADD)
        if snap.commit_kind == "COMPACT":
            compacted_out += added
            assert any(e.kind == DELETE for e in entries)
        else:
            written += added
    assert written and compacted_out
    assert rows["shop.compacted"].find_element(By.CSS_SELECTOR, "td.write-amp").text == \
        f"{(written + compacted_out) / written:.2f}x"
    # written within the last hour: the write rate is not zero, and an empty table's is a dash
    assert rows["shop.sized"].find_element(By.CSS_SELECTOR, "td.write-rate").text.split()[0] != "0.0"
    _open(browser, cluster.ui, "/?q=shop")
    _shoot(browser, "console-tables")


def test_the_table_list_is_paged_and_filtered(cluster: Cluster, browser: WebDriver, tokens: Tokens) -> None:
    total = len(cluster.ops.table_ids())
    assert total == EMPTY_TABLES + 4
    _log_in(browser, cluster.ui, tokens.reader)
    first = [r[1] for r in _rows(browser, "tr.table-row")]
    assert len(first) == 50 and f"tables 1–50 of {total}" in browser.find_element(By.ID, "pager-page").text
    _click(browser, "#pager-page a.next")
    second = [r[1] for r in _rows(browser, "tr.table-row")]
    assert len(second) == total - 50 and not set(first) & set(second)
    ranks = [int(r[0]) for r in _rows(browser, "tr.table-row")]
    assert ranks == list(range(51, total + 1))  # the ranking goes on over the pages
    # the filter: a part of the name, the first page again
    browser.find_element(By.CSS_SELECTOR, "#filter-q input[name=q]").send_keys("SIZ")
    _click(browser, "#filter-q button")
    assert [r[1] for r in _rows(browser, "tr.table-row")] == ["shop.sized"]
    assert f"1 of {total} tables match" in browser.find_element(By.TAG_NAME, "body").text


# -- a table's page ------------------------------------------------------------------------------------------------


def test_the_lsm_picture_is_linear_and_writes_sizes_and_files(cluster: Cluster, browser: WebDriver,
                                                              tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, "/table/shop/sized")
    table = cluster.ops.get_table("shop.sized")
    (split,) = every_bucket(table, table.latest_snapshot())
    level0 = sorted(f.file_size for f in restore_levels(table, split).level0)
    assert len(level0) == 2 and level0[1] > 5 * level0[0]
    (svg,) = browser.find_elements(By.CSS_SELECTOR, "svg.lsm")
    bars = svg.find_elements(By.CSS_SELECTOR, 'rect.run[data-level="0"]')
    by_bytes = sorted((int(b.get_attribute("data-bytes") or 0), b.size["width"]) for b in bars)
    assert [b for b, _ in by_bytes] == level0
    # widths as laid out by the browser: in the ratio of the bytes (linear), the fuller level filling 300 px
    (small, w_small), (large, w_large) = by_bytes
    assert w_small + w_large == pytest.approx(300, abs=1.5)
    assert w_large / w_small == pytest.approx(large / small, rel=0.03)
    label = svg.find_element(By.CSS_SELECTOR, 'text.level-size[data-level="0"]').text
    assert label == f"{fmt.size(sum(level0))}, 2 files, 2 runs"
    _, record_count, files = _live(cluster.ops, "shop.sized")
    figures = {r.get_attribute("data-figure"): r.find_element(By.TAG_NAME, "td").text
               for r in browser.find_elements(By.CSS_SELECTOR, "#summary tr")}
    assert figures["size"] == fmt.size(sum(level0)) and figures["files"] == str(files)
    assert figures["rows"] == fmt.count(record_count) == "2,010"


def test_partitions_and_bucket_pictures_are_paged_and_filtered(cluster: Cluster, browser: WebDriver,
                                                               tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, "/table/shop/parts")
    partitions = _rows(browser, "tr.partition-row")
    assert [r[0] for r in partitions] == sorted(f"p={i}" for i in range(80))[:50]
    assert all(r[1:4] == ["1", "1", "1"] for r in partitions)  # a bucket, a file and a row each
    assert "partitions 1–50 of 80" in browser.find_element(By.ID, "pager-pp").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.lsm")) == 32
    assert "buckets 1–32 of 80" in browser.find_element(By.ID, "pager-bp").text
    _click(browser, "#pager-pp a.next")
    assert len(_rows(browser, "tr.partition-row")) == 30
    _click(browser, "#pager-bp a.next")
    _click(browser, "#pager-bp a.next")
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.lsm")) == 16  # the last 16 of 80
    browser.find_element(By.CSS_SELECTOR, "#filter-pq input[name=pq]").send_keys("p=7")
    _click(browser, "#filter-pq button")
    expected = sorted(f"p={i}" for i in range(80) if f"p={i}".startswith("p=7"))
    assert [r[0] for r in _rows(browser, "tr.partition-row")] == expected
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.lsm")) == len(expected) == 11


def test_snapshots_schema_and_options_are_the_library_s(cluster: Cluster, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, "/table/shop/busy")
    table = cluster.ops.get_table("shop.busy")
    snaps = table.snapshots.snapshots()[::-1]
    rows = _rows(browser, "tr.snapshot-row")
    assert [(int(r[0]), r[2], r[3].replace(",", "")) for r in rows] == [
        (s.id, s.commit_kind, str(s.delta_record_count)) for s in snaps]
    schema = _rows(browser, "tr.column-row")
    assert [(r[0], r[1]) for r in schema] == [(f.name, f.type.sql()) for f in table.schema.fields]
    assert [r[2] for r in schema] == ["primary key", "", "primary key, partition key"]
    options = _rows(browser, "tr.option-row")
    assert {r[0]: r[1] for r in options} == table.schema.options
    health = cluster.ops.table_health("shop.busy")
    assert health is not None and health.stalled
    reasons = browser.find_elements(By.CSS_SELECTOR, "#reasons li.reason")
    assert [r.get_attribute("data-cause") for r in reasons] == [r.cause for r in health.reasons]
    assert reasons[0].get_attribute("data-cause") == "stalled"


# -- the compaction buttons ------------------------------------------------------------------------------------------


def test_readers_see_no_buttons_and_cannot_post(cluster: Cluster, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, "/table/shop/busy")
    assert not browser.find_elements(By.ID, "actions")
    assert not browser.find_elements(By.CSS_SELECTOR, "form#compact-now")
    reader_cookie = f"lsmlake_session={browser.get_cookie('lsmlake_session')['value']}"  # type: ignore[index]
    _log_in(browser, cluster.ui, tokens.admin)
    _open(browser, cluster.ui, "/table/shop/busy")
    csrf = browser.find_element(By.CSS_SELECTOR, "#compact-now input[name=csrf]").get_attribute("value") or ""
    before = _plans(cluster, "shop.busy")
    # a reader's session with the admin's form: refused, as is a writer's
    assert _post(cluster.ui, "/table/shop/busy/compact", {"csrf": csrf, "full": "0"}, reader_cookie) == 403
    _log_in(browser, cluster.ui, tokens.writer)
    writer_cookie = f"lsmlake_session={browser.get_cookie('lsmlake_session')['value']}"  # type: ignore[index]
    assert _post(cluster.ui, "/table/shop/busy/compact", {"csrf": csrf, "full": "0"}, writer_cookie) == 403
    assert _plans(cluster, "shop.busy") == before


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused_and_changes_nothing(
        cluster: Cluster, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.admin)
    _open(browser, cluster.ui, "/table/shop/sized")
    before = _plans(cluster, "shop.sized")
    browser.execute_script("document.querySelector('#compact-now input[name=csrf]').value = 'f00d'")
    _click(browser, "#compact-now button")
    assert browser.find_element(By.TAG_NAME, "h1").text == "403"
    assert "CSRF token is not this session's" in browser.find_element(By.TAG_NAME, "body").text
    _open(browser, cluster.ui, "/table/shop/sized")
    browser.execute_script("document.querySelector('#compact-now input[name=csrf]').remove()")
    _click(browser, "#compact-now button")
    assert browser.find_element(By.TAG_NAME, "h1").text == "403"
    assert "has no CSRF token" in browser.find_element(By.TAG_NAME, "body").text
    # the right token, but from another site's page, or with another session
    _open(browser, cluster.ui, "/table/shop/sized")
    csrf = browser.find_element(By.CSS_SELECTOR, "#compact-now input[name=csrf]").get_attribute("value") or ""
    cookie = f"lsmlake_session={browser.get_cookie('lsmlake_session')['value']}"  # type: ignore[index]
    assert _post(cluster.ui, "/table/shop/sized/compact", {"csrf": csrf, "full": "0"}, cookie,
                 {"Sec-Fetch-Site": "cross-site"}) == 403
    _log_in(browser, cluster.ui, tokens.admin)  # a new session of the same admin
    other = f"lsmlake_session={browser.get_cookie('lsmlake_session')['value']}"  # type: ignore[index]
    assert _post(cluster.ui, "/table/shop/sized/compact", {"csrf": csrf, "full": "0"}, other) == 403
    assert _plans(cluster, "shop.sized") == before


def test_an_admin_s_buttons_request_compaction_plans(cluster: Cluster, browser: WebDriver, tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.admin)
    _open(browser, cluster.ui, "/table/shop/busy")
    assert [b.text for b in browser.find_elements(By.CSS_SELECTOR, "#actions button")] == [
        "Compact now", "Full compaction"]
    before = {p for p, _ in _plans(cluster, "shop.busy")}
    _click(browser, "#compact-now button")
    note = browser.find_element(By.ID, "requested").text
    plan_id = int(re.findall(r"plan (\d+) requested", note)[0])
    assert plan_id not in before and (plan_id, "REQUESTED") in _plans(cluster, "shop.busy")
    table = cluster.ops.get_table("shop.busy")
    plan = cluster.store.plans.get_plan(plan_id)
    detail = ProtoPlanCodec().decode(plan.detail)
    live = {f.file_name for s in every_bucket(table, table.latest_snapshot()) for f in s.files}
    assert sorted(u.bucket for u in detail.units) == [0, 1] and not detail.full
    assert {f.file_name for u in detail.units for f in u.input_files} <= live
    # the plan's row: requested, not started (no wait or run time yet)
    row = browser.find_element(By.CSS_SELECTOR, f'tr.plan-row[data-plan="{plan_id}"]').text
    size = sum(f.file_size for u in detail.units for f in u.input_files)
    assert row == f"{plan_id} REQUESTED 2 {len(plan.input_files)} {fmt.size(size)} – – –"
    # a second press finds every file held by that plan: refused, saying why, and nothing changes
    _open(browser, cluster.ui, "/table/shop/busy")
    _click(browser, "#compact-now button")
    assert "in pending plans already" in browser.find_element(By.TAG_NAME, "body").text
    assert {p for p, _ in _plans(cluster, "shop.busy")} == before | {plan_id}

    # a full compaction of a table with one bucket: to the top level
    _open(browser, cluster.ui, "/table/shop/sized")
    _click(browser, "#full-compaction button")
    full_id = int(re.findall(r"plan (\d+) requested", browser.find_element(By.ID, "requested").text)[0])
    full = cluster.store.plans.get_plan(full_id)
    assert ProtoPlanCodec().decode(full.detail).full
    assert full.output_level == cluster.ops.get_table("shop.sized").options.num_levels() - 1

    # started and rolled back by a compactor: the page shows how long it waited and ran
    cluster.ops.start_compaction("shop.busy", plan_id, "compactor-a/1")
    cluster.ops.rollback_compaction("shop.busy", plan_id, "test: rolled back", False, [])
    _open(browser, cluster.ui, "/table/shop/busy")
    cells = browser.find_element(By.CSS_SELECTOR, f'tr.plan-row[data-plan="{plan_id}"]').find_elements(
        By.TAG_NAME, "td")
    assert cells[1].text == "ROLLED_BACK" and cells[5].text != "–" and cells[6].text != "–"
    assert cells[8].text == "compactor-a/1" and cells[9].text == "test: rolled back"
    _shoot(browser, "console-table")


# -- the services ----------------------------------------------------------------------------------------------------


def test_the_services_page_shows_who_is_up_and_a_stopped_compactor_down(cluster: Cluster, browser: WebDriver,
                                                                        tokens: Tokens) -> None:
    _log_in(browser, cluster.ui, tokens.reader)
    _open(browser, cluster.ui, "/services")

    def rows() -> dict[str, dict[str, str]]:
        return {r.get_attribute("data-id") or "": {"kind": r.get_attribute("data-kind") or "",
                                                   "up": r.get_attribute("data-up") or "", "text": r.text,
                                                   "owned": r.find_element(By.CSS_SELECTOR, ".owned").text,
                                                   "plans": r.find_element(By.CSS_SELECTOR, ".plans").text}
                for r in browser.find_elements(By.CSS_SELECTOR, "tr.service-row")}

    listed = rows()
    catalogs = [v for v in listed.values() if v["kind"] == "catalog"]
    assert len(catalogs) == 2 and all(c["up"] == "true" for c in catalogs)  # both replicas report themselves
    assert listed["writer-a"]["up"] == "true" and "10.0.0.5:50052" in listed["writer-a"]["text"]
    assert listed["compactor-a"]["owned"] == "2 of 4 partitions: 0, 2"
    assert "shop.busy plan 41: 2 bucket(s)" in listed["compactor-a"]["plans"]
    assert listed["compactor-b"]["owned"] == "none assigned yet" and listed["compactor-b"]["up"] == "true"
    assert not browser.find_elements(By.ID, "services-warning")
    # compactor-b dies without a word: after the missed heartbeats it is down
    cluster.compactor_2.stop(goodbye=False)

    def down() -> bool:
        _open(browser, cluster.ui, "/services")
        return rows()["compactor-b"]["up"] == "false"
    _until("compactor-b shown down", down)
    assert "DOWN" in rows()["compactor-b"]["text"] and "missed" in rows()["compactor-b"]["text"]
    assert rows()["compactor-a"]["up"] == "true"
    _shoot(browser, "console-services")
