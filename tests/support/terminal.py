"""A command on a pseudo-terminal, as a person at a terminal runs it (colours, redraws)."""

from __future__ import annotations

import os
import pty
import subprocess
from collections.abc import Sequence
from pathlib import Path


def on_terminal(argv: Sequence[str], env: dict[str, str], cwd: Path | None = None,
                timeout: float = 60) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal until it exits;
    (exit code, everything it drew). ``timeout`` bounds the wait once the terminal closed."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, cwd=cwd,
                            env=env)
    os.close(terminal)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    code = proc.wait(timeout)
    os.close(controller)
    return code, b"".join(chunks).decode(errors="replace")
