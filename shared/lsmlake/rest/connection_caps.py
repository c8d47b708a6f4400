"""How many connections one HTTP port holds, in all and per peer: the count the server checks at accept."""

from __future__ import annotations

from collections import Counter


class ConnectionCaps:
    """Open connections counted in all and per peer (a client's IP address); `admit` takes one or says why not.

    Not thread-safe: the server's event loop alone admits and releases."""

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        self.max_connections = max(1, max_connections)
        self.max_per_peer = max(1, max_per_peer)
        self._open: Counter[str] = Counter()
        self.total = 0
        self.refused = 0  # connections refused since the start

    def admit(self, peer: str) -> str | None:
        """Count a new connection from `peer`; None when admitted, else why it is refused (and it is not counted
        as open)."""
        if self.total >= self.max_connections:
            reason = f"the port holds {self.total} connections, its limit"
        elif self._open[peer] >= self.max_per_peer:
            reason = f"{peer} holds {self._open[peer]} connections, the limit per peer"
        else:
            self._open[peer] += 1
            self.total += 1
            return None
        self.refused += 1
        return reason

    def release(self, peer: str) -> None:
        """A connection `admit` took has closed."""
        self._open[peer] -= 1
        if self._open[peer] <= 0:
            del self._open[peer]  # a peer that left costs nothing
        self.total -= 1

    def of(self, peer: str) -> int:
        return self._open.get(peer, 0)
