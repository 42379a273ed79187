"""Runs that drive runs: parameter scans, hyperparameter tuning, integration campaigns.

A parent run file (``[scan]``, ``[tune]`` or ``[campaign]``) spawns child runs, each an
ordinary run with its own content-derived id, run on the fleet like any run, its parent id
and point recorded. ``spec`` reads parent files, ``children`` drives child runs on one
session (concurrently, in threads: each child has its own coordinator and lease),
``scan``/``tune``/``campaign`` decide what runs next, ``table`` folds a parent's receipts
into its result table (no Celery: the dashboard and ``runs show`` read it).

This package's ``__init__`` imports nothing, so ``parents.table`` stays cheap to import.
"""
