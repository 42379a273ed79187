"""PBS (OpenPBS / PBS Pro, and PBS-style wrappers): ``#PBS`` headers, ``qsub``, ``qstat``, ``qdel``.

Status asks ``qstat -x -f -F json`` (OpenPBS: JSON, finished jobs included with their
``Exit_status``); where that is refused (older PBS, Torque, the slurm-wlm-torque
wrappers) it falls back to parsing ``qstat -f`` text, once per bridge. ``-o``/``-e``
are qsub flags, not headers (some wrappers ignore ``#PBS -o``). Those wrappers paste
qsub's arguments into a shell command unquoted, so job directories must be plain
paths: anything else is refused before submitting. Under the wrappers
``$PBS_JOBID`` is empty; the script falls back to ``$SLURM_JOB_ID``. A per-node job
fans out with ``pbsdsh`` or ``ssh`` (``PBS_FANOUT``, the host's ``fanout`` key).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from typing import Any

from mainboard.config import PbsHost
from mainboard.errors import CommandFailed, UserError

from .base import Bridge, JobPaths
from .jobscript import UNTIL_EOF
from .jobspec import JobSpec
from .jobstate import JobState, JobStatus
from .poller import Rows
from .slurm import safe_job_name

PBS_STATES: dict[str, JobState] = {
    "Q": JobState.PENDING,    # queued
    "H": JobState.PENDING,    # held
    "W": JobState.PENDING,    # waiting for its start time
    "T": JobState.PENDING,    # in transit
    "M": JobState.PENDING,    # moved to another server
    "S": JobState.PENDING,    # suspended
    "U": JobState.PENDING,    # suspended: workstation busy
    "R": JobState.RUNNING,
    "E": JobState.RUNNING,    # exiting: the script ended, PBS is cleaning up
    "B": JobState.RUNNING,    # array job begun
    "F": JobState.COMPLETED,  # finished (OpenPBS history): Exit_status decides
    "X": JobState.COMPLETED,  # subjob finished
    "C": JobState.COMPLETED,  # completed (Torque and the wrappers): exit status decides
}
# Negative Exit_status values are PBS's own JOB_EXEC_* codes.
PBS_EXIT_CODES: dict[int, tuple[JobState, str]] = {
    -29: (JobState.TIMEOUT, "killed at walltime (JOB_EXEC_KILL_WALLTIME)"),
    -28: (JobState.FAILED, "killed at its cpu-time limit (JOB_EXEC_KILL_CPUT)"),
    -27: (JobState.FAILED, "killed over its memory limit (JOB_EXEC_KILL_MEM)"),
    -26: (JobState.FAILED, "killed over its virtual-memory limit (JOB_EXEC_KILL_VMEM)"),
    -25: (JobState.FAILED, "killed over its cpu limit (JOB_EXEC_KILL_NCPUS_SUM)"),
    -24: (JobState.FAILED, "killed over its cpu burst limit (JOB_EXEC_KILL_NCPUS_BURST)"),
}
# One share per unique host of $PBS_NODEFILE, each told its node index: through pbsdsh
# (``-n``: the vnode index of the host's first line, Torque and OpenPBS alike) or ssh to the
# host (``fanout``; "auto": pbsdsh when on PATH). Every share goes the same way, the first
# node's included. An ssh share reads a pipe held open by a ``sleep`` of this fan-out, and
# ends when its connection does (node.sh ``--until-stdin-eof``). The first share to fail
# ends the others (the script then ends, and PBS ends every task of the job): lost as a unit.
PBS_FANOUT = """\
: "${{PBS_NODEFILE:?not in a PBS job}}"
_mb_pids=; _mb_i=0; _mb_how={how}
if [ "$_mb_how" = auto ]; then
  if command -v pbsdsh > /dev/null 2>&1; then _mb_how=pbsdsh; else _mb_how=ssh; fi
fi
if [ "$_mb_how" = ssh ]; then exec 3< <(exec sleep 2147483647); _mb_hold=$!; fi
for _mb_x in $(awk '!_mb_seen[$0]++ {{print NR - 1 ":" $1}}' "$PBS_NODEFILE"); do
  if [ "$_mb_how" = ssh ]; then
    ssh -o BatchMode=yes -- "${{_mb_x#*:}}" \\
      "/bin/bash $(printf %q "$_mb_dir/node.sh") $_mb_i {until_eof}" <&3 &
  else
    pbsdsh -n "${{_mb_x%%:*}}" -- /bin/bash "$_mb_dir/node.sh" "$_mb_i" &
  fi
  _mb_pids="$_mb_pids $!"; _mb_i=$((_mb_i + 1))
done
wait -n; _mb_c=$?
[ "$_mb_c" -eq 0 ] || kill -TERM $_mb_pids 2>/dev/null
for _mb_p in $_mb_pids; do wait "$_mb_p"; _mb_w=$?; [ "$_mb_c" -ne 0 ] || _mb_c=$_mb_w; done
[ -z "${{_mb_hold:-}}" ] || kill "$_mb_hold" 2>/dev/null
return "$_mb_c"
"""
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+@%,=-]+$")
_ATTRIBUTE = re.compile(r"^\s+([A-Za-z_][\w.]*) = (.*)$")
_UNSUPPORTED = ("unknown option", "usage:", "invalid option", "illegal option")


def exit_status(code: int) -> tuple[JobState, int | None, str]:
    """A finished job's state from PBS's Exit_status (0, the script's code, 256+signal, -N)."""
    if code == 0:
        return JobState.COMPLETED, 0, ""
    if code in PBS_EXIT_CODES:
        state, reason = PBS_EXIT_CODES[code]
        return state, None, reason
    if code < 0:
        return JobState.FAILED, None, f"PBS could not run the job (Exit_status {code})"
    if code >= 256:
        return JobState.FAILED, None, f"killed by signal {code - 256}"
    return JobState.FAILED, code, ""


def parse_qstat_text(text: str) -> dict[str, dict[str, str]]:
    """``qstat -f`` text as {job id: {attribute: value}}; wrapped (tab-continued) values joined."""
    jobs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    key: str | None = None
    for raw in text.splitlines():
        if raw.startswith("Job Id:"):
            current = jobs.setdefault(raw.split(":", 1)[1].strip(), {})
            key = None
        elif current is not None and (match := _ATTRIBUTE.match(raw)):
            key = match.group(1)
            current[key] = match.group(2)
        elif current is not None and key is not None and raw.startswith(("\t", " ")) and raw.strip():
            current[key] += raw[1:] if raw.startswith("\t") else raw.strip()
        else:
            key = None
    return jobs


def _memory(mem_gb: float) -> str:
    return f"{int(mem_gb)}gb" if float(mem_gb).is_integer() else f"{math.ceil(mem_gb * 1024)}mb"


class PbsBridge(Bridge):
    """Jobs through qsub; the spec's ``queue`` is the PBS queue (``-q``)."""

    kind = "pbs"
    header_prefix = "#PBS"
    submit_command = ("qsub",)
    cancel_command = ("qdel",)
    attach_command = None  # no standard way into a running job's node (pbs_attach is PBS Pro's)
    job_id_regex = re.compile(r"^(?P<job_id>\d+(?:\[\d*\])?(?:\.[A-Za-z0-9][A-Za-z0-9_.-]*)?)$")
    job_id_form = "a PBS job id such as 1234.pbs01 or 1234"
    states = PBS_STATES
    job_id_env = '"${PBS_JOBID:-${SLURM_JOB_ID:-}}"'
    # every job the server holds, in one command: the cluster's one listing a tick (the
    # wrappers and Torque print no history here; ended jobs gone from it are asked alone)
    listing_command = ("qstat", "-f")
    # qsub's refusals at a queue's or server's max_queued / max_user_queued (OpenPBS,
    # Torque) and at max_array_size
    cap_refusals = ("would exceed", "Maximum number of jobs", "max_array_size")
    _json: bool | None = None  # per bridge: does qstat speak -F json? (None: not asked yet)
    node_fanout = PBS_FANOUT

    def fanout(self, spec: JobSpec) -> str | None:
        """The per-node fan-out, by the host's ``fanout`` (pbsdsh, ssh, or auto: pbsdsh on PATH)."""
        text = super().fanout(spec)
        how = self.host.fanout if isinstance(self.host, PbsHost) else "auto"
        return None if text is None else text.format(how=shlex.quote(how), until_eof=UNTIL_EOF)

    def header_lines(self, spec: JobSpec, paths: JobPaths) -> list[str]:
        # A tagged (fleet) job is named by its owner tag: every qstat -f prints Job_Name
        # (OpenPBS, Torque, the SLURM wrappers), not always Variable_List, so ``tagged`` finds it.
        lines = [f"-N {safe_job_name(spec.tag or spec.name, 236)}"]
        if spec.walltime:
            hours, rest = divmod(spec.walltime, 3600)
            lines.append(f"-l walltime={hours:02d}:{rest // 60:02d}:{rest % 60:02d}")
        chunk = [str(spec.nodes)]
        if spec.cpus:
            chunk.append(f"ncpus={spec.cpus}")
        if spec.mem_gb:
            chunk.append(f"mem={_memory(spec.mem_gb)}")
        if spec.gpus:
            chunk.append(f"ngpus={spec.gpus}")
        if len(chunk) > 1 or spec.nodes > 1:
            lines.append(f"-l select={':'.join(chunk)}")
        if spec.queue:
            lines.append(f"-q {spec.queue}")
        if spec.account:
            lines.append(f"-A {spec.account}")
        return [*lines, *spec.extra]

    def submit_text(self, paths: JobPaths) -> str:
        if not _SAFE_PATH.match(paths.job_dir):
            raise UserError(
                f"pbs host {self.name!r}: job directory {paths.job_dir!r} has characters PBS "
                "tools do not pass safely (spaces, quotes, $...); set the host's root to a "
                "plain absolute path (letters, digits, _ . / + @ % , = -)")
        return shlex.join([*self.submit_command, "-o", paths.stdout, "-e", paths.stderr,
                           paths.script])

    @staticmethod
    def parse_listing(text: str) -> Rows:
        """``qstat -f`` text as listing rows; a tagged job's tag is its name (``-N``)."""
        return {job_id: {"state": attrs.get("job_state", "").strip(),
                         "reason": attrs.get("comment", "").strip(),
                         "exit": attrs.get("Exit_status", attrs.get("exit_status", "")).strip(),
                         "end": "", "tag": attrs.get("Job_Name", "").strip()}
                for job_id, attrs in parse_qstat_text(text).items()}

    @classmethod
    def row_of(cls, rows: Rows, job_id: str) -> dict[str, str] | None:
        """qstat lists full ids (``1234.server``); the asked one may lack the server."""
        if job_id in rows:
            return rows[job_id]
        number = job_id.split(".")[0]
        return next((row for full, row in rows.items() if full.split(".")[0] == number), None)

    def fetch_listing(self) -> Rows:
        """``qstat -f`` (some versions exit non-zero on a job they lost mid-listing)."""
        done = self.run(list(self.listing_command or ()), timeout=60)
        if not done.ok and "Job Id:" not in done.stdout:
            done.check()
        return self.parse_listing(done.stdout)

    def row_status(self, row: Mapping[str, str]) -> JobStatus:
        exit_status = {"Exit_status": row["exit"]} if row.get("exit") else {}
        return self._status({"job_state": row.get("state", ""),
                             "comment": row.get("reason", ""), **exit_status})

    def _query(self, ids: list[str], job_dirs: dict[str, str]) -> dict[str, JobStatus]:
        if self._json is not False:
            done = self.run(["qstat", "-x", "-f", "-F", "json", *ids], timeout=60)
            if done.stdout.lstrip().startswith("{"):
                self._json = True
                try:
                    jobs = json.loads(done.stdout, strict=False).get("Jobs", {})
                except json.JSONDecodeError as exc:
                    raise CommandFailed(done.command, done.returncode, done.stdout,
                                        f"qstat printed invalid JSON: {exc}", done.host) from None
                return self._statuses(jobs, ids)
            if self._json is None and any(w in done.stderr.lower() for w in _UNSUPPORTED):
                self._json = False
            elif "unknown job id" in done.stderr.lower() or done.ok:
                return {}
            else:
                done.check()
        done = self.run(["qstat", "-f", *ids], timeout=60)
        if not done.ok and "Job Id:" not in done.stdout and \
                "unknown job id" not in done.stderr.lower():
            done.check()
        return self._statuses(parse_qstat_text(done.stdout), ids)

    def _statuses(self, jobs: Mapping[str, Mapping[str, Any]],
                  ids: list[str]) -> dict[str, JobStatus]:
        """Match qstat's (full) ids to the asked ones, which may lack the ``.server`` part."""
        by_number = {i.split(".")[0]: i for i in ids}
        out: dict[str, JobStatus] = {}
        for full_id, attrs in jobs.items():
            asked = full_id if full_id in ids else by_number.get(str(full_id).split(".")[0])
            if asked is not None:
                out[asked] = self._status(attrs)
        return out

    def _status(self, attrs: Mapping[str, Any]) -> JobStatus:
        native = str(attrs.get("job_state", "")).strip()
        status = self.native_status(native, reason=str(attrs.get("comment", "")))
        code = attrs.get("Exit_status", attrs.get("exit_status"))
        if status.final and code is not None and str(code).strip().lstrip("-").isdigit():
            state, exit_code, reason = exit_status(int(code))
            return JobStatus(state, native, exit_code, reason or status.reason)
        if status.final:
            return JobStatus(status.state, native, None, "finished; qstat reports no exit status "
                             "(the job directory has it: poll the JobRecord)")
        return status
