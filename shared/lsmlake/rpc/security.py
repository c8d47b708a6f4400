"""The security settings of a server and of a channel, read from flags and environment in one place.

gRPC is imported only when a server or channel is built, so that `lake --help` stays quick.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lsmlake.auth.tokens import TokenStore
from lsmlake.errors import InvalidInputError

if TYPE_CHECKING:
    import grpc

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSecurity:
    """TLS and token checking of a gRPC server; all off by default (plaintext, every call allowed)."""

    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None  # mutual TLS: clients must present a certificate signed by this CA
    auth_tokens: str | None = None  # token file (see `tokens`); None: no token is checked

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidInputError("--tls-cert and --tls-key go together")
        if self.tls_client_ca and not self.tls_cert:
            raise InvalidInputError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def credentials(self) -> grpc.ServerCredentials | None:
        """Server credentials, or None for a plaintext port."""
        from lsmlake.rpc.tls import server_credentials

        if self.tls_cert is None or self.tls_key is None:
            return None
        return server_credentials(self.tls_cert, self.tls_key, self.tls_client_ca)

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        from lsmlake.rpc.interceptor import AuthInterceptor

        if self.auth_tokens is None:
            return []
        if not self.tls:
            _log.warning("bearer tokens are checked on a plaintext port: they travel unencrypted")
        return [AuthInterceptor(TokenStore(self.auth_tokens))]

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
        """`--tls-cert`, `--tls-key`, `--tls-client-ca`, `--auth-tokens` with their `LSMLAKE_*` defaults."""
        p.add_argument("--tls-cert", default=env.get("LSMLAKE_TLS_CERT") or None, metavar="PEM",
                       help="serve TLS with this certificate chain (env LSMLAKE_TLS_CERT); needs --tls-key")
        p.add_argument("--tls-key", default=env.get("LSMLAKE_TLS_KEY") or None, metavar="PEM",
                       help="private key of --tls-cert (env LSMLAKE_TLS_KEY)")
        p.add_argument("--tls-client-ca", default=env.get("LSMLAKE_TLS_CLIENT_CA") or None, metavar="PEM",
                       help="mutual TLS: require client certificates signed by this CA (env LSMLAKE_TLS_CLIENT_CA)")
        p.add_argument("--auth-tokens", default=env.get("LSMLAKE_AUTH_TOKENS") or None, metavar="JSON",
                       help="token file: every call needs a bearer token of a role allowed to call the method "
                            "(env LSMLAKE_AUTH_TOKENS; see docs/security.md)")

    @staticmethod
    def from_args(a: argparse.Namespace) -> ServerSecurity:
        return ServerSecurity(a.tls_cert, a.tls_key, a.tls_client_ca, a.auth_tokens)

    def check(self) -> None:
        """Read every file once, so that a bad path or file fails at start-up with a clear message."""
        self.credentials()
        if self.auth_tokens is not None:
            TokenStore(self.auth_tokens)


@dataclass(frozen=True)
class ChannelSecurity:
    """How a client reaches a service: TLS trusting `tls_ca`, an optional client certificate, a bearer token.
    All off by default (a plaintext channel without a token)."""

    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    token: str | None = field(default=None, repr=False)  # a secret: kept out of logs
    tls: bool = False  # TLS with the system's root certificates when no `tls_ca` is given

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise InvalidInputError("a client certificate (--tls-cert) needs its key (--tls-key) and the other "
                                    "way round")
        if self.token is not None and not self.token.strip():
            raise InvalidInputError("the bearer token is empty")

    @property
    def uses_tls(self) -> bool:
        return self.tls or self.tls_ca is not None or self.tls_cert is not None

    def open_channel(self, target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
        """A channel to `target` with this TLS and token."""
        import grpc

        from lsmlake.rpc.interceptor import BearerToken
        from lsmlake.rpc.tls import channel_credentials

        if self.uses_tls:
            ch = grpc.secure_channel(target, channel_credentials(self.tls_ca, self.tls_cert, self.tls_key),
                                     options=list(options))
        else:
            ch = grpc.insecure_channel(target, options=list(options))
        if self.token:
            return grpc.intercept_channel(ch, BearerToken(self.token.strip()))
        return ch

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str], flag_prefix: str, env_prefix: str,
                      what: str) -> None:
        """`--<prefix>tls-ca`, `--<prefix>tls-cert`, `--<prefix>tls-key`, `--<prefix>token-file`, defaults from
        `<ENV_PREFIX>TLS_CA`, `..._TLS_CERT`, `..._TLS_KEY`, `..._TOKEN_FILE` (or the token itself in
        `<ENV_PREFIX>TOKEN`)."""
        dest = flag_prefix.replace("-", "_")
        for name, help_ in (("tls-ca", f"connect to {what} over TLS, trusting this CA certificate"),
                            ("tls-cert", f"client certificate for mutual TLS with {what}"),
                            ("tls-key", "private key of that client certificate"),
                            ("token-file", f"file holding the bearer token for {what} (or set the token in "
                                           f"{env_prefix}TOKEN)")):
            var = env_prefix + name.upper().replace("-", "_")
            p.add_argument(f"--{flag_prefix}{name}", dest=f"{dest}{name.replace('-', '_')}",
                           default=env.get(var) or None, metavar="FILE", help=f"{help_} (env {var})")
        p.set_defaults(**{f"{dest}token_env": env.get(f"{env_prefix}TOKEN") or None})

    @staticmethod
    def from_args(a: argparse.Namespace, flag_prefix: str) -> ChannelSecurity:
        dest = flag_prefix.replace("-", "_")
        token_file = getattr(a, f"{dest}token_file")
        token = read_token(token_file) if token_file else getattr(a, f"{dest}token_env")
        return ChannelSecurity(getattr(a, f"{dest}tls_ca"), getattr(a, f"{dest}tls_cert"),
                               getattr(a, f"{dest}tls_key"), token)

    @staticmethod
    def from_env(env: Mapping[str, str], env_prefix: str) -> ChannelSecurity:
        """The same settings from the environment alone."""
        p = argparse.ArgumentParser(add_help=False)
        ChannelSecurity.add_arguments(p, env, "", env_prefix, "the service")
        return ChannelSecurity.from_args(p.parse_args([]), "")


def read_token(path: str) -> str:
    """The bearer token in a file (its first line, stripped: a Secret mounted as a file)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InvalidInputError(f"cannot read the token file {path}: {e.strerror or e}") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise InvalidInputError(f"the token file {path} is empty")
    return token
