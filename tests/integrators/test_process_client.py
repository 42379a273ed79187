"""Host side of the process protocol against real child processes that misbehave on purpose.

Every case must end with one clear error naming the command (and the limit or the exit
code), within its timeout, with the child gone: nothing here may hang or kill pytest.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from mainboard.errors import (
    BatchError,
    ConfigError,
    ProcessCrashed,
    ProcessError,
    ProcessProtocolError,
    ProcessRemoteError,
    ProcessTimeout,
)
from mainboard.integrators.process.adapters import ProcessEvaluator
from mainboard.integrators.process.client import ProcessClient
from mainboard.integrators.process.pool import ProcessPool, ProcessSpec

FIXTURE = Path(__file__).parents[1] / "process_fixtures" / "misbehave.py"
X = np.random.default_rng(0).random((16, 2))
IDX = np.zeros((16, 0), dtype=np.int64)


def spec(mode: str, *extra: str, **settings: float) -> dict:
    return {"command": [sys.executable, str(FIXTURE), mode, *extra], "request_timeout": 10.0,
            "shutdown_grace": 2.0, **settings}


@pytest.fixture
def pool() -> ProcessPool:
    pool = ProcessPool()
    yield pool
    pool.release()


def evaluator(pool: ProcessPool, mode: str, *extra: str, **settings: float) -> ProcessEvaluator:
    return ProcessEvaluator(spec(mode, *extra, **settings), 2, pool=pool, run_id="run-1")


def test_a_correct_process_answers_and_is_reused(pool: ProcessPool) -> None:
    ev = evaluator(pool, "ok")
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    pid = ev.process.client.pid
    ev(X[:3], IDX[:3])
    assert ev.process.client.pid == pid and ev.process.starts == 1
    assert ev.metadata == {"m": "ok"}


@pytest.mark.parametrize(("mode", "fragment"), [
    ("bad_header", "bad frame header Content-Length: 'abc'"),
    ("short_length", "frame payload is not valid JSON"),
    ("huge_json", "Content-Length 17000000 exceeds the JSON limit of 16777216 bytes"),
    ("huge_binary", "Binary-Length 300000000 exceeds the binary limit of 268435456 bytes"),
    ("long_line", "longer than the header line limit of 8192 bytes"),
    ("stray_flood", "more than 65536 bytes of stray stdout before a frame"),
    ("wrong_id", "id 3 does not match the request id 2"),
    ("both", "exactly one of result or error, got both"),
    ("no_jsonrpc", '"jsonrpc" must be "2.0", got None'),
    ("not_object", "expected a JSON object, got list"),
    ("bad_error", "error must be an object with a message, got 'oops'"),
    ("result_list", "result must be a JSON object, got list"),
    ("bad_header_line", "bad frame header line b'Garbage\\r\\n' (expected 'Name: value'"),
    ("long_line_nl", "a line on stdout is longer than the header line limit of 8192 bytes"),
])
def test_protocol_violations_are_clear_errors(pool: ProcessPool, mode: str, fragment: str) -> None:
    ev = evaluator(pool, mode)
    with pytest.raises(ProcessProtocolError) as err:
        ev(X, IDX)
    text = str(err.value)
    assert fragment in text and "misbehave.py" in text and "killed it" in text
    assert ev.process.client is None  # discarded: the next batch gets a fresh process


def test_content_length_beyond_the_body_then_exit_is_a_crash(pool: ProcessPool) -> None:
    ev = evaluator(pool, "long_length_exit")
    with pytest.raises(ProcessCrashed, match="exited with code 0 during eval_batch .inside a "
                                             "frame's JSON payload"):
        ev(X, IDX)


def test_a_hung_process_times_out_and_is_killed(pool: ProcessPool) -> None:
    ev = evaluator(pool, "hang")
    ev.metadata  # noqa: B018 - start it (the default timeout for its start) so the pid is known
    pid = ev.process.client.pid
    ev.process.client.request_timeout = 0.5  # a hang is a request past the limit, not a slow start
    with pytest.raises(ProcessTimeout, match=r"did not answer eval_batch within 0.5s .*killed"):
        ev(X, IDX)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_exit_mid_batch_restarts_once_then_names_code_and_stderr(
        pool: ProcessPool, caplog: pytest.LogCaptureFixture) -> None:
    ev = evaluator(pool, "exit")
    with pytest.raises(ProcessCrashed) as err:
        ev(X, IDX)
    text = str(err.value)
    assert "crashed again after one restart" in text and "exited with code 3" in text
    assert "misbehave.py exit" in text and "boom: something fatal" in text
    assert err.value.returncode == 3
    assert ev.process.starts == 2
    assert "crashed (exited with code 3 during eval_batch" in caplog.text
    assert "restarting it once" in caplog.text


def test_one_crash_is_survived(pool: ProcessPool, tmp_path: Path,
                               caplog: pytest.LogCaptureFixture) -> None:
    ev = evaluator(pool, "crash_once", str(tmp_path / "marker"))
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    assert ev.process.starts == 2 and "exited with code 4" in caplog.text


def test_nan_values_pass_through_as_the_integrands_answer(pool: ProcessPool) -> None:
    assert np.isnan(evaluator(pool, "nan")(X, IDX)).all()


def test_wrong_number_of_values_is_a_batch_error(pool: ProcessPool) -> None:
    with pytest.raises(BatchError, match=r"eval_batch returned 120 bytes of values; expected "
                                         r"128 \(16 samples x 1 components"):
        evaluator(pool, "short_values")(X, IDX)


def test_a_remote_error_keeps_the_process_and_carries_the_traceback(pool: ProcessPool) -> None:
    ev = evaluator(pool, "remote_error")
    for _ in range(2):
        with pytest.raises(ProcessRemoteError, match=r"(?s)ValueError: bad x.*eval.py, line 7"):
            ev(X, IDX)
    assert ev.process.starts == 1


def test_notifications_are_skipped_and_header_names_are_case_insensitive(
        pool: ProcessPool) -> None:
    np.testing.assert_allclose(evaluator(pool, "notify_and_case")(X, IDX), np.sin(X[:, 0]))


def test_a_little_stray_stdout_is_logged_not_fatal(pool: ProcessPool,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    np.testing.assert_allclose(evaluator(pool, "stray_small")(X, IDX), np.sin(X[:, 0]))
    assert "stray stdout: debug output line 2" in caplog.text


def test_stderr_is_routed_by_level_and_secrets_are_redacted(
        pool: ProcessPool, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(1, logger="mainboard.process")
    ev = evaluator(pool, "logs", env={"MB_TEST_PASSWORD": "hunter2-secret"})
    ev(X, IDX)
    ev.process.close()
    levels = {r.getMessage().split("] ", 1)[1]: r.levelno for r in caplog.records
              if r.name == "mainboard.process" and "] " in r.getMessage()}
    assert levels["message at trace"] == 5 and levels["message at debug"] == logging.DEBUG
    assert levels["message at info"] == logging.INFO
    assert levels["message at warn"] == logging.WARNING
    assert levels["message at error"] == logging.ERROR
    assert levels["plain line with secret [REDACTED]"] == logging.WARNING
    assert "hunter2-secret" not in caplog.text
    assert all(getattr(r, "process_role", "evaluator") == "evaluator" for r in caplog.records)


def test_shutdown_escalates_from_stdin_close_to_sigterm_to_sigkill(
        caplog: pytest.LogCaptureFixture) -> None:
    client = ProcessSpec.from_config(spec("stubborn", shutdown_grace=0.3, terminate_grace=0.3)
                                     ).client("evaluator")
    client.start()
    client.initialize({"domain": {"continuous": {"dims": 2}}, "args": {}})
    client.request("eval_batch", {"nr_samples": 16}, [IDX, X])
    client.close()
    assert client.returncode == -signal.SIGKILL
    assert "sending SIGTERM" in caplog.text and "sending SIGKILL" in caplog.text


def test_a_well_behaved_process_exits_on_stdin_close() -> None:
    with ProcessSpec.from_config(spec("ok")).client("evaluator") as client:
        client.start()
        client.initialize({"domain": {"continuous": {"dims": 2}}, "args": {}})
    assert client.returncode == 0


def test_closing_stdout_without_exiting_is_reported() -> None:
    with ProcessSpec.from_config(spec("close_stdout")).client("evaluator") as client:
        client.start()
        client.initialize({"domain": {"continuous": {"dims": 2}}, "args": {}})
        with pytest.raises(ProcessCrashed, match="closed its stdout without exiting"):
            client.request("eval_batch", {"nr_samples": 16}, [IDX, X])


def test_unstartable_command_and_unencodable_request_are_clear() -> None:
    client = ProcessClient(["/nonexistent/integrand"], role="evaluator")
    with pytest.raises(ProcessError, match=r"/nonexistent/integrand.*cannot start the evaluator"):
        client.start()
    with ProcessSpec.from_config(spec("ok")).client("evaluator") as client:
        client.start()
        with pytest.raises(ProcessError, match="cannot encode the request"):
            client.request("initialize", {"args": {"x": float("nan")}})


def test_hostile_command_names_are_argv_never_shell(pool: ProcessPool, tmp_path: Path) -> None:
    hostile = tmp_path / "a'; echo pwned; $(touch owned)"
    shutil.copy(FIXTURE, hostile)
    ev = ProcessEvaluator({"command": [sys.executable, str(hostile), "ok"]}, 2, pool=pool)
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    assert not (Path.cwd() / "owned").exists() and not (tmp_path / "owned").exists()


def test_cwd_is_where_the_process_starts(pool: ProcessPool) -> None:
    """A relative script path resolves against ``cwd``, as in a run file next to its code."""
    table = {"command": [sys.executable, FIXTURE.name, "ok"], "cwd": str(FIXTURE.parent)}
    np.testing.assert_allclose(ProcessEvaluator(table, 2, pool=pool)(X, IDX), np.sin(X[:, 0]))
    elsewhere = ProcessEvaluator({**table, "cwd": str(FIXTURE.parent.parent)}, 2, pool=pool)
    with pytest.raises(ProcessCrashed, match=r"(?s)exited with code 2.*tests/misbehave.py'.*"
                                             r"No such file"):
        elsewhere(X, IDX)


def test_pool_keys_by_run_and_releases_one_run(pool: ProcessPool) -> None:
    one = ProcessEvaluator(spec("ok"), 2, pool=pool, run_id="one")
    two = ProcessEvaluator(spec("ok"), 2, pool=pool, run_id="two")
    one(X, IDX), two(X, IDX)
    assert one.process is not two.process and len(pool) == 2
    assert one.process is ProcessEvaluator(spec("ok"), 2, pool=pool, run_id="one").process
    client = one.process.client
    pool.release("one")
    assert len(pool) == 1 and client.returncode == 0 and two.process.client.alive


@pytest.mark.parametrize(("table", "key", "fragment"), [
    ({"command": "python3 eval.py"}, "x.command", "non-empty list of strings"),
    ({"command": []}, "x.command", "non-empty list of strings"),
    ({"command": ["p"], "env": {"A": 1}}, "x.env", "table of string values"),
    ({"command": ["p"], "request_timeout": 0}, "x.request_timeout", "seconds > 0"),
    ({"command": ["p"], "shutdown_grace": -1}, "x.shutdown_grace", "seconds >= 0"),
    ({"command": ["p"], "args": {"a": float("inf")}}, "x.args", "JSON-representable"),
    ({"command": ["p"], "comand": ["p"]}, "x.comand", "unknown key"),
    ({"command": ["p"], "cwd": 3}, "x.cwd", "must be a directory path string"),
    ({"command": ["p"], "args": [1]}, "x.args", "must be a table"),
])
def test_bad_process_tables_name_key_and_value(table: dict, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        ProcessSpec.from_config(table, where="x")
    assert err.value.key == key and fragment in str(err.value)


def test_a_forked_worker_never_touches_its_parents_processes() -> None:
    from mainboard.integrators.process.pool import default_pool

    ev = ProcessEvaluator(spec("ok"), 2, run_id="fork-test")
    ev(X, IDX)
    parent_client = ev.process.client
    child = os.fork()
    if child == 0:  # the child: an empty pool, and closing the inherited client is harmless
        ok = len(default_pool()) == 0
        parent_client.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert parent_client.alive and ev.process.client is parent_client
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    default_pool().release("fork-test")
    assert parent_client.returncode == 0


def test_a_refused_initialize_and_a_killed_process_are_named(pool: ProcessPool) -> None:
    with pytest.raises(ProcessProtocolError, match=r"initialize answered \{'ok': False, 'why': 'no "
                                         r"licence'\}; expected"):
        evaluator(pool, "init_refused")(X, IDX)
    with pytest.raises(ProcessError, match=r"was killed by signal SIGKILL \(code -9\) during "
                                         "eval_batch"):
        evaluator(pool, "killed")(X, IDX)


def test_a_long_command_is_shown_cut_to_200_characters() -> None:
    client = ProcessClient([sys.executable, str(FIXTURE), "ok", "x" * 300], role="evaluator")
    assert len(client.label) == 200 and client.label.endswith("xxx...")


def test_a_relative_cwd_is_taken_from_the_run_file_s_folder() -> None:
    spec = ProcessSpec.from_config({"command": ["p"], "cwd": "sub"}, where="x", base="/srv/run")
    assert spec.cwd == "/srv/run/sub"


def test_a_process_that_dies_at_startup_is_restarted_once_then_named(pool: ProcessPool) -> None:
    with pytest.raises(ProcessCrashed, match="exited with code 5"):
        evaluator(pool, "init_exit").process.start()
    with pytest.raises(ProcessRemoteError, match="no licence file"):
        evaluator(pool, "init_remote")(X, IDX)


def test_a_process_gone_between_batches_is_started_afresh(pool: ProcessPool) -> None:
    ev = evaluator(pool, "exit_after")
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    ev.process.client._proc.wait(timeout=10)  # the event: it exited after answering
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
    assert ev.process.starts == 2


def test_requests_to_a_process_not_running_or_gone_are_named() -> None:
    client = ProcessClient([sys.executable, "-c", "pass"], role="evaluator")
    with pytest.raises(ProcessError, match="eval_batch: the evaluator process is not running"):
        client.request("eval_batch", {})
    client.start()
    client._proc.wait(timeout=10)  # the event: it has exited
    with pytest.raises(ProcessCrashed, match=r"exited with code 0 during eval_batch \(before "
                                             r"the request was sent\)"):
        client.request("eval_batch", {})
    client.close()


def test_a_stderr_line_past_the_limit_is_cut_and_the_next_kept(
        pool: ProcessPool, caplog: pytest.LogCaptureFixture) -> None:
    ev = evaluator(pool, "long_stderr")
    with caplog.at_level(logging.WARNING, logger="mainboard.process"):
        np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]))
        ev.process.close()  # the stderr reader drains before close returns
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.endswith("y" * 10 + " [line truncated]") for m in lines), lines
    assert any(m.endswith("after the long line") for m in lines), lines


@pytest.mark.parametrize("mode", ["blank_stray", "other_header"])
def test_blank_stray_lines_and_unknown_headers_are_passed_over(pool: ProcessPool,
                                                               mode: str) -> None:
    np.testing.assert_allclose(evaluator(pool, mode)(X, IDX), np.sin(X[:, 0]))


def test_stdout_ending_inside_a_line_is_a_crash_named_so(pool: ProcessPool) -> None:
    with pytest.raises(ProcessCrashed, match=r"exited with code 0 during eval_batch \(inside "
                                             r"a partial line on stdout\)"):
        evaluator(pool, "partial_exit")(X, IDX)


def test_a_complex_evaluator_and_points_of_the_wrong_shape(pool: ProcessPool) -> None:
    from mainboard.integrators.process.adapters import to_spec

    ev = ProcessEvaluator(spec("ok"), 2, components="complex", pool=pool, run_id="run-1")
    np.testing.assert_allclose(ev(X, IDX), np.sin(X[:, 0]) * (1 + 1j))  # [re, im] columns
    with pytest.raises(BatchError, match=r"expected x \(16, 2\) and idx \(16, 0\), got "
                                         r"\(16, 1\) and \(16, 0\)"):
        ev(X[:, :1], IDX)
    given = to_spec({"command": ["p"], "timeout_s": 3.0}, "integrand")  # gammaboard's name
    assert given.request_timeout == 3.0 and to_spec(given, "integrand") is given
