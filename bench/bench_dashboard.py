"""`mainboard dashboard`: the runs list with 1,000 runs in the store, and the server's memory
and CPU while idle and while a run streams into an open page.

A private Redis and workspace; 1,000 runs written as receipts (copies of one real run,
three iterations of an 8-d VEGAS run each, 330 MB). The peer is the previous approach,
timed in this process over the same store: every run folded with its snapshots decoded
(`RunStore.all()`, what `runs list` and `runs show NAME` read before). Against it: the
list page's API cold (the first request, sent as soon as the URL is printed; the server
folds the runs in a background thread from its start, snapshots unread) and warm (what
each later poll costs), the list page itself in headless Chromium (from navigation start
until all rows are drawn), and the CLI's `runs list --json` and `runs show NAME --json`
(name resolution reads the runs without their snapshots, then the one run in full), each
a fresh process. Then a client polls like an open run page does (version every second, data
on change) while the dashboard is idle, and while a real run (one local worker) streams
iterations for the whole window (then is stopped with `Run.stop`); RSS and CPU come from
/proc of the dashboard process. Nothing is asserted.

    .venv/bin/python bench/bench_dashboard.py [--runs 1000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.integration import spec, write_workspace  # noqa: E402
from tests.support.run_receipts import fill  # noqa: E402
from tests.support.services import start_redis  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(base: str, token: str, path: str) -> tuple[float, Any]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as reply:
        data = json.load(reply)
    return time.perf_counter() - began, data


def poll_like_a_page(base: str, token: str, path: str, stop: threading.Event) -> int:
    """What an open page does: its /version every second, the data when it changed."""
    seen, fetched = None, 0
    while not stop.wait(1.0):
        _, v = get(base, token, f"{path}/version" if path.startswith("/api/run/")
                   else "/api/runs-version")
        if v["version"] != seen:
            get(base, token, path)
            seen, fetched = v["version"], fetched + 1
    return fetched


def measure(pid: int, seconds: float, base: str, token: str, path: str | None
            ) -> dict[str, float]:
    """CPU share and peak RSS of ``pid`` over ``seconds`` while a page polls ``path``
    (None: no page open)."""
    stop = threading.Event()
    result: dict[str, int] = {}
    poller = threading.Thread(target=lambda: result.update(
        fetched=poll_like_a_page(base, token, path, stop) if path else 0))
    began_cpu, began = cpu_s(pid), time.monotonic()
    poller.start()
    peak = 0.0
    while time.monotonic() - began < seconds:
        peak = max(peak, rss_mb(pid))
        time.sleep(0.25)
    stop.set()
    poller.join()
    wall = time.monotonic() - began
    return {"cpu_pct": 100 * (cpu_s(pid) - began_cpu) / wall, "rss_mb": peak,
            "fetches": result.get("fetched", 0)}


def list_page_in_chromium(url: str, base: str, rows: int, loads: int = 5) -> list[float]:
    """Seconds from navigation start until the runs list page has drawn ``rows`` rows, for
    ``loads`` loads of the page in one headless Chromium (the first with the token URL; the
    cookie it leaves opens the rest). Empty without Chromium."""
    import shutil

    if shutil.which("chromium") is None:
        print("no chromium: the page in a browser is not timed")
        return []
    from tests.support.chromium import Tab, drive

    drawn = (f"document.querySelectorAll('tr[data-run-id]').length === {rows} "
             "? performance.now() : 0")

    async def loads_of(tab: Tab) -> list[float]:
        out = [await tab.wait_until(drawn, 60, every=0.01)]
        for _ in range(loads - 1):
            await tab.evaluate("window.benchOld = true")
            await tab.goto(f"{base}/")
            await tab.wait_until("!window.benchOld", 10, every=0.01)  # the new document
            out.append(await tab.wait_until(drawn, 60, every=0.01))
        return [ms / 1000 for ms in out]

    return drive(url, loads_of, timeout=120)


def timed_cli(argv: list[str]) -> tuple[Any, float]:
    """The JSON a CLI command prints, and its wall time (a fresh process: startup included)."""
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    import mainboard

    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        server = start_redis(Path(tmp) / "redis")
        dash: subprocess.Popen[str] | None = None
        try:
            config = write_workspace(Path(tmp) / "ws", server)
            eight = {"continuous": 8}
            seed = spec(name="seed", domain=eight, stop={"max_samples": 120_000},
                        integrand={"kind": "genz.gaussian", "a": [5.0] * 8, "u": [0.5] * 8},
                        sampler={"kind": "vegas", "bins": 64, "alpha": 0.5})
            first = mainboard.integrate(seed, workers=1, config=config)
            runs = config.state_dir / "runs"
            fill(runs / first.run_id / "receipts.ndjson", config.state_dir, args.runs - 1)
            size = sum(p.stat().st_size for p in runs.rglob("*.ndjson")) / 1e6
            from mainboard.runs.store import RunStore

            began = time.perf_counter()
            peer_rows = len(list(RunStore(config.state_dir).all()))
            peer = time.perf_counter() - began
            cli = [sys.executable, "-m", "mainboard", "--config", str(config.path), "runs"]
            listed, t_list = timed_cli([*cli, "list", "--json"])
            shown, t_show = timed_cli([*cli, "show", f"bulk-{args.runs // 2}", "--json"])
            assert len(listed) == peer_rows and shown["name"] == f"bulk-{args.runs // 2}"
            began = time.perf_counter()
            dash = subprocess.Popen([sys.executable, "-m", "mainboard", "--config",
                                     str(config.path), "dashboard", "--json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    text=True)
            url = json.loads(dash.stdout.readline())["url"]  # type: ignore[union-attr]
            to_url = time.perf_counter() - began
            base, token = url.split("/?token=")
            cold, data = get(base, token, "/api/runs")
            to_first = time.perf_counter() - began
            warm = sorted(get(base, token, "/api/runs")[0] for _ in range(7))[3]
            print(f"load average {os.getloadavg()[0]:.1f}; {data['total']} runs, "
                  f"{size:.1f} MB of receipts")
            print(f"peer (previous approach): every run folded with snapshots, "
                  f"RunStore.all() ({peer_rows} runs) {peer:.3f} s")
            print(f"runs list API, 1st request (cold, sent when the URL is printed) {cold:.3f} s "
                  f"(ratio to peer {cold / peer:.3f}); dashboard start to URL {to_url:.3f} s, "
                  f"to 1st answer {to_first:.3f} s; later requests (median of 7) {warm:.3f} s "
                  f"(ratio {warm / peer:.4f})")
            print(f"CLI, whole process: `runs list --json` {t_list:.3f} s (ratio to peer "
                  f"{t_list / peer:.3f}); `runs show bulk-{args.runs // 2} --json` (by name) "
                  f"{t_show:.3f} s (ratio {t_show / peer:.3f})")
            page_s = list_page_in_chromium(url, base, data["total"])
            if page_s:
                print(f"runs list page in headless Chromium, navigation to all "
                      f"{data['total']} rows drawn: {', '.join(f'{t:.3f}' for t in page_s)} s "
                      f"(median {sorted(page_s)[len(page_s) // 2]:.3f} s)")
            alone = measure(dash.pid, args.seconds, base, token, None)
            print(f"idle, no page open: CPU {alone['cpu_pct']:.1f}% of a core, "
                  f"RSS {alone['rss_mb']:.0f} MB")
            page = f"/api/run/{first.run_id}"
            idle = measure(dash.pid, args.seconds, base, token, page)
            print(f"idle, one open run page polling: CPU {idle['cpu_pct']:.1f}% of a core, "
                  f"RSS {idle['rss_mb']:.0f} MB, {idle['fetches']} data fetches")
            streaming = spec(name="streaming", stop={"max_samples": 1_000_000_000},
                             batching={"batch_size": 10_000, "batches_per_iteration": 4})
            from mainboard.integrators.spec import parse_run

            live_id = parse_run(streaming).run_id()
            worker = threading.Thread(target=mainboard.integrate, args=(streaming,),
                                      kwargs={"workers": 1, "config": config})
            worker.start()
            while not (runs / live_id).exists():
                time.sleep(0.1)
            live = measure(dash.pid, args.seconds, base, token, f"/api/run/{live_id}")
            took, state = get(base, token, f"/api/run/{live_id}")
            print(f"while a run streams ({len(state['series'])} iterations so far, one open "
                  f"page): CPU {live['cpu_pct']:.1f}% of a core, RSS {live['rss_mb']:.0f} MB, "
                  f"{live['fetches']} data fetches; the run page's data then {took:.3f} s")
            mainboard.run(live_id, config).stop()  # it streams until told to stop
            worker.join()
        finally:
            if dash is not None:
                dash.send_signal(signal.SIGINT)
                try:
                    dash.wait(10)
                except subprocess.TimeoutExpired:  # SIGINT ignored: run from a background job
                    dash.kill()
                    dash.wait()
            server.stop()


if __name__ == "__main__":
    main()
