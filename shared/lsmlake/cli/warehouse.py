"""What a command works on: the warehouse (`--warehouse` or $LAKE_WAREHOUSE: a folder or an object-store URI),
and the cluster running on it, if any, which picks the backend changes go through.

The catalog and the backends are imported when a command opens them (the remote backend loads the gRPC client):
the parser names this module's settings without loading either.
"""

from __future__ import annotations

import argparse
import os
import urllib.parse
from typing import TYPE_CHECKING

from lsmlake.cli.backend import Backend, Services
from lsmlake.cli.cluster import ClusterState, find_endpoints, is_remote, warehouse_key
from lsmlake.cli.errors import CliError, UsageError
from lsmlake.fs.storage_settings import StorageSettings
from lsmlake.rpc.security import ChannelSecurity

if TYPE_CHECKING:
    from lsmlake.catalog.filesystem import FileSystemCatalog

ENV_WAREHOUSE = "LAKE_WAREHOUSE"


def warehouse_of(args: argparse.Namespace) -> str | None:
    warehouse: str | None = args.warehouse or os.environ.get(ENV_WAREHOUSE) or None
    return warehouse


def state_dir_arg(args: argparse.Namespace) -> str | None:
    state_dir: str | None = getattr(args, "state_dir", None) or None
    return state_dir


def require_warehouse(args: argparse.Namespace) -> str:
    warehouse = warehouse_of(args) or ""
    if not warehouse.strip():
        catalog = getattr(args, "catalog_target", None)
        why = (f" (the catalog service {catalog} is given, but this command reads the warehouse's files itself, "
               "which the services do not serve)") if catalog else ""
        raise UsageError(f"no warehouse: pass --warehouse DIR or URI, or set ${ENV_WAREHOUSE}{why}")
    return warehouse


def cluster_of(args: argparse.Namespace) -> ClusterState | None:
    """The running cluster `lake up` recorded for the warehouse, if any."""
    return find_endpoints(warehouse_of(args), state_dir_arg(args))


def open_catalog(args: argparse.Namespace, create: bool = False) -> FileSystemCatalog:
    """The catalog of the warehouse; UsageError when none is given, CliError when a warehouse folder does not
    exist (unless `create`: `lake table create` makes it), rather than answering as if it were empty.

    An object-store warehouse is opened with the AWS environment, overridden by the settings the cluster running
    on it recorded (its endpoint, say, so that `--warehouse s3://bucket/prefix` is enough), overridden by the
    URI's own parameters.
    """
    from lsmlake.catalog.filesystem import FileSystemCatalog

    warehouse = require_warehouse(args)
    if warehouse.startswith("~"):
        warehouse = os.path.expanduser(warehouse)
    if not is_remote(warehouse) and not create:
        folder = warehouse.removeprefix("file://")
        if not os.path.isdir(folder):
            raise CliError(f"warehouse {folder} does not exist" if not os.path.exists(folder) else
                           f"warehouse {folder} is not a folder")
    if is_remote(warehouse):
        state = cluster_of(args)
        if state is not None and state.storage:
            settings = state.storage_settings().overlay(StorageSettings.from_uri(warehouse))
            warehouse = settings_uri(warehouse_key(warehouse), settings)
    return FileSystemCatalog(warehouse)


def settings_uri(key: str, settings: StorageSettings) -> str:
    """`s3://bucket/prefix` with `settings` written as pyarrow's URI parameters, for this process only (the URI
    carries any credentials among them: it is never shown)."""
    split = urllib.parse.urlsplit(key)
    userinfo = ""
    if settings.access_key_id:
        userinfo = (urllib.parse.quote(settings.access_key_id, safe="") + ":"
                    + urllib.parse.quote(settings.secret_access_key or "", safe="") + "@")
    query: list[tuple[str, str]] = []
    if settings.endpoint:
        query.append(("endpoint_override", settings.endpoint))
    if settings.region:
        query.append(("region", settings.region))
    if settings.session_token:
        query.append(("session_token", settings.session_token))
    if settings.path_style is not None:
        query.append(("force_virtual_addressing", str(not settings.path_style).lower()))
    return urllib.parse.urlunsplit((split.scheme, userinfo + (split.hostname or ""), split.path,
                                    urllib.parse.urlencode(query), ""))


def warehouse_dir(args: argparse.Namespace) -> str:
    """The warehouse a cluster runs on (`lake up`, `status`, `down`): a local folder, or an object-store URI
    whose cluster state is kept in a local state folder (`cli.cluster.state_dir_of`)."""
    warehouse = require_warehouse(args)
    if not is_remote(warehouse):
        return os.path.expanduser(warehouse.removeprefix("file://"))
    warehouse_key(warehouse)  # names the problem of a URI without a bucket
    return warehouse


def find_services(args: argparse.Namespace) -> Services | None:
    """The cluster to talk to: the `--*-service` flags, completed by the cluster `lake up` runs on the warehouse
    when its catalog is the one given; else that cluster; else None (then commands work on the warehouse
    directly)."""
    state = cluster_of(args)
    catalog = getattr(args, "catalog_target", None)
    writer = getattr(args, "writer_target", None)
    compactor = getattr(args, "compactor_target", None)
    kafka = getattr(args, "kafka_target", None)
    if catalog:
        if state is None or state.catalog != catalog:
            return Services(catalog, writer, compactor, kafka)
    elif state is None:
        return None
    return Services(state.catalog, writer or state.writer, compactor or state.compactor, kafka or state.kafka)


def open_backend(args: argparse.Namespace) -> Backend:
    """Where changes go: the cluster's services when there is a cluster, else the warehouse directly."""
    from lsmlake.cli.local_backend import LocalBackend

    local = LocalBackend(lambda: open_catalog(args))
    services = find_services(args)
    if services is None:
        return local
    from lsmlake.cli.remote_backend import RemoteBackend

    return RemoteBackend(services, ChannelSecurity.from_args(args, ""), warehouse_of(args), local)
