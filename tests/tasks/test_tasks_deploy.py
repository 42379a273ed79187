"""The deploy files as shipped: systemd units, compose.yaml, Dockerfile and .dockerignore.

Without services: each unit's ExecStart is expanded as systemd expands it (checked against
systemd itself, which also verifies every unit), then parsed by Celery's own command line,
whose ``--hostname`` type must give a valid node name. compose.yaml is read with PyYAML and
interpolated from the example env file as Compose does. .dockerignore is matched with
Docker's rules, checked against a real ``podman build``.

Live: the worker commands run as written (systemd specifiers expanded, venv path
substituted), without ``-I``, against a password-protected redis-server. They must know
every mainboard task, serve exactly their queue, take stage tasks and
``mainboard.tasks.integrate`` by the app's routes, and refuse a pickled message on the real
batch queue: logged, not executed, not requeued, worker still serving. Compose's Redis
command and healthcheck run in a private network namespace; its Flower does not start
without basic auth and asks for it on every page.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import posixpath
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from celery import Celery
from celery.utils.nodenames import nodesplit

import mainboard.tasks.integrate  # noqa: F401 - registers the task with the client's app
from mainboard import keys
from mainboard.config.brokerurl import redis_url_problem
from mainboard.tasks import BATCH_QUEUE, COORDINATOR_QUEUE, STAGE_PREFIX, STAGE_TASKS
from mainboard.tasks import INTEGRATE_TASK as TASK_NAME
from mainboard.tasks.app import BROKER_URL_ENV, TASK_ROUTES, make_app
from tests.support.pickles import PICKLE, TouchOnUnpickle
from tests.support.services import RedisServer, free_port, require, start_redis, wait_port
from tests.support.waiting import answered

live = pytest.mark.live
REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
COMPOSE = REPO / "compose.yaml"
ENV_EXAMPLE = REPO / "deploy" / "compose.env.example"
INSTALLED = "/opt/mainboard"  # where the units and the image (Dockerfile WORKDIR) keep this repo
CELERY = f"{INSTALLED}/.venv/bin/celery"
TASKS = {STAGE_PREFIX + name for name in STAGE_TASKS} | {TASK_NAME}
SAFE_WORD = re.compile(r"^[A-Za-z0-9_.-]+$")
HOST = socket.gethostname()  # what systemd's %H and Celery's %h both resolve to


# ---- systemd: specifiers as PID 1 expands them, then Celery's own command line ----------

INSTANCE = "gpu-0"  # a template's instance as an operator names it (the "-" matters to %I)
WORKER_NODES = {"mainboard-worker@gpu-0.service": f"batch-gpu-0@{HOST}",
                "mainboard-coordinator.service": f"coordinator@{HOST}"}


def unit_names(instance: str = INSTANCE) -> list[str]:
    """Every unit of deploy/systemd as systemd loads it (a template with ``instance``)."""
    return [p.name.replace("@.", f"@{instance}.") for p in sorted(UNITS.glob("*.service"))]


def unit_file(unit: str) -> Path:
    """The file behind a unit name: ``x@i.service`` is loaded from ``x@.service``."""
    return UNITS / re.sub(r"@[^.]*\.", "@.", unit)


def exec_start(unit: str) -> str:
    """The unit's one ExecStart value, as written."""
    lines = [x for x in unit_file(unit).read_text().splitlines() if x.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return lines[0].removeprefix("ExecStart=")


def _unescape(text: str) -> str:
    """systemd's unit-name unescaping (for %I, %P): ``-`` is ``/``, ``\\xHH`` that byte."""
    return re.sub(r"-|\\x([0-9a-fA-F]{2})",
                  lambda m: chr(int(m.group(1), 16)) if m.group(1) else "/", text)


def systemd_expand(text: str, unit: str) -> str:
    """``text`` with its specifiers resolved as the system manager does for ``unit``
    (systemd's specifier.c): ``%%`` is ``%``, a trailing ``%`` stays, and a specifier not
    modelled here fails (systemd refuses a line with an unknown one)."""
    name = unit.rpartition(".")[0]
    prefix, _, instance = name.partition("@")
    table = {"n": unit, "N": name, "p": prefix, "P": _unescape(prefix), "i": instance,
             "I": _unescape(instance), "H": HOST, "l": HOST.split(".")[0], "h": "/root",
             "u": "root", "%": "%"}

    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key and key not in table:
            raise ValueError(f"{unit}: specifier %{key} in {text!r} is not modelled here")
        return table[key] if key else "%"
    return re.sub(r"%(.?)", one, text, flags=re.S)


def unit_argv(unit: str, text: str | None = None) -> list[str]:
    """The argv systemd starts for ``unit`` (or for ``text`` in its place). The line holds
    no quotes, ``$`` or backslashes, so systemd's word splitting is plain whitespace."""
    line = exec_start(unit) if text is None else text
    assert not set(line) & set("\"'$\\"), line
    return shlex.split(systemd_expand(line, unit))


def celery_parse(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse a shipped ``celery ...`` argv with Celery's own click commands, without running
    it: each option's type converts its value (``--hostname`` through Celery's
    ``host_format(default_nodename(value))``). Returns the subcommand and its parameters."""
    import importlib

    from celery.bin.base import CLIContext
    from celery.bin.celery import celery

    at = next(i for i, word in enumerate(argv) if i and word in celery.commands)
    top = celery.make_context("celery", argv[1:at])
    # The -A module must import; its `app` is not built here: building it resolves the
    # broker, which in the checkout would start an embedded Redis under ./.mainboard.
    module, _, attr = str(top.params["app"]).partition(":")
    assert hasattr(importlib.import_module(module), "get_app") and attr in ("", "app")
    obj = CLIContext(app=Celery("parse", set_as_current=False), no_color=True, workdir=None)
    command = celery.commands[argv[at]]
    return argv[at], command.make_context(argv[at], argv[at + 1:], parent=top, obj=obj).params


def in_repo(path: str) -> Path:
    """An installed path (under /opt/mainboard) as the file in this repo."""
    assert path.startswith(INSTALLED + "/"), path
    return REPO / path.removeprefix(INSTALLED + "/")


@pytest.mark.parametrize("unit", unit_names())
def test_each_unit_starts_celery_with_a_valid_node_name(unit: str) -> None:
    argv = unit_argv(unit)
    assert argv[0] == CELERY
    command, params = celery_parse(argv)
    if command == "worker":
        node = params["hostname"]
        assert node == WORKER_NODES[unit]
        name, host = nodesplit(node)
        assert SAFE_WORD.match(name) and SAFE_WORD.match(host), node
    else:
        assert command == "flower" and unit not in WORKER_NODES
        conf = [a for a in params["tornado_argv"] if a.startswith("--conf=")]
        assert len(conf) == 1 and in_repo(conf[0].removeprefix("--conf=")).is_file()
    assert set(WORKER_NODES) <= set(unit_names())


def test_template_instances_get_their_own_node_names() -> None:
    nodes = {celery_parse(unit_argv(f"mainboard-worker@{i}.service"))[1]["hostname"]
             for i in ("1", "2", "gpu0")}
    assert nodes == {f"batch-{i}@{HOST}" for i in ("1", "2", "gpu0")}


def test_the_check_catches_the_old_line_and_a_bare_h() -> None:
    """Both wrong spellings fail it: ``%%H`` (as shipped before) reaches Celery as ``%H``,
    which it refuses; a bare ``%h`` is systemd's home directory, not a host name."""
    unit = "mainboard-worker@gpu-0.service"
    line = exec_start(unit)
    assert "--hostname=batch-%i@%%h" in line
    with pytest.raises(ValueError, match="Unknown format %H in string 'batch-gpu-0@%H'"):
        celery_parse(unit_argv(unit, line.replace("%%h", "%%H")))
    node = celery_parse(unit_argv(unit, line.replace("%%h", "%h")))[1]["hostname"]
    assert node == "batch-gpu-0@/root" and not SAFE_WORD.match(nodesplit(node)[1])


@pytest.fixture(scope="module")
def systemd_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file-system root with the units installed and an executable where celery goes."""
    require("systemd-analyze", "apt-get install systemd")
    root = tmp_path_factory.mktemp("systemd-root")
    (root / "etc/systemd/system").mkdir(parents=True)
    for path in UNITS.glob("*.service"):
        shutil.copy(path, root / "etc/systemd/system" / path.name)
    stand_in = root / CELERY.lstrip("/")
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    return root


def analyze(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze --root=ROOT ARGS`` (offline: no systemd running is needed)."""
    return subprocess.run([require("systemd-analyze"), f"--root={root}", *args],
                          capture_output=True, text=True, timeout=60)


def systemd_says(root: Path, unit: str, text: str) -> str:
    """systemd's own expansion of ``text`` for ``unit``: put in a ConditionEnvironment= of
    the installed unit (resolved with the same specifier table as ExecStart=), it comes
    back resolved from ``systemd-analyze condition``."""
    path = root / "etc/systemd/system" / unit_file(unit).name
    original = path.read_text()
    path.write_text(original.replace("[Unit]\n", f"[Unit]\nConditionEnvironment=!MB_PROBE={text}\n",
                                     1))
    try:
        result = analyze(root, "condition", f"--unit={unit}")
    finally:
        path.write_text(original)
    said = re.search(r"ConditionEnvironment=!MB_PROBE=(.*) (?:succeeded|failed)\.$",
                     result.stdout + result.stderr, re.M)
    assert said, result
    return said.group(1)


def test_systemd_verifies_every_unit(systemd_root: Path) -> None:
    # --recursive-errors=no: the units' own files only (sysinit.target is not in this root)
    result = analyze(systemd_root, "verify", "--man=no", "--recursive-errors=no",
                     *unit_names())
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result


@pytest.mark.parametrize("unit", unit_names())
def test_systemd_expands_each_unit_as_this_test_does(systemd_root: Path, unit: str) -> None:
    as_root = "%h %u " if os.geteuid() == 0 else ""  # the manager's user: root
    probe = f"%n %N %p %P %i %I %H %l {as_root}%%H %%h 50%% ends in %"
    for text in (exec_start(unit), probe):
        assert systemd_says(systemd_root, unit, text) == systemd_expand(text, unit)


# ---- compose.yaml: PyYAML, then Compose's interpolation from the example env file --------

_VARIABLE = re.compile(r"\$(?:(\$)|\{([A-Za-z_]\w*)(?:(:?[-?+])([^}]*))?\}|([A-Za-z_]\w*))")


class ComposeError(Exception):
    """What Compose stops with: a required variable without a value."""


def env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file (comments and blank lines skipped)."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's interpolation of every string value (keys stay): ``$$`` is ``$``; ``$X``,
    ``${X}``, ``${X-default}``, ``${X+alternative}``; ``${X?error}`` stops when X is unset;
    with ``:`` (``${X:-d}``, ``${X:?e}``...) an empty X counts as unset."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        dollar, name, operator, argument, bare = match.groups()
        if dollar:
            return "$"
        given = env.get(name or bare)
        unset = given is None or (given == "" and (operator or "").startswith(":"))
        kind = (operator or "")[-1:]
        if kind == "?" and unset:
            raise ComposeError(f"required variable {name} is missing a value: {argument}")
        if kind == "-" and unset:
            return str(argument)
        if kind == "+":
            return "" if unset else str(argument)
        return given or ""
    return _VARIABLE.sub(one, value)


def compose(env: Mapping[str, str]) -> dict[str, Any]:
    """compose.yaml as Compose reads it: YAML (anchors, ``<<`` merges), then interpolated."""
    model = interpolate(yaml.safe_load(COMPOSE.read_text()), env)
    assert isinstance(model, dict)
    return model


def test_compose_starts_nothing_before_redis_is_healthy() -> None:
    services = compose(env_file(ENV_EXAMPLE))["services"]
    health = services["redis"]["healthcheck"]
    assert health["test"][0] == "CMD-SHELL" and "redis-cli ping" in health["test"][1]
    assert {"interval", "timeout", "retries", "start_period"} <= set(health)
    assert set(services) == {"redis", "worker", "coordinator", "flower", "cli"}
    for name in set(services) - {"redis"}:
        assert services[name]["depends_on"] == {"redis": {"condition": "service_healthy"}}, name


def test_compose_secrets_come_from_the_env_file_and_stay_off_command_lines() -> None:
    example = env_file(ENV_EXAMPLE)
    assert set(example) == {"MAINBOARD_REDIS_PASSWORD", "FLOWER_BASIC_AUTH"}
    assert all("placeholder-not-a-secret" in value for value in example.values())
    text = COMPOSE.read_text()
    assert not any(value in text for value in example.values())
    assert {m.group(2) or m.group(5) for m in _VARIABLE.finditer(text) if not m.group(1)} \
        == set(example)  # the example names every variable compose.yaml reads
    for name in example:  # each is required: no default password, Compose stops without it
        with pytest.raises(ComposeError, match=f"required variable {name} .*compose.env.example"):
            compose({k: v for k, v in example.items() if k != name})
    services = compose(example)["services"]
    password = example["MAINBOARD_REDIS_PASSWORD"]
    url = f"redis://:{password}@redis:6379/0"
    assert redis_url_problem(url) is None
    for name in set(services) - {"redis"}:
        assert services[name]["environment"]["MAINBOARD_BROKER_URL"] == url, name
    assert services["redis"]["environment"] == {"MAINBOARD_REDIS_PASSWORD": password}
    assert "ports" not in services["redis"]
    for name, service in services.items():
        assert password not in json.dumps([service.get("command"), service.get("entrypoint"),
                                           service.get("healthcheck")]), name


def test_compose_flower_needs_basic_auth_and_is_published_on_loopback_only() -> None:
    example = env_file(ENV_EXAMPLE)
    flower = compose(example)["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == example["FLOWER_BASIC_AUTH"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    command, params = celery_parse(flower["command"])
    conf = [a.removeprefix("--conf=") for a in params["tornado_argv"] if a.startswith("--conf=")]
    assert command == "flower" and len(conf) == 1 and in_repo(conf[0]).is_file()
    assert not DockerIgnore.of(REPO).excludes(str(in_repo(conf[0]).relative_to(REPO)))


def test_dockerfile_copies_this_repo_where_compose_and_the_units_expect_it() -> None:
    lines = [x.strip() for x in (REPO / "Dockerfile").read_text().splitlines()
             if x.strip() and not x.startswith("#")]
    assert f"WORKDIR {INSTALLED}" in lines and "COPY . ." in lines


# ---- .dockerignore: Docker's matching rules, checked against a real podman build --------

class DockerIgnore:
    """.dockerignore as Docker and BuildKit read it (moby/patternmatcher): each pattern is
    matched against the path from the context root (``*`` and ``?`` stop at ``/``, ``**``
    crosses it) or against any of its parent folders; the last line that matches decides,
    and ``!`` lines take paths back in."""

    def __init__(self, text: str) -> None:
        self.rules: list[tuple[bool, str, str, re.Pattern[str] | None]] = []
        for raw in text.splitlines():
            line = raw.strip()
            if raw.startswith("#") or not line:
                continue
            keep = line.startswith("!")
            pattern = posixpath.normpath(line.removeprefix("!").strip())
            pattern = pattern[1:] if len(pattern) > 1 and pattern.startswith("/") else pattern
            self.rules.append((keep, pattern, *self._compile(pattern)))

    @classmethod
    def of(cls, context: Path) -> DockerIgnore:
        """The rules of ``context/.dockerignore``."""
        return cls((context / ".dockerignore").read_text())

    @staticmethod
    def _compile(pattern: str) -> tuple[str, re.Pattern[str] | None]:
        """(kind, regex) as patternmatcher.go compiles: exact, prefix (``a/**``), suffix
        (``**/a``) or regexp (anything with a wildcard after that)."""
        regex, kind, i, step = "^", "exact", 0, 0
        while i < len(pattern):
            ch, i = pattern[i], i + 1
            if ch == "*" and pattern.startswith("*", i):
                i += 2 if pattern.startswith("*/", i) else 1
                if i >= len(pattern):
                    kind, regex = ("prefix", regex) if kind == "exact" else ("regexp", regex + ".*")
                else:
                    kind, regex = "regexp", regex + "(.*/)?"
                kind = "suffix" if step == 0 else kind
            elif ch in "*?":
                kind, regex = "regexp", regex + ("[^/]*" if ch == "*" else "[^/]")
            elif ch in ".+()|{}$":
                regex += "\\" + ch
            elif ch == "\\" and i < len(pattern):
                kind, regex, i = "regexp", regex + "\\" + pattern[i], i + 1
            elif ch in "[]":
                kind, regex = "regexp", regex + ch
            else:
                regex += "\\\\" if ch == "\\" else ch
            step += 1
        return kind, re.compile(regex + "$") if kind == "regexp" else None

    @staticmethod
    def _match(pattern: str, kind: str, regex: re.Pattern[str] | None, path: str) -> bool:
        if kind == "exact":
            return path == pattern
        if kind == "prefix":
            return path.startswith(pattern[:-2])
        if kind == "suffix":
            suffix = pattern[2:]
            return path.endswith(suffix) or (suffix.startswith("/") and path == suffix[1:])
        return bool(regex and regex.match(path))

    def excludes(self, path: str) -> bool:
        """True when ``path`` (relative, with ``/``) stays out of the build context."""
        parents = posixpath.dirname(path).split("/") if "/" in path else []
        excluded = False
        for keep, pattern, kind, regex in self.rules:
            if keep != excluded:
                continue
            match = self._match(pattern, kind, regex, path) or any(
                self._match(pattern, kind, regex, "/".join(parents[:n + 1]))
                for n in range(len(parents)))
            if match:
                excluded = not keep
        return excluded

    def context(self, root: Path) -> set[str]:
        """The files of ``root`` that ``COPY . .`` takes (excluded folders are not walked,
        as Docker does when no ``!`` line could take something in them back)."""
        assert not any(keep for keep, *_ in self.rules)
        sent: set[str] = set()
        for here, dirs, files in os.walk(root):
            rel = Path(here).relative_to(root).as_posix()
            prefix = "" if rel == "." else rel + "/"
            dirs[:] = [d for d in dirs if not self.excludes(prefix + d)]
            sent.update(prefix + f for f in files if not self.excludes(prefix + f))
        return sent


KEPT_OUT = [
    ".venv/bin/python", ".venv/lib/python3.11/site-packages/celery/__init__.py",
    ".mainboard/broker.secret", ".mainboard/runs/r1/log.ndjson", "examples/.mainboard/x.json",
    ".git/config", ".git/objects/ab/cdef", ".env", "deploy/.env", "alone.secret",
    "tests/__pycache__/test_x.cpython-311.pyc", "mainboard/__pycache__/ids.cpython-311.pyc",
    "integrators/stray.pyc", "tests/.pytest_cache/v/x", ".pytest_cache/README.md",
    ".ruff_cache/0.6/123", ".mypy_cache/3.11/x.json", "mainboard.egg-info/PKG-INFO",
    "build/lib/mainboard/ids.py", "dist/mainboard-0.1.0.tar.gz", "slurm-42.out",
    "tests/slurm-7.out", ".coverage", ".coverage.vm.1", "htmlcov/index.html",
]
KEPT_IN = [
    "pyproject.toml", "README.md", "LICENSE", "Dockerfile", "compose.yaml", ".dockerignore",
    "mainboard/__init__.py", "mainboard/config/models.py", "bridges/base.py", "tasks/app.py",
    "integrators/samplers.py", "deploy/flowerconfig.py", "deploy/compose.env.example",
    "deploy/systemd/mainboard-worker@.service", "tests/config/test_config.py",
    "examples/gauss-8d.toml", "mainboard/envs.py", "docs/secret-handling.md", "builds.txt",
    "examples/slurm-notes.md", "deploy/dot.env.example",
]


@pytest.mark.parametrize("path", KEPT_OUT)
def test_dockerignore_keeps_out(path: str) -> None:
    assert DockerIgnore.of(REPO).excludes(path)


@pytest.mark.parametrize("path", KEPT_IN)
def test_dockerignore_keeps_in(path: str) -> None:
    assert not DockerIgnore.of(REPO).excludes(path)


def test_podman_build_copies_exactly_what_the_matcher_says(tmp_path: Path) -> None:
    """A real build (``FROM scratch``, ``COPY . /ctx/``: no image, no network, no run) of a
    context holding every path above, with this repo's .dockerignore."""
    podman = require("podman")
    context = tmp_path / "ctx"
    for path in KEPT_OUT + KEPT_IN:
        (context / path).parent.mkdir(parents=True, exist_ok=True)
        (context / path).write_text(path)
    shutil.copy(REPO / ".dockerignore", context / ".dockerignore")
    (tmp_path / "Containerfile").write_text("FROM scratch\nCOPY . /ctx/\n")
    out = tmp_path / "out"
    with tempfile.TemporaryDirectory(prefix="mb-podman-") as state:  # runroot: < 50 characters
        result = subprocess.run(
            [podman, "--root", f"{state}/storage", "--runroot", f"{state}/run",
             "--storage-driver", "vfs", "build", "-q", "--network=none", "-o",
             f"type=local,dest={out}", "-f", str(tmp_path / "Containerfile"), str(context)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "TMPDIR": state})
    assert result.returncode == 0, result.stderr
    copied = {p.relative_to(out / "ctx").as_posix() for p in (out / "ctx").rglob("*")
              if p.is_file()}
    assert copied == DockerIgnore.of(context).context(context)
    assert copied == set(KEPT_IN)


def test_the_build_context_of_this_tree_has_no_secret_state_or_artifact() -> None:
    ignore = DockerIgnore.of(REPO)
    sent = ignore.context(REPO)
    banned = {".venv", ".git", ".mainboard", ".env", "__pycache__", ".pytest_cache",
              ".ruff_cache"}
    assert not [p for p in sent if banned & set(p.split("/")) or p.endswith((".pyc", ".secret"))]
    # and it has all that `pip install .` reads: the packages' files, readme, licence
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    needed = {p for p in tracked if p.split("/")[0] in folders and (REPO / p).exists()}
    project = pyproject["project"]
    needed |= {"pyproject.toml", project["readme"], *project.get("license-files", []),
               "deploy/flowerconfig.py"}
    assert needed - sent == set()


# ---- live: compose's Redis and Flower as written ----------------------------------------

def _session_cmdlines(session: int) -> list[str]:
    """The command lines of every process in one session (read from /proc)."""
    lines = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:
                lines.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue
    return lines


@live
def test_compose_redis_command_and_healthcheck_run_as_written(tmp_path: Path) -> None:
    """In a private network namespace (port 6379 is its own): the healthcheck passes with
    the password from the env file only, and the password is on no command line."""
    for program in ("redis-server", "redis-cli", "unshare", "nsenter", "ip"):
        require(program)
    redis_service = compose(env_file(ENV_EXAMPLE))["services"]["redis"]
    env = {"PATH": os.environ["PATH"], **redis_service["environment"]}
    server = subprocess.Popen(
        ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
         *redis_service["command"]], cwd=tmp_path, env=env, start_new_session=True,
        stdout=(tmp_path / "redis.log").open("wb"), stderr=subprocess.STDOUT)

    def healthy(password: str | None) -> bool:
        check_env = {k: v for k, v in env.items() if password or k == "PATH"}
        check_env.update({"MAINBOARD_REDIS_PASSWORD": password} if password else {})
        return subprocess.run(
            ["nsenter", f"--net=/proc/{server.pid}/ns/net", "sh", "-c",
             redis_service["healthcheck"]["test"][1]], env=check_env, capture_output=True,
            timeout=10).returncode == 0

    try:
        deadline = time.monotonic() + 15
        while not healthy(env["MAINBOARD_REDIS_PASSWORD"]):
            assert server.poll() is None, (tmp_path / "redis.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "redis.log").read_text()
            time.sleep(0.1)
        assert not healthy("wrong-password") and not healthy(None)
        running = _session_cmdlines(server.pid)
        assert any("redis-server" in line for line in running), running
        assert not any(env["MAINBOARD_REDIS_PASSWORD"] in line for line in running), running
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)


def _get(url: str, auth: str | None = None) -> int:
    """The HTTP status of GET ``url`` (with basic auth ``user:password`` if given)."""
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@live
def test_compose_flower_needs_basic_auth_on_every_page(broker: RedisServer) -> None:
    example = env_file(ENV_EXAMPLE)
    command = compose(example)["services"]["flower"]["command"]
    port = free_port()
    argv = [sys.executable, "-m", *[f"--conf={in_repo(a.removeprefix('--conf='))}"
                                    if a.startswith("--conf=") else a for a in command],
            "--address=127.0.0.1", f"--port={port}"]  # later flags win: loopback, free port
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLOWER_") and k != "MAINBOARD_CONFIG"}
    env.update({BROKER_URL_ENV: broker.url, "PYTHONPATH": str(REPO)})
    refused = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "FLOWER_BASIC_AUTH is not set" in refused.stderr
    auth = example["FLOWER_BASIC_AUTH"]
    flower = subprocess.Popen(argv, cwd=REPO, env={**env, "FLOWER_BASIC_AUTH": auth},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        wait_port("127.0.0.1", port, timeout=60)
        base = f"http://127.0.0.1:{port}"
        for page in ("/", "/workers", "/api/workers", "/metrics", "/healthcheck"):
            assert _get(base + page) == 401, page
            assert _get(base + page, "mainboard:wrong") == 401, page
        assert _get(base + "/", auth) == 200 and _get(base + "/healthcheck", auth) == 200
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(20)


# ---- live: the shipped worker commands, run for real -------------------------------------

def compose_command(service: str) -> list[str]:
    """The ``command:`` of one compose.yaml service, as Compose passes it."""
    command = compose(env_file(ENV_EXAMPLE))["services"][service]["command"]
    assert isinstance(command, list)
    return command


def runnable(command: list[str], node: str | None = None) -> list[str]:
    """A shipped ``celery ...`` command as this venv runs it; ``node`` names it if it does not."""
    assert Path(command[0]).name == "celery", command
    assert "-I" not in command and not any(c.startswith("--include") for c in command)
    out = [sys.executable, "-m", "celery", *command[1:], "--without-mingle", "--without-gossip"]
    return out + ["-n", node] if node else out


@dataclass
class Deployed:
    """One shipped worker command running for real."""

    name: str
    queue: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = start_redis(tmp_path_factory.mktemp("redis-deploy"), password=secrets.token_hex(16))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployed(broker: RedisServer, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, Deployed]]:
    tag = uuid.uuid4().hex[:6]
    commands = {
        "compose worker": (runnable(compose_command("worker"), f"cw-{tag}@%h"),
                           f"cw-{tag}@{HOST}", BATCH_QUEUE),
        "compose coordinator": (runnable(compose_command("coordinator"), f"cc-{tag}@%h"),
                                f"cc-{tag}@{HOST}", COORDINATOR_QUEUE),
        "unit worker": (runnable(unit_argv(f"mainboard-worker@{tag}.service")),
                        f"batch-{tag}@{HOST}", BATCH_QUEUE),
        "unit coordinator": (runnable(unit_argv("mainboard-coordinator.service")),
                             f"coordinator@{HOST}", COORDINATOR_QUEUE),
    }
    logs = tmp_path_factory.mktemp("deployed")
    env = {**os.environ, BROKER_URL_ENV: broker.url, "PYTHONPATH": str(REPO)}
    env.pop("MAINBOARD_CONFIG", None)
    running: dict[str, Deployed] = {}
    try:
        for label, (command, name, queue) in commands.items():
            log = logs / f"{label.replace(' ', '-')}.log"
            with log.open("wb") as sink:
                proc = subprocess.Popen(command, cwd=logs, env=env, stdout=sink,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            running[label] = Deployed(name, queue, proc, log)
        deadline = time.monotonic() + 90
        for label, worker in running.items():
            while f"{worker.name} ready." not in worker.text():
                assert worker.proc.poll() is None, f"{label} exited:\n{worker.text()[-3000:]}"
                assert time.monotonic() < deadline, f"{label} not ready:\n{worker.text()[-3000:]}"
                time.sleep(0.1)
        yield running
    finally:
        for worker in running.values():
            if worker.proc.poll() is None:
                os.killpg(worker.proc.pid, signal.SIGTERM)
        for worker in running.values():
            try:
                worker.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.proc.pid, signal.SIGKILL)
                worker.proc.wait(5)


@pytest.fixture(scope="module")
def client(broker: RedisServer) -> Iterator[Celery]:
    import mainboard.tasks.stages  # noqa: F401 - the stage tasks, as a pipeline would import

    app = make_app(broker_url=broker.url)
    yield app
    app.close()


@live
def test_shipped_workers_know_every_task_and_serve_only_their_queue(
        deployed: dict[str, Deployed], client: Celery) -> None:
    names = [w.name for w in deployed.values()]
    registered = answered(lambda rest: client.control.inspect(
        destination=rest, timeout=5).registered(), names, 90, "every worker's tasks")
    queues = answered(lambda rest: client.control.inspect(
        destination=rest, timeout=5).active_queues(), names, 90, "every worker's queues")
    for label, worker in deployed.items():
        assert TASKS <= set(registered[worker.name]), (label, registered[worker.name])
        assert [q["name"] for q in queues[worker.name]] == [worker.queue], label


@live
def test_routes_send_stage_and_integrate_tasks_to_their_queues(
        deployed: dict[str, Deployed], client: Celery) -> None:
    router = client.amqp.router
    assert client.conf.task_routes == TASK_ROUTES
    for name in TASKS:
        want = COORDINATOR_QUEUE if name == TASK_NAME else BATCH_QUEUE
        assert router.route({}, name)["queue"].name == want, name
    # a stage task sent with no queue reaches a batch worker (and finds no such run)
    out = client.tasks[STAGE_PREFIX + "sample"].delay("no-such-run", 0, 0, 10).get(timeout=30)
    assert out["stored"] is False and "not defined in this broker" in out["skipped"]
    # the integrate task reaches a coordinator worker, which refuses a bad run dict
    sent = client.tasks[TASK_NAME].delay({"name": "bad"})
    with pytest.raises(Exception, match="<run dict>: seed: missing required key"):
        sent.get(timeout=60)
    coordinators = [w for w in deployed.values() if w.queue == COORDINATOR_QUEUE]
    assert any(f"{TASK_NAME}[{sent.id}] received" in w.text() for w in coordinators)


@live
def test_a_pickled_message_on_the_batch_queue_is_refused(
        deployed: dict[str, Deployed], client: Celery, broker: RedisServer,
        tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    task_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": STAGE_PREFIX + "sample", "id": task_id, "root_id": task_id,
               "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
               "timelimit": [None, None], "argsrepr": "(...)", "kwargsrepr": "{}",
               "origin": "attacker"}
    body = pickle.dumps(((TouchOnUnpickle(marker),), {}, {}))
    with client.connection_for_write() as conn:
        conn.Producer().publish(body, exchange="", routing_key=BATCH_QUEUE, headers=headers,
                                content_type=PICKLE, content_encoding="binary")
    batch_workers = [w for w in deployed.values() if w.queue == BATCH_QUEUE]
    deadline = time.monotonic() + 30
    while (not any("ContentDisallowed" in w.text() for w in batch_workers)
           and time.monotonic() < deadline):
        time.sleep(0.1)
    logs = "".join(w.text() for w in batch_workers)
    assert "ContentDisallowed" in logs and "untrusted content of type pickle" in logs
    assert not marker.exists()
    assert f"[{task_id}] succeeded" not in logs and f"[{task_id}] received" not in logs
    r = redis.Redis.from_url(broker.url)
    assert r.llen(f"{keys.CELERY_PREFIX}{BATCH_QUEUE}") == 0  # dropped, not requeued
    assert all(w.proc.poll() is None for w in deployed.values())
    out = client.tasks[STAGE_PREFIX + "sample"].delay("still-serving", 0, 0, 1).get(timeout=30)
    assert out["stored"] is False  # the batch workers still serve
