"""The task file of ``runs append``: tasks checked against the run they join.

Why apart from ``spec.py``: appended tasks continue a run's timeline, so they are checked
with the run's own spec and the steps it has; this reads the one more file kind.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mainboard.errors import ConfigError, SpecError
from mainboard.integrators.spec import RunSpec
from mainboard.integrators.spec_errors import to_config_error, toml_error
from mainboard.integrators.spec_tasks import Step, TaskFile


def load_task_file(path: str | Path, spec: RunSpec, before: Sequence[Step]
                   ) -> list[dict[str, Any]]:
    """Read the tasks ``runs append`` adds after ``before`` (the run's timeline), each
    checked as the run would execute it; plain data for the receipt."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError("task file not found", file=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read task file: {exc}", file=str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(exc, str(p)) from None
    try:
        tasks = TaskFile.model_validate(data).all()
    except ValidationError as exc:
        raise to_config_error(exc, TaskFile, file=str(p), text=text) from None
    try:
        spec.task_steps(before, tasks)
    except SpecError as exc:
        key = re.sub(r"\.(\d+)", r"[\1]", exc.key)  # spelled as the run file's errors
        raise ConfigError(str(exc), file=str(p), key=key, value=exc.value,
                          valid=exc.valid) from None
    return [task.model_dump(mode="json") for task in tasks]


__all__ = ["load_task_file"]
