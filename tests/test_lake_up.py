"""`lake up`, then the `lake` CLI against the running cluster, then `lake down`: a user's first session.

`lake up` runs as its own process (the embedded Kafka broker, catalog, writer, compactor on Spark
local[1]); the CLI runs in-process through `main([...])` and finds the cluster from the warehouse.
The REST catalog URI that `lake up` prints is called with the standard library's HTTP client.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lsmlake.cli import main as cli
from lsmlake.cli.cluster import DEFAULT_REST_PORT, check_rest_port, find_endpoints
from lsmlake.errors import InvalidInputError
from lsmlake.kafka.broker import free_port

pytestmark = pytest.mark.integration

UP_DONE = "cluster is up"


def up_output(warehouse: str) -> str:
    """What the `lake up` process of the fixture has printed (stdout and stderr) so far."""
    return (Path(warehouse).parent / "lake-up.log").read_text()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    warehouse = str(tmp_path_factory.mktemp("lake-up") / "wh")
    log = Path(warehouse).parent / "lake-up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from lsmlake.cli.main import main; raise SystemExit(main())",
                                 "up", "--warehouse", warehouse, "--catalog-port", str(free_port()),
                                 "--writer-port", str(free_port()), "--compactor-port", str(free_port()),
                                 "--rest-port", str(free_port()), "--spark-master", "local[1]",
                                 "--commit-interval", "0.2",
                                 "--ingest", "shop.orders:json"], stdout=out, stderr=subprocess.STDOUT)
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
    assert "through the writer service" in first and "written before" not in first
    again = lake(capsys, wh, "write", "shop.events", str(rows), "--request-id", "events-1")
    assert "(2 of 2 part(s) had been written before)" in again
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
    assert "through the writer service" in out
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
