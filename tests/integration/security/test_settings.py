"""The services' TLS and token settings from flags and environment: what they accept, and the usage error
that names a bad or missing file before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog_svc.server import Settings as CatalogSettings
from compactor_svc.server import Settings as CompactorSettings
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.support.certs import Certs
from tests.support.security import Tokens
from writer_svc.server import Settings as WriterSettings


def test_flags_and_environment_reach_the_settings(certs: Certs, tokens: Tokens, tmp_path: Path) -> None:
    s = CatalogSettings.from_args(["--warehouse", str(tmp_path), "--tls-cert", certs.server_cert, "--tls-key",
                                   certs.server_key, "--tls-client-ca", certs.ca, "--auth-tokens", tokens.file,
                                   "--health-port", "0"], env={})
    assert s.security == ServerSecurity(certs.server_cert, certs.server_key, certs.ca, tokens.file)
    assert s.health_port == 0
    token_file = tmp_path / "token"
    token_file.write_text(f"  {tokens.writer}\n")
    env = {"LSMLAKE_WAREHOUSE": str(tmp_path), "LSMLAKE_CATALOG": "127.0.0.1:1", "LSMLAKE_KAFKA": "127.0.0.1:2",
           "LSMLAKE_TLS_CERT": certs.server_cert, "LSMLAKE_TLS_KEY": certs.server_key,
           "LSMLAKE_AUTH_TOKENS": tokens.file, "LSMLAKE_CATALOG_TLS_CA": certs.ca,
           "LSMLAKE_CATALOG_TLS_CERT": certs.client_cert, "LSMLAKE_CATALOG_TLS_KEY": certs.client_key,
           "LSMLAKE_CATALOG_TOKEN_FILE": str(token_file)}
    for cls in (WriterSettings, CompactorSettings):
        s = cls.from_args([], env=env)
        assert s.security == ServerSecurity(certs.server_cert, certs.server_key, None, tokens.file)
        assert s.catalog_security == ChannelSecurity(certs.ca, certs.client_cert, certs.client_key, tokens.writer)
    # the token may also come from the environment itself; a flag wins over it
    env2 = {**env, "LSMLAKE_CATALOG_TOKEN": "from-env"}
    del env2["LSMLAKE_CATALOG_TOKEN_FILE"]
    assert WriterSettings.from_args([], env=env2).catalog_security.token == "from-env"
    s = WriterSettings.from_args(["--catalog-token-file", str(token_file)], env=env2)
    assert s.catalog_security.token == tokens.writer
    assert tokens.writer not in repr(s)


def test_defaults_are_plaintext_and_open(tmp_path: Path) -> None:
    s = WriterSettings.from_args(["--warehouse", str(tmp_path), "--catalog", "127.0.0.1:1"], env={})
    assert s.security == ServerSecurity() and s.catalog_security == ChannelSecurity() and s.health_port is None
    assert not s.security.tls and s.security.interceptors() == [] and s.security.credentials() is None


@pytest.mark.parametrize(("args", "message"), [
    (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
    (["--tls-client-ca", "{ca}"], "--tls-client-ca (mutual TLS) needs --tls-cert"),
    (["--tls-cert", "{cert}", "--tls-key", "{missing}"], "cannot read the TLS key {missing}"),
    (["--tls-cert", "{tokens}", "--tls-key", "{key}"], "the TLS certificate {tokens} is not a PEM file"),
    (["--auth-tokens", "{missing}"], "cannot use token file"),
    (["--health-port", "70000"], "--health-port 70000 is not a port number"),
])
def test_a_bad_setting_stops_the_service_before_it_starts(args: list[str], message: str, certs: Certs,
                                                          tokens: Tokens, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    names = {"cert": certs.server_cert, "key": certs.server_key, "ca": certs.ca, "tokens": tokens.file,
             "missing": str(tmp_path / "missing.pem")}
    with pytest.raises(SystemExit):
        CatalogSettings.from_args(["--warehouse", str(tmp_path), *(a.format(**names) for a in args)], env={})
    assert message.format(**names) in capsys.readouterr().err


def test_a_bad_catalog_channel_setting_stops_the_writer(tmp_path: Path, certs: Certs,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--warehouse", str(tmp_path), "--catalog", "127.0.0.1:1"]
    with pytest.raises(SystemExit):
        WriterSettings.from_args([*base, "--catalog-token-file", str(tmp_path / "nope")], env={})
    assert f"cannot read the token file {tmp_path / 'nope'}" in capsys.readouterr().err
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SystemExit):
        WriterSettings.from_args([*base, "--catalog-token-file", str(tmp_path / "empty")], env={})
    assert "is empty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        WriterSettings.from_args([*base, "--catalog-tls-cert", certs.client_cert], env={})
    assert "needs its key" in capsys.readouterr().err
