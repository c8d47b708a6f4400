"""Storage faults on demand: a FileIO that fails writes like a full disk and adds latency like slow storage.

The FileIOs a process makes become faulty once the injector is installed as the process's FileIO wrapper
(`lsmlake.fs.set_file_io_wrapper`): in the test process with `installed(spec)`, in a service process by
starting it through `tests.support.faulty_service`. A spec is given as text, or as `@<file>`: a control file
holding the spec, re-read whenever it changes (so a test can fill the "disk" of running services and free it
again; an absent or empty control file means no faults).

A spec is comma-separated `key=value` items:

* `enospc-after-bytes=N`: writes succeed until N bytes were written in total since the spec took effect;
  the write that crosses the budget writes the part that fits (a torn file, as a real disk leaves) and
  fails, and every later write fails (`0`: the disk is full now);
* `fail-write=N`, `fail-rename=N`, `fail-op=N`: the Nth file write, the Nth rename or hard link, the Nth
  of either (counted from 1 since the spec took effect) fails, once;
* `errno=ENOSPC` (default), `EDQUOT`, `EIO`: the error the failures raise;
* `latency-ms=N`: every write, rename and link takes N ms longer; `read-latency-ms=N`: every read too;
* `only=TEXT`: count and fail only operations on paths containing TEXT (`only=/manifest/`: the data files
  are written, the commit's metadata is not).

Deletes never fail (freeing space must work on a full disk) and directory creation is not counted, so
the sequence of counted operations of one commit is deterministic and a test can fail each in turn.
`injector_for(spec).ops` records the (kind, path, bytes) of every counted operation since the spec took effect.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lsmlake.errors import InvalidInputError
from lsmlake.fs import set_file_io_wrapper
from lsmlake.fs.conditional_create import ConditionalCreate
from lsmlake.fs.file_io import FileIO

WRITE = "write"
RENAME = "rename"
_ERRNOS = {"ENOSPC": errno.ENOSPC, "EDQUOT": errno.EDQUOT, "EIO": errno.EIO}
_KEYS = ("enospc-after-bytes", "fail-write", "fail-rename", "fail-op", "errno", "latency-ms", "read-latency-ms",
         "only")
_MAX_OPS_RECORDED = 100_000  # the op log of a long run stays bounded


@dataclass(frozen=True)
class FaultSpec:
    """What to fail and how slow to be; see the module docstring for the spec syntax."""

    enospc_after_bytes: int | None = None
    fail_write: int | None = None
    fail_rename: int | None = None
    fail_op: int | None = None
    errno: int = errno.ENOSPC
    latency_s: float = 0.0
    read_latency_s: float = 0.0
    only: str | None = None

    @staticmethod
    def parse(text: str) -> FaultSpec:
        """A spec from `key=value,...`; InvalidInputError naming an unknown key or a bad value."""
        kwargs: dict[str, object] = {}
        for item in (i.strip() for i in text.split(",")):
            if not item or item in ("on", "off"):
                continue
            key, sep, value = item.partition("=")
            if key not in _KEYS:
                raise InvalidInputError(f"fault spec: unknown key {key!r} in {text!r}; known: {', '.join(_KEYS)}")
            try:
                if key == "only":
                    kwargs["only"] = value
                elif key == "errno":
                    kwargs["errno"] = _ERRNOS[value.upper()]
                elif key in ("latency-ms", "read-latency-ms"):
                    kwargs[key.replace("-ms", "_s").replace("-", "_")] = float(value) / 1000
                else:
                    n = int(value)
                    if n < 0:
                        raise ValueError(value)
                    kwargs[key.replace("-", "_")] = n
            except (ValueError, KeyError):
                raise InvalidInputError(f"fault spec: bad value {value!r} for {key!r} in {text!r}") from None
            if not sep:
                raise InvalidInputError(f"fault spec: {item!r} needs a value (key=value)")
        return FaultSpec(**kwargs)  # type: ignore[arg-type]


class FaultInjector:
    """The fault state of one process: the spec in force and what was written since it took effect."""

    def __init__(self, spec: str) -> None:
        self._lock = threading.Lock()
        self._control = spec[1:] if spec.startswith("@") else None
        self._control_stamp: tuple[int, int] | None = None
        self.spec = FaultSpec() if self._control else FaultSpec.parse(spec)
        self._reset()

    def _reset(self) -> None:
        self.bytes_written = 0
        self.writes = 0
        self.renames = 0
        self.failures = 0
        self.ops: list[tuple[str, str, int]] = []

    def arm(self, spec: FaultSpec | str) -> None:
        """Put a spec in force and restart the counters (in-process tests; services use a control file)."""
        with self._lock:
            self.spec = FaultSpec.parse(spec) if isinstance(spec, str) else spec
            self._reset()

    def _refresh(self) -> None:
        if self._control is None:
            return
        try:
            st = os.stat(self._control)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._control_stamp:
            return
        text = ""
        if stamp is not None:
            with open(self._control) as f:
                text = f.read().strip()
        self._control_stamp = stamp
        self.spec = FaultSpec.parse(text)
        self._reset()

    def _fail(self, path: str) -> OSError:
        self.failures += 1
        code = self.spec.errno
        return OSError(code, f"{os.strerror(code)} (injected by tests.support.fault_fs)", path)

    def before_write(self, path: str, size: int) -> int:
        """Account a write of `size` bytes; how many bytes to write before failing (`size`: no failure).

        Raises the injected error when the write must fail before writing anything.
        """
        with self._lock:
            self._refresh()
            spec = self.spec
            if spec.only is not None and spec.only not in path:
                return size
            self.writes += 1
            self._record(WRITE, path, size)
            if spec.fail_write == self.writes or spec.fail_op == self.writes + self.renames:
                raise self._fail(path)
            if spec.enospc_after_bytes is None:
                self.bytes_written += size
                return size
            room = max(0, spec.enospc_after_bytes - self.bytes_written)
            self.bytes_written += min(room, size)
            if room == 0 and size > 0:
                raise self._fail(path)
            return min(room, size)

    def before_rename(self, path: str) -> None:
        with self._lock:
            self._refresh()
            spec = self.spec
            if spec.only is not None and spec.only not in path:
                return
            self.renames += 1
            self._record(RENAME, path, 0)
            if spec.fail_rename == self.renames or spec.fail_op == self.writes + self.renames:
                raise self._fail(path)
            if spec.enospc_after_bytes is not None and self.bytes_written >= spec.enospc_after_bytes:
                raise self._fail(path)  # a full disk has no room for a new directory entry either

    def _record(self, kind: str, path: str, size: int) -> None:
        if len(self.ops) < _MAX_OPS_RECORDED:
            self.ops.append((kind, path, size))

    def write_latency(self) -> float:
        return self.spec.latency_s

    def read_latency(self) -> float:
        return self.spec.read_latency_s


_INJECTORS: dict[str, FaultInjector] = {}
_INJECTORS_LOCK = threading.Lock()


def injector_for(spec: str) -> FaultInjector:
    """The process's injector for a spec (one per spec: every FileIO shares its counters)."""
    with _INJECTORS_LOCK:
        inj = _INJECTORS.get(spec)
        if inj is None:
            inj = _INJECTORS[spec] = FaultInjector(spec)
        return inj


class FaultyFileIO(FileIO):
    """A FileIO whose writes, renames, links and conditional creates go through a FaultInjector (partial writes
    included; a conditional create is all or nothing, as on the store)."""

    def __init__(self, fs: pafs.FileSystem, local: bool, injector: FaultInjector, *,
                 conditional: ConditionalCreate | None = None, root: str = "",
                 publications_serialized: bool = False, scheme: str = "") -> None:
        super().__init__(fs, local, conditional=conditional, root=root,
                         publications_serialized=publications_serialized, scheme=scheme)
        self.injector = injector

    @staticmethod
    def wrapping(io: FileIO, injector: FaultInjector) -> FaultyFileIO:
        """A faulty FileIO on the storage of `io`, made as `io` was."""
        return FaultyFileIO(io.fs, io.local, injector, conditional=io.conditional, root=io.root,
                            publications_serialized=io.publications_serialized, scheme=io.scheme)

    def _write_file(self, path: str, data: bytes) -> None:
        _sleep(self.injector.write_latency())
        n = self.injector.before_write(path, len(data))
        if n < len(data):
            super()._write_file(path, data[:n])  # what fitted stays behind, as on a real full disk
            raise self.injector._fail(path)
        super()._write_file(path, data)

    def _create(self, path: str, data: bytes) -> bool:
        _sleep(self.injector.write_latency())
        if self.injector.before_write(path, len(data)) < len(data):
            raise self.injector._fail(path)
        return super()._create(path, data)

    def _rename(self, src: str, dst: str) -> None:
        _sleep(self.injector.write_latency())
        self.injector.before_rename(dst)
        super()._rename(src, dst)

    def _link(self, src: str, dst: str) -> None:
        _sleep(self.injector.write_latency())
        self.injector.before_rename(dst)
        super()._link(src, dst)

    def read_bytes(self, path: str) -> bytes:
        _sleep(self.injector.read_latency())
        return super().read_bytes(path)

    def open_input(self, path: str) -> pa.NativeFile:
        _sleep(self.injector.read_latency())
        return super().open_input(path)


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


@contextmanager
def installed(spec: str) -> Iterator[FaultInjector]:
    """Every FileIO the process makes meanwhile injects the faults of `spec` (`injector_for`); yields the injector."""
    injector = injector_for(spec)
    previous = set_file_io_wrapper(lambda io: FaultyFileIO.wrapping(io, injector))
    try:
        yield injector
    finally:
        set_file_io_wrapper(previous)
