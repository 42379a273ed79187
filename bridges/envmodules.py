"""Environment modules (Lmod / Tcl ``module``) of a batch host, loaded before anything runs.

A host's ``modules`` (``module load NAME`` each, quoted) come first in every job script,
in the ``[deps]`` probe and around environment provisioning, because a tool such as
singularity (the container runtime that builds a job's environment) may exist only after
``module load``. ``module`` is a shell function: when it is not defined yet, the usual
init files are sourced first. ``set -u`` is lifted around it because init files trip on it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

_MODULE_INITS = ("/etc/profile.d/modules.sh", "/etc/profile.d/lmod.sh",
                 "/usr/share/lmod/lmod/init/bash", "/usr/share/modules/init/bash")

_MODULES = """\
set +u
if ! command -v module >/dev/null 2>&1; then
  for _mb_init in {inits}; do
    if [ -r "$_mb_init" ]; then . "$_mb_init"; break; fi
  done
fi
{loads}
set -u"""


def module_block(modules: Sequence[str]) -> str:
    """Bash text that finds the ``module`` command (sourcing the usual init files) and loads
    each module, quoted; ``set -u`` is lifted around it because init files trip on it."""
    return _MODULES.format(inits=" ".join(_MODULE_INITS),
                           loads="\n".join(f"module load {shlex.quote(m)}" for m in modules))


def with_modules(argv: Sequence[str], modules: Sequence[str]) -> list[str]:
    """``argv`` run by bash once ``modules`` are loaded (their output sent to stderr: callers
    read results on stdout); ``argv`` itself unchanged when there are none."""
    if not modules:
        return list(argv)
    script = "{\n" + module_block(modules) + '\n} >&2\nexec "$@"'
    return ["bash", "-c", script, "mainboard-modules", *argv]
