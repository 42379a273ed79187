"""Extra wall time of an integration whose Sentinel-managed master is SIGKILLed mid-run
(issue 29 item 4), over the same run undisturbed on the same set.

Run from the repository root:

    .venv/bin/python bench/bench_failover.py [--repeat N] [--json]

A master, one replica and three sentinels (redis-server, tests/support/sentinels.py), a workspace
with ``[broker] sentinels``, ``master`` and ``min_replicas = 1``, ``mainboard integrate
run.toml --workers 2 --json``. The disturbed run SIGKILLs the master once iteration 1 is
recorded; it must end with the undisturbed numbers bit for bit. Goal: extra <= 20 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from tests.support.integration import toml  # noqa: E402
from tests.support.outage import RUN, numbers, run_id_of, start, wait_iteration  # noqa: E402
from tests.support.sentinels import SentinelSet, start_sentinel_set  # noqa: E402

GOAL_S = 20.0


def _one(root: Path, found: SentinelSet, kill: bool) -> tuple[float, tuple]:
    """Wall seconds and numbers of one run in a fresh workspace under ``root``."""
    ws = Path(tempfile.mkdtemp(dir=root))
    entries = ", ".join(f'"{e}"' for e in found.entries)
    (ws / "mainboard.toml").write_text(
        f'[workspace]\nname = "failover"\n\n[broker]\nsentinels = [{entries}]\n'
        f'master = "{found.master}"\nmin_replicas = 1\noutage = "60s"\n')
    (ws / "run.toml").write_text(toml(RUN))
    began = time.monotonic()
    proc = start(ws, "integrate", "run.toml", "--workers", "2", "--json")
    if kill:
        wait_iteration(ws / ".mainboard", run_id_of(RUN), proc)
        found.kill(found.master_port())
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"run failed (exit {proc.returncode}): {err.strip().splitlines()[-1:]}")
    return time.monotonic() - began, numbers(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="disturbed runs (default 1)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = []
        for trial in range(args.repeat):
            found = start_sentinel_set(root / f"set{trial}")
            try:
                calm, expected = _one(root, found, kill=False)
                wall, got = _one(root, found, kill=True)
            finally:
                found.stop()
            rows.append({"undisturbed_s": round(calm, 2), "disturbed_s": round(wall, 2),
                         "extra_s": round(wall - calm, 2), "same_numbers": got == expected})
    extra = statistics.median(r["extra_s"] for r in rows)
    summary = {"trials": rows, "median_extra_s": extra, "goal_s": GOAL_S, "met": extra <= GOAL_S}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{'undisturbed':>12} {'disturbed':>10} {'extra':>7}  same numbers")
    for r in rows:
        print(f"{r['undisturbed_s']:>11.1f}s {r['disturbed_s']:>9.1f}s {r['extra_s']:>6.1f}s  "
              f"{r['same_numbers']}")
    print(f"median extra {extra:.1f} s (goal <= {GOAL_S:.0f} s: {'met' if summary['met'] else 'NOT met'})")


if __name__ == "__main__":
    main()
