"""Redis key layout: one prefix, distinct keys, hostile names refused."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from mainboard import keys

RUN = "3f9a0c1d2e"


def all_keys(run_id: str = RUN, iteration: int = 4) -> dict[str, str]:
    return {
        "runs": keys.runs_index(),
        "definition": keys.run_definition(run_id),
        "state": keys.run_state(run_id),
        "snapshot": keys.run_snapshot(run_id, iteration),
        "results": keys.iteration_results(run_id, iteration),
        "done": keys.iteration_done(run_id, iteration),
        "workers": keys.workers_index(),
        "worker": keys.worker("celery@node-1.cluster"),
    }


def test_every_key_is_under_the_prefix_and_distinct() -> None:
    built = all_keys()
    assert all(key.startswith(keys.PREFIX) for key in built.values())
    assert len(set(built.values())) == len(built)
    assert keys.CELERY_PREFIX.startswith(keys.PREFIX)
    assert not any(key.startswith(keys.CELERY_PREFIX) for key in built.values())


def test_layout_is_stable() -> None:
    """Keys are a contract with data already in Redis: changing one is a migration."""
    assert keys.run_definition(RUN) == f"mainboard:run:{RUN}"
    assert keys.iteration_results(RUN, 0) == f"mainboard:run:{RUN}:it:0:results"
    assert keys.worker("w@h") == "mainboard:worker:w@h"


def test_runs_and_iterations_do_not_collide() -> None:
    assert keys.iteration_done("ab", 1) != keys.iteration_done("ab", 11)
    assert keys.run_state("ab") != keys.run_state("abc")
    assert not keys.run_definition("abc").startswith(keys.run_definition("ab") + ":")


def test_run_pattern_covers_a_run_and_nothing_of_another() -> None:
    pattern = keys.run_pattern(RUN)
    mine = [k for n, k in all_keys().items() if n not in {"runs", "workers", "worker",
                                                          "definition"}]
    assert all(fnmatch.fnmatchcase(k, pattern) for k in mine)
    assert not any(fnmatch.fnmatchcase(k, pattern) for k in all_keys("3f9a0c1d2eX").values())


@pytest.mark.parametrize("run_id", ["", "a b", "a:b", "x*", "a'; echo pwned", "../x", "-x",
                                    "a" * 129, 7, None])
def test_hostile_run_ids_are_refused(run_id: Any) -> None:
    with pytest.raises(ValueError, match="invalid run id"):
        keys.run_state(run_id)


@pytest.mark.parametrize("iteration", [-1, 1.0, True, "3", None])
def test_bad_iterations_are_refused(iteration: Any) -> None:
    with pytest.raises(ValueError, match="invalid iteration"):
        keys.iteration_results(RUN, iteration)


@pytest.mark.parametrize("hostname", ["", "a b", "w:1", "w*", "a\nb", "x" * 256])
def test_bad_worker_names_are_refused(hostname: str) -> None:
    with pytest.raises(ValueError, match="invalid worker hostname"):
        keys.worker(hostname)
