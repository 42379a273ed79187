"""A study file (a fleet.toml with a ``[study]`` table) and the run id of each of its jobs.

```toml
[study]
name = "sweep-2026"                 # the study's id (the file's stem without one)
[defaults]
target = "hpc"
data = ["in/table.csv"]             # checked to exist; shipped before the job runs
[[jobs]]
command = "python fit.py"
params = { seed = 1, lr = 0.1 }     # exported as MAINBOARD_PARAM_SEED, MAINBOARD_PARAM_LR
```

A run id is the sha256 of the job's command, its resolved environment (its env table,
the workspace's ``[deps]`` and ``[python] deps``, the target's container image), the
content digest of every file its ``data`` names, and its parameters: the same
experiment gets the same id wherever it runs (the target is not part of it), and a
changed input file gets a new one. Job names, walltimes and queues are not part of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.batch.spec import STUDY_HINT, BatchJob, BatchSpec, load_batch
from mainboard.config import Config
from mainboard.errors import ConfigError
from mainboard.ids import ID
from mainboard.jobs.files import data_files

__all__ = ["Run", "Study", "digest_inputs", "load_study", "param_env", "run_id"]

_CHUNK = 1 << 20
_PARAM_WORD = re.compile(r"[^A-Za-z0-9]+")


@dataclass(frozen=True)
class Run:
    """One job of a study, with its run id and the digests of its inputs."""

    job: BatchJob
    run_id: str
    inputs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Study:
    """A loaded study file: its id, its jobs as runs."""

    id: str
    spec: BatchSpec
    runs: list[Run]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def digest_inputs(workspace: Path, data: list[str]) -> dict[str, str]:
    """sha256 of every file under the ``data`` paths (directories walked), by path."""
    return {name: _sha256(workspace / name) for name in sorted(data_files(workspace, data))}


def environment(config: Config, job: BatchJob) -> dict[str, Any]:
    """What the job's environment resolves from: its env, the workspace deps, the image."""
    host = config.host(job.target)
    container = config.container_of(host)
    image = container.image if container else None
    return {"env": dict(sorted(job.env.items())), "deps": dict(sorted(config.deps.items())),
            "python": json.loads(config.python.model_dump_json()), "image": image}


def run_id(config: Config, job: BatchJob, inputs: dict[str, str]) -> str:
    """``r-`` and 20 hex digits of the sha256 over command, environment, inputs, params."""
    material = {"command": job.command, "environment": environment(config, job),
                "inputs": inputs, "params": dict(sorted(job.params.items()))}
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return "r-" + hashlib.sha256(text.encode()).hexdigest()[:20]


def param_env(params: dict[str, Any]) -> dict[str, str]:
    """``MAINBOARD_PARAM_<NAME>`` for each parameter (booleans as true/false)."""
    out = {}
    for name, value in params.items():
        word = _PARAM_WORD.sub("_", name).strip("_").upper() or "X"
        out[f"MAINBOARD_PARAM_{word}"] = str(value).lower() if isinstance(value, bool) \
            else str(value)
    return out


def load_study(path: str | Path, config: Config) -> Study:
    """Read a study file (fleet.toml form); ConfigError names a bad study id."""
    spec = load_batch(path, config)
    name = spec.study.name if spec.study is not None and spec.study.name else spec.path.stem
    if not ID.match(name):  # the file's stem (a [study] name was checked with its line)
        raise ConfigError("the file's name is the study's id when [study] has no name, and "
                          "this one cannot name a ledger file", file=str(spec.path),
                          value=name, valid=f"a [study] name: {STUDY_HINT}")
    runs = []
    for job in spec.jobs:
        inputs = digest_inputs(config.root, job.data)
        runs.append(Run(job, run_id(config, job, inputs), inputs))
    return Study(name, spec, runs)
