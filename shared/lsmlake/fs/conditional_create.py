"""Conditional create on object stores: write an object only if none exists there, atomically, across processes.

This is what publishing a snapshot needs. `pyarrow.fs` has no such operation, so it is done here with obstore (the
Python binding of Rust's object_store), whose `put(..., mode="create")` is one conditional request on each store:
S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`, Azure Blob `If-None-Match: *`. The same store also serves the
FileIO's whole-object requests, each one request where pyarrow's streams send several: a read is one GET (pyarrow
sends a HEAD first), a write one PUT (pyarrow's output stream is a multipart upload, three requests), an existence
check one HEAD (pyarrow adds a listing when the key is absent, in case it is a directory). pyarrow stays for
listings and ranged reads of large Parquet files.

The store is built from the pyarrow filesystem the warehouse URI opened, so both agree on endpoint, region and
credentials: the options pyarrow parsed from the URI (`s3://KEY:SECRET@bucket/prefix?endpoint_override=...&region=...
&scheme=http`, `gs://bucket/prefix?endpoint_override=...&scheme=http`, `abfs://...`) are taken from the filesystem,
and what pyarrow leaves to its defaults obstore reads from the same environment variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, web identity, instance metadata; GOOGLE_*; AZURE_STORAGE_*).
Paths are pyarrow's, `bucket/key` (`container/key` on Azure); one obstore store is made per bucket.

A store that does not refuse the second create of one name (an S3-compatible server without conditional writes)
would let two committers overwrite each other's snapshots silently; `refuses_second_create` probes for that once
per warehouse and process, and the FileIO turns a failed probe into an error (`lsmlake.fs.file_io`).
"""

from __future__ import annotations

import threading
import urllib.parse
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from lsmlake.errors import StorageError

if TYPE_CHECKING:
    from obstore.store import ObjectStore

#: where the probe writes, below the warehouse root
PROBE_DIR = ".lsmlake"
#: objects up to this size are written with one PUT; larger ones as a multipart upload (S3 takes up to 5 GiB in one
#: PUT, but a part that fails is cheaper to send again than the whole object)
SINGLE_PUT_MAX = 64 * 1024 * 1024

_PROBED: dict[tuple[str, str], bool] = {}  # (store, warehouse root) -> whether a second create was refused
_PROBED_LOCK = threading.Lock()


class ConditionalCreate:
    """Atomic create-if-absent of objects on the S3, GCS or Azure store a pyarrow filesystem talks to."""

    def __init__(self, kind: str, config: dict[str, Any], client_options: dict[str, Any], label: str) -> None:
        self.kind = kind  # "s3", "gcs" or "azure"
        self._config = config
        self._client_options = client_options
        self.label = label  # names the store in messages and keys the probe cache (no secrets in it)
        self._stores: dict[str, ObjectStore] = {}
        self._lock = threading.Lock()

    @staticmethod
    def for_filesystem(fs: pafs.FileSystem, uri: str | None = None) -> ConditionalCreate | None:
        """The conditional create of the store `fs` talks to; None when `fs` is not S3, GCS or Azure.

        `uri`, the warehouse URI `fs` was opened from, is read only for what pyarrow does not expose on the
        filesystem (an Azure SAS, service principal or account key given in the URI).
        """
        if isinstance(fs, pafs.S3FileSystem):
            return _s3(_pyarrow_options(fs))
        if isinstance(fs, pafs.GcsFileSystem):
            return _gcs(_pyarrow_options(fs))
        azure = getattr(pafs, "AzureFileSystem", None)
        if azure is not None and isinstance(fs, azure):
            return _azure(_pyarrow_options(fs), uri)
        return None

    def create(self, path: str, data: bytes) -> bool:
        """Write `data` at `path` (pyarrow's `bucket/key`) only if no object is there; False when one is.

        One conditional PUT. obstore retries a request whose answer was lost, and a retry of a create that had
        succeeded is refused: so a refusal is settled by reading the object back, and our own bytes there are a
        success (the content of a snapshot is unique: it carries a fresh uuid). Raises StorageError naming the
        path on any other failure (then the object may or may not have been written: read it back to know).
        """
        return self.create_tagged(path, data)[0]

    def create_tagged(self, path: str, data: bytes) -> tuple[bool, str | None]:
        """`create`, and the created object's entity tag (None when the store gave none or it was not created)."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        store, key = self._locate(path)
        try:
            result = obstore.put(store, key, data, mode="create", use_multipart=False)
            return True, result.get("e_tag")
        except (AlreadyExistsError, PreconditionError):
            pass
        except Exception as e:  # obstore's errors: network, permission, a store that cannot create conditionally
            raise _error("create", path, self.label, e) from e
        try:
            got = obstore.get(store, key)
            found = bytes(got.bytes())
        except Exception as e:
            raise _error("read back", path, self.label, e) from e
        return (True, got.meta.get("e_tag")) if found == data else (False, None)

    def get_tagged(self, path: str) -> tuple[bytes, str | None]:
        """The whole object at `path` and its entity tag, in one GET; FileNotFoundError when there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            result = obstore.get(store, key)
            return bytes(result.bytes()), result.meta.get("e_tag")
        except (NotFoundError, FileNotFoundError):  # obstore raises either, by version
            raise FileNotFoundError(path) from None
        except Exception as e:
            raise _os_error("read", path, self.label, e) from e

    def tag(self, path: str) -> str | None:
        """The entity tag of the object at `path` (one HEAD); '' when the store gives none, None when no object."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            return str(obstore.head(store, key).get("e_tag") or "")
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as e:
            raise _os_error("inspect", path, self.label, e) from e

    def put(self, path: str, data: bytes) -> None:
        """Write `data` at `path`, replacing any object there: one PUT (a multipart upload past `SINGLE_PUT_MAX`)."""
        import obstore

        store, key = self._locate(path)
        try:
            obstore.put(store, key, data, use_multipart=len(data) > SINGLE_PUT_MAX)
        except Exception as e:
            raise _os_error("write", path, self.label, e) from e

    def get(self, path: str, limit: int | None = None) -> bytes | None:
        """The whole object at `path` in one GET; None when it is larger than `limit` bytes (the answer's length is
        known from its headers, so its body is not read then). FileNotFoundError when there is no object."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            result = obstore.get(store, key)
            if limit is not None and int(result.meta["size"]) > limit:
                return None
            return bytes(result.bytes())
        except (NotFoundError, FileNotFoundError):  # obstore raises either, by version
            raise FileNotFoundError(f"file not found: {path}") from None
        except Exception as e:
            raise _os_error("read", path, self.label, e) from e

    def size(self, path: str) -> int | None:
        """The size of the object at `path` (one HEAD); None when there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            return int(obstore.head(store, key)["size"])
        except (NotFoundError, FileNotFoundError):  # obstore raises either, by version
            return None
        except Exception as e:
            raise _os_error("inspect", path, self.label, e) from e

    def delete(self, path: str) -> None:
        """Delete an object (absent is fine)."""
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._locate(path)
        try:
            obstore.delete(store, key)
        except (NotFoundError, FileNotFoundError):  # obstore raises either, by version
            pass
        except Exception as e:
            raise _error("delete", path, self.label, e) from e

    def refuses_second_create(self, root: str) -> bool:
        """Whether the store refuses to create an object that exists: probed once per (store, `root`) and process.

        Creates `<root>/.lsmlake/conditional-create-probe-<uuid>` twice with different bytes (the second must be
        refused) and deletes it. Raises StorageError when the store cannot be reached or written.
        """
        key = (self.label, root)
        with _PROBED_LOCK:
            known = _PROBED.get(key)
        if known is not None:
            return known
        path = f"{root.rstrip('/')}/{PROBE_DIR}/conditional-create-probe-{uuid.uuid4()}"
        try:
            if not self.create(path, b"first"):
                raise StorageError(f"cannot probe conditional create on {self.label}: {path} existed before the "
                                   "probe created it")
            refused = not self.create(path, b"second")
        finally:
            try:
                self.delete(path)
            except StorageError:
                pass  # a leftover probe object is harmless
        with _PROBED_LOCK:
            _PROBED[key] = refused
        return refused

    def _locate(self, path: str) -> tuple[ObjectStore, str]:
        bucket, _, key = path.lstrip("/").partition("/")
        if not bucket or not key:
            raise StorageError(f"cannot create {path!r} on {self.label}: not a bucket/key path")
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._open(bucket)
        return store, key

    def _open(self, bucket: str) -> ObjectStore:
        from obstore.store import AzureStore, GCSStore, S3Store

        try:
            if self.kind == "s3":
                return S3Store(bucket, config=self._config, client_options=self._client_options)  # type: ignore[arg-type]
            if self.kind == "gcs":
                return GCSStore(bucket, config=self._config, client_options=self._client_options)  # type: ignore[arg-type]
            return AzureStore(bucket, config=self._config, client_options=self._client_options)  # type: ignore[arg-type]
        except Exception as e:  # a bad configuration value, missing credentials
            raise StorageError(f"cannot open {self.kind} bucket {bucket!r} on {self.label} for conditional "
                               f"creates: {e}") from e


def _pyarrow_options(fs: pafs.FileSystem) -> dict[str, Any]:
    """The options a pyarrow cloud filesystem was made with (what its pickling carries)."""
    options: dict[str, Any] = fs.__reduce__()[1][0]
    return options


def _endpoint(endpoint: str, scheme: str | None) -> str:
    """A full URL from pyarrow's endpoint override (which may or may not carry a scheme) and its scheme option."""
    return endpoint if "://" in endpoint else f"{scheme or 'https'}://{endpoint}"


def _http(url: str) -> dict[str, Any]:
    return {"allow_http": True} if url.startswith("http://") else {}


def _s3(o: dict[str, Any]) -> ConditionalCreate:
    config: dict[str, Any] = {}
    if o.get("access_key"):
        config["access_key_id"] = o["access_key"]
        config["secret_access_key"] = o.get("secret_key") or ""
        if o.get("session_token"):
            config["session_token"] = o["session_token"]
    if o.get("anonymous"):
        config["skip_signature"] = True
    if o.get("region"):
        config["region"] = o["region"]
    client: dict[str, Any] = {}
    label = f"s3 ({o.get('region') or 'default region'})"
    if o.get("endpoint_override"):
        config["endpoint"] = _endpoint(o["endpoint_override"], o.get("scheme"))
        client = _http(config["endpoint"])
        label = f"s3 at {config['endpoint']}"
    return ConditionalCreate("s3", config, client, label)


def _gcs(o: dict[str, Any]) -> ConditionalCreate:
    config: dict[str, Any] = {}
    if o.get("anonymous"):
        config["skip_signature"] = True
    if o.get("access_token"):
        config["bearer_token"] = o["access_token"]
    client: dict[str, Any] = {}
    label = "gcs"
    if o.get("endpoint_override"):
        config["base_url"] = _endpoint(o["endpoint_override"], o.get("scheme"))
        client = _http(config["base_url"])
        label = f"gcs at {config['base_url']}"
    return ConditionalCreate("gcs", config, client, label)


def _azure(o: dict[str, Any], uri: str | None) -> ConditionalCreate:
    account = o.get("account_name") or ""
    config: dict[str, Any] = {}
    if account:
        config["account_name"] = account
    if o.get("account_key"):
        config["account_key"] = o["account_key"]
    if uri:
        # what pyarrow does not expose on the filesystem is read from the URI: a service principal, a SAS, and an
        # account key as the URI's password (which pyarrow 19 itself ignores: it signs with Azure's default
        # credential then)
        parts = urllib.parse.urlsplit(uri)
        if parts.password:
            config["account_key"] = urllib.parse.unquote(parts.password)
        query = dict(urllib.parse.parse_qsl(parts.query))
        for ours, theirs in (("tenant_id", "tenant_id"), ("client_id", "client_id"),
                             ("client_secret", "client_secret")):
            if query.get(theirs):
                config[ours] = query[theirs]
        sas = _sas(parts.query)
        if sas:
            config["sas_key"] = sas
    authority = o.get("blob_storage_authority") or ".blob.core.windows.net"
    scheme = o.get("blob_storage_scheme") or "https"
    if authority.startswith("."):  # the account is a subdomain of the service (Azure itself)
        endpoint = f"{scheme}://{account}{authority}"
        if authority != ".blob.core.windows.net" or scheme != "https":
            config["endpoint"] = endpoint
    else:  # an emulator or proxy: the account is the first path element (as pyarrow addresses it)
        endpoint = config["endpoint"] = f"{scheme}://{authority}/{account}"
    return ConditionalCreate("azure", config, _http(endpoint), f"azure at {endpoint}")


#: the query parameters of a SAS token: any of them in an `abfs://` URI makes pyarrow sign with the query as a SAS
_SAS_PARAMETERS = frozenset({
    "sv", "ss", "sr", "st", "se", "sp", "si", "sip", "spr", "skoid", "sktid", "srt", "skt", "ske", "skv", "sks",
    "saoid", "suoid", "scid", "sdd", "ses", "sig", "rscc", "rscd", "rsce", "rscl", "rsct",
})


def _sas(query: str) -> str:
    """The SAS token in a URI query (its parameters as they are written, percent-encoded), or ''."""
    items = [item for item in query.split("&") if item.partition("=")[0] in _SAS_PARAMETERS]
    return "&".join(items)


def _os_error(action: str, path: str, label: str, cause: Exception) -> OSError:
    """An OSError for the FileIO's plain reads and writes, which turn OSErrors into StorageErrors naming the file."""
    return OSError(f"cannot {action} {path} on {label}: {type(cause).__name__}: {cause}")


def _error(action: str, path: str, label: str, cause: Exception) -> StorageError:
    return StorageError(f"cannot {action} {path} on {label}: {type(cause).__name__}: {cause}")
