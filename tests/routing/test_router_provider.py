"""``on("auto")`` and provider hosts: the price is the cheapest offer of the SIMULATED
provider (tests/support/sim_provider.py) that fits the job's GPUs; an unkeyed provider, an offer
over ``[router] max_usd_hr`` and a job no offer fits are excluded with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.board import Board
from tests.support.batch_helpers import invoke
from tests.support.jobs_workspace import make_workspace
from tests.support.services import free_port
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.workspace import toml_tables

KEY_ENV = "MB_TEST_ROUTER_SIM_KEY"


def test_provider_offers_price_the_candidates(tmp_path: Path, sim: SimulatedProviderServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    monkeypatch.delenv("MB_TEST_ROUTER_NO_KEY", raising=False)
    providers = {"providers.sim": {"kind": "simulated", "api_url": sim.url,
                                   "api_key_env": KEY_ENV},
                 "providers.nokey": {"kind": "simulated", "api_url": sim.url,
                                     "api_key_env": "MB_TEST_ROUTER_NO_KEY"},
                 "providers.down": {"kind": "simulated", "api_url": f"http://127.0.0.1:{free_port()}",
                                    "api_key_env": KEY_ENV}}
    config = make_workspace(tmp_path, extra_hosts={
        "rtx": {"kind": "provider", "provider": "sim", "gpu": "SIM_RTX_4090"},
        "a100": {"kind": "provider", "provider": "sim", "gpu": "SIM_A100_80GB"},
        "unkeyed": {"kind": "provider", "provider": "nokey"},
        "apidown": {"kind": "provider", "provider": "down"}},
        extra=toml_tables(providers) + "\n[router]\nmax-usd-hr = 1.0\n")
    with Board(config) as board:
        one = board.on("auto").rank(gpus=1, runtime_s=600)
        two = board.on("auto").rank(gpus=2)
    reasons = {c.host: c.reason for c in one.candidates}
    assert [c.host for c in one.candidates if c.fits] == ["rtx"]
    rtx = one.candidates[0]
    assert (rtx.usd_hr, rtx.hardware, rtx.rank) == (0.40, "1xSIM_RTX_4090/24.6GB", 1)
    assert reasons["rtx"].startswith("sim offer 9001: 1x SIM RTX 4090")
    assert reasons["a100"] == "1.6000 USD/h is over [router] max_usd_hr = 1"
    assert reasons["unkeyed"] == "not-set-up (set $MB_TEST_ROUTER_NO_KEY)"
    assert reasons["apidown"].startswith("no rate: ")  # its API is down: one row, not a failure
    assert reasons["scratch"].startswith("asks 1 GPUs and no facts say scratch has any")
    assert (rtx.setup.samples, rtx.expected_s, rtx.expected_usd) == (0, None, None)  # untimed
    by_host = {c.host: c for c in two.candidates}
    assert by_host["rtx"].fits and by_host["rtx"].usd_hr == 0.80  # the 2-GPU offer (9002)
    assert by_host["a100"].reason == ("no sim offer of gpu=SIM_A100_80GB under max_usd_hr=any "
                                      "fits 2 GPUs")
    shown = invoke(config, "submit", "--on", "auto", "--gpus", "8", "--explain", "--", "true")
    assert shown.exit_code == 2 and "no declared host fits this job" in shown.stderr
    (rtx_row,) = [line for line in shown.stderr.splitlines() if line.split()[1:2] == ["rtx"]]
    assert rtx_row.endswith("  no sim offer of gpu=SIM_RTX_4090 under max_usd_hr=any fits 8 GPUs")
    assert sim.api_key not in shown.output
