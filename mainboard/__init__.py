"""mainboard: batch work and distributed Monte Carlo integration on every machine you can reach."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
