"""The README's main job: every step a new user would type, run for real.

Starts the embedded broker, probes this machine's facts, lists the compute
mainboard can reach, shows the broker is up, then stops it again.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "demo" / "mainboard.toml"


def _step(*args: str) -> None:
    """Run one `mainboard` command, echoing it first, and stop the demo if it fails."""
    print(f"\n$ mainboard {shlex.join(args)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "mainboard", *args])
    if code != 0:
        raise SystemExit(f"demo: `mainboard {shlex.join(args)}` exited {code}")


def main() -> None:
    """Run the demo against examples/demo/mainboard.toml (or MAINBOARD_CONFIG)."""
    os.environ.setdefault("MAINBOARD_CONFIG", str(DEMO_CONFIG))
    print(f"demo workspace: {os.environ['MAINBOARD_CONFIG']}")
    try:
        _step("broker", "up")
        _step("facts")
        _step("compute")
        _step("broker", "status")
    finally:
        _step("broker", "down")
    print("\ndemo: done")


if __name__ == "__main__":
    main()
