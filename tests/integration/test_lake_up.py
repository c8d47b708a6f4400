"""`lake up`, then the `lake` CLI against the running cluster, then `lake down`: a user's first session.

`lake up` runs as its own process (the embedded Kafka broker, catalog, writer, compactor on Spark
local[1]); the CLI runs in-process through `main([...])` and finds the cluster from the warehouse.
The REST catalog URI and the web console address that `lake up` prints are called with the standard
library's HTTP client; a second, smaller `lake up` (no compactor) checks bearer tokens, for the console.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lsmlake import Client
from lsmlake.cli import main as cli
from lsmlake.cli.cluster import (
    DEFAULT_REST_PORT,
    DEFAULT_UI_PORT,
    check_rest_port,
    check_ui_port,
    find_endpoints,
)
from lsmlake.errors import InvalidInputError
from lsmlake.kafka.broker import free_port

pytestmark = pytest.mark.integration

UP_DONE = "cluster is up"


def up_output(warehouse: str) -> str:
    """What the `lake up` process of the fixture has printed (stdout and stderr) so far."""
    return (Path(warehouse).parent / "lake-up.log").read_text()


@contextmanager
def lake_up(warehouse: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`lake up --warehouse WAREHOUSE ARGS` as its own process on free gRPC ports, until it is up; the warehouse."""
    log = Path(warehouse).parent / "lake-up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from lsmlake.cli.main import main; raise SystemExit(main())",
                                 "up", "--warehouse", warehouse, "--catalog-port", str(free_port()),
                                 "--writer-port", str(free_port()), "--compactor-port", str(free_port()), *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        # the endpoints are recorded before they are printed: wait for both
        while find_endpoints(warehouse) is None or UP_DONE not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        yield warehouse
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # the console on a port `lake up` picks (0), the path its default takes when 8080 is held
    with lake_up(str(tmp_path_factory.mktemp("lake-up") / "wh"), "--rest-port", str(free_port()), "--ui-port", "0",
                 "--spark-master", "local[1]", "--commit-interval", "0.2", "--ingest", "shop.orders:json") as wh:
        yield wh


def get(url: str, token: str | None = None, cookie: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET, refusals included."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    try:
        conn.request("GET", parts.path or "/", headers=headers)
        r = conn.getresponse()
        return r.status, r.headers.get_content_type(), r.read().decode()
    finally:
        conn.close()


def console_session(address: str, token: str) -> str:
    """`lsmlake_session=<id>`: the cookie the console's login form sets for `token` (posted as a browser posts it
    from the console's own page), to send back."""
    parts = urllib.parse.urlsplit(address)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("POST", "/login", body=urllib.parse.urlencode({"token": token}),
                     headers={"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin",
                              "Origin": f"{parts.scheme}://{parts.netloc}"})
        r = conn.getresponse()
        r.read()
        assert r.status == 303, r.status
        cookies = [c for c in r.headers.get_all("Set-Cookie", []) if c.startswith("lsmlake_session=")]
    finally:
        conn.close()
    assert len(cookies) == 1 and token not in cookies[0], cookies
    return cookies[0].split(";")[0]


def console_rows(page: str) -> list[str]:
    """The tables the console's table page lists, in its order (worst health first)."""
    return re.findall(r'<tr class="table-row"><td>\d+</td><td class="l"><a href="/table/[^"]*">([^<]*)</a>', page)


def lake(capsys: pytest.CaptureFixture[str], warehouse: str, *args: str) -> str:
    code = cli.main(["--warehouse", warehouse, *args])
    out, err = capsys.readouterr()
    assert code == 0, f"lake {' '.join(args)} exited {code}: {err}"
    return out


def test_the_printed_rest_uri_answers_as_a_paimon_rest_catalog(cluster: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    printed = up_output(cluster)
    found = re.search(r"^rest +(\S+) +\(REST catalog: Paimon metastore=rest\)$", printed, re.MULTILINE)
    assert found, printed
    uri = found.group(1)
    catalog = re.search(r"^catalog +(\S+)$", printed, re.MULTILINE)
    assert catalog and printed.index(catalog.group(0)) < found.start(), "the REST URI follows the gRPC address"
    state = find_endpoints(cluster)
    assert state is not None and state.rest == uri
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", uri), uri
    with urllib.request.urlopen(f"{uri}/v1/config?warehouse=x", timeout=30) as reply:
        assert reply.status == 200
        assert reply.headers.get_content_type() == "application/json"
        config = json.loads(reply.read())
    assert "defaults" in config and isinstance(config["defaults"], dict), config
    # `lake status` shows it beside the services
    assert f"rest       {uri}" in lake(capsys, cluster, "status")
    assert json.loads(lake(capsys, cluster, "status", "--format", "json"))["rest"] == uri


def test_the_printed_console_address_serves_the_console(cluster: str, capsys: pytest.CaptureFixture[str]) -> None:
    printed = up_output(cluster)
    found = re.search(r"^console +(\S+) +\(web console: tables by health\)$", printed, re.MULTILINE)
    assert found, printed
    address = found.group(1)
    catalog = re.search(r"^catalog +(\S+)$", printed, re.MULTILINE)
    assert catalog and printed.index(catalog.group(0)) < found.start(), "the console follows the gRPC address"
    state = find_endpoints(cluster)
    assert state is not None and state.console == address
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", address), address
    assert address.rstrip("/") != state.rest, "the console and the REST catalog have ports of their own"
    status, kind, body = get(f"{address}login")
    assert (status, kind) == (200, "text/html") and 'id="token"' in body and 'method="post"' in body
    # a table written through the cluster is on the console's list and has a page (no tokens are checked here)
    lake(capsys, cluster, "table", "create", "shop.visits", "--schema", "id BIGINT NOT NULL, page STRING",
         "--primary-key", "id", "--option", "bucket=1")
    rows = Path(cluster).parent / "visits.csv"
    rows.write_text("id,page\n1,/\n2,/about\n")
    lake(capsys, cluster, "write", "shop.visits", str(rows))
    status, kind, page = get(address)
    assert (status, kind) == (200, "text/html")
    assert "shop.visits" in console_rows(page), page
    status, _, table_page = get(f"{address}table/shop/visits")
    assert status == 200 and "level-0 files 1;" in table_page, table_page
    # `lake status` shows it beside the services
    assert f"console    {address}" in lake(capsys, cluster, "status")
    assert json.loads(lake(capsys, cluster, "status", "--format", "json"))["console"] == address


def test_the_console_of_a_cluster_with_tokens_needs_one(tmp_path: Path) -> None:
    """`lake up` with a token file (LSMLAKE_AUTH_TOKENS, which every service inherits) and the writer's own token
    (LSMLAKE_CATALOG_TOKEN): the console shows its login page to anyone, refuses its pages without a token or with
    an unknown one, and shows them for a reader's login session (the cookie) or the token as a bearer header."""
    reader, admin, service, unknown = (secrets.token_urlsafe(24) for _ in range(4))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": "ann", "role": "reader", "token": reader},
                                             {"principal": "root", "role": "admin", "token": admin},
                                             {"principal": "writer-svc", "role": "service", "token": service}]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LSMLAKE_", "LAKE_"))}
    env.update(LSMLAKE_AUTH_TOKENS=str(tokens), LSMLAKE_CATALOG_TOKEN=service)
    ui_port = free_port()
    with lake_up(str(tmp_path / "wh"), "--no-compactor", "--rest-port", str(free_port()), "--ui-port",
                 str(ui_port), "--commit-interval", "0.2", env=env) as wh:
        state = find_endpoints(wh)
        assert state is not None and state.console == f"http://127.0.0.1:{ui_port}/"
        with Client(state.catalog, writer=state.writer, token=admin, timeout_s=60) as lake_client:
            lake_client.create_database("shop")
            lake_client.create_table("shop.busy", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                     options={"bucket": "1"})
            lake_client.create_table("shop.quiet", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                                     options={"bucket": "1"})
            for i in range(3):  # three level-0 files, three sorted runs: the less healthy table
                lake_client.write("shop.busy", [{"id": i, "v": "x"}], commit_now=True)
        address = state.console
        status, _, body = get(f"{address}login")
        assert status == 200 and 'id="token"' in body
        for path in ("", "table/shop/busy"):
            status, kind, body = get(f"{address}{path}")
            assert (status, kind) == (401, "text/html") and 'href="/login"' in body, path
            assert get(f"{address}{path}", token=unknown)[0] == 401, path
            assert get(f"{address}{path}", cookie=f"lsmlake_session={unknown}")[0] == 401, path
            assert get(f"{address}{path}", cookie=f"lsmlake_session={reader}")[0] == 401, path  # a token is no session
            assert "shop.busy" not in body
        cookie = console_session(address, reader)
        status, _, by_cookie = get(address, cookie=cookie)
        assert status == 200 and console_rows(by_cookie) == ["shop.busy", "shop.quiet"], by_cookie
        status, _, by_header = get(address, token=reader)
        assert status == 200 and console_rows(by_header) == ["shop.busy", "shop.quiet"]
        status, _, table_page = get(f"{address}table/shop/busy", cookie=cookie)
        assert status == 200 and "sorted runs 3 of" in table_page and "level-0 files 3;" in table_page, table_page


def test_ui_port_option() -> None:
    assert check_ui_port(0) == 0 and check_ui_port(9090) == 9090
    with pytest.raises(InvalidInputError, match="console port 70000 is not a port number"):
        check_ui_port(70000)
    # not given: 8080, unless it is one of the other ports `lake up` was given, or something holds it
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        try:
            holder.bind(("127.0.0.1", DEFAULT_UI_PORT))
        except OSError:
            pass  # another process holds it: the same case
        assert check_ui_port(None, [50051]) == 0
    assert check_ui_port(None, [DEFAULT_UI_PORT]) == 0
    assert check_rest_port(None, [DEFAULT_REST_PORT]) == 0


def test_rest_port_option() -> None:
    assert check_rest_port(0) == 0 and check_rest_port(9181) == 9181
    with pytest.raises(InvalidInputError, match="not a port number"):
        check_rest_port(70000)
    # not given: 8181, unless something holds it (here this test), then a free port rather than a failed start
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        try:
            holder.bind(("127.0.0.1", DEFAULT_REST_PORT))
        except OSError:
            pass  # another process holds it: the same case
        assert check_rest_port(None) == 0


def test_a_named_write_run_again_writes_nothing_twice(cluster: str, capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    wh = cluster  # runs before the test that ends with `lake down`
    lake(capsys, wh, "table", "create", "shop.events", "--schema", "id BIGINT, note STRING")  # append: repeats show
    rows = tmp_path / "events.csv"
    rows.write_text("id,note\n" + "".join(f"{i},n{i}\n" for i in range(150_000)))
    first = lake(capsys, wh, "write", "shop.events", str(rows), "--request-id", "events-1")
    # 150,000 rows are one commit (through the writer service they were two parts, seen one by one)
    assert "one commit through the catalog service" in first and "written before" not in first
    again = lake(capsys, wh, "write", "shop.events", str(rows), "--request-id", "events-1")
    assert "this --request-id was written before" in again
    ids = [json.loads(x)["id"] for x in lake(capsys, wh, "scan", "shop.events", "--columns", "id").splitlines()]
    assert sorted(ids) == list(range(150_000))


def test_cli_drives_the_cluster(cluster: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wh = cluster
    out = lake(capsys, wh, "status")
    assert "catalog" in out and "SERVING" in out and "NOT SERVING" not in out
    lake(capsys, wh, "table", "create", "shop.orders", "--schema", "id BIGINT NOT NULL, item STRING, qty INT",
         "--primary-key", "id", "--option", "bucket=2")
    csv = tmp_path / "orders.csv"
    csv.write_text("id,item,qty\n" + "".join(f"{i},item-{i},{i % 7}\n" for i in range(1000)))
    out = lake(capsys, wh, "write", "shop.orders", str(csv))
    assert "one commit through the catalog service" in out
    changes = tmp_path / "changes.jsonl"
    changes.write_text("\n".join([json.dumps({"id": 1, "item": "changed", "qty": 99}),
                                  json.dumps({"id": 2, "_row_kind": "-D"}),
                                  json.dumps({"id": 5000, "item": "new", "qty": 1}), "not json"]) + "\n")
    assert "sent 4 message(s) to lake.ingest.shop.orders" in lake(capsys, wh, "produce", "shop.orders", str(changes))
    deadline = time.monotonic() + 120
    while True:  # the writer ingests the topic exactly once; the bad line goes to the dead-letter topic
        rows = {r["id"]: r for r in map(json.loads, lake(capsys, wh, "scan", "shop.orders").splitlines())}
        if 5000 in rows and 2 not in rows:
            break
        assert time.monotonic() < deadline, f"the Kafka changes never arrived: {len(rows)} rows"
        time.sleep(0.5)
    assert rows[1]["item"] == "changed" and rows[1]["qty"] == 99 and len(rows) == 1000
    out = lake(capsys, wh, "compact", "shop.orders", "--full")
    assert "through the compactor service" in out
    assert "L5" in lake(capsys, wh, "levels", "shop.orders")
    plans = [json.loads(x) for x in lake(capsys, wh, "timeline", "shop.orders", "--format", "jsonl").splitlines()]
    assert plans and all(p["state"] in ("COMPLETED", "REQUESTED", "INFLIGHT") for p in plans)
    assert any(p["state"] == "COMPLETED" for p in plans)
    snaps = lake(capsys, wh, "snapshots", "shop.orders").splitlines()
    assert len(snaps) >= 3
    assert "expired" in lake(capsys, wh, "expire", "shop.orders", "--retain-max", "1", "--retain-min", "1")
    assert len(lake(capsys, wh, "snapshots", "shop.orders").splitlines()) == 1
    lake(capsys, wh, "table", "alter", "shop.orders", "--add-column", "note STRING")
    assert "note" in lake(capsys, wh, "table", "describe", "shop.orders")
    assert len(lake(capsys, wh, "scan", "shop.orders").splitlines()) == 1000
    assert "cluster stopped" in lake(capsys, wh, "down")
    assert find_endpoints(wh) is None
    assert cli.main(["--warehouse", wh, "status"]) != 0
    assert "no cluster" in capsys.readouterr().err
