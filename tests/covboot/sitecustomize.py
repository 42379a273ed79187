"""Coverage for pythons outside the checkout's venv: ``PYTHONPATH`` puts this folder first.

See ``mainboard_coverage_start.py``.
"""

import mainboard_coverage_start  # noqa: F401 - starts coverage when COVERAGE_PROCESS_START is set
