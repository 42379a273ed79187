"""Provider layer against the LOCAL SIMULATED GPU provider (a simulation, real netns + sshd).

The real REST adapter talks HTTP to the simulated server; "rented machines" are network
namespaces running a real sshd, reached with paramiko. Every rental is destroyed in
fixture teardown even when a test fails.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.bridges.jobstate import JobState
from mainboard.bridges.providers import (
    RentalGuard,
    RestProvider,
    adapter_for,
    destroy_all_owned,
    owned_rentals,
    should_destroy,
)
from mainboard.bridges.providers import netns as sim_net
from mainboard.bridges.providers.base import Rental
from mainboard.bridges.providers.bridge import ProviderBridge, known_hosts_for
from mainboard.bridges.providers.lifecycle import FLEET, JOBS, rental_receipts
from mainboard.bridges.providers.simulated import cleanup_all
from mainboard.bridges.ssh import SshTransport
from mainboard.config import ProviderConfig, ProviderHost
from mainboard.errors import (
    ConfigError,
    OfferNotFound,
    PriceLimitExceeded,
    ProviderAuthFailed,
    ProviderError,
    UserError,
)
from mainboard.receipts import Receipts, RentalCreated, RentalDestroyed
from tests.support.services import free_port
from tests.support.sim_provider import SimulatedProviderServer, start_simulated_provider

pytestmark = pytest.mark.live
KEY_ENV = "MB_TEST_SIM_PROVIDER_KEY"


@pytest.fixture
def provider(sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch
             ) -> Iterator[RestProvider]:
    """The real REST adapter pointed at the simulation; leaves no rental behind."""
    monkeypatch.setenv(KEY_ENV, sim.api_key)
    adapter = RestProvider("sim", api_url=sim.url, api_key_env=KEY_ENV)
    try:
        yield adapter
        for rental in adapter.list_rentals():
            adapter.destroy(rental.id)
    finally:
        cleanup_all(sim.state)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("renterkey") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path, path.with_suffix(".pub").read_text()


def _ssh(rental: Rental, identity: Path, tmp_path: Path) -> SshTransport:
    return SshTransport(rental.ssh_host or "", port=rental.ssh_port or 22, user=rental.ssh_user,
                        identity=str(identity), trust="first-use",
                        known_hosts=str(tmp_path / "known_hosts"), connect_timeout=10)


def _links() -> str:
    return subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout


def _assert_gone(box: dict) -> None:
    assert box["netns"] not in sim_net.namespaces()
    assert box["veth_host"] not in _links()
    assert not sim_net.alive(box["pid"])


def test_simulated_offers_filtered_by_gpu_and_max_price(provider: RestProvider) -> None:
    everything = provider.offers()
    assert [o.id for o in everything] == ["9001", "9002", "9003", "9004", "9005"]  # cheapest first
    assert all(o.gpu.startswith("SIM ") and o.region == "SIM" for o in everything)
    assert {o.id for o in provider.offers(gpu="SIM_RTX_4090")} == {"9001", "9002"}
    assert [o.id for o in provider.offers(gpu="SIM_RTX_4090", max_usd_hr=0.5)] == ["9001"]
    assert {o.id for o in provider.offers(max_usd_hr=1.0)} == {"9001", "9002"}
    assert provider.offers(gpu="SIM_H100_SXM", max_usd_hr=1.0) == []
    a100 = provider.cheapest(gpu="SIM_A100_80GB")
    assert (a100.gpu_count, a100.vram_gb, a100.usd_hr, a100.cpus) == (1, 81.92, 1.6, 16.0)
    with pytest.raises(ProviderError, match=r"no offer for gpu=SIM_H100_SXM .*cheapest "
                                            r"SIM_H100_SXM is 2\.9000 USD/hr"):
        provider.cheapest(gpu="SIM_H100_SXM", max_usd_hr=1.0)
    with pytest.raises(UserError, match="max_usd_hr must be greater than 0"):
        provider.offers(max_usd_hr=0)


def test_simulated_rental_ssh_sees_namespace_then_destroy_removes_everything(
        provider: RestProvider, sim: SimulatedProviderServer, keypair: tuple[Path, str],
        tmp_path: Path) -> None:
    identity, public = keypair
    marker = tmp_path / "pwned"
    label = f"mb-test-a'; touch {marker}; echo $("
    guard = RentalGuard(provider, tmp_path / ".mainboard", host="gpu1")
    with guard:
        rental = guard.rent("9001", ssh_public_key=public, label=label, max_usd_hr=1.0)
    assert (rental.state, rental.ssh_port, rental.ssh_user, rental.usd_hr) == (
        "running", 22, "root", 0.4)
    assert rental.ssh_host and rental.ssh_host.startswith("10.77.")
    box = sim.sandbox(rental.id)
    with _ssh(rental, identity, tmp_path) as ssh:
        hostname = ssh.run("hostname", check=True).stdout.strip()
        addresses = ssh.run(["ip", "-4", "-o", "addr", "show"], check=True).stdout
    assert hostname == f"sim-gpu-{rental.id}" != socket.gethostname()
    assert f"inet {rental.ssh_host}/30" in addresses
    assert "eth0" not in addresses  # only lo and the veth end live in the namespace
    assert [r.label for r in provider.list_rentals()] == [label] and not marker.exists()
    assert [r.rental_id for r in owned_rentals(tmp_path / ".mainboard")] == [rental.id]

    guard.destroy(rental.id, "test done")
    _assert_gone(box)
    assert provider.status(rental.id).state == "destroyed"
    provider.destroy(rental.id)  # destroying a gone rental is fine
    assert owned_rentals(tmp_path / ".mainboard") == []


def test_simulated_rental_cannot_reach_host_loopback_service(
        provider: RestProvider, sim: SimulatedProviderServer, keypair: tuple[Path, str],
        tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])),"
             " 2).close(); print('CONNECTED')\nexcept OSError as e: print('FAILED', e)")
    try:
        rental = provider.rent("9001", ssh_public_key=keypair[1], label="mb-test-isolation")
        box = sim.sandbox(rental.id)
        inside = ["ip", "netns", "exec", box["netns"], sys.executable, "-c", probe]

        def run(host: str, port_: int) -> str:
            return subprocess.run([*inside, host, str(port_)], capture_output=True, text=True,
                                  timeout=20).stdout

        assert run("127.0.0.1", port).startswith("FAILED")  # the host's loopback is not ours
        assert run(box["ns_addr"], 22) == "CONNECTED\n"  # the probe itself works in there
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # and the host can
        with _ssh(rental, keypair[0], tmp_path) as ssh:
            over_ssh = ssh.run(["python3", "-c", probe, "127.0.0.1", str(port)]).stdout
        assert over_ssh.startswith("FAILED")
    finally:
        listener.close()


def test_simulated_balance_decreases_while_rented_only(provider: RestProvider,
                                                      keypair: tuple[Path, str]) -> None:
    before = provider.balance()
    started = time.time()
    rental = provider.rent("9003", ssh_public_key=keypair[1], label="mb-test-billing")
    deadline = time.monotonic() + 30  # a hang guard: the event is the books moving
    while (during := provider.balance()) >= before:
        assert time.monotonic() < deadline, "the balance never moved while rented"
        time.sleep(0.05)
    assert during < before
    provider.destroy(rental.id)
    elapsed = time.time() - started
    after = provider.balance()
    time.sleep(0.3)
    assert provider.balance() == after  # the clock stops at destroy
    assert 0 < before - after <= 1.6 * (elapsed + 0.1) / 3600 + 1e-6


def test_simulated_wrong_or_missing_key_is_a_clear_error_without_the_key(
        sim: SimulatedProviderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "wrong-" + uuid.uuid4().hex
    monkeypatch.setenv("MB_TEST_WRONG_KEY", wrong)
    adapter = RestProvider("sim", api_url=sim.url, api_key_env="MB_TEST_WRONG_KEY")
    for call in (adapter.offers, adapter.balance, adapter.list_rentals):
        with pytest.raises(ProviderAuthFailed) as caught:
            call()
        text = str(caught.value)
        assert "credentials refused for provider sim (env var MB_TEST_WRONG_KEY)" in text
        assert wrong not in text and sim.api_key not in text
    monkeypatch.delenv("MB_TEST_WRONG_KEY")
    with pytest.raises(ProviderAuthFailed, match="environment variable MB_TEST_WRONG_KEY is "
                                                 "not set"):
        adapter.balance()


def test_simulated_api_key_never_appears_in_logs_or_records(
        provider: RestProvider, sim: SimulatedProviderServer, keypair: tuple[Path, str],
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    state = tmp_path / ".mainboard"
    errors: list[str] = []
    with RentalGuard(provider, state) as guard:
        rental = guard.rent("9002", ssh_public_key=keypair[1], label="mb-test-secrets")
        provider.status(rental.id), provider.list_rentals(), provider.balance()
        for bad in ("424242", "abc"):
            with pytest.raises(OfferNotFound) as caught:
                provider.rent(bad, ssh_public_key=keypair[1], label="x")
            errors.append(str(caught.value))
        guard.destroy(rental.id, "done")
    assert "PUT /asks/9002/" in caplog.text and "GET /users/current" in caplog.text
    key = sim.api_key
    assert key not in caplog.text and key not in repr(provider)
    assert all(key not in e for e in errors)
    files = [p for p in [sim.log, *sim.state.rglob("*"), *state.rglob("*")]
             if p.is_file() and p.name != "api_key"]
    assert sim.log in files and state / "rentals.ndjson" in files
    for path in files:
        assert key not in path.read_text(errors="replace"), path


def test_simulated_failure_after_rent_leaves_no_rental(provider: RestProvider,
                                                       sim: SimulatedProviderServer,
                                                       keypair: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    state = tmp_path / ".mainboard"
    rented: list[Rental] = []
    with pytest.raises(UserError, match="does not exist"):
        with RentalGuard(provider, state, host="gpu1") as guard:
            rental = guard.rent("9001", ssh_public_key=keypair[1], label="mb-test-setup-fails")
            rented.append(rental)
            box = sim.sandbox(rental.id)
            with _ssh(rental, keypair[0], tmp_path) as ssh:  # a real post-rent setup step
                ssh.run("mkdir -p /tmp/mb-setup", check=True)
                ssh.put(tmp_path / "missing-wheel.whl", "/tmp/mb-setup/x.whl")
    assert rented and provider.list_rentals() == []
    _assert_gone(box)
    assert owned_rentals(state) == []
    lines = list(rental_receipts(state).read())
    assert [type(p) for p in lines] == [RentalCreated, RentalDestroyed]
    assert "setup failed: UserError" in lines[1].reason  # type: ignore[attr-defined]


def test_simulated_destroy_all_owned_from_a_fresh_process(provider: RestProvider,
                                                          sim: SimulatedProviderServer,
                                                          keypair: tuple[Path, str],
                                                          tmp_path: Path) -> None:
    (tmp_path / "mainboard.toml").write_text(textwrap.dedent(f"""
        [providers.sim]
        kind = "simulated"
        api_url = "{sim.url}"
        api_key_env = "{KEY_ENV}"
        """))
    with RentalGuard(provider, tmp_path / ".mainboard") as guard:
        kept = [guard.rent(o, ssh_public_key=keypair[1], label=f"mb-test-owned-{o}")
                for o in ("9001", "9003")]
    boxes = [sim.sandbox(r.id) for r in kept]
    assert len(provider.list_rentals()) == 2
    code = ("from mainboard.config import load_config\n"
            "from mainboard.bridges.providers import adapters_from_config, destroy_all_owned\n"
            "cfg = load_config('mainboard.toml')\n"
            "print(sorted(destroy_all_owned(cfg.state_dir, adapters_from_config(cfg))))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={**os.environ, KEY_ENV: sim.api_key})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted(r.id for r in kept))
    assert provider.list_rentals() == [] and owned_rentals(tmp_path / ".mainboard") == []
    for box in boxes:
        _assert_gone(box)


def test_simulated_owners_are_recorded_and_destroy_all_owned_can_spare_the_jobs(
        provider: RestProvider, keypair: tuple[Path, str], tmp_path: Path) -> None:
    """A fleet-only sweep (what ``fleet down`` should ask) ends the fleet's rentals and
    unowned old ones, never a job rental; a label sweep never takes a recorded rental."""
    state = tmp_path / ".mainboard"
    made = {}
    for owner in (FLEET, JOBS, None):
        with RentalGuard(provider, state, host="gpu1", owner=owner) as guard:
            made[owner] = guard.rent("9001", ssh_public_key=keypair[1],
                                     label=f"mainboard-gpu1-{owner}", wait=None)
    assert {r.rental_id: r.owner for r in owned_rentals(state)} == {
        made[o].id: o for o in (FLEET, JOBS, None)}
    assert [r.rental_id for r in owned_rentals(state, (JOBS,))] == [made[JOBS].id]
    done = destroy_all_owned(state, {"sim": provider}, owners=(FLEET, None),
                             label_prefix="mainboard-", reason="fleet down")
    assert sorted(done) == sorted([made[FLEET].id, made[None].id])
    assert [r.id for r in provider.list_rentals()] == [made[JOBS].id]
    assert [r.rental_id for r in owned_rentals(state)] == [made[JOBS].id]
    legacy = '{"topic":"rental.created","ts":1,"payload":{"provider":"sim","rental_id":"9",' \
             '"offer_id":"1","label":"old","usd_hr":0.4,"host":"gpu1"}}\n'
    old = tmp_path / "old.ndjson"
    old.write_text(legacy)  # a receipt written before owners were recorded still loads
    (loaded,) = Receipts(old).read()
    assert isinstance(loaded, RentalCreated) and loaded.owner is None


def test_simulated_unknown_offer_or_rental_id_is_a_clear_error(provider: RestProvider,
                                                     keypair: tuple[Path, str],
                                                     tmp_path: Path) -> None:
    guard = RentalGuard(provider, tmp_path / ".mainboard")
    with pytest.raises(OfferNotFound, match=r"offer '123456' is not listed"):
        guard.rent("123456", ssh_public_key=keypair[1], label="x")
    with pytest.raises(OfferNotFound, match="offer 123456 is not available"):
        provider.rent("123456", ssh_public_key=keypair[1], label="x")
    with pytest.raises(OfferNotFound, match="offer id 'x; rm' is not valid"):
        provider.rent("x; rm", ssh_public_key=keypair[1], label="x")
    for hostile in ("../users/current", "1/../2", "1?owner=x"):
        for call in (provider.status, provider.destroy):
            with pytest.raises(UserError, match="rental id .* is not valid"):
                call(hostile)
    assert provider.list_rentals() == [] and owned_rentals(tmp_path / ".mainboard") == []


def test_simulated_provider_bridge_runs_a_job_on_the_rental(
        provider: RestProvider, keypair: tuple[Path, str], tmp_path: Path) -> None:
    state = tmp_path / ".mainboard"
    host = ProviderHost(provider="sim", gpu="SIM_RTX_4090", max_usd_hr=0.5,
                        root=str(tmp_path / "gpu-root"))
    with RentalGuard(provider, state, host="gpu1") as guard:
        offer = provider.cheapest(host.gpu, host.max_usd_hr)
        rental = guard.rent(offer, ssh_public_key=keypair[1], label="mb-test-bridge",
                            max_usd_hr=host.max_usd_hr)
        bridge = ProviderBridge("gpu1", host, rental, identity=str(keypair[0]),
                                known_hosts=known_hosts_for(state, "sim", rental.id))
        job = bridge.submit(command="hostname; ip -4 -o addr show | grep -c 10.77.",
                            name="probe")
        deadline = time.monotonic() + 30
        while not (status := bridge.poll([job])[job.job_id]).final:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
    assert status.state is JobState.COMPLETED, status.describe()
    assert bridge.logs(job).split() == [f"sim-gpu-{rental.id}", "1"]
    pinned = known_hosts_for(state, "sim", rental.id).read_text()
    assert pinned.startswith(f"{rental.ssh_host} ssh-ed25519 ")
    bridge.transport.close()
    guard.destroy(rental.id, "test done")
    with pytest.raises(ProviderError, match=f"rental {rental.id} is destroyed without an ssh"):
        ProviderBridge("gpu1", host, provider.status(rental.id), identity=str(keypair[0]),
                       known_hosts=tmp_path / "kh")


def test_simulated_offer_above_max_usd_hr_refused_before_renting(
        provider: RestProvider, sim: SimulatedProviderServer, keypair: tuple[Path, str],
        tmp_path: Path) -> None:
    before, log_size = provider.balance(), len(sim.log_text())
    guard = RentalGuard(provider, tmp_path / ".mainboard")
    with pytest.raises(PriceLimitExceeded, match=r"offer 9004 \(1x SIM H100 SXM\) costs "
                                                 r"2\.9000 USD/hr, above max_usd_hr = 1"):
        guard.rent("9004", ssh_public_key=keypair[1], label="x", max_usd_hr=1.0)
    assert "PUT /api/v0/asks" not in sim.log_text()[log_size:]  # rent was never called
    assert provider.list_rentals() == [] and provider.balance() == before
    assert not rental_receipts(tmp_path / ".mainboard").path.exists()


def test_simulated_bad_public_key_refused_before_renting(provider: RestProvider) -> None:
    for bad in ("not a key", "ssh-ed25519 AAAA x\nssh-ed25519 BBBB injected",
                'command="sh" ssh-ed25519 AAAA'):
        with pytest.raises(UserError, match="is not one OpenSSH public key line"):
            provider.rent("9001", ssh_public_key=bad, label="x")
    assert provider.list_rentals() == []


def test_simulated_server_crash_rentals_cleaned_by_cleanup_all(
        tmp_path: Path, keypair: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    server = start_simulated_provider(tmp_path / "crashing")
    try:
        monkeypatch.setenv(KEY_ENV, server.api_key)
        adapter = RestProvider("sim", api_url=server.url, api_key_env=KEY_ENV)
        rental = adapter.rent("9001", ssh_public_key=keypair[1], label="mb-test-crash")
        box = server.sandbox(rental.id)
        server.crash()
        assert box["netns"] in sim_net.namespaces() and sim_net.alive(box["pid"])
        cli = [sys.executable, "-m", "mainboard.bridges.providers.simulated"]
        helped = subprocess.run([*cli, "--help"], capture_output=True, text=True, timeout=30)
        assert "SIMULATED GPU provider (a local simulation" in " ".join(helped.stdout.split())
        cleaned = subprocess.run([*cli, "--state", str(server.state), "--cleanup"],
                                 capture_output=True, text=True, timeout=60)
        assert cleaned.stdout.strip() == f"simulated provider: destroyed rentals [{rental.id}]"
        _assert_gone(box)
        assert cleanup_all(server.state) == []
    finally:
        server.stop()


def test_provider_config_bad_inputs_name_key_and_valid_values(tmp_path: Path) -> None:
    cases = [
        (ProviderConfig(kind="lambda", api_key_env="K"), "providers.p.kind: unknown provider "
                                                         "kind (got 'lambda'); valid: vast, "
                                                         "simulated"),
        (ProviderConfig(kind="simulated", api_key_env="K"), "providers.p.api_url: a simulated "
                                                            "provider needs the URL"),
        (ProviderConfig(kind="vast"), "providers.p.api_key_env: no api_key_env"),
        (ProviderConfig(kind="vast", api_key_env="K", api_url="http://gpus.example.com"),
         "providers.p.api_url: plain http would send the API key in clear"),
        (ProviderConfig(kind="vast", api_key_env="K", api_url="ftp://127.0.0.1/x"),
         "providers.p.api_url: not an http(s) URL"),
    ]
    for config, message in cases:
        with pytest.raises(ConfigError) as caught:
            adapter_for("p", config)
        assert message in str(caught.value)
    assert adapter_for("p", ProviderConfig(kind="vast", api_key_env="K")).api_url == \
        "https://console.vast.ai"


def test_provider_unreachable_api_and_unconfigured_owner_are_clear(tmp_path: Path) -> None:
    adapter = RestProvider("down", api_url=f"http://127.0.0.1:{free_port()}",
                           api_key_env="K", env={"K": "secret-value-123"})
    with pytest.raises(ProviderError, match=r"provider down: cannot reach http://127\.0\.0\.1"):
        adapter.balance()
    state = tmp_path / ".mainboard"
    rental_receipts(state).append(RentalCreated(provider="gone", rental_id="7", offer_id="1",
                                                label="x", usd_hr=1.0))
    with pytest.raises(ProviderError, match=r"rental 7: provider 'gone' is not configured "
                                            r"\(configured: down\)"):
        destroy_all_owned(state, {"down": adapter})
    assert [r.rental_id for r in owned_rentals(state)] == ["7"]  # still owned: not forgotten


def test_should_destroy_idle_broken_and_fresh_rentals() -> None:
    def rental(state: str, started: float | None = 1000.0) -> Rental:
        return Rental(id="1", state=state, ssh_host="h", ssh_port=22, ssh_user="root",  # type: ignore[arg-type]
                      usd_hr=1.0, started_at=started)

    assert should_destroy(rental("running"), 1000.0, 600, now=1700.0)
    assert not should_destroy(rental("running"), 1500.0, 600, now=1700.0)
    assert should_destroy(rental("running"), None, 600, now=1700.0)  # idle since start
    assert not should_destroy(rental("pending"), None, 600, now=1100.0)
    assert should_destroy(rental("failed"), 1699.0, 600, now=1700.0)
    assert should_destroy(rental("stopped"), 1699.0, 600, now=1700.0)
    assert not should_destroy(rental("destroyed"), 0.0, 600, now=1700.0)
    with pytest.raises(UserError, match="idle_timeout must be a positive number"):
        should_destroy(rental("running"), None, 0)


def test_simulated_compute_quotes_cheapest_fitting_offer_and_credit(
        sim: SimulatedProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mainboard compute` asks the provider's API (here the simulation): the cheapest offer
    that fits each provider host, the account's credit, and never shows the key."""
    from mainboard.cli.columns import read_columns
    from mainboard.config import load_config
    from mainboard.hosts.compute import list_compute, quote
    from tests.support.boards import write_config
    from tests.support.workspace import run_cli, toml_tables

    monkeypatch.setenv(KEY_ENV, sim.api_key)
    config = write_config(tmp_path, {
        "a100": {"kind": "provider", "provider": "sim", "gpu": "SIM A100 80GB"},
        "cheap-h100": {"kind": "provider", "provider": "sim", "gpu": "SIM H100 SXM",
                       "max-usd-hr": 1.0}},
        extra=toml_tables({"providers.sim": {"kind": "simulated", "api-url": sim.url,
                                             "api-key-env": KEY_ENV},
                           "providers.down": {"kind": "simulated",
                                              "api-url": f"http://127.0.0.1:{free_port()}",
                                              "api-key-env": KEY_ENV}}))
    rows = {row.name: row for row in list_compute(load_config(config), timeout=5.0)}
    assert (rows["sim"].access, rows["sim"].usd_hr) == ("keyed", 0.40)  # SIM RTX 4090, 9001
    assert rows["sim"].credit_usd == pytest.approx(sim.credit(), abs=0.01)
    assert "offer 9001" in rows["sim"].detail
    assert (rows["a100"].access, rows["a100"].usd_hr) == ("ready", 1.60)
    assert rows["a100"].credit_usd is None and "offer 9003" in rows["a100"].detail
    assert rows["cheap-h100"].usd_hr is None and "no offer for gpu=SIM H100 SXM" in \
        rows["cheap-h100"].detail and "2.9000 USD/hr" in rows["cheap-h100"].detail
    down = rows["down"]
    assert (down.access, down.usd_hr, down.credit_usd) == ("keyed", None, None)
    assert "cannot reach" in down.detail
    assert quote(load_config(config), "sim", gpu="SIM RTX 4090", max_usd_hr=0.5).offer.id == "9001"
    agent = run_cli(config, "compute", "--agent", env={KEY_ENV: sim.api_key})
    assert agent.returncode == 0 and sim.api_key not in agent.stdout + agent.stderr
    listed = {r["name"]: r for r in read_columns(agent.stdout.splitlines())}
    assert (listed["sim"]["usd_hr"], listed["sim"]["kind"]) == ("0.4", "simulated")
    assert float(listed["sim"]["credit_usd"] or 0) == pytest.approx(sim.credit(), abs=0.01)
    monkeypatch.delenv(KEY_ENV)
    rows = {row.name: row for row in list_compute(load_config(config), timeout=5.0)}
    assert (rows["sim"].access, rows["sim"].usd_hr, rows["sim"].credit_usd) == \
        ("missing", None, None)
