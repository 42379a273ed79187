"""The one Bridge base class: submit a job script anywhere, ask how it is, cancel it, read its logs.

A subclass per host kind sets only what differs (dask-jobqueue / Parsl style): its
header prefix and header lines, its submit/cancel commands, its job-id pattern and
its native-state table, plus ``_query`` for status. The job script itself is owned
here (``render_script`` in ``jobscript``): whatever the scheduler, the script records
its exit code (and cancellation or timeout markers) in the job directory
``<root>/.mainboard/jobs/<uid>/`` on the host, so an outcome survives the scheduler
forgetting the job. Every command runs on the host's login side through a Transport.
"""

from __future__ import annotations

import base64
import posixpath
import re
import secrets
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from mainboard.config import ContainerConfig, HostConfig
from mainboard.errors import CommandFailed, JobCapReached, UserError

from .dirfacts import DirFacts, merge, parse_facts
from .gate import enforce
from .jobscript import JobPaths, render
from .jobspec import JobSpec, check_policy, resolve
from .jobstate import JobState, JobStatus, translate
from .poller import Listing, Poller, Rows
from .transport import Command, Completed, StreamSink, Transport

COMMAND_TIMEOUT_S = 120.0
_UID_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_FACTS = "mb-facts:"
# `running DIR`: the pid recorded in DIR (left in $p) still runs DIR's job script. ps shows
# `[name]` for a process between two execs (the launcher's nohup, setsid and bash exec in
# turn; it has no command line for that moment: alive) and `[name] <defunct>` for a zombie;
# ``-ww``: without it ps cuts the command line at $COLUMNS and a long path looks dead.
RUNNING_SH = ('running() { p=$(cat "$1/pid" 2>/dev/null) || return 1\n'
              '  case "$(ps -ww -p "$p" -o args= 2>/dev/null)" in\n'
              '    *"$1/job.sh"*|"["*"]") return 0 ;;\n'
              '  esac; return 1; }\n')
_LOG = "mb-log:"
LOG_CHUNK = 1 << 20
TAG_ENV = "MAINBOARD_JOB_TAG"  # the job script exports its spec's tag (process hosts list it)  # bytes per read of a followed log


class JobRecord(BaseModel):
    """A submitted job: enough to ask about it, cancel it or read its logs from a new process."""

    model_config = ConfigDict(frozen=True)

    job_id: str        # the scheduler's id; for local/ssh hosts the uid
    uid: str           # mainboard's own id: the job directory's name
    host: str
    kind: str
    name: str
    job_dir: str       # absolute path on the host
    submitted_at: float
    spec: JobSpec

    @property
    def paths(self) -> JobPaths:
        """Where the script, logs and outcome files live on the host."""
        return JobPaths(self.job_dir)


def new_uid(name: str) -> str:
    """``20250101-120000-name-1a2b3c``: sortable, unique, safe as a path component."""
    safe = _UID_SAFE.sub("_", name).strip("._-")[:24] or "job"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{safe}-{secrets.token_hex(3)}"


class Bridge(ABC):
    """Jobs on one host. Subclasses set the class attributes and implement ``_query``."""

    kind: ClassVar[str]
    header_prefix: ClassVar[str | None] = None           # "#SBATCH", "#PBS"
    submit_command: ClassVar[tuple[str, ...]] = ()       # script path is appended
    cancel_command: ClassVar[tuple[str, ...]] = ()       # job ids are appended
    attach_command: ClassVar[tuple[str, ...] | None] = ()  # into an allocation; () here
    job_id_regex: ClassVar[re.Pattern[str]]              # on submit output; group "job_id"
    job_id_form: ClassVar[str] = "a job id"              # for error messages
    states: ClassVar[Mapping[str, JobState]] = {}        # native word -> JobState
    job_id_env: ClassVar[str | None] = None              # shell expr for $MAINBOARD_JOB_ID
    enforces_walltime: ClassVar[bool] = True             # False: the script's watchdog does
    native_retire_signal: ClassVar[bool] = False         # True: header asks the scheduler
    job_dir_is_truth: ClassVar[bool] = False             # True: _query already read the dir
    node_fanout: ClassVar[str | None] = None             # shell: node.sh once per node
    count_command: ClassVar[tuple[str, ...] | None] = None  # this user's queued+running ids
    # words of a submit refused at the site's cap on jobs (MaxSubmitJobs, array size...)
    cap_refusals: ClassVar[tuple[str, ...]] = ()
    # The cluster's one listing a tick (:mod:`poller`): every job of this user with its
    # state, end and tag, parsed by ``parse_listing``; None: asked per call (``_query``)
    listing_command: ClassVar[tuple[str, ...] | None] = None
    end_command: ClassVar[tuple[str, ...] | None] = None   # one job's row; its id appended
    allocation_env: ClassVar[str | None] = None            # inside an allocation: its job id
    cluster_env: ClassVar[str | None] = None               # inside one: the cluster's name

    def __init__(self, name: str, host: HostConfig, transport: Transport, *,
                 container: ContainerConfig | None = None, root: str | None = None) -> None:
        self.name, self.host, self.transport, self.container = name, host, transport, container
        self._root = root or host.root or self.default_root()
        # An absolute root needs no round trip; "~/x" or a relative one is resolved there.
        self._absolute_root: str | None = self._root if posixpath.isabs(self._root) else None

    def default_root(self) -> str:
        """Where jobs live when neither the caller nor the host names a root."""
        return "~/mainboard"

    # -- scheduler facts other rooms ask (class data and class methods: no host needed) ------

    @classmethod
    def scheduler_command(cls) -> str | None:
        """The scheduler's own command, on PATH where jobs are submitted (``mainboard
        compute`` checks it, ``config show`` names it); None: jobs are plain processes."""
        return cls.submit_command[0] if cls.submit_command else None

    @classmethod
    def cancel_hint(cls, job_id: str) -> str | None:
        """The command a person runs on the host to end ``job_id``; None: no scheduler."""
        return shlex.join([*cls.cancel_command, job_id]) if cls.cancel_command else None

    @classmethod
    def retire_backstop(cls, retire_before: int) -> int | None:
        """Seconds before walltime for the scheduler's retire signal when the worker retires
        by its own clock (it asks its allocation's end: ``listing_command``), the signal then
        only a backstop; None: the signal (or the script's watchdog) is the retirement."""
        return None

    @classmethod
    def allocation_id(cls, env: Mapping[str, str]) -> str | None:
        """The job id of the allocation this process runs in, when the scheduler can be
        asked for its end (``listing_command``); None: the job script's clock decides."""
        if cls.allocation_env is None or cls.listing_command is None:
            return None
        return env.get(cls.allocation_env) or None

    @classmethod
    def cluster(cls, env: Mapping[str, str]) -> str:
        """The cluster an allocation belongs to, as its scheduler names it inside (else
        the kind): the key its shared listing of ends is kept under."""
        return (env.get(cls.cluster_env) if cls.cluster_env else None) or cls.kind

    @staticmethod
    def parse_listing(text: str) -> Rows:
        """``listing_command``/``end_command`` output as ``{job id: row}``; a row's fields:
        ``state`` (the native word), ``reason``, ``exit``, ``end`` (as printed), ``tag``."""
        return {}

    @classmethod
    def row_of(cls, rows: Rows, job_id: str) -> dict[str, str] | None:
        """``job_id``'s row of a listing (a scheduler may print ids longer than asked)."""
        return rows.get(job_id)

    @staticmethod
    def end_time(text: str) -> float | None:
        """A row's ``end`` in epoch seconds; None: no end."""
        return None

    # -- the narrow hooks: commands and files on the login side ---------------------------

    def run(self, command: Command, *, check: bool = False, timeout: float | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None,
            stdin: bytes | None = None, stream: bool | StreamSink = False) -> Completed:
        """Run ``command`` on the host's login side with the host's ``env`` added."""
        return self.transport.run(command, check=check, timeout=timeout,
                                  env={**self.host.env, **(env or {})}, cwd=cwd, stdin=stdin,
                                  stream=stream)

    def _run(self, command: Command, *, stdin: bytes | None = None,
             timeout: float | None = COMMAND_TIMEOUT_S) -> Completed:
        """Run and raise CommandFailed (command, exit code, stdout, stderr) unless it exits 0."""
        done = self.run(command, timeout=timeout, stdin=stdin)
        if not done.ok:
            raise CommandFailed(done.command, done.returncode, done.stdout, done.stderr, done.host)
        return done

    def _sh(self, script: str, *, stdin: bytes | None = None) -> Completed:
        """POSIX sh text run by /bin/sh whatever the login shell is (zsh, fish...); checked."""
        return self._run(["/bin/sh", "-c", script], stdin=stdin)

    def put(self, local: str, remote: str) -> None:
        """Copy a local file to ``remote`` on the host."""
        self.transport.put(local, remote)

    def get(self, remote: str, local: str) -> None:
        """Copy ``remote`` on the host to a local file."""
        self.transport.get(remote, local)

    @property
    def root(self) -> str:
        """The host's root as an absolute path (resolved on the host once if it is not)."""
        if self._absolute_root is None:
            done = self.run(["/bin/sh", "-c", f"printf '{_FACTS}%s\\n' \"$PWD\""], cwd=self._root,
                            timeout=COMMAND_TIMEOUT_S)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith(_FACTS)]
            if not done.ok or not lines:
                raise CommandFailed(done.command, done.returncode, done.stdout, done.stderr,
                                    done.host)
            self._absolute_root = lines[-1][len(_FACTS):]
        return self._absolute_root

    def job_dir(self, uid: str) -> str:
        """The job directory of ``uid`` on the host."""
        return posixpath.join(self.root, ".mainboard", "jobs", uid)

    # -- the job script ----------------------------------------------------------------------

    def header_lines(self, spec: JobSpec, paths: JobPaths) -> list[str]:
        """Scheduler directives (without the prefix); none for hosts without a scheduler."""
        return []

    def render_script(self, spec: JobSpec, paths: JobPaths, uid: str) -> str:
        """The job script for ``spec`` (the one template; subclasses add header lines)."""
        headers = [f"{self.header_prefix} {line}" for line in self.header_lines(spec, paths)] \
            if self.header_prefix else []
        workdir = spec.workdir or self.root
        if not posixpath.isabs(workdir):
            workdir = posixpath.join(self.root, workdir)
        return render(
            spec, paths, headers=headers, workdir=workdir, root=self.root,
            env={**self.host.env, **spec.env, **({TAG_ENV: spec.tag} if spec.tag else {})},
            modules=self.host.env_modules(),
            container=self.container,
            job_id=self.job_id_env if self.job_id_env is not None else shlex.quote(uid),
            watchdog_walltime=not self.enforces_walltime,
            watchdog_retire=not self.native_retire_signal, fanout=self.fanout(spec))

    def fanout(self, spec: JobSpec) -> str | None:
        """The fan-out of a ``per_node`` job on several nodes (None: run the command once)."""
        if not (spec.per_node and spec.nodes > 1):
            return None
        if self.node_fanout is None:
            raise UserError(f"{self.kind} host {self.name!r}: nodes {spec.nodes} with per_node: "
                            "only slurm and pbs hosts start a command on every node; valid: "
                            "nodes = 1 here")
        return self.node_fanout

    # -- submit ------------------------------------------------------------------------------

    def prepare(self, spec: JobSpec | None = None, /, **params: object) -> JobSpec:
        """The spec with host defaults for its attempt filled in, checked against queue policy.

        Runs entirely on this machine: a refusal happens before any connection is made.
        """
        base = spec if spec is not None else JobSpec.from_params(params)
        if spec is not None and params:
            base = JobSpec.from_params({**spec.model_dump(), **params})
        resolved = resolve(base, self.host)
        check_policy(resolved, self.host, self.name)
        return resolved

    def submit_text(self, paths: JobPaths) -> str:
        """Shell text that hands the written script to the scheduler."""
        return shlex.join([*self.submit_command, paths.script])

    def submit(self, spec: JobSpec | None = None, /, **params: object) -> JobRecord:
        """Check policy, write the script into a fresh job directory and submit it (one command)."""
        spec = self.prepare(spec, **params)
        return self.submit_prepared(spec, new_uid(spec.name))

    def submit_prepared(self, spec: JobSpec, uid: str) -> JobRecord:
        """Submit an already ``prepare``d spec into job directory ``uid`` (a caller that must
        record the job before it exists, such as the fleet's reconciler, picks the uid)."""
        self.gate()
        paths = JobPaths(self.job_dir(uid))
        script = self.render_script(spec, paths, uid)
        # Only the job directory is private (the script holds env values); the job itself
        # runs with the login's usual umask.
        q = shlex.quote
        text = (f"mkdir -p {q(posixpath.dirname(paths.job_dir))} && mask=$(umask) && "
                f"umask 077 && mkdir {q(paths.job_dir)} && cat > {q(paths.script)} && "
                f'umask "$mask" && cd {q(paths.job_dir)} && {self.submit_text(paths)}')
        try:
            done = self._sh(text, stdin=script.encode())
        except CommandFailed as exc:
            raise self.cap_refused(exc) or exc from None
        job_id = self.accepted(done.stdout, uid)
        return JobRecord(job_id=job_id, uid=uid, host=self.name, kind=self.kind, name=spec.name,
                         job_dir=paths.job_dir, submitted_at=time.time(), spec=spec)

    def cap_refused(self, failed: CommandFailed) -> JobCapReached | None:
        """The scheduler's refusal at the site's cap on this user's jobs, as the one line
        ``max_jobs`` gives (the keeper holds on it, never pauses); None: another failure."""
        said = f"{failed.stderr}\n{failed.stdout}"
        word = next((w for w in self.cap_refusals if w.lower() in said.lower()), None)
        if word is None:
            return None
        return JobCapReached(f"host {self.name!r}: the site's job cap refused the submission "
                             f"({word}); wait for some jobs to end, or set [hosts."
                             f"{self.name}] max_jobs below the site's cap")

    def gate(self) -> None:
        """The site's limits (:mod:`gate`), before anything is written on the host."""
        enforce(self.name, self.kind, self.host, self._count if self.count_command else None)

    def _count(self) -> int:
        return len(self._run(list(self.count_command or ()), timeout=60).stdout.split())

    # -- the cluster's listing (one command a tick, shared: :mod:`poller`) ------------------

    def fetch_listing(self) -> Rows:
        """Run ``listing_command`` on the login side now and parse it (CommandFailed when
        the scheduler refuses); what a share runs once a tick for all its callers."""
        return self.parse_listing(self._run(list(self.listing_command or ()),
                                            timeout=60).stdout)

    def listing(self, poller: Poller | None, since: float = 0.0) -> Listing | None:
        """Every job of this user as the scheduler lists them: the tick's shared listing
        (taken after ``since``) through ``poller``, or asked now without one; None: this
        host kind has no listing."""
        if self.listing_command is None:
            return None
        if poller is None:
            return Listing(time.time(), self.fetch_listing())
        return poller.share.get(poller.cluster, poller.tick, self.fetch_listing, since)

    def row_status(self, row: Mapping[str, str]) -> JobStatus:
        """A listing row as a JobStatus (its native state through this bridge's table)."""
        return self.native_status(row.get("state", ""), reason=row.get("reason", ""))

    def tagged(self, prefix: str, poller: Poller | None = None,
               since: float = 0.0) -> dict[str, str] | None:
        """``{tag: job id}`` of the jobs queued or running on the host whose ``spec.tag``
        starts with ``prefix``, from the cluster's listing (taken after ``since``, the
        newest submission the caller knows of); None: this host kind cannot list by tag."""
        found = self.listing(poller, since)
        if found is None:
            return None
        return {row["tag"]: job_id for job_id, row in found.rows.items()
                if row.get("tag", "").startswith(prefix) and self.job_id_regex.match(job_id)
                and self.row_status(row).state in (JobState.PENDING, JobState.RUNNING)}

    def accepted(self, stdout: str, uid: str) -> str:
        """The job id from the submit command's output."""
        return self.parse_job_id(stdout)

    def parse_job_id(self, stdout: str) -> str:
        """The last line of ``stdout`` that matches ``job_id_regex`` (login noise is skipped)."""
        for line in reversed(stdout.strip().splitlines()):
            match = self.job_id_regex.match(line.strip())
            if match:
                return match.group("job_id")
        raise UserError(f"{self.kind} host {self.name!r}: no job id ({self.job_id_form}) in the "
                        f"submit output: {stdout.strip()[-300:]!r}")

    # -- status ------------------------------------------------------------------------------

    def status(self, jobs: Iterable[str | JobRecord]) -> dict[str, JobState]:
        """``{job_id: JobState}``; see ``poll`` for exit codes and reasons."""
        return {job_id: found.state for job_id, found in self.poll(jobs).items()}

    def poll(self, jobs: Iterable[str | JobRecord], *,
             poller: Poller | None = None) -> dict[str, JobStatus]:
        """Each job's status: the scheduler's view, corrected by the job directory.

        Pass JobRecords where you have them: the directory's exit code and cancel marker
        are what tell "failed with 3" from "completed" when a scheduler (or its PBS
        wrapper) reports only that the job is gone. With a ``poller``, the scheduler's
        view comes from the cluster's shared listing of the tick; only jobs it does not
        hold (submitted after it, or gone from the scheduler's memory) are asked alone.
        """
        records: dict[str, JobRecord | None] = {}
        for job in jobs:
            job_id = job.job_id if isinstance(job, JobRecord) else job
            records[job_id] = job if isinstance(job, JobRecord) else records.get(job_id)
        if not records:
            return {}
        self.check_ids(list(records))
        native = self._listed(list(records), poller) if poller is not None else {}
        rest = [i for i in records if i not in native]
        if rest:
            native.update(self._query(rest, {i: r.job_dir for i in rest
                                             if (r := records[i]) is not None}))
        out = {i: native.get(i, JobStatus(JobState.UNKNOWN, reason="not reported by the host"))
               for i in records}
        if self.job_dir_is_truth:
            return out
        settle = {i: r.job_dir for i, r in records.items()
                  if r is not None and (out[i].final or out[i].state is JobState.UNKNOWN)}
        if settle:
            facts = self.read_facts(list(settle.values()))
            for job_id, job_dir in settle.items():
                out[job_id] = merge(out[job_id], facts[job_dir])
        return out

    def _listed(self, ids: list[str], poller: Poller) -> dict[str, JobStatus]:
        """The statuses the tick's listing holds for ``ids`` (none without a listing)."""
        found = self.listing(poller)
        if found is None:
            return {}
        rows = {i: row for i in ids if (row := self.row_of(found.rows, i)) is not None}
        return {i: self.row_status(row) for i, row in rows.items()}

    def check_ids(self, ids: Sequence[str]) -> None:
        """Refuse ids that are not this scheduler's (they end up as command arguments)."""
        for job_id in ids:
            match = self.job_id_regex.match(job_id)
            if not match or match.group("job_id") != job_id:
                raise UserError(f"{job_id!r} is not a {self.kind} job id; expected "
                                f"{self.job_id_form}")

    @abstractmethod
    def _query(self, ids: list[str], job_dirs: dict[str, str]) -> dict[str, JobStatus]:
        """The host's own view of ``ids`` (missing ids are reported UNKNOWN by the caller).

        ``job_dirs`` holds the directory of each id that came as a JobRecord.
        """

    def native_status(self, native: str, exit_code: int | None = None,
                      reason: str = "") -> JobStatus:
        """A JobStatus from a native state word through this bridge's table."""
        return JobStatus(translate(native, self.states), native, exit_code, reason)

    def read_facts(self, job_dirs: list[str]) -> dict[str, DirFacts]:
        """Read pid liveness, exit code and markers of several job directories in one command.

        Liveness is read first: a process seen alive may have finished by the time its
        exit code is read (fine), but one seen dead has already recorded its code
        (``RUNNING_SH``: a process between two execs is alive; without that, a job was once
        reported failed before its script ran).
        """
        script = (
            RUNNING_SH +
            'for d in "$@"; do\n'
            '  [ -d "$d" ] || { echo "' + _FACTS + 'missing"; continue; }\n'
            '  e=; p=; a=0; c=0; t=0\n'
            '  running "$d" && a=1\n'
            '  [ -r "$d/exit_code" ] && e=$(cat "$d/exit_code")\n'
            '  [ -e "$d/cancelled" ] && c=1\n'
            '  [ -e "$d/timeout" ] && t=1\n'
            '  s=; [ -r "$d/started" ] && s=$(cat "$d/started")\n'
            '  n=; [ -r "$d/ended" ] && n=$(cat "$d/ended")\n'
            '  echo "' + _FACTS + '$e|$c|$t|$p|$a|$s|$n"\n'
            'done')
        done = self._run(["/bin/sh", "-c", script, "mb-facts", *job_dirs])
        lines = [ln[len(_FACTS):] for ln in done.stdout.splitlines() if ln.startswith(_FACTS)]
        if len(lines) != len(job_dirs):
            raise CommandFailed(done.command, done.returncode, done.stdout,
                                "job directory probe returned the wrong number of lines",
                                done.host)
        return {d: parse_facts(line) for d, line in zip(job_dirs, lines, strict=True)}

    # -- cancel and logs ---------------------------------------------------------------------

    def cancel(self, jobs: Iterable[str | JobRecord]) -> None:
        """Stop jobs; a record's directory gets a ``cancelled`` marker first, so its outcome reads
        CANCELLED even where the scheduler cannot say so (PBS wrappers)."""
        items = list(jobs)
        ids = [j.job_id if isinstance(j, JobRecord) else j for j in items]
        if not ids:
            return
        self.check_ids(ids)
        markers = [j.paths.cancelled for j in items
                   if isinstance(j, JobRecord)]
        text = self.cancel_text(ids, {j.job_id: j.job_dir for j in items
                                      if isinstance(j, JobRecord)})
        if markers:
            text = f"touch {' '.join(shlex.quote(m) for m in markers)} 2>/dev/null; {text}"
        done = self.run(["/bin/sh", "-c", text], timeout=COMMAND_TIMEOUT_S)
        if done.ok:
            return
        # qdel (and some scancel versions) fail on jobs that already ended: that is success.
        left = {i: s for i, s in self.poll(items).items()
                if not s.final and s.state is not JobState.UNKNOWN}
        if left:
            raise CommandFailed(done.command, done.returncode, done.stdout,
                                done.stderr or f"still running: {', '.join(left)}", done.host)

    def inside(self, job_id: str, argv: list[str]) -> list[str] | None:
        """``argv`` run beside a running job's processes (a profiler, say): as is where jobs
        run on the host itself; through ``attach_command`` into a scheduler's allocation;
        None where the scheduler has no way in."""
        if self.attach_command is None:
            return None
        if not self.attach_command:
            return argv
        return [*self.attach_command, f"--jobid={job_id}", *argv]

    def cancel_text(self, ids: list[str], job_dirs: dict[str, str]) -> str:
        """Shell text that asks the scheduler to stop ``ids`` (``job_dirs``: known dirs)."""
        return shlex.join([*self.cancel_command, *ids])

    def logs(self, job: JobRecord, tail: int | None = None,
             stream: Literal["stdout", "stderr"] = "stdout") -> str:
        """The job's stdout (or stderr) so far; its last ``tail`` lines when given."""
        data, _size = self.read_log(job, stream, tail=tail, limit=None)
        return data.decode("utf-8", "replace")

    def read_log(self, job: JobRecord, stream: Literal["stdout", "stderr"] = "stdout",
                 offset: int = 0, *, tail: int | None = None,
                 limit: int | None = LOG_CHUNK) -> tuple[bytes, int]:
        """Bytes of the job's stdout (or stderr) from byte ``offset`` (at most ``limit``) and
        the offset past them (``Job.logs(follow=True)`` reads this); with ``tail``, the file's
        last ``tail`` lines and its size. A file not there yet (job queued) reads as nothing.
        One command on the host (the files sit in the job directory, whatever the kind); the
        bytes travel as base64 after a marker line, so login noise cannot garble them."""
        if tail is not None and tail < 1:
            raise UserError(f"tail must be a positive number of lines (got {tail})")
        if offset < 0 or (limit is not None and limit < 1):
            raise UserError(f"offset must be >= 0 and limit >= 1 (got {offset}, {limit})")
        path = shlex.quote(getattr(job.paths, stream))
        if tail is not None:  # the lines the file holds now; later ones come from its size on
            reader = f'head -c "$s" -- {path} | tail -n {int(tail)}'
        else:
            count = '$((s - o))' if limit is None else f'$(( s - o < {limit} ? s - o : {limit} ))'
            reader = (f'if [ "$s" -gt {offset} ]; then o={offset}; else o="$s"; fi; '
                      f'tail -c +$((o + 1)) -- {path} | head -c {count}')
        done = self._sh(f'if [ -r {path} ]; then s=$(($(wc -c < {path}))); '
                        f"printf '{_LOG}%s\\n' \"$s\"; {reader} | base64; fi")
        lines = done.stdout.splitlines()
        marks = [i for i, line in enumerate(lines) if line.startswith(_LOG)]
        if not marks:
            return b"", offset
        size = int(lines[marks[-1]][len(_LOG):])
        data = base64.b64decode("".join(lines[marks[-1] + 1:]))
        return data, size if tail is not None else min(offset, size) + len(data)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} root={self._root!r}>"
