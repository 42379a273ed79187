"""Integration runs on disk: the run store (the Celery coordinator lives in ``mainboard.tasks``)."""
