"""Files of a workspace whose integrands live in it (not installed, not on PYTHONPATH).

Shared by the local tests (tests/tasks/test_workspace_integrands.py) and the fleet tests over
real sshd (tests/fleet/test_fleet_integrate.py, tests/fleet/test_fleet_standby.py). Module names carry a ``tag`` so two test
modules in one pytest process never share a module in ``sys.modules``.

- ``<tag>_help.py`` (workspace root): ``SCALE``, the number the integral equals;
- ``runs dir/<tag>_mod.py`` (next to the run file): ``f(x) = 2 SCALE x0``, importing the
  helper from the workspace root, so both import roots are needed;
- ``procs/<tag>_proc.py``: a process evaluator (the project's Python helper) returning
  ``2 x0``; with ``$MAINBOARD_FLEET_WORKER`` set it writes ``<tag>_proc.ran`` beside
  itself, and the module writes ``<tag>_mod.ran``: proof of which copy ran.
"""

from __future__ import annotations

from pathlib import Path

RUNS_DIR = "runs dir"  # a space in the folder: import roots are paths, never shell words
BATCH, BATCHES = 2000, 2

MODULE = '''\
import os
from pathlib import Path

from {tag}_help import SCALE

if os.environ.get("MAINBOARD_FLEET_WORKER"):
    Path(__file__).with_suffix(".ran").write_text(os.path.realpath(__file__))


def f(x):
    return 2.0 * SCALE * x[:, 0]
'''

PROCESS = '''\
import os
from pathlib import Path

from gammaboard_process import Evaluator, run_evaluator

if os.environ.get("MAINBOARD_FLEET_WORKER"):
    Path(__file__).with_suffix(".ran").write_text(os.path.realpath(__file__))


class Ramp(Evaluator):
    def eval(self, xs_discrete, xs_continuous):
        return 2.0 * xs_continuous[:, 0]


run_evaluator(Ramp)
'''


def set_scale(ws: Path, tag: str, scale: float) -> None:
    """Write the helper module with a new SCALE (an edit between two runs)."""
    (ws / f"{tag}_help.py").write_text(f"SCALE = {scale!r}\n")


def run_toml(name: str, integrand: str) -> str:
    """A one-iteration uniform run over [0,1]^2 of ``integrand`` (TOML table text)."""
    return (f'name = "{name}"\nseed = 5\n\n[domain]\ncontinuous = 2\n\n{integrand}\n'
            '[sampler]\nkind = "naive"\n\n[stop]\nmax_iterations = 1\n\n'
            f'[batching]\nbatch_size = {BATCH}\nbatches_per_iteration = {BATCHES}\n')


def write_files(ws: Path, tag: str, python: str, process_command: list[str]) -> tuple[Path, Path]:
    """The modules, the process script and two run files; (python run, process run)."""
    runs = ws / RUNS_DIR
    (ws / "procs").mkdir(parents=True, exist_ok=True)
    runs.mkdir(parents=True, exist_ok=True)
    set_scale(ws, tag, 1.0)
    (runs / f"{tag}_mod.py").write_text(MODULE.format(tag=tag))
    (ws / "procs" / f"{tag}_proc.py").write_text(PROCESS)
    py_run = runs / f"{tag}-python.toml"
    py_run.write_text(run_toml(f"{tag}-python",
                               f'[integrand]\nkind = "python"\ntarget = "{tag}_mod:f"\n'))
    command = ", ".join(f'"{c}"' for c in [python, *process_command])
    proc_run = runs / f"{tag}-process.toml"
    proc_run.write_text(run_toml(f"{tag}-process", f'[integrand]\nkind = "process"\n'
                                 f'command = [{command}]\nexact = 1.0\n'))
    return py_run, proc_run


def assert_close(result: object, value: float) -> None:
    """The estimate within 5 sigma of ``value`` (every sample evaluated, none NaN)."""
    estimate, error = result.estimate, result.error  # type: ignore[attr-defined]
    assert result.samples == BATCH * BATCHES and result.nan_count == 0, result  # type: ignore[attr-defined]
    assert error > 0 and abs(estimate - value) < 5 * error, (estimate, error, value)
