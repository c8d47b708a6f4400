"""The connections of one HTTP port: accepted on an asyncio event loop in a background thread, capped at accept,
each served by an `Exchange`; the handlers run in the port's `Workers`.

An idle or slow connection costs a socket, a coroutine, an h11 parser holding at most the head limit and, on
TLS, OpenSSL's state: tens of KiB, where a thread per connection (the old `ThreadingHTTPServer`) cost a stack
and whatever the caller made it read.

Shutdown, in order: 1. stop accepting (the listening socket closes); 2. the calls in flight get up to the
grace to finish; 3. every connection closes; 4. the loop's thread ends.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from contextlib import suppress

from lsmlake.rest.channel import open_channel
from lsmlake.rest.connection_caps import ConnectionCaps
from lsmlake.rest.exchange import App, Exchange
from lsmlake.rest.http_settings import HttpSettings
from lsmlake.rest.workers import Workers
from lsmlake.runtime.log_limit import LogLimiter

_log = logging.getLogger(__name__)
_refused = LogLimiter(_log, "refused HTTP connections")

BACKLOG = 256  # connections the kernel holds before the loop accepts them
ACCEPT_RETRY_S = 0.1  # after a failed accept (out of file descriptors): the backlog waits meanwhile
# what a plaintext connection over a cap reads before it is closed (a TLS one is closed without a word)
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 31\r\n"
         b"Connection: close\r\n\r\ntoo many connections; retry\r\n")


class ConnectionServer:
    """Serves `app` on `settings.host:settings.port` (TLS with `context`) from `start` until `stop`."""

    def __init__(self, app: App, settings: HttpSettings, context: ssl.SSLContext | None, name: str) -> None:
        self.app = app
        self.settings = settings
        self.context = context
        self.name = name
        self.caps = ConnectionCaps(settings.max_connections, settings.max_connections_per_peer)
        self.workers = Workers(settings.workers, name)
        self.closing = False
        self._port: int | None = None
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = asyncio.Event()
        self._grace_s = 0.0
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._port is not None, "not started"
        return self._port

    @property
    def open_connections(self) -> int:
        return self.caps.total

    @property
    def refused_connections(self) -> int:
        return self.caps.refused

    def start(self) -> int:
        """Bind (an error here is the caller's), then serve in a background thread; the bound port."""
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        listener = socket.create_server((self.settings.host, self.settings.port), family=family, backlog=BACKLOG)
        listener.setblocking(False)
        self._listener = listener
        self._port = int(listener.getsockname()[1])
        # asyncio's primitives belong to the loop that first uses them: new ones for each start
        self.workers = Workers(self.settings.workers, self.name)
        self._stop = asyncio.Event()
        self.closing = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-http", daemon=True)
        self._thread.start()
        return self._port

    def stop(self, grace_s: float) -> None:
        """Stop accepting, give the calls in flight up to `grace_s`, close every connection, end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._grace_s = grace_s
        with suppress(RuntimeError):  # the loop has already ended
            loop.call_soon_threadsafe(self._stop.set)
        thread.join(grace_s + 10)
        if thread.is_alive():
            _log.warning("%s: the HTTP connection thread did not end", self.name)
        self.workers.close()
        self._loop = self._thread = None

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except Exception:
            _log.exception("%s: the HTTP connection layer failed", self.name)
        finally:
            with suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            if self._listener is not None:
                self._listener.close()

    async def _serve(self) -> None:
        accepting = asyncio.create_task(self._accept())
        await self._stop.wait()
        # 1. stop accepting
        self.closing = True
        accepting.cancel()
        with suppress(asyncio.CancelledError):
            await accepting
        if self._listener is not None:
            self._listener.close()
        # 2. the calls in flight finish, up to the grace
        if not await self.workers.settled(self._grace_s):
            _log.warning("%s: %d call(s) still running at shutdown", self.name, self.workers.busy)
        # 3. every connection closes
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                sock, address = await loop.sock_accept(self._listener)
            except OSError as e:  # out of file descriptors, say: those waiting stay in the backlog meanwhile
                _refused.log(logging.ERROR, (self.name, "accept"), "%s: cannot accept a connection: %s", self.name, e)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            peer = str(address[0])
            reason = self.caps.admit(peer)
            if reason is not None:
                self._refuse(sock, peer, reason)
                continue
            task = loop.create_task(self._connection(sock, peer))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    def _refuse(self, sock: socket.socket, peer: str, reason: str) -> None:
        """Close a connection over a cap at once: it costs nothing past this."""
        _refused.log(logging.WARNING, (self.name, peer), "%s: refused a connection from %s: %s", self.name, peer,
                     reason)
        if self.context is None:
            with suppress(OSError):
                sock.send(_BUSY)  # the socket does not block: a full buffer just drops the courtesy
        with suppress(OSError):
            sock.close()

    async def _connection(self, sock: socket.socket, peer: str) -> None:
        head_deadline = asyncio.get_running_loop().time() + self.settings.head_timeout_s
        channel = open_channel(sock, self.context)
        try:
            with suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # an answer goes out in one piece
            await Exchange(self.app, self.settings, self.workers, channel, peer, lambda: self.closing).run(
                head_deadline)
        except OSError as e:  # a reset, a failed TLS handshake (plain HTTP to the TLS port): the client's problem
            _log.debug("%s: connection from %s ended: %s", self.name, peer, e)
        except Exception:
            _log.exception("%s: connection from %s failed", self.name, peer)
        finally:
            channel.close()
            self.caps.release(peer)
