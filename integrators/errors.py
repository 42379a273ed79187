"""Errors raised by the pure numerics layer, rooted in mainboard's hierarchy so the CLI prints them.

They keep their constructor arguments in ``args`` so Celery (and any codec that rebuilds an
exception as ``cls(*args)``) can carry them between processes unchanged.
"""

from __future__ import annotations

from mainboard.errors import UserError


class BatchError(UserError):
    """A batch broke the domain contract at a named stage (materialize, transform, evaluate, ...)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(stage, message)
        self.stage = stage
        self.message = message

    def __str__(self) -> str:
        return f"batch invalid after stage {self.stage!r}: {self.message}"


class MergeError(UserError):
    """Batch results cannot be merged: mixed iterations, duplicate or missing batch indices."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
