"""Observables beyond the total (issue 15, part 4): histograms with per-bin errors, moments.

Known 1-d integrands with analytic bin integrals: every bin within 4 sigma, locally with
three samplers and on two real Celery workers, where every number is bit-identical to the
in-process driver. The run's histograms come back through `runs show --histograms`,
`runs export` (HwU parsed back, CSV, JSON) and the dashboard (real headless Chromium).
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mainboard
from mainboard.config import Config
from mainboard.integrators.driver import RunResult, RunState, integrate_local, step
from mainboard.integrators.plain import to_plain
from mainboard.integrators.spec import load_run_file, parse_run
from mainboard.integrators.stages import (
    BatchResult,
    build_run,
    materialize,
    merge_results,
    process_batch,
    sample,
    transform,
)
from mainboard.tasks import modules
from mainboard.tasks.codec import dumps, loads
from mainboard.tasks.workers import LocalWorkers
from tests.support.batch_helpers import invoke
from tests.support.chromium import Tab, drive
from tests.support.dashboard import INK, start_dashboard, stop_dashboard
from tests.support.integration import module_fixtures

X2: dict[str, Any] = {
    "name": "x-squared", "seed": 5, "domain": {"continuous": 1},
    "integrand": {"kind": "polynomial", "coefficients": [0.0, 0.0, 1.0]},
    "stop": {"max_samples": 160_000},
    "batching": {"batch_size": 10_000, "batches_per_iteration": 4},
    "accumulator": {"moments": 4,
                    "histograms": [{"name": "x", "of": "x0", "bins": 12, "range": [0.0, 1.0]}]},
}
SAMPLERS = {"naive": {"kind": "naive"}, "vegas": {"kind": "vegas", "bins": 32, "beta": 0.0},
            "vegas+": {"kind": "vegas", "bins": 32}}


def x2_bins(edges: np.ndarray) -> np.ndarray:
    """int_a^b x^2 dx per bin."""
    return (edges[1:] ** 3 - edges[:-1] ** 3) / 3.0


def pulls(histogram: dict[str, Any], exact: np.ndarray, component: int = 0) -> np.ndarray:
    est = np.array(histogram["estimate"][component])
    err = np.array(histogram["error"][component])
    assert (err > 0).all(), f"a bin without an error: {err}"
    return (est - exact) / err


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_histogram_of_x_squared_matches_its_analytic_bin_integrals(sampler: str) -> None:
    result = integrate_local({**X2, "sampler": SAMPLERS[sampler]})
    obs = result.observables
    assert obs is not None and obs["components"] == ["value"]
    (hist,) = obs["histograms"]
    edges = np.array(hist["edges"])
    assert np.array_equal(edges, np.linspace(0.0, 1.0, 13))
    assert sum(hist["hits"]) == result.samples  # every point lands in [0, 1]
    assert "note" not in obs
    # moment 1 estimates the total with the total's per-iteration variances (VEGAS+: the
    # strata's), averaged with fixed weights: never a smaller error than RAvg's optimum
    assert obs["moments"]["error"][0][0] >= result.error * (1 - 1e-6)
    worst = np.abs(pulls(hist, x2_bins(edges))).max()
    assert worst < 4.0, f"{sampler}: a bin is {worst:.2f} sigma off its analytic integral"
    assert math.isclose(sum(hist["estimate"][0]), result.estimate, rel_tol=1e-2)
    moments = obs["moments"]  # int_0^1 (x^2)^k dx = 1 / (2k + 1)
    assert moments["orders"] == [1, 2, 3, 4]
    for k, est, err in zip(moments["orders"], moments["estimate"][0], moments["error"][0],
                           strict=True):
        assert 0 < err and abs(est - 1.0 / (2 * k + 1)) < 4 * err, (k, est, err)


SIGMA, PEAK = 0.1, 0.5


def coverage_case(case: str, seed: int) -> tuple[dict[str, Any], Any]:
    """A VEGAS+ run (the default sampler: beta = 0.75) of 16 iterations and its exact bins."""
    base = {**X2, "seed": seed, "sampler": {"kind": "vegas", "bins": 32},
            "batching": {"batch_size": 5000, "batches_per_iteration": 2}}
    if case == "x-squared":
        return base, x2_bins
    run = {**base, "name": "peak", "integrand": {"kind": "gaussian_peak", "sigma": SIGMA,
                                                 "u": [PEAK]},
           "accumulator": {"moments": 3, "histograms": [
               {"name": "x", "of": "x0", "bins": 20, "range": [0.2, 0.8]}]}}
    return run, lambda edges: np.diff([0.5 * math.erf((e - PEAK) / (SIGMA * math.sqrt(2)))
                                       for e in edges])


@pytest.mark.parametrize("case", ["x-squared", "gaussian-peak"])
def test_vegas_plus_bin_errors_cover_the_analytic_bin_integrals(case: str) -> None:
    """Every bin within 4 sigma, and the errors neither too small nor too large: the pulls
    of all bins of three seeds have an RMS near 1 (a coverage check)."""
    every = []
    for seed in (1, 2, 3):
        run, exact = coverage_case(case, seed)
        obs = integrate_local(run).observables
        assert obs is not None
        (hist,) = obs["histograms"]
        pull = pulls(hist, exact(np.array(hist["edges"])))
        assert np.abs(pull).max() < 4.0, f"seed {seed}: a bin is {pull} sigma off"
        every.append(pull)
        for k, est, err in zip(obs["moments"]["orders"], obs["moments"]["estimate"][0],
                               obs["moments"]["error"][0], strict=True):
            exact_k = (1.0 / (2 * k + 1) if case == "x-squared"  # int f^k dx
                       else (2 * math.pi * SIGMA ** 2) ** (-(k - 1) / 2) / math.sqrt(k))
            assert abs(est - exact_k) < 4 * err, (seed, k, est, exact_k, err)
    rms = float(np.sqrt(np.mean(np.concatenate(every) ** 2)))
    assert 0.5 < rms < 2.0, f"pull RMS {rms:.2f}: the bin errors do not cover"


def test_a_bins_stratified_variance_is_the_direct_sum_over_its_strata() -> None:
    """An iteration's per-bin variance, from batches and row slices that split strata,
    equals sum_h n_h s_h^2 / N^2 computed over the whole iteration's rows at once."""
    run = build_run({**X2, "sampler": SAMPLERS["vegas+"]})
    state = RunState.start(run)
    step(state)
    sizes = state.next_batches()
    merged = merge_results([process_batch(run, state.sampler, 1, i, n)
                            for i, n in enumerate(sizes)], expected=len(sizes))
    assert merged.observables is not None and merged.observables["histograms"]["x"]["split"]
    batches = [transform(run, materialize(run, state.sampler, sample(run, state.sampler, 1,
                                                                     i, n)))
               for i, n in enumerate(sizes)]
    x = np.concatenate([b.x for b in batches])[:, 0]
    wf = np.concatenate([b.weights for b in batches]) * x * x
    stratum = np.concatenate([state.sampler.strata_layout(b, i)[0]  # type: ignore[index]
                              for i, b in enumerate(batches)])
    at = np.minimum((x * 12).astype(int), 11)
    n_h = np.bincount(stratum)[stratum]  # each row's stratum size, all >= 2
    cell = stratum * 12 + at  # (stratum, bin): s1, s2 of the bin's contribution in h
    s1, s2 = (np.bincount(cell, weights=v, minlength=12 * (stratum.max() + 1))
              for v in (wf, wf * wf))
    first = np.unique(cell, return_index=True)[1]  # one row per non-empty cell
    per_cell = n_h[first] / (n_h[first] - 1.0) * (s2[cell[first]] - s1[cell[first]] ** 2
                                                  / n_h[first])
    direct = np.bincount(at[first], weights=per_cell, minlength=12) / x.size ** 2
    ours = merged.observable_estimates()["histograms"]["x"]  # type: ignore[index]
    assert np.allclose([float(v) for v in ours["var"]], direct, rtol=1e-8, atol=0)
    assert np.allclose(ours["mean"], np.bincount(at, weights=wf) / x.size, rtol=1e-12)


def test_a_histogram_of_the_discrete_channel_splits_the_total_by_coefficient() -> None:
    run = {**X2, "name": "channels", "domain": {"continuous": 1, "discrete": [3]},
           "integrand": {"kind": "channels", "coefficients": [1.0, 2.0, 3.0], "sigma": 0.2},
           "sampler": {"kind": "discrete"}, "stop": {"max_samples": 60_000},
           "batching": {"batch_size": 5000, "batches_per_iteration": 4},
           "accumulator": {"histograms": [{"name": "channel", "of": "d0", "bins": 3,
                                           "range": [-0.5, 2.5]}]}}
    result = integrate_local(run)
    assert result.observables is not None and "moments" not in result.observables
    (hist,) = result.observables["histograms"]
    exact = np.array([1.0, 2.0, 3.0]) / 6.0 * result.exact  # same peak in every channel
    assert np.abs(pulls(hist, exact)).max() < 4.0


def test_batch_sums_cross_the_wire_and_merge_once_in_batch_order() -> None:
    run = build_run({**X2, "sampler": SAMPLERS["vegas+"]})
    state = RunState.start(run)
    step(state)  # the second iteration's strata are uneven: some straddle batches
    sizes = state.next_batches()
    results = [process_batch(run, state.sampler, 1, i, n) for i, n in enumerate(sizes)]
    wired = [BatchResult.from_dict(loads(dumps(r.to_dict()))) for r in results]
    random.Random(3).shuffle(wired)  # finished in any order, merged in batch order
    a, b = merge_results(results, expected=len(sizes)), merge_results(wired, len(sizes))
    assert a.observables is not None and b.observables is not None
    for name, part in a.observables["histograms"].items():
        other = b.observables["histograms"][name]
        for key, value in part.items():
            if key == "split":  # joined per stratum before squaring: same strata, same bits
                assert list(value) == list(other[key])
                assert all(v["s1"].tobytes() == other[key][h]["s1"].tobytes()
                           for h, v in value.items())
            else:
                assert value.tobytes() == other[key].tobytes(), key
    assert a.observables["moments"]["sum"].tobytes() == b.observables["moments"]["sum"].tobytes()
    assert a.observables["moments"]["split"], "no stratum straddles two batches"
    assert a.observables["histograms"]["x"]["split"]
    assert a.observable_estimates() == b.observable_estimates()
    assert int(a.observables["histograms"]["x"]["hits"].sum()) == sum(sizes)


def test_a_snapshot_holds_running_totals_and_resumes_to_the_same_bits() -> None:
    """The snapshot's size does not grow with iterations; a run restored from its JSON
    snapshot ends with the numbers of one never interrupted; ``discard`` applies too."""
    run = build_run({**X2, "sampler": SAMPLERS["vegas"], "stop": {"max_iterations": 6},
                     "accumulator": {**X2["accumulator"], "discard": 2}})
    whole = integrate_local(run)
    state, sizes = RunState.start(run), []
    while len(state.accumulator.iterations) < 5:
        step(state)
        sizes.append(len(json.dumps(to_plain(state.snapshot()["accumulator"]["observables"]))))
    assert sizes[4] < 1.1 * sizes[2], sizes  # O(bins), not O(iterations * bins)
    assert state.accumulator.observables["kept"] == 3  # type: ignore[index]
    snap = json.loads(json.dumps(to_plain(state.snapshot())))
    resumed = integrate_local(run, state=RunState.restore(run, snap))
    assert resumed.observables == whole.observables and whole.observables is not None
    hits = whole.observables["histograms"][0]["hits"]
    assert sum(hits) == 4 * 40_000  # the 4 kept iterations' points


def test_a_histogram_function_is_a_workspace_module_imported_afresh_when_edited() -> None:
    """Workers forget an edited workspace module before building a run: histogram
    functions are among the run's targets, like python integrands."""
    data = {**X2, "accumulator": {"histograms": [
        {"name": "r", "of": "histfns:square", "bins": 2, "range": [0.0, 1.0]},
        {"name": "x", "of": "x0", "bins": 2, "range": [0.0, 1.0]}]}}
    assert modules.python_targets(data) == ["histfns:square"]


def test_runs_without_observables_keep_their_ids_and_snapshots() -> None:
    plain = {k: v for k, v in X2.items() if k != "accumulator"}
    spec = parse_run(plain)
    assert spec.model_dump(mode="json")["accumulator"] == {"kind": None, "discard": 0}
    assert spec.run_id() == parse_run({**plain, "accumulator": {"moments": 0}}).run_id()
    state = RunState.start(build_run(spec))
    result = process_batch(state.run, state.sampler, 0, 0, 100)
    assert "observables" not in result.to_dict() and result.observables is None
    assert "observables" not in state.snapshot()["accumulator"]
    assert "observables" not in integrate_local({**plain, "stop": {"max_samples": 2000},
                                                 "batching": {"batch_size": 1000}}).to_dict()


def test_a_process_integrands_points_are_histogrammed_like_a_python_ones() -> None:
    """The worker knows the point; the process only returns f: the protocol is unchanged."""
    repo = Path(__file__).resolve().parents[2]
    command = [sys.executable, str(repo / "examples" / "process" / "sin_evaluator.py")]
    run = {**X2, "name": "proc-hist", "domain": {"continuous": 2},
           "sampler": {"kind": "vegas", "beta": 0.0}, "stop": {"max_samples": 30_000},
           "accumulator": {"moments": 2, "histograms": [
               {"name": "x0", "of": "x0", "bins": 6, "range": [0.0, 1.0]},
               {"name": "x1", "of": "x1", "bins": 4, "range": [0.0, 1.0]}]}}
    proc = integrate_local({**run, "integrand": {"kind": "process", "command": command}})
    builtin = integrate_local({**run, "integrand": {
        "kind": "python", "target": "tests.process_fixtures.targets:sin_x0"}})
    assert proc.observables == builtin.observables and proc.observables is not None
    edges = np.array(proc.observables["histograms"][0]["edges"])  # int sin x0 over the bin
    assert np.abs(pulls(proc.observables["histograms"][0],
                        np.cos(edges[:-1]) - np.cos(edges[1:]))).max() < 4.0


BAD = [
    ('of = "x1"', "accumulator.histograms[0].of: x1 is not a coordinate of the point"),
    ('of = "y"', "accumulator.histograms[0].of: not of the required form"),
    ("bins = 0", "accumulator.histograms[0].bins: must be greater than or equal to 1"),
    ("range = [1.0, 0.0]", "accumulator.histograms[0].range: range must be [low, high]"),
    ("colour = 3", "unknown key 'colour'; valid: bins, name, of, range"),
    ('of = "no_such_module_h:f"',  # found when the run is built: no line to name
     "accumulator.histograms[0].of: cannot import module 'no_such_module_h'"),
]


@pytest.mark.parametrize(("line", "needle"), BAD, ids=[b[0].split()[0] + str(i)
                                                       for i, b in enumerate(BAD)])
def test_a_bad_histogram_spec_exits_2_with_one_line(tmp_path: Path, line: str,
                                                    needle: str) -> None:
    (tmp_path / "mainboard.toml").write_text('[workspace]\nname = "t"\n\n[broker]\n'
                                             'url = "redis://127.0.0.1:1/0"\n')
    key = line.split()[0]
    table = {"name": '"h"', "of": '"x0"', "bins": "4", "range": "[0.0, 1.0]"}
    table[key] = line.split(" = ", 1)[1]
    body = "\n".join(f"{k} = {v}" for k, v in table.items())
    run = tmp_path / "bad.toml"
    run.write_text('name = "bad"\nseed = 1\n[domain]\ncontinuous = 1\n[integrand]\n'
                   'kind = "constant"\n[stop]\nmax_samples = 100\n'
                   f"[[accumulator.histograms]]\n{body}\n")
    done = invoke(tmp_path / "mainboard.toml", "integrate", str(run), "--workers", "0")
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and "Traceback" not in done.stderr, \
        done.stderr
    assert needle in lines[0], lines[0]
    assert "bad.toml" in lines[0] or "import" in needle, lines[0]
    assert not (tmp_path / ".mainboard" / "runs").exists(), "a run was recorded"


# ---------------------------------------------------------------- on two real workers
workspace_fixture, fleet_fixture = module_fixtures(2)
RUN_FILE = """\
name = "hist-x2"
seed = 9
[domain]
continuous = 1
[integrand]
kind = "polynomial"
coefficients = [0.0, 0.0, 1.0]
[sampler]
kind = "vegas"
bins = 32
[stop]
max_samples = 150_000
[batching]
batch_size = 5000
batches_per_iteration = 3
[accumulator]
moments = 4
[[accumulator.histograms]]
name = "x"
of = "x0"
bins = 10
range = [0.0, 1.0]
[[accumulator.histograms]]
name = "x-squared"
of = "histfns:square"
bins = 8
range = [0.0, 1.0]
"""


@pytest.fixture(scope="module")
def distributed(workspace: Config, fleet: LocalWorkers) -> Iterator[tuple[RunResult, RunResult]]:
    """The run on the two workers (its observable a module next to the run file, on no
    worker's path), and the same run file in this process."""
    runs = workspace.root / "runs"
    runs.mkdir()
    (runs / "histfns.py").write_text("def square(x):\n    return x[:, 0] ** 2\n")
    path = runs / "hist.toml"
    path.write_text(RUN_FILE)
    result = mainboard.integrate(path, workers=0, config=workspace)
    sys.path.insert(0, str(runs))
    try:
        local = integrate_local(load_run_file(path))
    finally:
        sys.path.remove(str(runs))
        sys.modules.pop("histfns", None)
    yield result, local


def test_two_workers_give_the_local_drivers_histograms_to_the_last_bit(
        distributed: tuple[RunResult, RunResult]) -> None:
    result, local = distributed
    assert (result.estimate, result.error, result.samples, result.iterations) == \
        (local.estimate, local.error, local.samples, local.iterations)
    assert result.observables == local.observables  # every float, bit for bit
    obs = result.observables
    assert obs is not None
    by_x, by_square = obs["histograms"]
    edges = np.array(by_x["edges"])
    assert np.abs(pulls(by_x, x2_bins(edges))).max() < 4.0
    edges = np.array(by_square["edges"])  # y = x^2: int_{sqrt a}^{sqrt b} x^2 dx
    assert np.abs(pulls(by_square, (edges[1:] ** 1.5 - edges[:-1] ** 1.5) / 3.0)).max() < 4.0
    assert sum(by_x["hits"]) == sum(by_square["hits"]) == result.samples


def test_runs_show_prints_the_histograms_and_json_carries_them(
        workspace: Config, distributed: tuple[RunResult, RunResult]) -> None:
    result, _ = distributed
    shown = invoke(workspace.path, "runs", "show", result.run_id, "--histograms")
    assert shown.exit_code == 0, shown.stderr
    assert "histogram  x of x0: 10 bins on [0, 1]" in shown.stdout
    assert "histogram  x-squared of histfns:square: 8 bins" in shown.stdout
    assert "moments    integral of f^k" in shown.stdout and "  k=4  " in shown.stdout
    first = result.observables["histograms"][0]  # type: ignore[index]
    assert f"{first['hits'][0]:,})" in shown.stdout
    as_json = invoke(workspace.path, "runs", "show", result.run_id, "--histograms", "--json")
    assert json.loads(as_json.stdout)["observables"] == result.observables
    plain = invoke(workspace.path, "runs", "show", result.run_id)
    assert "histogram" not in plain.stdout


def parse_hwu(text: str) -> dict[str, list[tuple[float, float, float, float]]]:
    """A strict reader of the HwU text: the header, then <histogram> blocks of N bins."""
    lines = text.splitlines()
    assert lines[0].startswith("##& xmin & xmax & central value & dy &"), lines[0]
    out: dict[str, list[tuple[float, float, float, float]]] = {}
    i = 1
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        head = re.fullmatch(r'<histogram> (\d+) "(.+?) \|X_AXIS@(LIN|LOG) \|Y_AXIS@(LIN|LOG)'
                            r' \|TYPE@(\w+)"', lines[i])
        assert head, lines[i]
        count, title = int(head.group(1)), head.group(2)
        rows = [tuple(float(v) for v in line.split()) for line in lines[i + 1:i + 1 + count]]
        assert all(len(r) == 4 for r in rows) and lines[i + 1 + count] == "<\\histogram>"
        out[title] = rows  # type: ignore[assignment]
        i += count + 2
    return out


def test_export_writes_hwu_csv_and_json_that_read_back(
        workspace: Config, distributed: tuple[RunResult, RunResult], tmp_path: Path) -> None:
    result, _ = distributed
    obs = result.observables
    assert obs is not None
    target = tmp_path / "hist.HwU"
    done = invoke(workspace.path, "runs", "export", "hist-x2", "--format", "hwu", "-o",
                  str(target))
    assert done.exit_code == 0 and done.stdout == "", done.stderr
    parsed = parse_hwu(target.read_text())
    assert list(parsed) == ["x", "x-squared"]
    for h in obs["histograms"]:
        rows = parsed[h["name"]]
        assert [r[0] for r in rows] == h["edges"][:-1] and [r[1] for r in rows] == h["edges"][1:]
        assert [r[2] for r in rows] == h["estimate"][0] and [r[3] for r in rows] == h["error"][0]
    as_csv = invoke(workspace.path, "runs", "export", result.run_id, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 10 + 8
    assert [float(r["estimate"]) for r in rows[:10]] == obs["histograms"][0]["estimate"][0]
    assert [int(r["hits"]) for r in rows[10:]] == obs["histograms"][1]["hits"]
    as_json = invoke(workspace.path, "runs", "export", result.run_id, "--format", "json")
    assert json.loads(as_json.stdout) == obs


def test_export_of_a_run_without_histograms_says_so_in_one_line(workspace: Config,
                                                                fleet: LocalWorkers) -> None:
    plain = {k: v for k, v in X2.items() if k != "accumulator"}
    run = mainboard.integrate({**plain, "stop": {"max_samples": 20_000}}, workers=0,
                              config=workspace)
    done = invoke(workspace.path, "runs", "export", run.run_id, "--format", "hwu")
    lines = done.stderr.strip().splitlines()
    assert done.exit_code == 2 and len(lines) == 1 and done.stdout == "", done.stderr
    assert "has no histograms or moments: add [[accumulator.histograms]]" in lines[0]


SHOT = Path("/tmp/mainboard-test-artifacts/dashboard-histograms.png")  # kept for a look


def test_the_dashboard_draws_the_histograms_and_lists_the_moments(
        workspace: Config, distributed: tuple[RunResult, RunResult]) -> None:
    result, _ = distributed
    SHOT.parent.mkdir(exist_ok=True)
    dash = start_dashboard(workspace)
    try:
        async def look(tab: Tab) -> dict[str, Any]:
            html = await tab.wait_for('id="plot-hist-1" data-points="8"', 20)
            ink = {box: await tab.evaluate(INK % box) for box in ("plot-hist-0", "plot-hist-1")}
            await tab.evaluate("document.getElementById('histograms').scrollIntoView()")
            await tab.screenshot(SHOT)
            return {"html": html, "ink": ink}

        seen = drive(dash.page(f"/run/{result.run_id}"), look)
        api = dash.api(f"/api/run/{result.run_id}")
    finally:
        stop_dashboard(dash)
    assert api["observables"] == result.observables
    html = seen["html"]
    assert "x: x0, 10 bins" in html and "x-squared: histfns:square, 8 bins" in html
    assert 'data-moment="4"' in html and "∫ f^4 dx" in html
    for box, ink in seen["ink"].items():
        assert ink > 500, f"{box} drew nothing ({ink} dark pixels)"
