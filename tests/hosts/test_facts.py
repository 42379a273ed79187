"""Facts: the stdlib probe on this machine, over a real loopback sshd, and every way it can fail.

Local facts are checked against independent sources (os, platform, /proc/meminfo,
lscpu, shutil); ssh facts against local facts on the fields that must agree when
the sshd runs on this same machine.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.errors import FactsError, UnknownHost
from mainboard.hosts.facts import (
    Facts,
    cache_path,
    cached_facts,
    cached_record,
    parse_facts,
    probe_facts,
    probe_source,
    summary,
    validate_facts,
)
from tests.support.boards import ssh_host, write_config
from tests.support.services import SshServer, free_port, require, unavailable
from tests.support.workspace import run_cli

HOSTILE = "hostile-python"  # plain name (hostile names are refused); its python is hostile
MUST_AGREE = ("hostname", "os", "system", "arch", "kernel", "cpu_name", "cpu_kinds", "cpu_logical",
              "cpu_physical", "memory_total", "gpus", "infiniband", "cgroup_version")


def run_probe(path_env: str, executable: str = sys.executable) -> Facts:
    """The probe as a host runs it: source on stdin of `python -I -S -` (no site-packages)."""
    done = subprocess.run([executable, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, env={"PATH": path_env, "HOME": str(Path.home())},
                          timeout=60, check=True)
    return parse_facts(done.stdout)


@pytest.fixture(scope="module")
def probe_data() -> dict[str, object]:
    """One real probe output of this machine, as decoded JSON, for the schema tests."""
    done = subprocess.run([sys.executable, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, check=True, timeout=60)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, sshd_server: SshServer) -> Path:
    """A mainboard.toml with a loopback ssh host, a hostile one, a closed port and a bad python."""
    directory = tmp_path_factory.mktemp("facts-ws")
    marker = directory / "pwned"
    known_hosts = sshd_server.known_hosts(directory / "known_hosts")
    config = write_config(directory, {
        "loop": ssh_host(sshd_server, known_hosts),
        HOSTILE: ssh_host(sshd_server, known_hosts, python=f"python3'; touch {marker}; echo '"),
        "closed": ssh_host(sshd_server, known_hosts, port=free_port()),
        "nopython": ssh_host(sshd_server, known_hosts, python="false"),
    })
    return config


# ----- the probe itself ----------------------------------------------------------------------

def test_probe_imports_only_the_standard_library() -> None:
    tree = ast.parse(probe_source())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
    modules |= {node.module.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    assert not relative
    assert {"json", "os", "subprocess"} <= modules
    assert modules <= sys.stdlib_module_names, modules - sys.stdlib_module_names


def test_probe_source_is_python36_syntax() -> None:
    """Old login nodes: 3.6 grammar, and no annotation 3.6 could not evaluate at def time."""
    source = probe_source()
    tree = ast.parse(source, feature_version=(3, 6))
    assert "from __future__ import annotations" not in source
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AnnAssign)):
            annotations = [node.returns, *(a.annotation for a in node.args.args)] \
                if isinstance(node, ast.FunctionDef) else [node.annotation]
            for annotation in filter(None, annotations):
                for part in ast.walk(annotation):
                    assert not isinstance(part, ast.BinOp), ast.unparse(annotation)  # X | None
                    if isinstance(part, ast.Subscript) and isinstance(part.value, ast.Name):
                        assert part.value.id not in {"list", "dict", "tuple", "set", "type"}
        if isinstance(node, ast.keyword):
            assert node.arg not in {"capture_output", "text"}, "subprocess options of 3.7+"


def test_probe_runs_isolated_without_site_packages() -> None:
    python3 = require("python3")
    done = subprocess.run([python3, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1  # exactly one JSON object, one line
    facts = parse_facts(done.stdout)
    assert facts.schema_version == 1 and facts.warnings == []


def _python_version(python: str) -> str | None:
    """``X.Y.Z`` of an interpreter that really runs (a pyenv shim may not), else None."""
    done = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() if done.returncode == 0 else None


def test_probe_runs_on_the_oldest_python_available() -> None:
    """The probe on the oldest interpreter here: a real 3.6/3.7 where one exists (pyenv
    builds), else the oldest python3.X on PATH. Never skipped; the 3.6 grammar check above
    covers machines without an old Python."""
    candidates = glob.glob(os.path.expanduser("~/.pyenv/versions/3.[67]*/bin/python3.[67]"))
    candidates += [p for n in ("python3.6", "python3.7", "python3") if (p := shutil.which(n))]
    candidates += glob.glob("/usr/bin/python3.[0-9]*") + [sys.executable]
    versions = {p: v for p in set(candidates) if (v := _python_version(p))}
    oldest = min(versions, key=lambda p: tuple(int(x) for x in versions[p].split(".")[:2]))
    facts = run_probe(os.environ["PATH"], oldest)
    assert facts.python.version == versions[oldest], oldest
    print(f"probe ran on {oldest} (Python {versions[oldest]})")
    assert facts.cpu_logical == os.cpu_count() and facts.warnings == []


def test_local_facts_agree_with_this_machine(tmp_path: Path) -> None:
    board = Board(write_config(tmp_path, {}))
    facts = probe_facts(board)
    assert facts.hostname == socket.gethostname()
    assert facts.kernel == platform.release() and facts.arch == platform.machine()
    assert facts.system == platform.system()
    assert facts.os == platform.freedesktop_os_release()["PRETTY_NAME"]
    assert facts.cpu_logical == os.cpu_count()
    assert facts.cpu_usable == len(os.sched_getaffinity(0))
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024
               for line in Path("/proc/meminfo").read_text().splitlines()}
    assert facts.memory_total == meminfo["MemTotal"]
    assert facts.memory_available is not None and 0 < facts.memory_available <= facts.memory_total
    lscpu = subprocess.run([require("lscpu"), "-p=core,socket"], capture_output=True, text=True,
                           check=True).stdout
    cores = {line for line in lscpu.splitlines() if line and not line.startswith("#")}
    assert facts.cpu_physical == len(cores)
    assert facts.python.version == platform.python_version()
    root = next(s for s in facts.scratch if s.path == "/")
    assert abs(root.total_bytes - shutil.disk_usage("/").total) < 1024**3
    found = {p.name: p for p in facts.pythons}
    python3 = shutil.which("python3")
    if python3:
        version = subprocess.run([python3, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()
        assert found["python3"].version == version and found["python3"].path == python3
    if not shutil.which("nvidia-smi"):
        assert facts.gpus == []
    # cached with a timestamp, and read back equal
    assert cache_path(board.config.state_dir, "local").is_file()
    assert cached_facts(board.config.state_dir, "local") == facts


# ----- schema ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d.pop("hostname"), "field hostname: Field required"),
    (lambda d: d.update(schema_version=2), "field schema_version"),
    (lambda d: d.update(memory_total="1024"), "field memory_total"),
    (lambda d: d.update(surprise=1), "field surprise: Extra inputs are not permitted"),
    (lambda d: d.update(gpus=[{"name": "x", "memory_mb": "lots", "uuid": "u", "driver": "1"}]),
     "field gpus.0.memory_mb"),
    (lambda d: d["python"].pop("version"), "field python.version"),
    (lambda d: d.update(cgroup_version=3), "field cgroup_version"),
])
def test_schema_mismatch_names_the_field(probe_data: dict, change: Callable[[dict], object],
                                         field: str) -> None:
    data = json.loads(json.dumps(probe_data))
    change(data)
    with pytest.raises(FactsError, match="do not match the facts schema") as caught:
        validate_facts(data, "gpu-box")
    assert field in str(caught.value) and "gpu-box" in str(caught.value)


@pytest.mark.parametrize(("stdout", "message"), [
    ("", "printed no JSON object"),
    ("Welcome to the cluster\n", "printed no JSON object"),
    ("{not json\n", "printed invalid JSON"),
])
def test_unparseable_probe_output(stdout: str, message: str) -> None:
    with pytest.raises(FactsError, match=message):
        parse_facts(stdout, "box")


def test_login_banner_before_the_json_is_ignored(probe_data: dict) -> None:
    facts = parse_facts("Welcome! {quota: 10G}\n" + json.dumps(probe_data) + "\n")
    assert facts.hostname == probe_data["hostname"]


def test_summary_is_one_line_with_limits(probe_data: dict) -> None:
    data = {**probe_data, "cgroup_memory_limit": 1024**3, "cgroup_cpu_limit": 1.5,
            "infiniband": [{"name": "mlx5_0", "ports": [
                {"port": 1, "state": "ACTIVE", "rate": "200 Gb/sec (4X HDR)",
                 "link_layer": "InfiniBand"}]}]}
    text = summary(validate_facts(data))
    assert "\n" not in text
    for part in (str(data["os"]), "(limit 1.5)", "(limit 1.0 GiB)", "no GPU", "IB mlx5_0",
                 f"python {data['python']['version']}"):
        assert part in text


# ----- cgroups -----------------------------------------------------------------------------------

def _make_cgroup(name: str) -> tuple[list[Path], str] | None:
    """Real cgroup dirs limited to 256 MiB and 1.5 CPUs, plus the shell text that joins them."""
    v1 = [Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/cpu")]
    v2 = Path("/sys/fs/cgroup")
    if all(os.access(d / "cgroup.procs", os.W_OK) for d in v1):
        dirs = [d / name for d in v1]
        for d in dirs:
            d.mkdir()
        (dirs[0] / "memory.limit_in_bytes").write_text(str(256 * 1024**2))
        (dirs[1] / "cpu.cfs_period_us").write_text("100000")
        (dirs[1] / "cpu.cfs_quota_us").write_text("150000")
    elif {"cpu", "memory"} <= set((v2 / "cgroup.controllers").read_text().split()) \
            if (v2 / "cgroup.controllers").exists() else False:
        try:
            (v2 / "cgroup.subtree_control").write_text("+memory +cpu")
            dirs = [v2 / name]
            dirs[0].mkdir()
        except OSError:
            return None
        (dirs[0] / "memory.max").write_text(str(256 * 1024**2))
        (dirs[0] / "cpu.max").write_text("150000 100000")
    else:
        return None
    join = "; ".join(f"echo $$ > {d / 'cgroup.procs'}" for d in dirs)
    return dirs, join


def test_real_cgroup_limits_are_seen() -> None:
    """A real cgroup (v1 here, v2 where the machine uses it) with real limits, probe inside it."""
    made = _make_cgroup(f"mainboard-test-{os.getpid()}")
    if made is None:  # the recorded v1 and v2 layouts above still cover the parsing
        unavailable("no writable cgroup hierarchy (needs root and a writable cgroupfs)")
    dirs, join = made
    try:
        done = subprocess.run(["sh", "-c", f"{join}; exec {sys.executable} -I -S -"],
                              input=probe_source(), capture_output=True, text=True, timeout=60)
        facts = parse_facts(done.stdout)
    finally:
        for d in dirs:
            d.rmdir()
    assert facts.cgroup_memory_limit == 256 * 1024**2
    assert facts.cgroup_cpu_limit == 1.5
    assert "(limit 1.5)" in summary(facts) and "(limit 0.2 GiB)" in summary(facts)


# ----- over ssh ------------------------------------------------------------------------------------

def test_facts_over_ssh_agree_with_local(workspace: Path) -> None:
    with Board(workspace) as board:
        local = probe_facts(board, "local")
        remote = probe_facts(board, "loop")
    for field in MUST_AGREE:
        assert getattr(remote, field) == getattr(local, field), field
    assert remote.memory_available and remote.pythons  # the sshd's PATH has a python3
    assert cached_record(board.config.state_dir, "loop").facts == remote


def test_hostile_python_runs_nothing(workspace: Path) -> None:
    marker = workspace.parent / "pwned"
    with Board(workspace) as board, pytest.raises(FactsError) as caught:
        probe_facts(board, HOSTILE)
    assert "exited 127" in str(caught.value) and "hosts.hostile-python.python" in str(caught.value)
    assert not marker.exists()
    path = cache_path(board.config.state_dir, HOSTILE)
    assert path.parent == board.config.state_dir / "facts" and "'" not in path.name
    assert cache_path(board.config.state_dir, "../../etc/x").parent.name == "facts"


def test_probe_failures(workspace: Path) -> None:
    with Board(workspace) as board:
        with pytest.raises(FactsError, match="exited 1"):
            probe_facts(board, "nopython")
        with pytest.raises(UnknownHost, match="declared hosts: local, loop"):
            probe_facts(board, "nosuch")
    assert cached_facts(board.config.state_dir, "nopython") is None


def test_corrupt_or_old_cache_reads_as_none(tmp_path: Path, probe_data: dict) -> None:
    path = cache_path(tmp_path, "box")
    path.parent.mkdir(parents=True)
    path.write_text("{truncated")
    assert cached_facts(tmp_path, "box") is None
    path.write_text(json.dumps({"host": "box", "probed_at": "2024-01-01T00:00:00Z",
                                "facts": {**probe_data, "schema_version": 0}}))
    assert cached_facts(tmp_path, "box") is None


# ----- CLI --------------------------------------------------------------------------------------------

def test_cli_facts(workspace: Path) -> None:
    cached = run_cli(workspace, "facts", "--cached", "--on", "closed")
    assert cached.returncode == 2 and "mainboard facts --on closed" in cached.stderr
    as_json = run_cli(workspace, "facts", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert Facts.model_validate_json(as_json.stdout).hostname == socket.gethostname()
    piped = run_cli(workspace, "facts", "--cached")  # stdout is a pipe: the JSON
    assert piped.returncode == 0, piped.stderr
    assert Facts.model_validate_json(piped.stdout).hostname == socket.gethostname()
    assert piped.stdout.splitlines()[0] == "{"
    both = run_cli(workspace, "facts", "--cached", "--json", "--table")
    assert both.returncode == 2 and "--table" in both.stderr and both.stdout == ""
    human = run_cli(workspace, "facts", "--cached", "--table")
    assert human.returncode == 0, human.stderr
    assert "facts of local (cached, probed" in human.stdout
    assert socket.gethostname() in human.stdout and "memory" in human.stdout
    unknown = run_cli(workspace, "facts", "--on", "nosuch")
    assert unknown.returncode == 2 and "unknown host 'nosuch'" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    closed = run_cli(workspace, "facts", "--on", "closed")
    assert closed.returncode == 1 and "connection refused" in closed.stderr
    assert "Traceback" not in closed.stderr
