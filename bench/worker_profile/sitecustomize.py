"""cProfile inside bench workers (``bench/profile_call.py --worker-profile DIR``): a worker's
main process and each pool child dump their own profile to DIR when they exit.

Only on this folder's path, and only with ``MAINBOARD_WORKER_PROFILE`` set; Python imports
``sitecustomize`` at start-up, before Celery, so the whole process life is profiled.
"""

from __future__ import annotations

import cProfile
import os

OUT = os.environ.get("MAINBOARD_WORKER_PROFILE")

if OUT:
    from celery.signals import worker_process_init, worker_process_shutdown, worker_shutdown

    _profile = cProfile.Profile()
    _profile.enable()

    def _restart(**_: object) -> None:
        """A pool child: its own profile from the fork on (not its parent's)."""
        global _profile
        _profile.disable()
        _profile = cProfile.Profile()
        _profile.enable()

    def _dump(**_: object) -> None:
        _profile.disable()
        _profile.dump_stats(os.path.join(OUT, f"worker-{os.getpid()}.prof"))

    worker_process_init.connect(_restart, weak=False)
    worker_process_shutdown.connect(_dump, weak=False)
    worker_shutdown.connect(_dump, weak=False)
