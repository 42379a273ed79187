"""Costs as receipts: each job's and each batch's spend, recorded where its receipts live.

A job on a host with a declared rate gets ``job.cost`` lines at submit, at each monitor
pass while it runs and at its end, each rate x the seconds run; `monitor --json` shows
them per job and in total; a host without a rate is "rate unknown", never 0. A batch's
`watch` records ``batch.cost`` lines in its own directory and shows its spend. A job
on a rental of the SIMULATED provider costs the provider's billed price x its seconds.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from mainboard.board import Board
from mainboard.bridges.jobstate import JobState
from mainboard.bridges.providers import owned_rentals
from mainboard.jobs.job import Job
from mainboard.jobs.monitor import monitor_pass
from tests.support.batch_helpers import batch_receipts, fleet_file, raw_receipts
from tests.support.boards import write_config
from tests.support.jobs_workspace import provider_workspace, wait_running
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.workspace import run_cli

pytestmark = pytest.mark.live
RATE = 3.6  # USD per hour: a dollar-thousandth per second
KEY_ENV = "MB_COSTS_SIM_KEY"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return write_config(ws, {
        "priced": {"kind": "local", "root": str(tmp_path / "priced-root"), "usd_hr": RATE},
        "free": {"kind": "local", "root": str(tmp_path / "free-root")}})


def _costs(config: Path, job_id: str) -> list[dict[str, Any]]:
    """The job's cost lines, parsed without mainboard.receipts."""
    path = config.parent / ".mainboard" / "jobs" / f"{job_id}.ndjson"
    return [r["payload"] for r in raw_receipts(path) if r["topic"] == "job.cost"]


def _gated(gate: Path) -> str:
    return f"while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done"


def test_a_running_jobs_spend_grows_at_each_pass_and_ends_once(tmp_path: Path) -> None:
    config = _workspace(tmp_path)
    gate = tmp_path / "gate"
    with Board(config) as board:
        priced = board.on("priced").submit(_gated(gate), name="priced")
        free = board.on("free").submit(_gated(gate), name="free")
        wait_running(priced)
        wait_running(free)
        assert [c["at"] for c in _costs(config, priced.id)] == ["submit"]
        passes = []
        for _ in range(2):
            done = run_cli(config, "monitor", "--json")
            assert done.returncode == 0, done.stderr
            passes.append(json.loads(done.stdout)["spend"])
        for spent in passes:
            rows = {j["id"]: j for j in spent["jobs"]}
            mine, other = rows[priced.id], rows[free.id]
            assert (mine["usd_hr"], mine["state"], mine["at"]) == (RATE, "running", "pass")
            assert mine["seconds"] > 0 and mine["usd"] == round(RATE * mine["seconds"] / 3600, 6)
            assert (other["usd_hr"], other["usd"], other["rate"]) == (None, None, "rate unknown")
            assert spent["unknown"] == [free.id] and spent["usd"] == mine["usd"]  # never 0
        first, second = ({j["id"]: j for j in p["jobs"]}[priced.id] for p in passes)
        assert second["seconds"] > first["seconds"] and second["usd"] >= first["usd"]
        human = run_cli(config, "monitor")
        assert "spend so far: $" in human.stdout and "1 job(s) rate unknown" in human.stdout
        gate.touch()
        assert priced.wait(timeout=60, poll=0.2) is JobState.COMPLETED
        assert free.wait(timeout=60, poll=0.2) is JobState.COMPLETED
        lines = _costs(config, priced.id)
        assert [c["at"] for c in lines] == ["submit", "pass", "pass", "pass", "end"]  # 3 passes
        assert lines[0] == {"id": priced.id, "usd_hr": RATE, "source": "declared usd_hr of priced",
                            "seconds": 0.0, "usd": 0.0, "at": "submit"}
        # Its end counts the job's own run: the script's start and end stamps (one clock),
        # not when the verdict happened to be seen.
        end, job_dir = lines[-1], Path(priced.view().submitted.job_dir)
        began, ended = (float((job_dir / f).read_text()) for f in ("started", "ended"))
        assert end["seconds"] == round(ended - began, 3)
        assert end["usd"] == round(RATE * end["seconds"] / 3600, 6)
        assert _costs(config, free.id)[-1]["usd"] is None
        monitor_pass(board)
        assert len(_costs(config, priced.id)) == 5  # the end is the last word


def test_batch_watch_records_and_shows_the_batch_spend(tmp_path: Path) -> None:
    config = _workspace(tmp_path)
    fleet = fleet_file(config.parent, 'name = "costly"\n[defaults]\ntarget = "priced"\n'
                                      '[[jobs]]\nname = "paid"\ncommand = "echo paid"\n'
                                      '[[jobs]]\nname = "unpriced"\ntarget = "free"\n'
                                      'command = "echo free"\n')
    started = run_cli(config, "batch", "run", str(fleet))
    assert started.returncode == 0, started.stderr
    batch_id = started.stdout.strip()
    watched = run_cli(config, "batch", "watch", batch_id, "--interval", "0.2", "--json")
    assert watched.returncode == 0, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert any(e["event"] == "spend" for e in events)
    spent = events[-1]["spend"]
    paid, unpriced = spent["jobs"]["paid"], spent["jobs"]["unpriced"]
    assert (paid["usd_hr"], paid["at"], unpriced["usd"], unpriced["rate"]) == (
        RATE, "end", None, "rate unknown")
    assert paid["usd"] == round(RATE * paid["seconds"] / 3600, 6) and paid["seconds"] > 0
    assert (spent["usd"], spent["unknown"]) == (paid["usd"], ["unpriced"])
    # The batch's own directory holds the observations; the last is what watch showed.
    costs = [r["payload"] for r in raw_receipts(batch_receipts(config.parent, batch_id))
             if r["topic"] == "batch.cost"]
    assert costs and costs[-1]["jobs"] == spent["jobs"] and costs[-1]["usd"] == spent["usd"]
    shown = run_cli(config, "batch", "show", batch_id)
    assert f"spend so far ${paid['usd']:.4f} (1 job(s) rate unknown)" in shown.stdout
    assert "rate unknown" in shown.stdout.split("spend so far")[0]  # the row of "unpriced"


def test_a_rented_jobs_spend_is_the_providers_billed_price_times_its_seconds(
        tmp_path: Path, sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    config = provider_workspace(tmp_path, sim, KEY_ENV, root=str(tmp_path / "rented-root"))
    with sim.renting(KEY_ENV):
        with Board(config) as board:
            job = board.on("gpu").submit("sleep 60", name="rented")
            (owned,) = owned_rentals(board.config.state_dir)
            state = json.loads((sim.state / "state.json").read_text())
            billed = state["rentals"][str(owned.rental_id)]["dph_total"]  # the sim's own books
            wait_running(job)
            spent = monitor_pass(board)["spend"]
            (row,) = spent["jobs"]
            assert (row["id"], row["usd_hr"]) == (job.id, billed)
            assert f"rental {owned.rental_id} of gpu" in row["rate"]
            assert Job(board, job.id).cancel() is JobState.CANCELLED
            lines = _costs(config, job.id)
            assert [c["at"] for c in lines] == ["submit", "pass", "end"]
            for line in lines:
                assert line["usd_hr"] == billed
                assert line["usd"] == round(billed * line["seconds"] / 3600, 6)
            # The provider billed the rental from before the job to now: never less.
            charged = 25.0 - sim.credit()
            assert 0 < lines[-1]["usd"] <= charged
