"""A pickle that runs a command when loaded: what an attacker with queue access would send."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

PICKLE = "application/x-python-serialize"


class TouchOnUnpickle:
    """Unpickling this runs ``touch MARKER``: what an attacker with queue access would send."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[[str], int], tuple[str]]:
        return os.system, (f"touch {shlex.quote(str(self.marker))}",)
