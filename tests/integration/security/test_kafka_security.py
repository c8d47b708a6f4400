"""Kafka SASL and SSL settings reach kafka-python's producers and consumers from flags and environment.

The embedded Tansu broker speaks neither SASL nor SSL, so these tests check the settings built for
kafka-python (and that kafka-python accepts them), not a connection.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from catalog_svc.server import Settings as CatalogSettings
from lsmlake.errors import InvalidInputError
from lsmlake.kafka import client
from lsmlake.kafka.security import KafkaSecurity
from writer_svc.server import Settings as WriterSettings


@pytest.fixture
def restore_security() -> Iterator[None]:
    yield
    client.configure_security(KafkaSecurity())


def test_plaintext_adds_nothing() -> None:
    assert KafkaSecurity().kwargs() == {}
    assert client.client_settings(client.PRODUCER_DEFAULTS, {}) == client.PRODUCER_DEFAULTS


def test_sasl_scram_over_ssl_from_flags_and_a_password_file(tmp_path: Path, restore_security: None) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "pw").write_text("s3cret\n")
    s = CatalogSettings.from_args(["--warehouse", str(tmp_path), "--kafka-security-protocol", "sasl_ssl",
                                   "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", "lake",
                                   "--kafka-sasl-password-file", str(tmp_path / "pw"),
                                   "--kafka-ssl-cafile", str(tmp_path / "ca.pem")], env={})
    want = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "lake",
            "sasl_plain_password": "s3cret", "ssl_check_hostname": True, "ssl_cafile": str(tmp_path / "ca.pem")}
    assert s.kafka_security.kwargs() == want
    assert "s3cret" not in repr(s.kafka_security)
    client.configure_security(s.kafka_security)
    settings = client.client_settings(client.CONSUMER_DEFAULTS, {"max_poll_records": 5})
    assert settings == {**client.CONSUMER_DEFAULTS, **want, "max_poll_records": 5}
    # every key is one kafka-python knows, for producers and consumers alike
    assert set(want) <= set(KafkaProducer.DEFAULT_CONFIG) and set(want) <= set(KafkaConsumer.DEFAULT_CONFIG)


def test_sasl_plain_from_the_environment() -> None:
    env = {"LSMLAKE_WAREHOUSE": "/w", "LSMLAKE_CATALOG": "c:1", "LSMLAKE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "LSMLAKE_KAFKA_SASL_MECHANISM": "plain", "LSMLAKE_KAFKA_SASL_USERNAME": "u",
           "LSMLAKE_KAFKA_SASL_PASSWORD": "p"}
    s = WriterSettings.from_args([], env=env)
    assert s.kafka_security.kwargs() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                         "sasl_plain_username": "u", "sasl_plain_password": "p"}
    assert KafkaSecurity.from_env(env) == s.kafka_security


def test_mutual_tls_with_kafka(tmp_path: Path) -> None:
    for name in ("ca", "crt", "key"):
        (tmp_path / name).write_text("x")
    sec = KafkaSecurity("SSL", ssl_cafile=str(tmp_path / "ca"), ssl_certfile=str(tmp_path / "crt"),
                        ssl_keyfile=str(tmp_path / "key"))
    assert sec.kwargs() == {"security_protocol": "SSL", "ssl_check_hostname": True, "ssl_cafile": str(tmp_path / "ca"),
                            "ssl_certfile": str(tmp_path / "crt"), "ssl_keyfile": str(tmp_path / "key")}


@pytest.mark.parametrize(("kw", "message"), [
    ({"protocol": "TLS"}, "expected one of PLAINTEXT"),
    ({"protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": "p"}, "needs a SASL mechanism"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "u"}, "needs a username and a password"),
    ({"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "p"}, "use SASL_SSL"),
    ({"protocol": "SSL", "ssl_certfile": "/c"}, "certificate and its key go together"),
    ({"ssl_cafile": "/ca"}, "use SSL or SASL_SSL"),
    ({"protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "/no/such/ca.pem does not exist"),
])
def test_inconsistent_settings_are_refused(kw: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        KafkaSecurity(**kw)


def test_a_bad_setting_is_a_usage_error_of_the_service(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        CatalogSettings.from_args(["--warehouse", "/w", "--kafka-security-protocol", "SASL_SSL"], env={})
    assert "needs a SASL mechanism" in capsys.readouterr().err
    ns = argparse.Namespace(kafka_security_protocol="SASL_SSL", kafka_sasl_mechanism="PLAIN",
                            kafka_sasl_username="u", kafka_sasl_password_file="/no/such/file",
                            kafka_sasl_password_env=None, kafka_ssl_cafile=None, kafka_ssl_certfile=None,
                            kafka_ssl_keyfile=None)
    with pytest.raises(InvalidInputError, match="cannot read the Kafka SASL password file /no/such/file"):
        KafkaSecurity.from_args(ns)
