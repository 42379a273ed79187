"""Faults found by injection into the fleet (issue 19), the pure parts: the worker's own
retire clock against its allocation's end, and SLURM's signal kept as a backstop."""

from __future__ import annotations

import time

from mainboard.fleet.launch import UpOptions, signal_backstop, worker_spec
from mainboard.config.models import SlurmHost
from mainboard.tasks.fleet import RETIRE_ENV, parse_end, retire_delay


def test_the_allocation_end_is_read_as_squeue_prints_it() -> None:
    end = parse_end("2026-12-03T10:40:12\n")
    assert end == time.mktime((2026, 12, 3, 10, 40, 12, 0, 0, -1))
    assert parse_end("N/A") is None and parse_end("Unknown") is None and parse_end("") is None


def test_the_worker_retires_exactly_retire_before_the_end_by_its_own_clock() -> None:
    assert retire_delay(end=1000.0, retire_before=60, now=900.0) == 40.0
    assert retire_delay(end=1000.0, retire_before=60, now=950.0) == 0.0


def test_slurms_early_signal_is_only_a_backstop_after_the_workers_own_retirement() -> None:
    for before in (2, 30, 60, 119, 120, 300, 3600):
        back = signal_backstop(before)
        assert 1 <= back < before
        if before >= 120:
            assert back + 60 <= before  # fires at most 60 s early: still after the worker's
    spec = worker_spec("hpc", SlurmHost(kind="slurm"), UpOptions.parse(walltime="10m"),
                       worker_id="w1")
    assert spec.retire_before == 240 and spec.env[RETIRE_ENV] == "300"
