"""What a command works on: the warehouse folder (`--warehouse` or $LAKE_WAREHOUSE), and the cluster running on
it, if any, which picks the backend changes go through."""

from __future__ import annotations

import argparse
import os

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli.backend import Backend, Services
from lsmlake.cli.cluster import find_endpoints
from lsmlake.cli.errors import UsageError
from lsmlake.cli.local_backend import LocalBackend
from lsmlake.cli.remote_backend import RemoteBackend
from lsmlake.rpc.security import ChannelSecurity

ENV_WAREHOUSE = "LAKE_WAREHOUSE"


def warehouse_of(args: argparse.Namespace) -> str | None:
    warehouse: str | None = args.warehouse or os.environ.get(ENV_WAREHOUSE) or None
    return warehouse


def open_catalog(args: argparse.Namespace) -> FileSystemCatalog:
    """The catalog of the warehouse folder; UsageError when none is given."""
    warehouse = warehouse_of(args) or ""
    if not warehouse.strip():
        raise UsageError(f"no warehouse: pass --warehouse DIR or set ${ENV_WAREHOUSE}")
    if warehouse.startswith("~"):
        warehouse = os.path.expanduser(warehouse)
    return FileSystemCatalog(warehouse)


def warehouse_dir(args: argparse.Namespace) -> str:
    """The local warehouse folder a cluster runs on (`lake up`, `status`, `down`)."""
    warehouse = warehouse_of(args) or ""
    if not warehouse.strip():
        raise UsageError(f"no warehouse: pass --warehouse DIR or set ${ENV_WAREHOUSE}")
    if "://" in warehouse and not warehouse.startswith("file://"):
        raise UsageError("lake up runs on a local warehouse folder; deploy with the Helm chart for object storage")
    return os.path.expanduser(warehouse.removeprefix("file://"))


def find_services(args: argparse.Namespace) -> Services | None:
    """The cluster to talk to: the `--*-service` flags, else the one `lake up` runs on the warehouse, else None
    (then commands work on the warehouse folder directly)."""
    catalog = getattr(args, "catalog_target", None)
    if catalog:
        return Services(catalog, getattr(args, "writer_target", None), getattr(args, "compactor_target", None),
                        getattr(args, "kafka_target", None))
    state = find_endpoints(warehouse_of(args))
    if state is None:
        return None
    return Services(state.catalog, getattr(args, "writer_target", None) or state.writer,
                    getattr(args, "compactor_target", None) or state.compactor,
                    getattr(args, "kafka_target", None) or state.kafka)


def open_backend(args: argparse.Namespace) -> Backend:
    """Where changes go: the cluster's services when there is a cluster, else the warehouse folder."""
    local = LocalBackend(lambda: open_catalog(args))
    services = find_services(args)
    if services is None:
        return local
    return RemoteBackend(services, ChannelSecurity.from_args(args, ""), warehouse_of(args), local)
