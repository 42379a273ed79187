"""The process-side Python helper: light imports, a numpy-only environment, its corners,
and a process in another language (C) speaking the same protocol."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

from mainboard.errors import ProcessRemoteError
from mainboard.integrators.process.client import ProcessClient
from mainboard.integrators.process.wire import PROTOCOL
from tests.support.services import require, unavailable

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "process_fixtures" / "helper_probe.py"
SIN = REPO / "examples" / "process" / "sin_evaluator.py"
X = np.random.default_rng(1).random((8, 2))


def test_importing_the_helper_pulls_in_no_host_dependencies() -> None:
    code = ("import sys, mainboard.integrators.process as p; "
            "heavy = {'celery', 'kombu', 'redis', 'pydantic', 'msgpack', 'paramiko', 'click'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def numpy_only_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain venv (no system site-packages) holding numpy and nothing of mainboard."""
    root = tmp_path_factory.mktemp("npvenv")
    venv.create(root / "venv", with_pip=False, system_site_packages=False)
    python = root / "venv" / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "-q", "--no-compile", "--no-deps", "numpy"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        unavailable(f"cannot pip install numpy into a fresh venv: {done.stderr[-500:]}")
    return python


def test_helper_runs_where_only_numpy_is_installed(numpy_only_python: Path,
                                                  tmp_path: Path) -> None:
    check = subprocess.run([str(numpy_only_python), "-c", "import mainboard"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode != 0, "the bare venv must not see mainboard"
    shutil.copytree(REPO / "gammaboard-process" / "gammaboard_process",
                    tmp_path / "lib" / "gammaboard_process")  # the helper is this folder
    client = ProcessClient([str(numpy_only_python), str(SIN)], role="evaluator", cwd=tmp_path,
                           env={"PYTHONPATH": str(tmp_path / "lib")}, request_timeout=60)
    with client:
        client.start()
        client.initialize({"domain": {"continuous": {"dims": 2}}, "args": {"scale": 3.0}})
        _, blob = client.request("eval_batch", {"nr_samples": 8}, X)
    np.testing.assert_allclose(np.frombuffer(blob), 3.0 * np.sin(X[:, 0]))
    assert client.returncode == 0


def probe(kind: str = "evaluator") -> ProcessClient:
    client = ProcessClient([sys.executable, str(PROBE), kind], role=kind, request_timeout=30)
    client.start()
    return client


def test_print_and_native_stdout_never_corrupt_frames(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mainboard.process")
    domain = {"discrete": {"branches": [{"domain": {"continuous": {"dims": 2}}}] * 3}}
    with probe() as client:
        meta = client.initialize({"domain": domain, "components": ["a", "b"],
                                  "args": {"alpha": 1, "beta": [2]}})["metadata"]
        idx = np.array([[0], [1], [2], [0], [1], [2], [0], [1]], dtype=np.int64)
        _, blob = client.request("eval_batch", {"nr_samples": 8, "components": ["b", "a"]},
                                 [idx, X])
    values = np.frombuffer(blob).reshape(8, 2)
    np.testing.assert_allclose(values[:, 0], idx[:, 0])
    np.testing.assert_allclose(values[:, 1], np.sin(X[:, 0]))
    assert meta == {"args": {"alpha": 1, "beta": [2]}, "cards": [3], "dims": 2}
    by_text = {r.getMessage().split("] ", 1)[-1]: r.levelno for r in caplog.records}
    assert by_text["probe built with args ['alpha', 'beta'] and cards [3]"] == logging.INFO
    assert by_text["raw write to fd 1 from native code"] == logging.WARNING
    assert by_text["evaluating a batch"] == logging.WARNING


@pytest.mark.parametrize(("params", "fragment"), [
    ({"protocol": "gammaboard-jsonrpc-v9", "role": "evaluator"}, "unsupported protocol"),
    ({"protocol": PROTOCOL, "role": "sampler"}, "serves role 'evaluator', not 'sampler'"),
    ({"protocol": PROTOCOL, "role": "evaluator",
      "domain": {"discrete": {"branches": [{"domain": {"continuous": {"dims": 1}}},
                                           {"domain": {"continuous": {"dims": 2}}}]}}},
     "branches of different shapes"),
    ({"protocol": PROTOCOL, "role": "evaluator", "domain": {"continuous": {"dims": 2}},
      "args": {"continuous_dims": 3}}, "reserved keys"),
])
def test_helper_refuses_bad_handshakes_at_once(params: dict, fragment: str) -> None:
    with probe() as client, pytest.raises(ProcessRemoteError, match=fragment):
        client.request("initialize", params)


def test_helper_refuses_variable_width_batches_and_short_blocks() -> None:
    with probe() as client:
        client.initialize({"domain": {"continuous": {"dims": 2}}, "components": ["a"]})
        with pytest.raises(ProcessRemoteError, match="variable-width"):
            client.request("eval_batch", {"nr_samples": 2, "xs_continuous_offsets": [0, 1, 4]},
                           X[:2])
        with pytest.raises(ProcessRemoteError, match="binary block has 24 bytes, expected 32"):
            client.request("eval_batch", {"nr_samples": 2}, X[:2].reshape(-1)[:3].copy())
        with pytest.raises(ProcessRemoteError, match="'a' before|unknown method 'nope'"):
            client.request("nope", {})


def test_helper_checks_what_a_sampler_returns() -> None:
    with probe("sampler") as client:
        client.initialize({"domain": {"continuous": {"dims": 2}}, "snapshot": None})
        with pytest.raises(ProcessRemoteError, match="not finite and positive"):
            client.request("produce_latent_batch", {"nr_samples": 4})
        with pytest.raises(ProcessRemoteError, match="sample_plan returned"):
            client.request("sample_plan", {})
        with pytest.raises(ProcessRemoteError, match="has no from_snapshot"):
            client.request("initialize", {"protocol": PROTOCOL, "role": "sampler",
                                          "domain": {"continuous": {"dims": 2}},
                                          "snapshot": {"state": 1}})
        remaining = client.request("training_samples_remaining", {})[0]
        assert remaining == {"remaining": None}


def test_an_evaluator_in_c_speaks_the_protocol(tmp_path: Path) -> None:
    cc = require("gcc", "builds the C example evaluator")
    binary = tmp_path / "sin_evaluator"
    subprocess.run([cc, "-O2", "-o", str(binary), str(REPO / "examples/process/sin_evaluator.c"),
                    "-lm"], check=True, capture_output=True)
    with ProcessClient([str(binary)], role="evaluator") as client:
        client.start()
        meta = client.initialize({"domain": {"rectangular": {"discrete_cardinalities": [4],
                                                              "continuous_dims": 2}},
                                  "components": ["x", "y"]})["metadata"]
        idx = np.arange(8, dtype=np.int64).reshape(8, 1) % 4
        _, blob = client.request("eval_batch", {"nr_samples": 8}, [idx, X])
        with pytest.raises(ProcessRemoteError, match="unknown method"):
            client.request("snapshot", {})
    assert meta == {"language": "c"}
    np.testing.assert_allclose(np.frombuffer(blob).reshape(8, 2), np.sin(X[:, [0, 0]]))
