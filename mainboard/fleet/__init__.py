"""The fleet: Celery workers on every kind of host (control, keeper, launch, records, status)."""
