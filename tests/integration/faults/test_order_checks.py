"""The check of `db.g_order` (see `checks.check_order`) finds what the fault harness looks for, without a cluster.

Two library writers of one table, each numbering rows with its own counter (what every writer replica
and ingestion path did before the catalog handed out sequence numbers), make a later acknowledged
change lose to an earlier one: the check must count it out of order, and see the inversion in the files.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import tests.support.faults.checks as checks
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.sequence_numbers import RestoredSequences
from tests.support.faults.order_load import ROWS, Change, OrderModel

TABLE = "db.g_order"


def _table(tmp_path: Path) -> FileStoreTable:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db", ignore_if_exists=True)
    return cat.create_table(TABLE, "k BIGINT NOT NULL, ver BIGINT, lane STRING", primary_keys=["k"],
                            options={"bucket": "1"})


def _commit(table: FileStoreTable, sequences: RestoredSequences, changes: list[Change]) -> None:
    w = table.new_write(sequences)
    w.write(pa.Table.from_pylist([c.row() for c in changes], schema=ROWS))
    table.commit_messages(w.prepare_commit())


def _acknowledged(model: OrderModel, changes: list[Change]) -> list[Change]:
    model.acknowledge(changes[0].lane, changes, 0, False)
    return changes


def _model_changes(model: OrderModel, key: int, lane: str, delete: bool = False) -> list[Change]:
    """The next change of `key`, handed out as a lane would take it."""
    with model.lock:
        model.free.discard(key)
        model.versions[key] += 1
        change = Change(key, model.versions[key], delete, lane)
        if not delete:
            model.upserts[key].add(change.ver)
    return [change]


def test_every_key_holding_its_last_acknowledged_change_passes(tmp_path: Path) -> None:
    table = _table(tmp_path)
    shared = RestoredSequences(table.max_sequence_restorer())  # one authority for both lanes
    model = OrderModel(keys=3)
    for lane, key, delete in (("grpc-1", 0, False), ("kafka", 0, False), ("grpc-2", 1, False),
                              ("grpc-1", 1, True), ("kafka", 2, False)):
        _commit(table, shared, _acknowledged(model, _model_changes(model, key, lane, delete)))
    found = checks.Findings()
    last, upserts = model.expected()
    order = checks.check_order(found, tmp_path, TABLE, last, upserts)
    assert not found.problems, found.problems
    assert order.file_rows == 5 and order.lost == order.out_of_order == order.inverted == 0


def test_writers_with_their_own_counters_are_caught(tmp_path: Path) -> None:
    table = _table(tmp_path)
    one = RestoredSequences(table.max_sequence_restorer())
    two = RestoredSequences(table.max_sequence_restorer())  # opened together: both count from the same number
    model = OrderModel(keys=2)
    _commit(table, one, _acknowledged(model, _model_changes(model, 0, "grpc-1")))
    _commit(table, one, _acknowledged(model, _model_changes(model, 0, "grpc-1")))
    _commit(table, two, _acknowledged(model, _model_changes(model, 0, "grpc-2")))  # version 3 under number 0
    found = checks.Findings()
    last, upserts = model.expected()
    order = checks.check_order(found, tmp_path, TABLE, last, upserts)
    assert order.out_of_order == 1, "key 0 reads version 2 although version 3 was acknowledged after it"
    assert order.shared_numbers == 1 and order.inverted == 1
    assert found.problems and "1 out of order" in found.problems[0]


def test_a_lost_key_and_a_phantom_version_are_counted(tmp_path: Path) -> None:
    table = _table(tmp_path)
    seq = RestoredSequences(table.max_sequence_restorer())
    model = OrderModel(keys=2)
    _acknowledged(model, _model_changes(model, 0, "kafka"))  # acknowledged, but never written: lost
    _commit(table, seq, _model_changes(model, 1, "grpc-1"))  # written, never acknowledged: a version not sent
    found = checks.Findings()
    last, upserts = model.expected()
    order = checks.check_order(found, tmp_path, TABLE, last, upserts)
    assert (order.lost, order.never_sent, found.lost) == (1, 1, 1)
