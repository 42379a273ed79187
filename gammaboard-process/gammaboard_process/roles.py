"""The request loop and one handler per role, for processes written with the Python helper.

Every handler checks what user code returned (shape, finiteness, range) before it goes on
the wire, so a mistake is reported as a JSON-RPC error with a traceback, in the process,
at the line that made it. Standard library and numpy only.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from typing import Any

import numpy as np

from gammaboard_process.api import MaterializedBatch
from gammaboard_process.stdio import StdioChannel, log
from gammaboard_process.wire import (
    ERROR_CODE,
    JSONRPC_VERSION,
    PROTOCOL,
    domain_shape,
    row_offsets,
)

_RESERVED = ("discrete_cardinalities", "continuous_dims", "evaluator_metadata")
Reply = tuple[dict[str, Any], bytes]


def _accepts(func: Any, name: str) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY)
               for p in params)


def _homogeneous(params: dict[str, Any], field: str, n: int, width: int) -> None:
    offsets = params.get(field)
    if offsets is not None and list(offsets) != row_offsets(n, width):
        raise ValueError(f"{field} describes a variable-width batch; this helper supports "
                         f"fixed width {width} only")


class _Role:
    """Shared handshake: protocol and role check, domain shape, constructing the user object."""

    role = ""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.obj: Any = None
        self.cards: list[int] = []
        self.dims = 0

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("protocol") != PROTOCOL:
            raise ValueError(f"unsupported protocol {params.get('protocol')!r}; this process "
                             f"speaks {PROTOCOL!r}")
        if params.get("role") != self.role:
            raise ValueError(f"this process serves role {self.role!r}, not "
                             f"{params.get('role')!r}")
        self.cards, self.dims = domain_shape(params.get("domain"))
        if any(c <= 0 for c in self.cards) or self.dims < 0:
            raise ValueError(f"bad domain {params.get('domain')!r}: cardinalities must be "
                             "positive and continuous_dims non-negative")
        args = params.get("args") or {}
        if not isinstance(args, dict) or any(k in args for k in _RESERVED):
            raise ValueError(f"args must be an object without the reserved keys {_RESERVED}")
        self.obj = self.construct(params, args)
        return {"ok": True}

    def construct(self, params: dict[str, Any], args: dict[str, Any]) -> Any:
        return self.target(discrete_cardinalities=list(self.cards), continuous_dims=self.dims,
                           **args)

    def handle(self, method: str, params: dict[str, Any], binary: bytearray) -> Reply:
        if method == "initialize":
            return self.initialize(params), b""
        if self.obj is None:
            raise RuntimeError(f"{method!r} before initialize")
        func = getattr(self, "m_" + method, None)
        if func is None:
            raise ValueError(f"unknown method {method!r} for a {self.role}")
        return func(params, binary)

    def checked(self, raw: Any, n: int, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Any batch-like return value -> validated (n, k) int64, (n, d) float64, (n,) weights."""
        if isinstance(raw, dict):
            raw = MaterializedBatch(raw["xs_discrete"], raw["xs_continuous"], raw["weights"])
        elif isinstance(raw, tuple) and len(raw) == 3:
            raw = MaterializedBatch(*raw)
        k = len(self.cards)
        xd = np.asarray(raw.xs_discrete, dtype=np.int64).reshape(n, k)
        xc = np.asarray(raw.xs_continuous, dtype=np.float64).reshape(n, self.dims)
        w = np.asarray(raw.weights, dtype=np.float64).reshape(n)
        if not np.isfinite(xc).all():
            raise ValueError(f"{what} returned non-finite continuous values")
        if not (np.isfinite(w).all() and (w > 0).all()):
            raise ValueError(f"{what} returned weights that are not finite and positive")
        for axis, card in enumerate(self.cards):
            if ((xd[:, axis] < 0) | (xd[:, axis] >= card)).any():
                raise ValueError(f"{what} returned discrete values outside [0, {card}) on "
                                 f"axis {axis}")
        return xd, xc, w

    def as_json_batch(self, xd: np.ndarray, xc: np.ndarray, w: np.ndarray) -> dict[str, Any]:
        n = len(w)
        return {"xs_discrete_row_major": xd.reshape(-1).tolist(),
                "xs_discrete_offsets": row_offsets(n, len(self.cards)),
                "xs_continuous_row_major": xc.reshape(-1).tolist(),
                "xs_continuous_offsets": row_offsets(n, self.dims),
                "weights": w.tolist()}

    def from_json_batch(self, params: dict[str, Any]) -> tuple[np.ndarray, ...]:
        n = int(params["nr_samples"])
        _homogeneous(params, "xs_discrete_offsets", n, len(self.cards))
        _homogeneous(params, "xs_continuous_offsets", n, self.dims)
        return (np.asarray(params["xs_discrete_row_major"], np.int64).reshape(n, len(self.cards)),
                np.asarray(params["xs_continuous_row_major"], np.float64).reshape(n, self.dims),
                np.asarray(params["weights"], np.float64).reshape(n))


class _EvaluatorRole(_Role):
    role = "evaluator"

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.components = [str(c) for c in params.get("components") or ["value"]]
        reply = super().initialize(params)
        meta = getattr(self.obj, "metadata", None)
        meta = meta() if callable(meta) else meta
        return {**reply, "metadata": meta or {}}

    def m_eval_batch(self, params: dict[str, Any], binary: bytearray) -> Reply:
        n, k, d = int(params["nr_samples"]), len(self.cards), self.dims
        components = [str(c) for c in params.get("components") or self.components]
        _homogeneous(params, "xs_discrete_offsets", n, k)
        _homogeneous(params, "xs_continuous_offsets", n, d)
        if len(binary) != 8 * n * (k + d):
            raise ValueError(f"binary block has {len(binary)} bytes, expected {8 * n * (k + d)} "
                             f"for {n} samples x ({k} discrete + {d} continuous)")
        xd = np.frombuffer(binary, dtype="<i8", count=n * k).reshape(n, k)
        xc = np.frombuffer(binary, dtype="<f8", offset=8 * n * k).reshape(n, d)
        raw = self.obj.eval(xd, xc)
        if isinstance(raw, dict):
            raw = np.stack([np.asarray(raw[c], np.float64).reshape(n) for c in components], 1)
        values = np.asarray(raw, dtype=np.float64)
        if values.shape == (n,) and len(components) == 1:
            values = values.reshape(n, 1)
        if values.shape != (n, len(components)):
            raise ValueError(f"eval returned shape {values.shape}, expected ({n},) or "
                             f"({n}, {len(components)}) for components {components}")
        return {}, np.ascontiguousarray(values, dtype="<f8").data


class _SamplerRole(_Role):
    role = "sampler"

    def construct(self, params: dict[str, Any], args: dict[str, Any]) -> Any:
        meta = params.get("evaluator_metadata") or {}
        snapshot = params.get("snapshot")
        if snapshot is None:
            extra = {"evaluator_metadata": meta} if _accepts(self.target, "evaluator_metadata") \
                else {}
            return super().construct(params, {**args, **extra})
        restore = getattr(self.target, "from_snapshot", None)
        if restore is None:
            raise TypeError(f"{self.target!r} has no from_snapshot(); cannot restore a snapshot")
        extra = {"evaluator_metadata": meta} if _accepts(restore, "evaluator_metadata") else {}
        return restore(snapshot=snapshot, discrete_cardinalities=list(self.cards),
                       continuous_dims=self.dims, init_args=args, **extra)

    def m_sample_plan(self, params: dict[str, Any], binary: bytearray) -> Reply:
        plan = dict(self.obj.sample_plan())
        if plan.get("kind") == "produce" and int(plan.get("nr_samples", 0)) > 0:
            return {"plan": {"kind": "produce", "nr_samples": int(plan["nr_samples"])}}, b""
        if plan.get("kind") == "pause":
            return {"plan": {"kind": "pause"}}, b""
        raise ValueError(f"sample_plan returned {plan!r}; valid: {{'kind': 'produce', "
                         "'nr_samples': n > 0}} or {'kind': 'pause'}")

    def m_training_samples_remaining(self, params: dict[str, Any], binary: bytearray) -> Reply:
        func = getattr(self.obj, "training_samples_remaining", None)
        remaining = func() if func is not None else None
        return {"remaining": None if remaining is None else int(remaining)}, b""

    def m_produce_latent_batch(self, params: dict[str, Any], binary: bytearray) -> Reply:
        n = int(params["nr_samples"])
        produce = self.obj.produce_latent_batch
        seed = params.get("seed")
        raw = produce(n, seed=seed) if seed is not None and _accepts(produce, "seed") \
            else produce(n)
        xd, xc, w = self.checked(raw, n, "produce_latent_batch")
        reply = {"xs_discrete_offsets": row_offsets(n, len(self.cards)),
                 "xs_continuous_offsets": row_offsets(n, self.dims)}
        blob = b"".join(np.ascontiguousarray(a, dtype=t).tobytes()
                        for a, t in ((xd, "<i8"), (xc, "<f8"), (w, "<f8")))
        return reply, blob

    def m_ingest_training_values(self, params: dict[str, Any], binary: bytearray) -> Reply:
        count = int(params["nr_values"])
        if len(binary) != 8 * count:
            raise ValueError(f"binary block has {len(binary)} bytes, expected {8 * count}")
        self.obj.ingest_training_values(np.frombuffer(binary, dtype="<f8", count=count))
        return {"ok": True}, b""

    def m_snapshot(self, params: dict[str, Any], binary: bytearray) -> Reply:
        return {"snapshot": self.obj.snapshot()}, b""

    def m_get_diagnostics(self, params: dict[str, Any], binary: bytearray) -> Reply:
        func = getattr(self.obj, "get_diagnostics", None)
        return {"diagnostics": (func() if func is not None else None) or {}}, b""


class _TransformRole(_Role):
    role = "batch_transform"

    def m_transform_batch(self, params: dict[str, Any], binary: bytearray) -> Reply:
        xd, xc, w = self.from_json_batch(params)
        out = self.obj.transform_batch(xd, xc, w)
        return self.as_json_batch(*self.checked(out, len(w), "transform_batch")), b""


class _MaterializerRole(_Role):
    role = "materializer"

    def m_materialize_batch(self, params: dict[str, Any], binary: bytearray) -> Reply:
        latent = params["latent_batch"]
        n = int(params.get("nr_samples", latent.get("nr_samples", 0)))
        out = self.obj.materialize_batch(flat_latent(latent))
        return self.as_json_batch(*self.checked(out, n, "materialize_batch")), b""


def flat_latent(latent: dict[str, Any]) -> dict[str, Any]:
    """The latent batch with its ``payload`` fields also at the top level, so a materializer
    reads ``latent_batch["run_seed"]`` whether the host sent mainboard's flat coordinates or
    only gammaboard v2's ``{nr_samples, payload}``; ``payload`` stays as sent."""
    payload = latent.get("payload")
    if not isinstance(payload, dict):
        return dict(latent)
    return {**payload, **latent}


def _serve(role: _Role) -> None:
    """Answer requests until the host closes stdin; user exceptions become JSON-RPC errors."""
    channel = StdioChannel()
    while True:
        try:
            frame = channel.read()
        except (EOFError, ValueError) as exc:
            log(f"cannot read a request frame: {exc}; exiting", "error")
            sys.exit(2)
        if frame is None:
            return
        request, binary = frame
        req_id = request.get("id") if isinstance(request, dict) else None
        try:
            result, blob = role.handle(str(request["method"]), request.get("params") or {},
                                       binary)
            channel.send({"jsonrpc": JSONRPC_VERSION, "id": req_id, "result": result}, blob)
        except Exception as exc:  # noqa: BLE001 - every user error goes back to the host
            channel.send({"jsonrpc": JSONRPC_VERSION, "id": req_id,
                          "error": {"code": ERROR_CODE, "message": f"{type(exc).__name__}: {exc}",
                                    "data": {"traceback": traceback.format_exc(limit=12)}}})


def run_evaluator(target: Any) -> None:
    """Serve ``target`` (a class or factory taking the constructor keywords) as an evaluator."""
    _serve(_EvaluatorRole(target))


def run_sampler(target: Any) -> None:
    """Serve ``target`` as a sampler (``from_snapshot`` is used when the host sends a snapshot)."""
    _serve(_SamplerRole(target))


def run_batch_transform(target: Any) -> None:
    """Serve ``target`` as a batch transform."""
    _serve(_TransformRole(target))


def run_materializer(target: Any) -> None:
    """Serve ``target`` as a materializer."""
    _serve(_MaterializerRole(target))
