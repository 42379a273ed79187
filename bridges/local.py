"""Jobs as detached processes on a host without a scheduler (this machine; ssh hosts reuse it).

The job script is started with ``nohup`` in a new session (``setsid`` where it exists),
stdio redirected into the job directory, so it outlives the command (and the Python
process, and the ssh connection) that started it. The launcher records the pid; the
script records its exit code. Status therefore needs no daemon: a pid that is alive
and still runs this job's script means running, a recorded exit code means finished,
a dead pid without one means the process was killed. The job id is the job's uid.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import shlex

from mainboard.errors import HostError

from .base import RUNNING_SH, TAG_ENV, Bridge, DirFacts, JobPaths
from .jobstate import JobState, JobStatus
from .poller import Poller


class ProcessBridge(Bridge):
    """A detached process per job; the job directory is the whole truth about it."""

    job_id_regex = re.compile(r"^(?P<job_id>\d{8}-\d{6}-[A-Za-z0-9_.-]+-[0-9a-f]{6})$")
    job_id_form = "a mainboard job uid such as 20250101-120000-fit-1a2b3c"
    enforces_walltime = False
    job_dir_is_truth = True
    cancel_grace_s: float = 10.0  # TERM -> KILL

    def submit_text(self, paths: JobPaths) -> str:
        """nohup + setsid the script; record and print its pid."""
        q = shlex.quote
        return ("if command -v setsid >/dev/null 2>&1; then _mb_s=setsid; else _mb_s=; fi; "
                f"nohup $_mb_s /bin/bash {q(paths.script)} > {q(paths.stdout)} "
                f"2> {q(paths.stderr)} < /dev/null & "
                f"echo $! > {q(paths.pid)}; echo \"mb-pid:$!\"")

    def accepted(self, stdout: str, uid: str) -> str:
        """The launcher printed a pid: the job's id is its uid."""
        if not re.search(r"^mb-pid:\d+$", stdout, re.MULTILINE):
            raise HostError(f"{self.name}: the job launcher printed no pid (output: "
                            f"{stdout.strip()[-300:]!r})")
        return uid

    def _query(self, ids: list[str], job_dirs: dict[str, str]) -> dict[str, JobStatus]:
        dirs = {job_id: job_dirs.get(job_id) or self.job_dir(job_id) for job_id in ids}
        facts = self.read_facts(list(dirs.values()))
        return {job_id: process_status(facts[d], d) for job_id, d in dirs.items()}

    def tagged(self, prefix: str, poller: Poller | None = None,
               since: float = 0.0) -> dict[str, str] | None:
        """Live jobs whose script exports a tag starting with ``prefix`` (the job
        directories under the root are the host's whole listing; no scheduler to share)."""
        script = ('for f in "$1"/*/job.sh; do t=$(grep -m1 "^export $2=" "$f" 2>/dev/null) && '
                  'printf "mb-tag:%s %s\\n" "$(basename "$(dirname "$f")")" "${t#*=}"; done; '
                  "exit 0")
        jobs = posixpath.join(self.root, ".mainboard", "jobs")
        done = self._run(["/bin/sh", "-c", script, "mb-tagged", jobs, TAG_ENV])
        dirs: dict[str, str] = {}
        tags: dict[str, str] = {}
        for line in done.stdout.splitlines():
            uid, _, tag = line.removeprefix("mb-tag:").strip().partition(" ")
            if line.startswith("mb-tag:") and tag.startswith(prefix) \
                    and self.job_id_regex.match(uid):
                dirs[uid], tags[uid] = self.job_dir(uid), tag
        alive = self._query(list(dirs), dirs) if dirs else {}
        return {tags[u]: u for u, found in alive.items() if found.state is JobState.RUNNING}

    def cancel_text(self, ids: list[str], job_dirs: dict[str, str]) -> str:
        """Mark, TERM each script's process group, wait, then KILL what is left (and its child)."""
        dirs = " ".join(shlex.quote(job_dirs.get(i) or self.job_dir(i)) for i in ids)
        return (
            RUNNING_SH +  # the pid still runs this job's script (not a zombie, not a reused pid)
            f"for d in {dirs}; do\n"
            '  : > "$d/cancelled"\n'
            '  running "$d" && { kill -TERM "-$p" || kill -TERM "$p"; }\n'
            "done 2>/dev/null\n"
            f"end=$(($(date +%s) + {int(self.cancel_grace_s)}))\n"
            'while [ "$(date +%s)" -lt "$end" ]; do\n'
            f"  left=; for d in {dirs}; do running \"$d\" && left=1; done\n"
            '  [ -z "$left" ] && exit 0; sleep 0.1\n'
            "done\n"
            f"for d in {dirs}; do\n"
            '  running "$d" || continue\n'
            # the script first: it must not live to record its child's death (137)
            '  kill -KILL "-$p" || kill -KILL "$p"; kill -KILL "-$(cat "$d/child")"\n'
            "done 2>/dev/null; exit 0")


def process_status(facts: DirFacts, job_dir: str) -> JobStatus:
    """A detached job's state from its directory (markers say why a dead job ended), with
    the script's ``started`` and ``ended`` stamps."""
    return dataclasses.replace(_process_state(facts, job_dir), started_at=facts.started_at,
                               ended_at=facts.ended_at)


def _process_state(facts: DirFacts, job_dir: str) -> JobStatus:
    if not facts.present:
        return JobStatus(JobState.UNKNOWN, reason=f"no job directory {job_dir}")
    marker = (JobState.CANCELLED, "cancelled") if facts.cancelled else \
        (JobState.TIMEOUT, "killed at walltime") if facts.timeout else None
    if facts.exit_code is not None:
        if marker:
            return JobStatus(marker[0], "exited", facts.exit_code, marker[1])
        state = JobState.COMPLETED if facts.exit_code == 0 else JobState.FAILED
        return JobStatus(state, "exited", facts.exit_code)
    if facts.alive:
        return JobStatus(JobState.RUNNING, f"running (pid {facts.pid})")
    if facts.pid is None:
        return JobStatus(JobState.UNKNOWN, reason="no pid recorded: the launch did not happen")
    if marker:
        return JobStatus(marker[0], "killed", None, marker[1])
    return JobStatus(JobState.FAILED, "gone", None,
                     f"process {facts.pid} ended without recording an exit code (killed?)")


class LocalBridge(ProcessBridge):
    """Jobs on this machine; the root defaults to the current directory."""

    kind = "local"

    def default_root(self) -> str:
        return os.getcwd()
