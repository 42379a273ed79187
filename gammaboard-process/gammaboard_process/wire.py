"""Constants and frame encoding shared by both ends of the process protocol
(docs/process-protocol.md).

Standard library only: the process-side helper imports this module inside whatever
environment the user's integrand lives in (it is part of the standalone
``gammaboard_process`` package), so nothing here may pull in mainboard's host dependencies.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

PROTOCOL = "gammaboard-jsonrpc-v2"
JSONRPC_VERSION = "2.0"
ROLES = ("evaluator", "sampler", "batch_transform", "materializer")

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_BINARY_BYTES = 256 * 1024 * 1024
MAX_HEADER_LINE_BYTES = 8 * 1024
MAX_STRAY_STDOUT_BYTES = 64 * 1024
DEFAULT_REQUEST_TIMEOUT = 300.0
DEFAULT_SHUTDOWN_GRACE = 30.0
DEFAULT_TERMINATE_GRACE = 5.0

LOG_SENTINEL = "@gblog"
LOG_LEVELS = ("trace", "debug", "info", "warn", "error")
ERROR_CODE = -32000

CONTENT_LENGTH = "content-length"
BINARY_LENGTH = "binary-length"


def encode_frame(message: dict[str, Any], binary: Any = b"",
                 default: Callable[[Any], Any] | None = None) -> list[Any]:
    """Header+JSON as one bytes object, then the binary block: one buffer or a list of them
    (laid end to end, as byte views: no copy). NaN/Infinity are refused (they are not JSON);
    ``default`` converts other types.
    """
    body = json.dumps(message, separators=(",", ":"), allow_nan=False,
                      default=default).encode("utf-8")
    views = [memoryview(b) for b in (binary if isinstance(binary, list | tuple) else [binary])]
    blobs = [v.cast("B") for v in views if v.nbytes]
    size = sum(b.nbytes for b in blobs)
    header = f"Content-Length: {len(body)}\r\n"
    if size:
        header += f"Binary-Length: {size}\r\n"
    return [header.encode("ascii") + b"\r\n" + body, *blobs]


def row_offsets(n: int, width: int) -> list[int]:
    """Offsets of n fixed-width rows in a ragged row-major array: ``[0, w, 2w, ..., n*w]``."""
    return [i * width for i in range(n + 1)]


def split_header(line: bytes) -> tuple[str, str] | None:
    """``b"Name: value\\r\\n"`` -> ``("name", "value")`` (names are case-insensitive)."""
    text = line.decode("ascii", errors="replace").strip()
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        return None
    return name.strip().lower(), value.strip()


def domain_shape(domain: Any) -> tuple[list[int], int]:
    """A protocol domain (continuous | rectangular | homogeneous discrete) -> (cardinalities, dims)."""
    if not isinstance(domain, dict) or len(domain) != 1:
        raise ValueError(f"domain must be an object with one of continuous, rectangular, "
                         f"discrete; got {domain!r}")
    if "continuous" in domain:
        return [], int(domain["continuous"]["dims"])
    if "rectangular" in domain:
        rect = domain["rectangular"]
        return ([int(c) for c in rect.get("discrete_cardinalities", [])],
                int(rect["continuous_dims"]))
    if "discrete" not in domain:
        raise ValueError(f"unknown domain shape {next(iter(domain))!r}; "
                         "valid: continuous, rectangular, discrete")
    branches = domain["discrete"].get("branches") or []
    if not branches:
        raise ValueError("a discrete domain needs at least one branch")
    shapes = [domain_shape(branch["domain"]) for branch in branches]
    if any(shape != shapes[0] for shape in shapes):
        raise ValueError("branches of different shapes (a variable-width domain) are not "
                         "supported by this helper")
    return [len(branches), *shapes[0][0]], shapes[0][1]
