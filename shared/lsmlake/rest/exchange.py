"""One HTTP/1.1 connection's requests and answers, parsed with h11 under the port's deadlines and limits.

The order of a request is what bounds a caller without a token: the head (at most `max_head_bytes`, h11's
`max_incomplete_event_size`) must arrive within its deadline; the application admits it from the head alone
(`App.admit`: authentication, route, role, the body's announced size); only then, holding a worker slot, is a
body read, and only on a route that takes one. A body that is not read (the request refused, or its route takes
none) closes the connection after the answer, since its bytes would be taken for the next request. Chunked
bodies are refused by the application (no size to check before reading).
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import h11

from lsmlake.rest.channel import READ_CHUNK, Channel
from lsmlake.rest.http_settings import HttpSettings
from lsmlake.rest.workers import Workers

_log = logging.getLogger(__name__)

# After an answer that leaves a body unread, its bytes are dropped (read, not kept) for as long as they keep
# coming (a pause of LINGER_IDLE_S ends it), up to LINGER_MAX_S and LINGER_BYTES in all, so that a client still
# sending an honest body of up to the old 16 MiB limit on a slow link reads its answer rather than a reset
# (a plain client sends its whole body before it reads). A fixed linger of 2 s reset such clients. Dropping
# costs no memory and a few ms of the loop per MiB; beyond the bounds, the reset.
LINGER_IDLE_S = 2.0
LINGER_MAX_S = 30.0
LINGER_BYTES = 17 << 20  # the old limit, and TLS framing and what came with the head


@dataclass(frozen=True)
class Head:
    """A request's head: its method, target (path and query), headers (names in lower case; a repeated name: the
    last value) and the client's IP address."""

    method: str
    target: str
    headers: Mapping[str, str]
    peer: str


@dataclass(frozen=True)
class Reply:
    """An answer as it goes on the wire: status, headers (Content-Length included) and body bytes."""

    status: int
    headers: Sequence[tuple[str, str]] = ()
    data: bytes = b""


@dataclass(frozen=True)
class Admission:
    """A request the application serves: up to `body_limit` bytes of its body are read, then `run` (in a worker
    thread) answers it; `refuse` answers it when the connection cannot (no worker free, a body too slow)."""

    body_limit: int
    run: Callable[[bytearray], Reply]
    refuse: Callable[[int, str], Reply]


class App(Protocol):
    """What serves the requests of a port."""

    def admit(self, head: Head) -> Reply | Admission:
        """The answer to a request refused from its head alone, or its admission. Runs on the event loop: quick."""
        ...

    def refusal(self, status: int, message: str, peer: str) -> Reply:
        """The answer to a request the connection refuses before it has a head (too large, too slow, malformed)."""
        ...


class Exchange:
    """The requests of one connection, answered one after the other (pipelined ones in order)."""

    def __init__(self, app: App, settings: HttpSettings, workers: Workers, channel: Channel, peer: str,
                 closing: Callable[[], bool]) -> None:
        self._app = app
        self._settings = settings
        self._workers = workers
        self._channel = channel
        self._peer = peer
        self._closing = closing
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=settings.max_head_bytes)
        self._loop = asyncio.get_running_loop()
        self._unread = False  # a body was left unread: drop its bytes for a moment before closing

    async def run(self, head_deadline: float) -> None:
        """1. The TLS handshake and the first head before `head_deadline`. 2. Each request answered. 3. On a
        kept-alive connection, the next head after at most `idle_timeout_s` of silence, then within
        `head_timeout_s`. Returns when the connection is to close."""
        try:
            async with asyncio.timeout_at(head_deadline):
                await self._channel.handshake()
        except TimeoutError:
            return
        deadline: float | None = head_deadline
        while not self._closing():
            request = await self._read_head(deadline)
            if request is None or not await self._serve(request):
                break
            self._h11.start_next_cycle()
            deadline = None
        if self._unread:
            await self._linger()

    # -- the head ---------------------------------------------------------------------------------

    async def _read_head(self, deadline: float | None) -> h11.Request | None:
        """The next request's head; None when the connection is to close (the client left, or was told why).
        `deadline` None: the connection was kept alive and may first be silent for `idle_timeout_s`."""
        s = self._settings
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as e:
                if e.error_status_hint == 431:
                    await self._refuse(431, f"the request head has more than {s.max_head_bytes} bytes")
                else:
                    await self._refuse(e.error_status_hint, f"the request is not valid HTTP/1.1: {e}")
                return None
            if isinstance(event, h11.Request):
                return event
            if event is not h11.NEED_DATA:  # the client closed the connection between requests
                return None
            held = len(self._h11.trailing_data[0])
            # never more than one byte past the limit in h11's buffer, which then refuses the head as too large
            limit = max(1, min(READ_CHUNK, s.max_head_bytes + 1 - held))
            if deadline is None:
                if not held:
                    data = await self._recv(self._loop.time() + s.idle_timeout_s, limit)
                    if data is None:
                        return None  # idle for too long: closed without a word, as browsers expect
                    self._h11.receive_data(data)
                deadline = self._loop.time() + s.head_timeout_s
                continue
            data = await self._recv(deadline, limit)
            if data is None:
                if held:
                    await self._refuse(408, f"the request head did not arrive within {s.head_timeout_s:g} s")
                return None
            self._h11.receive_data(data)

    async def _refuse(self, status: int, message: str) -> None:
        """Answer a request that has no head (h11 has none to answer), and close (what else the client sends is
        dropped for a moment)."""
        self._unread = True
        reply = self._app.refusal(status, message, self._peer)
        lines = [f"HTTP/1.1 {reply.status} {_phrase(reply.status)}", *(f"{k}: {v}" for k, v in reply.headers),
                 "Connection: close", "", ""]
        await self._send("\r\n".join(lines).encode("latin-1") + reply.data)

    # -- one request ------------------------------------------------------------------------------

    async def _serve(self, request: h11.Request) -> bool:
        """Answer one request; whether the connection may carry another."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers}
        head = Head(request.method.decode("ascii"), request.target.decode("latin-1"), headers, self._peer)
        # h11 has checked the Content-Length is a number, and holds the body to it
        with_body = "transfer-encoding" in headers or int(headers.get("content-length") or 0) > 0
        if not with_body:
            self._h11.next_event()  # the EndOfMessage of a request without a body
        if request.http_version not in (b"1.0", b"1.1"):  # h11 takes any HTTP/x.y; what follows may be HTTP/2 frames
            reply = self._app.refusal(505, f"HTTP/{request.http_version.decode()} is not served; use HTTP/1.1",
                                      self._peer)
            await self._answer(request, reply, unread=True)
            return False
        verdict = self._app.admit(head)
        if isinstance(verdict, Reply):
            return await self._answer(request, verdict, unread=with_body)
        if not await self._workers.acquire(self._settings.queue_timeout_s):
            return await self._answer(request, verdict.refuse(
                503, f"the server serves {self._workers.count} calls at once; retry"), unread=with_body)
        try:
            body = bytearray()
            if with_body and verdict.body_limit > 0:
                got = await self._read_body(verdict)
                if isinstance(got, Reply):
                    return await self._answer(request, got, unread=True)
                body = got
            reply = await self._workers.run(verdict.run, body)
            return await self._answer(request, reply, unread=with_body and verdict.body_limit == 0)
        finally:
            self._workers.release()

    async def _read_body(self, admission: Admission) -> bytearray | Reply:
        """The body (at most the admitted limit, within `body_timeout_s`), or the refusal to answer instead."""
        if self._h11.they_are_waiting_for_100_continue:
            await self._send(self._h11.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
        timeout_s = self._settings.body_timeout_s
        deadline = self._loop.time() + timeout_s
        body = bytearray()
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as e:  # the client closed before the end of its body
                return admission.refuse(400, f"the request body is not complete: {e}")
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > admission.body_limit:  # h11 holds the body to its Content-Length, admitted before
                    return admission.refuse(413, f"the request body has more than {admission.body_limit} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return body
            elif event is h11.NEED_DATA:
                data = await self._recv(deadline)
                if data is None:
                    return admission.refuse(408, f"the request body did not arrive within {timeout_s:g} s")
                self._h11.receive_data(data)
            else:
                return admission.refuse(400, "the request body ended early")

    async def _answer(self, request: h11.Request, reply: Reply, unread: bool) -> bool:
        """Send `reply`; whether the connection may carry another request. With a body left `unread` (or the
        server closing) the answer says `Connection: close`."""
        headers = list(reply.headers)
        if unread or self._closing():
            headers.append(("Connection", "close"))
        self._unread = self._unread or unread
        data = self._h11.send(h11.Response(status_code=reply.status, headers=headers,
                                           reason=_phrase(reply.status))) or b""
        if reply.data and request.method != b"HEAD":
            data += self._h11.send(h11.Data(data=reply.data)) or b""
        data += self._h11.send(h11.EndOfMessage()) or b""
        if not await self._send(data):
            return False
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    # -- bytes ------------------------------------------------------------------------------------

    async def _recv(self, deadline: float, limit: int = READ_CHUNK) -> bytes | None:
        """The client's next bytes, at most `limit` (b"" at its end); None when `deadline` passed first."""
        try:
            async with asyncio.timeout_at(deadline):
                return await self._channel.recv(limit)
        except TimeoutError:
            return None

    async def _send(self, data: bytes) -> bool:
        """Send `data`, which the client must take within `body_timeout_s`; whether it did."""
        try:
            async with asyncio.timeout(self._settings.body_timeout_s):
                await self._channel.send(data)
        except TimeoutError:
            _log.debug("HTTP client %s did not take its answer within %g s", self._peer, self._settings.body_timeout_s)
            return False
        return True

    async def _linger(self) -> None:
        """Drop the rest of an unread body for a moment: a client still sending when the socket closes would get a
        reset from its TCP stack, which can destroy the answer before the client has read it."""
        await self._channel.close_write()
        dropped = 0
        try:
            async with asyncio.timeout(LINGER_MAX_S):
                while dropped < LINGER_BYTES:
                    async with asyncio.timeout(LINGER_IDLE_S):
                        n = await self._channel.discard()
                    if not n:
                        break
                    dropped += n
        except TimeoutError:
            pass


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""

