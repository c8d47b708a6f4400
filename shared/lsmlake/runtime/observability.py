"""What every lsmlake service shares for operators: structured logs and a Prometheus metrics endpoint."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from lsmlake.errors import InvalidInputError

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the service name and any `extra=` fields."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
                               "level": record.levelname, "service": self.service, "logger": record.name,
                               "message": record.getMessage()}
        for k, v in vars(record).items():
            if k not in _STANDARD and not k.startswith("_"):
                out[k] = v if isinstance(v, str | int | float | bool | type(None)) else str(v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(service: str, env: dict[str, str] | None = None) -> None:
    """Logs to stderr: `LSMLAKE_LOG_FORMAT` = text (default) or json, `LSMLAKE_LOG_LEVEL` (default INFO)."""
    env = dict(os.environ if env is None else env)
    fmt = env.get("LSMLAKE_LOG_FORMAT", "text").lower()
    if fmt not in ("text", "json"):
        raise InvalidInputError(f"LSMLAKE_LOG_FORMAT={fmt!r}: use text or json")
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service))
        import time

        logging.Formatter.converter = time.gmtime
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {service} %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(env.get("LSMLAKE_LOG_LEVEL", "INFO").upper())
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO


class MetricsEndpoint:
    """Serves a registry at http://host:port/metrics on a daemon thread; port 0 picks a free port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        server, thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        self._server, self._thread = server, thread
        self.port = server.server_port
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

