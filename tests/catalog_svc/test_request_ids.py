"""Client write ids through the catalog: recorded with the commit, found by FindWrites, a second commit of
an id refused, and ids of snapshots published without a record recovered from their properties."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.reconcile import WRITES_PROPERTY
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import changes_to_proto
from tests.support.local_server import TIMEOUT_S, Local, local_server


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[Local]:
    with local_server(str(tmp_path)) as c:
        yield c


def _request(cat: Local, ident: common_pb2.TableIdentifier, number: int, ids: list[str], row: int,
             kind: common_pb2.CommitKind.ValueType = common_pb2.COMMIT_KIND_APPEND) -> catalog_pb2.CommitRequest:
    messages = cat.write(ident, {"id": [row], "v": [f"r{row}"]})
    return catalog_pb2.CommitRequest(table=ident, commit_user="w", commit_identifier=number, kind=kind,
                                     changes=[changes_to_proto(m) for m in messages], request_ids=ids)


def _commit(cat: Local, ident: common_pb2.TableIdentifier, number: int, ids: list[str], row: int,
            kind: common_pb2.CommitKind.ValueType = common_pb2.COMMIT_KIND_APPEND) -> catalog_pb2.CommitResponse:
    return cat.stub.Commit(_request(cat, ident, number, ids, row, kind), timeout=TIMEOUT_S)


def _found(cat: Local, ident: common_pb2.TableIdentifier, ids: list[str]) -> dict[str, int]:
    return dict(cat.stub.FindWrites(catalog_pb2.FindWritesRequest(table=ident, request_ids=ids),
                                    timeout=TIMEOUT_S).snapshot_ids)


def _ids(cat: Local, ident: common_pb2.TableIdentifier) -> list[int]:
    t = FileSystemCatalog(cat.warehouse).get_table(f"{ident.database}.{ident.table}")
    return sorted(t.to_arrow().column("id").to_pylist())


def test_a_committed_write_id_is_found_and_never_committed_again(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])  # append: duplicates would show
    request = _request(cat, ident, 1, ["a", "b"], 1)
    first = cat.stub.Commit(request, timeout=TIMEOUT_S)
    assert _found(cat, ident, ["a", "b", "c"]) == {"a": first.snapshot_id, "b": first.snapshot_id}
    # the same commit again (a lost reply): the first snapshot
    again = cat.stub.Commit(request, timeout=TIMEOUT_S)
    assert again.already_committed and again.snapshot_id == first.snapshot_id
    # the same user and identifier with other files is not that commit: refused, nothing committed
    with pytest.raises(grpc.RpcError) as e:
        _commit(cat, ident, 1, ["a", "b"], 1)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and "other files" in e.value.details()
    # a new commit holding a committed id (a resend that raced its first attempt): refused, nothing committed
    with pytest.raises(grpc.RpcError) as e:
        _commit(cat, ident, 2, ["c", "b"], 2)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and "'b'" in e.value.details()
    assert _found(cat, ident, ["c"]) == {}
    second = _commit(cat, ident, 3, ["c"], 3)
    assert second.snapshot_id == first.snapshot_id + 1
    assert _ids(cat, ident) == [1, 3]
    t = FileSystemCatalog(cat.warehouse).get_table("db.t")
    assert json.loads(t.snapshots.snapshot(second.snapshot_id).properties[WRITES_PROPERTY]) == ["c"]


def test_bad_request_ids_are_refused_and_change_nothing(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
    for ids, kind, words in ((["x", "x"], common_pb2.COMMIT_KIND_APPEND, "more than once"),
                             (["y" * 201], common_pb2.COMMIT_KIND_APPEND, "at most 200"),
                             ([""], common_pb2.COMMIT_KIND_APPEND, "non-empty"),
                             (["z"], common_pb2.COMMIT_KIND_COMPACT, "APPEND commits only")):
        with pytest.raises(grpc.RpcError) as e:
            _commit(cat, ident, 1, ids, 1, kind)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        _found(cat, ident, ["q", "q"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        _found(cat, common_pb2.TableIdentifier(database="db", table="nope"), ["q"])
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert FileSystemCatalog(cat.warehouse).get_table("db.t").snapshots.latest_id() is None


def test_ids_of_a_snapshot_published_without_a_record_are_recovered(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
    _commit(cat, ident, 1, ["a"], 1)
    # a catalog that died between publishing a snapshot and recording it leaves this behind
    t = FileSystemCatalog(cat.warehouse).get_table("db.t")
    lost = t.new_commit("w").commit(cat.write(ident, {"id": [2], "v": ["r2"]}), identifier=2,
                                    properties={WRITES_PROPERTY: json.dumps(["b"])})
    _commit(cat, ident, 3, ["c"], 3)  # every commit first records what was published without a record
    assert _found(cat, ident, ["a", "b", "c"])["b"] == lost.snapshot_id
    with pytest.raises(grpc.RpcError) as e:
        _commit(cat, ident, 4, ["b"], 4)
    assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert _ids(cat, ident) == [1, 2, 3]


def test_request_ids_are_forgotten_after_their_retention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from lsmlake.catalog import write_operations

    monkeypatch.setattr(write_operations, "FORGET_WRITES_EVERY_S", 0.0)  # look at every commit, not once a minute
    with local_server(str(tmp_path), request_id_retention_s=1.0) as c:
        ident = c.create_table("db", "t", [("id", "BIGINT"), ("v", "STRING")])
        first = _commit(c, ident, 1, ["a"], 1)
        assert _found(c, ident, ["a"]) == {"a": first.snapshot_id}
        time.sleep(1.2)
        _commit(c, ident, 2, ["b"], 2)  # a commit forgets ids past their retention
        assert _found(c, ident, ["a", "b"]) == {"b": first.snapshot_id + 1}
        # a resend after the retention is a new write (the retention must outlast clients' retries)
        assert _commit(c, ident, 3, ["a"], 1).snapshot_id == first.snapshot_id + 2
        assert _ids(c, ident) == [1, 1, 2]


def test_request_id_retention_flag(tmp_path: Path) -> None:
    from catalog_svc.server import Settings

    assert Settings.from_args(["--warehouse", str(tmp_path)], env={}).request_id_retention_s == 86_400
    s = Settings.from_args(["--warehouse", str(tmp_path)], env={"LSMLAKE_REQUEST_ID_RETENTION": "3600"})
    assert s.request_id_retention_s == 3600
    for bad in ["0", "-5", "0.5", "nan"]:
        with pytest.raises(SystemExit):
            Settings.from_args(["--warehouse", str(tmp_path), "--request-id-retention", bad], env={})
