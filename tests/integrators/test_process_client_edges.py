"""The host side of the process protocol at its edges, against real child processes: a
request bigger than the pipe (written in parts), a child that exits leaving it unread, a
request over the frame limits, a client asked again after it killed its process, a pipe
that fails to read, and forked workers that inherit clients they must not touch."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mainboard.errors import ProcessCrashed, ProcessError, ProcessProtocolError, StreamClosed
from mainboard.integrators.process.adapters import ProcessEvaluator
from mainboard.integrators.process.client import ProcessClient
from mainboard.integrators.process.framing import FrameReader
from mainboard.integrators.process.pool import ProcessPool, ProcessSpec, default_pool

FIXTURE = Path(__file__).parents[1] / "process_fixtures" / "misbehave.py"
BIG = 100_000  # rows of 2 doubles: 1.6 MB, more than the 1 MiB pipe holds
DOMAIN = {"domain": {"continuous": {"dims": 2}}}


def spec(mode: str) -> dict:
    return {"command": [sys.executable, str(FIXTURE), mode], "request_timeout": 30.0,
            "shutdown_grace": 2.0}


def _client(mode: str) -> ProcessClient:
    client = ProcessClient([sys.executable, str(FIXTURE), mode], role="evaluator",
                           request_timeout=30.0, shutdown_grace=2.0)
    client.start()
    client.initialize(DOMAIN)
    return client


def _points(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.random.default_rng(1).random((n, 2)), np.zeros((n, 0), dtype=np.int64)


def test_a_request_bigger_than_the_pipe_is_written_in_parts_and_answered(tmp_path: Path) -> None:
    pool = ProcessPool()
    try:
        x, idx = _points(BIG)
        values = ProcessEvaluator(spec("ok"), 2, pool=pool, run_id="big")(x, idx)
        np.testing.assert_allclose(values, np.sin(x[:, 0]), rtol=0, atol=0)
    finally:
        pool.release()


def test_a_process_that_exits_leaving_the_request_unread_is_named_with_its_code() -> None:
    pool = ProcessPool()
    try:
        x, idx = _points(BIG)
        with pytest.raises(ProcessCrashed, match=r"crashed again after one restart: exited "
                           r"with code 6 during eval_batch \(writing the request \(stdin "
                           r"closed\)\)"):
            ProcessEvaluator(spec("exit_unread"), 2, pool=pool, run_id="unread")(x, idx)
    finally:
        pool.release()


def test_a_request_over_the_limits_is_not_sent_and_a_killed_process_stays_named() -> None:
    client = _client("wrong_id")
    try:
        with pytest.raises(ProcessError, match=r"eval_batch: the request \(\d+ bytes of JSON, 0 "
                           r"of binary\) exceeds the frame limits \(16777216 JSON, 268435456 "
                           r"binary\); use smaller batches"):
            client.request("eval_batch", {"note": "x" * (16 * 1024 * 1024 + 1024)})
        assert client.alive  # nothing was sent: the process is as it was
        x, idx = _points(4)
        with pytest.raises(ProcessProtocolError, match="does not match the request id"):
            client.request("eval_batch", {"nr_samples": 4, "components": ["value"]}, [idx, x])
        assert not client.alive
        with pytest.raises(ProcessError, match=r"eval_batch: the process was killed earlier "
                                               r"\(invalid response to request \d+: id"):
            client.request("eval_batch", {"nr_samples": 4, "components": ["value"]}, [idx, x])
    finally:
        client.close()


def test_a_pipe_that_fails_to_read_is_a_closed_stream_naming_the_error(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # poll calls a directory readable; read refuses
    try:
        with pytest.raises(StreamClosed) as info:
            FrameReader(fd, "cmd", lambda text: None).read_message(time.monotonic() + 30)
        assert info.value.where == "waiting for a response frame ([Errno 21] Is a directory)"
    finally:
        os.close(fd)


def test_a_forked_worker_leaves_every_inherited_process_alone() -> None:
    """After a fork the child forgets the default pool's entries (started, never started,
    failed to start) and closing a client of a pool of its own only drops its pipes: the
    parent's process keeps answering."""
    own = ProcessPool()
    pool = default_pool()
    x, idx = _points(8)
    try:
        evaluator = ProcessEvaluator(spec("ok"), 2, pool=own, run_id="fork-own")
        evaluator(x, idx)
        client = evaluator.process.client
        pool.acquire("fork-idle", "evaluator", ProcessSpec.from_config(spec("ok"), where="x"),
                     {})
        failed = pool.acquire("fork-failed", "evaluator", ProcessSpec.from_config(
            {"command": [str(FIXTURE.parent / "no-such-program")]}, where="x"), {})
        with pytest.raises(ProcessError, match="cannot start the evaluator process"):
            failed.start()
        child = os.fork()
        if child == 0:  # the child: nothing of the parent's is its to signal
            code = 0 if len(pool) == 0 else 1
            own.release()
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.alive and evaluator.process.client is client
        np.testing.assert_allclose(evaluator(x, idx), np.sin(x[:, 0]))
        with pytest.raises(ProcessError, match="cannot start the evaluator process"):
            failed.call("eval_batch", {})
    finally:
        own.release()
        pool.release("fork-idle")
        pool.release("fork-failed")
