"""A sampler in an external process (``[sampler] kind = "process"``), and a materializer hook.

Why the points travel with the latent batch: a process sampler is stateful (its grid, its
random stream, often the batch it produced last), so its points cannot be redrawn from a
seed elsewhere. One owner per run (the coordinator, or ``integrate_local``) holds the only
live process: it asks ``sample_plan`` before each batch and calls ``produce_latent_batch``
in batch order (:mod:`~mainboard.integrators.owner`), and every
:class:`ProcessLatentBatch` carries its points to the workers, whose ``materialize`` just
unpacks them; workers never start this process. Each batch's training values come back
under their own key and ``adapt`` feeds them to the process in batch order, the order it
produced them. The process's own ``snapshot`` is part of the sampler snapshot.

Training values are ``projection(f) * w`` per sample (:mod:`~mainboard.integrators.projection`,
``[sampler] training_projection``). Each ``produce_latent_batch`` request also carries
``seed`` (from the batch's coordinates), an optional field: samplers that use it give
bit-identical runs whatever the worker count; others still run each batch exactly once.
The wire format is in docs/process-protocol.md.
"""

from __future__ import annotations

import shlex
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mainboard.errors import BatchError, ConfigError, ProcessError
from mainboard.integrators.domain import Batch, Domain, validate
from mainboard.integrators.process.adapters import (
    RUN_ID,
    ProcessMaterializer,
    domain_json,
    to_spec,
)
from mainboard.integrators.process.pool import ManagedProcess
from mainboard.integrators.process.wire import row_offsets
from mainboard.integrators.samplers import Sampler, Training
from mainboard.integrators.seeding import LatentBatch, batch_rng

TRAINING_PREFIX = "process_training:"


@dataclass(frozen=True, eq=False)
class ProcessLatentBatch(LatentBatch):
    """A latent batch whose points were produced by a process sampler (they travel with it)."""

    xs_discrete: np.ndarray | None = None
    xs_continuous: np.ndarray | None = None
    weights: np.ndarray | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data with ``kind = "process"`` (arrays stay arrays for the binary codec)."""
        return {"kind": "process", **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProcessLatentBatch:
        """Inverse of :meth:`to_dict` (lists accepted)."""
        return cls(int(data["run_seed"]), int(data["iteration"]), int(data["batch_index"]),
                   int(data["n"]), np.asarray(data["xs_discrete"], dtype=np.int64),
                   np.asarray(data["xs_continuous"], dtype=np.float64),
                   np.asarray(data["weights"], dtype=np.float64))


def latent_from_dict(data: Mapping[str, Any]) -> LatentBatch:
    """Rebuild any latent batch from its ``to_dict`` form (process ones keep their points)."""
    if data.get("kind") == "process":
        return ProcessLatentBatch.from_dict(data)
    return LatentBatch.from_dict(dict(data))


class ProcessSampler(Sampler):
    """Sampler whose plan, points and adaptation live in a process speaking the protocol."""

    kind = "process"
    owned = True  # one live instance per run produces every batch (owner.produce_iteration)

    def __init__(self, domain: Domain, *, evaluator_metadata: Mapping[str, Any] | None = None,
                 training_projection: str | None = None, **config: Any) -> None:
        super().__init__(domain)
        self.spec = to_spec(config, "sampler")
        self.label = shlex.join(self.spec.command)
        self.projection = training_projection or "real"
        self._config = dict(config)
        if training_projection is not None:
            self._config["training_projection"] = training_projection
        self.evaluator_metadata = dict(evaluator_metadata or {})
        self.process_snapshot: Any = None
        self._managed: ManagedProcess | None = None

    # -- the process -----------------------------------------------------------------------
    def _init_params(self) -> dict[str, Any]:
        return {"domain": domain_json(self.domain.discrete, self.domain.continuous),
                "snapshot": self.process_snapshot,
                "evaluator_metadata": self.evaluator_metadata}

    @property
    def process(self) -> ManagedProcess:
        """The sampler's process, started on first use and restarted from the last snapshot."""
        if self._managed is None:
            self._managed = ManagedProcess(self.spec, "sampler", self._init_params(),
                                           run_id=RUN_ID.get())
            weakref.finalize(self, self._managed.close)
        return self._managed

    def close(self) -> None:
        """Shut the process down; the next call starts a new one from the last snapshot."""
        if self._managed is not None:
            self._managed.close()
            self._managed = None

    def _call(self, method: str, params: Mapping[str, Any], binary: Any = b"",
              stage: str = "sample") -> tuple[dict[str, Any], bytearray]:
        """One request; a crash, timeout or protocol error becomes a BatchError for ``stage``."""
        try:
            return self.process.call(method, params, binary)
        except ProcessError as exc:
            raise BatchError(stage, str(exc)) from exc

    def _fail(self, message: str) -> BatchError:
        return BatchError("sample", f"process sampler `{self.label}`: {message}")

    # -- the protocol methods --------------------------------------------------------------
    def sample_plan(self) -> dict[str, Any]:
        """``{"kind": "produce", "nr_samples": n}`` or ``{"kind": "pause"}``, validated."""
        plan = self._call("sample_plan", {})[0].get("plan")
        kind = plan.get("kind") if isinstance(plan, dict) else None
        if kind == "pause":
            return {"kind": "pause"}
        n = plan.get("nr_samples") if isinstance(plan, dict) else None
        if kind != "produce" or type(n) is not int or n < 1:
            raise self._fail(f"sample_plan returned {plan!r}; valid: {{kind: produce, "
                             "nr_samples: n >= 1}} or {kind: pause}")
        return {"kind": "produce", "nr_samples": n}

    def training_samples_remaining(self) -> int | None:
        """How many training samples the process still wants (None: no opinion)."""
        remaining = self._call("training_samples_remaining", {})[0].get("remaining")
        if remaining is not None and (type(remaining) is not int or remaining < 0):
            raise self._fail(f"training_samples_remaining returned {remaining!r}; valid: a "
                             "non-negative integer or null")
        return remaining

    def get_diagnostics(self) -> dict[str, Any]:
        """Whatever the process reports (JSON)."""
        diagnostics = self._call("get_diagnostics", {})[0].get("diagnostics")
        return diagnostics if isinstance(diagnostics, dict) else {"value": diagnostics}

    def produce_latent_batch(self, n: int, seed: int | None = None
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(idx (n, k), x (n, d), weights (n,)) from the process, validated against the domain."""
        k, d = len(self.domain.discrete), self.domain.continuous
        params: dict[str, Any] = {"nr_samples": int(n)}
        if seed is not None:
            params["seed"] = int(seed)
        result, blob = self._call("produce_latent_batch", params)
        for name, width in (("xs_discrete_offsets", k), ("xs_continuous_offsets", d)):
            if name in result and result[name] != row_offsets(n, width):
                raise self._fail(f"{name} must describe {n} samples of fixed width {width}")
        if len(blob) != 8 * n * (k + d + 1):
            raise self._fail(f"produce_latent_batch returned {len(blob)} bytes; expected "
                             f"{8 * n * (k + d + 1)} (i64 discrete {n}x{k}, f64 continuous "
                             f"{n}x{d}, f64 weights {n})")
        idx = np.frombuffer(blob, "<i8", n * k).reshape(n, k)
        x = np.frombuffer(blob, "<f8", n * d, offset=8 * n * k).reshape(n, d)
        weights = np.frombuffer(blob, "<f8", n, offset=8 * n * (k + d))
        if not (np.isfinite(weights).all() and (weights > 0).all()):
            raise self._fail("produce_latent_batch returned weights that are not finite and "
                             "positive")
        validate(Batch(x=x, idx=idx, weights=weights), self.domain,
                 f"sample:process `{self.label}`")
        return idx, x, weights

    def ingest_training_values(self, values: np.ndarray) -> None:
        """Send one training value per sample of a produced batch."""
        blob = np.ascontiguousarray(values, dtype="<f8")
        self._call("ingest_training_values", {"nr_values": int(blob.size)}, blob, "adapt")

    # -- the mainboard sampler interface ---------------------------------------------------
    def sample(self, run_seed: int, iteration: int, batch_index: int, n: int) -> LatentBatch:
        """Ask the process for a batch; its points travel in the latent batch."""
        seed = int(batch_rng(run_seed, iteration, batch_index).integers(2**63 - 1))
        idx, x, weights = self.produce_latent_batch(n, seed)
        return ProcessLatentBatch(int(run_seed), int(iteration), int(batch_index), int(n),
                                  idx, x, weights)

    def materialize(self, latent: LatentBatch) -> Batch:
        """Unpack the points the process produced for this batch."""
        if not isinstance(latent, ProcessLatentBatch) or latent.weights is None:
            raise BatchError("materialize", f"process sampler `{self.label}`: the latent batch "
                             "carries no points (rebuild it with latent_from_dict)")
        return Batch(x=np.array(latent.xs_continuous, dtype=np.float64),
                     idx=np.array(latent.xs_discrete, dtype=np.int64),
                     weights=np.array(latent.weights, dtype=np.float64))

    def training_values(self, batch_index: int, values: np.ndarray) -> Training:
        """``projection(f) * w`` per sample under this batch's own key (keys of different
        batches never add, so ``adapt`` sends each batch's values on their own)."""
        return {f"{TRAINING_PREFIX}{int(batch_index):012d}": np.asarray(values, np.float64)}

    def _adapt(self, training: Training) -> None:
        for key in sorted(k for k in training if k.startswith(TRAINING_PREFIX)):
            self.ingest_training_values(training[key])

    def config(self) -> dict[str, Any]:
        """Settings (restores through make_sampler)."""
        return {"kind": self.kind, **self._config}

    def _state(self) -> dict[str, Any]:
        if self._managed is not None:
            reply = self._call("snapshot", {}, stage="snapshot")[0]
            self.process_snapshot = reply.get("snapshot")
            self.process.init_params = self._init_params()
        return {"process": self.process_snapshot}

    def _load(self, state: Mapping[str, Any]) -> None:
        self.process_snapshot = state.get("process")
        self.close()


class MaterializedSampler(Sampler):
    """A sampler whose points come from a process materializer (``[sampler.materializer]``).

    The inner sampler plans the batches (``sample``) and keeps its state; the materializer
    turns each latent batch into points. Only samplers that do not learn from their own
    points (``naive``) or that learn in a process (``process``) can be combined this way.
    """

    def __init__(self, inner: Sampler, materializer: Any) -> None:
        if type(inner).training is not Sampler.training and not isinstance(inner, ProcessSampler):
            raise ConfigError(f"a {inner.kind!r} sampler learns from the points it draws, so a "
                              "materializer cannot replace its materialize step",
                              key="sampler.materializer", valid="naive or process samplers")
        super().__init__(inner.domain)
        self.inner = inner
        self.kind = inner.kind  # type: ignore[misc]
        self.materializer = ProcessMaterializer(materializer, inner.domain)
        self._spec = dict(materializer) if isinstance(materializer, Mapping) \
            else materializer.model_dump()

    def sample(self, run_seed: int, iteration: int, batch_index: int, n: int) -> LatentBatch:
        """The inner sampler's latent batch."""
        return self.inner.sample(run_seed, iteration, batch_index, n)

    def materialize(self, latent: LatentBatch) -> Batch:
        """Points from the materializer process, validated against the domain."""
        return self.materializer.materialize(latent)

    def training(self, batch: Batch, wf2: np.ndarray, finite: np.ndarray | None) -> Training:
        """The inner sampler's training data."""
        return self.inner.training(batch, wf2, finite)

    def _adapt(self, training: Training) -> None:
        self.inner.ingest(training)
        self.inner.adapt()

    def config(self) -> dict[str, Any]:
        """The inner settings plus the materializer table."""
        return {**self.inner.config(), "materializer": self._spec}

    def _state(self) -> dict[str, Any]:
        return {"inner": self.inner.snapshot()}

    def _load(self, state: Mapping[str, Any]) -> None:
        self.inner.restore(state["inner"])
