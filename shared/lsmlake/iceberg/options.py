"""The `metadata.iceberg.*` table options this publication supports, parsed once into `IcebergSettings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lsmlake.errors import InvalidInputError

STORAGE = "metadata.iceberg.storage"
STORAGE_LOCATION = "metadata.iceberg.storage-location"
FORMAT_VERSION = "metadata.iceberg.format-version"
PREVIOUS_VERSIONS_MAX = "metadata.iceberg.previous-versions-max"
DELETE_AFTER_COMMIT = "metadata.iceberg.delete-after-commit.enabled"
MANIFEST_COMPRESSION = "metadata.iceberg.manifest-compression"
COMPACTION_MAX_FILE_NUM = "metadata.iceberg.compaction.max.file-num"

DISABLED = "disabled"
TABLE_LOCATION = "table-location"
HADOOP_CATALOG = "hadoop-catalog"
CATALOG_LOCATION = "catalog-location"
_STORAGES = (DISABLED, TABLE_LOCATION, HADOOP_CATALOG)
_CATALOG_STORAGES = ("hive-catalog", "rest-catalog")
_LOCATIONS = (TABLE_LOCATION, CATALOG_LOCATION)
# Paimon's default is snappy, but pyiceberg reads snappy Avro only with python-snappy installed (its `snappy`
# extra), which lsmlake's environment does not have; deflate is read by every Avro reader without extras (pyiceberg,
# DuckDB, Iceberg Java). No zstd by default: some readers, DuckDB among them, read no zstd manifests.
DEFAULT_CODEC = "deflate"
_CODECS = {"snappy": "snappy", "deflate": "deflate", "gzip": "deflate", "none": "null", "uncompressed": "null",
           "null": "null", "zstd": "zstandard"}


@dataclass(frozen=True)
class IcebergSettings:
    """The parsed `metadata.iceberg.*` options of a table."""

    storage: str = DISABLED
    location: str = TABLE_LOCATION  # where the metadata goes: table-location or catalog-location
    previous_versions_max: int = 0
    delete_after_commit: bool = True
    codec: str = DEFAULT_CODEC  # fastavro's name of the manifests' compression
    max_manifests: int = 50

    @property
    def enabled(self) -> bool:
        return self.storage != DISABLED


def iceberg_enabled(options: Mapping[str, str]) -> bool:
    """Whether a table's options ask for Iceberg metadata."""
    return options.get(STORAGE, DISABLED).strip().lower() != DISABLED


def _int(options: Mapping[str, str], key: str, default: int, least: int) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        v = int(text.strip())
    except ValueError:
        raise InvalidInputError(f"option {key!r} must be an integer >= {least}, got {text!r}") from None
    if v < least:
        raise InvalidInputError(f"option {key!r} must be an integer >= {least}, got {text!r}")
    return v


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    v = text.strip().lower()
    if v not in ("true", "false"):
        raise InvalidInputError(f"option {key!r} must be true or false, got {text!r}")
    return v == "true"


def settings(options: Mapping[str, str]) -> IcebergSettings:
    """The table's Iceberg settings; InvalidInputError naming the option and its allowed values."""
    storage = options.get(STORAGE, DISABLED).strip().lower()
    if storage in _CATALOG_STORAGES:
        raise InvalidInputError(
            f"option {STORAGE!r} = {storage!r} is not supported: lsmlake's catalog service serves the published "
            f"tables through its own Iceberg REST catalog; use one of {', '.join(_STORAGES)}")
    if storage not in _STORAGES:
        raise InvalidInputError(f"option {STORAGE!r} must be one of {', '.join(_STORAGES)}, got {storage!r}")
    default_location = TABLE_LOCATION if storage in (TABLE_LOCATION, DISABLED) else CATALOG_LOCATION
    location = options.get(STORAGE_LOCATION, default_location).strip().lower()
    if location not in _LOCATIONS:
        raise InvalidInputError(f"option {STORAGE_LOCATION!r} must be one of {', '.join(_LOCATIONS)}, "
                                f"got {location!r}")
    version = options.get(FORMAT_VERSION, "2").strip()
    if version != "2":
        raise InvalidInputError(
            f"option {FORMAT_VERSION!r} must be 2, got {version!r}: deletion vectors are published as Iceberg v2 "
            "position delete files, which pyiceberg and DuckDB read")
    codec_name = options.get(MANIFEST_COMPRESSION, DEFAULT_CODEC).strip().lower()
    if codec_name not in _CODECS:
        raise InvalidInputError(f"option {MANIFEST_COMPRESSION!r} must be one of {', '.join(_CODECS)}, "
                                f"got {codec_name!r}")
    return IcebergSettings(storage, location, _int(options, PREVIOUS_VERSIONS_MAX, 0, 0),
                           _bool(options, DELETE_AFTER_COMMIT, True), _CODECS[codec_name],
                           _int(options, COMPACTION_MAX_FILE_NUM, 50, 2))
