"""`Client`: lsmlake's services from Python — tables through the catalog, rows through the writer.

The client is assembled from one part per concept, each in its module of `lsmlake.client`:
`connection` (channels, and every call's failure as an lsmlake error), `tables` (databases and tables),
`writes` (rows through the writer, files committed through the catalog), `scans` (planned reads),
`snapshots` (listing, time travel, expiration), `compaction` (triggering it, the plan timeline) and `health`
(tables ranked by how far compaction is behind).

gRPC failures come back as lsmlake errors (`NotFoundError`, `InvalidInputError`, ...) carrying the
server's message (`lsmlake.rpc.errors.error_for`).
"""

from __future__ import annotations

from lsmlake.client.compaction import Compaction
from lsmlake.client.health import Health
from lsmlake.client.scans import Scans
from lsmlake.client.snapshots import Snapshots
from lsmlake.client.writes import Writes

__all__ = ["Client"]


class Client(Writes, Scans, Snapshots, Compaction, Health):
    """A connection to lsmlake's catalog, and optionally its writer and compactor services.

    Args:
        catalog: `host:port` of the catalog service.
        writer: `host:port` of a writer service; needed by `write` and `write_rows`.
        compactor: `host:port` of a compactor service; needed by `compact`.
        warehouse: the warehouse folder or URI as this process sees it; when None, scans read each
            table at the location the catalog reports (which must then be reachable from here).
        timeout_s: deadline of each call.
        token: bearer token sent with every call, for services that check tokens (docs/security.md).
        tls_ca: connect over TLS, trusting this CA certificate (PEM file).
        tls_cert, tls_key: client certificate and key (PEM files), for services that require mutual TLS.
        tls: connect over TLS trusting the system's root certificates (implied by `tls_ca` and `tls_cert`).

    Besides reading and writing rows, a job that reads and writes a table's files itself (lsmlake's Spark
    source) plans and commits through the client: `open_table` gives the table's files, `plan_splits` the
    catalog's plan of a scan, `snapshot_at` the snapshot for a time, and `commit` commits files written
    into the table as one snapshot.

    A call that changes state (a write, a commit, a table change) and gets no definite answer raises
    CommitStateUnknownError: it may have been applied; send it again as it was (a write with the same
    `request_id`). A read without an answer raises ServiceUnavailableError.
    """
