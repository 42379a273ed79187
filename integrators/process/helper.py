"""The process-side helper's old home: it is the standalone ``gammaboard_process`` package
now (``gammaboard-process/`` at the repository root); this module keeps the import path."""

from gammaboard_process import *  # noqa: F403 - the helper's names, listed once
from gammaboard_process import __all__  # noqa: F401
