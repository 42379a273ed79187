"""Prometheus metrics of a workspace: queue depth per queue, fleet workers per pool and
state, allocations submitted and failed, spend per provider pool, batches/s per live run.

``gather`` takes one look (Redis, receipts, the fleet's schedulers), ``exposition`` turns
it into Prometheus families, ``flower`` serves them on Flower's ``/metrics`` behind
Flower's basic auth; ``mainboard metrics`` prints them once.
"""
