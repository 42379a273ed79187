"""Code named by a string, ``"package.module:attr"``, imported when first asked for.

Why by name: a table of kinds (samplers, integrands, latent batches, parent runs) names code
that builds on the table's own module, or that costs start-up time to import; the table
stays data and nothing imports back. Celery's ``ALIASES`` + ``symbol_by_name`` is the model.
"""

from __future__ import annotations

import importlib
from typing import Any


def symbol_by_name(target: str) -> Any:
    """The object ``target`` names (``"mainboard.parents.scan:drive"``), its module imported."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["symbol_by_name"]
