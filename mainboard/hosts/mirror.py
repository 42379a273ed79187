"""A mirror of the workspace under each host's root, sending only what changed since the last sync.

Per host, ``.mainboard/mirror/<host>.json`` records every mirrored path's size, mtime,
mode and sha256 as the host last confirmed it. A sync compares the workspace against
it (size+mtime first; content hashed only when those moved), removes on the host what
disappeared here, and ships the rest as ONE compressed tar stream. The manifest is
rewritten only after the host unpacked that stream, so a failed sync resends next time.
Files the host produced itself are never touched: only paths this mirror sent are deleted.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from mainboard.bridges.transport import LocalTransport, Transport
from mainboard.config import Config, ProviderHost
from mainboard.errors import CommandFailed, MirrorError, UserError
from mainboard.hosts.access import Host, Hosts
from mainboard.hosts.archive import (
    Codec,
    Packed,
    delete_commands,
    file_digest,
    local_zstd,
    probe_codec,
    send_archive,
    write_archive,
)
from mainboard.hosts.gitignore import Selection
from mainboard.locks import flocked
from mainboard.statedir import manifest_path

INLINE_LIMIT = 16 * 1024 * 1024  # larger archives are uploaded (SFTP on ssh) instead of piped


class Entry(BaseModel):
    """One mirrored path as the host last confirmed it."""

    size: int
    mtime_ns: int
    mode: int
    sha256: str


class Manifest(BaseModel):
    """What one host's mirror holds, and when and how it was last synced."""

    version: Literal[1] = 1
    host: str
    root: str
    codec: Codec | None = None
    synced_at: datetime | None = None
    files: dict[str, Entry] = {}


@dataclass(frozen=True)
class Changes:
    """The workspace against a manifest: ``current`` maps every carried path to its known
    entry, or None when it must ship."""

    current: dict[str, Entry | None]
    ship: list[str]
    deleted: list[str]
    raw_bytes: int


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True)
class Plan:
    """What a sync WOULD do now; ``codec_known`` is False when the host was never asked."""

    host: str
    root: str
    codec: Codec
    codec_known: bool
    files: list[str]
    deleted: list[str]
    raw_bytes: int
    wire_bytes: int
    last_sync: datetime | None
    tracked: int
    in_place: bool = False

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (dates as ISO 8601)."""
        return {k: _jsonable(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class SyncReport:
    """What a sync did: ``via`` is "stdin", "upload" or None when no archive was sent."""

    host: str
    root: str
    codec: Codec | None
    files: list[str]
    deleted: list[str]
    raw_bytes: int
    wire_bytes: int
    via: str | None
    synced_at: datetime
    tracked: int
    in_place: bool = False

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (dates as ISO 8601)."""
        return {k: _jsonable(v) for k, v in self.__dict__.items()}


def _check_name(workspace: Path, name: str) -> None:
    """Refuse a name that is not UTF-8: the manifest (JSON) and many hosts cannot hold it."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(f"workspace file {workspace / name!s:.200} has a name that is not UTF-8 "
                        f"({os.fsencode(name)!r}); rename it, or add it to [workspace] exclude "
                        "or .gitignore") from None


def load_manifest(path: Path, host: str, root: str) -> Manifest:
    """The host's manifest; an empty one when absent or made for another root (host moved)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Manifest(host=host, root=root)
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        raise UserError(f"{path}: not a valid mirror manifest ({where}: {error['msg']}); delete "
                        "it and the next sync resends everything") from exc
    return manifest if manifest.root == root else Manifest(host=host, root=root)


def save_manifest(path: Path, manifest: Manifest) -> None:
    """Write atomically: a crash leaves the old manifest or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(manifest.model_dump_json(indent=1) + "\n")
    os.replace(temp, path)


class Mirror:
    """The workspace mirror on one host: ``plan()`` says what would ship, ``sync()`` ships it."""

    def __init__(self, config: Config, host: str, transport: Transport | None, root: str, *,
                 env: Mapping[str, str] | None = None, inline_limit: int = INLINE_LIMIT,
                 machine: str | None = None) -> None:
        if inline_limit < 0:
            raise UserError(f"inline_limit must be 0 or more bytes (got {inline_limit!r})")
        self.config, self.host, self.transport, self.root = config, host, transport, root
        self.env = dict(env or {})  # the host's [hosts.X] env: its PATH finds tar and zstd
        self.inline_limit = inline_limit
        self.manifest_file = manifest_path(config.state_dir, host, machine)  # what that machine holds
        self._local_root = (Path(root).expanduser().resolve()
                            if isinstance(transport, LocalTransport) else None)

    @classmethod
    def of(cls, handle: Host, **options: Any) -> Mirror:
        """The mirror of a Board's host (a provider host can plan before it is rented)."""
        transport = handle.opened if isinstance(handle.config, ProviderHost) else handle.transport
        return cls(handle.board.config, handle.name, transport, handle.root,
                   env=handle.config.env, **options)

    @property
    def in_place(self) -> bool:
        """True for a local host whose root IS the workspace: there is nothing to copy."""
        return self._local_root is not None and self._local_root == self.config.root.resolve()

    def _skip(self) -> list[str]:
        """A local host rooted inside the workspace must not mirror itself into itself."""
        if self._local_root is None:
            return []
        try:
            return [self._local_root.relative_to(self.config.root.resolve()).as_posix()]
        except ValueError:
            return []

    def changes(self, old: Manifest, full: bool = False) -> Changes:
        """Compare the workspace with ``old``; ``full`` ships everything regardless."""
        selection = Selection(self.config.workspace.exclude, self._skip())
        current: dict[str, Entry | None] = {}
        ship: list[str] = []
        raw = 0
        for name, st in selection.walk(self.config.root):
            _check_name(self.config.root, name)
            prev = None if full else old.files.get(name)
            if prev is not None and prev.mode == st.st_mode:
                if (prev.size, prev.mtime_ns) == (st.st_size, st.st_mtime_ns):
                    current[name] = prev
                    continue
                if prev.size == st.st_size and file_digest(self.config.root / name) == prev.sha256:
                    current[name] = prev.model_copy(update={"mtime_ns": st.st_mtime_ns})
                    continue
            current[name] = None
            ship.append(name)
            raw += st.st_size
        return Changes(current, sorted(ship), sorted(set(old.files) - set(current)), raw)

    def _load(self) -> Manifest:
        return load_manifest(self.manifest_file, self.host, self.root)

    @contextmanager
    def _archive(self, names: list[str], codec: Codec) -> Iterator[tuple[Path, dict[str, Packed]]]:
        """The compressed tar of ``names`` in a temporary file, removed afterwards."""
        folder = self.manifest_file.parent
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".archive-") as out:
            packed = write_archive(self.config.root, names, codec, out)
            out.flush()
            yield Path(out.name), packed

    def plan(self, *, probe: bool = False, full: bool = False) -> Plan:
        """What ``sync`` would send, built and measured but not sent. Without ``probe`` the
        host is not contacted: the codec is the one sync would reuse (gzip if never synced)."""
        old = self._load()
        if self.in_place:
            return Plan(self.host, self.root, "gzip", True, [], [], 0, 0, old.synced_at, 0, True)
        changes = self.changes(old, full)
        if probe:
            codec, known = probe_codec(self._transport(), self.env), True
        else:
            cached = self._cached_codec(old, full)
            codec, known = cached or "gzip", cached is not None
        wire = 0
        if changes.ship:
            with self._archive(changes.ship, codec) as (path, _):
                wire = path.stat().st_size
        return Plan(self.host, self.root, codec, known, changes.ship, changes.deleted,
                    changes.raw_bytes, wire, old.synced_at, len(changes.current))

    def _transport(self) -> Transport:
        if self.transport is None:
            raise UserError(f"host {self.host!r} has no connection yet (a provider host is "
                            f"reachable once rented with `mainboard fleet up {self.host}`)")
        return self.transport

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One sync per host at a time across processes (the manifest is read-modify-write)."""
        with flocked(self.manifest_file.with_suffix(".lock")):
            yield

    def _cached_codec(self, old: Manifest, full: bool) -> Codec | None:
        """The codec that worked last time, unless a full sync asks again (or zstd left us)."""
        if full or old.codec is None or (old.codec == "zstd" and local_zstd() is None):
            return None
        return old.codec

    def _ship(self, transport: Transport, names: list[str], cached: Codec | None,
              before: str | None) -> tuple[Codec, str, int, dict[str, Packed]]:
        """Archive and unpack ``names``: (codec, via, wire bytes, what was packed). A cached
        codec the host no longer unpacks is replaced by a fresh probe and the send retried."""
        codec = cached or probe_codec(transport, self.env)
        while True:
            with self._archive(names, codec) as (path, packed):
                try:
                    via = send_archive(transport, self.root, path, codec, env=self.env,
                                       inline_limit=self.inline_limit, before=before)
                    return codec, via, path.stat().st_size, packed
                except CommandFailed:
                    if cached is None or (fresh := probe_codec(transport, self.env)) == codec:
                        raise
            codec, cached = fresh, None

    def sync(self, *, full: bool = False) -> SyncReport:
        """Bring the host's mirror up to date in one round trip (two on the first sync, which
        asks the host for its codec); ``full`` resends every file and asks again.

        Raises MirrorError (manifest unchanged) when the host could not remove or unpack.
        """
        transport = self._transport()
        if self.in_place:
            return SyncReport(self.host, self.root, None, [], [], 0, 0, None,
                              datetime.now(UTC), 0, in_place=True)
        with self._locked():
            old = self._load()
            changes = self.changes(old, full)
            deletes = delete_commands(changes.deleted)
            before = deletes.pop() if deletes and changes.ship else None
            codec, via, wire, packed = self._cached_codec(old, full), None, 0, {}
            try:
                for command in deletes:
                    transport.run(command, cwd=self.root, env=self.env, check=True)
                if changes.ship:
                    codec, via, wire, packed = self._ship(transport, changes.ship, codec, before)
            except (CommandFailed, OSError) as exc:
                raise MirrorError(f"{self.host}: mirroring the workspace into {self.root} failed "
                                  f"(nothing recorded; the next sync resends): {exc}") from exc
            files = {name: entry if entry is not None else Entry(**packed[name].__dict__)
                     for name, entry in changes.current.items()}
            now = datetime.now(UTC)
            save_manifest(self.manifest_file, Manifest(
                host=self.host, root=self.root, codec=codec, synced_at=now, files=files))
        return SyncReport(self.host, self.root, codec if via else None, changes.ship,
                          changes.deleted, changes.raw_bytes, wire, via, now, len(files))


def mirror_for(target: Hosts | Host | Config, host: str | None = None,
               transport: Transport | None = None, *, root: str | None = None,
               **options: Any) -> Mirror:
    """A Mirror from a Board and host name, a Host, or a Config (with transport and root)."""
    if isinstance(target, Config):
        if host is None or root is None:
            raise TypeError("mirror_for(Config, ...) needs the host name and its root")
        return Mirror(target, host, transport, root, **options)
    handle = target.on(host or "local") if isinstance(target, Hosts) else target
    if transport is None and root is None:
        return Mirror.of(handle, **options)
    return Mirror(handle.board.config, handle.name, transport or handle.transport,
                  root or handle.root, env=handle.config.env, **options)


def plan(target: Hosts | Host | Config, host: str | None = None,
         transport: Transport | None = None, *, root: str | None = None,
         probe: bool = False) -> Plan:
    """What syncing ``host`` would ship now (see Mirror.plan)."""
    return mirror_for(target, host, transport, root=root).plan(probe=probe)


def sync(target: Hosts | Host | Config, host: str | None = None,
         transport: Transport | None = None, *, root: str | None = None,
         full: bool = False) -> SyncReport:
    """Bring ``host``'s mirror up to date (see Mirror.sync)."""
    return mirror_for(target, host, transport, root=root).sync(full=full)
