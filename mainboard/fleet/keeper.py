"""The fleet keeper: a small detached process that holds what ``fleet up`` cannot.

``fleet up`` returns, but two things must outlive it: the SSH reverse tunnels through
which remote workers reach a loopback-only broker, and the watch over rented machines
that destroys one whose worker has idled past its ``idle_timeout``. The keeper does
both. It takes its orders from the fleet receipts (re-read every ``TICK_S``): each live
``worker.tunnel`` gets a ``ReverseTunnel`` on its recorded remote port (so a restarted
keeper gives workers back the same address), a ``worker.stopped`` closes it. It writes
what it holds to ``fleet/tunnels.json`` and exits by itself once nothing is left to hold.
This file is the daemon alone; whoever starts, wakes or asks it goes through
:mod:`mainboard.fleet.keeperclient`.

    python -m mainboard.fleet.keeper --root WORKSPACE_ROOT [--config mainboard.toml]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from mainboard.names import hold_gc, release_gc

if __name__ == "__main__":  # the program, not a module imported: before the fleet's imports
    hold_gc()  # released once the keeper is built

from mainboard.bridges.tunnel import TunnelManager, TunnelStatus
from mainboard.config import load_config
from mainboard.fleet.autoscale import SCALE_TICK_ENV, SCALE_TICK_S, Autoscaler, run_autoscaler
from mainboard.fleet.keeperclient import WAKE_SIGNAL, keeper_paths
from mainboard.fleet.launch import ssh_from_dict
from mainboard.fleet.reconcile import describe, reconcile, worth_reconciling
from mainboard.fleet.records import fleet_receipts, read_fleet
from mainboard.fleet.workers import idle_workers, stop_workers
from mainboard.receipts import WorkerLost
from mainboard.redact import install_log_redaction

TICK_S = 0.5
LOST_AFTER_ENV = "MAINBOARD_TUNNEL_LOST_AFTER_S"  # the retry budget (tests shorten it)
LOST_AFTER_S = 120.0  # a host unreachable this long is marked lost and no longer dialled
IDLE_CHECK_S = 5.0
LINGER_S = 5.0  # nothing to hold for this long: exit
FIRST_LINGER_S = 30.0  # before anything was held: `fleet up` starts the keeper early
log = logging.getLogger("mainboard.fleet.keeper")


def status_row(held: TunnelStatus | None, error: str | None,
               since: float | None = None) -> dict[str, object]:
    """One worker's line of tunnels.json: an error only while unhealthy (a reconnected
    tunnel's last error is history, not news); ``since``: when it came up (epoch s), from
    which the autoscaler counts a tunnelled worker's silence."""
    healthy = bool(held and held.healthy)
    return {"healthy": healthy, "since": since if healthy else None,
            "remote_port": held.remote_port if held else None,
            "reconnects": held.reconnects if held else 0,
            "error": None if healthy else error or (held.last_error if held else None)}


class Keeper:
    """The loop: tunnels as the receipts ask, idle rentals destroyed, exit when idle."""

    def __init__(self, root: Path, config_path: Path | None) -> None:
        self.config = load_config(config_path)
        self.state_dir = self.config.state_dir
        self.paths = keeper_paths(self.state_dir)
        self.tunnels = TunnelManager()
        self.errors: dict[str, str] = {}
        self.down_since: dict[str, float] = {}  # worker id -> first failure of this outage
        self.lost_after = float(os.environ.get(LOST_AFTER_ENV) or LOST_AFTER_S)
        self.next_try: dict[str, float] = {}
        self.up_since: dict[str, float] = {}  # worker id -> when its tunnel came up (epoch s)
        self.scaler = None
        if self.config.fleet.pools:
            self.scaler = Autoscaler(self.config)
        self.stop = threading.Event()
        self.wake = threading.Event()  # set by WAKE_SIGNAL (and on stop): sync at once
        self._transports: dict[str, object] = {}

    def sync_tunnels(self) -> bool:
        """Open the wanted tunnels, close the others; True when any is wanted."""
        wanted = {t.worker_id: t for t in read_fleet(self.state_dir).live_tunnels()}
        for worker_id in list(self.tunnels.status()):
            if worker_id not in wanted:
                self.tunnels.close(worker_id)
                self.errors.pop(worker_id, None)
        now = time.monotonic()
        for worker_id, want in wanted.items():
            current = self.tunnels.get(worker_id)
            if current is not None and current.healthy:
                self.down_since.pop(worker_id, None)
                self.errors.pop(worker_id, None)  # a stale error next to healthy misleads
                continue
            since = self.down_since.setdefault(worker_id, now)
            if now - since >= self.lost_after:
                self.give_up(worker_id, want.host, current)
                continue
            if current is not None and not current.stopped or now < self.next_try.get(worker_id, 0):
                continue  # the tunnel reconnects by itself, or we back off
            ssh = ssh_from_dict(want.ssh, want.host)
            self._transports[worker_id] = ssh
            try:
                self.tunnels.open(worker_id, lambda s=ssh: s.paramiko_transport,
                                  local_port=want.local_port, local_host=want.local_host,
                                  remote_port=want.remote_port)
                self.errors.pop(worker_id, None)
            except Exception as exc:  # noqa: BLE001 - recorded for `fleet up` to report
                self.errors[worker_id] = str(exc)
                self.next_try[worker_id] = now + min(10.0, 0.5 * 2 ** len(self.errors))
                log.warning("tunnel for worker %s on %s: %s", worker_id, want.host, exc)
        self.write_status(wanted)
        return bool(wanted)

    def give_up(self, worker_id: str, host: str, tunnel: object | None) -> None:
        """The retry budget ran out: stop dialling its host, then record the worker lost
        (in that order: once anyone sees it lost, no dial is still under way)."""
        why = self.errors.get(worker_id) or getattr(tunnel, "last_error", None) or "no answer"
        reason = f"host {host!r} unreachable for {self.lost_after:.0f} s: {why}"
        self.tunnels.close(worker_id)  # joins the tunnel's reconnect loop
        self.down_since.pop(worker_id, None)
        log.warning("worker %s marked lost: %s", worker_id, reason)
        fleet_receipts(self.state_dir).append(WorkerLost(worker_id=worker_id, host=host,
                                                         reason=reason))

    def write_status(self, wanted: dict[str, object]) -> None:
        held = self.tunnels.status()
        for worker_id in wanted:
            if held.get(worker_id) is not None and held[worker_id].healthy:
                self.up_since.setdefault(worker_id, time.time())
            else:
                self.up_since.pop(worker_id, None)
        data = {w: status_row(held.get(w), self.errors.get(w), self.up_since.get(w))
                for w in wanted}
        tmp = self.paths["status"].with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.paths["status"])

    def check_idle(self) -> bool:
        """Drain and destroy rented workers idle past their timeout; True when any is rented."""
        live = [w for w in read_fleet(self.state_dir).live() if w.rental]
        if not live:
            return False
        idle = idle_workers(self.config, live)
        if idle:
            log.info("idle rented workers: %s", ", ".join(w.worker_id for w in idle))
            stop_workers(self.config, idle, reason="idle past idle_timeout")
        return True

    def reconcile(self) -> None:
        """Adopt or clean what a killed controller left (see ``mainboard.fleet.reconcile``)."""
        if not worth_reconciling(self.config, read_fleet(self.state_dir)):
            return
        try:
            done = reconcile(self.config)
        except Exception as exc:  # noqa: BLE001 - the tunnels must still be held
            log.warning("reconcile failed: %s", exc)
            return
        for line in [*describe(done), *done.errors]:
            log.info("%s", line)

    def run(self) -> None:
        self.reconcile()  # before any decision: what a killed keeper left is adopted first
        if self.scaler is not None:
            every = float(os.environ.get(SCALE_TICK_ENV) or SCALE_TICK_S)
            threading.Thread(target=run_autoscaler, args=(self.scaler, self.stop, every),
                             name="autoscale", daemon=True).start()
        last_idle_check, idle_since, linger = 0.0, time.monotonic(), FIRST_LINGER_S
        while not self.stop.is_set():  # the first sync at once: `fleet up` is waiting on it
            self.wake.clear()
            busy = self.sync_tunnels()
            busy = busy or (self.scaler is not None and self.scaler.active())
            if time.monotonic() - last_idle_check >= IDLE_CHECK_S:
                last_idle_check = time.monotonic()
                try:
                    busy = self.check_idle() or busy
                except Exception as exc:  # noqa: BLE001 - keep holding the tunnels
                    log.warning("idle check failed: %s", exc)
                    busy = True
            if busy:
                idle_since, linger = None, LINGER_S
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= linger:
                log.info("nothing left to keep; exiting")
                break
            self.wake.wait(TICK_S)
        self.tunnels.close_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mainboard.fleet.keeper")
    parser.add_argument("--root", type=Path, required=True, help="the workspace root")
    parser.add_argument("--config", type=Path, default=None, help="its mainboard.toml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    install_log_redaction()  # tunnel and worker errors may quote a broker URL
    os.chdir(args.root)
    keeper = Keeper(args.root, args.config)
    release_gc()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (keeper.stop.set(), keeper.wake.set()))
    signal.signal(WAKE_SIGNAL, lambda *_: keeper.wake.set())  # before the pid is published
    with open(keeper.paths["lock"], "a") as lock:
        deadline = time.monotonic() + 2.0  # `keeper_pid` probes hold the lock for an instant
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return 0  # another keeper holds this workspace
                time.sleep(0.05)
        keeper.paths["pid"].write_text(f"{os.getpid()}\n")
        log.info("fleet keeper %d for %s", os.getpid(), keeper.state_dir)
        keeper.run()
        with contextlib.suppress(OSError):
            keeper.paths["pid"].unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
