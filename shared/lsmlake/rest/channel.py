"""The bytes of one accepted HTTP connection, plain or TLS, read and written on the server's event loop.

TLS runs through OpenSSL's memory BIOs (`SSLContext.wrap_bio`) rather than asyncio's `start_tls`: asyncio's
TLS transport allocates a 256 KiB read buffer per connection (`asyncio.sslproto.SSLProtocol.max_size`, filled
with zeros, so resident), which for 512 idle connections is 128 MiB, the very growth the connection layer
exists to prevent. Here a connection holds OpenSSL's own state and the two BIOs (about 30 KiB measured after
a handshake and an 8 KiB partial head) and reads at most `READ_CHUNK` bytes at a time.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from contextlib import suppress

READ_CHUNK = 16 << 10  # one TLS record holds at most 16 KiB of data


class Channel:
    """A plaintext connection: `recv` returns what arrived (at most `limit` bytes; b"" at the end)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()

    async def handshake(self) -> None:
        """Nothing to agree on in plaintext."""

    async def recv(self, limit: int = READ_CHUNK) -> bytes:
        return await self._loop.sock_recv(self.sock, limit)

    async def send(self, data: bytes) -> None:
        await self._loop.sock_sendall(self.sock, data)

    async def close_write(self) -> None:
        """Tell the client no more bytes come (it then sees the end of the answer even if it still sends)."""
        with suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    async def discard(self) -> int:
        """Read and drop what the client still sends, without decrypting it; how many bytes (0 at its end)."""
        return len(await self._loop.sock_recv(self.sock, READ_CHUNK))

    def close(self) -> None:
        with suppress(OSError):
            self.sock.close()


class TlsChannel(Channel):
    """A TLS connection: OpenSSL reads the client's records from one memory BIO and writes its own to another,
    which go to the socket as they come."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        super().__init__(sock)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self) -> None:
        """Run the TLS handshake (with the client's certificate checked, when the context asks for one)."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError("the client closed the connection during the TLS handshake") from None
        await self._flush()

    async def recv(self, limit: int = READ_CHUNK) -> bytes:
        while True:
            try:
                return self._tls.read(limit)
            except ssl.SSLWantReadError:
                await self._flush()  # TLS 1.3 may have records of its own to send (session tickets, key updates)
                if not await self._fill():
                    return b""
            except ssl.SSLZeroReturnError:  # the client's close_notify
                return b""

    async def send(self, data: bytes) -> None:
        self._tls.write(data)  # a memory BIO takes everything at once
        await self._flush()

    async def close_write(self) -> None:
        with suppress(ssl.SSLError, OSError):
            self._tls.unwrap()  # close_notify into the outgoing BIO; the client's need not be awaited
        with suppress(OSError):
            await self._flush()
        await super().close_write()

    async def _fill(self) -> bool:
        """Read the client's next bytes into OpenSSL; False at the end of the connection."""
        data = await self._loop.sock_recv(self.sock, READ_CHUNK)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        data = self._outgoing.read()
        if data:
            await self._loop.sock_sendall(self.sock, data)


def open_channel(sock: socket.socket, context: ssl.SSLContext | None) -> Channel:
    """The channel of an accepted socket: TLS with `context`, plaintext without (handshake not yet run)."""
    return TlsChannel(sock, context) if context is not None else Channel(sock)
