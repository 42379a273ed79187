"""Helpers for the bridge tests: a transport that proves silence, and waiting for outcomes."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import pytest

from mainboard.bridges.base import Bridge, JobRecord
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.bridges.transport import Command, Output, Transport


class NoTraffic(Transport):
    """A transport that fails the test if anything is run or copied: asserts no traffic."""

    def __init__(self, name: str = "silent") -> None:
        super().__init__(name)

    def _execute(self, command: Command, text: str, env: dict[str, str],
                 cwd: str | os.PathLike[str] | None, stdin: bytes | None, output: Output,
                 timeout: float | None) -> int | None:
        pytest.fail(f"no command may leave this machine, but {text!r} was run")

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        pytest.fail(f"no file may leave this machine, but {local} was copied")

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        pytest.fail(f"nothing may be fetched, but {remote} was")


def wait_for(bridge: Bridge, records: Sequence[JobRecord], *, until: str = "final",
             timeout: float = 60.0) -> dict[str, JobStatus]:
    """Poll until every job is final (or, with ``until="running"``, running); last statuses."""
    deadline = time.monotonic() + timeout
    while True:
        found = bridge.poll(records)
        if until == "final" and all(s.final for s in found.values()):
            return found
        if until == "running" and all(s.state is JobState.RUNNING for s in found.values()):
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"jobs not {until} after {timeout}s: {found}")
        time.sleep(0.2)
