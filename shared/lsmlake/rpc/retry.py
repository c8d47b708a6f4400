"""The one way lsmlake calls a service: within a deadline, asked again while the answer is lost, and failing
with an lsmlake error (`lsmlake.rpc.errors.error_for`), never a `grpc.RpcError`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from lsmlake.errors import LakeError
from lsmlake.rpc.errors import NO_ANSWER, error_for

_log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 << 20  # what the services accept per message
CHANNEL_OPTIONS: tuple[tuple[str, object], ...] = (("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES))


@dataclass(frozen=True)
class RetryPolicy:
    """Which failed calls are sent again (`on`: statuses that leave the answer missing), for how long in all
    (`retry_for_s`; 0 sends once), with a backoff doubling from `first_backoff_s` up to `max_backoff_s`.

    Only for calls that are safe to repeat: a read, or a change the service recognises when it sees it again
    (the same commit user and identifier, a timeline transition checked by state)."""

    retry_for_s: float = 0.0
    on: frozenset[grpc.StatusCode] = NO_ANSWER
    first_backoff_s: float = 0.1
    max_backoff_s: float = 2.0

    def run(self, attempt: Callable[[], T], what: str) -> T:
        """`attempt()`, again while it fails with a status in `on` and time is left; then its last error."""
        deadline = time.monotonic() + self.retry_for_s
        backoff = self.first_backoff_s
        while True:
            try:
                return attempt()
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
                if code not in self.on or time.monotonic() + backoff > deadline:
                    raise
                _log.warning("%s: %s, asking again", what, code.name if code is not None else "no status")
                time.sleep(backoff)  # bounded by retry_for_s
                backoff = min(backoff * 2, self.max_backoff_s)


ONCE = RetryPolicy()


def call(method: Callable[..., T], request: Any, *, timeout_s: float, changes_state: bool,
         retry: RetryPolicy = ONCE, what: str = "", refused: str | None = None,
         no_answer: Callable[[str, str], LakeError] | None = None) -> T:
    """`method(request)` under `retry`, each attempt within `timeout_s`; a failure is raised as an lsmlake error.

    `changes_state` and `refused` are `error_for`'s. `no_answer`, given the status name and details, makes the
    error for a call whose last status is still one `retry` asks again on (the caller words what is left undone).
    """
    try:
        return retry.run(lambda: method(request, timeout=timeout_s), what or type(request).__name__)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        if no_answer is not None and isinstance(code, grpc.StatusCode) and code in retry.on:
            details = e.details() if hasattr(e, "details") else str(e)
            raise no_answer(code.name, details) from e
        raise error_for(e, changes_state=changes_state, refused=refused) from e


def stream(method: Callable[..., Any], request: Any, *, timeout_s: float | None) -> Iterator[Any]:
    """The responses of the server-streaming `method(request)`; a failure, also one after some responses, is
    raised as an lsmlake error (a read's: nothing is asked again)."""
    try:
        yield from method(request, timeout=timeout_s)
    except grpc.RpcError as e:
        raise error_for(e, changes_state=False) from e
