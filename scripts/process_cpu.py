"""CPU of every process a run started, by command name, from Linux process accounting.

Why: the suite is CPU-bound on two cores, and a per-test figure (tests/support/cpuclock.py)
does not say which kind of process costs it. Process accounting records each process as it
ends (fork children included, however short), with its CPU:

    apt-get install -y acct && accton /var/log/account/pacct
    CI=true scripts/bootstrap test
    accton off && python3 scripts/process_cpu.py /var/log/account/pacct

Prints the total, the costliest command names, and the Python processes by CPU bucket (a
few costly long-lived ones, or many cheap ones, call for different cuts).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

BUCKETS = (0.1, 0.3, 0.7, 1.5, 5.0, 20.0)  # CPU seconds, upper bounds
TICKS = 100  # dump-acct prints clock ticks (AHZ)


def records(path: str) -> list[tuple[str, float]]:
    """(command, CPU s) of each process in the accounting file."""
    out = subprocess.run(["dump-acct", path], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        try:
            rows.append((fields[0], (float(fields[2]) + float(fields[3])) / TICKS))
        except (IndexError, ValueError):  # a line dump-acct could not decode
            continue
    return rows


def bucket(cpu: float) -> str:
    for bound in BUCKETS:
        if cpu < bound:
            return f"< {bound:g} s"
    return f">= {BUCKETS[-1]:g} s"


def main(path: str, top: int = 15) -> None:
    rows = records(path)
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for name, seconds in rows:
        cpu[name] += seconds
        count[name] += 1
    print(f"{sum(cpu.values()):,.0f} CPU s in {len(rows):,} processes")
    for name, seconds in cpu.most_common(top):
        print(f"{seconds:9.1f} s {count[name]:7,d}  {name}")
    by: Counter[str] = Counter()
    many: Counter[str] = Counter()
    for name, seconds in rows:
        if name.startswith("python"):
            by[bucket(seconds)] += seconds
            many[bucket(seconds)] += 1
    print("python processes by their CPU:")
    for label in [bucket(b - 1e-9) for b in BUCKETS] + [bucket(BUCKETS[-1])]:
        print(f"  {label:>9}: {many[label]:6,d} processes, {by[label]:7.1f} CPU s")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/var/log/account/pacct")
