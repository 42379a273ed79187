"""Where and how py-spy samples one process tree: here directly, or on a host through its
bridge (inside the job's allocation where the scheduler has a way in).

Why py-spy is shipped: it is one static binary, and a fleet host's environment need not
have it; when the host has none on PATH and its machine type is this one's, this
machine's binary is copied to ``ROOT/.mainboard/bin/py-spy`` once and reused. Raw output
(collapsed stacks) is read back on stdout; the caller lays it on the timeline.
"""

from __future__ import annotations

import platform
import posixpath
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mainboard.bridges.base import Bridge
from mainboard.errors import UserError

SPY_DIR = ".mainboard/bin"


def local_spy() -> str:
    """This machine's py-spy (beside mainboard's Python, else on PATH)."""
    beside = Path(sys.executable).parent / "py-spy"  # installed with mainboard's extras
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise UserError("py-spy is not installed here; `pip install py-spy`")
    return found


@dataclass
class Target:
    """One process tree to sample: its track, its machine row, and how to reach it.

    ``pid`` is a pid or shell text printing one (a job's ``$(cat DIR/child)``);
    ``bridge`` None means this machine, directly; ``job_id`` the allocation to enter."""

    track: str
    group: str
    pid: str
    bridge: Bridge | None = None
    job_id: str | None = None


def _why(err: str) -> str:
    why = (err.strip().splitlines() or ["no output"])[-1]
    if "ptrace" in err.lower() or "permission" in err.lower():
        why = ("this host forbids ptrace (py-spy needs it: run as root or set "
               "kernel.yama.ptrace_scope=0)")
    return why


def _record_args(seconds: float, rate: int) -> list[str]:
    return ["record", "-d", str(max(1, round(seconds))), "-r", str(rate), "--idle",
            "--nonblocking", "--subprocesses", "--format", "raw"]


class Sampler:
    """Runs py-spy on targets; one per profile (it remembers which hosts have py-spy)."""

    def __init__(self, seconds: float, rate: int = 100) -> None:
        self.seconds, self.rate = seconds, rate
        self.spy = local_spy()
        self._remote: dict[int, str] = {}

    def local(self, target: Target) -> subprocess.Popen[str]:
        """Start sampling a process of this machine; its output file is ``proc.args[-1]``."""
        out = tempfile.NamedTemporaryFile(prefix="mb-profile-", suffix=".txt", delete=False)
        out.close()
        return subprocess.Popen([self.spy, *_record_args(self.seconds, self.rate), "-p",
                                 target.pid, "-o", out.name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish_local(self, proc: subprocess.Popen[str]) -> tuple[str | None, str]:
        """(raw stacks, "") or (None, why) once a local sampler ends."""
        _, err = proc.communicate(timeout=self.seconds + 60)
        out = Path(str(proc.args[-1]))  # type: ignore[index]
        try:
            if proc.returncode != 0 or not out.exists():
                return None, _why(err)
            return out.read_text(), ""
        finally:
            out.unlink(missing_ok=True)

    def remote_spy(self, bridge: Bridge) -> str:
        """The host's py-spy: on its PATH, else ours shipped to its root (same machine type)."""
        if id(bridge) in self._remote:
            return self._remote[id(bridge)]
        shipped = posixpath.join(bridge.root, SPY_DIR, "py-spy")
        done = bridge.run(["/bin/sh", "-c", f"command -v py-spy || {{ test -x "
                           f"{shlex.quote(shipped)} && echo {shlex.quote(shipped)}; }}; "
                           "echo machine=$(uname -m)"], timeout=60)
        lines = done.stdout.split()
        found = next((x for x in lines if not x.startswith("machine=")), None)
        if found is None:
            machine = next((x[8:] for x in lines if x.startswith("machine=")), "")
            if machine != platform.machine():
                raise UserError(f"{bridge.name}: no py-spy there and its machine type "
                                f"({machine or 'unknown'}) is not this one's "
                                f"({platform.machine()}); add py-spy to [python.deps]")
            bridge.run(["mkdir", "-p", posixpath.dirname(shipped)], check=True, timeout=60)
            bridge.put(self.spy, shipped)
            bridge.run(["chmod", "755", shipped], check=True, timeout=60)
            found = shipped
        self._remote[id(bridge)] = found
        return found

    def remote(self, target: Target) -> tuple[str | None, str]:
        """Sample a process on a host (blocking): (raw stacks, "") or (None, why)."""
        bridge = target.bridge
        assert bridge is not None
        try:
            spy = self.remote_spy(bridge)
        except UserError as exc:
            return None, str(exc)
        record = shlex.join([spy, *_record_args(self.seconds, self.rate)])
        script = (f'o=$(mktemp) || exit 1; {record} -p "{target.pid}" -o "$o" >/dev/null '
                  f'2>"$o.err"; c=$?; if [ $c -eq 0 ]; then cat "$o"; else tail -n 3 "$o.err" '
                  f'>&2; fi; rm -f "$o" "$o.err"; exit $c')
        argv = ["/bin/sh", "-c", script]
        if target.job_id:
            entered = bridge.inside(target.job_id, argv)
            if entered is None:
                return None, (f"{bridge.name}: its scheduler has no way into a running "
                              "allocation (profile workers on local, ssh or SLURM hosts)")
            argv = entered
        done = bridge.run(argv, timeout=self.seconds + 120)
        if done.returncode != 0:
            return None, _why(done.stderr)
        return done.stdout, ""


__all__ = ["SPY_DIR", "Sampler", "Target", "local_spy"]
