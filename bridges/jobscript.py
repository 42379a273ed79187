"""The one job-script template every bridge submits (rendered through ``Bridge.render_script``).

The script is bash: scheduler header lines, ``set -eu``, an EXIT trap that records the
exit code in the job directory (so the outcome survives the scheduler forgetting the
job) after an ``ended`` stamp, a ``started`` stamp (so even a job that ends between two
polls is timed, and costed by its own run),
``module load`` lines, quoted environment exports, an optional container wrapper
(apptainer/singularity ``exec`` or ``podman run``), ``cd`` into the working directory,
then the command in its own process group. Signals sent to the script (scancel, qdel,
SLURM's ``--signal`` before walltime, Bridge.cancel) are forwarded to that group, and
the script waits for the command to really end before recording its code. Hosts
without a scheduler get watchdogs instead: one enforces the walltime (and leaves a
``timeout`` marker), one sends the retire signal ``retire_before`` seconds earlier.
Every user value is quoted with ``shlex.quote``; nothing is pasted raw.

A ``per_node`` job on several nodes (a fleet pool's ``nodes = 2``) runs its command once on
every node: the script writes ``node.sh`` (modules, exports, ``MAINBOARD_NODE_INDEX``,
``cd``, the command) into the job directory, which every node sees on the shared root,
and its fan-out (the bridge's: ``srun``, ``pbsdsh`` or ``ssh``) runs that on each node. No value
travels in an argument list: the node script is a file.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mainboard.config import ContainerConfig
from mainboard.errors import UserError

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
  printf '%s\\n' "${{EPOCHREALTIME:-$(date +%s)}}" > "$_mb_dir/ended" 2>/dev/null || true
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


NODE_INDEX_ENV = "MAINBOARD_NODE_INDEX"  # 0.. on each node of a per-node job
NODES_ENV = "MAINBOARD_NODES"
RETIRE_AT_ENV = "MAINBOARD_RETIRE_AT"  # epoch seconds a per-node worker retires at
_NODE_END = "_MB_NODE_SCRIPT_END_"
UNTIL_EOF = "--until-stdin-eof"  # node.sh's second argument when started over ssh
# Over ssh (no pty) a dropped connection signals nothing: the share watches its stdin (the
# connection) and ends its command's process group when that closes, so killing the
# first node's ssh client ends the node's worker as ending pbsdsh's task would.
_UNTIL_EOF = """\
if [ "${{2:-}}" = {flag} ]; then
  exec 3<&0 < /dev/null; set -m
  {runner} 3<&- & _mb_c=$!
  {{ cat <&3 > /dev/null 2>&1; kill -TERM -- "-$_mb_c" 2>/dev/null; }} > /dev/null 2>&1 &
  _mb_w=$!; set +m; exec 3<&-; _mb_code=0; wait "$_mb_c" || _mb_code=$?
  kill -- "-$_mb_w" 2>/dev/null || true; exit "$_mb_code"
fi"""


def render(spec: JobSpec, paths: JobPaths, *, headers: Sequence[str], workdir: str, root: str,
           env: Mapping[str, str], modules: Sequence[str], container: ContainerConfig | None,
           job_id: str, watchdog_walltime: bool, watchdog_retire: bool,
           fanout: str | None = None) -> str:
    """The whole job script; ``job_id`` is shell text (a quoted uid or a ``${SLURM_JOB_ID}``).
    ``fanout``: shell text that runs ``"$_mb_dir/node.sh"`` once per node (per-node jobs)."""
    q = shlex.quote
    exports = {"MAINBOARD_JOB_ID": job_id, "MAINBOARD_JOB_DIR": '"$_mb_dir"',
               "MAINBOARD_JOB_NAME": q(spec.name), "MAINBOARD_ATTEMPT": str(spec.attempt),
               "MAINBOARD_ROOT": q(root)}
    if fanout:
        exports[NODES_ENV] = str(spec.nodes)
    exports.update({name: q(value) for name, value in check_env(env).items()})
    setup = [f"export {name}={value}" for name, value in exports.items()]
    if spec.path:
        setup.append(f"export PATH={':'.join(q(p) for p in spec.path)}:\"$PATH\"")
    runner = _runner(spec, container, workdir, root, [*exports, NODE_INDEX_ENV] if fanout
                     else list(exports))
    parts = ["#!/bin/bash", *headers,
             "# mainboard job script, rendered by mainboard.bridges; edits are not kept.",
             _PROLOGUE.format(job_dir=q(paths.job_dir), signals=" ".join(_FORWARDED))]
    if modules:
        parts.append(module_block(modules))
    parts += setup
    if fanout:
        node = node_script(spec, paths, modules, setup, workdir, runner)
        parts += [f"cat > \"$_mb_dir/node.sh\" <<'{_NODE_END}'", node, _NODE_END,
                  f"_mb_fanout() {{\n{fanout}\n}}"]
        runner = "_mb_fanout"
    parts += [f"mkdir -p -- {q(workdir)}", f"cd -- {q(workdir)}", "set +e", "set -m",
              f"{runner} < /dev/null &",
              "_mb_child=$!", 'echo "$_mb_child" > "$_mb_dir/child"',
              # per node, each node retires by MAINBOARD_RETIRE_AT: a signal to the local
              # fan-out (pbsdsh) would end it, and with it every node's task in hand
              *_watchdogs(spec, watchdog_walltime, watchdog_retire and not fanout), "set +m",
              _EPILOGUE]
    return "\n".join(parts)


def node_script(spec: JobSpec, paths: JobPaths, modules: Sequence[str], setup: Sequence[str],
                workdir: str, runner: str) -> str:
    """One node's share of a per-node job: its index (the fan-out's argument, or srun's
    ``$SLURM_NODEID``), the job's environment again (``pbsdsh`` passes none), its own
    retirement time (the allocation's start plus walltime less ``retire_before``: every
    node retires together by its clock, where a signal would reach the first node only),
    then the command."""
    q = shlex.quote
    lines = ["#!/bin/bash", f"# node share of mainboard job {spec.name!r}: run on each node",
             "set -eu", f"_mb_dir={q(paths.job_dir)}"]
    if modules:
        lines.append(module_block(modules))
    lines += [*setup, f'export {NODE_INDEX_ENV}="${{1:-${{SLURM_NODEID:-0}}}}"']
    if spec.walltime and spec.retire_before and spec.walltime > spec.retire_before:
        lines += ['_mb_t0=$(cat "$_mb_dir/started" 2>/dev/null || date +%s)',
                  '_mb_t0=${_mb_t0%%[.,]*}',
                  f"export {RETIRE_AT_ENV}=$((_mb_t0 + {spec.walltime - spec.retire_before}))"]
    lines += [f"mkdir -p -- {q(workdir)}", f"cd -- {q(workdir)}",
              _UNTIL_EOF.format(flag=UNTIL_EOF, runner=runner), f"exec {runner}"]
    text = "\n".join(lines)
    if _NODE_END in text.splitlines():
        raise UserError(f"job {spec.name!r}: a value holds the line {_NODE_END}; remove it")
    return text
