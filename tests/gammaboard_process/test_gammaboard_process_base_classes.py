"""The optional base classes of ``gammaboard_process``: a user's class that forgets a method
is told which one and its signature; the defaults a sampler may keep answer as documented."""

from __future__ import annotations

import numpy as np
import pytest

from gammaboard_process.api import BatchTransform, Evaluator, Materializer, Sampler

SHAPE = {"discrete_cardinalities": [2], "continuous_dims": 3}


def test_the_constructor_keeps_the_domain_and_the_run_s_args() -> None:
    evaluator = Evaluator(**SHAPE, scale=2.0)
    assert (evaluator.discrete_cardinalities, evaluator.continuous_dims, evaluator.args) == \
        ([2], 3, {"scale": 2.0})


def test_a_forgotten_method_names_itself() -> None:
    one = np.zeros((1, 1))
    calls = [
        (lambda: Evaluator(**SHAPE).eval(one, one), "an Evaluator must implement eval"),
        (lambda: Sampler(**SHAPE).sample_plan(), "a Sampler must implement sample_plan()"),
        (lambda: Sampler(**SHAPE).produce_latent_batch(4),
         "must implement produce_latent_batch(nr_samples)"),
        (lambda: Sampler(**SHAPE).ingest_training_values(one),
         "must implement ingest_training_values(values)"),
        (lambda: Sampler(**SHAPE).snapshot(), "a Sampler must implement snapshot()"),
        (lambda: Sampler.from_snapshot(snapshot={}, init_args={}, **SHAPE),
         "Sampler cannot restore a snapshot: implement from_snapshot("),
        (lambda: BatchTransform(**SHAPE).transform_batch(one, one, one[0]),
         "a BatchTransform must implement transform_batch"),
        (lambda: Materializer(**SHAPE).materialize_batch({}),
         "a Materializer must implement materialize_batch(latent_batch)"),
    ]
    for call, says in calls:
        with pytest.raises(NotImplementedError, match=says.replace("(", r"\(").replace(")", r"\)")):
            call()


def test_a_sampler_s_defaults_have_no_opinion() -> None:
    sampler = Sampler(**SHAPE)
    assert sampler.training_samples_remaining() is None and sampler.get_diagnostics() == {}


def test_domain_shapes_of_the_protocol() -> None:
    from gammaboard_process.wire import domain_shape

    assert domain_shape({"continuous": {"dims": 3}}) == ([], 3)
    assert domain_shape({"rectangular": {"discrete_cardinalities": [2, 4],
                                         "continuous_dims": 1}}) == ([2, 4], 1)
    branch = {"domain": {"continuous": {"dims": 2}}}
    assert domain_shape({"discrete": {"branches": [branch, branch]}}) == ([2], 2)
    for bad, says in (([], "domain must be an object with one of continuous"),
                      ({"spiral": {}}, "unknown domain shape 'spiral'; valid: continuous"),
                      ({"discrete": {"branches": []}}, "needs at least one branch"),
                      ({"discrete": {"branches": [branch, {"domain": {"continuous": {
                          "dims": 3}}}]}}, "branches of different shapes")):
        with pytest.raises(ValueError, match=says):
            domain_shape(bad)
