"""How lsmlake's Kafka clients authenticate to the brokers and encrypt the connection: SASL (PLAIN, SCRAM)
and SSL, as kafka-python settings.

Read once per process from flags and environment (`add_arguments`, `from_args`, `from_env`) and installed
with `kafka.client.configure_security`, after which every producer and consumer the process creates uses
it. The password comes from a file or from `LSMLAKE_KAFKA_SASL_PASSWORD` (a Secret given as an environment
variable), never from a flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsmlake.errors import InvalidInputError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class KafkaSecurity:
    """Security settings of a Kafka connection; the default is PLAINTEXT without SASL."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InvalidInputError(f"Kafka security protocol {self.protocol!r}: expected one of "
                                    f"{', '.join(PROTOCOLS)}")
        sasl = self.protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise InvalidInputError(f"Kafka {self.protocol} needs a SASL mechanism, one of {', '.join(MECHANISMS)}"
                                        f" (got {self.sasl_mechanism!r})")
            if not self.sasl_username or self.sasl_password is None:
                raise InvalidInputError(f"Kafka SASL {self.sasl_mechanism} needs a username and a password")
        elif self.sasl_mechanism or self.sasl_username:
            raise InvalidInputError(f"Kafka SASL settings given, but the security protocol is {self.protocol}; "
                                    "use SASL_SSL (or SASL_PLAINTEXT)")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise InvalidInputError("the Kafka client certificate and its key go together")
        tls_files = self.ssl_cafile or self.ssl_certfile
        if tls_files and not self.protocol.endswith("SSL"):
            raise InvalidInputError(f"Kafka SSL files given, but the security protocol is {self.protocol}; use SSL "
                                    "or SASL_SSL")
        for what, path in (("CA", self.ssl_cafile), ("certificate", self.ssl_certfile), ("key", self.ssl_keyfile)):
            if path is not None and not Path(path).is_file():
                raise InvalidInputError(f"the Kafka SSL {what} file {path} does not exist")

    def kwargs(self) -> dict[str, Any]:
        """The kafka-python settings (only those that differ from kafka-python's defaults)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol.startswith("SASL_"):
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                       sasl_plain_password=self.sasl_password)
        if self.protocol.endswith("SSL"):
            out["ssl_check_hostname"] = self.ssl_check_hostname
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, key) is not None:
                    out[key] = getattr(self, key)
        return out

    def __repr__(self) -> str:  # keeps the password out of logs
        return (f"KafkaSecurity(protocol={self.protocol!r}, sasl_mechanism={self.sasl_mechanism!r}, "
                f"sasl_username={self.sasl_username!r}, ssl_cafile={self.ssl_cafile!r})")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
        """The `--kafka-*` security flags, defaults from `LSMLAKE_KAFKA_*`."""
        p.add_argument("--kafka-security-protocol", type=str.upper,
                       default=(env.get("LSMLAKE_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper(), choices=PROTOCOLS,
                       help="env LSMLAKE_KAFKA_SECURITY_PROTOCOL; default PLAINTEXT")
        p.add_argument("--kafka-sasl-mechanism", type=str.upper, choices=MECHANISMS,
                       default=(env.get("LSMLAKE_KAFKA_SASL_MECHANISM") or "").upper() or None,
                       help="env LSMLAKE_KAFKA_SASL_MECHANISM")
        p.add_argument("--kafka-sasl-username", default=env.get("LSMLAKE_KAFKA_SASL_USERNAME") or None,
                       help="env LSMLAKE_KAFKA_SASL_USERNAME")
        p.add_argument("--kafka-sasl-password-file", default=env.get("LSMLAKE_KAFKA_SASL_PASSWORD_FILE") or None,
                       metavar="FILE", help="file holding the SASL password (env LSMLAKE_KAFKA_SASL_PASSWORD_FILE, "
                                            "or the password itself in LSMLAKE_KAFKA_SASL_PASSWORD)")
        p.add_argument("--kafka-ssl-cafile", default=env.get("LSMLAKE_KAFKA_SSL_CAFILE") or None, metavar="PEM",
                       help="CA certificate the brokers' certificates are checked against "
                            "(env LSMLAKE_KAFKA_SSL_CAFILE)")
        p.add_argument("--kafka-ssl-certfile", default=env.get("LSMLAKE_KAFKA_SSL_CERTFILE") or None, metavar="PEM",
                       help="client certificate for mutual TLS (env LSMLAKE_KAFKA_SSL_CERTFILE)")
        p.add_argument("--kafka-ssl-keyfile", default=env.get("LSMLAKE_KAFKA_SSL_KEYFILE") or None, metavar="PEM",
                       help="its key (env LSMLAKE_KAFKA_SSL_KEYFILE)")
        p.set_defaults(kafka_sasl_password_env=env.get("LSMLAKE_KAFKA_SASL_PASSWORD"))

    @staticmethod
    def from_args(a: argparse.Namespace) -> KafkaSecurity:
        password = a.kafka_sasl_password_env
        if a.kafka_sasl_password_file:
            try:
                password = Path(a.kafka_sasl_password_file).read_text(encoding="utf-8").rstrip("\r\n")
            except OSError as e:
                raise InvalidInputError(f"cannot read the Kafka SASL password file {a.kafka_sasl_password_file}: "
                                        f"{e.strerror or e}") from None
        return KafkaSecurity(a.kafka_security_protocol, a.kafka_sasl_mechanism, a.kafka_sasl_username, password,
                             a.kafka_ssl_cafile, a.kafka_ssl_certfile, a.kafka_ssl_keyfile)

    @staticmethod
    def from_env(env: Mapping[str, str]) -> KafkaSecurity:
        """The same settings from the environment alone (the `lake` command line)."""
        p = argparse.ArgumentParser(add_help=False)
        KafkaSecurity.add_arguments(p, env)
        return KafkaSecurity.from_args(p.parse_args([]))
