"""Where `mainboard integrate`'s overhead goes: a per-step trace, no profiler.

Run from the repository root:

    .venv/bin/python bench/trace_integrate.py [--rounds 2] [--other PY] [--samples 2000000]

Each round runs ``python bench/trace_integrate.py --child ... integrate RUN`` on an idle
workspace (embedded broker down, two local workers from nothing), this checkout and
``--other`` (another checkout's venv python) in turn. The child wraps named functions once
their module loads (the first call in, the last return out, seconds since its start)
and writes them at exit; the parent adds the whole command's wall time and the run's own
``wall_s``. Printed per run: the command, the integration, the overhead, and its parts.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import importlib.abc
import importlib.util
import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

T0 = time.perf_counter()
EVENTS: list[tuple[float, str]] = []
# module -> functions (or (class, method)) to time; a module a checkout lacks is skipped
PATCH: dict[str, list[str | tuple[str, str]]] = {
    "mainboard.cli.common": ["load"],
    "mainboard.services.broker": ["resolve_broker_url"],
    "mainboard.tasks.workers": [("LocalWorkers", "start"), ("LocalWorkers", "stop")],
    "mainboard.tasks.app": ["make_app"],
    "mainboard.tasks.coordinator": [("Coordinator", "run")],
    "mainboard.tasks.runner": ["integrate", "session"],
}


def _mark(what: str) -> None:
    EVENTS.append((time.perf_counter() - T0, what))


def _wrap(fn: Any, label: str) -> Any:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        _mark(label + " in")
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(label + " out")
    return timed


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str) -> None:
        self.inner, self.name = inner, name

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        for item in PATCH[self.name]:
            if isinstance(item, tuple):
                owner = getattr(module, item[0])
                setattr(owner, item[1], _wrap(getattr(owner, item[1]), ".".join(item)))
            else:
                setattr(module, item, _wrap(getattr(module, item), item))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in PATCH:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, name)
        return spec


def child(out: str, argv: list[str]) -> None:
    """Run ``mainboard ARGV`` here, traced; the events go to ``out`` at exit."""
    sys.meta_path.insert(0, _Finder())

    def report() -> None:
        _mark("atexit")
        Path(out).write_text(json.dumps(EVENTS))
    atexit.register(report)
    sys.argv = ["mainboard", *argv]
    runpy.run_module("mainboard", run_name="__main__", alter_sys=True)


def one(python: str, ws: Path, name: str, samples: int) -> str:
    """One traced run on an idle workspace; a line of its parts."""
    example = Path(__file__).resolve().parents[1] / "examples" / "gauss-8d.toml"
    subprocess.run([python, "-m", "mainboard", "--config", "mainboard.toml", "broker", "down"],
                   cwd=ws, capture_output=True, check=False)
    (ws / "run.toml").write_text(example.read_text().replace('"gauss-8d"', f'"{name}"'))
    out = ws / "trace.json"
    start = time.perf_counter()
    done = subprocess.run([python, __file__, "--child", str(out), "--config", "mainboard.toml",
                           "integrate", "run.toml", "--max-samples", str(samples), "--json"],
                          cwd=ws, capture_output=True, text=True, check=True)
    total = time.perf_counter() - start
    first: dict[str, float] = {}
    for at, what in json.loads(out.read_text()):
        first.setdefault(what, at)
    wall = float(json.loads(done.stdout)["wall_s"])

    def span(a: str, b: str) -> float:
        return first.get(b, float("nan")) - first.get(a, float("nan"))
    return (f"total {total:5.2f}  wall_s {wall:5.2f}  overhead {total - wall:5.2f} | to "
            f"integrate() {first.get('integrate in', float('nan')):5.2f}  broker "
            f"{span('resolve_broker_url in', 'resolve_broker_url out'):5.3f}  session to "
            f"workers started {span('session in', 'LocalWorkers.start out'):5.3f}  run end "
            f"to atexit {span('Coordinator.run out', 'atexit'):5.3f}  atexit to exit "
            f"{total - first['atexit']:5.3f}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--other", default=None, metavar="PYTHON")
    args = parser.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="mb-trace-integrate-"))
    (ws / "mainboard.toml").write_text('[workspace]\nname = "trace"\n')
    sides = {"this": sys.executable, **({"other": args.other} if args.other else {})}
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min)")
    try:
        for i in range(args.rounds):
            for label, python in sides.items():
                print(f"{label:5} round {i}: {one(python, ws, f'trace-{label}-{i}', args.samples)}")
                time.sleep(2.0)  # the workers of the last run leave
    finally:
        subprocess.run([sys.executable, "-m", "mainboard", "--config", "mainboard.toml",
                        "broker", "down"], cwd=ws, capture_output=True, check=False)
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")


if __name__ == "__main__":
    main()
