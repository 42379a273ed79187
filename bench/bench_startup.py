"""Startup, side by side in one run: `mainboard fleet up` on an ssh host vs a worker started by
hand over ssh, each to its first task done; and the `integrate` command vs the integration.

Run from the repository root:

    .venv/bin/python bench/bench_startup.py [--runs 3] [--parts fleet,integrate] [--other PY]
        [--gc-side]

``--gc-side`` also times this checkout with ``MAINBOARD_GC_HOLD=0`` (before the start-up's
garbage-collector hold, mainboard/names.hold_gc). ``--other PY`` times another checkout's mainboard (its venv's python, e.g. the commit
before a change) in the same rounds, so before and after share the load.

fleet: a real loopback sshd (tests/support/services.start_sshd) whose host root holds the worker
environment already (provisioned once before timing: the case the target is about). Each
round, interleaved so load drifts hit both alike:

- by hand: the `ssh` binary runs `celery worker ... &` with the env's python (the URL on
  stdin), then a probe task on the worker's queue; the broker is already up, no tunnel
  (the worker reaches loopback Redis directly, as both run on this machine);
- fleet up: `python -m mainboard fleet up --on ssh` in a new process (imports, config,
  connection, provisioning check, reverse tunnel through the keeper, submit), then the
  same probe on the host's queue once the command returned; then `fleet down` (untimed).

integrate: `python -m mainboard integrate RUN` on an idle workspace (no broker, no
workers: the embedded Redis and two local workers started from nothing, stopped after)
against the integration itself as the command reports it (its run's first batch sent to
its last merged, from the run's receipts). Prints the medians and the ratios; issue 13's
targets: fleet up <= 1.5x by hand, integrate overhead <= 1.2 s (issue 30: 0.6 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.*

from mainboard.fleet.records import host_queue  # noqa: E402
from mainboard.fleet.workers import broker_route  # noqa: E402
from mainboard.names import GC_HOLD_ENV  # noqa: E402
from mainboard.tasks.app import make_app  # noqa: E402
from mainboard.tasks.fleet import PROBE_TASK  # noqa: E402
from tests.support.fleet_helpers import HOST_PYTHON, config, ssh_host, workspace  # noqa: E402

FLEET_TARGET = 1.5
INTEGRATE_TARGET_S = 0.6  # issue 30 (issue 13's was 1.2 s)


def bytecode_env(ws: Path, bytecode: bool = True) -> dict[str, str]:
    """This environment with bytecode caches written and read as an installed mainboard's
    are, or (``bytecode`` False) every module compiled from source on each start, as under
    ``PYTHONDONTWRITEBYTECODE`` with no cache to read (an empty prefix of its own)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not bytecode:
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(ws / "no-pycache"))
    return env


def _cli(ws: Path, *args: str, timeout: float = 600, python: str = sys.executable,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([python, "-m", "mainboard", "--config",
                           str(ws / "mainboard.toml"), *args], cwd=ws, capture_output=True,
                          text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise SystemExit(f"mainboard {' '.join(args)} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-400:]}")
    return done


def _probe(url: str, queue: str) -> None:
    app = make_app(broker_url=url)
    app.send_task(PROBE_TASK, queue=queue).get(timeout=300)
    app.close()


def by_hand(ws: Path, server: Any, root: Path, python: str) -> float:
    """Seconds: `ssh host 'celery worker ... &'`, then its first probe done."""
    argv = ["ssh", "-i", str(server.identity), "-p", str(server.port), "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={server.known_hosts()}", f"{server.user}@{server.host}"]
    route = broker_route(config(ws), start=True)
    assert route is not None
    celery = (f"exec {python} -m celery -A mainboard.tasks.app worker -Q bench.hand -c 1 "
              "-n bench-hand@%h --without-mingle --without-gossip -I mainboard.tasks.fleet")
    script = (f"read -r U; export MAINBOARD_BROKER_URL=\"$U\"; cd {root}; "
              f"({celery}) > bench-hand.log 2>&1 < /dev/null & echo $!")
    start = time.perf_counter()
    pid = subprocess.run([*argv, script], input=route.url + "\n", capture_output=True,
                         text=True, check=True).stdout.strip()
    _probe(route.url, "bench.hand")
    took = time.perf_counter() - start
    subprocess.run([*argv, f"kill -TERM {pid}"], check=False)
    time.sleep(1.0)  # the worker leaves before the next round
    return took


def by_fleet(ws: Path, *flags: str, python: str = sys.executable) -> dict[str, float]:
    """Seconds: `mainboard fleet up --on ssh` returned, and its first probe done."""
    url = broker_route(config(ws), start=True)
    assert url is not None
    start = time.perf_counter()
    _cli(ws, "fleet", "up", "--on", "ssh", *flags, python=python)
    returned = time.perf_counter() - start
    _probe(url.url, host_queue("ssh"))
    took = time.perf_counter() - start
    _cli(ws, "fleet", "down", "--timeout", "30", python=python)
    return {"returned": returned, "total": took}


def fleet_part(base: Path, runs: int, other: str | None) -> list[str]:
    from mainboard.bridges.project import local_project
    from mainboard.bridges.provision import provision
    from mainboard.bridges.transport import LocalTransport
    from mainboard.services.broker import EmbeddedBroker
    from tests.support.services import start_sshd

    root = base / "root"
    env = provision(LocalTransport("bench"), root=str(root), python=HOST_PYTHON,
                    project=local_project(base / "ws" / ".mainboard"))
    sshd = start_sshd(base / "sshd")
    ws = workspace(base / "ws", ssh_host("ssh", sshd, root))
    sides = {"": sys.executable, **({" (--other)": other} if other else {})}
    try:
        for python in sides.values():
            by_fleet(ws, python=python)  # env provisioned already: the first start stamps it
        rows: dict[str, list[float]] = {"hand": []}
        for _ in range(runs):
            rows["hand"].append(by_hand(ws, sshd, root, env.python))
            for label, python in sides.items():
                fleet = by_fleet(ws, python=python)
                rows.setdefault("up" + label, []).append(fleet["total"])
                rows.setdefault("up-return" + label, []).append(fleet["returned"])
                rows.setdefault("up-noflower" + label, []).append(
                    by_fleet(ws, "--no-flower", python=python)["total"])
    finally:
        EmbeddedBroker(ws / ".mainboard").down()
        sshd.stop()
    med = {k: statistics.median(v) for k, v in rows.items()}
    lines = [f"ssh host, environment provisioned ({runs} rounds, medians)",
             f"  by hand (ssh binary + celery worker) to first task  {med['hand']:6.2f} s"]
    for label in sides:
        ratio = med["up-noflower" + label] / med["hand"]
        lines += [f"  fleet up{label} to first task  {med['up' + label]:6.2f} s (returned at "
                  f"{med['up-return' + label]:.2f} s; Flower starts with it)",
                  f"  fleet up --no-flower{label} to first task  "
                  f"{med['up-noflower' + label]:6.2f} s",
                  f"  ratio fleet up --no-flower{label} / by hand  {ratio:5.2f}x   (target <= "
                  f"{FLEET_TARGET}x: {'met' if ratio <= FLEET_TARGET else 'NOT met'}); with "
                  f"Flower {med['up' + label] / med['hand']:5.2f}x"]
    return lines


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gauss-8d.toml"


def _sides(other: str | None, gc_side: bool) -> dict[str, tuple[str, dict[str, str]]]:
    """Label -> (python, extra environment) of each side timed in the same rounds: this
    checkout; ``--other``'s; this checkout without the start-up's garbage-collector hold
    (``MAINBOARD_GC_HOLD=0``, the code before it; its workers inherit the variable)."""
    sides = {"": (sys.executable, {})}
    if other:
        sides[" (--other)"] = (other, {})
    if gc_side:
        sides[" (no gc hold)"] = (sys.executable, {GC_HOLD_ENV: "0"})
    return sides


def integrate_part(base: Path, runs: int, samples: int, other: str | None,
                   bytecode: bool = True, gc_side: bool = False) -> list[str]:
    from mainboard.services.broker import EmbeddedBroker

    ws = workspace(base / "ws-integrate")
    env = bytecode_env(ws, bytecode)  # the command's and its workers' imports
    run_file = ws / "gauss-8d.toml"
    sides = _sides(other, gc_side)
    command: dict[str, list[float]] = {label: [] for label in sides}
    inner: dict[str, list[float]] = {label: [] for label in sides}
    cpu: dict[str, list[float]] = {label: [] for label in sides}
    for i in range(runs):
        for j, (label, (python, extra)) in enumerate(sides.items()):
            EmbeddedBroker(ws / ".mainboard").down()  # idle: the broker starts from nothing
            # a new name each time: a new run, not the finished one again
            run_file.write_text(EXAMPLE.read_text().replace('"gauss-8d"', f'"startup-{i}-{j}"'))
            start, before = time.perf_counter(), os.times()
            done = _cli(ws, "integrate", str(run_file), "--max-samples", str(samples), "--json",
                        python=python, env={**env, **extra})
            command[label].append(time.perf_counter() - start)
            after = os.times()  # the command's own CPU: its workers are not waited for
            cpu[label].append(after.children_user - before.children_user
                              + after.children_system - before.children_system)
            inner[label].append(float(json.loads(done.stdout)["wall_s"]))
            time.sleep(2.0)  # the workers of the last run leave
    EmbeddedBroker(ws / ".mainboard").down()
    lines = [f"integrate on an idle workspace (examples/gauss-8d.toml, --max-samples {samples:g};"
             f" {runs} runs, medians, "
             f"{'with bytecode caches' if bytecode else 'compiled from source each time'})"]
    for label in sides:
        cmd, integ = statistics.median(command[label]), statistics.median(inner[label])
        over = cmd - integ
        lines.append(f"  whole command{label} {cmd:6.2f} s   integration (its wall_s) {integ:6.2f} s"
                     f"   overhead {over:5.2f} s   (target <= {INTEGRATE_TARGET_S} s: "
                     f"{'met' if over <= INTEGRATE_TARGET_S else 'NOT met'});  the command's "
                     f"own CPU {statistics.median(cpu[label]):5.2f} s")
    return lines


CLI_TARGETS_S = {"--help": 0.2, "runs list": 0.5}


def _timed(ws: Path, python: str, args: list[str], bytecode: bool,
           extra: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one ``python -m mainboard ARGS`` in ``ws``: with
    bytecode caches written and read as an installed mainboard's are, or (``bytecode``
    False) every module compiled from source, as under ``PYTHONDONTWRITEBYTECODE``."""
    env = {**bytecode_env(ws, bytecode), **(extra or {})}
    before = os.times()
    start = time.perf_counter()
    subprocess.run([python, "-m", "mainboard", *args], cwd=ws, env=env, check=True,
                   capture_output=True)
    wall = time.perf_counter() - start
    after = os.times()
    return wall, (after.children_user - before.children_user
                  + after.children_system - before.children_system)


def cli_part(base: Path, runs: int, other: str | None, bytecode: bool = True,
             gc_side: bool = False) -> list[str]:
    """`mainboard --help` and `runs list` (a workspace with one finished run, the broker
    down), each side in turn per round; medians of wall and CPU time."""
    from mainboard.services.broker import EmbeddedBroker

    ws = workspace(base / "ws-cli")
    (ws / "run.toml").write_text(EXAMPLE.read_text())
    _cli(ws, "integrate", str(ws / "run.toml"), "--max-samples", "100000")
    EmbeddedBroker(ws / ".mainboard").down()
    sides = _sides(other, gc_side)
    verbs = {"--help": ["--help"], "runs list": ["runs", "list"]}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for python, extra in sides.values():  # warm: bytecode written, page cache filled
        for args in verbs.values():
            _timed(ws, python, args, bytecode, extra)
    for _ in range(runs):
        for verb, args in verbs.items():
            for label, (python, extra) in sides.items():
                times.setdefault((verb, label), []).append(
                    _timed(ws, python, args, bytecode, extra))
    lines = [f"CLI start ({runs} rounds, medians; wall / CPU user+sys; "
             f"{'with bytecode caches' if bytecode else 'compiled from source each time'})"]
    for verb in verbs:
        for label in sides:
            wall = statistics.median(t[0] for t in times[verb, label])
            cpu = statistics.median(t[1] for t in times[verb, label])
            target = CLI_TARGETS_S[verb]
            lines.append(f"  mainboard {verb:10}{label:11} wall {wall:5.3f} s  cpu {cpu:5.3f} s"
                         f"   (target <= {target} s: {'met' if wall <= target else 'NOT met'})")
        for label in list(sides)[1:]:
            ratio = (statistics.median(t[0] for t in times[verb, ""])
                     / statistics.median(t[0] for t in times[verb, label]))
            lines.append(f"  ratio {verb} this / {label.strip(' ()')}: {ratio:4.2f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds per side (medians)")
    parser.add_argument("--parts", default="fleet,integrate", help="fleet, integrate, cli")
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--other", default=None, metavar="PYTHON",
                        help="also time this interpreter's mainboard (another checkout's venv, "
                             "e.g. before a change) in the same rounds")
    parser.add_argument("--gc-side", action="store_true",
                        help="cli, integrate: also time this checkout with MAINBOARD_GC_HOLD=0 "
                             "(before the start-up's garbage-collector hold) in the same rounds")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="cli, integrate: compile every module each time "
                             "(PYTHONDONTWRITEBYTECODE with no cache to read), as this "
                             "machine's shells run")
    args = parser.parse_args()
    parts = {p for p in args.parts.split(",") if p}
    base = Path(tempfile.mkdtemp(prefix="mb-bench-startup-"))
    lines = [f"load before: {os.getloadavg()[0]:.2f} (1-min), {os.cpu_count()} cores"]
    try:
        if "fleet" in parts:
            lines += fleet_part(base, args.runs, args.other)
        if "cli" in parts:
            lines += cli_part(base, args.runs, args.other, bytecode=not args.no_bytecode,
                              gc_side=args.gc_side)
        if "integrate" in parts:
            lines += integrate_part(base, args.runs, args.samples, args.other,
                                    bytecode=not args.no_bytecode, gc_side=args.gc_side)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines.append(f"load after: {os.getloadavg()[0]:.2f} (1-min)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
