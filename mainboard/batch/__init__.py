"""Batches: many jobs from one ``fleet.toml`` (spec, store, prepare/estimate, run, watch)."""
