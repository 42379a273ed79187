"""Receipts: one NDJSON line per state change, replayable, typed, concurrent-safe."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from mainboard.receipts import IterationDone, ReceiptError, Receipts, RunCreated, RunFinished


def _writer(path: str, start: int) -> None:
    log = Receipts(Path(path))
    for i in range(start, start + 50):
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


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson"
    procs = [multiprocessing.Process(target=_writer, args=(str(path), k * 100)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    its = sorted(p.iteration for p in Receipts(path).read())
    assert its == sorted(list(range(0, 50)) + list(range(100, 150)) + list(range(200, 250)))


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
