"""Paimon engines on an S3 table with nothing but the REST catalog's URI and a bearer token.

lsmlake writes a table on the local S3 server (moto); a catalog server (in this process, tokens checked, data
tokens granted per table) serves it over Paimon's REST API. pypaimon 2.1.0 and paimon-rust 0.4.0 run in child
processes whose environment holds no AWS_* variable and whose options hold no storage setting: whatever reaches
S3 came from the catalog's config defaults (`data-token.enabled`) and the table's data token. pypaimon also
commits rows through the catalog, which lsmlake reads back. A caller with a valid token and no grant on the
table is refused the token, and so cannot open the table's files; it is not told to ask for one either, so its
engine with storage settings of its own reads as it did before the catalog vended tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from catalog_svc.server import CatalogServer, Settings
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.rpc.security import ServerSecurity
from tests.support.paimon_rest import call, check_error
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

pytestmark = pytest.mark.integration
pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")
pytest.importorskip("pypaimon_rust.datafusion", reason="pypaimon-rust (the test extra) is not installed")

ENGINE_TIMEOUT_S = 180.0
TOKENS = {"etl": ("writer", "etl-token-0123456789"), "outsider": ("reader", "outsider-token-0123456789"),
          "admin": ("admin", "admin-token-0123456789")}
GRANTS = {"grants": [{"principal": "etl", "tables": ["db.*"]}]}

# One engine action in a clean process; prints a JSON line: {"rows": [...]} or {"error": "..."}.
_ENGINE = r'''
import json, sys
import pyarrow as pa
args = json.loads(sys.argv[1])
options = {"metastore": "rest", "uri": args["uri"], "warehouse": "lake", "token.provider": "bear",
           "token": args["token"], **args["options"]}
try:
    if args["engine"] == "rust":
        from pypaimon_rust import datafusion
        rb = datafusion.PaimonCatalog(options).get_table(args["table"]).new_read_builder()
        batches = rb.new_read().read(rb.new_scan().plan().splits())
        rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    else:
        from pypaimon import CatalogFactory
        table = CatalogFactory.create(options).get_table(args["table"])
        if args.get("write"):
            wb = table.new_batch_write_builder()
            w, c = wb.new_write(), wb.new_commit()
            w.write_arrow(pa.Table.from_pylist(args["write"], schema=pa.schema(
                [pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])))
            c.commit(w.prepare_commit())
            w.close()
            c.close()
        rb = table.new_read_builder()
        rows = rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()
    print(json.dumps({"rows": sorted(rows, key=lambda r: r["id"])}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
'''


@dataclass(frozen=True)
class Served:
    rest_port: int
    warehouse: str
    endpoint: str

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"


def clean_env() -> dict[str, str]:
    """This process's environment without a single storage setting: no AWS_* variable, no lsmlake S3 flag."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("LSMLAKE_S3")}


def engine(served: Served, who: str, engine_name: str, table: str = "db.t",
           write: list[dict[str, Any]] | None = None, options: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one engine action as principal `who` in a child process with a clean environment; its JSON answer.
    `options`: catalog options of the engine's own, over the catalog's URI and token."""
    args = {"uri": served.uri, "token": TOKENS[who][1], "engine": engine_name, "table": table, "write": write,
            "options": options or {}}
    done = subprocess.run([sys.executable, "-c", _ENGINE, json.dumps(args)], capture_output=True, text=True,
                          env=clean_env(), timeout=ENGINE_TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{engine_name} printed no answer (exit {done.returncode}): {done.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def _rows(ids: range, tag: str) -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{tag}{i}"} for i in ids]


@pytest.fixture()
def served(s3_server: S3Server, tmp_path: Path) -> Iterator[Served]:
    warehouse = s3_server.warehouse()
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": t}
                                             for p, (r, t) in TOKENS.items()]}))
    grants = tmp_path / "grants.json"
    grants.write_text(json.dumps(GRANTS))
    cat = FileSystemCatalog(warehouse)
    cat.create_database("db", ignore_if_exists=True)
    t = cat.create_table("db.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "2"})
    t.write_arrow(pa.Table.from_pylist(_rows(range(0, 50), "lsm")))
    server = CatalogServer(Settings(warehouse=warehouse, metastore=f"sqlite:///{tmp_path}/meta.sqlite",
                                    rest_port=0, security=ServerSecurity(auth_tokens=str(tokens)),
                                    data_token_grants=str(grants), expire_interval_s=0, orphan_interval_s=0,
                                    health_interval_s=0))
    server.start()
    try:
        assert server.rest_port is not None
        yield Served(server.rest_port, warehouse, s3_server.endpoint)
    finally:
        server.stop()


def test_pypaimon_and_paimon_rust_read_and_pypaimon_commits_with_only_the_catalog_uri_and_token(
        served: Served) -> None:
    lsm_rows = _rows(range(0, 50), "lsm")
    assert engine(served, "etl", "pypaimon") == {"rows": lsm_rows}
    assert engine(served, "etl", "rust") == {"rows": lsm_rows}

    # pypaimon's update of ids 40..59 lands through the catalog's commit on the S3 table
    written = engine(served, "etl", "pypaimon", write=_rows(range(40, 60), "py"))
    want = _rows(range(0, 40), "lsm") + _rows(range(40, 60), "py")
    assert written == {"rows": want}
    table = FileSystemCatalog(served.warehouse).get_table("db.t")
    got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == want
    latest = table.snapshots.latest()
    assert latest is not None and latest.id == 2  # lsmlake's write, then pypaimon's commit through the catalog
    assert engine(served, "etl", "rust") == {"rows": want}


def test_the_token_goes_to_a_caller_with_a_grant_only(served: Served) -> None:
    path = "/v1/databases/db/tables/t/token"
    check_error(call(served.rest_port, "GET", path), 401, what="no token")
    check_error(call(served.rest_port, "GET", path, token="not-a-token-of-this-catalog"), 401, what="unknown token")
    body = check_error(call(served.rest_port, "GET", path, token=TOKENS["outsider"][1]), 403, what="no grant")
    assert "outsider" in body["message"] and "db.t" in body["message"]
    # an admin may define and drop tables but is given no storage credentials without a grant either
    check_error(call(served.rest_port, "GET", path, token=TOKENS["admin"][1]), 403, what="admin without grant")

    granted = call(served.rest_port, "GET", path, token=TOKENS["etl"][1])
    assert granted.status == 200, granted.text
    token = granted.json()
    assert token["token"]["s3.access-key"] and token["token"]["fs.s3.endpoint"].startswith("http://127.0.0.1:")

    # the catalog does not tell a caller without a grant to ask; one whose engine asks anyway is refused, and so
    # cannot open the table's files
    asks = {"data-token.enabled": "true"}
    refused = engine(served, "outsider", "pypaimon", options=asks)
    assert "error" in refused and "no data token grant" in refused["error"], refused
    refused_rust = engine(served, "outsider", "rust", options=asks)
    assert "error" in refused_rust and "no data token grant" in refused_rust["error"], refused_rust


def test_a_caller_without_a_grant_is_not_told_to_ask_and_reads_with_its_own_settings(served: Served) -> None:
    """Old code told every caller to ask for tokens once anyone had a grant: this engine, with storage settings
    of its own, then asked, was refused (403) and failed."""
    config = call(served.rest_port, "GET", "/v1/config?warehouse=lake", token=TOKENS["outsider"][1])
    assert config.status == 200 and config.json()["defaults"] == {}, config.text
    own = {"fs.s3.endpoint": served.endpoint, "fs.s3.accessKeyId": ACCESS_KEY, "fs.s3.accessKeySecret": SECRET_KEY,
           "fs.s3.region": REGION, "fs.s3.path-style-access": "true"}
    assert engine(served, "outsider", "pypaimon", options=own) == {"rows": _rows(range(0, 50), "lsm")}
