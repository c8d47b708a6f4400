"""StorageSettings: the AWS environment, options under Paimon's and pypaimon's keys, the URI, and their order."""

from __future__ import annotations

import pickle

import pyarrow.fs as pafs
import pytest

from lsmlake.errors import InvalidInputError
from lsmlake.fs import StorageSettings, open_path
from lsmlake.fs.storage_settings import join_uri, location_uri

FULL_ENV = {
    "AWS_ENDPOINT_URL": "http://env-host:9000", "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "env-key",
    "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token", "LSMLAKE_S3_PATH_STYLE": "false",
}

PAIMON = {"s3.endpoint": "http://opt-host:9000", "s3.region": "us-west-2", "s3.access-key": "opt-key",
          "s3.secret-key": "opt-secret", "s3.session-token": "opt-token", "s3.path.style.access": "true"}
PYPAIMON = {"fs.s3.endpoint": "http://opt-host:9000", "fs.s3.region": "us-west-2", "fs.s3.accessKeyId": "opt-key",
            "fs.s3.accessKeySecret": "opt-secret", "fs.s3.securityToken": "opt-token",
            "fs.s3.path-style-access": "true"}
OPTIONS_SETTINGS = StorageSettings("http://opt-host:9000", "us-west-2", "opt-key", "opt-secret", "opt-token", True)


def test_env_reads_the_standard_aws_variables() -> None:
    s = StorageSettings.from_env(FULL_ENV)
    assert s == StorageSettings("http://env-host:9000", "eu-west-1", "env-key", "env-secret", "env-token", False)


def test_env_prefers_the_s3_endpoint_and_falls_back_to_the_default_region() -> None:
    s = StorageSettings.from_env({"AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3": "http://s3only:2",
                                  "AWS_DEFAULT_REGION": "ap-south-1"})
    assert (s.endpoint, s.region) == ("http://s3only:2", "ap-south-1")


def test_empty_environment_sets_nothing() -> None:
    assert StorageSettings.from_env({}) == StorageSettings()
    assert StorageSettings.from_env({"AWS_REGION": "", "AWS_ACCESS_KEY_ID": ""}) == StorageSettings()


@pytest.mark.parametrize("options", [PAIMON, PYPAIMON], ids=["paimon-keys", "pypaimon-keys"])
def test_options_under_either_key_set(options: dict[str, str]) -> None:
    assert StorageSettings.from_options(options) == OPTIONS_SETTINGS


def test_options_ignore_other_keys_and_paimon_keys_win_over_pypaimon_ones() -> None:
    s = StorageSettings.from_options({"bucket": "4", "s3.region": "paimon", "fs.s3.region": "pypaimon"})
    assert s == StorageSettings(region="paimon")


@pytest.mark.parametrize(("text", "flag"), [("true", True), ("TRUE", True), ("1", True), ("yes", True),
                                            ("false", False), ("0", False), ("off", False)])
def test_path_style_flags(text: str, flag: bool) -> None:
    assert StorageSettings.from_options({"s3.path.style.access": text}).path_style is flag
    assert StorageSettings.from_env({"LSMLAKE_S3_PATH_STYLE": text}).path_style is flag


def test_a_bad_path_style_flag_is_refused_naming_the_key() -> None:
    with pytest.raises(InvalidInputError, match=r"s3\.path\.style\.access = 'maybe'"):
        StorageSettings.from_options({"s3.path.style.access": "maybe"})
    with pytest.raises(InvalidInputError, match="LSMLAKE_S3_PATH_STYLE"):
        StorageSettings.from_env({"LSMLAKE_S3_PATH_STYLE": "sometimes"})


def test_uri_in_pyarrows_form() -> None:
    s = StorageSettings.from_uri("s3://AK:S%2FK@bucket/wh?endpoint_override=127.0.0.1:9000&region=r1&scheme=http"
                                 "&force_virtual_addressing=false")
    assert s == StorageSettings("http://127.0.0.1:9000", "r1", "AK", "S/K", None, True)


def test_uri_endpoint_defaults_to_https_and_a_plain_uri_sets_nothing() -> None:
    assert StorageSettings.from_uri("s3://b/wh?endpoint_override=minio:9000").endpoint == "https://minio:9000"
    assert StorageSettings.from_uri("s3://b/wh") == StorageSettings()


def test_precedence_environment_then_options_then_uri() -> None:
    env = {"AWS_REGION": "env-region", "AWS_ACCESS_KEY_ID": "env-key", "AWS_SECRET_ACCESS_KEY": "env-secret",
           "AWS_ENDPOINT_URL": "http://env:1"}
    options = {"s3.region": "opt-region", "s3.endpoint": "http://opt:2"}
    s = StorageSettings.resolve("s3://b/wh?endpoint_override=uri:3&scheme=http", options, env)
    assert s.endpoint == "http://uri:3"  # the URI over the options
    assert s.region == "opt-region"  # the options over the environment
    assert (s.access_key_id, s.secret_access_key) == ("env-key", "env-secret")  # set only in the environment


def test_overlay_keeps_fields_the_other_leaves_unset() -> None:
    base = StorageSettings(region="a", access_key_id="k")
    assert base.overlay(StorageSettings(region="b")) == StorageSettings(region="b", access_key_id="k")
    assert base.overlay(StorageSettings()) == base


def test_filesystem_options_for_a_custom_endpoint() -> None:
    o = StorageSettings("http://127.0.0.1:9000/", "r1", "k", "s", "t", True).filesystem_options()
    assert o == {"access_key": "k", "secret_key": "s", "session_token": "t", "region": "r1",
                 "endpoint_override": "127.0.0.1:9000", "scheme": "http", "force_virtual_addressing": False}
    pafs.S3FileSystem(**o)  # pyarrow takes every one of them


def test_filesystem_options_without_credentials_leave_them_to_the_default_chain() -> None:
    o = StorageSettings(region="r1").filesystem_options()
    assert o == {"region": "r1"}


def test_env_round_trips_through_from_env() -> None:
    s = StorageSettings("http://h:1", "r", "k", "s", "t", True)
    assert StorageSettings.from_env(s.env()) == s
    assert StorageSettings().env() == {}


@pytest.mark.parametrize("key_set", ["s3.", "fs.s3."])
def test_paimon_options_round_trip_under_both_key_sets(key_set: str) -> None:
    s = StorageSettings("http://h:1", "r", "k", "s", "t", False)
    both = s.paimon_options()
    assert StorageSettings.from_options({k: v for k, v in both.items() if k.startswith(key_set)}) == s


def test_paimon_options_address_a_custom_endpoint_by_path_unless_told() -> None:
    assert StorageSettings(endpoint="http://h:1").paimon_options()["s3.path.style.access"] == "true"
    assert StorageSettings(endpoint="http://h:1", path_style=False).paimon_options()["s3.path.style.access"] == "false"
    assert "s3.path.style.access" not in StorageSettings(region="r").paimon_options()


def test_repr_hides_secrets() -> None:
    s = StorageSettings("http://h:1", "r", "AKID", "very-secret", "token-value", None)
    for shown in (repr(s), s.redacted(), str(s), f"{s!r}"):
        assert "very-secret" not in shown and "token-value" not in shown
        assert "AKID" in shown and "http://h:1" in shown  # what identifies the settings stays readable


def test_settings_pickle_for_executors() -> None:
    s = StorageSettings("http://h:1", "r", "k", "s", "t", True)
    assert pickle.loads(pickle.dumps(s)) == s


@pytest.mark.parametrize(("base", "expected"), [
    ("s3://b/wh", "s3://b/wh/db.db/t"),
    ("s3://b/wh/", "s3://b/wh/db.db/t"),
    ("s3://k:s@b/wh?endpoint_override=h:9000&region=r", "s3://k:s@b/wh/db.db/t?endpoint_override=h:9000&region=r"),
    ("s3://b?endpoint_override=h:9000", "s3://b/db.db/t?endpoint_override=h:9000"),
    ("/data/wh", "/data/wh/db.db/t"),
    ("/data/wh/", "/data/wh/db.db/t"),
])
def test_join_uri(base: str, expected: str) -> None:
    assert join_uri(base, "db.db", "t") == expected


def test_location_uri() -> None:
    assert location_uri("s3", "bucket/wh/db.db/t") == "s3://bucket/wh/db.db/t"
    assert location_uri("", "/data/wh/db.db/t") == "/data/wh/db.db/t"
    assert location_uri("file", "/data/wh") == "/data/wh"


def test_open_path_reports_credential_free_uris_and_takes_settings() -> None:
    fio, path = open_path("s3://AK:SK@bucket/wh?endpoint_override=127.0.0.1:1&scheme=http&region=r1",
                          storage=StorageSettings(region="ignored-for-the-uri", session_token="tok"))
    assert path == "bucket/wh"
    assert fio.uri(f"{path}/db.db/t") == "s3://bucket/wh/db.db/t"
    assert isinstance(fio.fs, pafs.S3FileSystem)
    assert fio.fs.region == "r1"  # the URI's own region over the given settings


# Paimon's Java S3 file system hands every `s3.X` option to Hadoop's S3A as `fs.s3a.X`, then copies a few dashed
# keys to their dotted names (access-key, secret-key, path-style-access): what S3A then reads is what counts
_PAIMON_MIRRORED = {"fs.s3a.access-key": "fs.s3a.access.key", "fs.s3a.secret-key": "fs.s3a.secret.key",
                    "fs.s3a.path-style-access": "fs.s3a.path.style.access"}


def _as_hadoop_sees_them(options: dict[str, str]) -> dict[str, str]:
    hadoop = {"fs.s3a." + k[len("s3."):]: v for k, v in options.items() if k.startswith("s3.")}
    for dashed, dotted in _PAIMON_MIRRORED.items():
        if dashed in hadoop:
            hadoop[dotted] = hadoop[dashed]
    return hadoop


def test_paimon_keys_reach_hadoop_s3a_for_endpoint_keys_and_path_style() -> None:
    hadoop = _as_hadoop_sees_them(StorageSettings("http://h:1", None, "k", "s", None, True).paimon_options())
    assert hadoop["fs.s3a.endpoint"] == "http://h:1"
    assert (hadoop["fs.s3a.access.key"], hadoop["fs.s3a.secret.key"]) == ("k", "s")
    assert hadoop["fs.s3a.path.style.access"] == "true"


def test_paimon_keys_reach_hadoop_s3a_for_the_session_token() -> None:
    hadoop = _as_hadoop_sees_them(StorageSettings("http://h:1", None, "k", "s", "t", True).paimon_options())
    assert hadoop.get("fs.s3a.session.token") == "t"
    assert StorageSettings.from_options({"s3.session.token": "t"}) == StorageSettings(session_token="t")


def test_paimon_keys_reach_hadoop_s3a_for_the_region() -> None:
    hadoop = _as_hadoop_sees_them(StorageSettings("http://h:1", "r1", "k", "s", None, True).paimon_options())
    assert hadoop.get("fs.s3a.endpoint.region") == "r1"
    # and what a Paimon user writes is understood on the way in
    assert StorageSettings.from_options({"s3.endpoint.region": "r1"}) == StorageSettings(region="r1")


def test_credentials_are_taken_as_one_unit_from_the_source_that_names_a_key() -> None:
    env = {"AWS_ACCESS_KEY_ID": "env-key", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token",
           "AWS_REGION": "eu-west-1"}
    s = StorageSettings.resolve("s3://b/wh", {"s3.access-key": "opt-key", "s3.secret-key": "opt-secret"}, env)
    assert (s.access_key_id, s.secret_access_key, s.session_token) == ("opt-key", "opt-secret", None)
    assert s.region == "eu-west-1"  # other fields still overlay one by one
    assert "session_token" not in s.filesystem_options()
    # a source that gives only a token keeps the key pair it completes
    s = StorageSettings.from_env(env).overlay(StorageSettings(session_token="fresh"))
    assert (s.access_key_id, s.session_token) == ("env-key", "fresh")


def test_env_names_the_s3_endpoint_only() -> None:
    env = StorageSettings(endpoint="http://127.0.0.1:9000").env()
    assert env == {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000"}
    assert StorageSettings.from_env(env).endpoint == "http://127.0.0.1:9000"
