"""Issue 31.3: no verb and no dashboard API ever shows the broker password or a provider key.

One workspace on a real password-protected redis-server and the LOCAL SIMULATED provider
(its real API key in the variable ``api_key_env`` names). A job and a batch job quote the
broker URL and the key in their commands and print both, so the receipts, the logs and
every listing hold them; then ``jobs``, ``batch``, ``monitor``, ``fleet`` (a real local
worker) and every ``/api/...`` endpoint of a real ``mainboard dashboard`` are looked at:
neither secret shows, and the URL shows as ``redis://:***@host:port/0``. With the broker
down (toml and ``$MAINBOARD_BROKER_URL``) the verbs fail in one redacted line.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.config import load_config
from tests.support.dashboard import start_dashboard, stop_dashboard
from tests.support.jobs_workspace import make_workspace
from tests.support.services import RedisServer, free_port, require, start_redis
from tests.support.sim_provider import SimulatedProviderServer
from tests.support.workspace import run_cli, toml_tables

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
PASSWORD = "Zq9secret" + secrets.token_hex(4)
KEY_ENV = "MB_REDACT_SIM_KEY"
GAUSS = str(Path(__file__).resolve().parents[2] / "examples" / "gauss-8d.toml")


@pytest.fixture(scope="module")
def locked_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server that wants ``PASSWORD``."""
    require("redis-server")
    server = start_redis(tmp_path_factory.mktemp("redact-verbs-redis"), password=PASSWORD)
    yield server
    server.stop()


def _workspace(tmp_path: Path, sim: SimulatedProviderServer, url: str | None) -> Path:
    broker = {"broker": {"url": url}} if url else {}
    return make_workspace(
        tmp_path, extra_hosts={"gpu": {"kind": "provider", "provider": "sim",
                                       "gpu": "SIM RTX 4090", "max_usd_hr": 1.0}},
        extra=toml_tables({**broker, "providers.sim": {"kind": "simulated", "api_url": sim.url,
                                                       "api_key_env": KEY_ENV}}))


class Seen:
    """Every stdout, stderr and API body of the test, checked for both secrets at once."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.texts: list[tuple[str, str]] = []

    def cli(self, config: Path, *args: str, env: dict[str, str] | None = None,
            code: int | None = 0) -> subprocess.CompletedProcess[str]:
        done = run_cli(config, *args, env={KEY_ENV: self.key, **(env or {})}, timeout=120)
        self.texts += [(f"{' '.join(args)} stdout", done.stdout),
                       (f"{' '.join(args)} stderr", done.stderr)]
        assert code is None or done.returncode == code, (args, done.stdout, done.stderr)
        return done

    def body(self, what: str, text: str) -> str:
        self.texts.append((what, text))
        return text

    def assert_clean(self) -> None:
        leaks = [where for where, text in self.texts if PASSWORD in text or self.key in text]
        assert leaks == [], leaks


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(autouse=True)
def _only_the_workspace_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINBOARD_BROKER_URL", raising=False)


def test_no_verb_and_no_dashboard_api_shows_the_broker_password_or_the_provider_key(
        tmp_path: Path, locked_redis: RedisServer, sim: SimulatedProviderServer) -> None:
    url, key = locked_redis.url, sim.api_key
    shown = f"redis://:***@127.0.0.1:{locked_redis.port}/0"
    config = _workspace(tmp_path, sim, url)
    seen = Seen(key)
    quoted = f"echo {url} {key}"  # a command that quotes both (and its output prints them)

    job = seen.cli(config, "submit", "--on", "scratch", "--name", "quoting", "--wait", "--",
                   "sh", "-c", quoted).stdout.split()[0]
    fleet = config.parent / "fleet.toml"
    fleet.write_text(f'[[jobs]]\ntarget = "scratch"\nname = "batch-quoting"\n'
                     f'command = {json.dumps(quoted)}\n')
    seen.cli(config, "batch", "prepare", str(fleet))
    seen.cli(config, "batch", "prepare", str(fleet), "--json")
    batch = seen.cli(config, "batch", "run", str(fleet)).stdout.strip()
    seen.cli(config, "batch", "watch", batch, "--json")  # until its one job is announced
    seen.cli(config, "batch", "show", batch)
    seen.cli(config, "batch", "show", batch, "--json")
    listed = seen.cli(config, "jobs", "list").stdout
    assert "quoting" in listed and "batch-quoting" in listed
    assert shown in seen.cli(config, "jobs", "show", job).stdout
    assert shown in json.dumps(json.loads(seen.cli(config, "jobs", "show", job, "--json").stdout))
    assert seen.cli(config, "jobs", "logs", job).stdout.strip() == f"{shown} ***"
    seen.cli(config, "monitor")
    seen.cli(config, "monitor", "--json")

    up = seen.cli(config, "fleet", "up", "--on", "scratch", "--no-flower", "--json")
    assert json.loads(up.stdout)["started"], up.stdout
    try:
        seen.cli(config, "fleet", "status")
        seen.cli(config, "fleet", "status", "--json")
        dash = start_dashboard(load_config(config), env={KEY_ENV: key})
        try:
            base, token = dash.base, dash.token
            for path in ("runs", "runs-version", "fleet", "jobs", "jobs-version", "broker",
                         "run/no-such-run", "run/no-such-run/version"):
                status, body = _get(f"{base}/api/{path}?token={token}")
                assert status in (200, 404), (path, status, body)
                seen.body(f"/api/{path}", body)
            names = {j["name"] for j in json.loads(seen.texts[-5][1])["jobs"]}  # /api/jobs
            assert names == {"quoting", "batch-quoting"}
            status, logs = _get(f"{base}/jobs/{job}/logs?token={token}")
            assert status == 200 and seen.body("job logs", logs).strip() == f"{shown} ***"
        finally:
            stop_dashboard(dash)
    finally:
        seen.cli(config, "fleet", "down", "--json")
    seen.assert_clean()
    # The job receipts keep the command as typed (the user's own file); the fleet worker's
    # log names its broker, redacted.
    (worker_log,) = (tmp_path / "scratch-root" / ".mainboard" / "jobs").glob("*mb-worker*/stderr")
    logged = worker_log.read_text(errors="replace")
    assert f"Connected to {shown}" in logged and PASSWORD not in logged


@pytest.mark.parametrize("where", ["toml", "env"])
def test_a_broker_that_is_down_is_one_redacted_line_from_every_verb(
        tmp_path: Path, sim: SimulatedProviderServer, where: str) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    config = _workspace(tmp_path, sim, url if where == "toml" else None)
    env = {"MAINBOARD_BROKER_URL": url} if where == "env" else {}
    seen = Seen(sim.api_key)
    needs = [("integrate", GAUSS, "--workers", "1")]
    if where == "toml":  # the fleet's broker is mainboard.toml's (the environment's: runs)
        needs += [("fleet", "status"), ("fleet", "status", "--json"),
                  ("fleet", "up", "--on", "scratch", "--no-flower")]
    for args in needs:
        done = seen.cli(config, *args, env=env, code=None)
        assert done.returncode not in (0, 2) and done.stdout == "", (args, done)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("mainboard: error: ") and "Traceback" not in line, line
    debug = seen.cli(config, "--debug", *needs[-1], env=env, code=None)
    assert "Traceback" in debug.stderr
    for args in (("jobs", "list"), ("monitor", "--json"), ("fleet", "down"), ("runs", "list")):
        seen.cli(config, *args, env=env, code=None)
    checked = seen.cli(config, "config", "check", env=env, code=None)
    if where == "toml":
        assert f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in checked.stdout
    seen.assert_clean()
