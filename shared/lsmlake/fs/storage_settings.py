"""How lsmlake reaches object storage: one set of S3 settings, read from one place per process, carried everywhere.

Settings come, each overriding the one before, from:
1. the standard AWS environment: `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, `AWS_REGION` / `AWS_DEFAULT_REGION`,
   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and `LSMLAKE_S3_PATH_STYLE` (true/false);
2. options, under Paimon's keys (`s3.endpoint`, `s3.region`, `s3.access-key`, `s3.secret-key`,
   `s3.session-token` / `s3.session.token`, `s3.path.style.access`) or pypaimon's (`fs.s3.endpoint`, `fs.s3.region`,
   `fs.s3.accessKeyId`, `fs.s3.accessKeySecret`, `fs.s3.securityToken`, `fs.s3.path-style-access`): the `Client`'s
   and the Spark data source's `storage` options, the catalog's REST config;
3. the warehouse URI itself, as pyarrow writes it: `s3://KEY:SECRET@bucket/prefix?endpoint_override=HOST:PORT&
   region=R&scheme=http`.

Without credentials anywhere, pyarrow and obstore both use the AWS default chain (config files, web identity,
instance metadata): that is the credentials provider for deployments that should hold no key.

A location lsmlake reports (`s3://bucket/prefix/db.db/t`) never carries credentials; whoever opens it brings its
settings from its own environment or options. `env()` and `paimon_options()` are how lsmlake hands them on: to Spark
executors and child processes, and to engines through the REST catalog.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from lsmlake.errors import InvalidInputError

#: option keys, per field: Paimon's first (what Java engines and the docs use), then pypaimon's
_OPTION_KEYS: dict[str, tuple[str, ...]] = {
    "endpoint": ("s3.endpoint", "fs.s3.endpoint"),
    # Paimon's Java file IO hands `s3.X` to Hadoop S3A as `fs.s3a.X`, and S3A reads the region at
    # `fs.s3a.endpoint.region`; pypaimon and paimon-rust read `s3.region`
    "region": ("s3.region", "fs.s3.region", "s3.endpoint.region"),
    "access_key_id": ("s3.access-key", "fs.s3.accessKeyId"),
    "secret_access_key": ("s3.secret-key", "fs.s3.accessKeySecret"),
    "session_token": ("s3.session-token", "fs.s3.securityToken", "s3.session.token"),  # the last: paimon-rust's
    "path_style": ("s3.path.style.access", "fs.s3.path-style-access"),
}

ENV_PATH_STYLE = "LSMLAKE_S3_PATH_STYLE"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


@dataclass(frozen=True)
class StorageSettings:
    """S3 settings; a field left None is not set here (a later source, or the AWS default chain, decides).

    `endpoint` is a URL (`http://127.0.0.1:9000`, `https://s3.eu-west-1.amazonaws.com`); `path_style` None means
    path style with a custom endpoint and virtual-host style on AWS itself (pyarrow's and obstore's default).
    """

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    path_style: bool | None = None

    # -- sources -------------------------------------------------------------------------------

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> StorageSettings:
        env = os.environ if environ is None else environ
        return StorageSettings(
            endpoint=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            path_style=_flag(env.get(ENV_PATH_STYLE), ENV_PATH_STYLE),
        )

    @staticmethod
    def from_options(options: Mapping[str, str]) -> StorageSettings:
        """Settings from options under Paimon's or pypaimon's keys; other keys are ignored."""
        values: dict[str, Any] = {}
        for name, keys in _OPTION_KEYS.items():
            for key in keys:
                value = options.get(key)
                if value not in (None, ""):
                    values[name] = _flag(str(value), key) if name == "path_style" else str(value)
                    break
        return StorageSettings(**values)

    @staticmethod
    def from_uri(uri: str) -> StorageSettings:
        """What an `s3://` URI says in pyarrow's form: credentials as user info, endpoint and region in its query."""
        parts = urllib.parse.urlsplit(uri)
        query = dict(urllib.parse.parse_qsl(parts.query))
        endpoint = query.get("endpoint_override") or None
        if endpoint is not None and "://" not in endpoint:
            endpoint = f"{query.get('scheme') or 'https'}://{endpoint}"
        style = query.get("force_virtual_addressing")
        return StorageSettings(
            endpoint=endpoint,
            region=query.get("region") or None,
            access_key_id=urllib.parse.unquote(parts.username) if parts.username else None,
            secret_access_key=urllib.parse.unquote(parts.password) if parts.password else None,
            session_token=query.get("session_token") or None,
            path_style=None if style is None else not _flag(style, "force_virtual_addressing"),
        )

    @staticmethod
    def resolve(uri: str | None = None, options: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> StorageSettings:
        """The environment, overridden by `options`, overridden by what `uri` says itself."""
        settings = StorageSettings.from_env(environ)
        if options:
            settings = settings.overlay(StorageSettings.from_options(options))
        if uri:
            settings = settings.overlay(StorageSettings.from_uri(uri))
        return settings

    def overlay(self, other: StorageSettings) -> StorageSettings:
        """These settings with every field `other` sets replaced by `other`'s.

        The credentials are one unit: when `other` names an access key, its secret and session token come from
        `other` too (None where it has none), since a key of one source with the token of another is refused by
        the store (a static key pair given as options beside the environment's SSO session, say).
        """
        values = {f.name: getattr(other, f.name) for f in fields(other) if getattr(other, f.name) is not None}
        if other.access_key_id is not None:
            values.update(secret_access_key=other.secret_access_key, session_token=other.session_token)
        return replace(self, **values)

    # -- uses ----------------------------------------------------------------------------------

    def filesystem_options(self) -> dict[str, Any]:
        """Keyword arguments of `pyarrow.fs.S3FileSystem` for these settings."""
        o: dict[str, Any] = {}
        if self.access_key_id:
            o["access_key"] = self.access_key_id
            o["secret_key"] = self.secret_access_key or ""
            if self.session_token:
                o["session_token"] = self.session_token
        if self.region:
            o["region"] = self.region
        if self.endpoint:
            parts = urllib.parse.urlsplit(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
            o["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
            o["scheme"] = parts.scheme
        if self.path_style is not None:
            o["force_virtual_addressing"] = not self.path_style
        return o

    def env(self) -> dict[str, str]:
        """The environment variables that give a process (a Spark executor, a service) these settings."""
        # the S3-only endpoint variable: the general AWS_ENDPOINT_URL would also send STS calls (web identity,
        # assumed roles) to the S3 endpoint
        out = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
               "AWS_ACCESS_KEY_ID": self.access_key_id, "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
               "AWS_SESSION_TOKEN": self.session_token,
               ENV_PATH_STYLE: None if self.path_style is None else str(self.path_style).lower()}
        return {k: v for k, v in out.items() if v}

    def paimon_options(self) -> dict[str, str]:
        """These settings under Paimon's keys and pypaimon's, for an engine that reads the table's files."""
        out: dict[str, str] = {}
        for name, keys in _OPTION_KEYS.items():
            value = getattr(self, name)
            if value is None:
                continue
            text = str(value).lower() if isinstance(value, bool) else str(value)
            for key in keys:
                out[key] = text
        if self.endpoint is not None and "path_style" not in {n for n, _ in self._set()}:
            for key in _OPTION_KEYS["path_style"]:  # a custom endpoint is addressed by path unless told otherwise
                out[key] = "true"
        return out

    def has_credentials(self) -> bool:
        return bool(self.access_key_id)

    def redacted(self) -> str:
        """For messages and logs: every field set, secrets shown as `***`."""
        shown = [f"{n}={'***' if n in ('secret_access_key', 'session_token') else v}" for n, v in self._set()]
        return "StorageSettings(" + ", ".join(shown) + ")"

    __repr__ = redacted  # no secret in a traceback or a log line

    def _set(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]


def _flag(text: str | None, what: str) -> bool | None:
    if text is None or text == "":
        return None
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise InvalidInputError(f"{what} = {text!r}: use true or false")


def join_uri(base: str, *parts: str) -> str:
    """`base` (a path or a URI, with or without a query string) with `parts` appended to its path.

    `s3://b/wh?endpoint_override=h:9000` and `db.db`, `t` give `s3://b/wh/db.db/t?endpoint_override=h:9000`.
    """
    if "://" not in base:
        return "/".join([base.rstrip("/"), *parts])
    split = urllib.parse.urlsplit(base)
    path = "/".join([split.path.rstrip("/"), *parts])
    return urllib.parse.urlunsplit((split.scheme, split.netloc, path, split.query, split.fragment))


def location_uri(scheme: str, path: str) -> str:
    """The URI other engines open for a path of a store (`bucket/key`); a local path as it is."""
    return path if scheme in ("", "file") else f"{scheme}://{path.lstrip('/')}"
