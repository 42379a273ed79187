"""The mainboard wire codec: exact round trips, clear refusals, and no code execution."""

from __future__ import annotations

import enum
import math
import os
import pickle
import shlex
import struct
from collections import OrderedDict
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from kombu import serialization
from kombu.exceptions import ContentDisallowed

from mainboard.errors import CodecError, MainboardError
from mainboard.tasks import codec
from mainboard.tasks.codec import dumps, loads


def roundtrip(value: Any) -> Any:
    return loads(dumps(value))


# ------------------------------------------------------------------ plain values


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [
    None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, -0.0, "", "héllo ✓",
    b"", b"\x00\xffraw", [], {}, [1, [2, [3, None]]], {"a": {"b": [1.0, "x", b"y"]}},
])
def test_plain_values_round_trip_exactly(value: Any) -> None:
    out = roundtrip(value)
    assert out == value and type(out) is type(value)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 2**200, -(3**150), 10**400])
def test_integers_beyond_64_bits_round_trip(value: int) -> None:
    out = roundtrip(value)
    assert out == value and type(out) is int


def test_special_floats_round_trip() -> None:
    nan, pinf, ninf = roundtrip([math.nan, math.inf, -math.inf])
    assert math.isnan(nan) and pinf == math.inf and ninf == -math.inf


@pytest.mark.parametrize("value", [1 + 2j, -0.5j, complex(math.inf, -1.0)])
def test_complex_round_trips(value: complex) -> None:
    out = roundtrip(value)
    assert out == value and type(out) is complex


def test_documented_conversions() -> None:
    """Tuples arrive as lists (like JSON); subclasses arrive as their plain base type."""
    assert roundtrip((1, (2, 3))) == [1, [2, 3]]
    assert roundtrip(bytearray(b"ab")) == b"ab" and roundtrip(memoryview(b"cd")) == b"cd"
    out = roundtrip(OrderedDict(a=1))
    assert out == {"a": 1} and type(out) is dict
    assert roundtrip(Colour.RED) == 1 and type(roundtrip(Colour.RED)) is int
    assert roundtrip({b"k": 1}) == {b"k": 1}


# ------------------------------------------------------------------ numpy


DTYPES = ["f8", "f4", "f2", "i8", "i4", "i2", "u1", "u8", "c16", "c8", "?", "U3", "S4",
          "M8[ns]", "m8[s]"]


def sample(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(1)
    raw = np.asarray(rng.integers(0, 100, size=shape))
    if dtype.startswith("c"):
        return np.asarray(raw + 1j * (raw + 1)).astype(dtype)
    return raw.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (7,), (4, 5), (2, 3, 4)])
def test_arrays_round_trip_bit_for_bit(dtype: str, shape: tuple[int, ...]) -> None:
    arr = sample(dtype, shape)
    out = roundtrip(arr)
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype and out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()


def test_large_array_round_trips_as_raw_bytes() -> None:
    arr = np.random.default_rng(2).standard_normal(1_000_000)
    blob = dumps(arr)
    assert len(blob) < arr.nbytes + 64  # raw buffer plus a small header, no text encoding
    assert np.array_equal(roundtrip(arr), arr)


def test_non_contiguous_and_fortran_arrays_are_converted() -> None:
    base = np.arange(60.0).reshape(6, 10)
    for arr in (base[::2, 1::3], base.T, np.asfortranarray(base), base[:, 3]):
        out = roundtrip(arr)
        assert out.flags.c_contiguous and np.array_equal(out, arr)


@pytest.mark.parametrize("dtype", [">f8", ">i4", ">c16", ">u2"])
def test_big_endian_input_arrives_little_endian(dtype: str) -> None:
    arr = np.arange(12).reshape(3, 4).astype(dtype)
    out = roundtrip(arr)
    assert out.dtype == arr.dtype.newbyteorder("<") and out.dtype.byteorder in "<="
    assert np.array_equal(out, arr)


def test_decoded_arrays_are_read_only_aligned_and_copyable() -> None:
    out = roundtrip({"x": np.arange(10.0), "z": np.ones(3, "c16"), "m": np.eye(3)[1:]})
    for arr in out.values():
        assert not arr.flags.writeable and arr.flags.aligned
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 5
        copy = np.array(arr)
        copy[0] = 5  # the documented way to get a writable array
    assert roundtrip(np.arange(3))[0] == 0


@pytest.mark.parametrize("scalar", [np.float64(1.25), np.float32(-2.5), np.int64(-7), np.uint8(200),
                                    np.bool_(True), np.complex128(1 - 1j), np.float16(0.5),
                                    np.str_("ab"), np.datetime64("2024-01-02T03:04")])
def test_numpy_scalars_keep_their_dtype(scalar: np.generic) -> None:
    out = roundtrip(scalar)
    assert type(out) is type(scalar) and out.dtype == scalar.dtype and out == scalar


def test_zero_d_array_stays_an_array() -> None:
    out = roundtrip(np.array(3.5))
    assert isinstance(out, np.ndarray) and out.shape == () and out[()] == 3.5


def test_celery_shaped_message_with_arrays() -> None:
    x = np.linspace(0, 1, 11)
    body = ((x, 3), {"seed": 2**100, "w": np.float32(1)}, {"callbacks": None, "chain": None})
    args, kwargs, embed = roundtrip(body)
    assert np.array_equal(args[0], x) and args[1] == 3
    assert kwargs["seed"] == 2**100 and kwargs["w"].dtype == np.float32
    assert embed == {"callbacks": None, "chain": None}


# ------------------------------------------------------------------ refusals on encode


@pytest.mark.parametrize(("value", "where", "why"), [
    (np.array([1, "a", None], dtype=object), "value", "Python objects"),
    ({"a": [np.zeros(2, dtype=object)]}, r"value\['a'\]\[0\]", "Python objects"),
    (np.zeros(2, dtype=[("a", "f8"), ("b", "i4")]), "value", "structured dtype"),
    (np.zeros(2, dtype="V8"), "value", "kind 'V'"),
    (np.ma.masked_array([1, 2], mask=[0, 1]), "value", "masked arrays"),
    ([1, {"b": {1, 2}}], r"value\[1\]\['b'\]", "builtins.set"),
    ({"when": datetime(2024, 1, 1)}, r"value\['when'\]", "datetime.datetime"),
    ([Decimal("1.5")], r"value\[0\]", "decimal.Decimal"),
    ({"k": {3: "int key"}}, r"value\['k'\]", "dict key 3 is int"),
    ({"f": print}, r"value\['f'\]", "builtin_function_or_method"),
])
def test_unsupported_values_are_refused_with_their_path(value: Any, where: str, why: str) -> None:
    with pytest.raises(CodecError, match=f"cannot encode {where}: .*{why}") as info:
        dumps(value)
    assert isinstance(info.value, MainboardError)


def test_excessive_nesting_is_refused() -> None:
    value: Any = 1
    for _ in range(400):
        value = [value]
    with pytest.raises(CodecError, match="nested deeper"):
        dumps(value)


# ------------------------------------------------------------------ refusals on decode


def _array_record(dtype: str, shape: Any, raw: bytes) -> bytes:
    header = msgpack.packb([dtype, shape])
    start = 2 + len(header)
    return struct.pack("<H", len(header)) + header + b"\0" * (-start % 16) + raw


def _message(code: int, payload: bytes) -> bytes:
    return msgpack.packb([msgpack.ExtType(code, payload)])


@pytest.mark.parametrize(("blob", "why"), [
    (_message(1, _array_record("|O8", [1], b"\0" * 8)), "dtype '|O8' refused"),
    (_message(1, _array_record("(2,)<f8", [1], b"\0" * 16)), "refused"),
    (_message(1, _array_record("<f8,<i4", [1], b"\0" * 12)), "refused"),
    (_message(1, _array_record("|V8", [1], b"\0" * 8)), "refused"),
    (_message(1, _array_record("<f8", [3], b"\0" * 16)), "needs 24 bytes, record holds 16"),
    (_message(1, _array_record("<f8", [-1], b"")), "shape"),
    (_message(1, _array_record("<f8", [2**62, 2**62], b"")), "needs"),
    (_message(1, _array_record("<f8", "3", b"")), "shape"),
    (_message(1, b"\x01"), "truncated"),
    (_message(1, b"\xff\x00garbage"), "header unreadable"),
    (_message(2, _array_record("<f8", [2], b"\0" * 16)), "expected ()"),
    (_message(3, b"\0" * 3), "complex record"),
    (_message(42, b"anything"), "unknown msgpack extension type 42"),
    (b"\xc1", "not valid"),
    (msgpack.packb({1: 2}), "not valid"),
    (dumps([1, 2]) + b"trailing", "not valid"),
])
def test_malformed_payloads_are_refused(blob: bytes, why: str) -> None:
    with pytest.raises(CodecError, match=why):
        loads(blob)


class _TouchOnUnpickle:
    """An object whose unpickling runs a shell command: the classic pickle exploit."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)


def test_a_pickle_payload_is_never_executed(tmp_path: Path) -> None:
    control, marker = tmp_path / "control", tmp_path / "marker"
    pickle.loads(pickle.dumps(_TouchOnUnpickle(control)))  # proves the payload is live
    assert control.exists()
    with pytest.raises(CodecError):
        loads(pickle.dumps(_TouchOnUnpickle(marker)))
    with pytest.raises(ContentDisallowed):
        serialization.loads(pickle.dumps(_TouchOnUnpickle(marker)),
                            "application/x-python-serialize", "binary",
                            accept=[codec.CONTENT_TYPE])
    assert not marker.exists()


# ------------------------------------------------------------------ kombu registration


def test_registered_with_kombu_as_binary_content() -> None:
    content_type, encoding, blob = serialization.dumps({"x": np.arange(4.0)},
                                                       serializer=codec.SERIALIZER)
    assert (content_type, encoding) == (codec.CONTENT_TYPE, "binary")
    out = serialization.loads(blob, content_type, encoding, accept=[codec.CONTENT_TYPE])
    assert np.array_equal(out["x"], np.arange(4.0))


def test_kombu_wraps_our_errors_with_the_reason() -> None:
    from kombu.exceptions import DecodeError, EncodeError

    with pytest.raises(EncodeError, match="dict key 1 is int"):
        serialization.dumps({1: 1}, serializer=codec.SERIALIZER)
    with pytest.raises(DecodeError, match="unknown msgpack extension"):
        serialization.loads(_message(9, b""), codec.CONTENT_TYPE, "binary",
                            accept=[codec.CONTENT_TYPE])
