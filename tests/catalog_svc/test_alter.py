"""AlterTable over gRPC: schema evolution as Paimon allows it; a refused change changes nothing."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from tests.integration.interop.test_interop_pypaimon import pypaimon_read
from tests.support.local_server import TIMEOUT_S, local_server

C = catalog_pb2.SchemaChange


def test_alter_table_over_grpc(tmp_path: Path) -> None:
    with local_server(str(tmp_path)) as local:
        ident = local.create_table("db", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"], {"bucket": "1"})
        local.commit(ident, "u", 1, local.write(ident, {"id": [1, 2], "v": ["a", "b"]}))
        out = local.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=[
            C(add_column=catalog_pb2.AddColumn(name="n", type="INT", comment="added")),
            C(rename_column=catalog_pb2.RenameColumn(old_name="v", new_name="label")),
            C(set_option=catalog_pb2.SetOption(key="snapshot.num-retained.max", value="50"))]), timeout=TIMEOUT_S)
        assert out.table.schema_id == 1
        assert [(c.name, c.type) for c in out.table.columns] == [("id", "BIGINT NOT NULL"), ("label", "STRING"),
                                                                  ("n", "INT")]
        assert out.table.options["snapshot.num-retained.max"] == "50"
        local.commit(ident, "u", 2, local.write(ident, {"id": [2, 3], "label": ["b2", "c"], "n": [20, 30]}))
        rows = sorted(FileSystemCatalog(local.warehouse).get_table("db.t").to_arrow().to_pylist(),
                      key=lambda r: r["id"])
        assert rows == [{"id": 1, "label": "a", "n": None}, {"id": 2, "label": "b2", "n": 20},
                        {"id": 3, "label": "c", "n": 30}]
        theirs = sorted(pypaimon_read(local.warehouse, "db.t").to_pylist(), key=lambda r: r["id"])
        assert theirs == rows

        bad = [
            [C(add_column=catalog_pb2.AddColumn(name="id", type="INT"))],
            [C(add_column=catalog_pb2.AddColumn(name="m", type="INT NOT NULL"))],
            [C(rename_column=catalog_pb2.RenameColumn(old_name="id", new_name="key"))],
            [C(set_option=catalog_pb2.SetOption(key="bucket", value="4"))],
            [C(set_option=catalog_pb2.SetOption(key="no.such.option", value="1"))],
            [C(add_column=catalog_pb2.AddColumn(name="ok", type="INT")), C()],
            [],
        ]
        for changes in bad:
            with pytest.raises(grpc.RpcError) as info:
                local.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=changes), timeout=TIMEOUT_S)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (changes, info.value.details())
        got = local.stub.GetTable(catalog_pb2.GetTableRequest(table=ident), timeout=TIMEOUT_S).table
        assert got.schema_id == 1 and [c.name for c in got.columns] == ["id", "label", "n"]
