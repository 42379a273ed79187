"""Per-test CPU seconds of everything a test started: `MAINBOARD_TEST_CPU=DIR` (opt-in).

Wall time says little on two cores shared by four xdist workers; CPU time says what a test
costs the machine. Each pytest process moves itself into a cgroup (v1 `cpuacct`) of its own,
so every process it starts is counted with it, daemons included (a cgroup is inherited
through fork, whoever reaps the child). Each test's setup, call and teardown add one line
`nodeid<TAB>cpu_s<TAB>wall_s` to `DIR/cpu-<worker>.tsv`; `python -m tests.support.cpuclock DIR`
sums them per file and lists the costliest tests. A daemon a module fixture leaves running is
charged to the tests that run while it spins. Linux with cgroup v1 and root only; elsewhere
the variable says one line and nothing is measured.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup/cpuacct")
ENV = "MAINBOARD_TEST_CPU"


class CpuClock:
    """The cpuacct cgroup one pytest process and its descendants run in."""

    def __init__(self, out: Path, worker: str) -> None:
        for old in CGROUP_ROOT.glob("mbtest-*"):  # earlier runs' groups, empty once they ended
            # another xdist worker's new group may gain its process between read and rmdir
            if not (old / "cgroup.procs").read_text().strip():
                with contextlib.suppress(OSError):
                    old.rmdir()
        self.group = CGROUP_ROOT / f"mbtest-{os.getpid()}"
        self.group.mkdir(exist_ok=True)
        (self.group / "cgroup.procs").write_text(str(os.getpid()))
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / f"cpu-{worker}.tsv").open("a", buffering=1)

    def usage(self) -> float:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9

    def record(self, nodeid: str, cpu_s: float, wall_s: float) -> None:
        self.log.write(f"{nodeid}\t{cpu_s:.3f}\t{wall_s:.3f}\n")


def start(worker: str) -> CpuClock | None:
    """The clock of this pytest process, or None (variable unset, or no cgroup v1 here)."""
    out = os.environ.get(ENV)
    if not out:
        return None
    if not CGROUP_ROOT.is_dir() or not os.access(CGROUP_ROOT, os.W_OK):
        print(f"{ENV}: no writable {CGROUP_ROOT} (cgroup v1 cpuacct, as root): "
              "CPU per test not measured", file=sys.stderr)
        return None
    return CpuClock(Path(out), worker)


def timed(clock: CpuClock, nodeid: str):  # noqa: ANN201 - a generator for a hookwrapper
    """Wraps one test's protocol: charge it the cgroup's CPU while it ran."""
    cpu0, wall0 = clock.usage(), time.monotonic()
    yield
    clock.record(nodeid, clock.usage() - cpu0, time.monotonic() - wall0)


def summary(folder: Path, top: int = 25) -> str:
    """Total CPU, CPU per file and the costliest tests, from every worker's lines."""
    per_test: dict[str, tuple[float, float]] = {}
    for tsv in folder.glob("cpu-*.tsv"):
        for line in tsv.read_text().splitlines():
            nodeid, cpu, wall = line.rsplit("\t", 2)
            per_test[nodeid] = (float(cpu), float(wall))
    per_file: dict[str, float] = defaultdict(float)
    for nodeid, (cpu, _) in per_test.items():
        per_file[nodeid.split("::")[0]] += cpu
    total = sum(cpu for cpu, _ in per_test.values())
    lines = [f"{len(per_test)} tests, {total:.0f} CPU s in all"]
    lines.append("files by CPU s:")
    for path, cpu in sorted(per_file.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {cpu:8.1f}  {path}")
    lines.append("tests by CPU s (wall s):")
    for nodeid, (cpu, wall) in sorted(per_test.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {cpu:8.1f} ({wall:6.1f})  {nodeid}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
