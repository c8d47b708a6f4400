"""The catalog and writer services with TLS and tokens, in the test process on loopback ports: each role does
what it may through `lsmlake.Client`, the writer authenticates to the catalog with its own token, and TLS
refuses what it must (plaintext clients, unknown CAs, missing client certificates under mutual TLS)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from catalog_svc.server import CatalogServer
from catalog_svc.server import Settings as CatalogSettings
from lsmlake import Client
from lsmlake.cli import main as cli
from lsmlake.errors import LakeError, ServiceUnavailableError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.support.certs import Certs
from tests.support.security import Tokens
from writer_svc.server import Settings as WriterSettings
from writer_svc.server import WriterServer

TIMEOUT_S = 30.0


@dataclass
class Cluster:
    catalog: str
    writer: str
    certs: Certs
    tokens: Tokens
    health_port: int
    warehouse: str

    def client(self, who: str | None, **kw: object) -> Client:
        token = self.tokens.of(who) if who else None
        args: dict[str, object] = {"tls_ca": self.certs.ca, "token": token, "timeout_s": TIMEOUT_S, **kw}
        return Client(self.catalog, writer=self.writer, **args)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs, tokens: Tokens) -> Iterator[Cluster]:
    warehouse = str(tmp_path_factory.mktemp("wh"))
    security = ServerSecurity(certs.server_cert, certs.server_key, None, tokens.file)
    catalog = CatalogServer(CatalogSettings(warehouse=warehouse, metastore=f"sqlite:///{warehouse}/_meta.sqlite",
                                            security=security, health_port=0))
    catalog.start()
    try:
        writer = WriterServer(WriterSettings(
            warehouse=warehouse, catalog=f"127.0.0.1:{catalog.port}", commit_interval_s=0.1, security=security,
            catalog_security=ChannelSecurity(tls_ca=certs.ca, token=tokens.service)))
        writer.start()
        try:
            assert catalog.health_port is not None
            yield Cluster(f"127.0.0.1:{catalog.port}", f"127.0.0.1:{writer.port}", certs, tokens,
                          catalog.health_port, warehouse)
        finally:
            writer.stop()
    finally:
        catalog.stop()


def _code(e: pytest.ExceptionInfo[LakeError]) -> str:
    return str(e.value).split(":", 1)[0]


def test_admin_defines_writer_writes_reader_reads(cluster: Cluster) -> None:
    with cluster.client("admin") as admin:
        admin.create_database("authdb")
        admin.create_table("authdb.t", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": 1})
    with cluster.client("writer") as writer:
        result = writer.write("authdb.t", pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        assert result.rows == 3
        writer.write_rows("authdb.t", [{"id": 4, "v": "d"}])
    with cluster.client("reader") as reader:
        assert "t" in reader.list_tables("authdb") and "authdb" in reader.list_databases()
        assert reader.table("authdb.t").latest_snapshot_id is not None
        rows = reader.scan("authdb.t").sort_by("id")
        assert rows.column("id").to_pylist() == [1, 2, 3, 4]
        assert reader.latest_snapshot("authdb.t") is not None and reader.snapshots("authdb.t")


@pytest.mark.parametrize(("who", "action"), [
    ("reader", lambda c: c.write_rows("authdb.w", [{"id": 9}])),
    ("reader", lambda c: c.write("authdb.w", pa.table({"id": [9]}))),
    ("reader", lambda c: c.create_database("readerdb")),
    ("reader", lambda c: c.create_table("authdb.r", "id INT")),
    ("writer", lambda c: c.create_table("authdb.x", "id INT")),
    ("writer", lambda c: c.drop_table("authdb.w")),
    ("writer", lambda c: c.alter_table("authdb.w", set_options={"snapshot.num-retained.max": "5"})),
    ("writer", lambda c: c.expire("authdb.w", retain_max=1)),
    ("writer", lambda c: c.drop_database("authdb", cascade=True)),
])
def test_a_role_too_low_is_permission_denied_and_changes_nothing(cluster: Cluster, who: str, action: object) -> None:
    with cluster.client("admin") as admin:
        admin.create_database("authdb")
        admin.create_table("authdb.w", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": 1},
                           ignore_if_exists=True)
        before = admin.table("authdb.w")
    with cluster.client(who) as c, pytest.raises(LakeError) as e:
        action(c)  # type: ignore[operator]
    assert _code(e) == "PERMISSION_DENIED", e.value
    assert f"has role {who}" in str(e.value)
    with cluster.client("admin") as admin:
        assert admin.table("authdb.w") == before
        assert set(admin.list_tables("authdb")) >= {"w"} and not {"x", "r"} & set(admin.list_tables("authdb"))
        assert "readerdb" not in admin.list_databases()


def test_admin_may_do_everything(cluster: Cluster) -> None:
    with cluster.client("admin") as admin:
        admin.create_database("admindb")
        admin.create_table("admindb.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": 1})
        admin.write_rows("admindb.t", [{"id": 1}])
        admin.write_rows("admindb.t", [{"id": 2}])
        admin.alter_table("admindb.t", add_columns="v STRING")
        expired = admin.expire("admindb.t", retain_min=1, retain_max=1, older_than_ms=0)
        assert expired.expired_snapshot_ids == (1,)
        assert admin.scan("admindb.t").num_rows == 2 and len(admin.snapshots("admindb.t")) == 1
        assert admin.drop_table("admindb.t") and admin.drop_database("admindb")


@pytest.mark.parametrize("who", [None, "unknown"])
def test_no_token_or_an_unknown_one_is_unauthenticated(cluster: Cluster, who: str | None) -> None:
    with cluster.client(who) as c:
        for call in (lambda: c.list_databases(), lambda: c.write_rows("authdb.t", [{"id": 1}])):
            with pytest.raises(LakeError) as e:
                call()
            assert _code(e) == "UNAUTHENTICATED", e.value


def test_a_writer_whose_catalog_token_is_too_weak_acknowledges_nothing(cluster: Cluster, tmp_path: Path) -> None:
    with cluster.client("admin") as admin:
        admin.create_database("weakdb")
        admin.create_table("weakdb.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": 1})
        location = admin.table("weakdb.t").location
    writer = WriterServer(WriterSettings(
        warehouse=str(Path(location).parent.parent), catalog=cluster.catalog, commit_interval_s=0.1,
        security=ServerSecurity(cluster.certs.server_cert, cluster.certs.server_key, None, cluster.tokens.file),
        catalog_security=ChannelSecurity(tls_ca=cluster.certs.ca, token=cluster.tokens.reader)))
    writer.start()
    try:
        with Client(cluster.catalog, writer=f"127.0.0.1:{writer.port}", tls_ca=cluster.certs.ca,
                    token=cluster.tokens.admin, timeout_s=TIMEOUT_S) as c:
            with pytest.raises(LakeError, match="PERMISSION_DENIED|refused"):
                c.write_rows("weakdb.t", [{"id": 1}])
            assert c.scan("weakdb.t").num_rows == 0 and c.table("weakdb.t").latest_snapshot_id is None
    finally:
        writer.stop()


def test_health_is_open_over_tls_and_on_the_plaintext_health_port(cluster: Cluster) -> None:
    serving = health_pb2.HealthCheckResponse.SERVING
    with ChannelSecurity(tls_ca=cluster.certs.ca).open_channel(cluster.catalog) as ch:
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S).status \
            == serving
    with grpc.insecure_channel(f"127.0.0.1:{cluster.health_port}") as ch:
        assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S).status \
            == serving
        # the health port serves nothing else
        with pytest.raises(grpc.RpcError) as e:
            catalog_pb2_grpc.CatalogServiceStub(ch).ListDatabases(catalog_pb2.ListDatabasesRequest(),
                                                                  timeout=TIMEOUT_S)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_plaintext_or_an_untrusted_ca_cannot_talk_to_a_tls_server(cluster: Cluster) -> None:
    with Client(cluster.catalog, token=cluster.tokens.admin, timeout_s=5) as c, \
            pytest.raises(ServiceUnavailableError):
        c.list_databases()
    with Client(cluster.catalog, token=cluster.tokens.admin, tls_ca=cluster.certs.other_ca, timeout_s=5) as c, \
            pytest.raises(ServiceUnavailableError):
        c.list_databases()


def test_mutual_tls_requires_a_client_certificate_from_the_ca(tmp_path: Path, certs: Certs, tokens: Tokens) -> None:
    wh = str(tmp_path)
    server = CatalogServer(CatalogSettings(
        warehouse=wh, metastore=f"sqlite:///{wh}/_meta.sqlite",
        security=ServerSecurity(certs.server_cert, certs.server_key, certs.ca, tokens.file)))
    server.start()
    target = f"127.0.0.1:{server.port}"
    try:
        with Client(target, tls_ca=certs.ca, tls_cert=certs.client_cert, tls_key=certs.client_key,
                    token=tokens.reader, timeout_s=TIMEOUT_S) as c:
            assert c.list_databases() == []
        with Client(target, tls_ca=certs.ca, tls_cert=certs.client_cert, tls_key=certs.client_key,
                    timeout_s=TIMEOUT_S) as c, pytest.raises(LakeError, match="UNAUTHENTICATED"):
            c.list_databases()  # a certificate identifies the machine, the token still says who may do what
        for kw in ({}, {"tls_cert": certs.stranger_cert, "tls_key": certs.stranger_key}):
            with Client(target, tls_ca=certs.ca, token=tokens.admin, timeout_s=5, **kw) as c, \
                    pytest.raises(ServiceUnavailableError):
                c.list_databases()
    finally:
        server.stop()


def test_the_lake_command_line_sends_its_token_and_trusts_its_ca(cluster: Cluster, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    token_file = tmp_path / "writer.token"
    token_file.write_text(cluster.tokens.writer + "\n")
    base = ["--warehouse", cluster.warehouse, "--catalog-service", cluster.catalog, "--writer-service",
            cluster.writer, "--tls-ca", cluster.certs.ca]
    create = ["table", "create", "clidb.t", "--schema", "id BIGINT NOT NULL", "--primary-key", "id",
              "--option", "bucket=1"]
    assert cli.main([*base, "--token-file", str(token_file), *create]) == 1
    assert "PERMISSION_DENIED" in capsys.readouterr().err
    monkeypatch.setenv("LAKE_TOKEN", cluster.tokens.admin)
    assert cli.main([*base, *create]) == 0, capsys.readouterr().err
    with cluster.client("reader") as reader:
        assert reader.table("clidb.t").primary_keys == ("id",)


def test_the_compactors_timeline_client_authenticates_with_its_own_token(cluster: Cluster) -> None:
    from lsmlake.rpc.catalog_client import CatalogClient

    with cluster.client("admin") as admin:
        admin.create_database("tldb")
        admin.create_table("tldb.t", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": 1})
    for who, allowed in (("service", True), ("writer", False), ("reader", False)):
        catalog = CatalogClient(cluster.catalog, timeout_s=TIMEOUT_S, retry_for_s=5,
                                security=ChannelSecurity(tls_ca=cluster.certs.ca, token=cluster.tokens.of(who)))
        timeline = catalog.timeline
        try:
            assert timeline.plans("tldb.t", []) == []  # reading the timeline is a reader's right
            if allowed:
                with pytest.raises(LakeError) as e:  # let through, refused by the catalog: no such plan
                    timeline.start("tldb.t", "no-such-plan", "compactor-1")
                assert e.value.relayed_status not in (grpc.StatusCode.PERMISSION_DENIED,
                                                      grpc.StatusCode.UNAUTHENTICATED)
            else:
                with pytest.raises(LakeError) as e:
                    timeline.start("tldb.t", "no-such-plan", "compactor-1")
                assert e.value.relayed_status == grpc.StatusCode.PERMISSION_DENIED
        finally:
            catalog.close()
