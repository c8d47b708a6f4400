"""Storage credentials the catalog hands to Paimon engines, and who may have them.

Paimon's REST catalog gives an engine the settings it opens a table's files with in two places: the config
endpoint's `defaults` (merged under the engine's own options) and a table's data token (`GET .../token`: a map of
file-IO options and `expiresAtMillis`), which an engine asks for when its options, defaults included, say
`data-token.enabled`. lsmlake uses the token, because it is asked per table and so can be refused per table; the
config defaults only switch it on. The token's options are the catalog's own S3 settings for the warehouse under
the keys every engine reads (`StorageSettings.paimon_options`, plus Paimon Java's and paimon-rust's
`s3.session.token`).

The config defaults switch tokens on only for a caller that can get one (`open`, or a principal with a grant), so
an engine of a principal without a grant that brings its own storage settings never asks and keeps working.

Modes (`catalog-svc --data-tokens`):
- `off`: no token; the token endpoint answers 501 and engines bring their own storage settings;
- `granted` (the default): a caller authenticated by the token file with a grant for the table
  (`--data-token-grants`) gets the token; without a token file nobody does;
- `open`: every caller allowed to read the table gets it, also when the catalog checks no tokens (one machine).

The static source answers the catalog's settings with an expiry `lifetime_s` ahead. Those keys do not really
expire: a deployment that must scope credentials to a table and a time gives the vendor a source that asks an STS
for them (docs/security.md).
"""

from __future__ import annotations

import enum
import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol

from lsmlake.auth.tokens import Principal
from lsmlake.errors import InvalidInputError, PermissionDeniedError, UnsupportedOperationError
from lsmlake.fs.storage_settings import StorageSettings

#: the option that makes Paimon engines ask for a table's data token
DATA_TOKEN_ENABLED = "data-token.enabled"
#: Paimon Java's and paimon-rust's key of an S3 session token (pypaimon reads `s3.session-token` too)
SESSION_TOKEN_KEYS = ("s3.session.token",)
#: Paimon's clients take a token with less than an hour left for expired and ask again before each use
CLIENT_REFRESH_MARGIN_S = 3_600
MIN_LIFETIME_S = CLIENT_REFRESH_MARGIN_S + 300
DEFAULT_LIFETIME_S = 3 * 3_600
#: a static key pair is re-announced at least weekly; beyond that an expiry says nothing useful, and a far one
#: overflows the milliseconds Paimon Java reads as a long
MAX_LIFETIME_S = 7 * 24 * 3_600
MAX_GRANTS = 10_000
MAX_PATTERN_CHARS = 512
_RECHECK_S = 1.0  # how often the grants file's stamp is looked at
_OBJECT_STORES = ("s3", "s3a")

_log = logging.getLogger(__name__)


class DataTokenMode(enum.Enum):
    OFF = "off"
    GRANTED = "granted"
    OPEN = "open"

    @staticmethod
    def parse(text: str) -> DataTokenMode:
        try:
            return DataTokenMode(text.strip().lower())
        except ValueError:
            raise InvalidInputError(f"data token mode {text!r} is not one of "
                                    f"{', '.join(m.value for m in DataTokenMode)}") from None


@dataclass(frozen=True)
class DataToken:
    """What the token endpoint answers: file-IO options and when they stop being valid (ms since the epoch)."""

    options: dict[str, str] = field(repr=False)  # they hold the secret key: never in a log line or traceback
    expires_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"token": dict(self.options), "expiresAtMillis": self.expires_at_ms}


class CredentialSource(Protocol):
    """Where a table's credentials come from: the settings to hand out for it and their expiry (ms)."""

    def credentials(self, table_id: str, location: str) -> tuple[StorageSettings, int]: ...


@dataclass(frozen=True)
class StaticCredentials:
    """The catalog's own settings for every table, stamped to expire `lifetime_s` from the request."""

    settings: StorageSettings
    lifetime_s: float = DEFAULT_LIFETIME_S
    clock: Any = field(default=time.time, compare=False)

    def credentials(self, table_id: str, location: str) -> tuple[StorageSettings, int]:
        return self.settings, int((self.clock() + self.lifetime_s) * 1000)


def check_lifetime(seconds: float) -> float:
    if not seconds >= MIN_LIFETIME_S:  # also refuses nan
        raise InvalidInputError(f"data token lifetime {seconds} s is too short: Paimon's clients ask again for a "
                                f"token with less than {CLIENT_REFRESH_MARGIN_S} s left, so give at least "
                                f"{MIN_LIFETIME_S} s")
    if not math.isfinite(seconds) or seconds > MAX_LIFETIME_S:
        raise InvalidInputError(f"data token lifetime {seconds} s is too long: at most {MAX_LIFETIME_S} s (7 days)")
    return seconds


@dataclass(frozen=True)
class Grants:
    """Which principals may have which tables' data tokens: `db.table` patterns (`*`, `?`, `[...]`) per principal."""

    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, principal: str, table_id: str) -> bool:
        return any(fnmatchcase(table_id, p) for p in self.patterns.get(principal, ()))

    @staticmethod
    def parse(text: str, source: str = "data token grants") -> Grants:
        """`{"grants": [{"principal": "etl", "tables": ["sales.*", "ref.rates"]}, ...]}`; InvalidInputError naming
        the entry and field."""
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise InvalidInputError(f"{source}: not JSON: {e}") from None
        if not isinstance(doc, dict) or set(doc) != {"grants"} or not isinstance(doc["grants"], list):
            raise InvalidInputError(f'{source}: expected an object {{"grants": [...]}}')
        if len(doc["grants"]) > MAX_GRANTS:
            raise InvalidInputError(f"{source}: {len(doc['grants'])} grants; at most {MAX_GRANTS}")
        out: dict[str, tuple[str, ...]] = {}
        for i, entry in enumerate(doc["grants"]):
            where = f"{source}: grants[{i}]"
            if not isinstance(entry, dict) or set(entry) != {"principal", "tables"}:
                raise InvalidInputError(f"{where}: expected an object with exactly 'principal' and 'tables'")
            name, tables = entry["principal"], entry["tables"]
            if not isinstance(name, str) or not name.strip():
                raise InvalidInputError(f"{where}: 'principal' must be a non-empty string")
            if (not isinstance(tables, list) or not tables
                    or not all(isinstance(t, str) and 0 < len(t) <= MAX_PATTERN_CHARS for t in tables)):
                raise InvalidInputError(f"{where}: 'tables' must be a non-empty list of `db.table` patterns of 1 to "
                                        f"{MAX_PATTERN_CHARS} characters")
            bad = [t for t in tables if "." not in t]
            if bad:
                raise InvalidInputError(f"{where}: table pattern {bad[0]!r} names no database: write `db.table`, "
                                        "`db.*` or `*.*`")
            out[name] = out.get(name, ()) + tuple(tables)
        return Grants(out)

    def current(self) -> Grants:
        """These grants (a `GrantsFile` answers its file's latest)."""
        return self

    @staticmethod
    def load(path: str) -> Grants:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InvalidInputError(f"cannot read the data token grants {path}: {e.strerror or e}") from None
        return Grants.parse(text, path)


class GrantsFile:
    """The grants of a file that may change while the catalog runs, read again when it does (its stamp is looked at
    at most once a second), so a grant is added or taken away without a restart. A changed file that does not parse
    (or cannot be read) is refused with an error in the log and the previous grants stay in force, since a file
    half written or emptied by mistake is no revocation; a file that is gone means no grants (a warning in the log),
    so deleting it revokes every grant."""

    def __init__(self, path: str, clock: Any = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp = self._read_stamp()
        self._grants = Grants.load(path)  # a file that cannot be used stops the start
        self._checked = clock()

    def _read_stamp(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError:
            return (-1,)  # there but not readable: a change that does not parse, and seen again once it is fixed
        # the inode and ctime too: a file replaced by one of the same size with its mtime carried over (cp -p,
        # rsync, a coarse clock) has the old (mtime, size)
        return st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns

    def current(self) -> Grants:
        now = self._clock()
        with self._lock:
            if now - self._checked >= _RECHECK_S:
                self._checked = now
                stamp = self._read_stamp()
                if stamp != self._stamp:
                    self._stamp = stamp
                    if stamp is None:
                        self._grants = Grants()
                        _log.warning("the data token grants file %s is gone: no principal has a grant until it is "
                                     "back", self.path)
                        return self._grants
                    try:
                        self._grants = Grants.load(self.path)
                        _log.info("reloaded the data token grants of %d principal(s) from %s",
                                  len(self._grants.patterns), self.path)
                    except InvalidInputError as e:
                        _log.error("data token grants not reloaded, the previous ones stay in force: %s", e)
            return self._grants


class DataTokenVendor:
    """Decides, per call, whether a caller gets a table's data token, and makes it.

    `checks_tokens`: the catalog authenticates callers (a token file); without it no caller has a name, so the
    `granted` mode vends nothing. `scheme`: the warehouse's ("s3", or "" on a local disk); tokens of a local
    warehouse are empty, since an engine opens those files as they are.
    """

    def __init__(self, mode: DataTokenMode, source: CredentialSource, scheme: str, checks_tokens: bool,
                 grants: Grants | GrantsFile | None = None) -> None:
        self.mode = mode
        self.source = source
        self.scheme = scheme
        self.checks_tokens = checks_tokens
        self.grants = grants or Grants()

    @staticmethod
    def for_warehouse(warehouse: str, mode: DataTokenMode, checks_tokens: bool,
                      grants: Grants | GrantsFile | None = None,
                      lifetime_s: float = DEFAULT_LIFETIME_S,
                      environ: Mapping[str, str] | None = None) -> DataTokenVendor:
        """The vendor of the catalog's own settings for `warehouse` (its environment < the URI's parameters)."""
        scheme = warehouse.split("://", 1)[0].lower() if "://" in warehouse else ""
        settings = StorageSettings.resolve(warehouse, environ=environ) if scheme in _OBJECT_STORES else \
            StorageSettings()
        return DataTokenVendor(mode, StaticCredentials(settings, check_lifetime(lifetime_s)), scheme, checks_tokens,
                               grants)

    @property
    def object_store(self) -> bool:
        return self.scheme in _OBJECT_STORES

    @property
    def vends(self) -> bool:
        """Whether any caller can get a token with something in it (then engines are told to ask)."""
        if self.mode is DataTokenMode.OFF or not self.object_store:
            return False
        # with no grant at all, engines that bring their own settings keep working without being told to ask
        return self.mode is DataTokenMode.OPEN or self.checks_tokens and bool(self.grants.current().patterns)

    def config_defaults(self, principal: Principal | None) -> dict[str, str]:
        """The config endpoint's defaults for `principal` (None: the catalog checks no tokens): `data-token.enabled`
        when it can get a token, in `open` mode or with a grant on some table. A principal without a grant is
        not told to ask, so its engines keep using storage settings of their own instead of failing on a refusal.
        (An engine's own option still wins.)"""
        if not self.vends:
            return {}
        if self.mode is DataTokenMode.GRANTED and (
                principal is None or not self.grants.current().patterns.get(principal.name)):
            return {}
        return {DATA_TOKEN_ENABLED: "true"}

    def token(self, table_id: str, location: str, principal: Principal | None) -> DataToken:
        """The data token of a table for `principal` (None: the catalog checks no tokens).

        UnsupportedOperationError when tokens are off; PermissionDeniedError when this caller may not have it."""
        if self.mode is DataTokenMode.OFF:
            raise UnsupportedOperationError("this catalog hands out no storage credentials (--data-tokens off): "
                                            "leave data-token.enabled off and give the engine its own storage "
                                            "settings")
        if self.mode is DataTokenMode.GRANTED:
            if principal is None:
                raise PermissionDeniedError("this catalog checks no tokens, so it hands storage credentials to "
                                            "nobody (--data-tokens granted); give it a token file and grants, or "
                                            "use --data-tokens open on a machine nobody else reaches")
            if not self.grants.current().allows(principal.name, table_id):
                raise PermissionDeniedError(f"{principal.name} has no data token grant on table {table_id}: add it "
                                            "to the catalog's --data-token-grants file")
        settings, expires_at_ms = self.source.credentials(table_id, location)
        if not self.object_store:
            return DataToken({}, expires_at_ms)
        # an audit line per token handed out (engines ask about once an hour per table): who, which table, until
        # when; never the options
        _log.info("data token of %s for %s, valid until %d ms", table_id,
                  principal.name if principal is not None else "a caller without a token", expires_at_ms)
        return DataToken(token_options(settings), expires_at_ms)


def token_options(settings: StorageSettings) -> dict[str, str]:
    """`settings` under the keys pypaimon, paimon-rust and Paimon Java read."""
    out = settings.paimon_options()
    if settings.session_token:
        for key in SESSION_TOKEN_KEYS:
            out[key] = settings.session_token
    return out
