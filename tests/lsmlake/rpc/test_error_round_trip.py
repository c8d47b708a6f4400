"""Every lsmlake error a service raises reaches its caller as the same class, with the same fields and message.

A real gRPC server on loopback raises, from a `guarded` unary method and a `guarded_stream` streaming one, an
instance of every `LakeError` subclass loaded from the library and the services (found from the class
hierarchy, so that a new class is covered without touching this test); the caller's side rebuilds it
(`lsmlake.rpc.retry.call`, `lsmlake.rpc.retry.stream`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from lsmlake import errors
from lsmlake.errors import LakeError
from lsmlake.rpc.error_detail import ERROR_DETAIL_KEY, class_name
from lsmlake.rpc.errors import (
    RELAYED_STATUS,
    UNDECIDED,
    guarded,
    guarded_stream,
    relayed,
    status_for,
)
from lsmlake.rpc.retry import call, stream

PACKAGES = ("lsmlake", "catalog_svc", "writer_svc", "compactor_svc")


def _import_everything() -> None:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if ".proto_gen" in module.name or module.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional dependency that is not installed: its errors cannot be raised here
                continue


def _subclasses(cls: type[LakeError]) -> list[type[LakeError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(c for c in _subclasses(sub) if c not in out)
    return out


_import_everything()
CLASSES = sorted({c for c in _subclasses(LakeError) if not c.__module__.startswith("tests.")}, key=class_name)

_SAMPLES: tuple[tuple[str, Any], ...] = (("Mapping", {"data-1.parquet": 7}), ("dict", {"data-1.parquet": 7}),
                                         ("int", 7), ("float", 1.5), ("bool", True), ("str", "INFLIGHT"))


def _sample(annotation: Any) -> Any:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return next((value for key, value in _SAMPLES if key in text), "x")


def make(cls: type[LakeError]) -> LakeError:
    """An instance of `cls` with a message and a value for every other argument its constructor takes."""
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if cls.__init__ is BaseException.__init__ or cls.__init__ is OSError.__init__ or not params:
        error = cls(f"{cls.__name__} raised on purpose: ü")
    else:
        error = cls(f"{cls.__name__} raised on purpose: ü", *(_sample(p.annotation) for p in params[1:]))
    if isinstance(error, OSError):
        error.errno = 28
    return error


def fields(error: BaseException) -> dict[str, Any]:
    out = {k: v for k, v in vars(error).items() if not k.startswith("_") and k != RELAYED_STATUS}
    if isinstance(error, OSError):
        out["errno"] = error.errno
    return out


class _Servicer:
    """Raises the error of the class the request names, at once or after one streamed response."""

    def __init__(self) -> None:
        self.by_name = {class_name(c): c for c in CLASSES}

    @guarded
    def Raise(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        raise make(self.by_name[request.decode()])

    @guarded_stream
    def RaiseStreaming(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield b"first"
        raise make(self.by_name[request.decode()])


def _unknown_class(request: bytes, context: grpc.ServicerContext) -> bytes:
    """A service whose error class the caller does not know (a newer version's): it has only the lineage."""
    context.set_trailing_metadata(((ERROR_DETAIL_KEY, (
        b'{"class": "nowhere.GoneError", "lineage": ["nowhere.GoneError", "lsmlake.errors.ServiceUnavailableError",'
        b' "lsmlake.errors.LakeError"], "fields": {"shard": 3}}')),))
    context.abort(grpc.StatusCode.UNAVAILABLE, "gone for now")


def _foreign(request: bytes, context: grpc.ServicerContext) -> bytes:
    """A server that knows nothing of lsmlake's error detail."""
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    servicer = _Servicer()
    handler = grpc.method_handlers_generic_handler("test.Errors", {
        "Raise": grpc.unary_unary_rpc_method_handler(servicer.Raise),
        "RaiseStreaming": grpc.unary_stream_rpc_method_handler(servicer.RaiseStreaming),
        "Unknown": grpc.unary_unary_rpc_method_handler(_unknown_class),
        "Foreign": grpc.unary_unary_rpc_method_handler(_foreign),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            yield ch
    finally:
        server.stop(0)


def _expected_message(error: LakeError) -> str:
    code, message = status_for(error)
    return f"{code.name}: {message}" if type(error) in (LakeError, errors.PermissionDeniedError) else message


def test_the_hierarchy_is_found() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"StorageError", "BackPressureError", "StaleTableError", "PlanStateError", "PlanConflictError",
            "CommitRetryExhaustedError", "UnimplementedError", "TableReplacedError", "ShutdownError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=class_name)
def test_a_unary_call_gets_the_class_fields_and_message_the_service_raised(channel: grpc.Channel,
                                                                          cls: type[LakeError]) -> None:
    raised = make(cls)
    method = channel.unary_unary("/test.Errors/Raise")
    with pytest.raises(LakeError) as e:
        call(method, class_name(cls).encode(), timeout_s=10, changes_state=False)
    assert type(e.value) is cls
    assert str(e.value) == _expected_message(raised)
    assert fields(e.value) == fields(raised)
    assert relayed(e.value) and getattr(e.value, RELAYED_STATUS) == status_for(raised)[0]


@pytest.mark.parametrize("cls", CLASSES, ids=class_name)
def test_a_stream_that_fails_after_a_response_gets_the_class_the_service_raised(channel: grpc.Channel,
                                                                               cls: type[LakeError]) -> None:
    raised = make(cls)
    got: list[bytes] = []
    with pytest.raises(LakeError) as e:
        got.extend(stream(channel.unary_stream("/test.Errors/RaiseStreaming"), class_name(cls).encode(),
                          timeout_s=10))
    assert got == [b"first"]
    assert type(e.value) is cls and str(e.value) == _expected_message(raised)
    assert fields(e.value) == fields(raised)


@pytest.mark.parametrize("cls", CLASSES, ids=class_name)
def test_a_change_keeps_the_class_of_a_definite_refusal_and_is_unknown_otherwise(channel: grpc.Channel,
                                                                                cls: type[LakeError]) -> None:
    method = channel.unary_unary("/test.Errors/Raise")
    with pytest.raises(LakeError) as e:
        call(method, class_name(cls).encode(), timeout_s=10, changes_state=True)
    if status_for(make(cls))[0] in UNDECIDED and not issubclass(cls, errors.CommitStateUnknownError):
        assert type(e.value) is errors.CommitStateUnknownError  # the change may have been applied
    else:
        assert type(e.value) is cls


def test_storage_full_is_no_back_pressure(channel: grpc.Channel) -> None:
    """Both are RESOURCE_EXHAUSTED: the status code alone used to make every one of them BackPressureError."""
    method = channel.unary_unary("/test.Errors/Raise")
    with pytest.raises(errors.StorageError) as e:
        call(method, class_name(errors.StorageError).encode(), timeout_s=10, changes_state=True)
    assert e.value.errno == 28 and not isinstance(e.value, errors.BackPressureError)


def test_a_class_the_caller_does_not_know_is_its_nearest_known_ancestor(channel: grpc.Channel) -> None:
    with pytest.raises(LakeError) as e:
        call(channel.unary_unary("/test.Errors/Unknown"), b"", timeout_s=10, changes_state=False)
    assert type(e.value) is errors.ServiceUnavailableError
    assert str(e.value) == "gone for now" and e.value.shard == 3  # type: ignore[attr-defined]


def test_a_status_without_the_detail_maps_by_its_code(channel: grpc.Channel) -> None:
    with pytest.raises(LakeError) as e:
        call(channel.unary_unary("/test.Errors/Foreign"), b"", timeout_s=10, changes_state=False)
    assert type(e.value) is errors.BackPressureError and str(e.value) == "slow down"
