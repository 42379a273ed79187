"""``{{ env('X') }}``-style interpolation in mainboard.toml string values, without eval.

Each ``{{ ... }}`` holds exactly one call to a whitelisted function with string-literal
arguments; it is parsed with ``ast`` and checked before anything runs. Errors are raised
bare (no file/key) and the config loader re-raises them with the location.
"""

from __future__ import annotations

import ast
import os
import re
import socket
from collections.abc import Mapping

from mainboard.errors import ConfigError, ExpressionError

VALID_CALLS = "env('X'), env('X', 'default'), num_cpus(), hostname()"
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)


def local_num_cpus() -> int:
    """CPUs this process may use (affinity-aware, so a SLURM allocation counts its share)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def has_placeholder(text: str) -> bool:
    """True when ``text`` contains ``{{`` (complete or not) and so needs interpolation."""
    return "{{" in text or "}}" in text


def interpolate(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace every ``{{ call }}`` in ``text``; unknown calls or unset variables raise."""
    env = os.environ if environ is None else environ
    out: list[str] = []
    pos = 0
    for match in _PLACEHOLDER.finditer(text):
        out.append(text[pos:match.start()])
        out.append(_call(match.group(1), text, env))
        pos = match.end()
    rest = text[pos:]
    if "{{" in rest or "}}" in rest:
        raise ExpressionError("unbalanced '{{' / '}}' in interpolation", value=text,
                              valid=f"{{{{ call }}}} with call one of {VALID_CALLS}")
    out.append(rest)
    return "".join(out)


def _call(source: str, text: str, env: Mapping[str, str]) -> str:
    """Evaluate one placeholder body such as `` env('HOME') ``."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        raise ExpressionError(f"cannot parse interpolation {{{{{source}}}}}", value=text,
                              valid=VALID_CALLS) from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ExpressionError(f"interpolation must be a single function call, not `{source.strip()}`",
                              value=text, valid=VALID_CALLS)
    args: list[str] = []
    for arg in node.args:
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            raise ExpressionError(f"arguments of {node.func.id}() must be quoted strings",
                                  value=text, valid=VALID_CALLS)
        args.append(arg.value)
    name = node.func.id
    if node.keywords:
        raise ExpressionError(f"{name}() takes no keyword arguments", value=text,
                              valid=VALID_CALLS)
    if name == "env" and len(args) in (1, 2):
        if args[0] in env:
            return env[args[0]]
        if len(args) == 2:
            return args[1]
        raise ConfigError(
            f"environment variable {args[0]} is not set", value=text,
            valid=f"export {args[0]}=..., or give a default: {{{{ env('{args[0]}', 'default') }}}}")
    if name == "num_cpus" and not args:
        return str(local_num_cpus())
    if name == "hostname" and not args:
        return socket.gethostname()
    if name in ("env", "num_cpus", "hostname"):
        raise ExpressionError(f"wrong number of arguments to {name}()", value=text,
                              valid=VALID_CALLS)
    raise ExpressionError(f"unknown interpolation function {name}()", value=text,
                          valid=VALID_CALLS)
