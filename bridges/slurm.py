"""SLURM: ``#SBATCH`` headers, ``sbatch --parsable``, ``squeue``/``sacct`` status, ``scancel``.

The cluster's listing (``listing_command``: ``squeue --me -t all``, every job of this
user with state, end and comment) answers workers' ends, the reconciler's tags and job
states once a tick (:mod:`poller`). Jobs it does not hold are asked alone: ``squeue
-t all -j`` first (it still knows jobs that ended less than MinJobAge ago, with their
wait status), then ``sacct`` for older ones. ``sacct``
needs accounting storage; where it is disabled (``accounting_storage/none``) the
jobcomp file is read with ``sacct -c`` instead. The choice is made once per bridge.
Output paths are given on the sbatch command line (quoted), not as headers, so any
root path works; the job name in ``-J`` is reduced to safe characters. A per-node job
fans out with ``srun`` (one task per node); its retire signal goes to those tasks
(``--signal`` without ``B:``), not to the batch shell.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Mapping

from .base import Bridge, JobPaths
from .jobspec import JobSpec, format_walltime
from .jobstate import JobState, JobStatus, translate
from .poller import Rows

_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.+-]+")

SLURM_STATES: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SUSPENDED": JobState.PENDING,
    "STOPPED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "PREEMPTED": JobState.PREEMPTED,
    "NODE_FAIL": JobState.PREEMPTED,
}
SQUEUE_FORMAT = "JobID:|,State:|,Reason:|,exit_code:|"
LISTING_FORMAT = SQUEUE_FORMAT + ",EndTime:|,Comment:|"  # -O fields are not cut short
_NO_ACCOUNTING = ("accounting storage is disabled", "slurmdbd", "no accounting")


def safe_job_name(name: str, limit: int = 64) -> str:
    """A scheduler job name: letters, digits and ``_.+-`` only (others become ``_``)."""
    cleaned = _SAFE_NAME.sub("_", name).strip("_") or "job"
    return (cleaned if cleaned[0].isalnum() else f"j{cleaned}")[:limit]


def wait_status(raw: str) -> tuple[int | None, str]:
    """squeue's ``exit_code`` (a wait status) as (exit code, reason): 768 -> (3, "")."""
    if not raw.strip().isdigit():
        return None, ""
    value = int(raw)
    if value & 0x7F:
        return None, f"killed by signal {value & 0x7F}"
    return value >> 8, ""


def exit_pair(raw: str) -> tuple[int | None, str]:
    """sacct/scontrol ``ExitCode`` ``3:0`` (code:signal) as (exit code, reason)."""
    code, _, signal = raw.partition(":")
    if signal.strip() not in ("", "0"):
        return None, f"killed by signal {signal.strip()}"
    return (int(code), "") if code.strip().isdigit() else (None, "")


def parse_listing(text: str) -> Rows:
    """``squeue -O LISTING_FORMAT`` lines (``1234|RUNNING|None|0|2026-12-03T10:40:12|tag|``)
    as ``{job id: row}``; the comment (a fleet job's owner tag) comes last, whole."""
    rows: Rows = {}
    for line in text.splitlines():
        fields = line.strip().split("|", 5)
        if len(fields) < 6 or not fields[0]:
            continue
        comment = fields[5].removesuffix("|")
        rows[fields[0]] = {"state": fields[1], "reason": fields[2], "exit": fields[3],
                           "end": fields[4], "tag": "" if comment == "(null)" else comment}
    return rows


def parse_end(text: str) -> float | None:
    """``squeue -o %e`` (local time, ``2026-12-03T10:40:12``) as epoch seconds; None when
    the job has no end (``N/A``, ``Unknown``, empty)."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def signal_backstop(retire_before: int) -> int:
    """Seconds before walltime for ``--signal``, which fires up to 60 s early: later than
    the worker's own retirement (``mainboard.tasks.fleet``), so only a backstop."""
    return retire_before - 60 if retire_before >= 120 else max(1, retire_before // 2)


class SlurmBridge(Bridge):
    """Jobs through sbatch; partitions are the spec's ``queue``."""

    kind = "slurm"
    header_prefix = "#SBATCH"
    submit_command = ("sbatch", "--parsable")
    cancel_command = ("scancel",)
    # a step beside the job's own (--overlap: its CPUs are all taken), on its first node
    attach_command = ("srun", "--overlap", "--nodes=1", "--ntasks=1", "--quiet")
    # every job of this user (those ended less than MinJobAge ago too) with its state,
    # end and tag, in one command: the cluster's one listing a tick
    listing_command = ("squeue", "--me", "-h", "-t", "all", "-O", LISTING_FORMAT)
    count_command = ("squeue", "--me", "-h", "-t", "PD,R,CF,S", "-o", "%i")
    # sbatch's refusals at a QOS's or association's MaxSubmitJobs and at MaxArraySize
    cap_refusals = ("MaxSubmitJob", "job submit limit", "MaxArraySize")
    end_command = ("squeue", "-h", "-O", LISTING_FORMAT, "-j")  # a job the listing predates
    allocation_env, cluster_env = "SLURM_JOB_ID", "SLURM_CLUSTER_NAME"
    job_id_regex = re.compile(r"^(?P<job_id>\d+(?:_\d+)?)(?:;(?P<cluster>[\w.-]+))?$")
    job_id_form = "a SLURM job id such as 1234 or 1234_7 (sbatch --parsable may add ;cluster)"
    states = SLURM_STATES
    job_id_env = '"${SLURM_JOB_ID:-}"'
    native_retire_signal = True
    _sacct_flags: list[str] | None = None  # per bridge: [] (accounting) or ["-c"] once known
    # One task per node; one node's task failing (a killed worker) ends them all, so the
    # allocation is lost as a unit. 22.05's srun does not inherit --cpus-per-task.
    node_fanout = ('srun --ntasks-per-node=1 -N "$SLURM_JOB_NUM_NODES" --kill-on-bad-exit=1 '
                   '--cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" /bin/bash "$_mb_dir/node.sh"')

    parse_listing = staticmethod(parse_listing)
    end_time = staticmethod(parse_end)

    @classmethod
    def retire_backstop(cls, retire_before: int) -> int:
        """The worker retires by its own clock (its end from ``listing_command``): ``--signal``,
        which fires up to 60 s early, comes later (:func:`signal_backstop`)."""
        return signal_backstop(retire_before)

    def header_lines(self, spec: JobSpec, paths: JobPaths) -> list[str]:
        lines = [f"-J {safe_job_name(spec.name)}"]
        if spec.walltime:
            lines.append(f"-t {format_walltime(spec.walltime)}")
        if spec.mem_gb:
            lines.append(f"--mem={math.ceil(spec.mem_gb * 1024)}M")
        if spec.cpus:
            lines.append(f"-c {spec.cpus}")
        if spec.gpus:
            lines.append(f"--gres=gpu:{spec.gpus}")
        if spec.queue:
            lines.append(f"-p {spec.queue}")
        if spec.account:
            lines.append(f"-A {spec.account}")
        lines.append(f"-N {spec.nodes}")
        if spec.tag:
            lines.append(f"--comment={spec.tag}")
        if spec.retire_before:  # per-node: every node's task (srun ignores a lone INT)
            batch = "" if self.fanout(spec) else "B:"
            lines.append(f"--signal={batch}{spec.retire_signal}@{spec.retire_before}")
        return [*lines, *spec.extra]

    def submit_text(self, paths: JobPaths) -> str:
        """sbatch with ``-o``/``-e`` in the job directory (``%`` doubled: SLURM expands it)."""
        def literal(path: str) -> str:
            return path.replace("%", "%%")
        return shlex.join([*self.submit_command, "-o", literal(paths.stdout),
                           "-e", literal(paths.stderr), paths.script])

    def _query(self, ids: list[str], job_dirs: dict[str, str]) -> dict[str, JobStatus]:
        done = self.run(["squeue", "-h", "-t", "all", "-O", SQUEUE_FORMAT, "-j", ",".join(ids)],
                        timeout=60)
        if not done.ok and "invalid job id" not in done.stderr.lower():
            done.check()  # (an invalid id means every job has left slurmctld's memory)
        found = parse_squeue(done.stdout if done.ok else "", ids)
        missing = [i for i in ids if i not in found]
        if missing:
            found.update(self._sacct(missing))
        return found

    def row_status(self, row: Mapping[str, str]) -> JobStatus:
        return squeue_status(row.get("state", ""), row.get("reason", ""), row.get("exit", ""))

    def _sacct(self, ids: list[str]) -> dict[str, JobStatus]:
        """Finished jobs from accounting (or the jobcomp file when accounting is off)."""
        options = ["-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(ids)]
        if self._sacct_flags is None:
            done = self.run(["sacct", *options], timeout=60)
            if done.ok:
                self._sacct_flags = []
            elif any(word in done.stderr.lower() for word in _NO_ACCOUNTING):
                self._sacct_flags = ["-c"]
                done = self.run(["sacct", "-c", *options], timeout=60)
        else:
            done = self.run(["sacct", *self._sacct_flags, *options], timeout=60)
        if not done.ok:
            reason = f"sacct failed: {done.stderr.strip()[-200:]}"
            return {i: JobStatus(JobState.UNKNOWN, reason=reason) for i in ids}
        return parse_sacct(done.stdout, ids)


def parse_squeue(text: str, ids: list[str]) -> dict[str, JobStatus]:
    """``squeue -h -t all -O JobID:|,State:|,Reason:|,exit_code:|`` lines for ``ids``."""
    out: dict[str, JobStatus] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 4 or fields[0] not in ids:
            continue
        out[fields[0]] = squeue_status(*fields[1:4])
    return out


def squeue_status(native: str, reason: str, exit_code: str) -> JobStatus:
    """squeue's state, reason and wait status of one job (a listing row's or ``-j``'s)."""
    state = translate(native, SLURM_STATES)
    code, why = wait_status(exit_code) if state.final else (None, "")
    return JobStatus(state, native, code, why or ("" if reason == "None" else reason))


def parse_sacct(text: str, ids: list[str]) -> dict[str, JobStatus]:
    """``sacct -n -P -X -o JobID,State,ExitCode`` lines for ``ids`` (a blank state is skipped)."""
    out: dict[str, JobStatus] = {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 3 or fields[0] not in ids or not fields[1].strip():
            continue
        native = fields[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
        code, why = exit_pair(fields[2])
        out[fields[0]] = JobStatus(translate(native, SLURM_STATES), native, code, why)
    return out
