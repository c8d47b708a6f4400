"""The requests an APPEND commit through a real catalog service process sends to the local S3 server, counted
from the server's own access log (`tests.support.s3_requests`): at most 15, as on the library's path
(tests/lsmlake/fs/test_s3_requests.py). The data files are written by this process (as Spark's executors write
them, `Client.open_table`); what is counted is the catalog's commit of them: one data file per commit (the catalog
checks each file of a commit: today an existence check and a size check, two HEADs each)."""

from __future__ import annotations

import collections
from pathlib import Path

import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake import Client
from tests.support.s3_cluster import S3Warehouse
from tests.support.s3_requests import S3RequestLog, describe
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.integration

COMMIT_MAX = 15


def test_an_append_commit_through_the_catalog_service_sends_at_most_15_requests(s3_server: S3Server,
                                                                                 tmp_path: Path) -> None:
    wh = S3Warehouse.fresh(s3_server)
    # the background loops are off: every request counted is the commit's
    svc = procs.Service("catalog_svc", ["--warehouse", wh.uri, "--metastore", f"sqlite:///{tmp_path}/meta.db",
                                        "--expire-interval", "0", "--orphan-interval", "0", "--health-interval", "0",
                                        "--reconcile-interval", "0"], tmp_path, env=wh.env())
    log = S3RequestLog(s3_server.log_path)
    try:
        with Client(f"127.0.0.1:{svc.port}", warehouse=s3_server.warehouse(wh.prefix)) as lake:
            lake.create_database("db")
            lake.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
            counts = []
            for n in range(3):  # the first commits warm the catalog (its probe, its table); the last is counted
                table = lake.open_table("db.t")
                w = table.new_write()
                w.write(pa.table({"k": pa.array([n * 10 + 1, n * 10 + 2], pa.int64()), "v": ["a", "b"]}))
                messages = w.prepare_commit()
                mark = log.mark()
                result = lake.commit("db.t", messages, commit_user="counted", commit_identifier=n + 1)
                sent = log.since(mark, f"{wh.prefix}/")
                counts.append(len(sent))
                assert result.snapshot_id == n + 1
            shown = describe(sent)
            assert counts[-1] <= COMMIT_MAX, f"{counts} requests per commit through the catalog; the last:\n{shown}"
            kinds = collections.Counter(r.kind for r in sent)
            assert not {"CREATE_MULTIPART", "UPLOAD_PART", "DELETE", "DELETE_OBJECTS"} & set(kinds), shown
            assert not [r for r in sent if r.key.endswith("/") and r.method == "PUT"], f"folder markers:\n{shown}"
            # one publication: the snapshot's conditional create
            assert [r.key.rsplit("/", 1)[1] for r in sent if r.method == "PUT" and "/snapshot/snapshot-" in
                    r.key] == ["snapshot-3"], shown
            assert lake.scan("db.t").num_rows == 6
    finally:
        svc.stop()
