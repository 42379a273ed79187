"""What the sync before a fleet run costs: nothing changed, one file changed, vs one ssh round trip.

Run from the repository root:  .venv/bin/python bench/bench_fleet_sync.py [-n 20] [--files 300]
Starts its own sshd on a free 127.0.0.1 port (tests/support/services.start_sshd), makes a workspace
of ``--files`` small files, mirrors it once in full, then measures, interleaved:
``sync_fleet`` with nothing changed (what every ``mainboard.integrate`` on a fleet pays),
``sync_fleet`` after one file was edited (the delta: that file alone travels), and the
peer, one pooled ``run('true')`` over the same sshd. Prints medians, p90 and the ratios.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.support.services

from bench_ssh import _interleaved, _row  # noqa: E402 - this folder: the same report rows

from mainboard.board import Board  # noqa: E402
from mainboard.config import load_config  # noqa: E402
from mainboard.fleet.sync import sync_fleet  # noqa: E402
from mainboard.receipts import WorkerStarted  # noqa: E402
from tests.support.services import start_sshd  # noqa: E402


def _workspace(ws: Path, files: int) -> None:
    for i in range(files):
        path = ws / f"pkg{i % 10}" / f"mod_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" + "# padding\n" * 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--files", type=int, default=300, help="workspace files (default 300)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mainboard-bench-sync-"))
    server = start_sshd(work / "sshd")
    try:
        ws, root = work / "ws", work / "root"
        _workspace(ws, args.files)
        root.mkdir()
        (ws / "mainboard.toml").write_text(
            f'[hosts.box]\nkind = "ssh"\nhost = "{server.host}"\nport = {server.port}\n'
            f'user = "{server.user}"\nidentity = "{server.identity}"\n'
            f'known_hosts = "{server.known_hosts()}"\nroot = "{root}"\n')
        config = load_config(ws / "mainboard.toml")
        worker = WorkerStarted(worker_id="bench1", host="box", kind="ssh", node="mb-box-bench1",
                               queues=["mainboard.batches"], concurrency=1, job={},
                               root=str(root), python="python3", broker_via="direct",
                               secret_path=str(root / "s"))
        start = time.perf_counter()
        (first,) = sync_fleet(config, [worker])
        full = time.perf_counter() - start
        edited = ws / "pkg0" / "mod_0.py"
        counter = iter(range(10**9))

        def one_file() -> object:
            edited.write_text(f"VALUE = {next(counter)}\n")
            (report,) = sync_fleet(config, [worker])
            assert report.report.files == ["pkg0/mod_0.py"], report.report.files
            return report

        def unchanged() -> object:
            (report,) = sync_fleet(config, [worker])
            assert report.report.files == [] and report.report.via is None
            return report

        with Board(ws / "mainboard.toml") as board:
            box = board.on("box")
            box.run("true", check=True)  # connect once: the peer is a warm round trip
            calls: dict[str, Callable[[], object]] = {
                "sync_fleet, nothing changed": unchanged,
                "sync_fleet, one file edited": one_file,
                "peer: pooled run('true')": lambda: box.run("true", check=True),
            }
            times = _interleaved(calls, args.n)
        print(f"loopback sshd 127.0.0.1:{server.port}; workspace of {args.files} files "
              f"({first.report.raw_bytes} bytes); first full sync {full * 1e3:.0f} ms")
        for label, values in times.items():
            print(_row(label, values))
        peer = statistics.median(times["peer: pooled run('true')"])
        for label in ("sync_fleet, nothing changed", "sync_fleet, one file edited"):
            print(f"ratio {label} / peer (median): {statistics.median(times[label]) / peer:.2f}x")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
