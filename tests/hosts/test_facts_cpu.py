"""CPU kinds: a CPU with several kinds of cores is reported as the page shows it.

The probe's CPU part runs on recorded filesystem roots (``tests/fixtures/recordings``:
a GB10's per-processor ARM parts, its lscpu, an Intel hybrid's cpu_core/cpu_atom
lists, this machine's own files) and, for real, as the probe sent to this machine.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from mainboard.hosts import probe_cpu
from mainboard.hosts.facts import Facts, parse_facts, probe_source
from tests.support.probe_tools import MAC_SYSCTL, fake_mac_sysctl
from tests.support.services import require

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "recordings"
GB10 = RECORDINGS / "nvidia-gb10"
INTEL = RECORDINGS / "intel-i7-12700h"
THIS_VM = RECORDINGS / "this-vm"


def _lscpu(root: Path) -> str:
    return (root / "lscpu.txt").read_text() if (root / "lscpu.txt").exists() else ""


def test_gb10_per_processor_parts_are_two_kinds_in_cpu_order() -> None:
    kinds = probe_cpu.cpu_kinds(str(GB10), _lscpu(GB10))
    assert kinds == [{"model": "Arm Cortex-A725", "count": 10},
                     {"model": "Arm Cortex-X925", "count": 10}]
    assert probe_cpu.cpu_name(str(GB10), _lscpu(GB10)) == \
        "10x Arm Cortex-A725 + 10x Arm Cortex-X925"
    assert probe_cpu.cpu_physical(str(GB10)) == 20


def test_gb10_without_cpuinfo_parts_falls_back_to_lscpu_sections(tmp_path: Path) -> None:
    """A host whose /proc/cpuinfo is unreadable (some containers): lscpu's model sections."""
    assert probe_cpu.lscpu_models(_lscpu(GB10)) == [("Cortex-X925", 10), ("Cortex-A725", 10)]
    kinds = probe_cpu.cpu_kinds(str(tmp_path), _lscpu(GB10))
    assert probe_cpu.kinds_text(kinds) == "10x Arm Cortex-X925 + 10x Arm Cortex-A725"


def test_unknown_arm_part_is_named_by_its_number(tmp_path: Path) -> None:
    text = (GB10 / "proc" / "cpuinfo").read_text().replace("0xd85", "0xfff")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cpuinfo").write_text(text)
    assert [k["model"] for k in probe_cpu.cpu_kinds(str(tmp_path), "")] == [
        "Arm Cortex-A725", "Arm part 0xfff"]


def test_intel_hybrid_counts_p_cores_once_per_core() -> None:
    name = "12th Gen Intel(R) Core(TM) i7-12700H"
    assert probe_cpu.cpu_kinds(str(INTEL), "") == [{"model": f"{name} P-core", "count": 6},
                                                  {"model": f"{name} E-core", "count": 8}]
    assert probe_cpu.cpu_name(str(INTEL), "") == f"6x {name} P-core + 8x {name} E-core"


def test_a_single_kind_cpu_stays_as_before() -> None:
    """This machine's recorded files: one kind, named by cpuinfo's model name as always."""
    model = next(line.split(":", 1)[1].strip() for line in
                 (THIS_VM / "proc" / "cpuinfo").read_text().splitlines()
                 if line.startswith("model name"))
    physical = probe_cpu.cpu_physical(str(THIS_VM))
    assert physical is not None and physical >= 1
    assert probe_cpu.cpu_kinds(str(THIS_VM), _lscpu(THIS_VM)) == [{"model": model,
                                                                    "count": physical}]
    assert probe_cpu.cpu_name(str(THIS_VM), _lscpu(THIS_VM)) == model


@pytest.fixture(scope="module")
def sent_probe_output() -> str:
    """The probe as a host runs it, on this machine: its stdout."""
    return subprocess.run([sys.executable, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, check=True, timeout=60).stdout


def test_the_probe_sent_to_this_machine_reports_its_kinds(sent_probe_output: str) -> None:
    """For real: the probe as a host runs it; its kinds agree with lscpu's own count."""
    facts = parse_facts(sent_probe_output)
    lscpu = subprocess.run([require("lscpu"), "-p=core,socket"], capture_output=True,
                           text=True, check=True, timeout=30).stdout
    cores = {line for line in lscpu.splitlines() if line and not line.startswith("#")}
    total = sum(kind.count for kind in facts.cpu_kinds)
    assert total == len(cores) == facts.cpu_physical
    if len(facts.cpu_kinds) == 1:
        assert facts.cpu_name == facts.cpu_kinds[0].model
    else:
        assert facts.cpu_name == " + ".join(f"{k.count}x {k.model}" for k in facts.cpu_kinds)
    assert "from mainboard" not in probe_source() and "ARM_PARTS = {" in probe_source()


def test_facts_cached_before_kinds_still_load(sent_probe_output: str) -> None:
    data = json.loads(sent_probe_output)
    del data["cpu_kinds"]
    assert Facts.model_validate(data).cpu_kinds == []


# ----- fallbacks, in the layouts of other machines ---------------------------------------------------
# SIMULATIONS in the kernel's /proc/cpuinfo layout (no such machine is reachable from here):
# a Raspberry Pi 4 under its vendor arm64 kernel 4.19 (which appends Hardware/Revision/Model,
# and predates core_cpus_list: sysfs has thread_siblings_list only), and an IBM POWER9 node.
PI4_CPUINFO = "".join(
    f"processor\t: {n}\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\n"
    "CPU revision\t: 3\n\n" for n in range(4)) + (
    "Hardware\t: BCM2835\nRevision\t: c03114\nSerial\t\t: 10000000a1b2c3d4\n"
    "Model\t\t: Raspberry Pi 4 Model B Rev 1.4\n")
POWER9_CPUINFO = "".join(
    f"processor\t: {n}\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 3800.000000MHz\n"
    "revision\t: 2.2 (pvr 004e 1202)\n\n" for n in range(4)) + (
    "timebase\t: 512000000\nplatform\t: PowerNV\nmodel\t\t: 8335-GTH\n"
    "machine\t\t: PowerNV 8335-GTH\nfirmware\t: OPAL\nMMU\t\t: Radix\n")


def _root(tmp_path: Path, cpuinfo: str, siblings: dict[int, str]) -> Path:
    """A filesystem root holding ``cpuinfo`` and each CPU's thread_siblings_list."""
    (tmp_path / "proc").mkdir(parents=True)
    (tmp_path / "proc" / "cpuinfo").write_text(cpuinfo)
    for cpu, text in siblings.items():
        topology = tmp_path / "sys/devices/system/cpu" / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(text + "\n")
    return tmp_path


def test_cpuinfo_keys_of_other_architectures_name_the_cpu(tmp_path: Path) -> None:
    """Without lscpu: the SoC of a Pi, the processor (not the machine model) of a POWER9."""
    pi = _root(tmp_path / "pi", PI4_CPUINFO, {n: str(n) for n in range(4)})
    assert probe_cpu.model_name(str(pi), "") == "BCM2835"
    assert probe_cpu.cpu_kinds(str(pi), "") == [{"model": "BCM2835", "count": 4}]
    (pi / "sys/devices/system/cpu/cpu4").mkdir()  # an offline CPU keeps no topology
    assert probe_cpu.cpu_physical(str(pi)) == 4
    power = _root(tmp_path / "power", POWER9_CPUINFO, {0: "0-3", 1: "0-3", 2: "0-3", 3: "0-3"})
    assert probe_cpu.model_name(str(power), "") == "POWER9, altivec supported"
    assert probe_cpu.cpu_kinds(str(power), "") == [{"model": "POWER9, altivec supported",
                                                   "count": 1}]


def test_a_recording_that_says_nothing_has_no_model(tmp_path: Path) -> None:
    """A container with neither /proc/cpuinfo nor sysfs: lscpu's one model, no count."""
    assert probe_cpu.model_name(str(tmp_path), "") is None
    assert probe_cpu.cpu_physical(str(tmp_path)) is None
    assert probe_cpu.model_name(str(tmp_path), _lscpu(THIS_VM)) == "Intel(R) Xeon(R) Processor"
    assert probe_cpu.cpu_kinds(str(tmp_path), _lscpu(THIS_VM)) == []
    assert probe_cpu.cpu_kinds(str(tmp_path), "") == []


def test_lscpu_sections_without_a_vendor_line(tmp_path: Path) -> None:
    text = "\n".join(line for line in _lscpu(GB10).splitlines() if "Vendor ID" not in line)
    assert probe_cpu.cpu_kinds(str(tmp_path), text) == [{"model": "Cortex-X925", "count": 10},
                                                       {"model": "Cortex-A725", "count": 10}]


def test_lscpu_of_this_machine_runs_once_and_none_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_cpu, "_LSCPU", [])
    text = probe_cpu._lscpu()
    assert probe_cpu._lscpu() is text  # asked once per probe
    cores = subprocess.run([require("lscpu"), "-p=core,socket"], capture_output=True, text=True,
                           check=True, timeout=30).stdout
    count = len({line for line in cores.splitlines() if line and not line.startswith("#")})
    assert sum(n for _, n in probe_cpu.lscpu_models(text)) == count
    kinds = probe_cpu.cpu_kinds()  # this machine, live
    assert sum(kind["count"] for kind in kinds) == count == probe_cpu.cpu_physical()
    monkeypatch.setattr(probe_cpu, "_LSCPU", [])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probe_cpu._lscpu() == ""


def test_sysctl_answers_on_a_mac_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIMULATED macOS sysctl (tests/support/probe_tools.py); Linux's real sysctl knows no
    ``hw.memsize`` and exits non-zero; without sysctl, the platform module's word."""
    linux_sysctl = require("sysctl")
    fake_mac_sysctl(tmp_path / "mac")
    monkeypatch.setenv("PATH", str(tmp_path / "mac"))
    assert probe_cpu._sysctl("hw.physicalcpu") == MAC_SYSCTL["hw.physicalcpu"]
    assert probe_cpu._sysctl("kern.nosuch") is None
    assert probe_cpu.live_model_name() == "Apple M1 Pro"
    monkeypatch.setenv("PATH", str(Path(linux_sysctl).parent))
    assert probe_cpu._sysctl("hw.memsize") is None
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert probe_cpu._sysctl("hw.memsize") is None
    assert probe_cpu.live_model_name() == (platform.processor() or None)
