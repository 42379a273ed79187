"""A local interpreter mirror for uv, made offline from this machine's own CPython.

This is *not* a python-build-standalone build: it is this machine's interpreter (its
binary, libpython and stdlib) repackaged in that project's ``install_only`` tarball
layout (``python/bin``, ``python/lib``), listed in a python-downloads JSON that uv reads
through ``UV_PYTHON_DOWNLOADS_JSON_URL`` (``[python] downloads``). uv installs it as it
would a downloaded build, which is the path under test; the copy keeps its absolute
RUNPATH to this machine's libpython directory, so it runs on this machine only.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

_SKIP = {"site-packages", "test", "__pycache__", "idlelib", "tkinter", "turtledemo",
         "ensurepip", "lib2to3"}


@dataclass(frozen=True)
class PythonMirror:
    """The downloads JSON and the version it offers."""

    downloads: Path
    version: str

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


def _skip(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = set(Path(info.name).parts)
    return None if parts & _SKIP or any(p.startswith("config-") for p in parts) else info


def make_mirror(directory: Path) -> PythonMirror:
    """Write ``cpython-<this version>`` as an install_only tarball and its downloads JSON."""
    directory.mkdir(parents=True, exist_ok=True)
    base = Path(sys.base_prefix)
    major, minor, patch = sys.version_info[:3]
    tag = f"python{major}.{minor}"
    tarball = directory / f"cpython-{major}.{minor}.{patch}-install_only.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=1) as archive:
        archive.add((base / "bin" / tag).resolve(), f"python/bin/{tag}")
        for alias in ("python3", "python"):
            link = tarfile.TarInfo(f"python/bin/{alias}")
            link.type, link.linkname = tarfile.SYMTYPE, tag
            archive.addfile(link)
        libdir = Path(sysconfig.get_config_var("LIBDIR") or base / "lib")
        for lib in libdir.glob(f"libpython{major}.{minor}*.so*"):
            archive.add(lib, f"python/lib/{lib.name}")
        archive.add(base / "lib" / tag, f"python/lib/{tag}", filter=_skip)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    arch = platform.machine()
    key = f"cpython-{major}.{minor}.{patch}-linux-{arch}-gnu"
    downloads = directory / "downloads.json"
    downloads.write_text(json.dumps({key: {
        "name": "cpython", "arch": {"family": arch, "variant": None}, "os": "linux",
        "libc": "gnu", "major": major, "minor": minor, "patch": patch, "prerelease": "",
        "url": tarball.as_uri(), "sha256": digest, "variant": None, "build": "local-repack"}}))
    return PythonMirror(downloads, f"{major}.{minor}.{patch}")


def tiny_wheel(directory: Path, name: str = "mbtinyenv", version: str = "0.1") -> Path:
    """A one-module pure-python wheel (``import NAME`` gives ``VERSION``), made here: the
    env's ``[python.deps]`` then install with no index (``UV_FIND_LINKS``, ``UV_NO_INDEX``)."""
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{p},,\n" for p in files)
                         + f"{info}/RECORD,,\n")
    return wheel
