"""CPU kinds: a CPU with several kinds of cores is reported as the page shows it.

The probe's CPU part runs on recorded filesystem roots (``tests/fixtures/recordings``:
a GB10's per-processor ARM parts, its lscpu, an Intel hybrid's cpu_core/cpu_atom
lists, this machine's own files) and, for real, as the probe sent to this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mainboard.hosts import probe_cpu
from mainboard.hosts.facts import Facts, parse_facts, probe_source
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


def test_the_probe_sent_to_this_machine_reports_its_kinds() -> None:
    """For real: the probe as a host runs it; its kinds agree with lscpu's own count."""
    done = subprocess.run([sys.executable, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, check=True, timeout=60)
    facts = parse_facts(done.stdout)
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


def test_facts_cached_before_kinds_still_load() -> None:
    done = subprocess.run([sys.executable, "-I", "-S", "-"], input=probe_source(), text=True,
                          capture_output=True, check=True, timeout=60)
    data = json.loads(done.stdout)
    del data["cpu_kinds"]
    assert Facts.model_validate(data).cpu_kinds == []
