"""The catalog's metadata store (SQLite embedded, PostgreSQL shared): commit locks and records, outbox, timeline."""

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
from lsmlake.metastore.store import SCHEMA_VERSION, MetaStore, Transaction, now_ms, open_store

__all__ = [
    "ABANDONED", "COMPLETED", "INFLIGHT", "PENDING_STATES", "PLAN_STATES", "REQUESTED", "ROLLED_BACK", "SCHEMA_VERSION",
    "CompactionPlan", "MetaStore", "MetaStoreUnavailableError", "OutboxEvent", "PlanConflictError",
    "PlanStateError", "SchemaVersionError", "Transaction", "now_ms", "open_store",
]
