"""Recovery after faults (issue 19): extra wall time of an integration over an undisturbed run.

Run from the repository root as root (it makes a network namespace and starts SLURM), under
the machine lock:

    flock /tmp/mainboard-machine.lock .venv/bin/python bench/bench_recovery.py \\
        [--faults scancel,walltime,partition,sigkill] [--repeat N] [--at S]

A fleet of 2 workers built from the test infrastructure: one SLURM allocation (the suite's
real single-node SLURM) and one ssh host inside a network namespace (its own sshd; it
reaches the loopback broker only through the fleet's reverse tunnel). Each trial brings the
fleet up afresh, runs ``mainboard integrate RUN.toml --workers 0 --json`` (the fleet only)
and injects one fault ``--at`` seconds into the run:

- ``scancel``: ``scancel`` of the SLURM worker's job;
- ``walltime``: the SLURM worker started with ``--walltime 3m --retire-before 2m``, the run
  started so that its own retire clock fires ``--at`` s into the run;
- ``partition``: the namespaced host's veth link down for 30 s, then up;
- ``sigkill``: SIGKILL of the namespaced worker's whole process group ("host SIGKILL").

Each disturbed run must end with the undisturbed estimate and error bit-for-bit and the
same sample count. The table: fault, undisturbed wall (median of the --repeat undisturbed
runs), disturbed wall, extra, the goal (20 s), met?, and the 1-min load average at the end.
Both workers are not equally fast (the namespaced one's results travel through the ssh
tunnel), so each fault's survivor also runs the integration alone, undisturbed: from that,
"capacity-only" is the disturbed wall had recovery cost nothing beyond the lost worker's
share, and "recovery" the rest (detection, re-sends, the stall). The run's re-sends (its
receipts: when, which batch, why) are printed under the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from tests.support.fleet_helpers import (  # noqa: E402
    HOST_PYTHON,
    cli,
    nodes_of,
    processes_matching,
    ssh_host,
    status,
    table,
    toml_value,
    workspace,
)
from tests.support.integration import spec  # noqa: E402

FAULTS = ("scancel", "walltime", "partition", "sigkill")
GOAL_S = 20.0
PARTITION_S = 30.0
# SLURM's --signal backstop fires up to 60 s early: with retire-before >= 120 s it comes
# after the worker's own clock (a 1 m walltime retired workers before the run began)
WALLTIME, RETIRE_BEFORE = "3m", 120
HANG_S = 600.0
ALONE = {"only-ns": ("ns",), "only-cluster": ("cluster",)}  # undisturbed, one worker
SURVIVOR = {"scancel": "only-ns", "walltime": "only-ns", "partition": "only-cluster",
            "sigkill": "only-cluster"}  # the worker left to carry a fault's run
RUN = spec(name="recovery-gauss-6d", seed=19, domain={"continuous": 6},
           integrand={"kind": "genz.gaussian", "a": [3.0] * 6, "u": [0.45] * 6},
           sampler={"kind": "vegas", "bins": 32, "alpha": 0.5},
           stop={"max_samples": None, "max_iterations": 12},
           batching={"batch_size": 100_000, "batches_per_iteration": 6, "fuse": False})


def run_toml(run: dict[str, Any]) -> str:
    """A RUN.toml for ``run``: top-level keys first, then one table per dict."""
    top = [f"{k} = {toml_value(v)}" for k, v in run.items() if not isinstance(v, dict)]
    return "\n".join(top) + "\n\n" + "".join(table(k, **v) for k, v in run.items()
                                              if isinstance(v, dict))


@dataclass
class Trial:
    """One integration: its wall time, result, and what the fault did."""

    fault: str
    wall: float | None  # None: failed or hung
    result: dict[str, Any] | None
    load: float
    note: str = ""


class Bench:
    """The services and the workspace shared by every trial."""

    def __init__(self, base: Path, at: float) -> None:
        from mainboard.bridges.project import local_project
        from mainboard.bridges.provision import provision
        from mainboard.bridges.transport import LocalTransport
        from tests.support.netns import free_subnet_index, make_netns_host
        from tests.support.services import start_slurm

        self.base, self.at = base, at
        self.root = base / "root"  # one env for both hosts (the namespace has no index)
        provision(LocalTransport("bench"), root=str(self.root), python=HOST_PYTHON,
                  project=local_project(base / "wheels"))
        self.slurm = start_slurm(base / "slurm")
        self.ns = make_netns_host("recov", free_subnet_index(), base / "ns",
                                  hostname="mbt-recov-ns")
        assert self.ns.ssh is not None
        self.ws = workspace(base / "ws", table(
            "hosts.cluster", kind="slurm", partition="debug", root=str(self.root),
            python=HOST_PYTHON, env={"SLURM_CONF": str(self.slurm.conf)}),
            ssh_host("ns", self.ns.ssh, self.root, env={"UV_OFFLINE": "1"}))
        self.run_file = self.ws / "RUN.toml"
        self.run_file.write_text(run_toml(RUN))

    def close(self) -> None:
        from mainboard.services.broker import EmbeddedBroker

        with contextlib.suppress(Exception):
            self.down([])
        EmbeddedBroker(self.ws / ".mainboard").down()
        self.ns.cleanup()
        self.slurm.stop()

    # ----- the fleet ---------------------------------------------------------------------

    def up(self, walltime: bool, hosts: tuple[str, ...] = ("ns", "cluster")
           ) -> list[dict[str, Any]]:
        """The workers of ``hosts`` up and online; their status rows."""
        extra = ["--walltime", WALLTIME, "--retire-before", f"{RETIRE_BEFORE}s"] \
            if walltime else []
        for host in hosts:
            args = extra if host == "cluster" else []
            done = cli(self.ws, "fleet", "up", "--on", host, "--no-flower", *args)
            if done.returncode != 0:
                raise SystemExit(f"fleet up --on {host} failed: {done.stderr.strip()}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            rows = status(self.ws)
            if len(rows) == len(hosts) and all(r["online"] for r in rows):
                return rows
            time.sleep(0.5)
        raise SystemExit(f"the fleet not online after 180 s: {status(self.ws)}")

    def down(self, rows: list[dict[str, Any]]) -> None:
        """``fleet down --force``, then any leftover worker process of ours, by pid."""
        cli(self.ws, "fleet", "down", "--force", "--timeout", "20")
        for line in processes_matching(*nodes_of(rows)) if rows else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        subprocess.run(["scancel", "--user", "root"], env=self.slurm.env, capture_output=True,
                       timeout=30)

    # ----- faults ------------------------------------------------------------------------

    def fault(self, name: str, rows: list[dict[str, Any]]) -> Callable[[], str]:
        """The action injecting ``name`` into this fleet; it returns a note."""
        by_host = {r["host"]: r for r in rows}
        if name == "scancel":
            job = str(by_host["cluster"]["job_id"])
            return lambda: _run(["scancel", job], self.slurm.env, f"scancel {job}")
        if name == "partition":
            return self.partition
        if name == "sigkill":
            node = nodes_of([by_host["ns"]])[0]
            return lambda: kill_groups(node)
        return lambda: "retired by its own clock"  # walltime: timed by the run's start

    def partition(self) -> str:
        link = self.ns.veth_host
        _run(["ip", "link", "set", link, "down"], None, "")
        try:
            time.sleep(PARTITION_S)
        finally:
            _run(["ip", "link", "set", link, "up"], None, "")
        return f"{link} down {PARTITION_S:.0f} s"

    def retire_in(self, rows: list[dict[str, Any]]) -> float:
        """Seconds until the SLURM worker retires by its own clock (end - retire-before)."""
        from mainboard.bridges.slurm import parse_end

        job = str(next(r for r in rows if r["host"] == "cluster")["job_id"])
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%e"], env=self.slurm.env,
                             capture_output=True, text=True, timeout=30).stdout
        end = parse_end(out)
        if end is None:
            raise SystemExit(f"no end time for job {job}: {out!r}")
        return end - RETIRE_BEFORE - time.time()

    def resent(self, run_id: str, began: float) -> list[str]:
        """The run's re-sends since ``began`` (its receipts): when, which, why."""
        path = self.ws / ".mainboard" / "runs" / run_id / "receipts.ndjson"
        lines = path.read_text().splitlines() if path.exists() else []
        found = []
        for line in lines:
            receipt = json.loads(line)
            if receipt["topic"] == "run.resent" and receipt["ts"] >= began:
                p = receipt["payload"]
                found.append(f"re-sent at {receipt['ts'] - began:.1f} s: iteration "
                             f"{p['iteration']} batch {p['batch']} ({p['reason']})")
        return found

    # ----- one trial ---------------------------------------------------------------------

    def trial(self, fault: str | None) -> Trial:
        """One run: ``fault`` None (undisturbed), a key of ALONE (undisturbed on that one
        worker: the capacity reference of the faults it survives), or one of FAULTS."""
        name = fault if fault in ALONE else "none"
        rows = self.up(walltime=fault == "walltime", hosts=ALONE.get(name, ("ns", "cluster")))
        fault = None if fault in ALONE else fault
        note, inject = "", self.fault(fault, rows) if fault else None
        try:
            if fault == "walltime":
                wait = self.retire_in(rows) - self.at
                if wait < 0:
                    note = f"started {-wait:.1f} s late: retires {self.at + wait:.1f} s in"
                time.sleep(max(0.0, wait))
                if not all(r["online"] for r in status(self.ws)):
                    note += " the SLURM worker retired before the run began"
            notes: list[str] = []
            timer = threading.Timer(self.at, lambda: notes.append(inject())) if inject else None
            start, began = time.perf_counter(), time.time()
            if timer:
                timer.start()
            try:
                done = cli(self.ws, "integrate", str(self.run_file), "--workers", "0", "--json",
                           timeout=HANG_S)
                wall: float | None = time.perf_counter() - start
            except subprocess.TimeoutExpired:
                done, wall = None, None
                note += f" hung: no result after {HANG_S:.0f} s"
            if timer:
                timer.join()
            note = "; ".join(n for n in (note.strip(), *notes) if n)
            if done is not None and done.returncode != 0:
                note += f"; exit {done.returncode}: {done.stderr.strip()[-200:]}"
                wall = None
            result = json.loads(done.stdout) if done is not None and wall is not None else None
            if result is not None:
                note = "; ".join(n for n in (note, *self.resent(result["run_id"], began)) if n)
            return Trial(fault or name, wall, result, os.getloadavg()[0], note)
        finally:
            self.down(rows)


def _run(argv: list[str], env: dict[str, str] | None, note: str) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return f"{' '.join(argv)} failed: {done.stderr.strip()}"
    return note


def kill_groups(node: str) -> str:
    """SIGKILL every process group holding a process of worker ``node`` (never ours)."""
    ours = os.getpgid(0)
    groups = set()
    for line in processes_matching(node):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(int(line.split()[0])))
    groups.discard(ours)
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    return f"SIGKILL process group(s) {sorted(groups)}"


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Bit-for-bit the same estimate and error, the same sample count."""
    return all(json.dumps(a.get(k)) == json.dumps(b.get(k)) for k in ("estimate", "error",
                                                                       "samples"))


def capacity_only(fault: str, at: float, two: float, one: float) -> float:
    """The disturbed wall if recovery cost nothing but the lost worker's capacity: after
    ``at`` s the rest runs at the pace of the survivor alone (``one``: its undisturbed wall;
    back to both after a partition)."""
    if fault == "partition":
        return two + PARTITION_S * (1 - two / one)
    return at + (two - at) * one / two


def report(trials: list[Trial], at: float) -> int:
    """Print the table; 0 when every disturbed run ended right within the goal."""
    base = [t for t in trials if t.fault == "none"]
    if not base or any(t.wall is None or t.result is None for t in base):
        print("the undisturbed run failed: " + "; ".join(t.note for t in base), file=sys.stderr)
        return 1
    ref = base[0].result
    assert ref is not None
    walls = [t.wall for t in base if t.wall is not None]
    undisturbed = statistics.median(walls)
    print(f"\nrecovery after faults, {os.cpu_count()} cores; undisturbed runs: "
          + ", ".join(f"{w:.1f}" for w in walls) + " s; result "
          + f"{ref['estimate']!r} ± {ref['error']!r}, {ref['samples']} samples")
    alone = {}
    for name in ALONE:
        walls = [t.wall for t in trials if t.fault == name and t.wall is not None]
        if walls:
            alone[name] = statistics.median(walls)
            print(f"undisturbed on {name.removeprefix('only-')} alone: {alone[name]:.1f} s")
    if alone:
        print("capacity-only: the disturbed wall if recovery cost nothing beyond the lost "
              "worker's share (the survivor alone after the fault); recovery = the rest")
    head = ("fault", "undisturbed s", "disturbed s", "extra s", "goal s", "met?", "same result",
            "capacity-only s", "recovery s", "load 1m")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    failed = 0
    for t in trials:
        if t.fault == "none" or t.fault in ALONE:
            continue
        one = alone.get(SURVIVOR[t.fault])
        ideal = None if one is None else capacity_only(t.fault, at, undisturbed, one)
        right = t.result is not None and same(t.result, ref)
        extra = None if t.wall is None else t.wall - undisturbed
        met = extra is not None and extra <= GOAL_S and right
        failed += not met
        cells = (t.fault, f"{undisturbed:.1f}", "-" if t.wall is None else f"{t.wall:.1f}",
                 "-" if extra is None else f"{extra:+.1f}", f"{GOAL_S:.0f}",
                 "yes" if met else "NO", "yes" if right else "NO",
                 "-" if ideal is None else f"{ideal:.1f}",
                 "-" if ideal is None or t.wall is None else f"{t.wall - ideal:+.1f}",
                 f"{t.load:.2f}")
        print("| " + " | ".join(cells) + " |")
    for t in trials:
        if t.note:
            print(f"  {t.fault}: {t.note}")
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="comma-separated, of: " + ", ".join(FAULTS))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (and undisturbed)")
    parser.add_argument("--at", type=float, default=8.0,
                        help="seconds into the run at which the fault strikes")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--no-alone", action="store_true",
                        help="skip the undisturbed one-worker runs (the capacity reference)")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown or args.repeat < 1:
        parser.error(f"--faults {','.join(unknown)}: valid: {', '.join(FAULTS)}" if unknown
                     else f"--repeat {args.repeat}: valid: 1 or more")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the services get cleaned up
    base = Path(tempfile.mkdtemp(prefix="mb-bench-recovery-"))
    trials: list[Trial] = []
    bench = Bench(base, args.at)
    try:
        for _ in range(args.repeat):
            alone = [] if args.no_alone else \
                list(dict.fromkeys(SURVIVOR[f] for f in faults))
            for fault in (None, *alone, *faults):
                trial = bench.trial(fault)
                trials.append(trial)
                wall = "-" if trial.wall is None else f"{trial.wall:.1f} s"
                print(f"{trial.fault}: {wall} {trial.note}", file=sys.stderr, flush=True)
    finally:
        bench.close()
        if args.keep:
            print(f"work directory kept: {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    sys.exit(report(trials, args.at))


if __name__ == "__main__":
    main()
