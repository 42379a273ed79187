"""Scraping a Prometheus endpoint in tests: plain HTTP (basic auth or none), parsed by
prometheus_client's own parser, so a malformed exposition fails the test."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str, auth: tuple[str, str] | None = None, timeout: float = 30
        ) -> tuple[int, dict[str, str], str]:
    """Status, headers (lower-case names) and body of a GET, without raising on 4xx; ``auth``
    as HTTP basic auth."""
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, \
                reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def fetch(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    """Status and body of a GET (4xx answers too)."""
    status, _, body = get(url, auth)
    return status, body


def parse(text: str) -> Samples:
    """``{(sample name, sorted labels): value}`` by prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))
