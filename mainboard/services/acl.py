"""Who may do what on the embedded broker: the Redis ACL users it starts with.

Why two users: a worker runs on machines we trust less than the coordinator's (a rented
GPU, a shared cluster node). Its password travels to them, so what it can do is cut to
what a Celery worker of ours needs: keys and channels under ``keys.PREFIX`` (Celery's
own keys sit under ``keys.CELERY_PREFIX`` through kombu's ``global_keyprefix``) and no
command of Redis's ``@dangerous`` category but INFO (FLUSHALL, FLUSHDB, CONFIG, DEBUG,
KEYS, ACL, SHUTDOWN, MONITOR, CLIENT, ...). The coordinator (this workspace's CLI, runs,
Flower, the dashboard) keeps every right: it owns the broker. The ``default`` user is
off, so a connection without a user name and password is refused.

The worker's rules were found by running a whole integration, the fleet's probes and
its heartbeats under this ACL with ``ACL LOG`` watched (tests/services/test_broker_acl.py keeps
checking that it stays empty).
"""

from __future__ import annotations

from mainboard import keys

COORDINATOR = "coordinator"
WORKER = "worker"


def worker_rules(db: int = 0) -> str:
    """The worker user's rights on database ``db``.

    Keys: everything of ours, Celery's included (kombu prefixes queues, bindings, unacked,
    results). Channels: kombu prefixes them the same way; a PSUBSCRIBE pattern (kombu's
    fanout for remote control and events) passes only when it equals an allowed channel
    pattern literally, hence the two spelled out with the database number in them.
    INFO (in ``@dangerous``) is given back: a run coordinator that a worker runs (the
    ``mainboard.integrate`` task) tells a restarted broker by INFO's ``run_id``.
    """
    fanout = f"{keys.CELERY_PREFIX}/{db}."
    return (f"resetkeys ~{keys.PREFIX}* resetchannels &{keys.PREFIX}* "
            f"&{fanout}celery.pidbox &{fanout}celeryev/worker.* +@all -@dangerous +info")


def acl_text(coordinator_password: str, worker_password: str, db: int = 0) -> str:
    """The aclfile: ``default`` off, the coordinator with every right, the worker cut down.
    The passwords are one word each (``EmbeddedBroker`` refuses a secret file that is not)."""
    return "\n".join([
        # off with no password: nobody can log in as default. Its rights stay whole because
        # Redis 7.0 replays MULTI blocks of the AOF as the default user: with -@all, every
        # transaction was dropped on restart (found under ACL LOG; the runs index vanished).
        "user default off resetpass ~* &* +@all",
        f"user {COORDINATOR} on >{coordinator_password} ~* &* +@all",
        f"user {WORKER} on >{worker_password} {worker_rules(db)}",
    ]) + "\n"
