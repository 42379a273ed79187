"""A simulated fleet for bench/capacity.py --simulate: W worker slots in ONE process that
answer the coordinator's bundles without computing them.

Why a simulation: on this 2-core machine, 256 real Celery worker slots spend 12-16 ms of
CPU per batch (docs/performance.md), so they, not the coordinator, fill the cores, and the
coordinator's capacity cannot be seen. Here the workers' CPU is charged apart: this process
takes bundle messages straight off the batch queue (the Celery message kombu put there:
JSON envelope, base64 body, mainboard's msgpack codec), holds each in one of W slots for
``cost_ms`` per member (the simulated evaluation, no CPU), then stores every member's
result with the real one-round-trip store script (``tasks/bundles.store_bundle``) and its
done entry, as a worker does. The results are precomputed: one real batch is computed per
iteration (``tasks/context.load_iteration`` and ``integrators/stages.process_batch``, the
worker's own code) and its encoded result is re-labelled with each member's index. What a
real worker does besides (Celery's delivery and ack, the claim and its heartbeat, spans,
progress) is left out; the coordinator and Redis are the real ones, and this process's
CPU per batch is reported beside theirs.

    python bench/sim_fleet.py BROKER_URL SLOTS COST_MS   (runs until SIGTERM)
"""

from __future__ import annotations

import base64
import heapq
import json
import os
import signal
import sys
import time
from dataclasses import replace
from typing import Any

import redis

from mainboard import keys
from mainboard.integrators import stages
from mainboard.tasks import BATCH_QUEUE, codec
from mainboard.tasks.bundles import store_bundle
from mainboard.tasks.context import BatchRef, load_iteration


class Answers:
    """Encoded results per (run, iteration, index): one real batch per iteration, copied."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.templates: dict[tuple[str, int], Any] = {}

    def encoded(self, ref: BatchRef, index: int, n: int) -> bytes:
        key = (ref.run, ref.iteration)
        template = self.templates.get(key)
        if template is None:
            run, sampler = load_iteration(self.r, ref)
            template = self.templates[key] = stages.process_batch(
                run, sampler, ref.iteration, index, n)
        return codec.dumps(replace(template, batch_index=index).to_dict())


def decode(raw: bytes) -> dict[str, Any] | None:
    """The bundle message of one kombu envelope (None: another task)."""
    envelope = json.loads(raw)
    if not envelope["headers"].get("task", "").endswith("bundle"):
        return None
    body = envelope["body"]
    if envelope["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, _kwargs, _embed = codec.loads(body)
    return args[0]


def serve(url: str, slots: int, cost_s: float) -> None:
    r = redis.Redis.from_url(url)
    queue = keys.CELERY_PREFIX + BATCH_QUEUE  # kombu's list, under the app's key prefix
    answers, busy = Answers(r), []  # (due, seq, message)
    seq, running = 0, [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    while running[0]:
        now = time.monotonic()
        while busy and busy[0][0] <= now:
            _due, _seq, message = heapq.heappop(busy)
            lead = BatchRef.from_dict(message["ref"])
            results = [(int(i), answers.encoded(lead, int(i), int(n)))
                       for i, n in message["batches"]]
            store_bundle(r, lead.run, lead.iteration, lead.batch, lead.attempt, results,
                         cost_s * len(results), f"sim|{os.getpid()}|{seq % slots}", lead.gen)
        free = slots - len(busy)
        raws = (r.rpop(queue, free) or []) if free else []
        for raw in raws:
            message = decode(raw)
            if message is not None:
                seq += 1
                heapq.heappush(busy, (now + cost_s * len(message["batches"]), seq, message))
        if not raws:
            wait = busy[0][0] - time.monotonic() if busy else 0.002
            time.sleep(min(max(wait, 0.0), 0.002))


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) / 1000.0)
