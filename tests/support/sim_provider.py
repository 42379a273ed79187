"""Start the LOCAL SIMULATED GPU provider for tests (a simulation, not a real marketplace).

``start_simulated_provider(dir)`` runs ``python -m mainboard.bridges.providers.simulated``
as a real subprocess on a free loopback port and returns a handle; ``stop()`` shuts it
down and destroys every simulated rental it recorded, even if the server crashed.
Needs root, ``ip`` and ``sshd``: missing ones skip locally and fail under CI=true.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mainboard.bridges.providers import RestProvider
from mainboard.bridges.providers.simulated import balance_of, cleanup_all
from tests.support.services import free_port, require, unavailable, wait_port


def require_root_netns() -> None:
    """Network namespaces need root and iproute2; sshd runs inside them."""
    require("ip", "apt-get install iproute2")
    require("sshd", "apt-get install openssh-server")
    require("unshare")
    if os.geteuid() != 0:
        unavailable("network namespaces need root")


@dataclass
class SimulatedProviderServer:
    """A running simulated provider: its URL, state directory, key file and stderr log."""

    url: str
    state: Path
    key_file: Path
    log: Path
    proc: subprocess.Popen = field(repr=False)

    @property
    def api_key(self) -> str:
        return self.key_file.read_text().strip()

    def market(self, key_env: str) -> RestProvider:
        """Its REST adapter with the key handed in (read from ``$key_env`` when not)."""
        return RestProvider("sim", api_url=self.url, api_key_env=key_env,
                            env={key_env: self.api_key})

    @contextmanager
    def renting(self, key_env: str) -> Iterator[RestProvider]:
        """:meth:`market`, and every rental on it destroyed on the way out, whatever the test
        did: the next test of the module starts with an empty market."""
        market = self.market(key_env)
        try:
            yield market
        finally:
            for rental in market.list_rentals():
                market.destroy(rental.id)

    def sandbox(self, rental_id: str) -> dict[str, Any]:
        """The simulation's record of a rental's namespace, veth and sshd pid."""
        state = json.loads((self.state / "state.json").read_text())
        return state["rentals"][str(rental_id)]["sandbox"]

    def credit(self) -> float:
        """The simulation's own books: starting credit minus what its rentals cost so far
        (what its vast-shaped ``GET /api/v0/users/current`` answers as ``credit``)."""
        return balance_of(json.loads((self.state / "state.json").read_text()))

    def exclusive(self, on: bool) -> None:
        """Offers as single machines (a rented one is unlisted until destroyed), or not."""
        from mainboard.bridges.providers.simulated import Store

        with Store(self.state).transaction() as state:
            state["exclusive_offers"] = on

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def user_data(self) -> str:
        """Every launch request the simulation kept, as a provider keeps user-data."""
        from mainboard.bridges.providers.simulated import USER_DATA_LOG

        path = self.state / USER_DATA_LOG
        return path.read_text() if path.exists() else ""

    def crash(self) -> None:
        """SIGKILL the server: its rentals stay up, as after a real crash."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        cleanup_all(self.state)


def start_simulated_provider(directory: Path, credit: float = 25.0) -> SimulatedProviderServer:
    """Start the simulated provider subprocess with its state in ``directory``."""
    require_root_netns()
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = directory / "server.log"
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mainboard.bridges.providers.simulated", "--port", str(port),
             "--state", str(directory / "state"), "--credit", str(credit)],
            stdout=err, stderr=err)
    try:
        wait_port("127.0.0.1", port, timeout=20)
    except TimeoutError:
        proc.kill()
        raise
    return SimulatedProviderServer(url=f"http://127.0.0.1:{port}", state=directory / "state",
                                   key_file=directory / "state" / "api_key", log=log, proc=proc)
