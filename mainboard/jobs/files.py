"""A job's files: ``data`` goes to the host before it runs, ``fetch`` comes back after.

Both are workspace-relative paths: a job runs in its host's root, which mirrors the
workspace, so ``data/x.csv`` here is ``data/x.csv`` there, and a result the job writes
to ``out/fit.json`` there comes back to ``out/fit.json`` here. Data travels with the
workspace mirror (only what changed since that host's last sync); paths the mirror does
not carry (``.gitignore``d or excluded data) follow in one extra tar. Results come back
as one tar packed on the host, unpacked here with tarfile's ``data`` filter (no
absolute paths, no links out of the workspace).
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shlex
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from mainboard.bridges.transport import LocalTransport
from mainboard.errors import CommandFailed, UserError
from mainboard.hosts.mirror import Mirror, load_manifest

if TYPE_CHECKING:
    from mainboard.bridges.base import Bridge
    from mainboard.hosts.access import Host

_MISSING = "mb-missing:"


def check_paths(paths: Iterable[str | os.PathLike[str]], what: str, workspace: Path, *,
                must_exist: bool) -> list[str]:
    """Workspace-relative POSIX paths, refused (before anything runs) when they could escape it."""
    out: list[str] = []
    for raw in paths:
        text = os.fspath(raw)
        if isinstance(raw, Path) and raw.is_absolute():
            try:
                text = raw.resolve().relative_to(workspace.resolve()).as_posix()
            except ValueError:
                raise UserError(f"{what} path {text!r} is outside the workspace {workspace}; "
                                "give a path inside it") from None
        pure = PurePosixPath(text)
        if (not text.strip() or pure.is_absolute() or ".." in pure.parts or "\\" in text
                or any(c in text for c in "\n\r\0")):
            raise UserError(f"{what} path {text!r} is not valid; give a relative path inside "
                            "the workspace without '..' (e.g. data/input.csv or out/)")
        norm = pure.as_posix()
        if norm == ".":
            raise UserError(f"{what} path {text!r} names the whole workspace; name the files or "
                            "directories the job needs")
        if must_exist and not (workspace / norm).exists():
            raise UserError(f"{what} path {norm!r} does not exist in the workspace {workspace}")
        out.append(norm)
    return list(dict.fromkeys(out))


def in_place(handle: Host, root: str) -> bool:
    """True when the host's root IS the workspace on this machine: nothing needs copying."""
    if not isinstance(handle.transport, LocalTransport):
        return False
    return Path(root).expanduser().resolve() == handle.board.config.root.resolve()


def data_files(workspace: Path, paths: Sequence[str]) -> list[str]:
    """Every file under ``paths`` (directories walked), workspace-relative."""
    found: list[str] = []
    for path in paths:
        full = workspace / path
        if full.is_dir():
            for base, _dirs, names in os.walk(full):
                found += [Path(base, n).relative_to(workspace).as_posix() for n in sorted(names)]
        else:
            found.append(path)
    return found


def ship_data(handle: Host, bridge: Bridge, paths: Sequence[str], *,
              sync: bool = True) -> list[str]:
    """Bring the workspace and ``paths`` to the host's root: mirror sync, then a tar of the
    ``paths`` it does not carry. Without ``sync`` (and ``paths``) nothing travels.

    Returns the paths that went by the extra tar (empty when the mirror carried all).
    """
    if not (paths or sync) or in_place(handle, bridge.root):
        return []

    mirror = Mirror.of(handle)
    mirror.sync()
    carried = set(load_manifest(mirror.manifest_file, handle.name, handle.root).files)
    workspace = handle.board.config.root
    extra = [f for f in data_files(workspace, paths) if f not in carried]
    if extra:
        _send_tar(bridge, workspace, extra)
    return extra


def _send_tar(bridge: Bridge, workspace: Path, files: Sequence[str]) -> None:
    """One gzip'd tar of ``files`` put into the host's root and unpacked there."""
    remote = posixpath.join(bridge.root, ".mainboard", "uploads",
                            f"data-{secrets.token_hex(6)}.tar.gz")
    with tempfile.TemporaryDirectory(prefix="mb-data-") as tmp:
        archive = Path(tmp) / "data.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for name in files:
                tar.add(workspace / name, arcname=name, recursive=False)
        bridge.put(str(archive), remote)
    q = shlex.quote
    bridge.run(["/bin/sh", "-c", f"tar -xzf {q(remote)} -C {q(bridge.root)}; _mb_rc=$?; "
                f"rm -f -- {q(remote)}; exit $_mb_rc"], check=True)


@dataclass(frozen=True)
class Fetched:
    """What came back: the paths found on the host, those missing, the archive's size."""

    paths: list[str]
    missing: list[str]
    bytes: int
    in_place: bool = False


_PACK = f"""\
root=$1; out=$2; shift 2
cd -- "$root" || exit 3
n=$#; i=0
while [ "$i" -lt "$n" ]; do
  p=$1; shift; i=$((i + 1))
  if [ -e "$p" ] || [ -L "$p" ]; then set -- "$@" "$p"; else printf '{_MISSING}%s\\n' "$p"; fi
done
[ "$#" -eq 0 ] && exit 0
exec tar -czf "$out" -- "$@"
"""


def fetch_back(handle: Host, bridge: Bridge, root: str, job_dir: str,
               paths: Sequence[str]) -> Fetched:
    """Copy ``paths`` (relative to the job's ``root`` on the host) into the workspace."""
    workspace = handle.board.config.root
    if in_place(handle, root):
        missing = [p for p in paths if not (workspace / p).exists()]
        return Fetched([p for p in paths if p not in missing], missing, 0, True)
    archive = posixpath.join(job_dir, "fetch.tar.gz")
    done = bridge.run(["/bin/sh", "-c", _PACK, "mb-fetch", root, archive, *paths])
    missing = [ln[len(_MISSING):] for ln in done.stdout.splitlines() if ln.startswith(_MISSING)]
    if not done.ok:
        raise CommandFailed(done.command, done.returncode, done.stdout, done.stderr, done.host)
    found = [p for p in paths if p not in missing]
    if not found:
        return Fetched([], missing, 0)
    with tempfile.TemporaryDirectory(prefix="mb-fetch-") as tmp:
        local = Path(tmp) / "fetch.tar.gz"
        bridge.get(archive, str(local))
        size = local.stat().st_size
        with tarfile.open(local, "r:gz") as tar:
            tar.extractall(workspace, members=_asked(tar, found), filter="data")
    return Fetched(found, missing, size)


def _asked(tar: tarfile.TarFile, paths: Sequence[str]) -> Iterable[tarfile.TarInfo]:
    """Only members at or under the asked ``paths``: whatever else the host's archive holds
    (it is packed over there) must not overwrite the workspace."""
    for member in tar:
        name = posixpath.normpath(member.name)
        if any(name == p or name.startswith(p.rstrip("/") + "/") for p in paths):
            yield member
