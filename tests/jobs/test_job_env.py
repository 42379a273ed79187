"""Environments for every job (issue 14): ``[python.deps]`` provisioned on the target by
``submit`` and ``batch run`` over a real sshd and a real SLURM (also inside a podman image
on a bound host path), reused when unchanged and timed into ``env.provisioned`` receipts; ``[deps]`` pins refusing a submit in one line
before anything starts; ``modules`` tables loaded first in the job script, hostile names
kept literal (run by bash against a ``module`` command that records its arguments).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.batch.plan import estimate
from mainboard.batch.run import load_batch
from mainboard.batch.run import run as run_batch
from mainboard.board import Board
from mainboard.bridges import bridge_for
from mainboard.bridges.jobscript import JobPaths
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.pins import require_pins
from mainboard.bridges.provision import env_receipts, manifest_digest
from mainboard.bridges.provision_driver import tools_dir
from mainboard.bridges.transport import LocalTransport
from mainboard.config import load_config, loads_config
from mainboard.errors import PinNotMet
from mainboard.jobs.job import Job
from mainboard.jobs.timing import EnvBuild, env_build, env_builds, fit, setup_samples, with_env
from mainboard.receipts import EnvProvisioned
from mainboard.study.run import run_study
from tests.support.batch_helpers import invoke
from tests.support.boards import ssh_host, write_config
from tests.support.container_image import build_python_image, podman_shim
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.services import SlurmCluster, SshServer, require
from tests.support.workspace import toml_tables

pytestmark = pytest.mark.live
IMAGE = "localhost/mainboard-test-jobenv:1"  # its own tag: tests/bridges/test_provision.py removes its
PROBE = 'python -c "import os, six; print(six.__version__, os.environ[\'VIRTUAL_ENV\'])"'


@dataclass
class Site:
    """A workspace declaring six==1.16.0 with an ssh host and a SLURM host sharing one root
    (both are this machine: uv is installed there once)."""

    config: Path
    board: Board
    root: Path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, sshd_server: SshServer,
         slurm_cluster: SlurmCluster) -> Iterator[Site]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("jobenv")
    (tmp / "ws").mkdir()
    root = tmp / "host root"
    tools = tmp / "tools"  # uv on the hosts' PATH (installing it is tests/bridges/test_provision.py's)
    tools.mkdir()
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    assert uv, "uv is a test dependency (pyproject.toml [test])"
    (tools / "uv").symlink_to(uv)
    path = f"{os.environ['PATH']}:{tools}"
    shim = podman_shim(tmp / "podman-shim", shutil.which("podman") or "/usr/bin/podman")
    # `module` as Lmod makes it, a shell function (bash reads BASH_ENV at start): `module load
    # podman/4` puts the container runtime on PATH, so every use of it must load modules first.
    init = tmp / "modules-init.sh"
    init.write_text(f'module() {{ printf "%s %s\\n" "$0" "$*" >> {tmp}/modules.log\n'
                    f'  [ "$1 $2" = "load podman/4" ] && PATH={shim}:$PATH && export PATH; }}\n')
    config = write_config(tmp / "ws", {
        "edge": ssh_host(sshd_server, sshd_server.known_hosts(tmp / "kh"), root=str(root)),
        "hpc": {"kind": "slurm", "partition": slurm_cluster.partition, "root": str(root)},
        "pod": {"kind": "slurm", "partition": slurm_cluster.partition, "root": str(root),
                "container": "img", "modules": ["podman/4"]},  # type: ignore[dict-item]
    }, extra=toml_tables({"deps": {"python": ">=3.8"}, "python.deps": {"six": "1.16.0"},
                          "containers.img": {"image": IMAGE, "runtime": "podman",
                                             "binds": ["/etc/ssl/certs:/etc/ssl/certs:ro"]},
                          "hosts.edge.env": {"PATH": path},
                          "hosts.hpc.env": {"SLURM_CONF": str(slurm_cluster.conf), "PATH": path},
                          "hosts.pod.env": {"SLURM_CONF": str(slurm_cluster.conf),
                                            "BASH_ENV": str(init)}}))
    with Board(config) as board:
        yield Site(config, board, root)


def _built(site: Site) -> list[EnvProvisioned]:
    lines = env_receipts(site.board.config.state_dir).read("env.provisioned")
    return [line for line in lines if isinstance(line, EnvProvisioned)]


def test_submit_runs_in_the_provisioned_env_and_reuses_it(site: Site) -> None:
    first = site.board.on("edge").submit(PROBE, name="probe")
    assert first.wait(timeout=120, poll=0.3) is JobState.COMPLETED, first.logs(stream="stderr")
    key = first.view().submitted.env_key
    assert key and first.logs() == f"1.16.0 {site.root}/.mainboard/envs/{key}\n"
    built = _built(site)
    assert [(b.host, b.kind, b.key, b.purpose) for b in built] == [("edge", "ssh", key, "job")]
    assert built[0].seconds > 0 and "deps-install 1" in built[0].actions
    again = site.board.on("edge").submit(PROBE, name="probe")  # unchanged set: reused
    assert again.wait(timeout=60, poll=0.3) is JobState.COMPLETED
    assert again.view().submitted.env_key == key and len(_built(site)) == 1


def test_batch_on_slurm_provisions_each_target_once(site: Site) -> None:
    before = _built(site)
    fleet = site.config.parent / "fleet.toml"
    fleet.write_text("[defaults]\ntarget = \"hpc\"\nwalltime = \"5m\"\n"
                     + "".join(f"[[jobs]]\nname = \"j{i}\"\ncommand = {json.dumps(PROBE)}\n"
                               for i in range(2)))
    view = run_batch(site.board, fleet)
    jobs = [Job(site.board, view.dispatched[name].job) for name in ("j0", "j1")]
    assert [job.wait(timeout=120, poll=0.3) for job in jobs] == [JobState.COMPLETED] * 2
    keys = {job.view().submitted.env_key for job in jobs}
    assert len(keys) == 1 and None not in keys
    key = keys.pop()
    assert [job.logs() for job in jobs] == [f"1.16.0 {site.root}/.mainboard/envs/{key}\n"] * 2
    new = [(b.host, b.key) for b in _built(site)[len(before):]]
    # one build for the target, or none when the ssh host's env (same root, same python) fits
    assert new == ([] if key in {b.key for b in before} else [("hpc", key)])


def test_a_container_hosts_job_runs_in_its_env_inside_the_fixed_image(
        site: Site, tmp_path: Path) -> None:
    """A SLURM host with `container`: submit builds the env inside the image, on the host
    root bound at the same path (the image is never rebuilt), and runs the job in it there."""
    podman = require("podman", "apt-get install podman")
    uv = os.path.realpath(shutil.which("uv", path=os.path.dirname(sys.executable)) or "uv")
    tools = Path(tools_dir(str(site.root))) / "pkgs" / "bin"
    tools.mkdir(parents=True, exist_ok=True)  # the root's own uv, as provisioning installs it
    shutil.copy2(uv, tools / "uv")
    build_python_image(IMAGE, tmp_path / "image", extra_binaries=(uv,))
    before = _built(site)
    try:
        job = site.board.on("pod").submit(
            PROBE + "; test -e /etc/debian_version || echo in-image", name="boxed",
            walltime="5m")
        assert job.wait(timeout=180, poll=0.5) is JobState.COMPLETED, job.logs(stream="stderr")
    finally:
        subprocess.run([podman, "rmi", "--force", IMAGE], capture_output=True, timeout=120)
    key = job.view().submitted.env_key
    assert key and job.logs() == f"1.16.0 {site.root}/.mainboard/envs/{key}\nin-image\n"
    new = [(b.host, b.key, b.manifest) for b in _built(site)[len(before):]]
    assert new == [("pod", key, manifest_digest(site.board.config, "pod"))]
    assert key not in {b.key for b in before}  # the image is part of the env's identity
    # Who loaded the module ($0): provisioning's check and build (which run podman), then
    # the job script under SLURM (which runs podman too). The python pin is provisioned
    # (inside the image), not probed: no [deps] probe runs.
    who = [line.rsplit(" load ", 1) for line in
           (site.root.parent / "modules.log").read_text().splitlines()]
    assert all(module == "podman/4" for _, module in who)
    assert [caller.rsplit("/", 1)[-1] for caller, _ in who] == [
        "mainboard-modules", "mainboard-modules", "slurm_script"]


def test_study_prepares_each_targets_env_once_and_estimates_learn_the_build(
        site: Site) -> None:
    """Two study runs on one ssh target: the env is prepared before the first and handed to
    both (no job spends time on it: no "env" phase), at most one build receipt, carrying the
    set's manifest digest; the estimate then sees it built, a changed set sees it to build
    with the host's timed builds added to the job setup."""
    before = _built(site)
    study = site.config.parent / "envstudy.toml"
    study.write_text("[study]\nname = \"envs\"\n[defaults]\ntarget = \"edge\"\n"
                     "runtime-s = 30\n"
                     + "".join(f"[[jobs]]\nname = \"s{i}\"\ncommand = {json.dumps(PROBE)}\n"
                               f"params = {{ i = {i} }}\n" for i in range(2)))
    _study, outcomes = run_study(site.board, study)
    assert [o.action for o in outcomes] == ["submitted"] * 2, outcomes
    jobs = [Job(site.board, o.job or "") for o in outcomes]
    assert [job.wait(timeout=120, poll=0.3) for job in jobs] == [JobState.COMPLETED] * 2
    views = [job.view().submitted for job in jobs]
    assert len({v.env_key for v in views}) == 1 and views[0].env_key
    assert [sorted(v.phases) for v in views] == [["submit", "sync"]] * 2
    new = [b for b in _built(site)[len(before):] if b.host == "edge"]
    assert len(new) <= 1
    digest = manifest_digest(site.board.config, "edge")
    built = [b for b in _built(site) if b.host == "edge"]
    assert built and all(b.manifest == digest for b in built)
    (now,) = estimate(site.board, load_batch(study, site.board.config))[:1]
    setup = fit(setup_samples(site.board.config.state_dir)["edge"])
    assert (now.env.state, now.setup) == ("built", setup) and setup.samples >= 2
    changed = site.board.config.model_copy(
        update={"python": site.board.config.python.model_copy(update={"deps": ["six==1.15.0"]})})
    later = env_build(changed, "edge", env_builds(site.board.config.state_dir))
    timed = fit([b.seconds for b in built])
    assert later == EnvBuild("to build", timed)
    assert with_env(setup, later).p50_s == pytest.approx((setup.p50_s or 0) + (timed.p50_s or 0))


def test_unmet_pin_refuses_submit_in_one_line_and_compute_says_so(
        tmp_path: Path, sshd_server: SshServer) -> None:
    """A python pin no interpreter meets is provisioned, and refused when none can be had."""
    root = tmp_path / "root"
    downloads = tmp_path / "downloads.json"
    downloads.write_text("{}")  # a mirror that offers nothing: no network tried
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    assert uv
    config = write_config(tmp_path, {"edge": ssh_host(
        sshd_server, sshd_server.known_hosts(tmp_path / "kh"), root=str(root))},
        extra=toml_tables({"deps": {"python": ">=99", "bash": ">=3"},
                           "python": {"downloads": str(downloads)},
                           "hosts.edge.env": {"PATH": f"{os.path.dirname(uv)}:/usr/bin:/bin"}}))
    done = invoke(config, "submit", "--on", "edge", "--", "touch", str(tmp_path / "started"))
    assert done.exit_code == 2 and done.stdout == ""
    error = [line for line in done.stderr.splitlines() if line.startswith("mainboard: ")]
    assert error == [
        "mainboard: error: edge: python >=99 is not available: tried uv python install "
        f"(UV_PYTHON_DOWNLOADS_JSON_URL={downloads}): No download found for request: "
        "cpython->=99-linux-x86_64-gnu; set [python] mirror or downloads in mainboard.toml, "
        "or change [deps] python"], done.stderr
    fleet = tmp_path / "fleet.toml"  # a batch: the target's jobs are refused, none sent
    fleet.write_text(f'[[jobs]]\ntarget = "edge"\ncommand = "touch {tmp_path}/started"\n')
    with Board(config) as board:
        view = run_batch(board, fleet)
    (failed,) = view.failed.values()
    assert failed.outcome == "refused" and "python >=99 is not available" in \
        failed.reason and not view.dispatched
    assert not (tmp_path / "started").exists() and not (root / ".mainboard" / "jobs").exists()
    assert not (tmp_path / ".mainboard" / "jobs").exists()
    listed = invoke(config, "compute", "--json")
    row = {r["name"]: r for r in json.loads(listed.stdout)}["edge"]
    version = ".".join(map(str, sys.version_info[:3]))  # the host is this machine
    assert (row["access"], row["reason"]) == (
        "not-set-up", f'python {version} does not satisfy [deps] python = ">=99" and none is '
        "installed under the root; `mainboard env build --on edge` installs one")


def test_tool_pins_are_asked_of_the_host(tmp_path: Path, sshd_server: SshServer) -> None:
    hostile = "no-such-tool_x"
    config = load_config(write_config(tmp_path, {"edge": ssh_host(
        sshd_server, sshd_server.known_hosts(tmp_path / "kh"))},
        extra=toml_tables({"deps": {"bash": ">=3", hostile: "*", "redis-server":
                                    "apt:redis-server"}})))
    with Board(config.path) as board:
        with pytest.raises(PinNotMet) as info:
            require_pins(config, "edge", config.host("edge"), board.on("edge").transport)
    assert str(info.value).startswith(f"edge: {hostile} not found (pinned {hostile} * in [deps]);")
    assert "bash" not in str(info.value) and "redis-server" not in str(info.value)


@pytest.mark.parametrize("kind", ["pbs", "slurm"])
def test_module_table_is_loaded_first_with_hostile_names_literal(tmp_path: Path,
                                                                 kind: str) -> None:
    pwned = tmp_path / "PWNED"
    config = loads_config(
        f'[hosts.miyabi-g]\nkind = "{kind}"\n'
        f"modules = {{ singularity = \"4.2.1\", \"x'; touch {pwned}; '\" = \"1 $(touch {pwned})\" }}\n")
    host = config.host("miyabi-g")
    assert host.modules == ["singularity/4.2.1", f"x'; touch {pwned}; '/1 $(touch {pwned})"]
    bridge = bridge_for("miyabi-g", host, LocalTransport(), root=str(tmp_path / "root"))
    job = JobPaths(str(tmp_path / "job"))
    script = bridge.render_script(bridge.prepare(command="echo ran"), job, "uid-1")
    lines = script.splitlines()
    loads = [i for i, line in enumerate(lines) if line.startswith("module load ")]
    assert [shlex.split(lines[i])[2] for i in loads] == host.modules
    body = [i for i, line in enumerate(lines) if line.startswith(("export ", "cd ", "mkdir "))]
    assert max(loads) < min(body)  # before anything of the job: env, directory, command
    fake = tmp_path / "bin"
    fake.mkdir()
    module = fake / "module"  # a `module` command that records each argument on a line
    module.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done >> {tmp_path}/log\n')
    module.chmod(module.stat().st_mode | stat.S_IEXEC)
    Path(job.job_dir).mkdir()
    Path(job.script).write_text(script)
    subprocess.run(["bash", job.script], env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
                   check=True, timeout=30)
    assert (tmp_path / "log").read_text().splitlines() == [
        "load", host.modules[0], "load", host.modules[1]]
    assert Path(job.exit_code).read_text() == "0\n" and not pwned.exists()
