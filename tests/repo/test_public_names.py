"""The public names CHANGELOG.md promises keep working ("Public names that keep working"):
``from mainboard.jobs import Job, submit, list_jobs`` and the stage tasks
``mainboard.tasks.<stage>`` (``materialise`` the old name of ``materialize``), each handed
out by its package's lazy door; a name the door does not know is an AttributeError.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_jobs_package_hands_out_job_submit_and_list_jobs() -> None:
    import mainboard.jobs
    from mainboard.jobs import Job, list_jobs, submit
    from mainboard.jobs import job as module

    assert (Job, submit, list_jobs) == (module.Job, module.submit, module.list_jobs)
    with pytest.raises(AttributeError, match="module 'mainboard.jobs' has no attribute 'Jobs'"):
        mainboard.jobs.Jobs  # noqa: B018 - the attribute access is the test


# In a fresh interpreter: the first stage task builds the process-wide Celery app (its broker
# URL from the environment; nothing connects), which this process must not share.
STAGES = """
import mainboard.tasks as t
print(t.sample.name, t.materialise.name, t.materialise is t.materialize)
print(t.integrate.__name__, t.integrate.name)
for ask in (lambda: t.task("materialise"), lambda: t.samples):
    try:
        ask()
    except AttributeError as exc:
        print(exc)
"""


def test_the_tasks_package_hands_out_each_stage_task_and_the_old_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINBOARD_")
           or k.startswith("MAINBOARD_COVERAGE")}
    done = subprocess.run([sys.executable, "-c", STAGES], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60,
                          env={**env, "MAINBOARD_BROKER_URL": "redis://127.0.0.1:9/0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mainboard.stages.sample mainboard.stages.materialize True",
        "mainboard.tasks.integrate mainboard.integrate",
        "no stage task 'materialise'; valid: sample, materialize, transform, evaluate, "
        "accumulate, fused, bundle, raster",
        "module 'mainboard.tasks' has no attribute 'samples'"]
