"""CLI verb `integrate`: run a RUN.toml on workers, with a progress bar, and print the result.

The broker is the workspace's (embedded by default, started if needed). Without
``--workers`` the running fleet is used, or one local worker per core when there is none;
``--workers N`` starts N local workers for this run and stops them afterwards;
``--workers 0`` uses the fleet only and never starts the embedded broker.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.integrators.spec import RunSpec
    from mainboard.integrators.spec_parents import ParentSpec


@click.command("integrate")
@click.argument("run_file", metavar="RUN.toml", type=click.Path(dir_okay=False))
@click.option("--workers", type=click.IntRange(min=0), default=None,
              help="Local batch workers to start (default: the fleet, else one per core; "
                   "0: the fleet only, refused within seconds when none answers).")
@click.option("--max-samples", type=click.IntRange(min=1), default=None,
              help="Override [stop] max_samples (a smaller budget for a quick look).")
@common.json_option("Print the result as one JSON object.")
@click.pass_context
def integrate(ctx: click.Context, run_file: str, workers: int | None, max_samples: int | None,
              as_json: bool) -> None:
    """Integrate RUN.toml on Celery workers and print estimate ± error.

    A file with [scan], [tune] or [campaign] runs child runs (one line each on stderr as
    it ends) and prints the parent's table.

    The command reads the file and prints; the run itself is `mainboard.integrate`'s.
    Exit 0 with the result; 1 when the broker does not answer (one line naming its
    host:port and the fix) or the run failed; 2 for a bad run file or `--workers 0`
    with no fleet worker (start one with `mainboard fleet up`); 3 when the broker went
    away mid-run for longer than [broker] outage (resume with `mainboard runs resume`).
    """
    from mainboard.cli.runview import ProgressBar, emit
    from mainboard.integrators.runfile import load_run
    from mainboard.integrators.spec_parents import ParentSpec
    from mainboard.tasks.preflight import preflight, start_in_background

    common.leave_at_once()  # the runner's session let everything go before it returns
    config = common.load(ctx)
    overrides = {"stop.max_samples": max_samples} if max_samples is not None else None
    spec = _naming_ignored(run_file, partial(load_run, run_file, overrides))
    if isinstance(spec, ParentSpec):  # a scan, tune or campaign: runs child runs
        from mainboard.cli import parentview

        parentview.integrate(spec, run_file, config, workers, as_json)
        return
    preflight(spec, run_file, config)  # a refused run starts nothing, not even the broker
    # Redis boots on a thread while the runner (Celery, the coordinator) is imported; the
    # session waits for it under the broker's lock. `--workers 0` never starts it.
    starting = start_in_background(config) if workers != 0 else None
    try:
        from mainboard.tasks.runner import integrate as run_integration

        with ProgressBar(spec.name, spec.stop.max_samples, stop=spec.stop) as bar:
            result = run_integration(spec, workers, config=config, progress=bar.update,
                                     run_file=run_file)
    finally:
        if starting is not None:
            starting.join()
    emit(result, as_json)


def _naming_ignored(run_file: str, load: Callable[[], RunSpec | ParentSpec]
                    ) -> RunSpec | ParentSpec:
    """The run file loaded; the keys a gammaboard file holds with no meaning here are named
    in one warning line on stderr (integrators/ reports them as a Python warning)."""
    import warnings

    from mainboard.integrators.gammaboard import IgnoredKeys

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IgnoredKeys)
        spec = load()
    for w in caught:
        if issubclass(w.category, IgnoredKeys):
            common.warn(f"{run_file}: {w.message}")
        else:  # not ours: shown as Python would have shown it
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return spec
