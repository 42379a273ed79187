"""Durable receipts: every state change is one NDJSON line under ``.mainboard/``.

All topics and their payload models are defined here, once. Writers call
``Receipts.append(payload)``; readers replay lines with ``Receipts.read()`` and take
their cursor from what they read, never from memory, so a run, a job or a batch
resumes after the coordinator or Redis is lost. The transport is a file today; it
could become a broker topic without anything downstream noticing, because nothing
outside this module knows the line format.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from mainboard.errors import MainboardError


class ReceiptError(MainboardError):
    """A receipt line could not be written or does not match its topic's model."""


class Payload(BaseModel):
    """Base of every receipt payload; ``topic`` names the line's kind."""

    model_config = ConfigDict(extra="forbid")
    topic: ClassVar[str]


class RunCreated(Payload):
    """A run definition was stored (a clone names its parent and branch iteration)."""

    topic: ClassVar[str] = "run.created"
    run_id: str
    name: str
    spec: dict[str, Any]
    parent: str | None = None
    from_iteration: int | None = None
    snapshot: dict[str, Any] | None = None  # a clone's starting state (sampler, accumulator)


class RunResumed(Payload):
    """A coordinator took an unfinished run over from its snapshot after ``from_iteration``."""

    topic: ClassVar[str] = "run.resumed"
    run_id: str
    from_iteration: int


class IterationDone(Payload):
    """One iteration merged: its estimate and the snapshot to resume from."""

    topic: ClassVar[str] = "run.iteration"
    run_id: str
    iteration: int
    samples: int
    estimate: Any
    error: Any
    snapshot: dict[str, Any] = Field(default_factory=dict)


class RunFinished(Payload):
    """A run met its stop condition; ``result`` is the final summary."""

    topic: ClassVar[str] = "run.finished"
    run_id: str
    result: dict[str, Any]


class RunFailed(Payload):
    """A run stopped on an error that retrying would not fix."""

    topic: ClassVar[str] = "run.failed"
    run_id: str
    error: str
    iteration: int | None = None
    batch: int | None = None
    stage: str | None = None


class RentalCreated(Payload):
    """A cloud GPU was rented: it costs money until a RentalDestroyed line names it."""

    topic: ClassVar[str] = "rental.created"
    provider: str
    rental_id: str
    offer_id: str
    label: str
    usd_hr: float
    host: str | None = None


class RentalDestroyed(Payload):
    """A rental was destroyed (or found already gone); ``reason`` says who and why."""

    topic: ClassVar[str] = "rental.destroyed"
    provider: str
    rental_id: str
    reason: str


TOPICS: dict[str, type[Payload]] = {
    cls.topic: cls for cls in (RunCreated, RunResumed, IterationDone, RunFinished, RunFailed,
                                RentalCreated, RentalDestroyed)
}


def register(cls: type[Payload]) -> type[Payload]:
    """Add a payload model to the topic table (used as a class decorator by later modules)."""
    if cls.topic in TOPICS and TOPICS[cls.topic] is not cls:
        raise ReceiptError(f"receipt topic {cls.topic!r} is already defined")
    TOPICS[cls.topic] = cls
    return cls


class Receipts:
    """An append-only NDJSON log in one file, safe for concurrent writers (flock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, payload: Payload) -> dict[str, Any]:
        """Write one line ``{"topic", "ts", "payload"}`` durably and return it."""
        record = {"topic": payload.topic, "ts": time.time(),
                  "payload": payload.model_dump(mode="json")}
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def read(self, topic: str | None = None) -> Iterator[Payload]:
        """Replay payloads in write order; a torn last line (crash mid-write) is ignored."""
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            lines = fh.read().split(b"\n")
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except json.JSONDecodeError as exc:
                if number == len(lines):  # unterminated final line: a write that never finished
                    break
                raise ReceiptError(f"{self.path}:{number}: not a JSON receipt line ({exc})") from exc
            if topic is not None and record.get("topic") != topic:
                continue
            model = TOPICS.get(record.get("topic"))
            if model is None:
                raise ReceiptError(f"{self.path}:{number}: unknown receipt topic "
                                   f"{record.get('topic')!r}; known: {', '.join(sorted(TOPICS))}")
            yield model.model_validate(record["payload"])

    def last(self, topic: str) -> Payload | None:
        """The most recent payload of ``topic``, or None."""
        found = None
        for found in self.read(topic):  # noqa: B007 - keep the last one
            pass
        return found
