"""mainboard itself as something a host can install: a wheel made here, keyed by content.

Hosts get a wheel, not a source tree: installing a wheel needs no build backend and no
network path back to this machine. The files that go into it (``pyproject.toml``, the
README and the package directories of ``[tool.setuptools] package-dir``) are read once
into a snapshot; its hash keys the host's environment and the wheel is written from that
same snapshot, so it holds exactly what the hash names even if the tree changes meanwhile.

The wheel is written directly (PEP 427: a zip with ``.dist-info``), in milliseconds and
offline, from the static setuptools configuration this project uses (``[project]`` and
``[tool.setuptools] package-dir``/``package-data``), its packages listed in
``[tool.setuptools] packages`` or, without that list, found by the ``packages`` function of
the snapshot's setup.py (the discovery setuptools runs too). Anything else in
pyproject.toml (``dynamic`` fields, ``find:``, a setup.cfg) is refused by name rather than
guessed at. Without a source tree (mainboard installed from an index), hosts install
``mainboard==<version>`` from their index instead.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import posixpath
import re
import stat
import tomllib
import zipfile
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from typing import Any

from mainboard.errors import BuildError
from mainboard.locks import flocked

DIST_NAME = "mainboard"
_ALWAYS = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "LICENSE", "LICENSE.txt",
           "README.md", "README.rst")
_SKIP_DIRS = {"__pycache__", "build", "dist"}
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same snapshot gives the same bytes
Snapshot = tuple[tuple[str, int, bytes], ...]  # (relative path, mode, content)


@dataclass(frozen=True)
class Project:
    """What a host must install for mainboard: a local wheel, or a requirement for its index.

    ``files`` is the snapshot the digest was computed from; the wheel is made from it.
    """

    name: str
    import_name: str
    version: str
    digest: str                # content hash of the snapshot ("" without a source tree)
    source: Path | None        # the source tree, None when mainboard came from an index
    cache_dir: Path
    requires_python: tuple[int, ...] = (3, 11)
    files: Snapshot = field(default=(), repr=False, compare=False)

    def manifest(self) -> dict[str, object]:
        """The part of an environment's identity that is the project."""
        entry: dict[str, object] = {"name": self.name, "import": self.import_name,
                                    "version": self.version, "digest": self.digest}
        if self.source is None:
            entry["requirement"] = f"{self.name}=={self.version}"
        return entry

    def wheel(self) -> Path | None:
        """The wheel for this snapshot (made on first use, then cached); None without a source."""
        if self.source is None:
            return None
        target = self.cache_dir / self.digest
        with flocked(self.cache_dir / ".lock"):
            found = sorted(target.glob("*.whl"))
            return found[0] if found else write_wheel(self.files, target)


def source_files(source: Path) -> list[Path]:
    """Relative paths of every file the snapshot holds, sorted."""
    setuptools = tomllib.loads((source / "pyproject.toml").read_text()).get("tool", {}).get(
        "setuptools", {})
    tops = {str(d).split("/")[0] for d in setuptools.get("package-dir", {}).values()}
    packages = setuptools.get("packages", [])
    tops |= {str(p).split(".")[0] for p in packages} if isinstance(packages, list) else set()
    files = [Path(name) for name in _ALWAYS if (source / name).is_file()]
    for top in sorted(t for t in tops if t and (source / t).is_dir()):
        for path in sorted((source / top).rglob("*")):
            relative = path.relative_to(source)
            if path.is_file() and not _SKIP_DIRS & set(relative.parts[:-1]) \
                    and path.suffix not in {".pyc", ".pyo"}:
                files.append(relative)
    return sorted(set(files))


def snapshot(source: Path) -> Snapshot:
    """Every file of the snapshot, read once."""
    return tuple((rel.as_posix(), stat.S_IMODE((source / rel).stat().st_mode),
                  (source / rel).read_bytes()) for rel in source_files(source))


def digest(files: Snapshot) -> str:
    """sha256 over each file's path and bytes: the same content gives the same key."""
    total = hashlib.sha256()
    for relative, _mode, data in files:
        total.update(f"{relative}\0{len(data)}\0".encode())
        total.update(data)
    return total.hexdigest()[:16]


def find_source() -> Path | None:
    """The source tree this mainboard runs from (an editable or in-tree install), if any."""
    spec = util.find_spec("mainboard")
    if spec is None or spec.origin is None:
        return None
    candidate = Path(spec.origin).resolve().parent.parent
    pyproject = candidate / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        name = tomllib.loads(pyproject.read_text()).get("project", {}).get("name")
    except tomllib.TOMLDecodeError:
        return None
    return candidate if name == DIST_NAME else None


def local_project(state_dir: Path, source: Path | None = None) -> Project:
    """mainboard as installed here, with its wheel cache under ``state_dir/wheels``."""
    source = source or find_source()
    cache = Path(state_dir) / "wheels"
    if source is None:
        return Project(DIST_NAME, DIST_NAME, metadata.version(DIST_NAME), "", None, cache)
    files = snapshot(source)
    meta = _pyproject(files)["project"]
    need = str(meta.get("requires-python", ">=3.11")).replace(">=", "").split(",")[0].strip()
    floor = tuple(int(p) for p in need.split(".") if p.isdigit()) or (3, 11)
    return Project(DIST_NAME, DIST_NAME, str(meta["version"]), digest(files), source, cache,
                   floor, files)


def _pyproject(files: Snapshot) -> dict[str, Any]:
    """pyproject.toml from the snapshot, checked to be the static kind this writer handles."""
    data = next((d for rel, _m, d in files if rel == "pyproject.toml"), None)
    if data is None:
        raise BuildError("no pyproject.toml in the mainboard source tree")
    config = tomllib.loads(data.decode())
    project = config.get("project", {})
    setuptools = config.get("tool", {}).get("setuptools", {})
    problems = [f"[project] dynamic = {project['dynamic']}" if project.get("dynamic") else "",
                "" if isinstance(setuptools.get("packages", []), list)
                else "[tool.setuptools] packages is not a list of names",
                "" if "packages" in setuptools or _discovery(files) is not None
                else "no [tool.setuptools] packages and no setup.py that finds them",
                "" if project.get("name") and project.get("version")
                else "[project] name/version missing",
                *(f"{name} exists" for name in ("setup.cfg",)
                  if any(rel == name for rel, _m, _d in files))]
    if any(problems):
        raise BuildError("pyproject.toml: cannot make the mainboard wheel: "
                         + "; ".join(p for p in problems if p)
                         + " (the wheel writer reads static [project] and [tool.setuptools])")
    return config


def _discovery(files: Snapshot) -> Any:
    """The ``packages(files, setuptools)`` function of the snapshot's setup.py, or None. Its
    file runs here as a module (setuptools runs it as ``__main__``: only then does it call
    ``setup``); it is this source tree's own code, as trusted as the modules shipped."""
    code = next((d for rel, _m, d in files if rel == "setup.py"), None)
    if code is None:
        return None
    namespace: dict[str, Any] = {"__name__": "mainboard_setup"}
    exec(compile(code, "setup.py", "exec"), namespace)  # noqa: S102 - our own setup.py
    return namespace.get("packages")


def package_names(files: Snapshot) -> list[str]:
    """The packages the wheel holds: the static list, else what setup.py finds among the
    snapshot's files (as the setuptools build finds them on disk)."""
    setuptools = _pyproject(files)["tool"]["setuptools"]
    if "packages" in setuptools:
        return list(setuptools["packages"])
    return list(_discovery(files)([rel for rel, _m, _d in files], setuptools))


def _package_dir(package: str, mapping: dict[str, str]) -> str:
    """Where ``package`` lives in the tree, through ``package-dir`` (longest prefix wins)."""
    for prefix in sorted(mapping, key=len, reverse=True):
        if package == prefix or package.startswith(prefix + ".") or prefix == "":
            rest = package[len(prefix):].lstrip(".").replace(".", "/")
            return posixpath.join(mapping[prefix], rest) if rest else mapping[prefix]
    return package.replace(".", "/")


def _metadata(project: dict[str, Any]) -> str:
    """METADATA (core metadata 2.1): what an installer needs to resolve and describe it."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if isinstance(project.get("license"), dict) and project["license"].get("text"):
        lines.append(f"License: {project['license']['text']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            requirement, _, marker = dep.partition(";")
            condition = f'({marker.strip()}) and extra == "{extra}"' if marker.strip() \
                else f'extra == "{extra}"'
            lines.append(f"Requires-Dist: {requirement.strip()}; {condition}")
    return "\n".join(lines) + "\n"


def _entry_points(project: dict[str, Any]) -> str:
    groups = {"console_scripts": project.get("scripts", {}),
              "gui_scripts": project.get("gui-scripts", {}), **project.get("entry-points", {})}
    return "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items()) + "\n"
                   for group, items in groups.items() if items)


def write_wheel(files: Snapshot, target: Path) -> Path:
    """A py3-none-any wheel of the snapshot's packages, written atomically into ``target``."""
    config = _pyproject(files)
    project, setuptools = config["project"], config["tool"]["setuptools"]
    mapping, data_globs = setuptools.get("package-dir", {}), setuptools.get("package-data", {})
    entries: dict[str, tuple[int, bytes]] = {}
    for package in package_names(files):
        where = _package_dir(package, mapping)
        globs = [*data_globs.get(package, []), *data_globs.get("*", [])]
        for rel, mode, data in files:
            inside = rel[len(where) + 1:] if rel.startswith(where + "/") else None
            if inside and (("/" not in inside and inside.endswith(".py"))
                           or any(fnmatch.fnmatch(inside, g) and inside.count("/") == g.count("/")
                                  for g in globs)):
                entries[posixpath.join(package.replace(".", "/"), inside)] = (mode, data)
    dist = f"{re.sub(r'[-_.]+', '_', project['name'])}-{project['version']}"
    info = f"{dist}.dist-info"
    entries[f"{info}/METADATA"] = (0o644, _metadata(project).encode())
    entries[f"{info}/WHEEL"] = (0o644, b"Wheel-Version: 1.0\nGenerator: mainboard\n"
                                       b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    if _entry_points(project):
        entries[f"{info}/entry_points.txt"] = (0o644, _entry_points(project).encode())
    record = [f"{name},sha256={_b64_sha256(data)},{len(data)}" for name, (_m, data) in
              sorted(entries.items())]
    entries[f"{info}/RECORD"] = (0o644, ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode())
    target.mkdir(parents=True, exist_ok=True)
    final = target / f"{dist}-py3-none-any.whl"
    staged = final.with_name(final.name + ".tmp")
    with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (mode, data) in entries.items():
            item = zipfile.ZipInfo(name, date_time=_EPOCH)
            item.external_attr = (stat.S_IFREG | (mode or 0o644)) << 16
            item.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(item, data)
    staged.replace(final)
    return final


def _b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
