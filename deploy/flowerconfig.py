"""Flower's config for compose.yaml and systemd/mainboard-flower.service (``--conf=``).

Flower executes this file at start. Basic auth comes from ``FLOWER_BASIC_AUTH=user:password``
in the environment (compose: the env file; systemd: /etc/mainboard/env), never from this
file, and Flower refuses to start without it. ``/metrics`` and ``/healthcheck``, which Flower
leaves open by design, then ask for the same credentials, as under ``mainboard flower``.
Names here start with ``_``: Flower takes any other top-level name as one of its options.
"""

import os as _os

from mainboard.services.flower import guard_open_endpoints as _guard

if ":" not in _os.environ.get("FLOWER_BASIC_AUTH", ""):
    raise SystemExit("flowerconfig.py: FLOWER_BASIC_AUTH is not set; valid: "
                     "FLOWER_BASIC_AUTH=user:password in the env file (deploy/compose.env.example)")
_guard()
