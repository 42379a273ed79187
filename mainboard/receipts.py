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

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mainboard.errors import ReceiptError
from mainboard.redact import MASK, looks_secret, redact_text

REDACTED = MASK


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment values safe to record: receipts outlive the job and get copied around.

    A secret-looking name (``HF_TOKEN``, ``DB_PASSWORD``) keeps its name with the value
    ``***``; a URL holding a password (``redis://:pw@host``, a broker URL) keeps all but
    the password. The job itself still gets the real values.
    """
    out: dict[str, str] = {}
    for name, value in env.items():
        if looks_secret(name):
            out[name] = REDACTED
        else:
            out[name] = redact_text(value)
    return out


class Payload(BaseModel):
    """Base of every receipt payload; ``topic`` names the line's kind."""

    # Each model's validator is built on its first use, not at import: a verb reads a few
    # topics of the ~45 (`runs list`: the run's own), and building them all cost ~0.2 s.
    model_config = ConfigDict(extra="forbid", defer_build=True)
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
    kind: str | None = None  # a parent run (scan, tune, campaign): its spec is the parent's
    point: dict[str, Any] | None = None  # a child of a parent run: its grid point, trial, name
    deadline: str | None = None  # [stop] deadline resolved at run start: ISO 8601, UTC


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
    wall_s: float | None = None  # coordinator time spent on the run so far, all executions
    batches: int | None = None  # batches the iteration was cut into
    # unix times of the iteration's phases (the run timeline): "dispatch" (first batch
    # sent), "complete" (last batch merged), "adapt" (sampler adapted); snapshot = this line
    times: dict[str, float] = Field(default_factory=dict)
    # result writes of an earlier coordinator (older owner generation) refused so far
    stale_refused: int = 0


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
    # Who may end it: "jobs" (the host's jobs; the monitor releases it) or "fleet" (its
    # worker; fleet down / idle). None: recorded before owners were (left to fleet down).
    owner: str | None = None


class RentalDestroyed(Payload):
    """A rental was destroyed (or found already gone); ``reason`` says who and why."""

    topic: ClassVar[str] = "rental.destroyed"
    provider: str
    rental_id: str
    reason: str


class JobSubmitted(Payload):
    """A job was accepted by its host; enough to find, poll, cancel and pull it from any process."""

    topic: ClassVar[str] = "job.submitted"
    id: str                 # mainboard's uid (also the job directory's name on the host)
    host: str
    kind: str
    job_id: str             # the scheduler's id (the uid on hosts without a scheduler)
    name: str
    job_dir: str            # absolute, on the host
    root: str               # the host root the job ran in: data went there, fetch comes from there
    spec: dict[str, Any]
    data: list[str] = Field(default_factory=list)
    fetch: list[str] = Field(default_factory=list)
    submitted_at: float
    # unix [start, end] of the steps before the job existed: "sync" (mirror and data),
    # "submit" (the bridge's submit); `mainboard jobs trace` draws them
    phases: dict[str, list[float]] = Field(default_factory=dict)
    env_key: str | None = None  # the provisioned environment it ran in (None: none declared)


class JobStateChanged(Payload):
    """A job was seen in a new, not yet final state (pending, running, unknown)."""

    topic: ClassVar[str] = "job.state"
    id: str
    state: str
    native: str = ""
    reason: str = ""


class JobFinished(Payload):
    """The verdict: a job reached a final state. Written once per job."""

    topic: ClassVar[str] = "job.finished"
    id: str
    state: str
    exit_code: int | None = None
    native: str = ""
    reason: str = ""
    started_at: float | None = None  # the job script's own start stamp (times fast jobs)
    ended_at: float | None = None    # its end stamp (same clock): costs count its run alone


class JobRouted(Payload):
    """``submit --on auto`` chose this job's host: the whole ranking, excluded hosts with why."""

    topic: ClassVar[str] = "job.routed"
    id: str
    chosen: str
    prefer: str
    max_usd_hr: float | None = None
    asked: dict[str, Any] = Field(default_factory=dict)
    candidates: list[dict[str, Any]] = Field(default_factory=list)


class JobPulled(Payload):
    """A finished job's ``fetch`` paths were copied back into the workspace."""

    topic: ClassVar[str] = "job.pulled"
    id: str
    paths: list[str]
    missing: list[str] = Field(default_factory=list)
    bytes: int = 0
    in_place: bool = False  # the job ran in the workspace itself: nothing needed copying
    error: str = ""        # why nothing came back (the host could not pack or send it)
    started_at: float | None = None  # when the pull began (the line's time is its end)


class MonitorPass(Payload):
    """One monitor pass that had news; the union of ``announced`` is the monitor's cursor."""

    topic: ClassVar[str] = "monitor.pass"
    running: int
    announced: list[str]
    unreachable_hosts: list[str]
    pulled: list[str] = Field(default_factory=list)
    released: list[str] = Field(default_factory=list)  # rental ids destroyed: work done


class WorkerTunnel(Payload):
    """A fleet worker's host needs a reverse tunnel to the broker (kept by the fleet keeper).

    Written before the worker is submitted, so the tunnel is up when the worker connects;
    ``ssh`` holds connection parameters only (host, port, user, key and known_hosts paths).
    """

    topic: ClassVar[str] = "worker.tunnel"
    worker_id: str
    host: str
    ssh: dict[str, Any]
    remote_port: int
    local_host: str
    local_port: int


class WorkerStarted(Payload):
    """A fleet worker was submitted: enough to find, drain and stop it from a new process."""

    topic: ClassVar[str] = "worker.started"
    worker_id: str
    host: str
    kind: str
    node: str                      # Celery node name before the "@": mb-<host>-<id>
    queues: list[str]
    concurrency: int
    job: dict[str, Any]            # the bridge's JobRecord
    root: str
    python: str
    broker_via: str                # "direct", "tunnel" or "sentinels" (followed itself)
    secret_path: str               # the 0600 file on the host holding the broker URL
    tunnel_port: int | None = None
    ssh: dict[str, Any] | None = None     # how to reach a rented machine (provider hosts)
    rental: dict[str, str] | None = None  # {"provider", "rental_id"}
    idle_timeout_s: float | None = None
    pool: str | None = None               # the [fleet.pools.NAME] it belongs to
    nodes: int = 1                        # workers of this one allocation: one per node


class WorkerSubmitting(Payload):
    """A fleet worker is about to be rented or submitted (written first, so a controller
    killed in between can find the allocation by ``tag`` at the scheduler or provider and
    adopt it). ``draft`` is its ``worker.started`` without the job id and submission time
    (empty while a rental is still being made); ``pid`` is the submitting process: while
    it lives, the submission is in flight and no reconciler touches it."""

    topic: ClassVar[str] = "worker.submitting"
    worker_id: str
    host: str
    tag: str
    pid: int
    pool: str | None = None
    draft: dict[str, Any] = Field(default_factory=dict)


class WorkerRoles(Payload):
    """``fleet assign``/``unassign`` changed the queues a live worker consumes (recorded in
    Redis too, ``keys.worker_roles``, where the worker reads them when it starts)."""

    topic: ClassVar[str] = "worker.roles"
    worker_id: str
    host: str
    queues: list[str]
    consume: bool


class WorkerLost(Payload):
    """The fleet keeper gave up reaching a worker's host (its tunnel retry budget ran out):
    no longer dialled; ``fleet down --force`` forgets it."""

    topic: ClassVar[str] = "worker.lost"
    worker_id: str
    host: str
    reason: str


class WorkerStalled(Payload):
    """A worker beat but started no task for ``idle_s`` while ``queue_depth`` tasks waited on
    its queues (a consumer lost in a broker reconnect): the keeper restarts it."""

    topic: ClassVar[str] = "worker.stalled"
    worker_id: str
    host: str
    pool: str
    idle_s: float
    queue_depth: int
    reason: str


class FleetScale(Payload):
    """One decision of the fleet's autoscaler for one pool, with its reason (``action``:
    submit, submit_failed, retire, pause, resume, hold)."""

    topic: ClassVar[str] = "fleet.scale"
    pool: str
    action: str
    reason: str
    count: int = 0
    worker_ids: list[str] = Field(default_factory=list)
    target: int | None = None
    queue_depth: int | None = None
    wait_s: float | None = None           # submit to running, for replacement lead times


class WorkerStopped(Payload):
    """A fleet worker is gone (drained, retired, cancelled, failed to start, or idle);
    ``lost``: taken from the fleet (its job ended unasked, or its heartbeat stopped)."""

    topic: ClassVar[str] = "worker.stopped"
    worker_id: str
    host: str
    reason: str
    state: str | None = None
    lost: bool = False


TOPICS: dict[str, type[Payload]] = {
    cls.topic: cls for cls in (RunCreated, RunResumed, IterationDone, RunFinished, RunFailed,
                                RentalCreated, RentalDestroyed, JobSubmitted, JobStateChanged,
                                JobFinished, JobPulled, JobRouted, MonitorPass, WorkerTunnel,
                                WorkerStarted, WorkerStopped, WorkerLost, WorkerRoles,
                                FleetScale, WorkerSubmitting, WorkerStalled)
}


def register(cls: type[Payload]) -> type[Payload]:
    """Add a payload model to the topic table (used as a class decorator by later modules)."""
    if cls.topic in TOPICS and TOPICS[cls.topic] is not cls:
        raise ReceiptError(f"receipt topic {cls.topic!r} is already defined")
    TOPICS[cls.topic] = cls
    return cls


def encode_line(record: dict[str, Any]) -> bytes:
    """One NDJSON line, compact, keys in the record's order (runs/lazy.py cuts snapshots
    out by that layout).

    Why orjson: an iteration's line carries its sampler's snapshot, for VEGAS+ tens of
    thousands of floats, and the standard encoder's float repr took 25-45 ms of a
    coordinator's CPU an iteration (~1.5 ms here), on cores its workers share. Both write
    the shortest repr that reads back as the same float (``1e-07`` vs ``1e-7``). What
    orjson refuses (an int beyond 64 bits, a non-string key) goes through ``json``. No
    NaN reaches here: ``model_dump(mode="json")`` has made it null already."""
    try:
        return orjson.dumps(record) + b"\n"
    except TypeError:  # orjson.JSONEncodeError is one
        return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()


class Receipts:
    """An append-only NDJSON log in one file, safe for concurrent writers (flock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, payload: Payload) -> dict[str, Any]:
        """Write one line ``{"topic", "ts", "payload"}`` durably and return it."""
        record = {"topic": payload.topic, "ts": time.time(),
                  "payload": payload.model_dump(mode="json")}
        line = encode_line(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def read(self, topic: str | None = None, *,
             errors: list[ReceiptError] | None = None) -> Iterator[Payload]:
        """Replay payloads in write order; a torn last line (crash mid-write) is ignored.

        A bad line raises ReceiptError naming ``file:line``; with an ``errors`` list it is
        appended there instead and the following lines are still read.
        """
        for _ts, payload in self.read_timed(topic, errors=errors):
            yield payload

    def read_timed(self, topic: str | None = None, *, errors: list[ReceiptError] | None = None
                   ) -> Iterator[tuple[float, Payload]]:
        """Like ``read``, with each line's write time (``ts``, seconds since the epoch)."""
        if not self.path.exists():
            return
        lines = self._lines()
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                record = self._decode(raw)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:  # JSONDecodeError is a ValueError
                if number == len(lines):  # unterminated final line: a write that never finished
                    break
                problem = ReceiptError(f"{self.path}:{number}: not a JSON receipt line ({exc})")
                if errors is None:
                    raise problem from exc
                errors.append(problem)
                continue
            if topic is not None and record.get("topic") != topic:
                continue
            try:
                payload = self._payload(record, number)
            except ReceiptError as problem:
                if errors is None:
                    raise
                errors.append(problem)
                continue
            ts = record.get("ts")
            yield (float(ts) if isinstance(ts, (int, float)) else 0.0), payload

    def _lines(self) -> list[bytes]:
        """The file's lines (a hook: the runs' lazy reader cuts snapshots out unread)."""
        with self.path.open("rb") as fh:
            return fh.read().split(b"\n")

    def _decode(self, raw: bytes) -> Any:
        """One line's JSON (a hook: the dashboard's reader leaves snapshots undecoded)."""
        return json.loads(raw)

    def _payload(self, record: dict[str, Any], number: int) -> Payload:
        """The typed payload of one parsed line, or ReceiptError naming file:line and why."""
        model = TOPICS.get(record.get("topic"))  # type: ignore[arg-type]
        if model is None:
            raise ReceiptError(f"{self.path}:{number}: unknown receipt topic "
                               f"{record.get('topic')!r}; known: {', '.join(sorted(TOPICS))}")
        try:
            return model.model_validate(record.get("payload"))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "payload"
            raise ReceiptError(f"{self.path}:{number}: bad {model.topic} payload "
                               f"({where}: {err['msg']})") from None

    def first(self) -> Payload | None:
        """The first line's payload, read alone (a record's opening line: cheap to look
        up across many logs); None when the file or that line is missing or unreadable."""
        try:
            with self.path.open("rb") as fh:
                record = self._decode(fh.readline())
            return self._payload(record, 1) if isinstance(record, dict) else None
        except (OSError, ValueError, ReceiptError):
            return None

    def last(self, topic: str) -> Payload | None:
        """The most recent payload of ``topic``, or None."""
        found = None
        for found in self.read(topic):  # noqa: B007 - keep the last one
            pass
        return found


# -- batches (mainboard.batch): one receipts file per batch, .mainboard/batches/<id>/ -------

class BatchCreated(Payload):
    """A batch was declared: its fleet.toml resolved into jobs, fixed here for every later verb."""

    topic: ClassVar[str] = "batch.created"
    batch_id: str
    name: str
    fleet: str                      # the fleet.toml it came from
    fleet_sha256: str
    jobs: list[dict[str, Any]]      # each job resolved (defaults inherited, name given)


class BatchDispatched(Payload):
    """One batch job was accepted by its target; ``job`` is its mainboard job id."""

    topic: ClassVar[str] = "batch.dispatched"
    batch_id: str
    name: str
    target: str
    job: str
    adopted: bool = False  # found already submitted by an interrupted dispatch, not resent


class BatchDispatchFailed(Payload):
    """One batch job never reached its target: ``outcome`` is unreachable, refused or error."""

    topic: ClassVar[str] = "batch.dispatch_failed"
    batch_id: str
    name: str
    target: str
    outcome: str
    reason: str


class BatchAnnounced(Payload):
    """One batch job's outcome was announced; written once per job (the watch's cursor)."""

    topic: ClassVar[str] = "batch.announced"
    batch_id: str
    name: str
    target: str
    outcome: str
    job: str | None = None
    exit_code: int | None = None
    reason: str = ""
    pulled: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)


class BatchFinished(Payload):
    """Every job of the batch has an announced outcome; ``outcomes`` counts them."""

    topic: ClassVar[str] = "batch.finished"
    batch_id: str
    outcomes: dict[str, int]


for _model in (BatchCreated, BatchDispatched, BatchDispatchFailed, BatchAnnounced, BatchFinished):
    register(_model)


# -- run control and timeline (mainboard.runs): lines in the run's receipts file -------------

class BatchResent(Payload):
    """The coordinator sent a batch again (its worker died, it was lost, or it straggled)."""

    topic: ClassVar[str] = "run.resent"
    run_id: str
    iteration: int
    batch: int
    attempt: int
    reason: str = ""


class RunPaused(Payload):
    """``runs pause``: dispatching stopped at a batch boundary, in-flight batches merged;
    ``runs resume`` continues from the snapshot after ``iteration``."""

    topic: ClassVar[str] = "run.paused"
    run_id: str
    iteration: int
    stored: int = 0  # batches of the next iteration already stored (kept for the resume)


class RunStopped(Payload):
    """``runs stop``: the run ended early (as a pause would) with its partial result."""

    topic: ClassVar[str] = "run.stopped"
    run_id: str
    iteration: int
    result: dict[str, Any]


class TasksAppended(Payload):
    """``runs append``: tasks added to the end of a run's task list (checked against it)."""

    topic: ClassVar[str] = "run.tasks_appended"
    run_id: str
    tasks: list[dict[str, Any]]


class TaskStarted(Payload):
    """A coordinator began task ``index`` of a run's task list, after ``iteration``
    iterations of the run."""

    topic: ClassVar[str] = "run.task_started"
    run_id: str
    index: int
    name: str
    kind: str
    iteration: int


class TaskDone(Payload):
    """Task ``index`` ended: its own samples, estimate and error (a sample task), its values
    (a plot_line or image), and the state it left (``snapshot``: later tasks and
    ``from = NAME`` start from it)."""

    topic: ClassVar[str] = "run.task_done"
    run_id: str
    index: int
    name: str
    kind: str
    iteration: int
    samples: int = 0
    estimate: Any = None
    error: Any = None
    result: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None
    values: dict[str, Any] | None = None


for _model in (BatchResent, RunPaused, RunStopped, TasksAppended, TaskStarted, TaskDone):
    register(_model)


@register
class EnvProvisioned(Payload):
    """An environment was built on a host (``.mainboard/envs.ndjson``); its wall time is the
    setup cost estimates learn (a reused environment writes nothing)."""

    topic: ClassVar[str] = "env.provisioned"
    host: str
    kind: str
    key: str
    seconds: float
    actions: list[str]
    python_version: str
    purpose: str  # "job" or "worker"
    manifest: str = ""  # manifest_digest: the set and image, not the host python (estimates)


# -- costs: lines in a job's receipts file and in a batch's receipts -----------------------

@register
class JobCost(Payload):
    """What one job has cost so far: its rate, the seconds it has run, their price.

    Written at submit (the rate, 0 s), at each monitor pass while it runs and at its end;
    ``usd_hr`` None means the host's rate is unknown, never free (``usd`` None too)."""

    topic: ClassVar[str] = "job.cost"
    id: str
    usd_hr: float | None
    source: str        # where the rate came from (an offer, a rental, usd_hr), or why unknown
    seconds: float     # run time observed: its start to this observation (or its end)
    usd: float | None  # usd_hr x seconds / 3600
    at: str            # "submit", "pass" or "end"


@register
class BatchCost(Payload):
    """A batch's spend so far, summed from its jobs' ``job.cost`` lines when it changed."""

    topic: ClassVar[str] = "batch.cost"
    batch_id: str
    usd: float                      # the jobs with a known rate
    seconds: float                  # their run time, summed
    jobs: dict[str, dict[str, Any]]  # job name -> {"job", "usd_hr", "seconds", "usd", "at"}
    unknown: list[str] = Field(default_factory=list)  # job names whose rate is unknown


# -- studies (mainboard.study): one ledger per study, .mainboard/studies/<id>.ndjson ----------

class StudyJob(Payload):
    """A study submitted one run (``run_id``, content-addressed) as mainboard job ``job``."""

    topic: ClassVar[str] = "study.job"
    study: str
    run_id: str
    name: str
    target: str
    job: str
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict)   # data path -> sha256
    adopted: bool = False  # found submitted by an interrupted `study run`, not sent again


class StudyVerdict(Payload):
    """The monitor's verdict on one study job, written once: completed, failed, lost, cancelled."""

    topic: ClassVar[str] = "study.verdict"
    study: str
    run_id: str
    job: str
    verdict: str
    state: str
    exit_code: int | None = None
    reason: str = ""


for _model in (StudyJob, StudyVerdict):
    register(_model)


class ChildStarted(Payload):
    """A parent run (scan, tune, campaign) started or extended one child run; ``budget`` is
    the child's sample budget (a campaign raises it step by step)."""

    topic: ClassVar[str] = "parent.child"
    run_id: str  # the parent
    child: str
    label: str
    point: dict[str, Any] = Field(default_factory=dict)
    budget: int | None = None


class ChildDone(Payload):
    """A child run of a parent ended: its result row, or the error that failed it."""

    topic: ClassVar[str] = "parent.child_done"
    run_id: str  # the parent
    child: str
    label: str
    point: dict[str, Any] = Field(default_factory=dict)
    status: str  # finished | failed | paused | stopped (by `mainboard runs`)
    result: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    budget: int | None = None


for _model in (ChildStarted, ChildDone):
    register(_model)
