"""No secret ever shows: redaction by pattern, and the real CLI given hostile broker URLs.

Every URL below holds a password starting with ``Zq9`` (only there); the CLI tests run
``mainboard`` as a subprocess in a temp workspace whose mainboard.toml (or environment)
holds the URL, and assert that ``Zq9`` is in neither stdout nor stderr.
"""

from __future__ import annotations

import io
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.config.brokerurl import redis_url_problem
from mainboard.errors import ConfigError
from mainboard.redact import (
    RedactingFilter,
    install_log_redaction,
    redact_text,
    redact_url,
    url_secrets,
)
from tests.support.cliserver import run_mainboard
from tests.support.services import RedisServer, require, start_redis

ROOT = Path(__file__).resolve().parents[2]
GAUSS = str(ROOT / "examples" / "gauss-8d.toml")
MARK = "Zq9"  # every password here contains it; nothing else does


# ----- redact_text / redact_url ----------------------------------------------------------------

# (typed, shown): the five typos of the issue, then valid but hostile shapes.
SHAPES = [
    ("redis:/:Zq9a@127.0.0.1:1/0", "redis:/:***@127.0.0.1:1/0"),
    ("redis//:Zq9b@127.0.0.1:6379/0", "redis//:***@127.0.0.1:6379/0"),
    ("redis://127.0.0.1:port?password=Zq9c", "redis://127.0.0.1:port?password=***"),
    ("redis://:Zq9d@127.0.0.1:notaport/0", "redis://:***@127.0.0.1:notaport/0"),
    ("redis://:Zq9e@[::1/0", "redis://:***@[::1/0"),
    ("rediss://u:Zq9f@h:1/0", "rediss://u:***@h:1/0"),
    ("redis://:Zq9%40g@h:6379", "redis://:***@h:6379"),
    ("redis://:Zq9@h:i@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
    ("redis://:Zq9j@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
    ("redis://u:Zq9k@h/0?token=Zq9l&db=1", "redis://u:***@h/0?token=***&db=1"),
    ("redis:Zq9m@h:1", "redis:***@h:1"),
]
BAD_SHAPES = [typed for typed, _ in SHAPES[:5]]


@pytest.mark.parametrize(("typed", "shown"), SHAPES, ids=[s for s, _ in SHAPES])
def test_a_url_keeps_everything_but_its_password(typed: str, shown: str) -> None:
    assert redact_url(typed) == shown
    assert redact_text(f"got {typed!r}; retrying") == f"got {shown!r}; retrying"
    assert redact_text(f"url={typed}\n") == f"url={shown}\n"


@pytest.mark.parametrize("text", [
    "redis://h:1/0", "redis://user@host:6379/0", "celery@node1 ready.",
    "https://registry.npmjs.org/@types/node", "valid: redis://[:PASSWORD@]HOST:PORT/DB",
    "[2024-01-01 12:00:00,123: WARNING/MainProcess] celery@box: Connection refused",
    '  File "/x/tasks/app.py", line 3, in <module>\n    @after_setup_logger.connect',
    "bypass=1 passes=2 compass=3", "Error 111 connecting to 127.0.0.1:1. Connection refused.",
])
def test_other_text_is_left_as_it_is(text: str) -> None:
    assert redact_text(text) == text


def test_passwords_given_by_name_are_hidden_in_any_quoting() -> None:
    text = ("Redis(password='Zq9a', db=0) {'password': 'Zq9b', 'port': 1} "
            'REDIS_PASSWORD=Zq9c {"token": "Zq9d"} pwd=Zq9e&x=1 pass="Zq9f"')
    shown = redact_text(text)
    assert MARK not in shown
    assert "Redis(password='***', db=0) {'password': '***', 'port': 1}" in shown
    assert "pwd=***&x=1" in shown


def test_a_url_on_its_own_hides_even_a_password_with_spaces() -> None:
    assert redact_url("redis://:Zq9 has spaces@h:1/0") == "redis://:***@h:1/0"


def test_exact_secrets_and_url_secrets() -> None:
    assert url_secrets("redis://:Zq9%40x@h:1/0?password=Zq9q") == ["Zq9%40x", "Zq9@x", "Zq9q"]
    assert url_secrets("redis://:Zq9%40x@h:1/0", decoded=False) == ["Zq9%40x"]
    assert url_secrets("redis://h:1/0") == []
    assert redact_text("log says Zq9@x and Zq9q", also=url_secrets(
        "redis://:Zq9%40x@h:1/0?password=Zq9q")) == "log says *** and ***"


# ----- the broker URL check ------------------------------------------------------------------

@pytest.mark.parametrize(("url", "problem"), [
    (BAD_SHAPES[0], "must start with redis://"),
    (BAD_SHAPES[1], "must start with redis://"),
    (BAD_SHAPES[2], "port is not a number"),
    (BAD_SHAPES[3], "port is not a number"),
    (BAD_SHAPES[4], "unbalanced ["),
    ("redis://:Zq9#x@h:1/0", "percent-encode"),
    ("redis://h:70000/0", "out of range"),
    ("redis://h:1/zero", "database"),
    ("amqp://u:Zq9@h//", "not a Redis URL"),
])
def test_malformed_urls_are_named_without_quoting_them(url: str, problem: str) -> None:
    found = redis_url_problem(url)
    assert found is not None and problem in found and MARK not in found


@pytest.mark.parametrize("url", [typed for typed, _ in SHAPES[5:9]] + [
    "redis://h:1/0", "REDIS://h", "redis://", "rediss://h:6380/0?ssl_cert_reqs=required"])
def test_well_formed_urls_pass(url: str) -> None:
    assert redis_url_problem(url) is None


def test_a_config_error_never_quotes_a_password() -> None:
    error = ConfigError("bad", file="f", key="k", value="redis://:Zq9@h:i@h:1/0")
    assert MARK not in str(error) and "(got 'redis://:***@h:1/0')" in str(error)


# ----- logging -------------------------------------------------------------------------------

def test_log_lines_and_tracebacks_of_child_loggers_are_redacted() -> None:
    """The filter sits on the handler, so records propagated from any child pass through it."""
    parent = logging.getLogger(f"mbredact{secrets.token_hex(3)}")
    parent.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    parent.addHandler(handler)
    install_log_redaction(parent)
    install_log_redaction(parent)  # once is enough
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    child = parent.getChild("worker")
    child.warning("connecting to %s", "redis://:Zq9a@h:1/0")
    try:
        raise ConnectionError("Error connecting to redis//:Zq9b@h:1/0")
    except ConnectionError:
        child.exception("lost %s", "rediss://u:Zq9c@h:1/0")
    text = stream.getvalue()
    assert MARK not in text
    assert "connecting to redis://:***@h:1/0" in text and "redis//:***@h:1/0" in text
    assert "Traceback" in text


# ----- the real CLI --------------------------------------------------------------------------

COMMANDS = {
    "config check": ["config", "check"],
    "broker status": ["broker", "status"],
    "fleet status": ["fleet", "status"],
    "runs list": ["runs", "list"],
    "integrate": ["integrate", GAUSS, "--workers", "1"],
}


@dataclass
class Out:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    @property
    def lines(self) -> list[str]:
        return self.text.strip().splitlines()


def mainboard(workspace: Path, *args: str, url_env: str | None = None) -> Out:
    """The real `mainboard` in ``workspace`` (MAINBOARD_* and FLOWER_* of the caller dropped)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAINBOARD_", "FLOWER_"))}
    if url_env is not None:
        env["MAINBOARD_BROKER_URL"] = url_env
    done = run_mainboard(args, cwd=workspace, env=env, timeout=240)
    return Out(done.returncode, done.stdout, done.stderr)


def workspace(directory: Path, url: str | None) -> Path:
    """A workspace whose mainboard.toml sets ``[broker] url`` (when given)."""
    directory.mkdir(parents=True, exist_ok=True)
    broker = f'[broker]\nurl = "{url}"\n' if url else ""
    (directory / "mainboard.toml").write_text(f'[workspace]\nname = "hostile"\n{broker}')
    return directory


@pytest.mark.parametrize("url", BAD_SHAPES, ids=BAD_SHAPES)
def test_a_mistyped_broker_url_is_one_redacted_line_from_every_verb(tmp_path: Path,
                                                                   url: str) -> None:
    ws = workspace(tmp_path, url)
    for name, args in COMMANDS.items():
        out = mainboard(ws, *args)
        assert MARK not in out.text, (name, out.text)
        assert out.code == 2 and out.stdout == "", (name, out)
        assert len(out.lines) == 1 and "Traceback" not in out.text, (name, out.text)
        assert out.lines[0].startswith("mainboard: error: ") and " broker.url: " in out.lines[0]
        assert redact_url(url) in out.lines[0], (name, out.lines[0])  # the user sees the typo
    debug = mainboard(ws, "--debug", *COMMANDS["integrate"])
    assert debug.code == 2 and "Traceback" in debug.stderr and MARK not in debug.text
    from_env = mainboard(workspace(tmp_path, None), *COMMANDS["integrate"], url_env=url)
    assert from_env.code == 2 and len(from_env.lines) == 1 and MARK not in from_env.text
    assert "environment: MAINBOARD_BROKER_URL: " in from_env.lines[0]


@pytest.mark.parametrize("url", [typed for typed, _ in SHAPES[5:8]], ids=lambda u: u)
def test_a_well_formed_url_nobody_answers_is_shown_redacted(tmp_path: Path, url: str) -> None:
    """Verbs that do not need the broker work and show the URL redacted (`broker status`
    exits 3: the embedded broker is not running); those that need it fail in one line
    (the hosts in these URLs do not resolve or refuse: port 1)."""
    ws = workspace(tmp_path, url)
    shown = redact_url(url)
    for name, args in COMMANDS.items():
        out = mainboard(ws, *args)
        assert MARK not in out.text, (name, out.text)
        if name not in ("integrate", "fleet status"):
            assert out.code == (3 if name == "broker status" else 0), (name, out)
            continue
        assert out.code == 1 and len(out.lines) == 1, out
        assert out.lines[0].startswith("mainboard: error: broker connection failed: ")
    assert f"broker: {shown}" in mainboard(ws, *COMMANDS["config check"]).stdout
    assert f"url = {shown};" in mainboard(ws, *COMMANDS["broker status"]).stdout
    debug = mainboard(ws, "--debug", *COMMANDS["integrate"])
    assert debug.code == 1 and "Traceback" in debug.stderr and MARK not in debug.text


@pytest.fixture(scope="module")
def at_colon_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server whose password holds both ``@`` and ``:``."""
    require("redis-server")
    server = start_redis(tmp_path_factory.mktemp("redact-redis"), password="Zq9@pw:x")
    yield server
    server.stop()


def test_a_password_with_at_and_colon_works_and_never_shows(tmp_path: Path,
                                                            at_colon_redis: RedisServer) -> None:
    right = at_colon_redis.url
    assert "Zq9@pw:x" in right
    wrong = right.replace("Zq9@pw:x", "Zq9@no:pe")
    refused = mainboard(workspace(tmp_path / "wrong", wrong), *COMMANDS["integrate"])
    assert refused.code == 1 and len(refused.lines) == 1 and MARK not in refused.text, refused
    assert "broker connection failed" in refused.lines[0]
    ws = workspace(tmp_path / "right", right)
    done = mainboard(ws, *COMMANDS["integrate"], "--max-samples", "200000")
    assert done.code == 0 and "estimate" in done.stdout, done
    assert MARK not in done.text
    shown = mainboard(ws, "config", "check")
    assert f"broker: redis://:***@127.0.0.1:{at_colon_redis.port}/0" in shown.stdout
    for log in (ws / ".mainboard").rglob("*.log"):  # the local worker's log, among others
        assert MARK not in log.read_text(errors="replace"), log


def test_a_worker_log_never_shows_a_url_password(tmp_path: Path,
                                                 redis_server: RedisServer) -> None:
    """A task that fails on a URL-bearing argument: Celery logs the error and traceback
    through handlers that carry the RedactingFilter (installed by tasks/app.py's signals)."""
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    queue = f"mbredact-{secrets.token_hex(3)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAINBOARD_", "FLOWER_"))}
    env["MAINBOARD_BROKER_URL"] = redis_server.url
    log = tmp_path / "worker.log"
    with open(log, "wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "mainboard.tasks.app", "worker", "-P", "solo",
             "-n", f"{queue}@{socket.gethostname()}", "-Q", queue, "-I", "mainboard.tasks.fleet",
             "--without-mingle", "--without-gossip", "-l", "info"],
            cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
    app = make_app(broker_url=redis_server.url)
    try:
        result = app.send_task(PROBE_TASK, kwargs={"sleep_s": "redis://:Zq9w@h:1/0"}, queue=queue)
        result.get(timeout=120, propagate=False)
        assert result.failed()
    finally:
        worker.terminate()
        worker.wait(30)
        app.close()
    text = log.read_text(errors="replace")
    assert "ValueError" in text and "redis://:***@h:1/0" in text, text[-3000:]
    assert MARK not in text


def test_every_warning_line_goes_through_the_one_redaction(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """jobs, batch, study, monitor and fleet warn through `common.warn`: a warning that quotes
    a broker URL shows no password, and no verb echoes a warning of its own."""
    from mainboard.cli import common

    secret = "s3cr3t-" + secrets.token_hex(4)
    common.warn(f"receipt line 3 unreadable: redis://worker:{secret}@10.0.0.1:6379/0 refused")
    err = capsys.readouterr().err
    assert err.startswith("mainboard: warning: ") and secret not in err and "worker" in err
    cli = Path(__file__).resolve().parents[2] / "mainboard" / "cli"
    echoed = [f"{path.name}:{n}" for path in sorted(cli.glob("*.py")) if path.name != "common.py"
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if 'mainboard: warning: {' in line]
    assert echoed == [], echoed


def test_a_loaded_workspace_hands_its_exact_secrets_to_the_one_redaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider key has no pattern: loading the config that names its variable is what
    makes every later redact_text (warnings, errors, log lines) hide it."""
    from mainboard.config import load_config, workspace_secrets

    key = "Zq9key" + secrets.token_hex(8)
    monkeypatch.setenv("MB_REDACT_UNIT_KEY", key)
    monkeypatch.setenv("MAINBOARD_BROKER_URL", "redis://:Zq9envpw@127.0.0.1:1/0")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text(
        '[broker]\nurl = "redis://:Zq9tomlpw@127.0.0.1:1/0"\n'
        '[providers.sim]\nkind = "simulated"\napi_url = "http://127.0.0.1:1"\n'
        'api_key_env = "MB_REDACT_UNIT_KEY"\n')
    config = load_config(ws / "mainboard.toml")
    assert set(workspace_secrets(config)) >= {key, "Zq9tomlpw", "Zq9envpw"}
    shown = redact_text(f"provider said: bad key {key}; Zq9tomlpw alone")
    assert shown == "provider said: bad key ***; *** alone"
