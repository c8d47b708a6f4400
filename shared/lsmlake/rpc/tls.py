"""TLS credentials of servers and channels from PEM files, with errors that name the file."""

from __future__ import annotations

from pathlib import Path

import grpc

from lsmlake.errors import InvalidInputError


def read_pem(path: str, what: str) -> bytes:
    """The bytes of a PEM file; InvalidInputError naming `what` and the path when missing or not PEM."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InvalidInputError(f"cannot read the {what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN " not in data:
        raise InvalidInputError(f"the {what} {path} is not a PEM file")
    return data


def server_credentials(cert: str, key: str, client_ca: str | None) -> grpc.ServerCredentials:
    """Server TLS with this certificate chain and key; with `client_ca`, mutual TLS: every client must present
    a certificate signed by that CA."""
    ca = read_pem(client_ca, "client CA certificate") if client_ca else None
    return grpc.ssl_server_credentials([(read_pem(key, "TLS key"), read_pem(cert, "TLS certificate"))],
                                       root_certificates=ca, require_client_auth=ca is not None)


def channel_credentials(ca: str | None, cert: str | None, key: str | None) -> grpc.ChannelCredentials:
    """Channel TLS trusting `ca` (None: the system's roots); with `cert` and `key`, the client certificate for
    mutual TLS."""
    if (cert is None) != (key is None):
        raise InvalidInputError("a client certificate needs its key and the other way round")
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(ca, "CA certificate") if ca else None,
        private_key=read_pem(key, "client TLS key") if key else None,
        certificate_chain=read_pem(cert, "client TLS certificate") if cert else None)
