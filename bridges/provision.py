"""The environment a worker runs in on a host: ``[python.deps]`` plus mainboard, cached.

``provision(transport, root=..., deps=..., project=...)`` makes sure that
``<root>/.mainboard/envs/<key>/`` on the host holds a virtual environment with the
dependency set and the project (a wheel made here, see ``project``), built with ``uv``
(installed from PyPI into ``<root>/.mainboard/tools/`` when the host has none). The key
hashes the dependency set, the project's version and content hash, the container image
and the host python's version and path, so an unchanged set costs one round trip and
installs nothing. The work on the
host is done by ``provision_driver`` (sent to the host's python on stdin; it takes a
per-key lock, so concurrent provisions of one set build it once).

With a container, the environment is built *inside* the fixed image (its python is
the env's base interpreter) on a bind-mounted host path; workers then run through
``container_prefix`` with that path bound again. The image is never rebuilt.
"""

from __future__ import annotations

import json
import posixpath
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from mainboard.bridges.pins import require_env_python
from mainboard.config import Config, ContainerConfig, HostConfig
from mainboard.config.pins import specifier
from mainboard.errors import (
    CommandFailed,
    ConfigError,
    HostError,
    InterpreterUnavailable,
    UserError,
)
from mainboard.receipts import EnvProvisioned, Receipts

from .envmodules import with_modules
from .project import Project, local_project
from .transport import StreamSink, Transport

PROVISION_TIMEOUT_S = 1800.0
ENVS_FILE = "envs.ndjson"
_DRIVER = Path(__file__).with_name("provision_driver.py")
_TAG = "mb-provision:"
# PEP 508 name, optional [extras], then nothing or a version/marker/URL part.
_REQUIREMENT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\s*(\[[A-Za-z0-9._,\s-]*\])?"
                          r"\s*(?:[<>=!~;@(].*)?\Z")
_CREDENTIALS = re.compile(r"://[^/@\s]+@")


@dataclass(frozen=True)
class ProvisionedEnv:
    """A ready environment on a host; ``python`` is the interpreter a worker should exec."""

    host: str
    key: str
    env_dir: str
    python: str
    root: str
    python_version: str
    installed: bool               # False: it was already there (one round trip, nothing run)
    actions: tuple[str, ...]      # what this call did on the host (uv-install, env-create, ...)


def check_deps(deps: Sequence[str], *, file: str = "mainboard.toml",
               key: str = "python.deps") -> list[str]:
    """Validated, de-duplicated and sorted requirement strings (order must not change the key).

    Refuses anything a resolver would read as an option (``-e .``, ``--index-url=...``) or
    that is not one requirement: they reach uv as separate argv elements.
    """
    clean: set[str] = set()
    for dep in deps:
        text = dep.strip() if isinstance(dep, str) else dep
        if isinstance(text, str) and _CREDENTIALS.search(text):
            raise ConfigError("a requirement must not carry credentials (they would reach "
                              "process arguments and logs on the host)", file=file, key=key,
                              value=_CREDENTIALS.sub("://***@", text),
                              valid="the URL without user:token, and the credentials in the "
                                    "host's env (UV_INDEX_URL, or a ~/.netrc there)")
        if not isinstance(text, str) or not text or "\n" in text or "\0" in text \
                or not _REQUIREMENT.match(text):
            raise ConfigError("not a pip requirement", file=file, key=key, value=dep,
                              valid='one PEP 508 requirement per string, e.g. "six==1.16.0", '
                                    '"numpy>=1.26", "pkg[extra]; python_version >= \'3.11\'"')
        clean.add(text)
    return sorted(clean)


def build_manifest(deps: Sequence[str], project: Project | None,
                   container: ContainerConfig | None = None,
                   python_request: str | None = None,
                   python_preference: str = "managed") -> dict[str, object]:
    """What the environment's key is made of (the host adds its python version and path,
    unless ``python_request``, the declared ``[deps] python``, names the interpreter)."""
    manifest: dict[str, object] = {"format": 1, "deps": check_deps(deps),
                                   "project": project.manifest() if project else None,
                                   "requires_python": list(project.requires_python)
                                   if project else [3, 8]}
    if python_request:
        manifest["python_request"] = python_request
        manifest["python_preference"] = python_preference
    if container is not None:
        manifest["container"] = {"runtime": container.runtime, "image": container.image}
    return manifest


def _plain_path(path: str, what: str, runtime: str) -> str:
    """An absolute host path that a bind option cannot misread."""
    bad = ":" if runtime == "podman" else ":,"
    if not path.startswith("/") or any(c in path for c in bad):
        raise UserError(f"{what} {path!r} cannot be bind-mounted with {runtime}: it must be an "
                        f"absolute path without {' or '.join(repr(c) for c in bad)}")
    return path


def container_prefix(container: ContainerConfig, binds: Sequence[str] = (),
                     env_path: str | None = None, *, workdir: str | None = None,
                     env_names: Sequence[str] = (), interactive: bool = False) -> list[str]:
    """The argv that runs a command inside ``container``'s fixed image.

    ``binds`` are host paths (the host's root, say) mounted at the same path, after the
    image's own ``binds`` (``SRC[:DST[:OPTS]]`` strings from mainboard.toml);
    ``env_path`` is the provisioned environment, mounted at the same path so its absolute
    paths hold inside. apptainer/singularity inherit the environment; podman gets
    ``-e NAME`` per name and ``--network host`` so a worker reaches its broker or tunnel.
    ``interactive`` passes stdin through (podman ``-i``).
    """
    runtime = container.runtime
    if not container.image.strip() or container.image.startswith("-"):
        raise UserError(f"container image {container.image!r} is not an image reference")
    for spec in container.binds:
        if not spec or spec.startswith("-") or (runtime != "podman" and "," in spec):
            raise UserError(f"container bind {spec!r} is not SRC[:DST[:OPTS]] "
                            f"(absolute paths{'' if runtime == 'podman' else ', no commas'})")
    ours = [_plain_path(p, "bind path", runtime) for p in binds]
    if env_path is not None:
        ours.append(_plain_path(env_path, "environment path", runtime))
    ours = [p for p in ours if not any(p == b or p.startswith(b.rstrip("/") + "/")
                                       for b in ours if b != p)]
    all_binds = list(dict.fromkeys([*container.binds, *ours]))
    if runtime == "podman":
        argv = ["podman", "run", "--rm", "--network", "host", *(["-i"] if interactive else [])]
        for bind in all_binds:
            argv += ["-v", bind if ":" in bind else f"{bind}:{bind}"]
        if workdir:
            argv += ["-w", workdir]
        for name in env_names:
            argv += ["-e", name]
        return [*argv, container.image]
    argv = [runtime, "exec"]
    for bind in all_binds:
        argv += ["--bind", bind]
    if workdir:
        argv += ["--pwd", workdir]
    return [*argv, container.image]


def _result(done_stdout: str) -> dict[str, Any] | None:
    lines = [ln for ln in done_stdout.splitlines() if ln.startswith(_TAG)]
    return json.loads(lines[-1][len(_TAG):]) if lines else None


def absolute_root(transport: Transport, root: str, env: Mapping[str, str] | None = None) -> str:
    """``root`` (``~/mainboard``, a relative path...) as the host spells it absolutely;
    created when missing. One round trip."""
    done = transport.run(["/bin/sh", "-c", 'printf "mb-root:%s\\n" "$PWD"'], cwd=root,
                         env=env, timeout=60.0, check=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("mb-root:")]
    if not lines:
        raise HostError(f"{transport.name}: cannot resolve root {root!r}: {done.stdout[-200:]!r}")
    return lines[-1][len("mb-root:"):]


class Driver:
    """Runs ``provision_driver`` with the host's python (inside the image, with a container)."""

    def __init__(self, transport: Transport, root: str, python: str, env: Mapping[str, str],
                 container: ContainerConfig | None, modules: Sequence[str] = ()) -> None:
        self.transport, self.root, self.python = transport, root, python
        self.env, self.container, self.modules = dict(env), container, list(modules)
        if container is not None:  # a container binds absolute paths only
            self.root = root if root.startswith("/") else absolute_root(transport, root, env)
            _plain_path(self.root, "host root", container.runtime)

    def __call__(self, mode: str, manifest: dict[str, object], wheel: str | None = None,
                 stream: bool | StreamSink = False) -> dict[str, Any]:
        argv = [self.python, "-", mode, self.root, json.dumps(manifest, sort_keys=True),
                *([wheel] if wheel else [])]
        if self.container is not None:
            argv = [*container_prefix(self.container, [self.root], workdir=self.root,
                                      env_names=list(self.env), interactive=True), *argv]
        done = self.transport.run(with_modules(argv, self.modules), env=self.env,
                                  stdin=_DRIVER.read_bytes(), timeout=PROVISION_TIMEOUT_S,
                                  stream=stream)
        found = _result(done.stdout)
        if not done.ok or found is None:
            raise CommandFailed(done.command, done.returncode, done.stdout, done.stderr,
                                done.host)
        if found.get("unavailable"):
            raise InterpreterUnavailable(f"{self.transport.name}: {found['error']}")
        if found.get("error"):
            raise HostError(f"{self.transport.name}: {found['error']}")
        return found


def provision(transport: Transport, *, root: str, python: str = "python3",
              deps: Sequence[str] = (), project: Project | None = None,
              env: Mapping[str, str] | None = None, container: ContainerConfig | None = None,
              stream: bool | StreamSink = False,
              requires: Callable[[str], None] | None = None,
              modules: Sequence[str] = (), python_request: str | None = None,
              python_preference: str = "managed") -> ProvisionedEnv:
    """Make sure the environment for (deps, project, python[, image]) exists under ``root``.

    One round trip when it does. Otherwise the project's wheel is uploaded and the host
    builds the env under a lock (a concurrent caller with the same set waits, then reuses
    it). ``env`` (the host's ``env`` table) reaches every command there, e.g.
    ``UV_INDEX_URL`` for a private index or ``UV_CACHE_DIR``. ``requires`` sees the base
    python's version before anything is installed and may refuse it (a ``[deps]`` pin).
    ``modules`` (the host's) are loaded first: the container runtime may come from one.
    ``python_request`` (a uv request such as ``==3.12.*``) builds the env on an interpreter
    uv finds (``python_preference``) or else installs, from the host's mirror if set.
    """
    manifest = build_manifest(deps, project, container, python_request, python_preference)
    driver = Driver(transport, root, python, env or {}, container, modules)
    found = driver("check", manifest)
    if requires is not None:
        requires(str(found["python_version"]))
    if not found["ready"]:
        upload = None
        wheel = project.wheel() if project is not None else None
        if wheel is not None:
            upload = posixpath.join(str(found["root"]), ".mainboard", "envs", ".uploads",
                                    secrets.token_hex(8), wheel.name)
            transport.put(wheel, upload)
        found = driver("install", manifest, upload, stream)
    actions = tuple(str(a) for a in found.get("actions") or ())
    return ProvisionedEnv(host=transport.name, key=str(found["key"]),
                          env_dir=str(found["env_dir"]), python=str(found["python"]),
                          root=str(found["root"]), python_version=str(found["python_version"]),
                          installed=bool(actions), actions=actions)


def manifest_digest(config: Config, name: str, project: Project | None = None) -> str:
    """What host ``name``'s environment is made of (set, image, ``project``), hashed here
    without contacting the host: the part of its key this machine can compute (a job's
    environment has no project)."""
    manifest = build_manifest(config.python.deps, project, config.container_of(config.host(name)),
                              python_request(config), config.python.preference)
    return sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]


def python_request(config: Config) -> str | None:
    """``[deps] python`` as the interpreter to provision (None: use the host's python)."""
    spec = config.deps.get("python", "").strip()
    return str(specifier(spec)) or None if spec and spec != "*" else None


def driver_env(config: Config, host: HostConfig) -> dict[str, str]:
    """The host's ``env`` plus where uv gets interpreters: ``[python] mirror``/``downloads``
    (the host's own ``env`` wins, so one host can use another mirror)."""
    extra = {}
    if config.python.mirror:
        extra["UV_PYTHON_INSTALL_MIRROR"] = config.python.mirror
    if config.python.downloads:
        extra["UV_PYTHON_DOWNLOADS_JSON_URL"] = config.python.downloads
    return {**extra, **host.env}


def default_root(config: Config, host: HostConfig) -> str:
    """The host's root as HostHandle sees it: ``~/mainboard`` remotely, the workspace here."""
    if host.ssh_params() is not None or host.kind == "provider":
        return host.root or "~/mainboard"
    return str(config.root / Path(host.root).expanduser()) if host.root else str(config.root)


def env_receipts(state_dir: Path) -> Receipts:
    """``.mainboard/envs.ndjson``: one ``env.provisioned`` line per environment built."""
    return Receipts(Path(state_dir) / ENVS_FILE)


def provision_host(config: Config, name: str, transport: Transport, *, root: str | None = None,
                   stream: bool | StreamSink = False, project: Project | None = None,
                   with_project: bool = True, purpose: str = "worker") -> ProvisionedEnv:
    """Provision host ``name`` of ``config``: its python, root, env and container, the
    workspace's ``[python.deps]`` and mainboard itself (``project``, default: this source
    tree's snapshot; ``with_project=False`` leaves it out). A ``[deps]`` python pin is
    checked against the base python before anything is installed; a build is timed into
    ``env_receipts`` (``purpose``: job or worker)."""
    host = config.host(name)
    source = str(config.path or "mainboard.toml")
    deps = check_deps(config.python.deps, file=source, key="python.deps")
    container = config.container_of(host)
    project = (project or local_project(config.state_dir)) if with_project else None
    started = time.monotonic()
    request = python_request(config)
    built = provision(transport, root=root or default_root(config, host),
                      python=host.interpreter(), deps=deps,
                      project=project, env=driver_env(config, host), container=container,
                      stream=stream, python_request=request,
                      python_preference=config.python.preference,
                      requires=None if request else
                      lambda version: require_env_python(config, name, version),
                      modules=host.env_modules())
    if built.installed:
        env_receipts(config.state_dir).append(EnvProvisioned(
            host=name, kind=host.kind, key=built.key, seconds=time.monotonic() - started,
            actions=list(built.actions), python_version=built.python_version,
            purpose=purpose, manifest=manifest_digest(config, name, project)))
    return built
