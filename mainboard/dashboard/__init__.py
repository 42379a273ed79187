"""``mainboard dashboard``: runs, fleet and jobs in a browser, from receipts and Redis.

``server`` (tornado, token auth, page shells, JSON APIs), ``views`` (what each page
shows), ``rundata`` (runs folded from receipts, cached per file change), ``runextras``
(a run's logs, workers and timeline), ``live`` (read-only Redis), ``auth`` (the token).
"""
