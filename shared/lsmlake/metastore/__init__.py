"""The catalog's metadata store (SQLite embedded, PostgreSQL shared): commit locks and records, outbox, timeline."""

from lsmlake.metastore.base import MetaStore
from lsmlake.metastore.errors import MetaStoreUnavailableError, PlanConflictError, PlanStateError, SchemaVersionError
from lsmlake.metastore.model import (
    ABANDONED,
    COMPLETED,
    INFLIGHT,
    PENDING_STATES,
    PLAN_STATES,
    REQUESTED,
    ROLLED_BACK,
    CompactionPlan,
    OutboxEvent,
)
from lsmlake.metastore.store import open_store
from lsmlake.metastore.transactions import SCHEMA_VERSION, Transaction, now_ms

__all__ = [
    "ABANDONED", "COMPLETED", "INFLIGHT", "PENDING_STATES", "PLAN_STATES", "REQUESTED", "ROLLED_BACK", "SCHEMA_VERSION",
    "CompactionPlan", "MetaStore", "MetaStoreUnavailableError", "OutboxEvent", "PlanConflictError",
    "PlanStateError", "SchemaVersionError", "Transaction", "now_ms", "open_store",
]
