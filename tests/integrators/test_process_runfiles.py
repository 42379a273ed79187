"""Run files with process tables, end to end: ``load_run_file`` -> ``integrate_local``.

Each of the four process kinds is written as a user writes it in ``RUN.toml`` and run
through the pure stages the Celery tasks call, with real child processes. A process
evaluator must give the built-in result bit for bit (same seed); the stages must work on
plain data (what travels between workers) with no process-specific code in the caller; bad
process tables are ConfigErrors naming the key.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.errors import ConfigError
from mainboard.integrators.driver import RunState, integrate_local
from mainboard.integrators.plain import to_plain
from mainboard.integrators.process.pool import default_pool
from mainboard.integrators.process.sampler import ProcessLatentBatch
from mainboard.integrators.samplers import restore_sampler
from mainboard.integrators.seeding import LatentBatch
from mainboard.integrators.spec import RunSpec, load_run_file
from mainboard.integrators.stages import (
    build_run,
    evaluate,
    materialize,
    process_batch,
    release_processes,
    sample,
    transform,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "process"
EXACT = 1 - math.cos(1)
PY = sys.executable
BUILTIN = f'''[integrand]
kind = "python"
target = "tests.process_fixtures.targets:sin_x0"
exact = {EXACT!r}
'''


def cmd(*parts: str | Path) -> str:
    """A TOML argv list (JSON strings are valid TOML basic strings)."""
    return json.dumps([PY, *(str(p) for p in parts)])


EVALUATOR = f'''[integrand]
kind = "process"
command = {cmd(EXAMPLES / "sin_evaluator.py")}
args = {{ scale = 1.0 }}
components = ["sin"]
timeout_s = 60
exact = {EXACT!r}
'''
SAMPLER = f'''[sampler]
kind = "process"
command = {cmd(EXAMPLES / "uniform_sampler.py")}
args = {{ batch_size = 500 }}
'''
MATERIALIZER = f'''[sampler.materializer]
kind = "process"
command = {cmd(EXAMPLES / "seed_materializer.py")}
'''
TRANSFORM = f'''[[transforms]]
kind = "process"
command = {cmd(EXAMPLES / "shift_transform.py")}
args = {{ shift = [0.3, 0.6] }}
'''


def run_file(tmp_path: Path, *tables: str, sampler: str = "vegas", dims: int = 2,
             iterations: int = 3, name: str = "RUN.toml") -> RunSpec:
    """Write a RUN.toml with the given tables (a [sampler] table replaces ``sampler``)."""
    head = f'name = "proc"\nseed = 11\n[domain]\ncontinuous = {dims}\n'
    body = "".join(tables)
    sampler_table = "" if "\n[sampler]\n" in "\n" + body else f'[sampler]\nkind = "{sampler}"\n'
    tail = (f"[stop]\nmax_iterations = {iterations}\n"
            "[batching]\nbatch_size = 3000\nbatches_per_iteration = 3\n")
    path = tmp_path / name
    path.write_text(head + sampler_table + body + tail)
    return load_run_file(path)


def near_exact(result: object) -> None:
    assert abs(result.estimate - EXACT) < 5 * result.error, (result.estimate, result.error)


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    yield
    release_processes()


def test_a_process_evaluator_run_file_matches_the_builtin_bit_for_bit(tmp_path: Path) -> None:
    spec = run_file(tmp_path, EVALUATOR)
    assert spec.integrand.request_timeout == 60.0          # timeout_s is the old name
    assert spec.accumulator_kind == "scalar"                 # one component name: scalar
    renamed = run_file(tmp_path, EVALUATOR.replace("timeout_s", "request_timeout"), name="b")
    assert renamed.run_id() == spec.run_id()
    proc = integrate_local(spec)
    builtin = integrate_local(run_file(tmp_path, BUILTIN))
    assert (proc.estimate, proc.error, proc.samples) == (builtin.estimate, builtin.error,
                                                          builtin.samples)
    assert proc.exact == EXACT and proc.iterations == 3
    near_exact(proc)
    assert len(default_pool()) == 0      # integrate_local ended the processes it started


def seen_pair(tmp_path: Path) -> tuple[str, str]:
    """An evaluator announcing metadata and a sampler reporting what it was given."""
    evaluator, sampler = tmp_path / "meta_evaluator.py", tmp_path / "meta_sampler.py"
    prelude = f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n"
    evaluator.write_text(prelude + (
        "from sin_evaluator import Sin\nfrom mainboard.integrators.process import run_evaluator\n"
        "class Meta(Sin):\n    metadata = {'peak': 0.25}\nrun_evaluator(Meta)\n"))
    sampler.write_text(prelude + (
        "from uniform_sampler import Uniform\nfrom mainboard.integrators.process import "
        "run_sampler\nclass Seen(Uniform):\n"
        "    def __init__(self, *, evaluator_metadata=None, **kw):\n"
        "        super().__init__(**kw)\n        self.meta = evaluator_metadata\n"
        "    def get_diagnostics(self):\n"
        "        return {**super().get_diagnostics(), 'evaluator_metadata': self.meta}\n"
        "run_sampler(Seen)\n"))
    return (f'[integrand]\nkind = "process"\ncommand = {cmd(evaluator)}\nexact = {EXACT!r}\n',
            SAMPLER.replace(str(EXAMPLES / "uniform_sampler.py"), str(sampler)))


def test_a_process_sampler_drives_a_run_and_hears_from_the_evaluator(tmp_path: Path) -> None:
    with_builtin = integrate_local(run_file(tmp_path, BUILTIN, SAMPLER, iterations=2))
    near_exact(with_builtin)
    evaluator, sampler = seen_pair(tmp_path)
    run = build_run(run_file(tmp_path, evaluator, sampler, iterations=2))
    state = RunState.start(run)
    both = integrate_local(run, state=state)
    # the batch seed reaches the sampler process, and sin(x0) is sin(x0) in either place
    assert (both.estimate, both.error) == (with_builtin.estimate, with_builtin.error)
    diagnostics = state.sampler.get_diagnostics()
    assert diagnostics["evaluator_metadata"] == {"peak": 0.25}
    assert diagnostics["batch_size"] == 500 * 2**6   # it adapted once per ingested batch
    state.sampler.close()


def test_a_process_transform_in_the_chain_keeps_the_integral(tmp_path: Path) -> None:
    shifted = integrate_local(run_file(tmp_path, BUILTIN, TRANSFORM, sampler="naive"))
    plain = integrate_local(run_file(tmp_path, BUILTIN, sampler="naive"))
    near_exact(shifted)
    assert shifted.estimate != plain.estimate       # the points did move


def test_a_process_materializer_draws_the_naive_points_in_one_dimension(tmp_path: Path) -> None:
    # In one dimension the example materializer draws exactly what `naive` draws from the
    # batch's own stream, so the two runs agree to the last bit.
    table = MATERIALIZER.replace("[sampler.materializer]", '[sampler]\nkind = "naive"\n'
                                 "[sampler.materializer]")
    materialized = integrate_local(run_file(tmp_path, BUILTIN, table, dims=1))
    naive = integrate_local(run_file(tmp_path, BUILTIN, sampler="naive", dims=1))
    assert (materialized.estimate, materialized.error) == (naive.estimate, naive.error)
    near_exact(materialized)


def test_every_stage_a_process_through_plain_data(tmp_path: Path) -> None:
    """What the Celery chain does: the sampler as a snapshot, the latent batch as a dict;
    the result equals the fused batch, and the run's processes are released by id."""
    spec = run_file(tmp_path, EVALUATOR, SAMPLER, MATERIALIZER, TRANSFORM, iterations=2)
    run = build_run(spec)
    assert run.uses_processes and not build_run(run_file(tmp_path, BUILTIN)).uses_processes
    snapshot = run.new_sampler().snapshot()             # what the coordinator publishes
    worker = restore_sampler(snapshot, run.domain)      # what a worker rebuilds
    latent = sample(run, worker, 0, 2, 400).to_dict()
    assert latent["kind"] == "process"
    assert isinstance(LatentBatch.from_dict(latent), ProcessLatentBatch)
    batch = transform(run, materialize(run, snapshot, latent))
    chained = evaluate(run, snapshot, latent, batch)
    coordinator = restore_sampler(snapshot, run.domain)
    fused = process_batch(run, coordinator, 0, 2, 400)
    assert to_plain(chained.to_dict()) == to_plain(fused.to_dict())
    assert sorted(chained.training) == sorted(fused.training) == ["process_training:000000000002"]
    assert len(default_pool()) == 3     # evaluator, materializer, transform of this run
    release_processes(run.run_id)
    assert len(default_pool()) == 0
    worker.inner.close()
    coordinator.inner.close()
    near_exact(integrate_local(run))
    with pytest.raises(ValueError, match="unknown latent batch kind 'bogus'"):
        LatentBatch.from_dict({**latent, "kind": "bogus"})


FULL = EVALUATOR + SAMPLER + MATERIALIZER + TRANSFORM


@pytest.mark.parametrize(("edit", "key", "fragment"), [
    ((f"command = {cmd(EXAMPLES / 'sin_evaluator.py')}\n", ""), "integrand.command",
     "missing required key"),
    (("args = { shift", "comand = []\nargs = { shift"), "transforms[0].comand",
     "unknown key 'comand'"),
    (("args = { batch_size = 500 }", "request_timeout = 0"), "sampler.request_timeout",
     "greater than 0"),
    (("args = { batch_size = 500 }", "request_timeout = true"), "sampler.request_timeout",
     "expected a number"),
    (("args = { batch_size = 500 }", 'request_timeout = "30"'), "sampler.request_timeout",
     "expected a number"),
    (("timeout_s = 60", "timeout_s = -1"), "integrand.timeout_s", "greater than 0"),
    (("timeout_s = 60", "timeout_s = 60\nrequest_timeout = 60"), "integrand.timeout_s",
     "set only request_timeout"),
    ((f"command = {cmd(EXAMPLES / 'seed_materializer.py')}",
      f"command = {cmd(EXAMPLES / 'seed_materializer.py')}\nshutdown_grace = -1"),
     "sampler.materializer.shutdown_grace", "greater than or equal to 0"),
    (('components = ["sin"]', 'components = ["a", "a"]'), "integrand.components",
     "distinct non-empty names"),
    (('components = ["sin"]', "components = 0"), "integrand.components", "count 1..4096"),
    (("args = { scale = 1.0 }", "args = { when = 1979-05-27 }"), "integrand.args",
     "may hold only numbers"),
    (("args = { scale = 1.0 }", "env = { DEPTH = 3 }"), "integrand.env.DEPTH",
     "expected a quoted string (got 3); valid: a quoted string"),
])
def test_bad_process_tables_name_the_key(tmp_path: Path, edit: tuple[str, str], key: str,
                                          fragment: str) -> None:
    assert edit[0] in FULL
    with pytest.raises(ConfigError) as info:
        run_file(tmp_path, FULL.replace(*edit, 1))
    assert info.value.key == key and fragment in str(info.value), str(info.value)
    assert info.value.file is not None and info.value.line is not None


def test_a_materializer_needs_a_sampler_that_takes_one(tmp_path: Path) -> None:
    table = MATERIALIZER.replace("[sampler.materializer]", '[sampler]\nkind = "vegas"\n'
                                 "[sampler.materializer]")
    with pytest.raises(ConfigError) as info:
        run_file(tmp_path, BUILTIN, table)
    assert info.value.key == "sampler.materializer" and "unknown key" in str(info.value)


def test_process_transforms_come_before_ball_sphere_and_affine(tmp_path: Path) -> None:
    ok = run_file(tmp_path, BUILTIN, TRANSFORM, TRANSFORM, '[[transforms]]\nkind = "unit_ball"\n')
    assert [t.kind for t in ok.transforms] == ["process", "process", "unit_ball"]
    for first in ('[[transforms]]\nkind = "affine"\n', '[[transforms]]\nkind = "unit_ball"\n',
                  '[[transforms]]\nkind = "spherical"\n'):
        with pytest.raises(ConfigError) as info:
            run_file(tmp_path, BUILTIN, first, TRANSFORM)
        assert info.value.key == "transforms[1].kind" and info.value.line is not None
        assert "must come before any unit_ball, spherical or affine" in str(info.value)
