"""Provisioning for real: over the loopback sshd, into a root whose name is an injection
attempt, with a fresh HOME (so uv is absent and must be installed from PyPI), a real
dependency from PyPI and this project's own wheel; then inside a podman container."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from mainboard.board import Board
from mainboard.bridges.project import Project, local_project, package_names, write_wheel
from mainboard.bridges.provision import (
    ProvisionedEnv,
    absolute_root,
    container_prefix,
    provision,
    provision_host,
)
from mainboard.bridges.transport import Command, Completed, Output, Transport
from mainboard.config import Config, ContainerConfig
from mainboard.errors import BuildError, CommandFailed, ConfigError, HostError, UserError
from tests.support.container_image import build_python_image, podman_shim
from tests.support.services import SshServer, require

pytestmark = pytest.mark.live

IMAGE = "localhost/mainboard-test-python:1"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


class Counting(Transport):
    """A real transport whose commands and uploads are counted (round trips are the evidence)."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.commands: list[Command] = []
        self.uploads: list[str] = []

    def run(self, command: Command, **kwargs: Any) -> Completed:
        self.commands.append(command)
        return self.inner.run(command, **kwargs)

    def _execute(self, command: Command, text: str, env: dict[str, str], cwd: object,
                 stdin: bytes | None, output: Output, timeout: float | None) -> int | None:
        raise AssertionError("run() delegates to the inner transport")

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        self.uploads.append(remote)
        self.inner.put(local, remote)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        self.inner.get(remote, local)


@dataclass
class Site:
    """A workspace with ssh hosts `box` (plain) and `pod` (a podman container)."""

    dir: Path
    config: Config
    board: Board
    root: str
    pwned: Path
    project: Project  # one snapshot: other edits to the tree must not change the key mid-test


def _toml(value: object) -> str:
    return json.dumps(value)  # a JSON string or list is a valid TOML basic string / array


@pytest.fixture(scope="module")
def site(sshd_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("provision")
    pwned = directory / "PWNED"
    root = str(directory / f"host root a'; echo pwned $(touch {pwned}) `touch {pwned}`")
    home = directory / "fresh-home"
    home.mkdir()
    shim = podman_shim(directory / "podman-shim", shutil.which("podman") or "/usr/bin/podman")
    ssh = (f"host = {_toml(sshd_server.host)}\nport = {sshd_server.port}\n"
           f"user = {_toml(sshd_server.user)}\nidentity = {_toml(str(sshd_server.identity))}\n"
           f"known_hosts = {_toml(str(sshd_server.known_hosts()))}\nroot = {_toml(root)}\n")
    (directory / "mainboard.toml").write_text(
        f'[python]\ndeps = ["six==1.16.0"]\n\n'
        f'[containers.img]\nimage = "{IMAGE}"\nruntime = "podman"\n'
        f'binds = ["/etc/ssl/certs:/etc/ssl/certs:ro"]  # this site\'s CA store, for uv\n\n'
        f'[hosts.box]\nkind = "ssh"\n{ssh}'
        f'[hosts.box.env]\nHOME = {_toml(str(home))}\nPATH = {_toml(BASE_PATH)}\n\n'
        f'[hosts.pod]\nkind = "slurm"\nlogin = "ssh"\ncontainer = "img"\n{ssh}'
        f'[hosts.pod.env]\nPATH = {_toml(f"{shim}:{BASE_PATH}")}\n')
    board = Board(directory / "mainboard.toml")
    yield Site(directory, board.config, board, root, pwned,
               local_project(board.config.state_dir))
    board.close()


First = tuple[ProvisionedEnv, Counting]


@pytest.fixture(scope="module")
def first(site: Site) -> First:
    """The cold provision: uv missing (fresh HOME, bare PATH), nothing under the root yet."""
    assert not Path(site.root).exists()
    counting = Counting(site.board.on("box").transport)
    return provision_host(site.config, "box", counting, project=site.project), counting


def _log(site: Site) -> list[str]:
    return (Path(site.root) / ".mainboard" / "envs" / "provision.log").read_text().splitlines()


def test_first_provision_installs_uv_and_builds_the_env(site: Site, first: First) -> None:
    env, counting = first
    assert env.installed and env.host == "box"
    kinds = [a.split()[0] for a in env.actions]
    assert kinds == ["uv-install", "env-create", "deps-install"], env.actions
    uv = env.actions[0].split(" ", 1)[1]
    assert uv.startswith(site.root + "/.mainboard/tools/") and Path(uv).is_file()
    assert env.env_dir == f"{site.root}/.mainboard/envs/{env.key}" and env.root == site.root
    marker = json.loads((Path(env.env_dir) / ".mainboard-env.json").read_text())
    assert marker["key"] == env.key and marker["manifest"]["deps"] == ["six==1.16.0"]
    assert marker["manifest"]["project"]["digest"] == site.project.digest
    assert len(counting.uploads) == 1 and counting.uploads[0].endswith(".whl")
    assert not Path(counting.uploads[0]).exists()  # the upload is cleaned up after installing
    assert len(_log(site)) == 3


def test_hostile_root_is_one_literal_directory(site: Site, first: First) -> None:
    assert Path(site.root).is_dir() and not site.pwned.exists()
    assert not list(site.dir.rglob("PWNED"))


def test_env_python_imports_the_dep_and_the_project(site: Site, first: First) -> None:
    env, _ = first
    code = ("import six, celery, numpy, mainboard, mainboard.tasks.app; "
            "print(six.__version__, mainboard.__file__)")
    done = site.board.on("box").run([env.python, "-c", code], check=True)
    version, where = done.stdout.strip().split(" ", 1)
    assert version == "1.16.0" and where.startswith(env.env_dir + "/lib/")


def test_unchanged_set_is_one_round_trip_and_installs_nothing(site: Site, first: First) -> None:
    env, _ = first
    lines = _log(site)
    marker = Path(env.env_dir) / ".mainboard-env.json"
    before = marker.stat().st_mtime_ns
    counting = Counting(site.board.on("box").transport)
    again = provision_host(site.config, "box", counting, project=site.project)
    assert (again.key, again.env_dir, again.python) == (env.key, env.env_dir, env.python)
    assert not again.installed and again.actions == ()
    assert len(counting.commands) == 1 and counting.uploads == []
    assert _log(site) == lines and marker.stat().st_mtime_ns == before


def test_changed_set_builds_a_new_env_once_even_when_raced(site: Site, first: First) -> None:
    env, _ = first
    changed = site.config.model_copy(update={"python": site.config.python.model_copy(
        update={"deps": ["six==1.15.0"]})})
    results: list[ProvisionedEnv] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(provision_host(changed, "box", site.board.on("box").transport,
                                          project=site.project))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors and len(results) == 2
    assert results[0].key == results[1].key != env.key
    assert sorted(r.installed for r in results) == [False, True]
    built = [r for r in results if r.installed][0]
    assert [a.split()[0] for a in built.actions] == ["env-create", "deps-install"]  # uv reused
    assert sum(f"{built.key} env-create" in line for line in _log(site)) == 1
    done = site.board.on("box").run([built.python, "-c", "import six; print(six.__version__)"],
                                    check=True)
    assert done.stdout.strip() == "1.15.0"
    assert (Path(env.env_dir) / ".mainboard-env.json").exists()  # the old env is untouched


@pytest.mark.parametrize("dep", ["-e .", "--index-url=https://evil.example/simple", "", " ",
                                 "six\nnumpy", "six numpy", "../local/path"])
def test_bad_dependency_strings_are_refused_before_any_connection(site: Site, dep: str) -> None:
    bad = site.config.model_copy(update={"python": site.config.python.model_copy(
        update={"deps": ["six==1.16.0", dep]})})
    counting = Counting(site.board.on("box").transport)
    with pytest.raises(ConfigError) as caught:
        provision_host(bad, "box", counting, project=site.project)
    message = str(caught.value)
    assert "mainboard.toml" in message and "python.deps" in message and repr(dep) in message
    assert "PEP 508" in message and counting.commands == []


def test_a_requirement_with_credentials_is_refused_without_echoing_them(site: Site) -> None:
    dep = "private @ https://alice:s3cr3t-token@pkgs.example/private-1.0-py3-none-any.whl"
    bad = site.config.model_copy(update={"python": site.config.python.model_copy(
        update={"deps": [dep]})})
    with pytest.raises(ConfigError, match="must not carry credentials") as caught:
        provision_host(bad, "box", Counting(site.board.on("box").transport), project=site.project)
    assert "s3cr3t-token" not in str(caught.value) and "alice" not in str(caught.value)
    assert "https://***@pkgs.example/" in str(caught.value)


def test_host_python_or_root_unusable_is_one_clear_error(site: Site, tmp_path: Path) -> None:
    transport = site.board.on("box").transport
    project = site.project
    with pytest.raises(HostError, match=r"box: python 3\.\d+.* is too old: the environment "
                                        r"needs >= 99; set `python = \.\.\.`"):
        provision(transport, root=str(tmp_path), project=replace(project, requires_python=(99,)))
    blocker = tmp_path / "a file"
    blocker.write_text("")
    with pytest.raises(HostError, match=r"box: cannot create .*a file/sub/\.mainboard/envs: Not "
                                        r"a directory; check this host's `root`"):
        provision(transport, root=str(blocker / "sub"), deps=["six==1.16.0"], project=project)
    with pytest.raises(CommandFailed) as caught:
        provision(transport, root=str(tmp_path), python="/nonexistent/python3")
    assert caught.value.returncode == 127 and "/nonexistent/python3" in str(caught.value)


def test_wheel_says_what_setuptools_says(site: Site) -> None:
    """The wheel written here against the metadata setuptools wrote for the editable install."""
    wheel = site.project.wheel()
    assert wheel is not None and wheel == site.project.wheel()  # cached: made once
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"mainboard-{site.project.version}.dist-info"
        meta = archive.read(f"{info}/METADATA").decode().splitlines()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        record = archive.read(f"{info}/RECORD").decode().splitlines()
    installed = metadata.distribution("mainboard")
    assert sorted(ln.split(": ", 1)[1] for ln in meta if ln.startswith("Requires-Dist: ")) \
        == sorted(installed.requires or [])
    assert f"Requires-Python: {installed.metadata['Requires-Python']}" in meta
    for point in installed.entry_points:
        assert f"{point.name} = {point.value}" in entry_points
    assert site.project.source is not None
    packages = package_names(site.project.files)  # setup.py's discovery, as setuptools runs it
    data = {"mainboard.dashboard.static", "mainboard.dashboard.templates"}  # data, no code
    assert {f"{p.replace('.', '/')}/__init__.py" for p in packages if p not in data} <= names
    assert {"mainboard/dashboard/static/app.js", "mainboard/dashboard/templates/page.html"} \
        <= names
    assert {"mainboard/py.typed", "mainboard/bridges/provision_driver.py"} <= names
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    assert len(record) == len(names) and all(",sha256=" in r for r in record[:-1])


def test_unsupported_pyproject_is_refused_by_name(site: Site, tmp_path: Path) -> None:
    files = tuple((rel, mode, data.replace(b'version = "', b'dynamic = ["readme"]\nversion = "', 1)
                   if rel == "pyproject.toml" else data) for rel, mode, data in site.project.files)
    with pytest.raises(BuildError, match=r"pyproject.toml: cannot make the mainboard wheel: "
                                         r"\[project\] dynamic = \['readme'\]"):
        write_wheel(files, tmp_path)


def test_a_relative_root_is_resolved_on_the_host_for_container_binds(site: Site) -> None:
    transport = site.board.on("box").transport
    name = f"mb-provision-test-{os.getpid()}"
    home = transport.run(["/bin/sh", "-c", 'printf %s "$HOME"'], check=True).stdout
    try:
        resolved = absolute_root(transport, f"~/{name}/x y")
        assert resolved == f"{home}/{name}/x y" and Path(resolved).is_dir()
    finally:
        transport.run(["rm", "-rf", "--", f"{home}/{name}"], check=True)


def test_container_prefix_renders_each_runtime() -> None:
    hostile = "/srv/a'; echo pwned"
    app = ContainerConfig(image="docker://ghcr.io/x/img:1", runtime="apptainer",
                          binds=["/scratch", "/data:/mnt/data:ro"])
    assert container_prefix(app, [hostile], f"{hostile}/.mainboard/envs/k", workdir=hostile,
                            env_names=["A"]) == [
        "apptainer", "exec", "--bind", "/scratch", "--bind", "/data:/mnt/data:ro",
        "--bind", hostile, "--pwd", hostile, "docker://ghcr.io/x/img:1"]
    sing = app.model_copy(update={"runtime": "singularity", "binds": []})
    assert container_prefix(sing, [], "/opt/env") == [
        "singularity", "exec", "--bind", "/opt/env", "docker://ghcr.io/x/img:1"]
    pod = ContainerConfig(image="localhost/img:1", runtime="podman", binds=["/scratch,x"])
    assert container_prefix(pod, ["/r", "/r"], "/e", workdir="/r", env_names=["A", "B"],
                            interactive=True) == [
        "podman", "run", "--rm", "--network", "host", "-i", "-v", "/scratch,x:/scratch,x",
        "-v", "/r:/r", "-v", "/e:/e", "-w", "/r", "-e", "A", "-e", "B", "localhost/img:1"]


@pytest.mark.parametrize(("runtime", "image", "binds", "path", "complaint"), [
    ("podman", "img", [], "/a:b", "without ':'"),
    ("apptainer", "img", [], "/a,b", "without ':' or ','"),
    ("singularity", "img", [], "relative/env", "absolute path"),
    ("podman", "--privileged", [], "/e", "not an image reference"),
    ("apptainer", "img", ["-B/etc"], "/e", "is not SRC[:DST[:OPTS]]"),
    ("apptainer", "img", ["/a,/b"], "/e", "no commas"),
])
def test_container_prefix_refuses_ambiguous_binds(runtime: str, image: str, binds: list[str],
                                                  path: str, complaint: str) -> None:
    container = ContainerConfig(image=image, runtime=runtime, binds=binds)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=re.escape(complaint)):
        container_prefix(container, [], path)


def test_podman_builds_and_runs_the_env_inside_a_fixed_image(site: Site, first: First) -> None:
    podman = require("podman", "apt-get install podman")
    uv = first[0].actions[0].split(" ", 1)[1]  # the image must run the host root's uv as well
    build_python_image(IMAGE, site.dir / "image", extra_binaries=(uv,))
    try:
        pod = site.board.on("pod").transport
        inside = provision_host(site.config, "pod", pod, project=site.project)
        assert inside.installed and inside.key != first[0].key
        assert [a.split()[0] for a in inside.actions] == ["env-create", "deps-install"]
        again = provision_host(site.config, "pod", pod, project=site.project)
        assert not again.installed and again.key == inside.key
        container = site.config.containers["img"]
        argv = [*container_prefix(container, [site.root], inside.env_dir, workdir=site.root,
                                  env_names=["PATH"]),
                inside.python, "-c", "import os, six, mainboard.bridges.provision as p; "
                "print(six.__version__, os.path.exists('/etc/debian_version'), os.getcwd())"]
        done = site.board.on("pod").run(argv, check=True, timeout=120)
        version, host_os_visible, cwd = done.stdout.split(None, 2)
        assert version == "1.16.0" and host_os_visible == "False" and cwd.strip() == site.root
        assert argv[:3] == ["podman", "run", "--rm"] and IMAGE in argv
    finally:
        site.board.on("pod").run([podman, "rmi", "--force", IMAGE])
