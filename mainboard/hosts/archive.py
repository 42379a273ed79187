"""The mirror's wire format: one tar stream, zstd- or gzip-compressed, and the shell that unpacks it.

Archives are deterministic (owner 0, whole-second mtimes, no gzip name or timestamp),
so the size ``plan`` reports is the size ``sync`` sends. The receiving side only needs
``tar`` (plus ``zstd`` for zstd); every path it sees is shlex-quoted.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from mainboard.bridges.transport import Transport
from mainboard.errors import HostError, MirrorError

Codec = Literal["zstd", "gzip"]

# Prints which codec the host can unpack; "none" when it has no tar at all.
PROBE = ("command -v tar >/dev/null 2>&1 || { echo none; exit 0; }; "
         "if command -v zstd >/dev/null 2>&1 && tar --help 2>&1 | grep -q -e --zstd; "
         "then echo zstd; else echo gzip; fi")
UNPACK = {"zstd": "tar --zstd -x -o -f", "gzip": "tar -x -z -o -f"}
SUFFIX = {"zstd": ".tar.zst", "gzip": ".tar.gz"}
DELETE_CHUNK = 64 * 1024  # characters of paths per rm command: far below any ARG_MAX


def local_zstd() -> str | None:
    """Path of this machine's zstd binary, if any (the sending side compresses with it)."""
    return shutil.which("zstd")


def probe_codec(transport: Transport, env: Mapping[str, str] | None = None) -> Codec:
    """The best codec both sides can use: zstd when both have it, else gzip."""
    answer = transport.run(PROBE, env=env, check=True).stdout.strip()
    if answer == "none":
        raise MirrorError(f"{transport.name}: no `tar` on the host; install tar (and zstd) there")
    return "zstd" if answer == "zstd" and local_zstd() else "gzip"


@dataclass(frozen=True)
class Packed:
    """One archived path: what the manifest records once the host has unpacked it."""

    size: int
    mtime_ns: int
    mode: int
    sha256: str


class _HashingReader:
    """A file object that hashes what tarfile reads from it, so content is read once."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.hash = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.hash.update(data)
        return data


def link_digest(path: Path) -> str:
    """A symlink's content is its target text."""
    return hashlib.sha256(os.fsencode(os.readlink(path))).hexdigest()


def file_digest(path: Path) -> str:
    """sha256 of a regular file or, for a symlink, of its target."""
    if path.is_symlink():
        return link_digest(path)
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _info(name: str, st: os.stat_result) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = st.st_mtime_ns // 1_000_000_000
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add(tar: tarfile.TarFile, workspace: Path, name: str) -> Packed:
    """Append one file or symlink as it is now, hashing it on the way."""
    path = workspace / name
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        info = _info(name, st)
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        tar.addfile(info)
        return Packed(st.st_size, st.st_mtime_ns, st.st_mode, link_digest(path))
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        info = _info(name, st)
        info.size = st.st_size
        reader = _HashingReader(handle)
        tar.addfile(info, reader)  # type: ignore[arg-type]
    return Packed(st.st_size, st.st_mtime_ns, st.st_mode, reader.hash.hexdigest())


def write_archive(workspace: Path, names: Iterable[str], codec: Codec,
                  out: IO[bytes]) -> dict[str, Packed]:
    """Write ``names`` (relative to ``workspace``) as one compressed tar stream into ``out``."""
    packed: dict[str, Packed] = {}
    try:
        if codec == "gzip":
            with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0,
                               compresslevel=6) as gz, \
                    tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                packed = {name: _add(tar, workspace, name) for name in names}
            return packed
        zstd = local_zstd()
        if zstd is None:
            raise MirrorError("zstd was chosen but this machine has no `zstd` binary any more")
        proc = subprocess.Popen([zstd, "-q", "-c", "-3"], stdin=subprocess.PIPE, stdout=out,
                                stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stderr is not None
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                packed = {name: _add(tar, workspace, name) for name in names}
        finally:
            proc.stdin.close()
            error = proc.stderr.read().decode(errors="replace").strip()
            proc.wait()
        if proc.returncode != 0:
            raise MirrorError(f"zstd failed compressing the mirror (exit {proc.returncode}): "
                              f"{error}")
        return packed
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise MirrorError(f"cannot archive the workspace{where}: {exc.strerror or exc}; "
                          "a file changed while syncing? sync again") from exc


def delete_commands(paths: Iterable[str]) -> list[str]:
    """``rm`` commands (paths shlex-quoted, chunked) that also drop directories left empty."""
    commands: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        if not chunk:
            return
        parents = sorted({os.path.dirname(p) for p in chunk} - {""}, key=len, reverse=True)
        text = "rm -f -- " + " ".join(shlex.quote(p) for p in chunk)
        if parents:
            text += (" && { rmdir -p -- " + " ".join(shlex.quote(d) for d in parents)
                     + " 2>/dev/null || :; }")
        commands.append(text)
        chunk.clear()

    size = 0
    for path in paths:
        if size + len(path) > DELETE_CHUNK:
            flush()
            size = 0
        chunk.append(path)
        size += len(path) + 3
    flush()
    return commands


def send_archive(transport: Transport, root: str, archive: Path, codec: Codec, *,
                 inline_limit: int, before: str | None = None,
                 env: Mapping[str, str] | None = None) -> str:
    """Unpack ``archive`` in ``root`` on the host, after the shell text ``before`` succeeded
    (one round trip for both). Piped to tar's stdin when small, else uploaded next to it first
    (SFTP on ssh) and removed afterwards. Returns the way used: "stdin" or "upload"."""
    first = f"{before} && " if before else ""
    if archive.stat().st_size <= inline_limit:
        transport.run(f"{first}{UNPACK[codec]} -", cwd=root, env=env,
                      stdin=archive.read_bytes(), check=True)
        return "stdin"
    name = f".mainboard-mirror-{os.urandom(6).hex()}{SUFFIX[codec]}"
    remote = root.rstrip("/") + "/" + name
    try:
        transport.put(archive, remote)
    except (OSError, HostError) as exc:
        raise MirrorError(f"{transport.name}: uploading the mirror archive to {remote} "
                          f"failed: {exc}") from exc
    word = shlex.quote(name)
    transport.run(f"{first}{UNPACK[codec]} {word}; status=$?; rm -f -- {word}; exit $status",
                  cwd=root, env=env, check=True)
    return "upload"
