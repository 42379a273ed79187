"""Extra wall time of an integration whose Sentinel-managed master is SIGKILLed mid-run
(issue 29 item 4), over the same run undisturbed on the same set, for two fleets:

- ``local``: ``mainboard integrate RUN --workers 2`` (two local workers);
- ``ssh``: the same two local workers plus a fleet worker on an ssh host (a real sshd on
  loopback, ``mainboard fleet up`` of a pool there, so the keeper and Flower run too). The
  ssh worker is given the sentinels' addresses and follows the failover itself.

Run from the repository root:

    .venv/bin/python bench/bench_failover.py [--repeat N] [--variants local,ssh] [--json]

Each trial starts a fresh set (a master, one replica, three sentinels: tests/support/sentinels.py),
runs the undisturbed run, then the disturbed one, which SIGKILLs the master once iteration
1 is recorded. Both must end with the in-process reference numbers bit for bit. Printed:
seconds, the extra seconds and the disturbed/undisturbed ratio per variant. Goal: extra
<= 20 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from tests.support.fleet_helpers import (  # noqa: E402
    batch_consumers,
    cli,
    provision_root,
    ssh_host,
    table,
    tear_down,
    wait_until,
    workspace,
)
from tests.support.integration import toml  # noqa: E402
from tests.support.outage import (  # noqa: E402
    FLEET_SHAPE,
    FLEET_TABLES,
    numbers,
    reference,
    run_id_of,
    sentinel_broker,
    start,
    wait_iteration,
    workspace_run,
)
from tests.support.sentinels import SentinelSet, start_sentinel_set  # noqa: E402
from tests.support.services import SshServer, start_sshd  # noqa: E402

GOAL_S = 20.0
VARIANTS = ("local", "ssh")


def _run(ws: Path, found: SentinelSet, name: str, kill: bool) -> tuple[float, bool]:
    """Wall seconds of one run (its name makes it a new run id in the same workspace) and
    whether it ended with the reference numbers."""
    run = workspace_run(ws, name=name, **FLEET_TABLES)
    (ws / f"{name}.toml").write_text(toml(run))
    expected = reference(run)
    began = time.monotonic()
    proc = start(ws, "integrate", f"{name}.toml", "--workers", "2", "--json")
    if kill:
        wait_iteration(ws / ".mainboard", run_id_of(run), proc)
        found.kill(found.master_port())
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"run failed (exit {proc.returncode}): {err.strip().splitlines()[-1:]}")
    wall = time.monotonic() - began
    return wall, numbers(json.loads(out)) == (expected.estimate, expected.error, *FLEET_SHAPE)


def _trial(root: Path, variant: str, trial: int, ssh: tuple[SshServer, Path] | None
           ) -> dict[str, Any]:
    """One undisturbed and one disturbed run of ``variant`` on a fresh set."""
    found = start_sentinel_set(root / f"{variant}-set{trial}")
    tables = [sentinel_broker(found.entries, found.master)]
    if variant == "ssh":
        assert ssh is not None
        tables += [ssh_host("box", ssh[0], ssh[1]), table("fleet.pools.remote", host="box")]
    ws = workspace(root / f"{variant}-ws{trial}", *tables)
    try:
        if variant == "ssh":
            up = cli(ws, "fleet", "up")
            if up.returncode != 0:
                raise SystemExit(f"fleet up failed: {up.stderr.strip().splitlines()[-1:]}")
            wait_until(lambda: batch_consumers(ws) > 0, 90, "the ssh worker online")
        calm, calm_same = _run(ws, found, "calm", kill=False)
        wall, same = _run(ws, found, "failover", kill=True)
    finally:
        if variant == "ssh":
            tear_down(ws, "--timeout", "20")
        found.stop()
    return {"variant": variant, "undisturbed_s": round(calm, 2), "disturbed_s": round(wall, 2),
            "extra_s": round(wall - calm, 2), "ratio": round(wall / calm, 2),
            "same_numbers": calm_same and same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="trials per variant (default 1)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, of: " + ", ".join(VARIANTS))
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants {args.variants!r}: valid: a comma-separated list of "
                     + ", ".join(VARIANTS))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ssh = None
        if "ssh" in variants:  # one sshd and one provisioned host root for every trial
            ssh = (start_sshd(root / "sshd"), provision_root(root / "host-root"))
        try:
            rows = [_trial(root, v, trial, ssh) for trial in range(args.repeat)
                    for v in variants]
        finally:
            if ssh is not None:
                ssh[0].stop()
    summary: dict[str, Any] = {"trials": rows, "goal_s": GOAL_S}
    for v in variants:
        mine = [r for r in rows if r["variant"] == v]
        summary[v] = {"median_extra_s": statistics.median(r["extra_s"] for r in mine),
                      "median_ratio": statistics.median(r["ratio"] for r in mine)}
        summary[v]["met"] = summary[v]["median_extra_s"] <= GOAL_S
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{'variant':>8} {'undisturbed':>12} {'disturbed':>10} {'extra':>7} {'ratio':>6}  "
          "same numbers")
    for r in rows:
        print(f"{r['variant']:>8} {r['undisturbed_s']:>11.1f}s {r['disturbed_s']:>9.1f}s "
              f"{r['extra_s']:>6.1f}s {r['ratio']:>5.2f}x  {r['same_numbers']}")
    for v in variants:
        s = summary[v]
        print(f"{v}: median extra {s['median_extra_s']:.1f} s, disturbed/undisturbed "
              f"{s['median_ratio']:.2f}x (goal <= {GOAL_S:.0f} s extra: "
              f"{'met' if s['met'] else 'NOT met'})")


if __name__ == "__main__":
    main()
