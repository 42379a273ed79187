"""`mainboard submit --on HOST [options] -- CMD...`: submit a batch job, print its id."""

from __future__ import annotations

import click

from mainboard.cli import common


@click.command("submit", context_settings={"ignore_unknown_options": True,
                                           "allow_interspersed_args": False})
@click.option("--on", "host", default="local", show_default=True, metavar="HOST",
              help="Host from mainboard.toml to run the job on.")
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
              help="Wait for the outcome; exit 0 only if the job completed.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def submit(ctx: click.Context, host: str, name: str | None, attempt: int, walltime: str | None,
           mem_gb: float | None, cpus: int | None, gpus: int | None, queue: str | None,
           data: tuple[str, ...], fetch: tuple[str, ...], no_sync: bool, wait_: bool,
           command: tuple[str, ...]) -> None:
    """Submit CMD as a job on HOST and print its id.

    One argument is shell text (`-- 'make && ./a.out > out/log'`); several are an
    argument list, each quoted (`-- python3 fit.py --seed 3`). Queue limits are
    checked before anything leaves this machine; then HOST's workspace mirror is
    brought up to date (only what changed travels) and the job is submitted.
    """
    import sys

    from mainboard.bridges.jobstate import JobState
    from mainboard.jobs.job import submit as submit_job

    with common.board(ctx) as board:
        job = submit_job(board, host, command[0] if len(command) == 1 else list(command),
                         name=name, attempt=attempt, walltime=walltime, mem_gb=mem_gb,
                         cpus=cpus, gpus=gpus, queue=queue, data=data, fetch=fetch,
                         sync=not no_sync)
        click.echo(job.id)
        if wait_:
            state = job.wait(progress=lambda s: click.echo(f"{job.id}: {s.describe()}", err=True))
            if job.view().submitted.fetch:
                job.pull()
            sys.exit(0 if state is JobState.COMPLETED else 1)
