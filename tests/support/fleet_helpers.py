"""Helpers for the fleet tests: workspaces, the real CLI in a subprocess, probes, leftovers.

Every ``fleet`` command runs as ``python -m mainboard ...`` in its own process, so each
test also proves that status and down work from a new process (receipts, not memory).
Host roots share one directory provisioned once per session (``provisioned_root``):
the first provision builds the uv environment, every host after that finds it ready,
which is also the only way a network-namespaced host (no route to an index) gets one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from mainboard.config import Config, load_config
from tests.support.cliserver import run_mainboard
from tests.support.services import SshServer
from tests.support.waiting import poll

HOST_PYTHON = "/usr/bin/python3"  # the same base python on every "host": one shared env


def toml_value(value: Any) -> str:
    """A TOML value for str/int/float/bool/list/dict (JSON strings are TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) \
            + " }"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def table(header: str, **values: Any) -> str:
    """``[header]`` and its keys (None values are left out)."""
    lines = [f"[{header}]"] + [f"{k} = {toml_value(v)}" for k, v in values.items()
                               if v is not None]
    return "\n".join(lines) + "\n"


def ssh_host(name: str, server: SshServer, root: Path | str, **extra: Any) -> str:
    """An ``[hosts.NAME]`` ssh table for a test sshd (its key and known_hosts file)."""
    return table(f"hosts.{json.dumps(name)}", kind="ssh", host=server.host, port=server.port,
                 user=server.user, identity=str(server.identity),
                 known_hosts=str(server.known_hosts()), root=str(root), python=HOST_PYTHON,
                 **extra)


def workspace(directory: Path, *tables: str) -> Path:
    """A workspace directory with a mainboard.toml made of ``tables``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "mainboard.toml").write_text(table("workspace", name=directory.name)
                                              + "\n".join(tables))
    return directory


def config(ws: Path) -> Config:
    return load_config(ws / "mainboard.toml")


def cli(ws: Path, *args: str, timeout: float = 300.0,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``mainboard --config WS/mainboard.toml ARGS`` in a new process, in the workspace."""
    return run_mainboard(["--config", str(ws / "mainboard.toml"), *args], cwd=ws,
                         timeout=timeout, env={**os.environ, **(env or {})})


def status(ws: Path, *flags: str, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``fleet status --json`` rows."""
    done = cli(ws, "fleet", "status", "--json", *flags, env=env)
    assert done.returncode in (0, 3), done.stderr  # 3: workers expected, none alive
    return json.loads(done.stdout)


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.3) -> Any:
    """Poll ``check`` until it returns something truthy (at a rate its cost bounds:
    tests/support/waiting.py); fail naming ``what``."""
    try:
        return poll(check, timeout, what, every)
    except AssertionError as exc:
        pytest.fail(str(exc))


def wait_keeper_looks(ws: Path, looks: int, timeout: float = 120.0) -> None:
    """Wait until the running keeper's autoscaler has finished ``looks`` more looks than it
    had now (``autoscale.ticks_done``): "nothing was submitted over N looks", judged on the
    looks themselves, not on a wall-clock sleep a loaded machine may not fill."""
    from mainboard.fleet.autoscale import ticks_done
    from mainboard.fleet.keeperclient import keeper_pid

    state = ws / ".mainboard"
    pid = wait_until(lambda: keeper_pid(state), 60, "a fleet keeper running")
    seen = ticks_done(state)
    start = seen[1] if seen is not None and seen[0] == pid else 0
    wait_until(lambda: (t := ticks_done(state)) is not None and t[0] == pid
               and t[1] >= start + looks, timeout, f"{looks} looks of the keeper's autoscaler")


def send_probe(ws: Path, host: str, **kwargs: Any) -> Any:
    """Send ``mainboard.fleet.probe`` to ``host``'s own queue; the AsyncResult."""
    from mainboard.fleet.records import host_queue
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    route = broker_route(config(ws), start=False)
    assert route is not None, "the broker is not running"
    app = make_app(broker_url=route.url)
    return app.send_task(PROBE_TASK, kwargs=kwargs, queue=host_queue(host))


def batch_consumers(ws: Path) -> int:
    """Workers consuming the batch queue, asked over the broker: what ``integrate`` asks
    (``fleet_size``) before it starts local workers; 0 when the broker is down."""
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.workers import fleet_size

    route = broker_route(config(ws), start=False)
    if route is None:
        return 0
    app = make_app(broker_url=route.url)
    try:
        return fleet_size(app, timeout=3.0)
    finally:
        app.close()


def probe(ws: Path, host: str, timeout: float = 120.0) -> dict[str, Any]:
    """Run a probe on ``host``'s worker and return who ran it."""
    result = send_probe(ws, host)
    try:
        return result.get(timeout=timeout)
    finally:
        result.app.close()


def processes_matching(*needles: str) -> list[str]:
    """``pid args`` of every process whose command line contains one of ``needles``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in args for n in needles):
            found.append(f"{entry.name} {args.strip()}")
    return found


def broker_password(ws: Path) -> str:
    """The embedded broker's password (to prove it shows up nowhere it should not)."""
    return (ws / ".mainboard" / "broker.secret").read_text().strip()


def assert_nothing_left(ws: Path, nodes: list[str]) -> None:
    """No worker process, keeper or Flower of this workspace is running any more."""
    from mainboard.fleet.keeperclient import keeper_pid
    from mainboard.services.flower import Flower

    deadline = time.monotonic() + 120  # a loaded machine reaps an ended allocation slowly
    while (left := processes_matching(*nodes)) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not left, "worker processes still running after 120 s:\n" + "\n".join(left)
    assert keeper_pid(ws / ".mainboard") is None, "the fleet keeper still runs"
    assert not Flower(ws / ".mainboard").status().running, "flower still runs"


def stop_broker(ws: Path) -> None:
    """The fleet leaves the workspace's broker up (others use it); a test stops it."""
    from mainboard.services.broker import EmbeddedBroker

    EmbeddedBroker(ws / ".mainboard").down()


def tear_down(ws: Path, *args: str, env: Mapping[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """A fleet test's cleanup: ``fleet down ARGS``, then the workspace's broker stopped
    (even when the down fails); the ``fleet down`` result, for the test to check."""
    try:
        return cli(ws, "fleet", "down", *args, env=env)
    finally:
        stop_broker(ws)


def up_ok(ws: Path, *args: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``fleet up ARGS``, which must succeed; its stdout lines."""
    done = cli(ws, "fleet", "up", *args, env=env)
    assert done.returncode == 0, f"fleet up failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def nodes_of(rows: list[dict[str, Any]]) -> list[str]:
    """Node names before the ``@`` (``kind-host-jobid``) of status rows, to look for their processes."""
    return [str(r["node"]).partition("@")[0] for r in rows]


_ROOT: dict[str, Path] = {}


def provision_root(root: Path) -> Path:
    """``root`` with mainboard's environment built in it for ``HOST_PYTHON`` (what a fleet
    host gets; a benchmark outside pytest calls this directly)."""
    from mainboard.bridges.project import local_project
    from mainboard.bridges.provision import provision
    from mainboard.bridges.transport import LocalTransport

    provision(LocalTransport("provision"), root=str(root), python=HOST_PYTHON,
              project=local_project(root / ".wheels"))
    return root


@pytest.fixture(scope="session")
def provisioned_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One host root per test process for every fleet test host, its environment built once
    per run.

    Under xdist the workers' roots share the run's one environment: it is built in a root of
    its own in the run's folder (the first worker to get there builds it, about 11 s of CPU;
    the others wait on the provisioning lock and find it ready), and each worker's root
    links its ``.mainboard/envs`` and ``tools`` there, as hosts on one shared file system
    do. The rest of a root (brokers' files, job folders, shipped modules) stays the worker's
    own, so one worker's fleet never sees another's."""
    if "root" not in _ROOT:
        root = tmp_path_factory.mktemp("fleet-root")
        if os.environ.get("PYTEST_XDIST_WORKER"):
            shared = provision_root(_mkdir(tmp_path_factory.getbasetemp().parent / "fleet-env"))
            for name in ("envs", "tools"):
                (_mkdir(root / ".mainboard") / name).symlink_to(shared / ".mainboard" / name)
        _ROOT["root"] = provision_root(root)
    return _ROOT["root"]


def _mkdir(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    return path


def kill_keeper_and_lose_starts(ws: Path) -> list[str]:
    """SIGKILL the fleet keeper and drop the ``worker.started`` receipts from the fleet
    record: what a controller killed between asking the scheduler (or provider) and
    recording the answer leaves. The ids of the workers whose record was dropped."""
    import signal

    from mainboard.fleet.keeperclient import keeper_pid

    state = ws / ".mainboard"
    pid = keeper_pid(state)
    assert pid and pid > 0, "no fleet keeper runs"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: keeper_pid(state) is None, 10, "the keeper gone")
    path = state / "fleet.ndjson"
    lines = path.read_text().splitlines(keepends=True)
    dropped = [json.loads(line) for line in lines if json.loads(line)["topic"] == "worker.started"]
    assert dropped, "no worker.started receipt in the fleet record"
    path.write_text("".join(line for line in lines
                            if json.loads(line)["topic"] != "worker.started"))
    return [d["payload"]["worker_id"] for d in dropped]


def send_tasks(ws: Path, queue: str, n: int, sleep_s: float = 0.5,
               until_path: Path | None = None) -> list[Any]:
    """``n`` probe tasks (each waits ``sleep_s``, or less once ``until_path`` exists) sent to
    ``queue``; their AsyncResults (one app: close ``results[0].app`` when done)."""
    from mainboard.fleet.workers import broker_route
    from mainboard.tasks.app import make_app
    from mainboard.tasks.fleet import PROBE_TASK

    route = broker_route(config(ws), start=False)
    assert route is not None, "the broker is not running"
    app = make_app(broker_url=route.url)
    until = {"until_path": str(until_path)} if until_path is not None else {}
    return [app.send_task(PROBE_TASK, kwargs={"sleep_s": sleep_s, **until}, queue=queue)
            for _ in range(n)]
