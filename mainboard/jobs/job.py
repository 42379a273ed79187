"""Jobs anywhere: ``submit`` a command to any declared host, then wait, read logs, pull, cancel.

``board.on("cluster").submit("python fit.py", walltime="2h", fetch=["out/"])`` checks
the host's queue policy (on this machine: a refusal sends nothing anywhere), brings the
host's workspace mirror (and ``data``) up to date, submits through the host's bridge and
records a ``job.submitted`` receipt (secret-looking env values redacted);
``job.logs(follow=True)`` streams its output until it ends. A ``Job``
holds only its id: every question re-reads the receipts (``mainboard.jobs.store``) or
asks the host, so a job submitted by one process is waited on, pulled or cancelled by
any other, e.g. ``mainboard jobs`` or the monitor.
"""

from __future__ import annotations

import codecs
import os
import posixpath
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Literal, overload

from mainboard.bridges import bridge_for
from mainboard.bridges.base import LOG_CHUNK
from mainboard.bridges.jobstate import JobState, JobStatus
from mainboard.errors import HostError, MainboardError, WaitTimedOut
from mainboard.hosts.leases import Lease, holding
from mainboard.jobs.costs import first_cost, submit_rate
from mainboard.jobs.environment import JobEnvironment, prepare_environment
from mainboard.jobs.files import check_paths, fetch_back, ship_data
from mainboard.jobs.store import JobStore, JobView
from mainboard.receipts import JobPulled, JobSubmitted, redact_env

if TYPE_CHECKING:
    from mainboard.bridges.base import Bridge
    from mainboard.hosts.access import Host, Hosts

Progress = Callable[[JobStatus], None]
LogStream = Literal["stdout", "stderr"]
FOLLOW_INTERVAL_S = 0.5  # seconds between reads of a followed log
_BRIDGES: weakref.WeakKeyDictionary[Host, dict[str | None, Bridge]] = \
    weakref.WeakKeyDictionary()
_BRIDGES_LOCK = threading.Lock()


def bridge_of(handle: Host, root: str | None = None) -> Bridge:
    """The bridge for a Board's host, made once per (handle, root) and reused.

    ``root`` is the absolute root a job recorded (so a later change of the host's
    ``root`` key does not lose it); None means the host's configured root. Making a
    bridge connects to nothing.
    """
    with _BRIDGES_LOCK:
        known = _BRIDGES.setdefault(handle, {})
        if root not in known:
            container = handle.board.config.container_of(handle.config)
            # Only a submit (no root yet) may rent a provider host's machine.
            transport = handle.transport if root is None else handle.reach(rent=False)
            known[root] = bridge_for(handle.name, handle.config, transport,
                                     container=container, root=root or handle.root)
        return known[root]


def store_of(board: Hosts) -> JobStore:
    """The job receipts of the Board's workspace."""
    return JobStore(board.config.state_dir)


def _default_name(cmd: str | Sequence[str]) -> str:
    """The command's first word, e.g. ``python`` for ``python fit.py``."""
    first = (cmd.split() or ["job"])[0] if isinstance(cmd, str) else cmd[0]
    return posixpath.basename(first) or "job"


def submit(board: Hosts, host: str, cmd: str | Sequence[str], *, name: str | None = None,
           walltime: int | str | None = None, mem_gb: float | None = None,
           cpus: int | None = None, gpus: int | None = None, queue: str | None = None,
           attempt: int = 1, data: Sequence[str | os.PathLike[str]] = (),
           fetch: Sequence[str | os.PathLike[str]] = (), env: dict[str, str] | None = None,
           sync: bool = True, environment: JobEnvironment | None = None,
           before_record: Callable[[], None] | None = None, **params: Any) -> Job:
    """Submit ``cmd`` (shell text, or an argv list that is quoted for you) to ``host``.

    Queue policy, ``[hosts.X.defaults]`` for ``attempt`` and the ``data``/``fetch`` paths
    are all checked here first: a refusal happens before any connection is opened.
    Then the host's workspace mirror is brought up to date (only what changed travels;
    nothing when its root is the workspace), so the command finds the workspace's code
    and ``data`` in its root; ``sync=False`` skips that unless ``data`` is given.
    Before that, the host's ``[deps]`` pins are checked and the workspace environment
    is provisioned there (``mainboard.jobs.environment``; ``environment`` one already
    prepared for this host, as a batch does once per target); the job runs in it.
    ``params`` are further JobSpec fields (workdir, account, extra, retire_before...).
    Env values that look secret are given to the job but never written to its receipts.
    On a provider host the whole submit holds a lease on the host's job rental
    (``mainboard.hosts.leases``), so no monitor pass releases it before the job's receipt
    is written; ``before_record`` is called in that window (tests race a monitor there).
    """
    handle = board.on(host)
    workspace = board.config.root
    data_paths = check_paths(data, "data", workspace, must_exist=True)
    fetch_paths = check_paths(fetch, "fetch", workspace, must_exist=False)
    command = cmd if isinstance(cmd, str) else list(cmd)
    asked = {"command": command, "name": name or _default_name(command), "walltime": walltime,
             "mem_gb": mem_gb, "cpus": cpus, "gpus": gpus, "queue": queue, "attempt": attempt,
             "env": env or {}, **params}
    with rental_lease(handle) as lease:
        bridge = bridge_of(handle)  # a provider host's rental is chosen (or rented) here
        spec = bridge.prepare(**{k: v for k, v in asked.items() if v is not None})
        began = time.time()
        prepared_here = environment is None  # a study hands in the env it prepared once
        if environment is None:
            environment = prepare_environment(handle, bridge)
        if environment.env_dir is not None:
            spec = bridge.prepare(spec, **environment.spec_params(spec.path, spec.env))
        ready = time.time()
        _renew(lease)
        ship_data(handle, bridge, data_paths, sync=sync)
        shipped = time.time()
        _renew(lease)
        record = bridge.submit(spec)
        with _BRIDGES_LOCK:  # later polls name the job's absolute root: reuse this bridge
            _BRIDGES[handle].setdefault(bridge.root, bridge)
        recorded = record.spec.model_dump(mode="json")
        recorded["env"] = redact_env(record.spec.env)
        usd_hr, rate_source = submit_rate(handle, record.spec)
        if before_record is not None:
            before_record()
        store = store_of(board)
        store.submitted(JobSubmitted(
            id=record.uid, host=record.host, kind=record.kind, job_id=record.job_id,
            name=record.name, job_dir=record.job_dir, root=bridge.root, spec=recorded,
            data=data_paths, fetch=fetch_paths, submitted_at=record.submitted_at,
            phases={**({"env": [began, ready]} if prepared_here and ready - began > 0.001
                       else {}), "sync": [ready, shipped], "submit": [shipped, time.time()]},
            env_key=environment.key))
        store.append(record.uid, first_cost(record.uid, usd_hr, rate_source))
    return Job(board, record.uid)


def rental_lease(handle: Host) -> AbstractContextManager[Lease | None]:
    """A lease on a provider host's job rental for the ``with`` block (a submit: until its
    job is recorded; a batch or study: from preparing the host's environment, which
    chooses the rental, to its last submit); elsewhere none."""
    if handle.config.kind != "provider":
        return nullcontext(None)
    return holding(handle.board.config.state_dir, handle.name)


def _renew(lease: Lease | None) -> None:
    """A long phase is done: the lease runs a full term again."""
    if lease is not None:
        lease.renew()


class Job:
    """A submitted job, known by its id; all state comes from its receipts or its host."""

    def __init__(self, board: Hosts, ref: str) -> None:
        self.board = board
        self.store = store_of(board)
        self.id = self.store.resolve(ref)
        self._view = self.store.load(self.id)

    def view(self) -> JobView:
        """The job as its receipts say right now (re-read every time)."""
        self._view = self.store.load(self.id)
        return self._view

    @property
    def host(self) -> str:
        """The host the job was submitted to."""
        return self._view.host

    @property
    def name(self) -> str:
        """The job's name as given."""
        return self._view.name

    def _bridge(self, view: JobView) -> Bridge:
        """The bridge for the job's host and the root it ran in."""
        return bridge_of(self.board.on(view.host), view.submitted.root)

    def poll(self) -> JobStatus:
        """The job's status: the recorded verdict, or the host's answer (recorded if it is news)."""
        view = self.view()
        if view.finished:
            return view.status
        status = self._bridge(view).poll([view.record()])[view.submitted.job_id]
        self.store.observe(self.id, status)
        return status

    def status(self) -> JobState:
        """The job's state now (asks the host unless the verdict is already recorded)."""
        return self.poll().state

    def wait(self, timeout: float | None = None, poll: float = 5.0,
             progress: Progress | None = None) -> JobState:
        """Block until the job reaches a final state and return it.

        Polls quickly at first, then every ``poll`` seconds; ``progress`` is called with
        each new status. WaitTimedOut after ``timeout`` seconds (the job keeps running).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, last = 0.2, None
        while True:
            status = self.poll()
            if progress is not None and (status.state, status.reason) != last:
                progress(status)
            last = (status.state, status.reason)
            if status.final:
                return status.state
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimedOut(f"job {self.id} on {self.host} is still {status.state} after "
                                   f"{timeout:g}s; it keeps running (`mainboard jobs show "
                                   f"{self.id}`)")
            pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            delay = min(delay * 1.5, poll)

    @overload
    def logs(self, tail: int | None = None, stream: LogStream = "stdout", *,
             follow: Literal[False] = False, interval: float = FOLLOW_INTERVAL_S) -> str: ...

    @overload
    def logs(self, tail: int | None = None, stream: LogStream = "stdout", *,
             follow: Literal[True], interval: float = FOLLOW_INTERVAL_S) -> Iterator[str]: ...

    def logs(self, tail: int | None = None, stream: LogStream = "stdout", *,
             follow: bool = False, interval: float = FOLLOW_INTERVAL_S) -> str | Iterator[str]:
        """The job's stdout (or stderr) so far; the last ``tail`` lines when given.

        ``follow=True`` returns an iterator of text chunks instead (like ``tail -f``): what
        the file holds now (its last ``tail`` lines when given), then new output as it
        arrives, read every ``interval`` seconds; it ends once the job's state is final and
        its file is drained. Stop early by breaking out of the loop.
        """
        if follow:
            return self._follow(tail, stream, interval)
        view = self.view()
        return self._bridge(view).logs(view.record(), tail=tail, stream=stream)

    def _follow(self, tail: int | None, stream: LogStream, interval: float) -> Iterator[str]:
        """Chunks of the log as they come; the host is asked for the job's state only when a
        read brought nothing new (a chatty job costs one command per interval)."""
        view = self.view()
        bridge, record = self._bridge(view), view.record()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        ended = view.finished
        data, offset = bridge.read_log(record, stream, tail=tail)
        while True:
            if text := decoder.decode(data):
                yield text
            if len(data) >= LOG_CHUNK:  # a backlog: read on without waiting
                data, offset = bridge.read_log(record, stream, offset)
                continue
            if ended:  # this read came after the final state was seen: the file is drained
                break
            if not data:
                ended = self.poll().final
            if not ended:
                time.sleep(interval)
            data, offset = bridge.read_log(record, stream, offset)
        if rest := decoder.decode(b"", final=True):
            yield rest

    def pull(self) -> JobPulled:
        """Copy the job's ``fetch`` paths from its host into the workspace; record what came."""
        return pull_view(self.board, self.view())

    def cancel(self) -> JobState:
        """Stop the job (a finished one is left alone) and return the state seen afterwards."""
        view = self.view()
        if view.finished:
            return view.state
        self._bridge(view).cancel([view.record()])
        return self.status()

    def __repr__(self) -> str:
        return f"<Job {self.id} on {self.host}: {self._view.state}>"


def pull_view(board: Hosts, view: JobView) -> JobPulled:
    """Fetch one job's results and record a ``job.pulled`` line.

    A host that cannot be reached raises (the monitor retries next pass); any other
    failure is recorded in the line's ``error`` so the job is not retried forever.
    """
    s = view.submitted
    began = time.time()
    try:
        handle: Host = board.on(s.host)  # a host no longer declared: recorded, not raised
        got = fetch_back(handle, bridge_of(handle, s.root), s.root, s.job_dir, s.fetch)
        payload = JobPulled(id=s.id, paths=got.paths, missing=got.missing, bytes=got.bytes,
                            in_place=got.in_place, started_at=began)
    except HostError:
        raise
    except (MainboardError, OSError) as exc:
        payload = JobPulled(id=s.id, paths=[], missing=list(s.fetch), error=str(exc)[:500],
                            started_at=began)
    store_of(board).pulled(payload)
    return payload


def list_jobs(board: Hosts) -> list[Job]:
    """Every job recorded in the workspace, oldest first (unreadable ones are skipped)."""
    views, _errors = store_of(board).scan()
    return [Job(board, v.id) for v in views]
