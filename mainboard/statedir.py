"""The workspace's state directory, ``.mainboard/``: what several rooms keep there, named once.

Each room owns its own files (the job store its ``jobs/``, the broker its ``redis/``);
this module names the folders more than one room reaches into, so a path is never
spelled twice.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

FLEET = "fleet"  # keeper pid/log/tunnel status and the key for rented machines (0700)


def private_dir(state_dir: Path, name: str) -> Path:
    """``state_dir/name``, created mode 0700 when missing (it may hold keys and secrets)."""
    path = Path(state_dir) / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def fleet_dir(state_dir: Path) -> Path:
    """Where the keeper keeps its pid, lock, log and tunnel status, and the rental key."""
    return private_dir(state_dir, FLEET)


STUDIES = "studies"  # one ledger per study: the study room writes runs, the monitor verdicts
STUDY_ENV = "MAINBOARD_STUDY"    # a study job's environment names its study and run id,
RUN_ID_ENV = "MAINBOARD_RUN_ID"  # so its own job.submitted line tells the monitor


def study_ledger(state_dir: Path, study: str) -> Path:
    """The NDJSON ledger of study ``study`` (its id is checked by the study room)."""
    return Path(state_dir) / STUDIES / f"{study}.ndjson"


MIRROR = "mirror"  # the workspace mirror's manifests: hosts/mirror writes, rentals reset them


def manifest_path(state_dir: Path, host: str, machine: str | None = None) -> Path:
    """``mirror/<host>.json``, the host name percent-encoded into one file name;
    ``<host>@<machine>.json`` for one of several machines of a host (a fleet's rentals)."""
    name = quote(host, safe="") + (f"@{quote(machine, safe='')}" if machine else "")
    return Path(state_dir) / MIRROR / f"{name}.json"
