"""The README's main job, run for real: a distributed 8-d integral on the embedded broker.

Starts the embedded broker, integrates the 8-dimensional Genz gaussian of
``examples/gauss-8d.toml`` with VEGAS on two local Celery workers (the estimate is
printed next to the exact value), lists the run's receipt, then shuts everything down.
``--max-samples N`` lowers the budget for a quicker look.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: mainboard/cli/demo.py
DEMO_CONFIG = ROOT / "examples" / "demo" / "mainboard.toml"
DEMO_RUN = ROOT / "examples" / "gauss-8d.toml"


def _step(*args: str) -> None:
    """Run one `mainboard` command, echoing it first, and stop the demo if it fails."""
    print(f"\n$ mainboard {shlex.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "mainboard", *args])
    if code != 0:
        raise SystemExit(f"demo: `mainboard {shlex.join(args)}` exited {code}")


def main(argv: list[str] | None = None) -> None:
    """Run the demo against examples/demo/mainboard.toml (or MAINBOARD_CONFIG)."""
    parser = argparse.ArgumentParser(prog="mainboard.cli.demo", description=__doc__)
    parser.add_argument("--max-samples", type=int, default=None,
                        help="sample budget (default: the run file's 10,000,000)")
    parser.add_argument("--workers", type=int, default=2, help="local workers (default 2)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MAINBOARD_CONFIG", str(DEMO_CONFIG))
    print(f"demo workspace: {os.environ['MAINBOARD_CONFIG']}")
    budget = ["--max-samples", str(args.max_samples)] if args.max_samples else []
    try:
        _step("broker", "up")
        _step("integrate", str(DEMO_RUN), "--workers", str(args.workers), *budget)
        _step("runs", "list")
    finally:
        _step("broker", "down")
    print("\ndemo: done")


if __name__ == "__main__":
    main()
