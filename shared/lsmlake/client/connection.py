"""The client's connection: the catalog's client (`lsmlake.rpc.catalog_client`), a channel to the writer and
the compactor, and the one way to call them.

Every call goes through `Connection.call` (`lsmlake.rpc.retry.call`, sent once), which turns a failed call
into the lsmlake error the service raised (`lsmlake.rpc.errors.error_for`): a read that got no answer is
ServiceUnavailableError, a call that changes state and got no definite answer is CommitStateUnknownError (send
it again as it was).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import grpc

from lsmlake.errors import InvalidInputError
from lsmlake.fs import StorageSettings
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2_grpc, writer_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.retry import CHANNEL_OPTIONS, MAX_MESSAGE_BYTES, call
from lsmlake.rpc.security import ChannelSecurity

__all__ = ["MAX_MESSAGE_BYTES", "STORAGE_OPTION_KEYS", "Connection", "storage_settings"]

R = TypeVar("R")

#: the option keys of storage settings, Paimon's and pypaimon's (every field set, so every key is listed)
STORAGE_OPTION_KEYS = frozenset(StorageSettings(
    endpoint="e", region="r", access_key_id="k", secret_access_key="s", session_token="t", path_style=True,
).paimon_options())


def storage_settings(storage: StorageSettings | Mapping[str, str] | None) -> StorageSettings:
    """Storage settings given as settings or as options under Paimon's or pypaimon's keys (`s3.endpoint`, ...).

    Raises InvalidInputError naming any key that is no storage setting (a typo would otherwise be ignored and
    the AWS environment used instead).
    """
    if storage is None:
        return StorageSettings()
    if isinstance(storage, StorageSettings):
        return storage
    if not isinstance(storage, Mapping):
        raise InvalidInputError(f"storage must be StorageSettings or a mapping of options, not "
                                f"{type(storage).__name__}")
    unknown = sorted(str(k) for k in storage if k not in STORAGE_OPTION_KEYS)
    if unknown:
        raise InvalidInputError(f"unknown storage option(s) {unknown}; known: {sorted(STORAGE_OPTION_KEYS)}")
    return StorageSettings.from_options({str(k): str(v) for k, v in storage.items()})


class Connection:
    """Channels to lsmlake's catalog, and optionally its writer and compactor services, shared by the parts of
    `Client`."""

    def __init__(self, catalog: str = "127.0.0.1:50051", writer: str | None = None, compactor: str | None = None,
                 warehouse: str | None = None, timeout_s: float = 60, *, token: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
                 tls: bool = False, storage: StorageSettings | Mapping[str, str] | None = None) -> None:
        security = ChannelSecurity(tls_ca, tls_cert, tls_key, token, tls)
        self.timeout_s = timeout_s
        self.warehouse = warehouse
        # what this process opens the warehouse's files with: its AWS environment, overridden by these
        self.storage = storage_settings(storage)
        # a client's caller decides whether to ask again: nothing is retried here
        self.catalog_client = CatalogClient(catalog, timeout_s=timeout_s, retry_for_s=0.0, security=security)
        self.catalog = self.catalog_client.stub
        self._channels: list[grpc.Channel] = [self.catalog_client.channel]

        def channel(target: str) -> grpc.Channel:
            ch = security.open_channel(target, options=CHANNEL_OPTIONS)
            self._channels.append(ch)
            return ch

        self._writer = writer_pb2_grpc.WriterServiceStub(channel(writer)) if writer else None
        self._compactor = compactor_pb2_grpc.CompactorServiceStub(channel(compactor)) if compactor else None

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
        self._channels.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def call(self, method: Callable[..., R], request: Any, timeout_s: float | None = None, *,
              changes_state: bool) -> R:
        """`method(request)` within the deadline; `changes_state` says whether a lost answer leaves the
        outcome unknown (see `error_for`)."""
        return call(method, request, timeout_s=timeout_s or self.timeout_s, changes_state=changes_state)

    def writer_stub(self) -> writer_pb2_grpc.WriterServiceStub:
        if self._writer is None:
            raise InvalidInputError("this Client has no writer service: pass writer='host:port'")
        return self._writer

    def compactor_stub(self) -> compactor_pb2_grpc.CompactorServiceStub:
        if self._compactor is None:
            raise InvalidInputError("this Client has no compactor service: pass compactor='host:port'")
        return self._compactor
