"""String tier: the one job-script template as each bridge renders it (no command is run).

Bridges sit on a transport that fails the test if used, with absolute roots so nothing
needs resolving on a host. Scripts are checked line by line, re-parsed with shlex to
prove hostile values stay single quoted words, and syntax-checked with ``bash -n``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from mainboard.bridges import bridge_for
from mainboard.bridges.base import Bridge
from mainboard.bridges.jobscript import JobPaths
from mainboard.bridges.jobspec import JobSpec
from mainboard.config import ContainerConfig, HostConfig, LocalHost, PbsHost, SlurmHost, SshHost
from mainboard.errors import UserError
from tests.support.bridge_helpers import NoTraffic

HOSTILE = "a'; echo pwned $(touch /tmp/mb-pwned) `id` \"q\" x"
ROOT = "/srv/mb root/it's $(x)"
UID = "20250101-120000-job-abcdef"
KINDS = {"local": LocalHost(), "ssh": SshHost(host="box.example"),
         "slurm": SlurmHost(), "pbs": PbsHost()}


def bridge(kind: str, host: HostConfig | None = None, root: str = ROOT,
           container: ContainerConfig | None = None) -> Bridge:
    return bridge_for(f"{kind}-host", host or KINDS[kind], NoTraffic(), root=root,
                      container=container)


def render(b: Bridge, **params: object) -> str:
    spec = JobSpec.from_params({"command": "true", **params})
    return b.render_script(spec, JobPaths(b.job_dir(UID)), UID)


def headers(script: str, prefix: str) -> list[str]:
    return [line[len(prefix) + 1:] for line in script.splitlines() if line.startswith(prefix)]


def line_with(script: str, start: str) -> str:
    found = [line for line in script.splitlines() if line.startswith(start)]
    assert len(found) == 1, f"one line starting {start!r} expected in:\n{script}"
    return found[0]


def bash_syntax_ok(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


FULL = {"walltime": "1:30:00", "mem_gb": 2.5, "cpus": 4, "gpus": 2, "queue": "gpu",
        "account": "proj1", "retire_before": 300, "retire_signal": "USR1",
        "extra": ["--constraint=a100"]}


def test_slurm_header_lines() -> None:
    script = render(bridge("slurm"), name="fit run", **FULL)
    assert headers(script, "#SBATCH") == [
        "-J fit_run", "-t 1:30:00", "--mem=2560M", "-c 4", "--gres=gpu:2", "-p gpu",
        "-A proj1", "-N 1", "--signal=B:USR1@300", "--constraint=a100"]
    assert script.startswith("#!/bin/bash\n#SBATCH -J fit_run\n")
    assert 'export MAINBOARD_JOB_ID="${SLURM_JOB_ID:-}"' in script
    bash_syntax_ok(script)


def test_slurm_walltime_over_a_day_and_defaults_only() -> None:
    assert headers(render(bridge("slurm"), walltime="1d"), "#SBATCH") == [
        "-J job", "-t 1-00:00:00", "-N 1"]


def test_pbs_header_lines() -> None:
    script = render(bridge("pbs"), name="fit run", **{**FULL, "extra": ["-l place=scatter"]})
    assert headers(script, "#PBS") == [
        "-N fit_run", "-l walltime=01:30:00", "-l select=1:ncpus=4:mem=2560mb:ngpus=2",
        "-q gpu", "-A proj1", "-l place=scatter"]
    assert 'export MAINBOARD_JOB_ID="${PBS_JOBID:-${SLURM_JOB_ID:-}}"' in script
    bash_syntax_ok(script)


def test_pbs_walltime_hours_past_a_day_and_whole_gigabytes() -> None:
    assert headers(render(bridge("pbs"), walltime="30h", mem_gb=8, nodes=2), "#PBS") == [
        "-N job", "-l walltime=30:00:00", "-l select=2:mem=8gb"]


@pytest.mark.parametrize("kind", ["local", "ssh"])
def test_process_hosts_have_no_headers_and_enforce_walltime_in_the_script(kind: str) -> None:
    script = render(bridge(kind), walltime=120, retire_before=30, retire_signal="USR2")
    assert not any(line.startswith(("#SBATCH", "#PBS")) for line in script.splitlines())
    assert f"export MAINBOARD_JOB_ID={UID}" in script
    watchdogs = [line for line in script.splitlines() if line.startswith("( sleep")]
    assert watchdogs == [
        '( sleep 90; kill -USR2 "-$_mb_child" ) >/dev/null 2>&1 &',
        '( sleep 120; : > "$_mb_dir/timeout"; kill -TERM "-$_mb_child"; sleep 10; '
        'kill -KILL "-$_mb_child" ) >/dev/null 2>&1 &']
    bash_syntax_ok(script)


def test_schedulers_leave_walltime_to_the_scheduler() -> None:
    slurm = render(bridge("slurm"), walltime=120, retire_before=30)
    pbs = render(bridge("pbs"), walltime=120, retire_before=30)
    assert "( sleep" not in slurm  # SLURM signals itself (--signal), and kills at walltime
    assert "#SBATCH --signal=B:INT@30" in slurm  # JobSpec's default: Celery's warm shutdown
    assert [ln for ln in pbs.splitlines() if ln.startswith("( sleep")] == [
        '( sleep 90; kill -INT "-$_mb_child" ) >/dev/null 2>&1 &']  # PBS: retire only


@pytest.mark.parametrize("kind", list(KINDS))
def test_hostile_name_command_env_path_and_root_stay_single_words(kind: str) -> None:
    script = render(bridge(kind), name=HOSTILE, command=HOSTILE, env={"MB_X": HOSTILE},
                    workdir=f"sub/{HOSTILE}", path=[f"/opt/{HOSTILE}/bin"])
    assert shlex.split(line_with(script, "export MAINBOARD_JOB_NAME="))[1] == \
        f"MAINBOARD_JOB_NAME={HOSTILE}"
    assert shlex.split(line_with(script, "export MB_X="))[1] == f"MB_X={HOSTILE}"
    assert shlex.split(line_with(script, "_mb_dir="))[0] == \
        f"_mb_dir={ROOT}/.mainboard/jobs/{UID}"
    assert shlex.split(line_with(script, "cd -- ")) == ["cd", "--", f"{ROOT}/sub/{HOSTILE}"]
    runner = shlex.split(line_with(script, "/bin/bash -c "))
    # the path goes first again inside bash -c (an rc file read under sshd may reorder PATH)
    first = f"export PATH={shlex.quote(f'/opt/{HOSTILE}/bin')}:\"$PATH\"; "
    assert runner == ["/bin/bash", "-c", first + HOSTILE, "<", "/dev/null", "&"]
    path_line = line_with(script, "export PATH=")
    assert path_line.endswith(':"$PATH"')
    assert shlex.split(path_line.removesuffix(':"$PATH"'))[1] == f"PATH=/opt/{HOSTILE}/bin"
    for header in headers(script, "#SBATCH") + headers(script, "#PBS"):
        assert not set(header) & set("'\";$`()"), header  # names are reduced to safe characters
    bash_syntax_ok(script)


def test_host_env_names_are_checked_too() -> None:
    with pytest.raises(UserError, match="environment variable name 'X; touch y' is not valid"):
        render(bridge("slurm", SlurmHost(env={"X; touch y": "1"})))


def test_argv_command_is_quoted_word_by_word() -> None:
    script = render(bridge("local"), command=["python3", "-c", "print('hi')", HOSTILE])
    assert shlex.split(line_with(script, "python3 ")) == [
        "python3", "-c", "print('hi')", HOSTILE, "<", "/dev/null", "&"]


def test_module_lines_load_each_module_quoted_before_the_exports() -> None:
    host = SlurmHost(modules=["gcc/12.2", "x; rm -rf /"])
    script = render(bridge("slurm", host), env={"OMP_NUM_THREADS": "4"})
    lines = script.splitlines()
    loads = [ln for ln in lines if ln.startswith("module load")]
    assert loads == ["module load gcc/12.2", "module load 'x; rm -rf /'"]
    assert lines.index("set +u") < lines.index(loads[0]) < lines.index("set -u")
    assert lines.index("set -u") < lines.index("export OMP_NUM_THREADS=4")
    assert "if ! command -v module >/dev/null 2>&1; then" in script
    bash_syntax_ok(script)


BINDS = ["/data:/data:ro", "/scratch"]


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_and_singularity_exec_with_binds(runtime: str) -> None:
    image = "/images/worker v1.sif"
    box = ContainerConfig(image=image, runtime=runtime, binds=BINDS)
    script = render(bridge("slurm", container=box), command=HOSTILE)
    runner = shlex.split(line_with(script, f"{runtime} exec"))
    assert runner == [runtime, "exec", "--bind", "/data:/data:ro", "--bind", "/scratch",
                      "--bind", ROOT, "--pwd", ROOT, image, "/bin/sh", "-c", HOSTILE,
                      "<", "/dev/null", "&"]
    bash_syntax_ok(script)


def test_podman_run_with_volumes_env_and_host_network() -> None:
    box = ContainerConfig(image="docker.io/library/python:3.12", runtime="podman", binds=BINDS)
    script = render(bridge("pbs", container=box), command=["python3", "-m", "worker"],
                    env={"MB_X": HOSTILE}, workdir="/work")
    runner = shlex.split(line_with(script, "podman run"))
    names = ["MAINBOARD_JOB_ID", "MAINBOARD_JOB_DIR", "MAINBOARD_JOB_NAME", "MAINBOARD_ATTEMPT",
             "MAINBOARD_ROOT", "MB_X"]
    assert runner == ["podman", "run", "--rm", "--network", "host",
                      "-v", "/data:/data:ro", "-v", "/scratch:/scratch", "-v", f"{ROOT}:{ROOT}",
                      "-w", "/work",
                      *[arg for name in names for arg in ("-e", name)],
                      "docker.io/library/python:3.12", "python3", "-m", "worker",
                      "<", "/dev/null", "&"]
    assert HOSTILE not in line_with(script, "podman run")  # values pass by name, not on argv
    bash_syntax_ok(script)


def test_script_records_exit_code_and_forwards_signals_to_the_command_group() -> None:
    script = render(bridge("slurm"))
    lines = script.splitlines()
    assert lines.index("trap _mb_finish EXIT") < lines.index("set -m")
    assert 'mv -f "$_mb_dir/exit_code.tmp" "$_mb_dir/exit_code"; } 2>/dev/null || true' in script
    assert 'for _mb_sig in TERM INT HUP USR1 USR2; do trap "_mb_forward $_mb_sig" "$_mb_sig"; done' \
        in script
    assert lines[lines.index("set -m") + 2] == "_mb_child=$!"
    assert lines[-1] == 'exit "$_mb_code"'


def test_pbs_refuses_a_root_its_wrappers_would_re_parse() -> None:
    b = bridge("pbs")
    with pytest.raises(UserError, match="plain absolute path"):
        b.submit_text(JobPaths(b.job_dir(UID)))
    plain = bridge("pbs", root="/srv/mb")
    assert shlex.split(plain.submit_text(JobPaths(plain.job_dir(UID)))) == [
        "qsub", "-o", f"/srv/mb/.mainboard/jobs/{UID}/stdout",
        "-e", f"/srv/mb/.mainboard/jobs/{UID}/stderr", f"/srv/mb/.mainboard/jobs/{UID}/job.sh"]


def test_slurm_submit_passes_output_paths_as_quoted_flags_with_percent_doubled() -> None:
    b = bridge("slurm", root="/srv/50% off'; x")
    jobs = f"/srv/50% off'; x/.mainboard/jobs/{UID}"
    assert shlex.split(b.submit_text(JobPaths(b.job_dir(UID)))) == [
        "sbatch", "--parsable", "-o", f"{jobs.replace('%', '%%')}/stdout",
        "-e", f"{jobs.replace('%', '%%')}/stderr", f"{jobs}/job.sh"]


def test_registry_picks_the_bridge_by_kind() -> None:
    """Each host kind gets its bridge; a provider host runs jobs on its rental over ssh."""
    from mainboard.config import ProviderHost
    names = {kind: type(bridge(kind)).__name__ for kind in KINDS}
    assert names == {"local": "LocalBridge", "ssh": "RemoteBridge", "slurm": "SlurmBridge",
                     "pbs": "PbsBridge"}
    provider = bridge_for("gpu", ProviderHost(provider="vast"), NoTraffic())
    assert provider.kind == "provider"


def test_importing_bridges_does_not_import_paramiko_or_scheduler_modules() -> None:
    code = ("import sys, mainboard.bridges; "
            "print(sorted(m for m in sys.modules if m == 'paramiko' or "
            "m.startswith('mainboard.bridges.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
