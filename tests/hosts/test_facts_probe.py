"""The facts probe's collectors, called in this process on recorded outputs.

The probe is shipped to a host as one script (``facts.probe_source``), so the tests that
run it whole (tests/hosts/test_facts.py) cannot show which of its lines ran; these call
each collector directly. Where each recorded output comes from:

- ``tests/fixtures/recordings/this-vm/``: real captures of the test machine (its
  ``/proc/meminfo``, ``/etc/os-release``, lscpu, cpuinfo and sysfs topology);
- ``tests/fixtures/recordings/macos-14/``: SIMULATION of macOS 14.5's
  ``/System/Library/CoreServices/SystemVersion.plist`` in Apple's plist layout;
- ``tests/support/probe_tools.py``: SIMULATED nvidia-smi and macOS sysctl (neither can
  run here), printing the real programs' layout;
- cgroup and InfiniBand trees laid out in a directory in the kernel's file formats.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import runpy
import shutil
import sys
from pathlib import Path

import pytest

from mainboard.hosts import facts_probe
from mainboard.hosts.facts import Gpu, IbDevice, parse_facts, summary, validate_facts
from tests.support.probe_tools import (
    DRIVER_DOWN,
    MAC_SYSCTL,
    RECORDED_CSV,
    fake_mac_sysctl,
    fake_nvidia_smi,
    fake_program,
)

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "recordings"
THIS_VM = RECORDINGS / "this-vm"
MACOS = RECORDINGS / "macos-14"
KIB = 1024


@pytest.fixture(autouse=True)
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The probe's warnings of this test alone (the module keeps one list per run)."""
    fresh: list[str] = []
    monkeypatch.setattr(facts_probe, "WARNINGS", fresh)
    return fresh


@pytest.fixture(scope="module")
def probe_facts_data() -> dict[str, object]:
    """The probe file run as ``__main__`` in this process: its one line of JSON. PATH is
    this venv's and the system's (pyenv shims answer a version in seconds, not ms)."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin",
                                              "/bin"]))
        runpy.run_path(facts_probe.__file__, run_name="__main__")
    assert out.getvalue().count("\n") == 1
    return json.loads(out.getvalue())


def _meminfo_kib(key: str) -> int:
    line = next(row for row in (THIS_VM / "proc" / "meminfo").read_text().splitlines()
                if row.startswith(key + ":"))
    return int(line.split()[1])


# ----- os, memory, cpus ----------------------------------------------------------------------------

def test_os_name_from_os_release_then_macos_then_the_kernel(tmp_path: Path) -> None:
    assert facts_probe.os_name(str(THIS_VM)) == "Debian GNU/Linux 12 (bookworm)"
    assert facts_probe.os_name() == platform.freedesktop_os_release()["PRETTY_NAME"]
    lib = tmp_path / "lib-only" / "usr" / "lib"  # distributions with only the vendor copy
    lib.mkdir(parents=True)
    (lib / "os-release").write_text((THIS_VM / "etc" / "os-release").read_text())
    assert facts_probe.os_name(str(tmp_path / "lib-only")) == "Debian GNU/Linux 12 (bookworm)"
    assert facts_probe.os_name(str(MACOS)) == "macOS 14.5"
    (lib / "os-release").write_text('NAME="Plain"\nID=plain\n')  # no PRETTY_NAME
    kernel = f"{platform.system()} {platform.release()}"
    assert facts_probe.os_name(str(tmp_path / "lib-only")) == kernel
    assert facts_probe.os_name(str(tmp_path / "empty")) == kernel


def test_memory_from_meminfo_else_macos_sysctl_else_sysconf(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meminfo = (THIS_VM / "proc" / "meminfo").read_text()
    assert facts_probe.memory(meminfo) == (_meminfo_kib("MemTotal") * KIB,
                                           _meminfo_kib("MemAvailable") * KIB)
    # a kernel older than 3.14 has no MemAvailable; a line without a number is skipped
    old = "MemTotal:        1000 kB\nMemFree:          10 kB\nHugePages_Total: x\n"
    assert facts_probe.memory(old) == (1000 * KIB, None)
    fake_mac_sysctl(tmp_path / "mac")
    monkeypatch.setenv("PATH", str(tmp_path / "mac"))  # macOS: no /proc, sysctl answers
    assert facts_probe.memory("") == (int(MAC_SYSCTL["hw.memsize"]), None)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # neither: sysconf
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert facts_probe.memory("") == (pages, None)


def test_usable_cpus_are_the_affinity_mask_else_all(monkeypatch: pytest.MonkeyPatch) -> None:
    assert facts_probe.cpu_usable() == len(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")  # SIMULATION: macOS's os has no affinity
    assert facts_probe.cpu_usable() == os.cpu_count()


# ----- GPUs ----------------------------------------------------------------------------------------------

def test_nvidia_smi_rows_become_gpus_and_odd_rows_warnings(warnings: list[str]) -> None:
    # A unified-memory part (GB10) reports memory.total as [N/A]; a blank line is skipped.
    text = RECORDED_CSV + "\nNVIDIA GB10, [N/A], GPU-5c1e3b2a-8f4d-4e1a-9d2c-7b6a5f4e3d2c, 580.95.05\n" \
        + "NVIDIA H100 80GB HBM3, 81559, 535.86.10\n"
    found = facts_probe.parse_gpus(text)
    assert [Gpu.model_validate(g).name for g in found] == ["NVIDIA H100 80GB HBM3"] * 2 + [
        "NVIDIA GB10"]
    assert found[0] == {"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559,
                        "uuid": "GPU-f75045e8-4d87-49d1-2eb9-39ec2baddf9b", "driver": "535.86.10"}
    assert found[2]["memory_mb"] is None
    assert warnings == ["gpus: unexpected nvidia-smi line 'NVIDIA H100 80GB HBM3,81559,535.86.10'"]


def test_gpus_ask_nvidia_smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     warnings: list[str], probe_facts_data: dict) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "none"), "/usr/bin", "/bin"]))
    assert shutil.which("nvidia-smi") is None  # this machine has none
    assert facts_probe.gpus() == [] and warnings == []
    fake_nvidia_smi(tmp_path / "ok", facts_probe.NVIDIA_QUERY, f"cat <<'EOF'\n{RECORDED_CSV}EOF\n")
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "ok"), "/usr/bin", "/bin"]))
    found = facts_probe.gpus()
    assert [g["uuid"] for g in found] == ["GPU-f75045e8-4d87-49d1-2eb9-39ec2baddf9b",
                                          "GPU-b91556d8-5215-d0ed-50b8-a88720e5b29c"]
    facts = validate_facts({**probe_facts_data, "gpus": found, "cpu_name": "AMD EPYC 9454",
                            "cpu_logical": 96, "cpu_physical": 48})
    assert "AMD EPYC 9454 96 cpus/48 cores" in summary(facts)  # SMT: threads, then cores
    assert "2x NVIDIA H100 80GB HBM3 79 GiB" in summary(facts)
    fake_nvidia_smi(tmp_path / "down", facts_probe.NVIDIA_QUERY, f'echo "{DRIVER_DOWN}"\nexit 9\n')
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "down"), "/usr/bin", "/bin"]))
    assert facts_probe.gpus() == []
    assert len(warnings) == 1 and warnings[0].startswith("gpus: nvidia-smi exited 9: ")
    assert "couldn't communicate with the NVIDIA driver" in warnings[0]


# ----- scratch, pythons ------------------------------------------------------------------------------

def test_scratch_lists_each_real_place_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "tmp-link").symlink_to(scratch)  # TMPDIR naming the same place: listed once
    monkeypatch.setenv("SCRATCH", str(scratch))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp-link"))
    monkeypatch.setenv("HOME", str(tmp_path / "gone"))  # a home that is not there: skipped
    found = facts_probe.scratch()
    assert [(s["source"], s["path"]) for s in found][:2] == [("SCRATCH", str(scratch)),
                                                             ("/tmp", "/tmp")]
    assert found[-1]["path"] == "/" and "HOME" not in [s["source"] for s in found]
    assert found[0]["writable"] and 0 < found[0]["free_bytes"] <= found[0]["total_bytes"]
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SCRATCH", "")  # set but empty, and a TMPDIR that is a file
    monkeypatch.setenv("TMPDIR", str(tmp_path / "a-file"))
    assert [s["source"] for s in facts_probe.scratch()][0] == "/tmp"


def test_pythons_on_path_that_really_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "python3").parent.mkdir()
    (first / "python3").symlink_to(sys.executable)
    # a pyenv shim for a version that is not installed (its message, exit 127)
    fake_program(first, "python3.99", "echo 'pyenv: python3.99: command not found' >&2\n"
                                      "exit 127\n")
    fake_program(first, "python3.98", "echo 'not a version'\n")
    (first / "python3.97").write_text("")  # not executable
    (first / "python3-config").symlink_to(sys.executable)  # not an interpreter's name
    second.mkdir()
    (second / "python3").symlink_to(sys.executable)  # shadowed by the first on PATH
    (second / f"python3.{sys.version_info[1]}").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", os.pathsep.join([str(first), str(tmp_path / "missing"),
                                                str(second)]))
    version = "{}.{}.{}".format(*sys.version_info[:3])
    assert facts_probe.pythons() == [
        {"name": "python3", "path": str(first / "python3"), "version": version},
        {"name": f"python3.{sys.version_info[1]}",
         "path": str(second / f"python3.{sys.version_info[1]}"), "version": version}]


def test_an_interpreter_that_never_answers_or_cannot_start(tmp_path: Path) -> None:
    hangs = fake_program(tmp_path, "python3.96", "exec sleep 1000\n")
    broken = tmp_path / "python3.95"
    broken.write_bytes(b"\x7fELF not really")  # exec fails: Exec format error
    broken.chmod(0o755)
    assert facts_probe._versions([str(hangs), str(broken)], timeout=0.05) == {
        str(hangs): None, str(broken): None}


# ----- the whole probe -------------------------------------------------------------------------------

def test_one_failing_collector_is_a_warning(warnings: list[str]) -> None:
    assert facts_probe._safely("disk", lambda: 1 // 0, []) == []
    assert warnings == ["disk: ZeroDivisionError: integer division or modulo by zero"]


def test_the_probe_as_main_prints_facts_of_this_machine(probe_facts_data: dict) -> None:
    facts = parse_facts(json.dumps(probe_facts_data))
    assert facts.warnings == []
    assert facts.os == platform.freedesktop_os_release()["PRETTY_NAME"]
    meminfo = {line.split(":")[0]: int(line.split()[1]) * KIB
               for line in Path("/proc/meminfo").read_text().splitlines()}
    assert facts.memory_total == meminfo["MemTotal"] and facts.cpu_logical == os.cpu_count()
    assert facts.python.version == platform.python_version()
    assert os.path.dirname(sys.executable) in [os.path.dirname(p.path) for p in facts.pythons]
# ----- cgroups, InfiniBand ------------------------------------------------------------------------

def test_cgroup_v2_recorded_layout(tmp_path: Path) -> None:
    """A cgroup2 tree in the kernel's file formats (this machine runs v1, so v2 is laid out
    in a directory): the tighter parent memory.max wins, cpu.max gives quota/period."""
    mount = tmp_path / "cg root"  # a space: mountinfo escapes it as \040
    job = mount / "user.slice" / "job-1"
    job.mkdir(parents=True)
    files = {mount / "cgroup.controllers": "cpuset cpu io memory pids",
             mount / "user.slice" / "cgroup.controllers": "cpu memory pids",
             job / "cgroup.controllers": "",  # a leaf the parent delegates nothing to
             mount / "cgroup.procs": "", mount / "user.slice" / "cgroup.procs": "",
             mount / "user.slice" / "memory.max": "1073741824",
             mount / "user.slice" / "cpu.max": "max 100000",
             job / "cgroup.procs": "", job / "memory.max": "2147483648",
             job / "cpu.max": "150000 100000"}
    for path, text in files.items():
        path.write_text(text + "\n")
    escaped = str(mount).replace(" ", "\\040")
    mountinfo = f"41 31 0:38 / {escaped} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
    limits = facts_probe.cgroup_limits(mountinfo, "0::/user.slice/job-1\n")
    assert limits == {"cgroup_version": 2, "cgroup_memory_limit": 1024**3, "cgroup_cpu_limit": 1.5}
    (job / "memory.max").write_text("max\n")
    (mount / "user.slice" / "memory.max").write_text("max\n")
    (job / "cpu.max").write_text("max 100000\n")
    assert facts_probe.cgroup_limits(mountinfo, "0::/user.slice/job-1\n") == {
        "cgroup_version": 2, "cgroup_memory_limit": None, "cgroup_cpu_limit": None}


def test_cgroup_v1_recorded_layout_with_an_empty_unified_mount(tmp_path: Path) -> None:
    """A hybrid (v1 + empty cgroup2) layout in the kernel's file formats: v1 limits count,
    the tighter of a cgroup and its parent wins, and v1's huge "no limit" is None."""
    memory, cpu, unified = tmp_path / "memory", tmp_path / "cpu,cpuacct", tmp_path / "unified"
    files = {memory / "cgroup.procs": "", memory / "memory.limit_in_bytes": "9223372036854771712",
             memory / "job-1" / "cgroup.procs": "",
             memory / "job-1" / "memory.limit_in_bytes": str(256 * 1024**2),
             cpu / "cgroup.procs": "", cpu / "cpu.cfs_quota_us": "-1",
             cpu / "cpu.cfs_period_us": "100000", cpu / "job-1" / "cgroup.procs": "",
             cpu / "job-1" / "cpu.cfs_quota_us": "150000",
             cpu / "job-1" / "cpu.cfs_period_us": "100000",
             unified / "cgroup.controllers": "", unified / "cgroup.procs": ""}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    mountinfo = (f"33 25 0:28 / {cpu} rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
                 f"35 25 0:30 / {memory} rw,nosuid shared:15 - cgroup cgroup rw,memory\n"
                 f"30 25 0:26 / {unified} rw,nosuid shared:6 - cgroup2 cgroup2 rw,nsdelegate\n")
    own = "9:memory:/job-1\n4:cpu,cpuacct:/job-1\n0::/job-1\n"
    assert facts_probe.cgroup_limits(mountinfo, own) == {
        "cgroup_version": 1, "cgroup_memory_limit": 256 * 1024**2, "cgroup_cpu_limit": 1.5}
    (memory / "job-1" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (cpu / "job-1" / "cpu.cfs_quota_us").write_text("-1\n")
    assert facts_probe.cgroup_limits(mountinfo, own) == {
        "cgroup_version": 1, "cgroup_memory_limit": None, "cgroup_cpu_limit": None}
    assert facts_probe.cgroup_limits("", "") == {
        "cgroup_version": None, "cgroup_memory_limit": None, "cgroup_cpu_limit": None}


def test_a_v1_controller_whose_hierarchy_is_not_mounted_limits_nothing(tmp_path: Path) -> None:
    """A container that mounts only the cpu hierarchy while /proc/self/cgroup (this
    machine's layout) still names its memory cgroup: the cpu limit counts, memory is None."""
    cpu = tmp_path / "cpu"
    (cpu / "job-1").mkdir(parents=True)
    for path, text in {cpu / "cgroup.procs": "", cpu / "job-1" / "cgroup.procs": "",
                       cpu / "job-1" / "cpu.cfs_quota_us": "200000",
                       cpu / "job-1" / "cpu.cfs_period_us": "100000"}.items():
        path.write_text(text + "\n")
    mountinfo = f"32 31 0:29 / {cpu} rw,relatime - cgroup cgroup rw,cpu\n"
    own = "9:name=systemd:/\n4:memory:/job-1\n1:cpu:/job-1\n0::/\n"
    assert facts_probe.cgroup_limits(mountinfo, own) == {
        "cgroup_version": 1, "cgroup_memory_limit": None, "cgroup_cpu_limit": 2.0}


def test_infiniband_recorded_sysfs_layout(tmp_path: Path) -> None:
    """/sys/class/infiniband as the kernel lays it out (this machine has no HCA): an HDR
    InfiniBand port, a down RoCE port, ports sorted numerically; the schema accepts it."""
    ports = {("mlx5_0", "1"): ("4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand"),
             ("mlx5_0", "2"): ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand"),
             ("mlx5_0", "10"): ("4: ACTIVE", "100 Gb/sec (4X EDR)", "InfiniBand"),
             ("mlx5_1", "1"): ("1: DOWN", "40 Gb/sec (4X QDR)", "Ethernet")}
    for (device, port), values in ports.items():
        directory = tmp_path / device / "ports" / port
        directory.mkdir(parents=True)
        for name, value in zip(("state", "rate", "link_layer"), values, strict=True):
            (directory / name).write_text(value + "\n")
    (tmp_path / "mlx5_2").mkdir()  # a device whose ports vanished mid-read
    found = facts_probe.infiniband(str(tmp_path))
    assert [d["name"] for d in found] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert found[0]["ports"] == [
        {"port": 1, "state": "ACTIVE", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"},
        {"port": 2, "state": "DOWN", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"},
        {"port": 10, "state": "ACTIVE", "rate": "100 Gb/sec (4X EDR)", "link_layer": "InfiniBand"}]
    assert found[1]["ports"][0]["link_layer"] == "Ethernet" and found[2]["ports"] == []
    assert [IbDevice.model_validate(d).name for d in found] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert facts_probe.infiniband(str(tmp_path / "absent")) == []


