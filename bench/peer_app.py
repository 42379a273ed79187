"""The bare Celery peer of bench/overhead.py: one no-op task, same Redis, same codec rules
(JSON, no pickle), results in Redis as a pipeline would read them."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("peer", broker=os.environ["PEER_BROKER"], backend=os.environ["PEER_BROKER"])
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                worker_prefetch_multiplier=1, task_acks_late=True, result_expires=600,
                broker_connection_retry_on_startup=True)


@app.task(name="peer.noop")
def noop() -> int:
    """Nothing: what is left is Celery's own cost per task."""
    return 1
