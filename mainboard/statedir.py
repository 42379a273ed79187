"""The workspace's state directory, ``.mainboard/``: what several rooms keep there, named once.

Each room owns its own files (the job store its ``jobs/``, the broker its ``redis/``);
this module names the folders more than one room reaches into, so a path is never
spelled twice.
"""

from __future__ import annotations

from pathlib import Path

FLEET = "fleet"  # keeper pid/log/tunnel status and the key for rented machines (0700)


def private_dir(state_dir: Path, name: str) -> Path:
    """``state_dir/name``, created mode 0700 when missing (it may hold keys and secrets)."""
    path = Path(state_dir) / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def fleet_dir(state_dir: Path) -> Path:
    """Where the keeper keeps its pid, lock, log and tunnel status, and the rental key."""
    return private_dir(state_dir, FLEET)
