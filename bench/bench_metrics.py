"""What a Prometheus scrape of Flower's /metrics costs with the workspace's series in it,
next to its two peers measured in the same run: Flower's /healthcheck (the HTTP floor,
same server, same basic auth) and `fleet status` in process (the slowest source a scrape
reads: every worker's scheduler, Celery's broadcast, the registry).

Run from the repository root:

    .venv/bin/python bench/bench_metrics.py [--repeat 7]

A local fleet (one pool worker, Flower, the embedded broker) in a temporary workspace.
"cold" scrapes ask the hosts again (worker states older than FLEET_CACHE_S), "warm" ones
reuse them (a scrape storm). Prints medians and the ratios cold / fleet status and
warm / healthcheck.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mainboard.config import load_config  # noqa: E402
from mainboard.fleet.status import fleet_status  # noqa: E402
from mainboard.metrics.exposition import FLEET_CACHE_S  # noqa: E402
from mainboard.services.broker import EmbeddedBroker  # noqa: E402
from mainboard.services.flower import USER, Flower  # noqa: E402

POOL = '[fleet.pools.cpu]\nhost = "local"\nqueues = ["bench.metrics"]\njobs = 1\n'


def _cli(ws: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "mainboard", "--config", str(ws / "mainboard.toml"),
                    *args], cwd=ws, check=True, capture_output=True, text=True)


def _get(url: str, token: str) -> float:
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as reply:
        reply.read()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        ws = Path(tmp)
        (ws / "mainboard.toml").write_text('[workspace]\nname = "bench"\n\n' + POOL)
        _cli(ws, "fleet", "up")
        try:
            flower = Flower(ws / ".mainboard").status()
            password = Path(flower.secret_file).read_text().strip()
            token = base64.b64encode(f"{USER}:{password}".encode()).decode()
            config = load_config(ws / "mainboard.toml")
            _get(f"{flower.url}metrics", token)  # the first scrape imports the readers
            cold, warm, floor, status = [], [], [], []
            for _ in range(args.repeat):
                time.sleep(FLEET_CACHE_S + 0.1)
                cold.append(_get(f"{flower.url}metrics", token))
                warm.append(_get(f"{flower.url}metrics", token))
                floor.append(_get(f"{flower.url}healthcheck", token))
                began = time.perf_counter()
                fleet_status(config, timeout=0.5, revive=False)
                status.append(time.perf_counter() - began)
        finally:
            _cli(ws, "fleet", "down")
            EmbeddedBroker(ws / ".mainboard").down()
    med = {k: statistics.median(v) for k, v in
           {"cold": cold, "warm": warm, "healthcheck": floor, "fleet status": status}.items()}
    for name, seconds in med.items():
        print(f"{name:>13}: {seconds * 1000:8.1f} ms (median of {args.repeat})")
    print(f"ratio cold scrape / fleet status:  {med['cold'] / med['fleet status']:.2f}")
    print(f"ratio warm scrape / healthcheck:   {med['warm'] / med['healthcheck']:.2f}")


if __name__ == "__main__":
    main()
