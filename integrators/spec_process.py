"""The run file's process tables: how to start an external process (docs/process-protocol.md).

``[integrand]``, ``[sampler]``, ``[sampler.materializer]`` and ``[[transforms]]`` with
``kind = "process"`` share :class:`ProcessTable`; the integrand's own model (components,
exact) lives in :mod:`mainboard.integrators.spec` with the other integrands.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from mainboard.errors import SpecError
from mainboard.integrators.process.wire import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_TERMINATE_GRACE,
)
from mainboard.integrators.spec_types import Real

Seconds = Annotated[Real, Field(gt=0)]
GraceSeconds = Annotated[Real, Field(ge=0)]
PROCESS_TIMINGS = {"request_timeout": DEFAULT_REQUEST_TIMEOUT,
                   "shutdown_grace": DEFAULT_SHUTDOWN_GRACE,
                   "terminate_grace": DEFAULT_TERMINATE_GRACE}


class ProcessTable(BaseModel):
    """How to start an external process (see docs/process-protocol.md): argv ``command``, ``cwd``,
    ``env``, the ``args`` its constructor receives, and the protocol's timings.

    Unset keys and timings equal to the protocol defaults are left out of dumps, so the run
    id only changes when the definition does. ``timeout_s`` is the old name of
    ``request_timeout``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)  # as every run-file table

    command: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    cwd: str | None = None
    env: dict[str, str] = {}
    args: dict[str, Any] = {}
    request_timeout: Seconds = DEFAULT_REQUEST_TIMEOUT
    shutdown_grace: GraceSeconds = DEFAULT_SHUTDOWN_GRACE
    terminate_grace: GraceSeconds = DEFAULT_TERMINATE_GRACE
    timeout_s: Seconds | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _check(self) -> ProcessTable:
        try:
            json.dumps(self.args, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SpecError("args", f"args go to the process as JSON, so they may hold only "
                            f"numbers, strings, booleans, arrays and tables ({exc})",
                            None, valid="finite numbers, strings, booleans, arrays and "
                            "tables") from None
        if self.timeout_s is not None:
            if "request_timeout" in self.model_fields_set:
                raise SpecError("timeout_s", "timeout_s is the old name of request_timeout; "
                                "set only request_timeout", self.timeout_s,
                                valid="request_timeout alone")
            object.__setattr__(self, "request_timeout", self.timeout_s)  # frozen model
        return self

    @model_serializer(mode="wrap")
    def _drop_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items()
                if v is not None and PROCESS_TIMINGS.get(k) != v}


class MaterializerSpec(ProcessTable):
    """``[sampler.materializer]``: a process that turns latent batches into points."""

    kind: Literal["process"]


class ProcessSamplerSpec(ProcessTable):
    """A sampler in an external process (plan, points and adaptation live there).

    ``training_projection`` says what it learns from: ``projection(f) * w`` with
    ``real`` (default), ``imag``, ``abs``, ``abs_sq`` or a component's name;
    ``training_samples`` is the training phase (see docs/process-protocol.md)."""

    kind: Literal["process"]
    materializer: MaterializerSpec | None = None
    training_samples: Annotated[int, Field(gt=0, strict=True)] | None = None
    training_projection: Annotated[str, Field(min_length=1)] | None = None


class ProcessTransformSpec(ProcessTable):
    """A batch transform in an external process; it maps the unit cube onto itself."""

    kind: Literal["process"]

    def output_dim(self, d: int) -> int:
        """Same dimension."""
        return d
