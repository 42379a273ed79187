"""gammaboard run files as users write them, for tests/integrators/test_gammaboard_files.py: the
older and newest spellings of one run, a task queue of every task kind, and a run whose
evaluator is a gammaboard Python class (with that class's module)."""

UNIT_OLD = '''name = "unit-old"
[evaluator]
kind = "unit"
continuous_dims = 2
discrete_dims = 0
[sampler_aggregator]
kind = "naive_monte_carlo"
[[task_queue]]
kind = "sample"
nr_samples = 50_000
observable = { config = "scalar" }
'''

UNIT_NEW = '''name = "unit-old"
[evaluator]
kind = "unit"
domain = { continuous = { dims = 2 } }
[[task_queue]]
name = "accumulator"
kind = "set_accumulator"
accumulator = "scalar"
[[task_queue]]
name = "integrate"
kind = "sample"
stop_condition = { max_samples = 50_000 }
sampler_aggregator = { config = { kind = "naive_monte_carlo" } }
'''

MULTI = '''name = "multi"
[evaluator]
kind = "unit"
continuous_dims = 3
discrete_dims = 0
[[task_queue]]
name = "train-initial"
kind = "sample"
nr_samples = 100_000
batch_transforms = [{ kind = "unit_ball" }]
observable = { config = "scalar" }
sampler_aggregator = { config = { kind = "havana_training", seed = 0, bins = 64 } }
[[task_queue]]
name = "sample-initial"
kind = "sample"
nr_samples = 100_000
sampler_aggregator = { config = { kind = "havana_inference" } }
[[task_queue]]
kind = "plot_line"
observable = "scalar"
batch_transforms = []
[task_queue.geometry]
offset = [0.0, 0.0, 0.0]
direction = [1.0, 0.0, 0.0]
linspace = { start = -10.0, stop = 10.0, count = 1024 }
discrete = []
[[task_queue]]
kind = "image"
observable = "scalar"
[task_queue.geometry]
offset = [0.0, 0.0, 0.0]
u_vector = [1.0, 0.0, 0.0]
v_vector = [0.0, 0.0, 1.0]
u_linspace = { start = -50.0, stop = 50.0, count = 512 }
v_linspace = { start = -50.0, stop = 50.0, count = 512 }
[[task_queue]]
kind = "pause"
[[task_queue]]
name = "train-resume"
kind = "sample"
nr_samples = 100_000
sampler_aggregator = { from_name = "sample-initial" }
observable = { from_name = "sample-initial" }
[task_queue.queue_tuning]
max_batch_size = 1000
'''

SIN_CLASS = '''import numpy as np


class HalfSine:
    """gammaboard's python_scalar shape: from_config, then eval(xs_discrete, xs_continuous)."""

    def __init__(self, scale=1.0):
        self.scale = scale

    @classmethod
    def from_config(cls, *, discrete_dims, continuous_dims, init_args):
        assert (discrete_dims, continuous_dims) == (0, 2)
        return cls(**init_args)

    def eval(self, xs_discrete, xs_continuous):
        x, y = xs_continuous[:, 0], xs_continuous[:, 1]
        return self.scale * (np.pi / 2) * np.sin(np.pi * x) * 2 * y
'''

PYTHON_RUN = '''name = "gb-python"
target = { kind = "scalar", value = 2.0 }
[evaluator]
kind = "python_scalar"
flake_ref = "path:./runtime#runtime"
module = "gb_half_sine"
class = "HalfSine"
continuous_dims = 2
discrete_dims = 0
init_args = { scale = 2.0 }
[sampler_aggregator_runner_params]
max_batch_size = 10_000
[[task_queue]]
name = "train"
kind = "sample"
nr_samples = 200_000
observable = { config = "scalar" }
sampler_aggregator = { config = { kind = "havana_training", seed = 5, bins = 32, samples_for_update = 50_000, initial_training_rate = 0.1 } }
'''
