"""A run file read once: a plain run (``RunSpec``) or a parent (``ParentSpec``), with overrides.

Why one reader: ``mainboard integrate FILE``, ``mainboard.integrate("FILE")`` and the
runner must agree on what a file is, and a file read twice (once to tell a parent from a
run, once to validate it) can change in between. :func:`load_run` reads the text once,
tells the kind from its tables, and validates it with the line numbers of that text.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mainboard.errors import ConfigError
from mainboard.integrators.spec import RunSpec, parse_run, read_toml, run_from_toml
from mainboard.integrators.spec_parents import ParentSpec, is_parent, parse_parent, set_path


def load_run(path: str | Path, overrides: Mapping[str, Any] | None = None
             ) -> RunSpec | ParentSpec:
    """The run or parent that ``path`` defines, validated (child files, relative to its
    folder, resolved). ``overrides`` (dotted key -> value, ``{"stop.max_samples": N}``) are
    set on the validated run, which is validated again: the file's own errors name its
    lines first. A parent takes none (its children's budgets are in the file)."""
    p = Path(path)
    data, text = read_toml(p, "run file")
    if is_parent(data):
        if overrides:
            raise ConfigError("applies to one run, not to a scan, tune or campaign",
                              file=str(p), key=", ".join(overrides),
                              valid="the children's budgets set in the file")
        return parse_parent(data, file=str(p), text=text, base=p.parent)
    spec = run_from_toml(data, str(p), text)
    if not overrides:
        return spec
    changed = spec.model_dump(mode="json")
    for key, value in overrides.items():
        set_path(changed, key, value)
    return parse_run(changed, file=str(p))


__all__ = ["load_run"]
