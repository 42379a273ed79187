"""The reconciler against a submission that races its pass (no services needed).

Seen live (test_fleet_reconcile.py, about one run in six): ``fleet up`` submitted the
ssh pool's worker while the keeper it had just started was reconciling; the keeper had
read the fleet record before the worker's ``worker.submitting`` receipt, listed the host
after the job started, and cancelled the job as one "no receipt knows". The record is
now read again after each listing. The host here is a stand-in whose listing writes the
racing receipt, as ``fleet up`` does, before answering.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mainboard.fleet.reconcile import Reconciler
from mainboard.fleet.records import fleet_receipts, owner_prefix
from mainboard.receipts import WorkerSubmitting
from tests.fleet_helpers import config, table, workspace


def test_a_job_submitted_while_its_host_is_listed_is_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = workspace(tmp_path / "ws", table("fleet.pools.p", host="local", queues=["q"],
                                          jobs=1))
    cfg = config(ws)
    prefix = owner_prefix(cfg.state_dir)
    cancelled: list[list[str]] = []

    class Host:
        """The host's answer: the racing job and one that nobody submitted."""

        name = kind = "local"

        def tagged(self, wanted: str) -> dict[str, str]:
            assert wanted == prefix
            fleet_receipts(cfg.state_dir).append(WorkerSubmitting(
                worker_id="racing", host="local", tag=prefix + "racing", pid=os.getpid(),
                pool="p"))  # fleet up, alive, between its receipt and the host's answer
            return {prefix + "racing": "job-1", prefix + "stray": "job-2"}

        def cancel(self, ids: list[str]) -> None:
            cancelled.append(list(ids))

    reconciler = Reconciler(cfg)  # reads the record before the submission
    monkeypatch.setattr(reconciler, "bridge", lambda host, root: Host())
    done = reconciler.run()
    assert cancelled == [["job-2"]]  # the stray one only
    assert done.cleaned == ["local: job job-2 (no receipt knows it)"]
    assert done.closed == [] and done.adopted == [] and done.errors == []
