"""Environments that are built, not checked (issue 27 items 1-2): ``[deps] python`` becomes a
uv-managed interpreter installed from a local mirror (``tests/support/pymirror.py``: this machine's
CPython repackaged, offline), ``[python.deps]`` installed on it from a wheel made here, on
the local host (``mainboard run``, ``Board().run``) and on a real sshd host; the second run
builds nothing; ``mainboard env status|build|remove``; bad input in one line, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from tests.support.batch_helpers import invoke
from tests.support.boards import ssh_host, write_config
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.pymirror import PythonMirror, make_mirror, tiny_wheel
from tests.support.services import RedisServer, SlurmCluster, SshServer
from tests.support.workspace import toml_tables

pytestmark = pytest.mark.live
PROBE = ("import sys, mbtinyenv; print(sys.version.split()[0]); print(mbtinyenv.__version__); "
         "print(sys.base_prefix)")


@dataclass
class Offline:
    """The mirror, and the env every host needs to build with no index: uv on PATH, the
    wheel directory as the only source of packages."""

    mirror: PythonMirror
    env: dict[str, str]


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Offline:
    tmp = tmp_path_factory.mktemp("pymirror")
    wheels = tmp / "wheels"
    tiny_wheel(wheels)
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    assert uv, "uv is a dependency of mainboard"
    return Offline(make_mirror(tmp / "mirror"), {
        "PATH": f"{os.path.dirname(uv)}:{os.environ['PATH']}", "UV_FIND_LINKS": str(wheels),
        "UV_NO_INDEX": "1", "UV_OFFLINE": "1"})


def workspace(directory: Path, offline: Offline, python: str,
              hosts: dict[str, dict[str, object]] | None = None,
              env: dict[str, str] | None = None) -> Path:
    """A mainboard.toml declaring ``[deps] python`` and one package, every host offline
    (``env`` added to each host's)."""
    declared = {"local": {"kind": "local"}, **(hosts or {})}
    # only-managed: the host's own python (the same minor here) never satisfies the pin, as
    # on a host whose PATH lacks it; the interpreter has to come from the mirror.
    tables = {"deps": {"python": python}, "python": {"downloads": str(offline.mirror.downloads),
                                                     "preference": "only-managed"},
              "python.deps": {"mbtinyenv": "0.1"}}
    tables.update({f"hosts.{name}.env": {**offline.env, **(env or {})} for name in declared})
    return write_config(directory, declared, extra=toml_tables(tables))  # type: ignore[arg-type]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _access(config: Path) -> tuple[str, str | None]:
    rows = {r["name"]: r for r in json.loads(invoke(config, "compute", "--json").stdout)}
    return rows["local"]["access"], rows["local"]["reason"]


def _envs(root: Path) -> list[str]:
    envs = root / ".mainboard" / "envs"
    return sorted(p.name for p in envs.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if envs.exists() else []


def test_local_run_gets_the_declared_python_from_the_mirror_then_reuses_it(
        tmp_path: Path, offline: Offline) -> None:
    hostile = "it's a $HOME `root`; x"  # the env's path reaches shell text quoted
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*",
                       {"local": {"kind": "local", "root": hostile}})
    root = tmp_path / hostile
    first = invoke(config, "run", "--", "python", "-c", PROBE)
    assert first.exit_code == 0, first.stderr
    version, tiny, base = _lines(first.stdout)
    assert (version, tiny) == (offline.mirror.version, "0.1")
    assert Path(base).is_relative_to(root / ".mainboard" / "pythons")  # uv-managed, ours
    assert "mainboard: env built: local " in first.stderr
    log = (root / ".mainboard" / "envs" / "provision.log").read_text()
    assert "python-install" in log and "deps-install" in log
    again = invoke(config, "run", "--", f"python -c {json.dumps(PROBE)}")  # shell text too
    assert again.exit_code == 0 and _lines(again.stdout) == [version, tiny, base]
    assert "mainboard: env reused: local " in again.stderr and "$ " not in again.stderr
    assert (root / ".mainboard" / "envs" / "provision.log").read_text() == log
    with Board(config) as board:  # the library runs there too
        done = board.run(["python", "-c", PROBE])
    assert _lines(done.stdout) == [version, tiny, base]


def test_env_status_build_remove(tmp_path: Path, offline: Offline) -> None:
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*")
    before = json.loads(invoke(config, "env", "status", "--json").stdout)
    assert (before["declared_python"], before["built"], before["envs"]) == (
        f"=={offline.mirror.minor}.*", False, [])
    assert _access(config) == ("not-set-up", f"no python =={offline.mirror.minor}.* ([python] "
                               "preference = only-managed) and none is installed under the "
                               "root; `mainboard env build --on local` installs one")
    built = invoke(config, "env", "build", "--json")
    assert built.exit_code == 0, built.stderr
    result = json.loads(built.stdout)
    assert result["state"] == "built" and result["python_version"] == offline.mirror.version
    status = json.loads(invoke(config, "env", "status", "--json").stdout)
    assert status["built"] and status["key"] == result["key"]
    assert Path(status["interpreter"]).is_relative_to(tmp_path / ".mainboard" / "pythons")
    assert [e["key"] for e in status["envs"]] == [result["key"]]
    assert json.loads(invoke(config, "env", "build", "--json").stdout)["state"] == "reused"
    assert _access(config) == ("here", None)
    removed = invoke(config, "env", "remove", "--json")
    assert json.loads(removed.stdout) == {"host": "local", "removed": [result["key"]]}
    assert _envs(tmp_path) == []
    assert json.loads(invoke(config, "env", "status", "--json").stdout)["built"] is False


def test_default_preference_builds_on_a_host_python_that_fits(
        tmp_path: Path, offline: Offline) -> None:
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*")
    text = config.read_text().replace('preference = "only-managed"', 'preference = "managed"')
    config.write_text(text)
    built = invoke(config, "env", "build", "--json")
    assert built.exit_code == 0, built.stderr
    result = json.loads(built.stdout)
    assert not any(a.startswith("python-install") for a in result["actions"])
    assert not (tmp_path / ".mainboard" / "pythons").exists()  # nothing downloaded


def test_a_python_no_mirror_has_is_one_line_exit_2_nothing_run_or_left(
        tmp_path: Path, offline: Offline) -> None:
    config = workspace(tmp_path, offline, "==3.99.*")
    marker = tmp_path / "started"
    done = invoke(config, "run", "--", "touch", str(marker))
    assert done.exit_code == 2 and done.stdout == ""
    error = [line for line in _lines(done.stderr) if line.startswith("mainboard: error:")]
    assert error == [
        "mainboard: error: local: python ==3.99.* is not available: tried uv python install "
        f"(UV_PYTHON_DOWNLOADS_JSON_URL={offline.mirror.downloads}): No download found for "
        "request: cpython-==3.99.*-linux-x86_64-gnu; set [python] mirror or downloads in "
        "mainboard.toml, or change [deps] python"], done.stderr
    assert not marker.exists() and _envs(tmp_path) == []
    assert not list((tmp_path / ".mainboard" / "pythons").glob("cpython-3.99*"))


def test_a_malformed_python_spec_is_one_line_exit_2(tmp_path: Path, offline: Offline) -> None:
    config = workspace(tmp_path, offline, ">=3.x")
    done = invoke(config, "env", "build")
    assert done.exit_code == 2 and done.stdout == ""
    assert _lines(done.stderr) == [
        f"mainboard: error: {config}:5: deps.python: not a valid version specifier (got "
        "'>=3.x'); valid: a version specifier such as \">=3.11\", \"==4.2.*\", \">=2.9,<3\" "
        "(\"*\" or \"\" for any version), or a source note such as \"apt:redis-server\""]
    assert not (tmp_path / ".mainboard" / "envs").exists()


@pytest.mark.parametrize("table", ["conda", "pixi"])
def test_other_ecosystems_are_refused_in_one_line(tmp_path: Path, table: str) -> None:
    config = write_config(tmp_path, {}, extra=toml_tables({f"{table}.deps": {"numpy": "*"}}))
    done = invoke(config, "env", "status")
    assert done.exit_code == 2 and done.stdout == ""
    assert _lines(done.stderr) == [
        f"mainboard: error: {config}:2: {table}: [{table}] environments are not supported: "
        "environments are built by the uv backend only; valid: [python.deps] (pip "
        "requirements) on [deps] python; a conda/pixi backend would implement EnvBackend "
        "(docs/architecture.md)"]


def test_without_deps_run_is_as_before(tmp_path: Path) -> None:
    config = write_config(tmp_path, {})
    done = invoke(config, "run", "--", "python3", "-c", "import sys; print(sys.prefix)")
    assert done.exit_code == 0 and "mainboard: env" not in done.stderr
    assert not (tmp_path / ".mainboard" / "envs").exists()


@pytest.fixture
def edge(tmp_path: Path, sshd_server: SshServer) -> dict[str, dict[str, object]]:
    return {"edge": ssh_host(sshd_server, sshd_server.known_hosts(tmp_path / "kh"),
                             root=str(tmp_path / "edge root"))}


def test_ssh_host_gets_the_declared_python_from_the_mirror_then_reuses_it(
        tmp_path: Path, offline: Offline, edge: dict[str, dict[str, object]]) -> None:
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*", edge)
    first = invoke(config, "run", "--on", "edge", "--", "python", "-c", PROBE)
    assert first.exit_code == 0, first.stderr
    version, tiny, base = _lines(first.stdout)
    assert (version, tiny) == (offline.mirror.version, "0.1")
    assert Path(base).is_relative_to(tmp_path / "edge root" / ".mainboard" / "pythons")
    assert "mainboard: env built: edge " in first.stderr
    again = invoke(config, "run", "--on", "edge", "--", "python", "-c", PROBE)
    assert again.exit_code == 0 and _lines(again.stdout) == [version, tiny, base]
    assert "mainboard: env reused: edge " in again.stderr
    assert _envs(tmp_path) == []  # the local host was not touched


def test_jobs_on_local_and_slurm_run_in_the_declared_env(
        tmp_path: Path, offline: Offline, slurm_cluster: SlurmCluster) -> None:  # noqa: F811
    hpc_root = tmp_path / "hpc root"
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*",
                       {"hpc": {"kind": "slurm", "partition": slurm_cluster.partition,
                                "root": str(hpc_root)}},
                       env={"SLURM_CONF": str(slurm_cluster.conf)})
    with Board(config) as board:
        for name, root in (("local", tmp_path), ("hpc", hpc_root)):
            job = board.on(name).submit(f'python -c "{PROBE}"', name="probe")
            assert job.wait(timeout=120, poll=0.3) is JobState.COMPLETED, \
                job.logs(stream="stderr")
            version, tiny, base = _lines(job.logs())
            assert (version, tiny) == (offline.mirror.version, "0.1")
            assert Path(base).is_relative_to(root / ".mainboard" / "pythons")
            assert job.view().submitted.env_key in _envs(root)


def test_unreachable_host_is_one_line_without_traceback(tmp_path: Path,
                                                        offline: Offline) -> None:
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*",
                       {"edge": {"kind": "ssh", "host": "127.0.0.1", "port": 1,
                                 "connect_timeout": 2.0}})
    for verb in ("status", "build", "remove"):
        done = invoke(config, "env", verb, "--on", "edge")
        assert done.exit_code == 1 and done.stdout == ""
        assert _lines(done.stderr) == [
            "mainboard: error: edge: cannot reach 127.0.0.1:1: connection refused"]


def test_status_in_words(tmp_path: Path, offline: Offline) -> None:
    config = workspace(tmp_path, offline, f"=={offline.mirror.minor}.*")
    assert invoke(config, "env", "build").exit_code == 0
    shown = _lines(invoke(config, "env", "status").stdout)
    key = _envs(tmp_path)[0]
    assert shown[:4] == [
        "host: local", f"declared python: =={offline.mirror.minor}.*",
        f"interpreter: {next((tmp_path / '.mainboard' / 'pythons').glob('cpython-*'))}"
        f"/bin/python{offline.mirror.minor}",
        f"env key: {key} (built, python {offline.mirror.version})"]
    assert shown[4].startswith(f" * {key}  python {offline.mirror.version}  ")


def test_integrate_starts_its_local_workers_inside_the_declared_env(
        tmp_path: Path, offline: Offline, redis_server: RedisServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`integrate`'s own workers run the env's python (mainboard in it, with
    `[python.deps]`): an integrand importing a package only the env has evaluates; the
    second run reuses the env. (From the workspace, as a user runs it: this checkout's
    source tree on the import path would shadow the env's mainboard.)"""
    from mainboard.config import load_config
    from mainboard.tasks.runner import integrate
    from tests.support.integration import spec

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    (tmp_path / "tinyenv_integrand.py").write_text(
        "import numpy as np\n\n\n"
        "def gauss(x):\n"
        "    import mbtinyenv  # only the declared environment has it\n"
        "    return np.exp(-5.0 * np.sum((x - 0.5) ** 2, axis=1))\n")
    index_too = {k: v for k, v in offline.env.items() if k not in ("UV_NO_INDEX", "UV_OFFLINE")}
    config = write_config(tmp_path, {"local": {"kind": "local"}}, extra=toml_tables({
        "broker": {"url": redis_server.url}, "python.deps": {"mbtinyenv": "0.1"},
        "hosts.local.env": index_too}))
    run = spec(integrand={"kind": "python", "target": "tinyenv_integrand:gauss"},
               domain={"continuous": 2}, sampler={"kind": "naive"}, name="in-env",
               stop={"max_samples": 2000}, batching={"batch_size": 1000})
    cfg = load_config(config)
    assert integrate(run, workers=1, config=cfg).samples == 2000
    envs = _envs(tmp_path)
    assert len(envs) == 1
    log = (tmp_path / ".mainboard" / "envs" / "provision.log").read_text()
    assert "deps-install" in log
    again = integrate({**run, "name": "in-env-again"}, workers=1, config=cfg)
    assert again.samples == 2000 and _envs(tmp_path) == envs
    assert (tmp_path / ".mainboard" / "envs" / "provision.log").read_text() == log
