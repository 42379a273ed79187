"""The CPU part of the facts probe: the model, physical cores, and each kind of core.

Inlined into ``facts_probe.py`` where that file imports it (``# probe: inlined``), so
the probe stays one standard-library script piped to ``python3 -`` on the host (Python
3.6+, as there). A CPU with several kinds of cores (an Arm big.LITTLE part such as
NVIDIA GB10's 10 Cortex-X925 + 10 Cortex-A725, an Intel hybrid with P- and E-cores)
is read per processor: ARM ``CPU implementer``/``CPU part`` in /proc/cpuinfo, decoded
with the part numbers lscpu knows; Intel's ``/sys/devices/cpu_core`` and ``cpu_atom``
cpu lists. Kinds are counted in cores (threads sharing a core count once) and listed
in the order of their first CPU; ``kinds_text`` joins them as the page shows them.
"""
# Python 3.6 on purpose (see facts_probe.py).
# ruff: noqa: UP006, UP007, UP021, UP022, UP035, UP045

import os
import platform
import re
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Tuple

# Implementer -> (vendor as the page writes it, {part: core name}): lscpu-arm.c's names
# for the parts a compute host may have (servers, workstations, recent big.LITTLE).
ARM_PARTS = {
    "0x41": ("Arm", {
        "0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55",
        "0xd07": "Cortex-A57", "0xd08": "Cortex-A72", "0xd09": "Cortex-A73",
        "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76", "0xd0c": "Neoverse-N1",
        "0xd0d": "Cortex-A77", "0xd40": "Neoverse-V1", "0xd41": "Cortex-A78",
        "0xd44": "Cortex-X1", "0xd46": "Cortex-A510", "0xd47": "Cortex-A710",
        "0xd48": "Cortex-X2", "0xd49": "Neoverse-N2", "0xd4a": "Neoverse-E1",
        "0xd4b": "Cortex-A78C", "0xd4d": "Cortex-A715", "0xd4e": "Cortex-X3",
        "0xd4f": "Neoverse-V2", "0xd80": "Cortex-A520", "0xd81": "Cortex-A720",
        "0xd82": "Cortex-X4", "0xd84": "Neoverse-V3", "0xd85": "Cortex-X925",
        "0xd87": "Cortex-A725", "0xd8e": "Neoverse-N3"}),
    "0x46": ("Fujitsu", {"0x001": "A64FX"}),
    "0x48": ("HiSilicon", {"0xd01": "TaiShan-v110", "0xd02": "TaiShan-v120"}),
    "0x4e": ("NVIDIA", {"0x000": "Denver", "0x003": "Denver 2", "0x004": "Carmel",
                        "0x010": "Olympus"}),
    "0xc0": ("Ampere", {"0xac3": "Ampere-1", "0xac4": "Ampere-1a"}),
}  # type: Dict[str, Tuple[str, Dict[str, str]]]
HYBRID = (("cpu_core", "P-core"), ("cpu_atom", "E-core"))  # Intel hybrid PMU folders
_LSCPU = []  # type: List[str]


def _read(path: str) -> Optional[str]:
    """File contents stripped, or None when absent/unreadable (sysfs files vanish)."""
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _run(argv: List[str], timeout: float = 15.0) -> Tuple[int, str, str]:
    """Run a program; (returncode, stdout, stderr). Python 3.6 has no capture_output."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, universal_newlines=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _sysctl(name: str) -> Optional[str]:
    """A macOS sysctl value; None without sysctl or where it has no such name (Linux's
    sysctl knows none of the ``hw.``/``machdep.`` names asked, and exits non-zero)."""
    if not shutil.which("sysctl"):
        return None
    code, out, _ = _run(["sysctl", "-n", name], timeout=5.0)
    return out.strip() if code == 0 and out.strip() else None


def _lscpu() -> str:
    """lscpu's plain output in the C locale ('' without lscpu); run once per probe."""
    if not _LSCPU:
        code, out = 1, ""
        if shutil.which("lscpu"):
            code, out, _ = _run(["env", "LC_ALL=C", "lscpu"], timeout=10.0)
        _LSCPU.append(out if code == 0 else "")
    return _LSCPU[0]


def lscpu_models(text: str) -> List[Tuple[str, int]]:
    """Each ``Model name`` section of lscpu's output with its cores (per socket/cluster x
    sockets/clusters; 0 when lscpu gives no count): a hybrid ARM part lists one per kind."""
    found = []  # type: List[List[Any]]
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Model name" and value not in ("", "-"):
            found.append([value, 0, 1])
        elif found and key in ("Core(s) per socket", "Core(s) per cluster") and value.isdigit():
            found[-1][1] = int(value)
        elif found and key in ("Socket(s)", "Cluster(s)") and value.isdigit():
            found[-1][2] = int(value)
    return [(name, per * units) for name, per, units in found]


def _lscpu_vendor(text: str) -> str:
    """lscpu's ``Vendor ID`` as the ARM table writes vendors (``ARM`` -> ``Arm``)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Vendor ID":
            value = value.strip()
            return {"ARM": "Arm", "Nvidia": "NVIDIA"}.get(value, value)
    return ""


def _cpuinfo_fields(cpuinfo: str) -> Dict[str, str]:
    """The first value of each /proc/cpuinfo key (keys lower-cased)."""
    fields = {}  # type: Dict[str, str]
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def cpu_name(root: str = "/", lscpu: Optional[str] = None) -> Optional[str]:
    """CPU model: the joined kinds of a hybrid CPU, else cpuinfo 'model name' (x86), lscpu
    (ARM), other cpuinfo keys, sysctl. ``root`` and ``lscpu`` point it at a recording."""
    kinds = cpu_kinds(root, lscpu)
    if len(kinds) > 1:
        return kinds_text(kinds)
    return model_name(root, lscpu)


def model_name(root: str = "/", lscpu: Optional[str] = None) -> Optional[str]:
    """The one model name a single-kind CPU reports (what the probe reported before kinds)."""
    fields = _cpuinfo_fields(_read(os.path.join(root, "proc/cpuinfo")) or "")
    if fields.get("model name"):
        return fields["model name"]
    models = lscpu_models(_lscpu() if lscpu is None and root == "/" else lscpu or "")
    if models:
        return models[0][0]
    # an ARM board's SoC, Alpha/MIPS's cpu model, POWER's cpu (its "model" is the machine's)
    for key in ("hardware", "cpu model", "cpu", "model"):
        if fields.get(key):
            return fields[key]
    return live_model_name() if root == "/" else None  # a recording has no live fallback


def live_model_name() -> Optional[str]:
    """This machine's model where no file names it (macOS): sysctl's brand string, else
    the platform module's word."""
    return _sysctl("machdep.cpu.brand_string") or platform.processor() or None


def _cpu_list(text: str) -> List[int]:
    """``0-3,8`` -> [0, 1, 2, 3, 8] (sysfs cpu lists)."""
    cpus = []  # type: List[int]
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit():
            cpus.extend(range(int(low), int(high if high.isdigit() else low) + 1))
    return cpus


def _core_of(root: str, cpu: int) -> str:
    """The CPUs sharing ``cpu``'s core (its sibling list), so SMT threads count once."""
    topo = os.path.join(root, f"sys/devices/system/cpu/cpu{cpu}/topology")
    return _read(os.path.join(topo, "core_cpus_list")) or _read(
        os.path.join(topo, "thread_siblings_list")) or str(cpu)


def _arm_processors(cpuinfo: str) -> List[Tuple[int, str]]:
    """(processor number, core name) for each processor block that has a CPU part."""
    found = []  # type: List[Tuple[int, str]]
    for block in re.split(r"\n\s*\n", cpuinfo):
        fields = _cpuinfo_fields(block)
        number, part = fields.get("processor", ""), fields.get("cpu part", "").lower()
        if not number.isdigit() or not part:
            continue
        vendor, parts = ARM_PARTS.get(fields.get("cpu implementer", "").lower(), ("", {}))
        name = parts.get(part) or "part " + part
        found.append((int(number), (vendor + " " + name).strip()))
    return found


def _group(labelled: List[Tuple[int, str]], root: str) -> List[Dict[str, Any]]:
    """[{model, count}] in the order of each kind's first CPU; count = distinct cores."""
    cores = {}  # type: Dict[str, set]
    first = {}  # type: Dict[str, int]
    for cpu, model in sorted(labelled):
        cores.setdefault(model, set()).add(_core_of(root, cpu))
        first.setdefault(model, cpu)
    return [{"model": model, "count": len(cores[model])}
            for model in sorted(cores, key=lambda m: first[m])]


def cpu_kinds(root: str = "/", lscpu: Optional[str] = None) -> List[Dict[str, Any]]:
    """Each kind of core with its count of cores; one entry on a single-kind CPU.

    ARM: per-processor parts from /proc/cpuinfo, else lscpu's model sections. Intel
    hybrid: the cpu_core (P) and cpu_atom (E) cpu lists. Otherwise one kind, the model
    name, counted in physical cores; [] when nothing says.
    """
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo")) or ""
    labelled = _arm_processors(cpuinfo)
    if not labelled:
        name = model_name(root, lscpu) or "CPU"
        for folder, label in HYBRID:
            cpus = _cpu_list(_read(os.path.join(root, "sys/devices", folder, "cpus")) or "")
            labelled += [(cpu, name + " " + label) for cpu in cpus]
    if not labelled and "model name" not in _cpuinfo_fields(cpuinfo):
        # No per-processor parts readable (nor x86's model name): lscpu's sections, vendor first
        text = _lscpu() if lscpu is None and root == "/" else lscpu or ""
        models = lscpu_models(text)
        vendor = _lscpu_vendor(text)
        if len(models) > 1 and all(count for _, count in models):
            return [{"model": (vendor + " " + name).strip(), "count": count}
                    for name, count in models]
    if len({model for _, model in labelled}) > 1:
        return _group(labelled, root)
    name = model_name(root, lscpu)
    count = cpu_physical(root)
    return [{"model": name, "count": count}] if name and count else []


def kinds_text(kinds: List[Dict[str, Any]]) -> str:
    """``10x Arm Cortex-A725 + 10x Arm Cortex-X925``: the kinds as one CPU name."""
    return " + ".join(f"{kind['count']}x {kind['model']}" for kind in kinds)


def cpu_physical(root: str = "/") -> Optional[int]:
    """Physical cores: distinct sibling sets in sysfs topology (Linux), hw.physicalcpu (macOS)."""
    base = os.path.join(root, "sys/devices/system/cpu")
    names = [n for n in os.listdir(base) if re.match(r"^cpu\d+$", n)] \
        if os.path.isdir(base) else []
    cores = set()
    for name in names:
        topo = os.path.join(base, name, "topology")
        siblings = _read(os.path.join(topo, "core_cpus_list")) or _read(
            os.path.join(topo, "thread_siblings_list"))
        if siblings:
            cores.add(siblings)
    if cores:
        return len(cores)
    value = _sysctl("hw.physicalcpu") if root == "/" else None
    return int(value) if value and value.isdigit() else None
