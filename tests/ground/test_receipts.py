"""Receipts: one NDJSON line per state change, replayable, typed, concurrent-safe."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from mainboard.errors import ReceiptError
from mainboard.receipts import (
    REDACTED,
    IterationDone,
    Receipts,
    RunCreated,
    RunFinished,
    encode_line,
    redact_env,
)

LINES = 20  # per writer: each append fsyncs, which a loaded CI disk makes slow


def _writer(path: str, start: int) -> None:
    log = Receipts(Path(path))
    for i in range(start, start + LINES):
        log.append(IterationDone(run_id="r", iteration=i, samples=i, estimate=1.0, error=0.1))


def test_append_and_replay_typed(tmp_path: Path) -> None:
    log = Receipts(tmp_path / "runs" / "r" / "receipts.ndjson")
    log.append(RunCreated(run_id="r", name="n", spec={"seed": 1}))
    log.append(IterationDone(run_id="r", iteration=0, samples=10, estimate=1.5, error=0.2))
    log.append(RunFinished(run_id="r", result={"estimate": 1.5}))
    got = list(log.read())
    assert [type(p) for p in got] == [RunCreated, IterationDone, RunFinished]
    assert log.last("run.iteration").estimate == 1.5
    assert oct(log.path.stat().st_mode & 0o777) == "0o600"
    line = json.loads(log.path.read_text().splitlines()[0])
    assert set(line) == {"topic", "ts", "payload"}


def test_a_line_reads_back_the_same_numbers_text_and_layout_whatever_encoder_wrote_it(
        tmp_path: Path) -> None:
    """Lines are encoded with orjson (a VEGAS+ snapshot's floats ~15x faster) and fall back
    to the standard encoder for what orjson refuses (an int beyond 64 bits): both read back
    as the same floats, text and ints, with the compact layout the lazy reader cuts."""
    log = Receipts(tmp_path / "receipts.ndjson")
    floats = [1e-07, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -0.0, 123456789.123456789]
    text = "Grüße, δx = \"1\" {ok}"
    log.append(IterationDone(run_id="r", iteration=0, samples=1, estimate=floats[0],
                             error=float("nan"), snapshot={"edges": floats, "note": text}))
    log.append(IterationDone(run_id="r", iteration=1, samples=1, estimate=1.0, error=0.1,
                             snapshot={"big": 2 ** 70}))
    first, second = list(log.read())
    assert [x.hex() for x in first.snapshot["edges"]] == [x.hex() for x in floats]
    assert first.snapshot["note"] == text and first.error is None  # NaN: null, as before
    assert second.snapshot["big"] == 2 ** 70
    lines = log.path.read_bytes().splitlines()
    assert all(b',"snapshot":{' in raw and b',"wall_s":' in raw for raw in lines)
    assert lines[0].startswith(b'{"topic":"run.iteration","ts":')
    assert encode_line({"a": 2 ** 70}) == b'{"a":1180591620717411303424}\n'


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson"
    # spawn, not fork: a forked xdist worker inherits its threads and exit handlers (30 s in CI)
    spawn = multiprocessing.get_context("spawn")
    procs = [spawn.Process(target=_writer, args=(str(path), k * 100)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    its = sorted(p.iteration for p in Receipts(path).read())
    assert its == [k * 100 + i for k in range(3) for i in range(LINES)]


def test_torn_last_line_is_ignored_but_corruption_inside_is_an_error(tmp_path: Path) -> None:
    log = Receipts(tmp_path / "r.ndjson")
    log.append(RunFinished(run_id="r", result={}))
    with log.path.open("a") as fh:
        fh.write('{"topic": "run.fin')
    assert len(list(log.read())) == 1
    log.path.write_text('garbage\n{"topic":"run.finished","ts":0,"payload":{"run_id":"r","result":{}}}\n')
    with pytest.raises(ReceiptError, match=r"r.ndjson:1: not a JSON receipt line"):
        list(log.read())


def test_unknown_topic_and_bad_payload_are_named(tmp_path: Path) -> None:
    log = Receipts(tmp_path / "r.ndjson")
    log.path.write_text('{"topic":"nope","ts":0,"payload":{}}\n')
    with pytest.raises(ReceiptError, match="unknown receipt topic 'nope'; known: .*run.created"):
        list(log.read())
    with pytest.raises(ValueError, match="extra"):
        RunFinished(run_id="r", result={}, surprise=1)


def test_bad_lines_are_collected_with_file_and_line_and_the_rest_still_read(
        tmp_path: Path) -> None:
    log = Receipts(tmp_path / "r.ndjson")
    good = '{"topic":"run.finished","ts":5,"payload":{"run_id":"%s","result":{}}}\n'
    log.path.write_text(good % "a" + "{not json\n" + '{"topic":"nope","ts":0,"payload":{}}\n'
                        + '{"topic":"run.finished","ts":0,"payload":{"run_id":1}}\n'
                        + "[1, 2]\n" + good % "b")
    errors: list[ReceiptError] = []
    assert [p.run_id for p in log.read(errors=errors)] == ["a", "b"]  # type: ignore[attr-defined]
    assert [str(e).split(": ", 1)[0] for e in errors] == [f"{log.path}:{n}" for n in (2, 3, 4, 5)]
    assert [str(e).split(": ", 1)[1][:12] for e in errors] == [
        "not a JSON r", "unknown rece", "bad run.fini", "not a JSON r"]
    assert [ts for ts, _ in Receipts(log.path).read_timed(errors=[])] == [5.0, 5.0]


def test_redact_env_keeps_names_and_hides_secret_values() -> None:
    env = {"HF_TOKEN": "hf_abc", "DB_PASSWORD": "pw", "API_KEY": "k", "BROKER": (
        "redis://:s3cret@127.0.0.1:7000/0"), "MIXED": "a amqp://u:p4ss@h:5672// b",
           "PLAIN": "redis://127.0.0.1:7000/0", "SEED": "42", "USER_ONLY": "ssh://me@host"}
    shown = redact_env(env)
    assert shown == {"HF_TOKEN": REDACTED, "DB_PASSWORD": REDACTED, "API_KEY": REDACTED,
                     "BROKER": "redis://:***@127.0.0.1:7000/0",
                     "MIXED": "a amqp://u:***@h:5672// b", "PLAIN": "redis://127.0.0.1:7000/0",
                     "SEED": "42", "USER_ONLY": "ssh://me@host"}
    assert not any(s in json.dumps(shown) for s in ("hf_abc", "s3cret", "p4ss"))
