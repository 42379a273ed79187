"""Hardware probe sent to a host's python on stdin: prints one JSON object.

This file's *source* is piped into ``python3 -`` on machines where nothing is
installed, often old cluster login nodes: standard library only, Python 3.6+. Imports
marked ``# probe: inlined`` are replaced by that module's source before it is sent
(``mainboard.hosts.facts.probe_source``): ``probe_cpu.py`` is the CPU part. Each
collector is isolated, so a failure becomes a line in ``warnings``, never a crash.
``mainboard.hosts.facts.Facts`` is the schema this output must satisfy.
"""
# Python 3.6 on purpose: typing.List/Optional (3.6 evaluates annotations), stdout=PIPE and
# universal_newlines (capture_output/text are 3.7+), no walrus, no __future__ annotations.
# ruff: noqa: UP006, UP007, UP021, UP022, UP035, UP045

import csv
import json
import os
import platform
import plistlib
import re
import shutil
import socket
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from mainboard.hosts.probe_cpu import (  # probe: inlined
    _read,
    _run,
    _sysctl,
    cpu_kinds,
    cpu_physical,
    kinds_text,
    model_name,
)

SCHEMA_VERSION = 1
NVIDIA_QUERY = ["--query-gpu=name,memory.total,uuid,driver_version",
                "--format=csv,noheader,nounits"]
# v1 reports "no limit" as a huge page-rounded number (0x7FFFFFFFFFFFF000 on 4 KiB pages).
V1_UNLIMITED = 1 << 60
PYTHON_NAME = re.compile(r"^python3(\.\d+)?$")
VERSION_SNIPPET = "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3]))"

WARNINGS = []  # type: List[str]


def os_name(root: str = "/") -> str:
    """Human OS name: os-release's PRETTY_NAME, macOS's ProductVersion (the file
    ``platform.mac_ver`` reads), else system + release. ``root`` points it at a recording."""
    text = _read(os.path.join(root, "etc/os-release")) or _read(
        os.path.join(root, "usr/lib/os-release"))
    for line in (text or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip("\"'")
    plist = os.path.join(root, "System/Library/CoreServices/SystemVersion.plist")
    if os.path.isfile(plist):
        with open(plist, "rb") as handle:
            return "macOS " + plistlib.load(handle)["ProductVersion"]
    return (platform.system() + " " + platform.release()).strip()


def cpu_usable() -> Optional[int]:
    """CPUs this process may run on (affinity mask, e.g. a SLURM allocation)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def memory(meminfo: Optional[str] = None) -> Tuple[Optional[int], Optional[int]]:
    """(total, available) bytes from /proc/meminfo (or the recorded ``meminfo``); macOS's
    sysctl, else sysconf, for the total where it has none."""
    if meminfo is None:
        meminfo = _read("/proc/meminfo") or ""
    values = {}  # type: Dict[str, int]
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = int(parts[0]) * scale
    total = values.get("MemTotal")
    if total is None:
        sysctl = _sysctl("hw.memsize")
        if sysctl and sysctl.isdigit():
            total = int(sysctl)
        else:  # every Unix python has sysconf; an odd one's error is the collector's warning
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return total, values.get("MemAvailable")


def _unescape_mount(path: str) -> str:
    """/proc/self/mountinfo escapes space, tab, newline and backslash as octal."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _cgroup_dirs(mountinfo: str, proc_cgroup: str) -> Tuple[Optional[str], Dict[str, str]]:
    """The cgroup directories named by /proc/self/cgroup: (v2 dir, {v1 controller: dir})."""
    mounts = []  # type: List[Tuple[str, str, str, str]]  # fstype, root, mountpoint, options
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            mounts.append((tail[0], _unescape_mount(fields[3]), _unescape_mount(fields[4]),
                           tail[2]))

    def locate(fstype: str, controller: str, path: str) -> Optional[str]:
        for kind, root, point, options in mounts:
            if kind != fstype or (controller and controller not in options.split(",")):
                continue
            rel = path[len(root):] if path.startswith(root) and root != "/" else path
            candidate = os.path.join(point, rel.lstrip("/"))
            # Inside a container the host path may not exist under the mount: use its root.
            return candidate if os.path.isdir(candidate) else point
        return None

    v2 = None  # type: Optional[str]
    v1 = {}  # type: Dict[str, str]
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)  # the kernel writes ID:CONTROLLERS:PATH, always three
        if parts[0] == "0" and parts[1] == "":
            v2 = locate("cgroup2", "", parts[2])
        for controller in parts[1].split(","):
            if controller in ("memory", "cpu"):
                found = locate("cgroup", controller, parts[2])
                if found:
                    v1[controller] = found
    return v2, v1


def _up_to_mount(directory: str) -> List[str]:
    """The cgroup directory and its ancestors up to the mount: a parent's limit also binds."""
    chain = [directory]
    while os.path.exists(os.path.join(os.path.dirname(chain[-1]), "cgroup.procs")) and \
            os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    return chain


def _smallest(values: List[Any]) -> Any:
    """The tightest limit among a cgroup and its ancestors (None entries = unlimited)."""
    found = [v for v in values if v is not None]
    return min(found) if found else None


def cgroup_limits(mountinfo: Optional[str] = None,
                  proc_cgroup: Optional[str] = None) -> Dict[str, Any]:
    """Memory limit (bytes) and CPU limit (cpus) of a cgroup; None = unlimited.

    Defaults to this process (/proc/self/mountinfo and /proc/self/cgroup); the
    arguments let a test point it at a recorded layout.
    """
    if mountinfo is None:
        mountinfo = _read("/proc/self/mountinfo") or ""
    if proc_cgroup is None:
        proc_cgroup = _read("/proc/self/cgroup") or ""
    v2, v1 = _cgroup_dirs(mountinfo, proc_cgroup)
    chain = _up_to_mount(v2) if v2 else []
    # A leaf may list no controllers while an ancestor still limits it; hybrid systems mount
    # an empty cgroup2 ("unified") next to v1, which must not count as v2.
    v2_controllers = set()
    for directory in chain:
        v2_controllers.update((_read(os.path.join(directory, "cgroup.controllers")) or "").split())
    if v2_controllers & {"memory", "cpu"}:
        mems = []  # type: List[Optional[int]]
        cpus = []  # type: List[Optional[float]]
        for directory in chain:
            mem = _read(os.path.join(directory, "memory.max"))
            mems.append(int(mem) if mem and mem.isdigit() else None)
            quota = (_read(os.path.join(directory, "cpu.max")) or "max").split()
            if len(quota) == 2 and quota[0].isdigit() and int(quota[1]) > 0:
                cpus.append(int(quota[0]) / int(quota[1]))
        return {"cgroup_version": 2, "cgroup_memory_limit": _smallest(mems),
                "cgroup_cpu_limit": _smallest(cpus)}
    if v1:
        mems, cpus = [], []
        for directory in _up_to_mount(v1["memory"]) if "memory" in v1 else []:
            mem = _read(os.path.join(directory, "memory.limit_in_bytes"))
            mems.append(int(mem) if mem and mem.isdigit() and int(mem) < V1_UNLIMITED else None)
        for directory in _up_to_mount(v1["cpu"]) if "cpu" in v1 else []:
            quota = _read(os.path.join(directory, "cpu.cfs_quota_us"))
            period = _read(os.path.join(directory, "cpu.cfs_period_us"))
            if quota and period and quota.isdigit() and period.isdigit() and int(period) > 0:
                cpus.append(int(quota) / int(period))
        return {"cgroup_version": 1, "cgroup_memory_limit": _smallest(mems),
                "cgroup_cpu_limit": _smallest(cpus)}
    return {"cgroup_version": 2 if v2 else None, "cgroup_memory_limit": None,
            "cgroup_cpu_limit": None}


def gpus() -> List[Dict[str, Any]]:
    """NVIDIA GPUs from nvidia-smi's csv query; no nvidia-smi means no GPUs."""
    binary = shutil.which("nvidia-smi")
    if not binary:
        return []
    code, out, err = _run([binary] + NVIDIA_QUERY, timeout=20.0)
    if code != 0:
        WARNINGS.append(f"gpus: nvidia-smi exited {code}: {(err or out).strip()[:200]}")
        return []
    return parse_gpus(out)


def parse_gpus(out: str) -> List[Dict[str, Any]]:
    """The rows of nvidia-smi's ``NVIDIA_QUERY`` csv; an odd row is a warning, not a GPU."""
    found = []
    for row in csv.reader(out.splitlines(), skipinitialspace=True):
        if not row or not row[0].strip():
            continue
        if len(row) != 4:
            WARNINGS.append(f"gpus: unexpected nvidia-smi line {','.join(row)!r}")
            continue
        name, mem, uuid, driver = (value.strip() for value in row)
        memory_mb = int(float(mem)) if re.match(r"^\d+(\.\d+)?$", mem) else None  # or [N/A]
        found.append({"name": name, "memory_mb": memory_mb, "uuid": uuid, "driver": driver})
    return found


def scratch() -> List[Dict[str, Any]]:
    """Places a job could write big files, with free space; the first of duplicates wins."""
    candidates = [("SCRATCH", os.environ.get("SCRATCH")), ("TMPDIR", os.environ.get("TMPDIR")),
                  ("/tmp", "/tmp"), ("/scratch", "/scratch"), ("/local", "/local"),
                  ("/dev/shm", "/dev/shm"), ("HOME", os.environ.get("HOME") or
                                            os.path.expanduser("~")), ("/", "/")]
    seen = set()
    found = []
    for source, path in candidates:
        if not path:
            continue
        try:
            stat = os.statvfs(path)
        except OSError:  # absent, or an automount that failed to mount
            continue
        real = os.path.realpath(path)
        if not os.path.isdir(path) or real in seen:
            continue
        seen.add(real)
        found.append({"path": path, "source": source,
                      "free_bytes": stat.f_bavail * stat.f_frsize,
                      "total_bytes": stat.f_blocks * stat.f_frsize,
                      "writable": os.access(path, os.W_OK)})
    return found


def infiniband(base: str = "/sys/class/infiniband") -> List[Dict[str, Any]]:
    """InfiniBand/RDMA devices under ``base`` (sysfs) with their ports' state and rate."""
    if not os.path.isdir(base):
        return []
    devices = []
    for name in sorted(os.listdir(base)):
        ports = []
        ports_dir = os.path.join(base, name, "ports")
        for port in sorted(os.listdir(ports_dir), key=lambda p: int(p) if p.isdigit() else 0) \
                if os.path.isdir(ports_dir) else []:
            state = _read(os.path.join(ports_dir, port, "state"))
            ports.append({"port": int(port) if port.isdigit() else 0,
                          "state": state.split(":", 1)[-1].strip() if state else None,
                          "rate": _read(os.path.join(ports_dir, port, "rate")),
                          "link_layer": _read(os.path.join(ports_dir, port, "link_layer"))})
        devices.append({"name": name, "ports": ports})
    return devices


def _version_key(name: str) -> Tuple[int, int]:
    minor = name[len("python3."):] if name.startswith("python3.") else ""
    return (1, int(minor)) if minor.isdigit() else (0, 0)


def _versions(paths: List[str], timeout: float = 10.0) -> Dict[str, Optional[str]]:
    """Ask each interpreter for its version, all at once (pyenv shims take ~0.2 s each)."""
    procs = {}  # type: Dict[str, Any]
    for path in paths:
        try:
            procs[path] = subprocess.Popen(
                [path, "-S", "-c", VERSION_SNIPPET], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, universal_newlines=True)
        except OSError:
            pass
    versions = dict.fromkeys(paths)  # type: Dict[str, Optional[str]]
    for path, proc in procs.items():
        try:
            out = proc.communicate(timeout=timeout)[0].strip()
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            continue
        if proc.returncode == 0 and re.match(r"^\d+\.\d+\.\d+$", out):
            versions[path] = out
    return versions


def pythons() -> List[Dict[str, Any]]:
    """python3 and python3.X on PATH (first hit per name, as a shell would) that really run.

    A command that cannot report its version (e.g. a pyenv shim for an uninstalled
    version) is not a usable interpreter and is left out.
    """
    first = {}  # type: Dict[str, str]
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        try:
            names = os.listdir(directory or ".")
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if PYTHON_NAME.match(name) and name not in first and os.path.isfile(path) \
                    and os.access(path, os.X_OK):
                first[name] = path
    versions = _versions(sorted(set(first.values())))
    return [{"name": name, "path": first[name], "version": versions[first[name]]}
            for name in sorted(first, key=_version_key) if versions[first[name]]]


def _safely(field: str, collect: Callable[[], Any], default: Any) -> Any:
    """Run one collector; on any error record a warning and use the default."""
    try:
        return collect()
    except Exception as exc:  # noqa: BLE001 - one odd collector must not lose the rest
        WARNINGS.append(f"{field}: {type(exc).__name__}: {exc}")
        return default


def collect() -> Dict[str, Any]:
    """Every fact of this machine, as plain JSON-able values."""
    total, available = _safely("memory", memory, (None, None))
    kinds = _safely("cpu_kinds", cpu_kinds, [])  # several: a hybrid CPU, named by them
    facts = {
        "schema_version": SCHEMA_VERSION,
        "hostname": socket.gethostname(),
        "os": _safely("os", os_name, platform.system()),
        "system": platform.system(),
        "arch": platform.machine(),
        "kernel": platform.release(),
        "cpu_name": kinds_text(kinds) if len(kinds) > 1 else _safely("cpu_name", model_name,
                                                                      None),
        "cpu_kinds": kinds,
        "cpu_logical": os.cpu_count(),
        "cpu_physical": _safely("cpu_physical", cpu_physical, None),
        "cpu_usable": _safely("cpu_usable", cpu_usable, None),
        "memory_total": total,
        "memory_available": available,
        "gpus": _safely("gpus", gpus, []),
        "scratch": _safely("scratch", scratch, []),
        "infiniband": _safely("infiniband", infiniband, []),
        "python": {"path": sys.executable or None,
                   "version": "{}.{}.{}".format(*sys.version_info[:3])},
        "pythons": _safely("pythons", pythons, []),
    }
    facts.update(_safely("cgroup", cgroup_limits, {"cgroup_version": None,
                                                   "cgroup_memory_limit": None,
                                                   "cgroup_cpu_limit": None}))
    facts["warnings"] = list(WARNINGS)
    return facts


def main() -> None:
    """Print the facts as one JSON object on one line."""
    sys.stdout.write(json.dumps(collect(), sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
