"""Host adapters that make external processes look like the built-in stages.

- :class:`ProcessEvaluator`: an integrand function ``(x, idx) -> values`` (binary frames);
  :func:`process_integrand` builds the :class:`~mainboard.integrators.integrands.Integrand`.
- :class:`ProcessBatchTransform`: ``apply(batch) -> batch`` like a built-in transform.
- :class:`ProcessMaterializer`: ``materialize(latent) -> batch`` like a sampler.

Each validates every response against the domain and components: a violation is a
:class:`BatchError` naming the stage and the command, never a crash. Processes are taken
from the worker's pool, started lazily on first use and reused across batches.
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from mainboard.errors import BatchError, ConfigError, ProcessError
from mainboard.integrators.domain import Batch, Domain, Region, validate
from mainboard.integrators.integrands import Integrand, _exact_value
from mainboard.integrators.process.pool import (
    ManagedProcess,
    ProcessPool,
    ProcessSpec,
    default_pool,
)
from mainboard.integrators.process.wire import row_offsets

RUN_ID: contextvars.ContextVar[str] = contextvars.ContextVar("mainboard_process_run", default="")
SPEC_EXTRA_KEYS = ("kind", "components", "exact", "timeout_s")


@contextlib.contextmanager
def run_scope(run_id: str) -> Iterator[None]:
    """Processes acquired inside belong to ``run_id`` (so ``pool.release(run_id)`` ends them)."""
    token = RUN_ID.set(str(run_id))
    try:
        yield
    finally:
        RUN_ID.reset(token)


def to_spec(spec: Any, where: str) -> ProcessSpec:
    """A run-file table (pydantic model or mapping) -> ProcessSpec; ``timeout_s`` is an alias."""
    if isinstance(spec, ProcessSpec):
        return spec
    data = dict(spec) if isinstance(spec, Mapping) else spec.model_dump()
    if "timeout_s" in data:
        data.setdefault("request_timeout", data.pop("timeout_s"))
    return ProcessSpec.from_config(data, where=where, extra_keys=SPEC_EXTRA_KEYS)


def domain_json(discrete: Sequence[int], continuous: int) -> dict[str, Any]:
    """The protocol's domain shape: ``continuous`` without discrete axes, else ``rectangular``."""
    if not discrete:
        return {"continuous": {"dims": int(continuous)}}
    return {"rectangular": {"discrete_cardinalities": [int(c) for c in discrete],
                            "continuous_dims": int(continuous)}}


def component_names(components: Any) -> list[str]:
    """1 -> ["value"], "complex" -> ["re", "im"], m -> ["value0", ...], a list -> itself."""
    if components == "complex":
        return ["re", "im"]
    if isinstance(components, list | tuple):
        names = [str(c) for c in components]
        if names and len(set(names)) == len(names):
            return names
    elif isinstance(components, int) and not isinstance(components, bool) and components >= 1:
        return ["value"] if components == 1 else [f"value{i}" for i in range(components)]
    raise ConfigError("components must be a count >= 1, \"complex\", or a list of distinct "
                      "names", key="integrand.components", value=components)


class _Stage:
    """Common plumbing: the spec, the init parameters and the pooled process."""

    role = ""

    def __init__(self, spec: Any, discrete: Sequence[int], continuous: int, where: str,
                 pool: ProcessPool | None, run_id: str | None) -> None:
        self.spec = to_spec(spec, where)
        self.discrete = tuple(int(c) for c in discrete)
        self.continuous = int(continuous)
        self.label = shlex.join(self.spec.command)
        self._pool = pool if pool is not None else default_pool()
        self._run_id = run_id

    def init_params(self) -> dict[str, Any]:
        """What ``initialize`` carries besides protocol, role and args."""
        return {"domain": domain_json(self.discrete, self.continuous)}

    @property
    def process(self) -> ManagedProcess:
        """This worker's process for the current run (created on first use)."""
        run = self._run_id if self._run_id is not None else RUN_ID.get()
        return self._pool.acquire(run, self.role, self.spec, self.init_params())

    def call(self, stage: str, method: str, params: Mapping[str, Any], binary: Any = b""
             ) -> tuple[dict[str, Any], bytearray]:
        """One request; a crash, timeout or protocol error fails the batch as a BatchError."""
        try:
            return self.process.call(method, params, binary)
        except ProcessError as exc:
            raise BatchError(stage, str(exc)) from exc

    def fail(self, stage: str, message: str) -> BatchError:
        """A BatchError for ``stage`` that names the command."""
        return BatchError(stage, f"process `{self.label}`: {message}")

    def decode_batch(self, result: Mapping[str, Any], n: int, stage: str
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ragged JSON arrays -> (idx, x, weights), checking lengths, offsets and weights."""
        k, d = len(self.discrete), self.continuous
        arrays = []
        for name, width, integer in (("xs_discrete", k, True), ("xs_continuous", d, False)):
            values, offsets = result.get(name + "_row_major"), result.get(name + "_offsets")
            if not isinstance(values, list) or not isinstance(offsets, list):
                raise self.fail(stage, f"response needs lists {name}_row_major and "
                                f"{name}_offsets, got keys {sorted(result)}")
            if offsets != row_offsets(n, width):
                raise self.fail(stage, f"{name}_offsets must be [0, {width}, ..., {n * width}] "
                                f"({n} samples of fixed width {width}); got {len(offsets)} "
                                f"offsets starting {offsets[:4]}")
            arrays.append(self._numbers(values, n * width, integer, name + "_row_major", stage)
                          .reshape(n, width))
        weights = self._numbers(result.get("weights"), n, False, "weights", stage)
        if not (np.isfinite(weights).all() and (weights > 0).all()):
            bad = int(np.flatnonzero(~(np.isfinite(weights) & (weights > 0)))[0])
            raise self.fail(stage, f"weights must be finite and positive; weights[{bad}] = "
                            f"{float(weights[bad])!r}")
        return arrays[0], arrays[1], weights

    def _numbers(self, values: Any, size: int, integer: bool, name: str, stage: str
                 ) -> np.ndarray:
        if not isinstance(values, list) or len(values) != size:
            got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
            raise self.fail(stage, f"{name} must be a list of {size} numbers, got {got}")
        allowed = (int,) if integer else (int, float)
        if not all(type(v) in allowed for v in values):
            raise self.fail(stage, f"{name} must hold only "
                            f"{'integers' if integer else 'numbers'}")
        try:
            return np.asarray(values, dtype=np.int64 if integer else np.float64)
        except OverflowError:
            raise self.fail(stage, f"{name} holds an integer outside the i64 range") from None


class ProcessEvaluator(_Stage):
    """Integrand values from a process: ``evaluator(x, idx) -> (n,) | (n, m) | complex (n,)``."""

    role = "evaluator"

    def __init__(self, spec: Any, dim: int, discrete: Sequence[int] = (),
                 components: Any = 1, *, pool: ProcessPool | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(spec, discrete, dim, "integrand", pool, run_id)
        self.components = components
        self.names = component_names(components)

    def init_params(self) -> dict[str, Any]:
        return {**super().init_params(), "components": list(self.names)}

    @property
    def metadata(self) -> dict[str, Any]:
        """What the process returned from ``initialize`` (starts it if needed)."""
        return self.process.start()

    def evaluate_raw(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """(n, len(components)) float64 exactly as the process computed it (NaN included)."""
        n, k, d, m = x.shape[0], len(self.discrete), self.continuous, len(self.names)
        if x.shape != (n, d) or idx.shape != (n, k):
            raise self.fail("evaluate", f"expected x ({n}, {d}) and idx ({n}, {k}), got "
                            f"{x.shape} and {idx.shape}")
        blobs = [np.ascontiguousarray(idx, dtype="<i8"), np.ascontiguousarray(x, dtype="<f8")]
        params = {"nr_samples": n, "components": list(self.names)}
        _result, blob = self.process.call("eval_batch", params, blobs)
        if len(blob) != 8 * n * m:
            raise self.fail("evaluate", f"eval_batch returned {len(blob)} bytes of values; "
                            f"expected {8 * n * m} ({n} samples x {m} components {self.names}"
                            " as f64)")
        return np.frombuffer(blob, dtype="<f8").reshape(n, m)

    def __call__(self, x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Values shaped for :class:`Integrand`: (n,) scalar, (n, m) vector, (n,) complex."""
        values = self.evaluate_raw(x, idx)
        if self.components == "complex":
            return values[:, 0] + 1j * values[:, 1]
        return values[:, 0].copy() if values.shape[1] == 1 else values


def process_integrand(spec: Any, dim: int, discrete: tuple[int, ...]) -> Any:
    """Registry factory for ``[integrand] kind = "process"`` (see integrands.register_integrand)."""
    data = dict(spec) if isinstance(spec, Mapping) else spec.model_dump()
    components = data.get("components", 1)
    evaluator = ProcessEvaluator(data, dim, discrete, components)
    count = components if components == "complex" else len(evaluator.names)
    return Integrand("process", dim, evaluator, components=count,
                     exact=_exact_value(data.get("exact"), count), label=evaluator.label)


class ProcessBatchTransform(_Stage):
    """A batch transform in a process; maps the unit cube of the domain onto itself."""

    role = "batch_transform"
    kind = "process"
    output_region = Region.CUBE
    radius = 1.0
    center = None

    def __init__(self, spec: Any, domain: Domain, *, pool: ProcessPool | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(spec, domain.discrete, domain.continuous, "transforms", pool, run_id)
        self.domain = domain

    def apply(self, batch: Batch) -> Batch:
        """Send the batch as JSON, validate what comes back against the domain."""
        stage = f"transform:process `{self.label}`"
        params = {"nr_samples": batch.n,
                  "xs_discrete_row_major": batch.idx.reshape(-1).tolist(),
                  "xs_discrete_offsets": row_offsets(batch.n, batch.idx.shape[1]),
                  "xs_continuous_row_major": batch.x.reshape(-1).tolist(),
                  "xs_continuous_offsets": row_offsets(batch.n, batch.x.shape[1]),
                  "weights": batch.weights.tolist()}
        result, _ = self.call(stage, "transform_batch", params)
        idx, x, weights = self.decode_batch(result, batch.n, stage)
        return validate(Batch(x=x, idx=idx, weights=weights, aux=batch.aux), self.domain, stage)


class ProcessMaterializer(_Stage):
    """Concrete points for a latent batch, computed by a process (``[sampler.materializer]``)."""

    role = "materializer"

    def __init__(self, spec: Any, domain: Domain, *, pool: ProcessPool | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(spec, domain.discrete, domain.continuous, "sampler.materializer",
                         pool, run_id)
        self.domain = domain

    def materialize(self, latent: Any) -> Batch:
        """``materialize_batch {nr_samples, latent_batch}``; the result is validated."""
        stage = f"materialize:process `{self.label}`"
        n = int(latent.n)
        result, _ = self.call(stage, "materialize_batch",
                              {"nr_samples": n, "latent_batch": latent_json(latent)})
        idx, x, weights = self.decode_batch(result, n, stage)
        return validate(Batch(x=x, idx=idx, weights=weights), self.domain, stage)


POINT_FIELDS = ("xs_discrete", "xs_continuous", "weights")


def latent_json(latent: Any) -> dict[str, Any]:
    """A latent batch as a materializer receives it (docs/process-protocol.md):
    ``{nr_samples, payload, run_seed, iteration, batch_index, n[, kind]}``. ``payload`` is
    what the sampler produced (a process sampler's point arrays; a seeded batch's
    coordinates), the gammaboard v2 field; the flat coordinates are mainboard's extra."""
    data = {k: v.tolist() if isinstance(v, np.ndarray) else v
            for k, v in latent.to_dict().items()}
    points = {k: data.pop(k) for k in POINT_FIELDS if k in data}
    payload = points or {k: data[k] for k in ("run_seed", "iteration", "batch_index", "n")}
    return {"nr_samples": int(latent.n), **data, "payload": payload}
