"""Live: `fleet up` on a provisioned ssh host after the first start takes the warm path (one
command for root, environment, tunnel port and secret, then the submission), and a host
that is not as stamped falls back to the full path and is stamped again.

A real loopback sshd and the session's provisioned root; the worker reaches the loopback
broker through the keeper's reverse tunnel and runs a probe each time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mainboard.fleet import warm
from mainboard.fleet.control import fleet_down, fleet_up
from mainboard.fleet.launch import BrokerRoute, UpOptions
from tests.support.fleet_helpers import (
    config,
    probe,
    provisioned_root,  # noqa: F401 - session fixture
    ssh_host,
    stop_broker,
    workspace,
)
from tests.support.services import SshServer

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


def _up(ws: Path) -> dict[str, float]:
    """One `fleet up` of host "lo" (no Flower), its probe run; the launch's phases."""
    timings: dict[str, dict[str, float]] = {}
    report = fleet_up(config(ws), ["lo"], UpOptions(), flower=False, timings=timings)
    assert not report.failed, report.failed
    assert report.started[0].broker_via == "tunnel"
    assert probe(ws, "lo")["host"]  # the worker answers through its tunnel
    return timings["lo"]


def _stamps(ws: Path) -> dict[str, dict[str, str]]:
    return json.loads((ws / ".mainboard" / "fleet" / warm.STAMPS).read_text())


def test_second_start_is_warm_and_a_changed_host_falls_back(
        tmp_path: Path, sshd_server: SshServer, provisioned_root: Path) -> None:  # noqa: F811
    ws = workspace(tmp_path / "ws", ssh_host("lo", sshd_server, provisioned_root))
    try:
        first = _up(ws)  # full path: root, provisioning check, port, secret, submit
        assert {"connect", "route", "submit", "tunnel"} <= set(first)
        (stamp,) = _stamps(ws).values()
        assert stamp["root"] == str(provisioned_root) and stamp["python"].endswith("bin/python")
        fleet_down(config(ws), timeout=30)

        second = _up(ws)  # warm: no root or route command of its own
        assert "connect" not in second and "route" not in second, second
        fleet_down(config(ws), timeout=30)

        stamp_id = next(iter(_stamps(ws)))
        warm.record(config(ws), stamp_id, warm.Stamp(**{**stamp, "key": "0" * 16}))
        third = _up(ws)  # the env's marker disagrees: full path, stamped anew
        assert {"connect", "route"} <= set(third), third
        assert _stamps(ws)[stamp_id]["key"] == stamp["key"]
        fleet_down(config(ws), timeout=30)
    finally:
        stop_broker(ws)


@pytest.mark.parametrize("url", ["redis://:p%40ss@127.0.0.1:6379/0", "redis://127.0.0.1:6379",
                                 "rediss://u:pw@localhost:1234/3?x=1#f"])
def test_port_split_rebuilds_the_tunnel_url(url: str) -> None:
    head, tail = BrokerRoute(url).around_port()
    assert head + "4242" + tail == BrokerRoute(url).via_port(4242)
    assert "127.0.0.1:4242" in BrokerRoute(url).via_port(4242)
