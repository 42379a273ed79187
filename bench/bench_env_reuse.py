"""A declared environment built once, then reused (issue 27): `mainboard run` on a workspace
declaring ``[deps] python`` at an interpreter this machine's PATH does not give (uv-managed
from a local mirror, ``tests/pymirror.py``) and one ``[python.deps]`` package, timed cold
(interpreter + env built) and warm (the "env reused" path), beside the same command run
with the interpreter directly (the peer: what a hand-activated env costs).

    .venv/bin/python bench/bench_env_reuse.py [--repeat N] [--json]

Offline: the mirror is this machine's CPython repackaged, the package a wheel made here.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.* support modules

from tests.support.boards import write_config  # noqa: E402
from tests.support.pymirror import make_mirror, tiny_wheel  # noqa: E402
from tests.support.workspace import toml_tables  # noqa: E402

PROBE = "import sys, mbtinyenv; print(sys.version.split()[0])"


def timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, done


def workspace(base: Path) -> Path:
    wheels = base / "wheels"
    tiny_wheel(wheels)
    mirror = make_mirror(base / "mirror")
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    env = {"PATH": f"{os.path.dirname(str(uv))}:{os.environ['PATH']}",
           "UV_FIND_LINKS": str(wheels), "UV_NO_INDEX": "1", "UV_OFFLINE": "1"}
    tables = {"deps": {"python": f"=={mirror.minor}.*"},
              "python": {"downloads": str(mirror.downloads), "preference": "only-managed"},
              "python.deps": {"mbtinyenv": "0.1"}, "hosts.local.env": env}
    (base / "ws").mkdir()
    return write_config(base / "ws", {"local": {"kind": "local"}},
                        extra=toml_tables(tables)).parent  # type: ignore[arg-type]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cold, warm, peer = [], [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            ws = workspace(Path(tmp))
            run = [sys.executable, "-m", "mainboard", "run", "--", "python", "-c", PROBE]
            seconds, first = timed(run, ws)
            assert "env built: local" in first.stderr, first.stderr
            cold.append(seconds)
            seconds, second = timed(run, ws)
            assert "env reused: local" in second.stderr, second.stderr
            warm.append(seconds)
            python = next((ws / ".mainboard" / "envs").glob("*/bin/python"))
            peer.append(timed([str(python), "-c", PROBE], ws)[0])
    figures = {"cold_s": statistics.median(cold), "warm_s": statistics.median(warm),
               "peer_s": statistics.median(peer)}
    figures["warm_over_cold"] = figures["warm_s"] / figures["cold_s"]
    figures["warm_minus_peer_s"] = figures["warm_s"] - figures["peer_s"]
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"first run (python + env built): {figures['cold_s']:.2f} s")
        print(f"second run (env reused):        {figures['warm_s']:.2f} s "
              f"({figures['warm_over_cold']:.2f}x the first)")
        print(f"the env's python by hand:       {figures['peer_s']:.2f} s "
              f"(mainboard adds {figures['warm_minus_peer_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
