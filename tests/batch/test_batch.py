"""Batches before they run: fleet.toml checking (naming, inheritance, every class of bad
input with file, line, key and fix), ``prepare`` against the workspace mirror plan, and
``estimate`` from this workspace's own recorded dispatches and a provider's offers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mainboard.batch.plan import estimate, prepare, quantile
from mainboard.batch.run import load_batch
from mainboard.board import Board
from mainboard.bridges.base import new_uid
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.bridges.providers import RestProvider
from mainboard.bridges.provision import env_receipts, manifest_digest
from mainboard.cli.columns import read_columns
from mainboard.config import load_config
from mainboard.errors import ConfigError
from mainboard.hosts import mirror
from mainboard.jobs.job import store_of as job_store
from mainboard.jobs.job import submit
from mainboard.jobs.timing import EnvBuild, Setup, with_env
from mainboard.receipts import EnvProvisioned, JobSubmitted
from tests.support.batch_helpers import HOSTILE, fleet_file, invoke, plain_workspace, raw_receipts
from tests.support.boards import write_config
from tests.support.config_cases import PAGE_CONFIG, PAGE_FLEET
from tests.support.sim_provider import start_simulated_provider
from tests.support.workspace import toml_tables

KEY_ENV = "MB_TEST_BATCH_SIM_KEY"


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    """A workspace with local, ssh and SLURM hosts that are never contacted."""
    return plain_workspace(tmp_path)


# -- fleet.toml ------------------------------------------------------------------------------

def test_fleet_naming_and_inheritance(plain: Path) -> None:
    config = load_config(plain)
    path = fleet_file(plain.parent, f"""
[defaults]
target = "scratch"
walltime = "30m"
runtime-s = "2m"
env = {{ STAGE = "fit", KEEP = "yes" }}
fetch = ["out/"]

[[jobs]]
command = "python fit.py"
data = ["./in/d.txt"]

[[jobs]]
name = {json.dumps(HOSTILE)}
target = "hpc"
command = ["printf", "%s", "$(touch pwned)"]
walltime = 600
mem_gb = 1.5
env = {{ STAGE = "check" }}
fetch = []

[[jobs]]
target = "edge"
command = "true"
""")
    fleet = load_batch(path, config)
    assert fleet.name == "fleet" and fleet.path == path  # the file's stem when unnamed
    first, hostile, third = fleet.jobs
    assert (first.name, first.target, first.walltime, first.runtime_s, first.data, first.fetch,
            first.env) == ("scratch-1", "scratch", 1800, 120, ["in/d.txt"], ["out"],
                           {"STAGE": "fit", "KEEP": "yes"})
    assert (hostile.name, hostile.target, hostile.command, hostile.walltime, hostile.mem_gb,
            hostile.fetch, hostile.env) == (HOSTILE, "hpc", ["printf", "%s", "$(touch pwned)"],
                                            600, 1.5, [], {"STAGE": "check", "KEEP": "yes"})
    assert (third.name, third.position, third.runtime_s) == ("edge-3", 3, 120)
    assert fleet.targets == ["scratch", "hpc", "edge"]


def test_fetch_and_data_may_be_one_path_as_a_string(plain: Path) -> None:
    """The product page writes `fetch = "results/sweep-a"`: one path, no array."""
    config = load_config(plain)
    path = fleet_file(plain.parent, """
[[jobs]]
target = "scratch"
command = "python fit.py"
data = "./in/d.txt"
fetch = "results/sweep-a"
""")
    (job,) = load_batch(path, config).jobs
    assert (job.data, job.fetch) == (["in/d.txt"], ["results/sweep-a"])


BAD = {
    "unknown key": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\ncolour = "red"\n',
                    4, "jobs[1].colour", "unknown key", "runtime-s (default: None)"),
    "bad walltime": ('[defaults]\nwalltime = "soon"\n[[jobs]]\ntarget = "scratch"\n'
                     'command = "x"\n', 2, "defaults.walltime", "not a duration", '"2h"'),
    "negative walltime": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\nwalltime = -5\n',
                          4, "jobs[1].walltime", "cannot be negative", "HH:MM:SS"),
    "unknown target": ('[[jobs]]\ncommand = "x"\ntarget = "edge"\n\n[[jobs]]\ncommand = "y"\n'
                       'target = "gpu"\n', 7, "jobs[2].target", "unknown target",
                       "local, scratch, edge, hpc"),
    "inherited unknown target": ('[defaults]\ntarget = "gpu"\n[[jobs]]\ncommand = "x"\n',
                                 2, "defaults.target", "unknown target", "local, scratch"),
    "duplicate names": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\n[[jobs]]\n'
                        'name = "scratch-1"\ntarget = "scratch"\ncommand = "y"\n',
                        5, "jobs[2].name", "duplicate job name (jobs[1] at line 1",
                        "a name no other job"),
    "no target": ('[[jobs]]\ncommand = "x"\n', 1, "jobs[1]", "no target", "local, scratch"),
    "no command": ('[[jobs]]\ntarget = "scratch"\n', 1, "jobs[1]", "missing required key "
                   "command", "argv array"),
    "bad command": ('[[jobs]]\ntarget = "scratch"\ncommand = ["sh", ""]\n', 3,
                    "jobs[1].command", "not a command", "argv array of non-empty strings"),
    "name with newline": ('[[jobs]]\nname = "a\\nb"\ntarget = "scratch"\ncommand = "x"\n', 2,
                          "jobs[1].name", "control characters", "printable"),
    "data outside workspace": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\n'
                               'data = ["../secret"]\n', 4, "jobs[1].data", "not valid",
                               "workspace-relative"),
    "missing data": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\ndata = ["in/nope"]\n', 4,
                     "jobs[1].data", "does not exist", "workspace-relative"),
    "bad env name": ('[defaults]\nenv = { "A-B" = "1" }\n[[jobs]]\ntarget = "scratch"\n'
                     'command = "x"\n', 2, "defaults.env", "not valid", None),
    "bad mem": ('[[jobs]]\ntarget = "scratch"\ncommand = "x"\nmem-gb = 0\n', 4,
                "jobs[1].mem-gb", "greater than 0", "a number of GB"),
    "no jobs": ('name = "empty"\n', None, "jobs", "missing required key jobs", "jobs (required)"),
    "toml syntax": ('[[jobs]\ntarget = "scratch"\n', 1, None, "TOML syntax error", "TOML 1.0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_fleet_inputs_name_file_line_key_and_fix(plain: Path, case: str) -> None:
    text, line, key, message, hint = BAD[case]
    path = fleet_file(plain.parent, text)
    with pytest.raises(ConfigError) as caught:
        load_batch(path, load_config(plain))
    error = caught.value
    assert (error.file, error.line, error.key) == (str(path), line, key), str(error)
    assert message in error.detail, str(error)
    if hint is not None:
        assert error.valid and hint in error.valid, str(error)


def test_bad_fleet_on_the_command_line_is_one_line_exit_2(plain: Path) -> None:
    path = fleet_file(plain.parent,
                      '[[jobs]]\ntarget = "scratch"\ncommand = "x"\nwalltime = "2x"\n')
    for verb in ("prepare", "estimate", "run"):
        done = invoke(plain, "batch", verb, str(path))
        assert done.exit_code == 2, done.output
        assert done.output.strip().splitlines() == [
            f"mainboard: error: {path}:4: jobs[1].walltime: not a duration (got '2x'); valid: "
            '"HH:MM:SS", "MM:SS", "D-HH:MM:SS", "D-HH", "90s", "30m", "2h", "1d", or an '
            "integer number of seconds"]
    assert not (plain.parent / ".mainboard" / "batches").exists()


# -- prepare ---------------------------------------------------------------------------------

def test_prepare_matches_the_mirror_plan_and_runs_nothing(plain: Path, tmp_path: Path) -> None:
    ws = plain.parent
    (ws / ".gitignore").write_text("big/\n")
    (ws / "big").mkdir()
    (ws / "big" / "table.csv").write_text("x,y\n" * 5000)  # ignored: travels as extra data
    (ws / "fit.py").write_text("print('fit')\n" * 200)
    path = fleet_file(ws, f"""
[[jobs]]
name = {json.dumps(HOSTILE)}
target = "scratch"
command = "python fit.py"
data = ["big", "in/d.txt"]
[[jobs]]
target = "edge"
command = "python fit.py"
[[jobs]]
target = "scratch"
command = "true"
[[jobs]]
target = "local"
command = "true"
[[jobs]]
target = "hpc"
command = "true"
walltime = "2h"
""")
    with Board(plain) as board:
        rows = {r.name: r for r in prepare(board, load_batch(path, board.config))}
        for name, target in ((HOSTILE, "scratch"), ("edge-2", "edge"), ("scratch-3", "scratch")):
            plan = mirror.plan(board, target)
            row = rows[name]
            assert (row.files, row.raw_bytes, row.wire_bytes, row.codec, row.last_sync) == (
                len(plan.files), plan.raw_bytes, plan.wire_bytes, plan.codec, None)
            assert "fit.py" in plan.files and "big/table.csv" not in plan.files
        assert rows[HOSTILE].shared_by == 2 and rows[HOSTILE].extra_files == ["big/table.csv"]
        assert rows[HOSTILE].extra_raw_bytes == 20000 > rows[HOSTILE].extra_wire_bytes > 0
        assert rows["local-4"].in_place and rows["local-4"].files == 0
        assert rows["hpc-5"].policy == (
            "refused: host 'hpc': queue 'debug' refuses job 'hpc-5' (attempt 1): walltime "
            "2:00:00 is over max-walltime 1:00:00; no declared queue fits this job; ask for less")
        assert not (tmp_path / "scratch-root").exists()  # nothing ran, nothing was copied
        report = board.on("scratch").sync()
        after = invoke(plain, "batch", "prepare", str(path), "--json")
        assert after.exit_code == 0, after.output
        shown = {r["name"]: r for r in json.loads(after.output)}
        assert (shown[HOSTILE]["files"], shown[HOSTILE]["raw_bytes"],
                shown[HOSTILE]["last_sync"]) == (0, 0, report.synced_at.isoformat())
        assert shown["edge-2"]["files"] == len(mirror.plan(board, "edge").files) > 0
    agent = invoke(plain, "batch", "prepare", str(path), "--agent")
    assert agent.output.split("\n", 1)[0].split() == ["job", "target", "files", "raw_bytes",
                                                       "wire_bytes", "since", "access"]
    cols = {line["job"]: line for line in read_columns(agent.output.splitlines())}
    assert list(cols) == [HOSTILE, "edge-2", "scratch-3", "local-4", "hpc-5", "total"]
    mirror_scratch = (len(mirror.plan(board, "scratch").files), 0)  # synced above: nothing
    assert int(cols[HOSTILE]["files"]) == mirror_scratch[0] + 1  # + big/table.csv (extra)
    assert int(cols[HOSTILE]["raw_bytes"]) == rows[HOSTILE].extra_raw_bytes
    assert cols[HOSTILE]["since"] == report.synced_at.isoformat(timespec="seconds")
    assert cols["local-4"]["since"] == "in-place" and cols["edge-2"]["since"] == "never"
    assert cols["local-4"]["access"] == "here" and cols[HOSTILE]["access"] == "here"
    assert cols["edge-2"]["access"].startswith("unreachable: cannot reach 127.0.0.1:")
    assert cols["total"]["access"] is None
    edge = shown["edge-2"]
    assert cols["total"]["target"] == "4-targets" and cols["total"]["since"] is None
    assert int(cols["total"]["wire_bytes"]) == (  # each target's mirror once, extra data per job
        edge["wire_bytes"] + shown[HOSTILE]["extra_wire_bytes"] + shown["hpc-5"]["wire_bytes"]
        + shown["local-4"]["wire_bytes"])
    at = agent.output.splitlines()[0].index("target")  # aligned: every row's target starts there
    assert all(ln[at - 1] == " " != ln[at] for ln in agent.output.splitlines())
    people = invoke(plain, "batch", "prepare", str(path))  # a table, then a line a target
    assert "1 files, 20.0 kB -> " in people.stdout  # big/table.csv, the extra data
    assert f"mainboard: warning: edge: {cols['edge-2']['access']}" in people.stderr.splitlines()
    both = invoke(plain, "batch", "prepare", str(path), "--json", "--agent")
    assert both.exit_code == 2 and both.stdout == ""
    assert both.stderr.endswith(" batch prepare: error: --json and --agent are alternatives; "
                                "give one\n")
    refused = invoke(plain, "batch", "run", str(path))  # the policy refusal stops the batch
    assert refused.exit_code == 2 and "job 'hpc-5' would be refused by hpc" in refused.output
    assert not (ws / ".mainboard" / "batches").exists()


def test_the_product_pages_files_pass_config_check_and_batch_prepare_agent(
        tmp_path: Path) -> None:
    """The page's mainboard.toml and fleet.toml as written, run as a new user would: both
    verbs exit 0 and each unreachable or unprovisioned target is a row that says so."""
    (tmp_path / "mainboard.toml").write_text(PAGE_CONFIG)
    (tmp_path / "fleet.toml").write_text(PAGE_FLEET)
    (tmp_path / "train.py").write_text("print('train')\n")
    mainboard = [sys.executable, "-m", "mainboard"]
    checked = subprocess.run([*mainboard, "config", "check"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr
    assert "gold      ssh" in checked.stdout and "miyabi-g  pbs" in checked.stdout
    agent = subprocess.run([*mainboard, "batch", "prepare", "fleet.toml", "--agent"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (agent.returncode, agent.stderr) == (0, ""), agent.stderr
    rows = {line["job"]: line for line in read_columns(agent.stdout.splitlines())}
    assert list(rows) == ["sweep-a", "sweep-b", "total"]
    assert rows["sweep-b"]["target"] == "gold"
    assert rows["sweep-b"]["access"].startswith("unreachable: cannot reach gold:22")
    assert rows["sweep-a"]["access"].startswith(  # no python 3.14 here: says how to get one
        'not-set-up: python 3.11') and "mainboard env build --on miyabi-g" in rows["sweep-a"][
        "access"]
    assert not (tmp_path / ".mainboard" / "batches").exists()  # a plan: nothing started


# -- estimate --------------------------------------------------------------------------------

def test_estimate_zero_samples_then_fitted_from_recorded_dispatches(plain: Path) -> None:
    path = fleet_file(plain.parent, '[defaults]\nruntime-s = "90s"\n[[jobs]]\n'
                                    'target = "scratch"\ncommand = "x"\n[[jobs]]\ntarget = "edge"\n'
                                    'command = "y"\n')
    with Board(plain) as board:
        fleet = load_batch(path, board.config)
        before = estimate(board, fleet)
        assert [(e.setup.samples, e.setup.p50_s, e.setup.p90_s, e.runtime_s, e.usd_hr,
                 e.expected_usd) for e in before] == [(0, None, None, 90, 0.0, None)] * 2
        jobs = []
        for i in range(3):  # one at a time: each is seen running before it ends
            jobs.append(submit(board, "scratch", "sleep 0.6", name=f"timed-{i}"))
            assert jobs[-1].wait(timeout=30, poll=0.2) is JobState.COMPLETED
        # The same numbers, recomputed from the raw receipt lines.
        setups = []
        for job in jobs:
            lines = raw_receipts(job_store(board).file(job.id))
            submitted = lines[0]["payload"]["submitted_at"]
            running = next(ln["ts"] for ln in lines if ln["topic"] == "job.state"
                           and ln["payload"]["state"] == "running")
            setups.append(running - submitted)
        after = {e.target: e for e in estimate(board, fleet)}
    assert after["scratch"].setup.samples == 3
    assert after["scratch"].setup.p50_s == pytest.approx(sorted(setups)[1])
    assert after["scratch"].setup.p90_s == pytest.approx(quantile(setups, 0.9))
    assert after["edge"].setup == before[1].setup  # another target: still never timed
    shown = invoke(plain, "batch", "estimate", str(path), "--json")
    assert [(e["target"], e["setup"]["samples"]) for e in json.loads(shown.output)] == [
        ("scratch", 3), ("edge", 0)]
    table = invoke(plain, "batch", "estimate", str(path)).output
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert "never timed (0)" in rows["edge-2"] and "(3)" in rows["scratch-1"]
    agent = invoke(plain, "batch", "estimate", str(path), "--agent").output.splitlines()
    assert agent[0].split() == ["job", "target", "kind", "hardware", "wire_bytes", "runtime_s",
                                "setup_p50_s", "setup_p90_s", "setup_samples", "rate_usd_hr",
                                "expected_usd", "p90_usd"]  # exactly issue 14's columns
    scratch, edge = read_columns(agent)
    assert (edge["setup_samples"], edge["setup_p50_s"], edge["expected_usd"]) == ("0", None, None)
    assert (scratch["setup_samples"], scratch["rate_usd_hr"], scratch["expected_usd"],
            scratch["hardware"]) == ("3", "0", "0", "no-facts")
    assert float(scratch["setup_p50_s"] or "nan") == pytest.approx(after["scratch"].setup.p50_s,
                                                                   abs=1e-4)
    assert (int(scratch["wire_bytes"] or -1), int(edge["wire_bytes"] or -1) > 0) == (0, True)


def test_estimate_adds_the_hosts_timed_env_builds_until_the_set_is_built(plain: Path) -> None:
    """[python.deps] declared: an ssh target whose build of this set no env.provisioned
    receipt shows waits for a build (never timed: no number); once one shows it, built."""
    with plain.open("a") as out:
        out.write('\n[python.deps]\nsix = "1.16.0"\n')
    path = fleet_file(plain.parent, '[defaults]\nruntime-s = "90s"\n[[jobs]]\ntarget = "scratch"'
                                    '\ncommand = "x"\n[[jobs]]\ntarget = "edge"\ncommand = "y"\n')
    with Board(plain) as board:
        fleet = load_batch(path, board.config)
        builds = env_receipts(board.config.state_dir)

        def build(manifest: str, seconds: float) -> None:
            builds.append(EnvProvisioned(host="edge", kind="ssh", key="k", seconds=seconds,
                                         actions=["env-create"], python_version="3.11.2",
                                         purpose="job", manifest=manifest))

        def envs() -> list[tuple[str, str, int, float | None]]:
            return [(e.target, e.env.state, e.env.build.samples, e.env.build.p50_s)
                    for e in estimate(board, fleet)]

        assert envs() == [("scratch", "-", 0, None), ("edge", "to build", 0, None)]
        edge = estimate(board, fleet)[1]
        assert edge.setup.p50_s is None and edge.expected_usd is None
        build("another set", 4.0)
        build("another set", 8.0)
        assert envs()[1] == ("edge", "to build", 2, 6.0)
        table = invoke(plain, "batch", "estimate", str(path)).stdout.splitlines()
        assert "incl. env build (2)" in next(row for row in table if " edge " in row)
        assert estimate(board, fleet)[1].setup.p50_s is None  # job setup never timed there
        build(manifest_digest(board.config, "edge"), 5.0)
        assert envs()[1] == ("edge", "built", 0, None)
    shown = json.loads(invoke(plain, "batch", "estimate", str(path), "--json").output)
    assert [(r["env"]["state"], r["env"]["build"]["samples"]) for r in shown] == [
        ("-", 0), ("built", 0)]


def test_with_env_adds_a_build_only_when_both_parts_were_timed() -> None:
    timed, build = Setup(3, 1.0, 2.0), EnvBuild("to build", Setup(2, 10.0, 20.0))
    assert with_env(timed, build) == Setup(3, 11.0, 22.0)
    assert with_env(timed, EnvBuild("built")) == timed
    assert with_env(Setup(0), build) == Setup(0)
    assert with_env(timed, EnvBuild("to build")) == Setup(3)


def test_fast_jobs_are_timed_from_the_scripts_own_stamp(plain: Path) -> None:
    """A job that ends before anyone polls it has no "running" line; its script's start
    stamp (carried by the verdict) times it all the same."""
    with Board(plain) as board:
        job = submit(board, "scratch", "true", name="quick")
        # over before the first poll: its script wrote its exit code (a local host: here)
        done = Path(raw_receipts(job_store(board).file(job.id))[0]["payload"]["job_dir"])
        deadline = time.monotonic() + 60
        while not (done / "exit_code").exists():
            assert time.monotonic() < deadline, f"{done}/exit_code not written after 60 s"
            time.sleep(0.05)
        assert job.wait(timeout=30, poll=0.2) is JobState.COMPLETED
        lines = raw_receipts(job_store(board).file(job.id))
        assert [ln["topic"] for ln in lines] == ["job.submitted", "job.cost", "job.finished",
                                                 "job.cost"]
        started = lines[2]["payload"]["started_at"]
        submitted = lines[0]["payload"]["submitted_at"]
        # The host accepted it (submitted_at) a moment after it began: setup clamps at 0.
        # Both stamps are of this machine's clock: the start before the exit code was written.
        assert started <= (done / "exit_code").stat().st_mtime and submitted <= time.time()
        fleet = load_batch(fleet_file(plain.parent, '[[jobs]]\ntarget = "scratch"\n'
                                                   'command = "true"\n'), board.config)
        (row,) = estimate(board, fleet)
    assert row.setup.samples == 1
    assert row.setup.p50_s == pytest.approx(max(0.0, started - submitted))


def test_quantile_interpolates_like_numpy() -> None:
    import numpy as np

    values = [3.0, 1.0, 10.0, 4.0]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))


def _record_provider_dispatches(board: Board, host: str, ago: tuple[float, ...]) -> list[float]:
    """Receipts of jobs dispatched to ``host`` ``ago`` seconds back and seen running now, as
    the jobs layer writes them (provider bridges are not wired to submit yet); the setups,
    recomputed from the raw lines."""
    store = job_store(board)
    setups = []
    for seconds in ago:
        uid = new_uid("timed")
        store.submitted(JobSubmitted(id=uid, host=host, kind="provider", job_id=uid, name="timed",
                                     job_dir=f"/root/mainboard/.mainboard/jobs/{uid}",
                                     root="/root/mainboard", spec={},
                                     submitted_at=time.time() - seconds))
        store.observe(uid, JobStatus(JobState.RUNNING, "running"))
        lines = raw_receipts(store.file(uid))
        setups.append(lines[1]["ts"] - lines[0]["payload"]["submitted_at"])
    return setups


@pytest.mark.live
def test_estimate_rate_from_provider_offers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    server = start_simulated_provider(tmp_path / "sim")
    try:
        monkeypatch.setenv(KEY_ENV, server.api_key)
        ws = tmp_path / "ws"
        ws.mkdir()
        (ws / "fit.py").write_text("print(1)\n")
        config = write_config(ws, {"gpu": {"kind": "provider", "provider": "sim",
                                           "gpu": "SIM_RTX_4090", "max_usd_hr": 0.5}},
                              toml_tables({"providers.sim": {"kind": "simulated",
                                                             "api_url": server.url,
                                                             "api_key_env": KEY_ENV}}))
        path = fleet_file(ws, '[defaults]\ntarget = "gpu"\ncommand = "python fit.py"\n'
                              '[[jobs]]\nruntime-s = "1h"\n[[jobs]]\n')
        cheapest = RestProvider("sim", api_url=server.url, api_key_env=KEY_ENV).cheapest(
            "SIM_RTX_4090", 0.5)
        with Board(config) as board:
            fleet = load_batch(path, board.config)
            timed, untimed = estimate(board, fleet)
            ready = prepare(board, fleet)
            setups = _record_provider_dispatches(board, "gpu", ago=(40.0, 20.0, 30.0))
            fitted, unfitted = estimate(board, fleet)
    finally:
        server.stop()
    # Fitted from the three recorded dispatches (setup = first "running" line - submit).
    assert (fitted.setup.samples, unfitted.setup.samples) == (3, 3)
    assert fitted.setup.p50_s == pytest.approx(quantile(setups, 0.5))
    assert fitted.setup.p90_s == pytest.approx(quantile(setups, 0.9))
    assert 30 <= fitted.setup.p50_s < 40 and fitted.notes == []
    assert fitted.expected_usd == pytest.approx(cheapest.usd_hr * (fitted.setup.p50_s + 3600)
                                                / 3600)
    assert fitted.p90_usd == pytest.approx(cheapest.usd_hr * (fitted.setup.p90_s + 3600) / 3600)
    assert fitted.p90_usd > fitted.expected_usd > 0
    assert (unfitted.expected_usd, unfitted.notes) == (None, ["no runtime_s: cost unknown"])
    assert (timed.usd_hr, untimed.usd_hr) == (cheapest.usd_hr, cheapest.usd_hr)
    assert timed.rate.startswith(f"sim offer {cheapest.id}: 1x ")
    assert (timed.setup.samples, timed.expected_usd, timed.p90_usd, timed.notes) == (
        0, None, None, ["setup on gpu never timed: cost unknown"])
    assert untimed.notes == ["no runtime_s: cost unknown"]
    assert [(r.files, r.policy.startswith("checked when the rental is up")) for r in ready] == [
        (3, True)] * 2  # fit.py, fleet.toml, mainboard.toml: nothing contacted
    assert server.api_key not in json.dumps([timed.as_json(), untimed.as_json()])
