"""The one job-script template every bridge submits (rendered through ``Bridge.render_script``).

The script is bash: scheduler header lines, ``set -eu``, an EXIT trap that records the
exit code in the job directory (so the outcome survives the scheduler forgetting the
job), a ``started`` stamp (so even a job that ends between two polls is timed),
``module load`` lines, quoted environment exports, an optional container wrapper
(apptainer/singularity ``exec`` or ``podman run``), ``cd`` into the working directory,
then the command in its own process group. Signals sent to the script (scancel, qdel,
SLURM's ``--signal`` before walltime, Bridge.cancel) are forwarded to that group, and
the script waits for the command to really end before recording its code. Hosts
without a scheduler get watchdogs instead: one enforces the walltime (and leaves a
``timeout`` marker), one sends the retire signal ``retire_before`` seconds earlier.
Every user value is quoted with ``shlex.quote``; nothing is pasted raw.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mainboard.config import ContainerConfig

from .envmodules import module_block
from .jobspec import JobSpec
from .provision import container_prefix
from .transport import check_env

KILL_GRACE_S = 10
_FORWARDED = ("TERM", "INT", "HUP", "USR1", "USR2")

_PROLOGUE = """\
set -eu
_mb_dir={job_dir}
printf '%s\\n' "${{EPOCHREALTIME:-$(date +%s)}}" > "$_mb_dir/started" 2>/dev/null || true
_mb_child=
_mb_watchers=
_mb_finish() {{
  _mb_code=$?
  for _mb_w in $_mb_watchers; do kill -TERM "-$_mb_w" 2>/dev/null || true; done
  {{ printf '%s\\n' "$_mb_code" > "$_mb_dir/exit_code.tmp" &&
    mv -f "$_mb_dir/exit_code.tmp" "$_mb_dir/exit_code"; }} 2>/dev/null || true
}}
trap _mb_finish EXIT
_mb_forward() {{
  if [ -n "$_mb_child" ]; then
    kill -"$1" "-$_mb_child" 2>/dev/null || kill -"$1" "$_mb_child" 2>/dev/null || true
  elif [ "$1" = TERM ] || [ "$1" = INT ] || [ "$1" = HUP ]; then
    exit 143
  fi
}}
for _mb_sig in {signals}; do trap "_mb_forward $_mb_sig" "$_mb_sig"; done"""

_EPILOGUE = """\
while :; do
  wait "$_mb_child"
  _mb_code=$?
  kill -0 "$_mb_child" 2>/dev/null || break
done
exit "$_mb_code"
"""


@dataclass(frozen=True)
class JobPaths:
    """The files of one job directory on the host (absolute paths)."""

    job_dir: str

    def _file(self, name: str) -> str:
        return posixpath.join(self.job_dir, name)

    @property
    def script(self) -> str:
        return self._file("job.sh")

    @property
    def stdout(self) -> str:
        return self._file("stdout")

    @property
    def stderr(self) -> str:
        return self._file("stderr")

    @property
    def exit_code(self) -> str:
        return self._file("exit_code")

    @property
    def pid(self) -> str:
        return self._file("pid")

    @property
    def child(self) -> str:
        return self._file("child")

    @property
    def cancelled(self) -> str:
        return self._file("cancelled")


def _runner(spec: JobSpec, container: ContainerConfig | None, workdir: str, root: str,
            env_names: Sequence[str]) -> str:
    """The command line that runs the job's command (bash outside, sh inside a container)."""
    names = [*env_names, "PATH"] if spec.path else list(env_names)  # podman: the env's bin
    prefix = container_prefix(container, [root], workdir=workdir, env_names=names) \
        if container else []
    if isinstance(spec.command, list):
        argv = [*prefix, *spec.command]
    else:
        argv = [*prefix, "/bin/sh" if container else "/bin/bash", "-c",
                _path_first(spec.path) + spec.command]
    return shlex.join(argv)


def _path_first(path: Sequence[str]) -> str:
    """``spec.path`` put in front again inside ``bash -c``: bash started under sshd reads
    ~/.bashrc even when not interactive, and an rc that prepends its own PATH (pyenv,
    conda) would otherwise shadow the job's environment."""
    if not path:
        return ""
    return f"export PATH={':'.join(shlex.quote(p) for p in path)}:\"$PATH\"; "


def _watchdogs(spec: JobSpec, walltime: bool, retire: bool) -> list[str]:
    """Background timers (each in its own process group, killed when the script ends)."""
    lines: list[str] = []
    timer = "( {body} ) >/dev/null 2>&1 &\n_mb_watchers=\"$_mb_watchers $!\""
    if retire and spec.walltime and spec.retire_before and spec.walltime > spec.retire_before:
        lines.append(timer.format(body=f"sleep {spec.walltime - spec.retire_before}; "
                                       f'kill -{spec.retire_signal} "-$_mb_child"'))
    if walltime and spec.walltime:
        lines.append(timer.format(body=(
            f'sleep {spec.walltime}; : > "$_mb_dir/timeout"; kill -TERM "-$_mb_child"; '
            f'sleep {KILL_GRACE_S}; kill -KILL "-$_mb_child"')))
    return lines


def render(spec: JobSpec, paths: JobPaths, *, headers: Sequence[str], workdir: str, root: str,
           env: Mapping[str, str], modules: Sequence[str], container: ContainerConfig | None,
           job_id: str, watchdog_walltime: bool, watchdog_retire: bool) -> str:
    """The whole job script; ``job_id`` is shell text (a quoted uid or a ``${SLURM_JOB_ID}``)."""
    q = shlex.quote
    exports = {"MAINBOARD_JOB_ID": job_id, "MAINBOARD_JOB_DIR": '"$_mb_dir"',
               "MAINBOARD_JOB_NAME": q(spec.name), "MAINBOARD_ATTEMPT": str(spec.attempt),
               "MAINBOARD_ROOT": q(root)}
    exports.update({name: q(value) for name, value in check_env(env).items()})
    parts = ["#!/bin/bash", *headers,
             "# mainboard job script, rendered by mainboard.bridges; edits are not kept.",
             _PROLOGUE.format(job_dir=q(paths.job_dir), signals=" ".join(_FORWARDED))]
    if modules:
        parts.append(module_block(modules))
    parts += [f"export {name}={value}" for name, value in exports.items()]
    if spec.path:
        parts.append(f"export PATH={':'.join(q(p) for p in spec.path)}:\"$PATH\"")
    parts += [f"mkdir -p -- {q(workdir)}", f"cd -- {q(workdir)}", "set +e", "set -m",
              f"{_runner(spec, container, workdir, root, list(exports))} < /dev/null &",
              "_mb_child=$!", 'echo "$_mb_child" > "$_mb_dir/child"',
              *_watchdogs(spec, watchdog_walltime, watchdog_retire), "set +m", _EPILOGUE]
    return "\n".join(parts)
