"""What a batch task needs besides its compact arguments, kept per worker process.

Why here and not in the message: the run spec and the sampler state of iteration k are
the same for every batch of that iteration, so the coordinator publishes them once in
Redis and each worker process fetches them once, cached by (run, iteration). Also here:
the claim a running batch holds (a short-TTL key refreshed by a heartbeat thread, so the
coordinator notices a dead worker in seconds, not after the broker's visibility
timeout), and the set-if-absent writes that make a batch count exactly once.

External processes (process integrands, samplers, transforms, materializers) live per
worker process and run: stages run under ``run_scope(<the coordinator's run id>)``, and a
janitor thread ends a run's processes once the run's status says it finished or failed
(or its definition is gone). Cached process samplers are closed when evicted, and
:func:`release_all` (at worker shutdown) ends everything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis

from mainboard import keys
from mainboard.integrators.process.adapters import run_scope
from mainboard.integrators.samplers import Sampler, restore_sampler
from mainboard.integrators.stages import Run, build_run, release_processes
from mainboard.redisclient import min_replicas, redis_client, wait_replicas
from mainboard.tasks import codec, modules
from mainboard.tasks.claims import Claim
from mainboard.tasks.paths import add_roots, localize

JANITOR_S = 1.0  # how often a worker process checks whether runs with live processes ended
ENDED = (b"finished", b"failed", b"paused", b"stopped")
_CACHE_SIZE = 4
log = logging.getLogger(__name__)

# Atomic end of a batch: store only while the iteration is live (its sampler key exists),
# at most once per batch (HSETNX), then signal the coordinator (LPUSH).
# KEYS: sampler, target hash, done list, progress hash, claim. ARGV: field, payload,
# progress field, done entry.
_FINISH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if ARGV[5] ~= '0' then
  local owner = redis.call('HGET', KEYS[6], 'generation')
  if owner and owner ~= ARGV[5] then
    redis.call('HINCRBY', KEYS[6], 'stale_refused', 1)
    return -2
  end
end
redis.call('DEL', KEYS[5])
redis.call('HINCRBY', KEYS[4], ARGV[3], 1)
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then
  redis.call('LPUSH', KEYS[3], ARGV[4])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class BatchRef:
    """Which batch a message is about: the compact coordinates every stage carries."""

    run: str
    iteration: int
    batch: int
    n: int
    attempt: int = 0
    gen: int = 0  # the run's owner generation that sent it (0: sent by hand, not checked)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the codec (``gen`` only when set: a hand-sent message is as before)."""
        data = asdict(self)
        if not self.gen:
            del data["gen"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchRef:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["run"]), int(data["iteration"]), int(data["batch"]),
                   int(data["n"]), int(data.get("attempt", 0)), int(data.get("gen", 0)))

    @property
    def field(self) -> str:
        """The progress-hash field of this attempt."""
        return f"{self.batch}:{self.attempt}"

    def __str__(self) -> str:
        return (f"batch {self.batch} of iteration {self.iteration} of run {self.run} "
                f"(attempt {self.attempt})")


class Skip(Exception):  # noqa: N818 - a control-flow signal, not an error
    """This delivery has nothing to do: the batch is already merged or its iteration is over."""


class _ProcessState:
    """Redis client and caches of one worker process (rebuilt after a fork)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.clients: dict[str, redis.Redis] = {}
        self.runs: OrderedDict[str, tuple[bytes, Run]] = OrderedDict()  # (digest, run)
        self.samplers: OrderedDict[tuple[str, int], Sampler] = OrderedDict()
        self.lock = threading.Lock()
        self.cache_lock = threading.RLock()  # caches: task thread and janitor thread
        self.process_runs: dict[str, str] = {}  # run id -> broker URL, runs with processes here
        self.janitor: threading.Thread | None = None


_state = _ProcessState()


def _local() -> _ProcessState:
    global _state
    if _state.pid != os.getpid():
        _state = _ProcessState()
    return _state


def client(url: str) -> redis.Redis:
    """This process's Redis client for ``url`` (connection pool, thread-safe)."""
    st = _local()
    with st.lock:
        if url not in st.clients:
            st.clients[url] = redis_client(url, socket_timeout=30,
                                           socket_connect_timeout=10,
                                           health_check_interval=25)
        return st.clients[url]


def close_sampler(sampler: Sampler) -> None:
    """End a sampler's external process, if it has one (a MaterializedSampler wraps it)."""
    close = getattr(getattr(sampler, "inner", sampler), "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # shutting a process down must never fail a task or the worker
        log.exception("closing the process of a %s sampler failed", sampler.kind)


def _remember(cache: OrderedDict, key: Any, value: Any) -> Any:
    with _local().cache_lock:
        cache[key] = value
        while len(cache) > _CACHE_SIZE:
            _, evicted = cache.popitem(last=False)
            if isinstance(evicted, Sampler):
                close_sampler(evicted)
    return value


def _drop_samplers(run_id: str, before: int | None = None) -> None:
    """Close and forget cached samplers of ``run_id`` (only iterations < ``before`` if given)."""
    st = _local()
    with st.cache_lock:
        doomed = [k for k in st.samplers
                  if k[0] == run_id and (before is None or k[1] < before)]
        for key in doomed:
            close_sampler(st.samplers.pop(key))


def load_iteration(r: redis.Redis, ref: BatchRef) -> tuple[Run, Sampler]:
    """The run and the sampler batches of (run, iteration) use, from Redis once per
    iteration and worker process; stale batches are skipped.

    The definition comes in the same round trip as the sampler: a run with ``[[tasks]]``
    publishes each task's tables under the run's id, so a changed definition (by digest)
    builds the run again; iterations are numbered across tasks, so a batch never meets a
    sampler of another task's definition.
    """
    hit = cached_iteration(ref)
    if hit is not None:
        return hit
    with r.pipeline(transaction=False) as pipe:
        fetch_iteration(pipe, ref)
        return iteration_from(ref, pipe.execute())


def cached_iteration(ref: BatchRef) -> tuple[Run, Sampler] | None:
    """The run and sampler of (run, iteration) when this process holds them already."""
    st = _local()
    if modules.changed():  # a workspace module was edited (synced): build runs again
        with st.cache_lock:
            st.runs.clear()
    key = (ref.run, ref.iteration)
    with st.cache_lock:
        if key in st.samplers and ref.run in st.runs:
            st.samplers.move_to_end(key)
            st.runs.move_to_end(ref.run)
            return st.runs[ref.run][1], st.samplers[key]
    return None


def fetch_iteration(pipe: Any, ref: BatchRef) -> None:
    """Queue in ``pipe`` the three reads :func:`iteration_from` takes, in its order."""
    pipe.get(keys.iteration_sampler(ref.run, ref.iteration))
    pipe.get(keys.run_definition(ref.run))
    pipe.get(keys.run_places(ref.run))


def iteration_from(ref: BatchRef, fetched: Sequence[bytes | None]) -> tuple[Run, Sampler]:
    """The run and sampler from the reads of :func:`fetch_iteration`, kept for the
    iteration's next batches."""
    st = _local()
    raw_sampler, raw, places = fetched
    if raw is None:
        raise Skip(f"run {ref.run} is not defined in this broker (deleted?); batch skipped")
    if raw_sampler is None:
        raise Skip(f"{ref}: iteration no longer live (merged or run stopped); skipped")
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    cached = st.runs.get(ref.run)
    if cached is not None and cached[0] == digest:
        run = cached[1]
    else:
        # The run's files as this worker's copy of the workspace holds them (tasks.paths).
        spec, roots = localize(codec.loads(raw), json.loads(places) if places else None)
        add_roots(roots)
        with modules.fresh(spec, roots):
            run = build_run(spec)
        _remember(st.runs, ref.run, (digest, run))
    # iteration k is only published once k-1 is merged: older samplers of the run are stale
    _drop_samplers(ref.run, before=ref.iteration)
    return run, _remember(st.samplers, (ref.run, ref.iteration),
                          restore_sampler(codec.loads(raw_sampler), run.domain))


def release_run(run_id: str) -> None:
    """End this worker process's external processes of one run and its cached samplers."""
    st = _local()
    with st.cache_lock:
        st.process_runs.pop(run_id, None)
    _drop_samplers(run_id)
    release_processes(run_id)


def release_all() -> None:
    """End every external process of this worker process (worker shutdown)."""
    st = _local()
    with st.cache_lock:
        runs = list(st.process_runs)
        st.process_runs.clear()
        samplers = list(st.samplers.values())
        st.samplers.clear()
    for sampler in samplers:
        close_sampler(sampler)
    release_processes()
    if runs:
        log.info("released the external processes of runs %s", ", ".join(runs))


def run_ended(r: redis.Redis, run_id: str) -> bool:
    """True once the coordinator marked the run finished or failed, or it was deleted."""
    with r.pipeline(transaction=False) as pipe:
        pipe.hget(keys.run_state(run_id), "status")
        pipe.exists(keys.run_definition(run_id))
        status, defined = pipe.execute()
    return status in ENDED or not defined


def _janitor() -> None:
    """Release the processes of runs that ended; exit when no run with processes is left."""
    st = _local()
    stop = threading.Event()
    while not stop.wait(JANITOR_S):
        with st.cache_lock:
            watched = dict(st.process_runs)
            if not watched:
                st.janitor = None
                return
        for run_id, url in watched.items():
            try:
                ended = run_ended(client(url), run_id)
            except redis.RedisError:  # the broker is away: check again on the next round
                continue
            if ended:
                log.info("run %s ended: releasing its external processes", run_id)
                release_run(run_id)


def watch_processes(url: str, run_id: str) -> None:
    """Remember that this process holds processes of ``run_id``; end them when the run ends."""
    st = _local()
    with st.cache_lock:
        st.process_runs[run_id] = url
        if st.janitor is None or not st.janitor.is_alive():
            st.janitor = threading.Thread(target=_janitor, name="mainboard process janitor",
                                          daemon=True)
            st.janitor.start()


@contextlib.contextmanager
def process_scope(url: str, run: Run, run_id: str) -> Iterator[None]:
    """Processes a stage starts belong to ``run_id``: the coordinator's id, which differs from
    the spec's for a clone, so the janitor and ``release_processes(run_id)`` find them."""
    if not run.uses_processes:
        yield
        return

    watch_processes(url, run_id)
    with run_scope(run_id):
        yield


class StageContext:
    """Everything one stage task of one batch attempt uses: Redis, run, sampler, claim."""

    def __init__(self, broker_url: str, ref: BatchRef, stage: str, hostname: str | None) -> None:
        self.ref, self.stage, self.url = ref, stage, broker_url
        self.r = client(broker_url)
        self.holder = f"{hostname or socket.gethostname()}|{os.getpid()}|{stage}"

    def load(self, check_stored: bool = True, hold: Sequence[int] | None = None,
             claim: Claim | None = None) -> None:
        """Fetch run and sampler (cached); raise Skip for a batch already stored or stale,
        all in one round trip with the rest of a task's start (it was three: the sampler,
        the pause check, the claim).

        ``hold``: a sampling task's batches (its own when empty): a run asked to pause or
        stop samples nothing new, the batches are parked (``p:<batch>`` on the done list
        tells the coordinator) and skipped. ``claim`` is staked, and taken back when the
        task skips."""
        ref = self.ref
        hit = cached_iteration(ref)
        with self.r.pipeline(transaction=False) as pipe:
            if check_stored:
                pipe.hexists(keys.iteration_results(ref.run, ref.iteration), str(ref.batch))
            if hit is None:
                fetch_iteration(pipe, ref)
            if hold is not None:
                pipe.hget(keys.run_state(ref.run), "control")
            if claim is not None:
                claim.stake(pipe)
            answers = iter(pipe.execute() if len(pipe) else [])
        try:
            if check_stored and next(answers):
                raise Skip(f"{ref}: already stored once; duplicate delivery skipped")
            self.run, self.sampler = hit if hit is not None else \
                iteration_from(ref, [next(answers) for _ in range(3)])
            if hold is not None and next(answers) is not None:
                self.r.lpush(keys.iteration_done(ref.run, ref.iteration),
                             *[f"p:{b}" for b in (hold or (ref.batch,))])
                raise Skip(f"{ref}: the run pauses or stops; batch left for the resume")
        except Skip:
            if claim is not None and claim.staked:
                self.r.delete(claim.key)
            raise

    def processes(self) -> contextlib.AbstractContextManager[None]:
        """The run scope of external processes for this batch (a no-op for in-process runs)."""
        return process_scope(self.url, self.run, self.ref.run)

    def claim(self) -> Claim:
        """The heartbeat-kept claim on this attempt, for the duration of the stage."""
        return Claim(self.r, keys.batch_claim(self.ref.run, self.ref.iteration, self.ref.batch,
                                              self.ref.attempt), self.holder)

    def forward(self, **data: Any) -> dict[str, Any]:
        """The message for the next stage: the batch coordinates plus this stage's output."""
        return {"ref": self.ref.to_dict(), **data}

    def advance(self) -> None:
        """A middle stage finished: release the claim, count the stage (liveness signal)."""
        ref = self.ref
        with self.r.pipeline(transaction=True) as pipe:
            pipe.delete(keys.batch_claim(ref.run, ref.iteration, ref.batch, ref.attempt))
            pipe.hincrby(keys.iteration_progress(ref.run, ref.iteration), ref.field, 1)
            pipe.execute()

    def _finish(self, target: str, payload: bytes, entry: str) -> bool:
        ref = self.ref
        script = self.r.register_script(_FINISH)
        stored = script(keys=[keys.iteration_sampler(ref.run, ref.iteration), target,
                              keys.iteration_done(ref.run, ref.iteration),
                              keys.iteration_progress(ref.run, ref.iteration),
                              keys.batch_claim(ref.run, ref.iteration, ref.batch, ref.attempt),
                              keys.run_state(ref.run)],
                        args=[str(ref.batch), payload, ref.field, entry, str(ref.gen)])
        if int(stored) == 1:  # counted: on a replica too before a failover can lose it
            wait_replicas(self.r, min_replicas(self.url))
        return int(stored) == 1

    def store_result(self, result: Mapping[str, Any]) -> bool:
        """HSETNX the encoded BatchResult; True only for the one delivery that counts."""
        ref = self.ref
        return self._finish(keys.iteration_results(ref.run, ref.iteration),
                            codec.dumps(dict(result)), str(ref.batch))

    def store_error(self, exc: BaseException) -> bool:
        """Record why this batch failed (stage, cause) so the coordinator fails the run."""
        ref = self.ref
        record = {"batch": ref.batch, "iteration": ref.iteration, "attempt": ref.attempt,
                  "stage": getattr(exc, "stage", None) or self.stage,
                  "error": type(exc).__name__, "message": str(exc),
                  "worker": self.holder.split("|", 1)[0]}
        return self._finish(keys.iteration_errors(ref.run, ref.iteration),
                            codec.dumps(record), f"e:{ref.batch}")


__all__ = ["BatchRef", "Claim", "Skip", "StageContext", "client",
           "close_sampler", "process_scope", "release_all", "release_run", "run_ended",
           "watch_processes"]
