"""The Client's storage settings: given as options under either key set or as StorageSettings, checked at once."""

from __future__ import annotations

import pytest

from lsmlake.client.client import Client
from lsmlake.errors import InvalidInputError
from lsmlake.fs import StorageSettings

EXPECTED = StorageSettings("http://127.0.0.1:9000", "eu-west-1", "AK", "SK", None, True)


@pytest.mark.parametrize("storage", [
    {"s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-1", "s3.access-key": "AK", "s3.secret-key": "SK",
     "s3.path.style.access": "true"},
    {"fs.s3.endpoint": "http://127.0.0.1:9000", "fs.s3.region": "eu-west-1", "fs.s3.accessKeyId": "AK",
     "fs.s3.accessKeySecret": "SK", "fs.s3.path-style-access": "true"},
    EXPECTED,
], ids=["paimon-keys", "pypaimon-keys", "settings"])
def test_storage_given_either_way(storage) -> None:
    with Client("127.0.0.1:1", storage=storage) as lake:
        assert lake.storage == EXPECTED
        assert "SK" not in repr(lake.storage)


def test_no_storage_means_the_environment_alone() -> None:
    with Client("127.0.0.1:1") as lake:
        assert lake.storage == StorageSettings()


@pytest.mark.parametrize(("storage", "message"), [
    ({"s3.endpoint": "http://h:1", "s3.acces-key": "AK"}, r"unknown storage option\(s\) \['s3.acces-key'\]"),
    ({"s3.path.style.access": "perhaps"}, r"s3\.path\.style\.access = 'perhaps'"),
    ("s3.endpoint=http://h:1", "storage must be StorageSettings or a mapping of options, not str"),
])
def test_bad_storage_is_refused_naming_the_problem(storage, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Client("127.0.0.1:1", storage=storage)
