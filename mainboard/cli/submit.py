"""`mainboard submit --on HOST [options] -- CMD...`: submit a batch job, print its id: the
scheduler's on SLURM and PBS hosts (what ``squeue``/``qstat`` list), else mainboard's.

With ``--wait`` it exits like the job: see :func:`exit_status`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from mainboard.cli import common

if TYPE_CHECKING:
    from mainboard.board import Board
    from mainboard.jobs.job import Job
    from mainboard.jobs.store import JobView
    from mainboard.routing.router import Decision

# `submit --wait` of a job that ended without an exit code of its own (by state name).
NO_CODE_EXIT = {"timeout": 124,    # killed at its walltime: GNU timeout's code
                "cancelled": 143,  # stopped on request: 128 + SIGTERM, what cancel sends
                "preempted": 75}   # lost through no fault of its own: EX_TEMPFAIL, submit again


def exit_status(view: JobView) -> int:
    """The exit code of `submit --wait`: the job's own (0 when it completed), else
    ``NO_CODE_EXIT`` by its state, else 1 (failed without a usable code)."""
    if view.state.value == "completed":
        return 0
    if view.state.value in NO_CODE_EXIT:
        return NO_CODE_EXIT[view.state.value]
    code = view.exit_code or 0
    if 256 < code < 384:  # PBS reports a job killed by signal N as 256 + N; a shell says 128 + N
        code -= 128
    return code if 0 < code < 256 else 1


@click.command("submit", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--on", "host", default="local", show_default=True, metavar="HOST",
              help='Host from mainboard.toml to run the job on; "auto": the router picks.')
@click.option("--runtime", "runtime", default=None, metavar="T",
              help="Expected runtime (--on auto ranks hosts by setup + runtime).")
@click.option("--explain", is_flag=True,
              help="--on auto: print the ranking on stderr, one row per host (why excluded).")
@click.option("--name", default=None, help="Job name (default: the command's first word).")
@click.option("--attempt", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attempt number: [hosts.X.defaults] expressions of `attempt` ask more.")
@click.option("--walltime", default=None, metavar="T", help='Walltime: seconds, "2h", "01:30:00".')
@click.option("--mem-gb", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="G", help="Memory in GB.")
@click.option("--cpus", type=click.IntRange(min=1), default=None, metavar="N", help="CPUs.")
@click.option("--gpus", type=click.IntRange(min=0), default=None, metavar="N", help="GPUs.")
@click.option("--queue", default=None, metavar="Q", help="SLURM partition / PBS queue.")
@click.option("--data", multiple=True, metavar="PATH",
              help="Workspace path the job needs on the host (repeatable).")
@click.option("--fetch", multiple=True, metavar="PATH",
              help="Path the job writes, pulled back into the workspace (repeatable).")
@click.option("--no-sync", "no_sync", is_flag=True,
              help="Do not mirror the workspace to HOST first (data paths still travel).")
@click.option("--wait", "wait_", is_flag=True,
              help="Wait for the outcome (progress on stderr), pull the fetch paths and exit "
                   "with the job's exit code (see below).")
@common.json_option("Print the job as one JSON object instead of its id (after the outcome "
                    "with --wait).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, host: str, runtime: str | None, explain: bool, name: str | None,
           attempt: int, walltime: str | None, mem_gb: float | None, cpus: int | None, gpus: int | None, queue: str | None,
           data: tuple[str, ...], fetch: tuple[str, ...], no_sync: bool, wait_: bool,
           as_json: bool, command: tuple[str, ...]) -> None:
    """Submit CMD as a job on HOST and print its id: on SLURM and PBS hosts the
    scheduler's (the id squeue/qstat list), elsewhere mainboard's. `mainboard jobs`
    verbs take either; --json has both ("id": mainboard's, "job_id": the scheduler's).

    One argument is shell text (`-- 'make && ./a.out > out/log'`); several are an
    argument list, each quoted (`-- python3 fit.py --seed 3`). Queue limits are
    checked before anything leaves this machine; then HOST's workspace mirror is
    brought up to date (only what changed travels) and the job is submitted.

    --on auto scores every declared host by fit (it answers; queue policy; GPUs and
    memory in its facts), price (provider offers, an owned host's usd_hr) and time to
    result (setup p50 from this workspace's receipts + --runtime), weighed by
    [router] in mainboard.toml, and submits to the best; the ranking is recorded in
    the job's receipts, printed on stderr with --explain, and under "routing" with
    --json. When no host fits, each is named with why (exit 2).

    \b
    Exit codes with --wait: the job's own (0 completed; N when it exited N;
    a job killed by signal N on PBS gives 128+N). A job with no exit code of
    its own gives 124 timeout (walltime), 143 cancelled (128+SIGTERM),
    75 preempted (EX_TEMPFAIL: submit it again), 1 failed otherwise.
    mainboard's own errors print one `mainboard: error:` line and exit 1
    (2 for bad input).

    \b
    --json prints the object `mainboard jobs show --json` prints:
      {"id", "name", "host", "kind", "job_id", "state", "final", "exit_code",
       "reason", "native", "submitted_at", "job_dir", "root", "spec", "data",
       "fetch", "pulled", "cost"}; "id" is mainboard's, "job_id" the scheduler's
      (mainboard's again on hosts without a scheduler); "cost": the last cost line
      {"usd_hr" (null: rate unknown), "source", "seconds", "usd", "at"}
    """
    import sys

    from mainboard.jobs.job import submit as submit_job

    cmd = command[0] if len(command) == 1 else list(command)
    options = {"name": name, "attempt": attempt, "walltime": walltime, "mem_gb": mem_gb,
               "cpus": cpus, "gpus": gpus, "queue": queue, "data": data, "fetch": fetch,
               "sync": not no_sync}
    routed: dict[str, object] | None = None
    with common.board(ctx) as board:
        if host == "auto":
            job, routed = _routed(board, cmd, runtime, explain, options)
        else:
            if explain or runtime is not None:
                raise click.UsageError("--explain and --runtime go with --on auto")
            job = submit_job(board, host, cmd, **options)
        shown = job.view().shown_id  # `jobs show|logs|pull|cancel` take either id back
        if not as_json:
            common.echo(shown)
        if wait_:
            job.wait(progress=lambda s: common.echo(f"{shown}: {s.describe()}", err=True))
            if job.view().submitted.fetch:
                job.pull()
        view = job.view()
    if as_json:
        common.echo_json(view.as_json() if routed is None else {**view.as_json(),
                                                                 "routing": routed})
    if wait_:
        sys.exit(exit_status(view))


EXPLAIN_KEYS = ("rank", "host", "kind", "fits", "usd_hr", "setup_p50_s", "setup_samples", "env",
                "expected_s", "expected_usd", "reason")


def explain_lines(decision: Decision) -> list[str]:
    """The ranking as plain aligned columns: best first, then the excluded with why."""
    from mainboard.cli import columns

    return columns.columns(EXPLAIN_KEYS, [dict(zip(EXPLAIN_KEYS, (
        c.rank, c.host, c.kind, "yes" if c.fits else "no", c.usd_hr, c.setup.p50_s,
        c.setup.samples, c.env.state, c.expected_s, c.expected_usd, c.reason), strict=True))
        for c in decision.candidates])


def _routed(board: Board, cmd: str | list[str], runtime: str | None, explain: bool,
            options: dict[str, Any]) -> tuple[Job, dict[str, object]]:
    """Rank the hosts, print the ranking when asked (stderr), submit to the best one."""
    from mainboard.config import parse_duration
    from mainboard.errors import ConfigError, NoHostFits

    try:
        runtime_s = None if runtime is None else parse_duration(runtime)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--runtime") from None
    handle = board.on("auto")
    try:
        job = handle.submit(cmd, runtime_s=runtime_s, **options)
    except NoHostFits:
        if explain and handle.decision is not None:
            for line in explain_lines(handle.decision):
                common.echo(line, err=True)
        raise
    assert handle.decision is not None
    if explain:
        for line in explain_lines(handle.decision):
            common.echo(line, err=True)
    common.echo(f"mainboard: --on auto chose {handle.decision.chosen} "
                f"(prefer {handle.decision.prefer})", err=True)
    return job, handle.decision.as_json()
