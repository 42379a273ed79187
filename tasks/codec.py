"""The one wire format of mainboard: msgpack with raw numpy buffers, registered with kombu.

Why: arrays as JSON lists cost ~100x more than their bytes, and pickle executes code on
decode. This codec carries numpy arrays as msgpack ExtType records holding the dtype
string, the shape and the raw little-endian C-contiguous buffer, and decodes with
nothing but ``np.frombuffer``: no pickle, no imports, no callables, ever.

Supported values: ``None``, ``bool``, ``int`` (any size), ``float``, ``complex``, ``str``,
``bytes`` (``bytearray``/``memoryview`` arrive as ``bytes``), ``list``, ``tuple`` (arrives
as a ``list``, like JSON), ``dict`` with ``str``/``bytes`` keys (subclasses such as Celery
signatures arrive as plain ``dict``), numpy arrays and numpy scalars of kinds
``b i u f c m M S U`` (bool, integers, floats, complex, timedelta, datetime, bytes and
unicode strings). Numpy scalars keep their dtype (``np.float32(1)`` comes back as a
``np.float32``). Object and structured arrays, masked arrays and every other type are
refused with a :class:`CodecError` that names where in the value the culprit sits.

Big-endian or non-contiguous input arrays are converted on encode; decoded arrays are
always little-endian, C-contiguous and **read-only**: they are zero-copy views over a
private ``bytes`` object that nothing else references, so sharing is safe and decode
costs a single copy (inside msgpack). Call ``np.array(x)`` (or ``x.copy()``) for a
writable array. The raw buffer is 16-byte aligned inside its record; should an array
ever come out unaligned anyway, it is copied. (msgpack's built-in timestamp extension,
which this codec never writes, decodes to an inert ``msgpack.Timestamp``.)
"""

from __future__ import annotations

import math
import re
import struct
import sys
from typing import Any

import msgpack
import numpy as np
from kombu import serialization

from mainboard.errors import CodecError

SERIALIZER = "mainboard-msgpack"
CONTENT_TYPE = "application/x-mainboard-msgpack"
CONTENT_ENCODING = "binary"

EXT_ARRAY = 1
EXT_SCALAR = 2
EXT_COMPLEX = 3
EXT_BIGINT = 4

ARRAY_KINDS = "biufcmMSU"
_ALIGN = 16
_MAX_DEPTH = 256
_MAX_NDIM = 64
_DTYPE_RE = re.compile(r"^[<|][biufcmMSU][0-9]{1,4}(\[[0-9]*[a-zA-Z]{1,3}\])?$")
_COMPLEX = struct.Struct("<dd")
_HEADER_LEN = struct.Struct("<H")
_LITTLE = np.little_endian
_LEAVES = (type(None), bool, int, float, str, bytes)
_SUPPORTED = ("None, bool, int, float, complex, str, bytes, list, tuple, dict with str keys, "
              f"numpy arrays and scalars of kinds {ARRAY_KINDS}")


# --------------------------------------------------------------------------- encode


def _array_dtype_problem(dtype: np.dtype) -> str | None:
    """Why an array of ``dtype`` cannot travel, or None when it can."""
    if dtype.hasobject:
        return f"dtype {dtype} holds Python objects (would need pickle)"
    if dtype.fields is not None or dtype.subdtype is not None:
        return f"structured dtype {dtype} is not supported"
    if dtype.kind not in ARRAY_KINDS:
        return f"dtype {dtype} (kind {dtype.kind!r}) is not supported"
    return None


def _leaf_problem(obj: Any) -> str | None:
    """Why ``obj`` (not a plain leaf or container) cannot be encoded, or None."""
    masked = sys.modules.get("numpy.ma")  # never loaded: no masked array exists (saves its import)
    if masked is not None and isinstance(obj, masked.MaskedArray):
        return "masked arrays are not supported (the mask would be lost); send data and mask"
    if isinstance(obj, np.ndarray | np.generic):
        return _array_dtype_problem(obj.dtype)
    if isinstance(obj, complex | bytearray | memoryview | int | float | str | bytes):
        return None
    return f"type {type(obj).__module__}.{type(obj).__qualname__} is not supported"


Path = tuple[Any, ...]  # (parent path, key or index), or ("value",) at the root


def _render(path: Path) -> str:
    """``value['a'][0]`` from the linked path (built only when a value is refused)."""
    parts: list[str] = []
    while len(path) == 2:
        path, key = path
        parts.append(f"[{key!r}]" if isinstance(key, str | bytes) else f"[{key}]")
    return path[0] + "".join(reversed(parts))


def _check(obj: Any, path: Path, depth: int) -> None:
    """Walk ``obj`` once and raise a CodecError naming the path of the first bad value
    (the path is linked, not formatted, on the way down: this runs for every message)."""
    kind = type(obj)
    if kind in _LEAVES:
        return
    if depth > _MAX_DEPTH:
        raise CodecError(f"cannot encode {_render(path)}: nested deeper than {_MAX_DEPTH} "
                         "levels")
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str | bytes):
                raise CodecError(f"cannot encode {_render(path)}: dict key {key!r} is "
                                 f"{type(key).__name__}; only str or bytes keys are supported")
            if type(value) not in _LEAVES:
                _check(value, (path, key), depth + 1)
    elif isinstance(obj, list | tuple):
        for index, value in enumerate(obj):
            if type(value) not in _LEAVES:
                _check(value, (path, index), depth + 1)
    elif (problem := _leaf_problem(obj)) is not None:
        raise CodecError(f"cannot encode {_render(path)}: {problem}; supported: {_SUPPORTED}")


def _pack_array(arr: np.ndarray) -> bytes:
    """Header (dtype str, shape) padded to 16 bytes, then the raw little-endian buffer."""
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not _LITTLE):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    header = msgpack.packb([arr.dtype.str, list(arr.shape)])
    start = _HEADER_LEN.size + len(header)
    pad = b"\0" * (-start % _ALIGN)
    raw = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else b""
    return b"".join((_HEADER_LEN.pack(len(header)), header, pad, raw))


def _default(obj: Any) -> Any:
    """msgpack hook for everything msgpack does not pack natively (strict_types=True)."""
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(EXT_ARRAY, _pack_array(np.asarray(obj)))
    if isinstance(obj, np.generic):
        return msgpack.ExtType(EXT_SCALAR, _pack_array(np.asarray(obj)))
    if isinstance(obj, complex):
        return msgpack.ExtType(EXT_COMPLEX, _COMPLEX.pack(obj.real, obj.imag))
    if isinstance(obj, int):
        if type(obj) is not int:  # IntEnum and friends
            return int(obj)
        size = (obj.bit_length() + 8) // 8  # room for the sign bit
        return msgpack.ExtType(EXT_BIGINT, obj.to_bytes(size, "little", signed=True))
    for base in (float, str, bytes, list, dict):
        if isinstance(obj, base):
            return base(obj)
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise CodecError(f"cannot encode {type(obj).__qualname__}; supported: {_SUPPORTED}")


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` to bytes; raises CodecError naming the first unsupported value."""
    _check(obj, ("value",), 0)
    try:
        return msgpack.packb(obj, default=_default, use_bin_type=True, strict_types=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise CodecError(f"cannot encode value: {exc}") from exc


# --------------------------------------------------------------------------- decode


def _unpack_array(data: bytes) -> np.ndarray:
    """Inverse of _pack_array: a read-only view over ``data``; validates every header field."""
    if len(data) < _HEADER_LEN.size:
        raise CodecError("array record truncated")
    (hlen,) = _HEADER_LEN.unpack_from(data)
    start = _HEADER_LEN.size + hlen
    try:
        dtype_str, shape = msgpack.unpackb(data[_HEADER_LEN.size:start], raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CodecError(f"array header unreadable: {exc}") from exc
    if not isinstance(dtype_str, str) or not _DTYPE_RE.match(dtype_str):
        raise CodecError(f"array dtype {dtype_str!r} refused; valid kinds: {ARRAY_KINDS}")
    dtype = np.dtype(dtype_str)
    if (problem := _array_dtype_problem(dtype)) is not None:
        raise CodecError(f"array refused: {problem}")
    if (not isinstance(shape, list) or len(shape) > _MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise CodecError(f"array shape {shape!r} invalid: need a list of non-negative ints")
    offset = start + (-start % _ALIGN)
    count = math.prod(shape)
    if len(data) - offset != count * dtype.itemsize:
        raise CodecError(f"array of dtype {dtype_str} and shape {shape} needs "
                         f"{count * dtype.itemsize} bytes, record holds {len(data) - offset}")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(tuple(shape))
    if not arr.flags.aligned:
        arr = arr.copy()
        arr.flags.writeable = False
    return arr


def _ext_hook(code: int, data: bytes) -> Any:
    """Turn our ExtType records back into values; anything unknown is refused."""
    if code == EXT_ARRAY:
        return _unpack_array(data)
    if code == EXT_SCALAR:
        arr = _unpack_array(data)
        if arr.shape != ():
            raise CodecError(f"numpy scalar record has shape {arr.shape}, expected ()")
        return arr[()]
    if code == EXT_COMPLEX:
        if len(data) != _COMPLEX.size:
            raise CodecError(f"complex record has {len(data)} bytes, expected {_COMPLEX.size}")
        return complex(*_COMPLEX.unpack(data))
    if code == EXT_BIGINT:
        return int.from_bytes(data, "little", signed=True)
    raise CodecError(f"unknown msgpack extension type {code}; "
                     f"valid: {EXT_ARRAY, EXT_SCALAR, EXT_COMPLEX, EXT_BIGINT}")


def loads(data: bytes | bytearray | memoryview) -> Any:
    """Decode bytes made by :func:`dumps`; arrays come back read-only (see module doc)."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=True,
                               use_list=True, timestamp=0)
    except CodecError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CodecError(f"payload is not valid {SERIALIZER} data: {exc}") from exc


def register() -> None:
    """Register the codec with kombu under SERIALIZER / CONTENT_TYPE (idempotent)."""
    serialization.register(SERIALIZER, dumps, loads, content_type=CONTENT_TYPE,
                           content_encoding=CONTENT_ENCODING)


register()
__all__ = ["CONTENT_TYPE", "SERIALIZER", "dumps", "loads", "register"]
