"""Shared fixtures: real services started once per session from tests/support/services.py."""

from __future__ import annotations

import gc
import os
import signal
import tempfile
from collections.abc import Iterator

import pytest

from tests.support import cpuclock
from tests.support.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.support.services import (
    RedisServer,
    SshServer,
    clear_stale_pyenv_lock,
    start_redis,
    start_sshd,
)
from tests.support.sim_provider import SimulatedProviderServer, start_simulated_provider

# The suite's scheduler hosts submit far faster than a site's polite default (30 a minute,
# kept per login in one log for the whole machine): hosts that set no limit get a high one,
# and each test process keeps its own logs. tests/tasks/test_sched_poll.py sets limits itself.
os.environ.setdefault("MAINBOARD_SUBMITS_PER_MINUTE", "100000")
os.environ.setdefault("MAINBOARD_SUBMIT_GATES", tempfile.mkdtemp(prefix="mb-gates-"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a free port (never the machine's 6379)."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A real sshd on loopback accepting tests' client key for root."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedProviderServer]:
    """SIMULATION of a GPU rental provider (its REST shape, rentals as netns + sshd), one
    per test module so each starts with a clean market."""
    server = start_simulated_provider(tmp_path_factory.mktemp("sim-provider"))
    yield server
    server.stop()


# Test files that must share one xdist worker: each worker process that asks for SLURM
# starts a cluster of its own (own ports, state and munge socket: three run side by side
# here), so the SLURM files are split in three groups of about equal length (about three
# minutes each, measured alone with --durations=0): on four workers a group is one worker's
# chain, and the longest chain bounds the whole run. One podman store; the simulated
# provider's tests compare the machine's mbsim-* namespaces before and after. Files are named
# by their basename (unique in tests/), so moving one between rooms keeps its group.
SHARED_WORKER = {
    "slurm": {"test_fleet_retire.py", "test_fleet_kill_scenario.py",
              "test_cli_streams.py", "test_fleet_scenarios.py",
              "test_env_python.py", "test_batch_watch.py", "test_router.py",
              "test_bridges_sched.py", "test_study.py", "test_submit_ids.py"},
    "slurm-b": {"test_fleet_live.py", "test_jobs.py", "test_fleet_reconcile.py",
                "test_trace_merge.py", "test_fleet_standby.py",
                "test_fleet_faults.py", "test_job_env.py"},
    "slurm-c": {"test_fleet_nodes.py", "test_fleet_timeneed.py",
                "test_fleet_tls.py", "test_sched_poll.py",
                "test_sched_listing.py"},
    "podman": {"test_celery_containers.py", "test_provision.py",
               "test_tasks_deploy.py"},
    "sim": {"test_batch.py", "test_fleet_provider.py", "test_jobs_provider.py",
            "test_monitor.py", "test_providers.py", "test_router_provider.py",
            "test_redact_verbs.py", "test_costs.py"},
}
_GROUP_OF = {path: group for group, paths in SHARED_WORKER.items() for path in paths}


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Four workers (the README test command), scheduled by file: a file's tests stay on one
    worker (its module fixtures start once), and the files of each SHARED_WORKER group
    run on one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class ByRoom(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return _GROUP_OF.get(path.rsplit("/", 1)[-1], path)

    return ByRoom(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep SHARED_WORKER true: a file that starts SLURM or a simulated provider must be in
    its group, or two workers could start them at once."""
    for fixture, group in (("slurm_cluster", "slurm"), ("sim", "sim")):
        grouped = set().union(*(v for k, v in SHARED_WORKER.items() if k.startswith(group)))
        missing = sorted({item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1] for item in items
                          if isinstance(item, pytest.Function) and fixture in item.fixturenames}
                         - grouped)
        if missing:
            raise pytest.UsageError(f"tests/conftest.py: add {missing} to SHARED_WORKER[{group!r}]"
                                    f" (they use the {fixture} fixture)")


@pytest.fixture(autouse=True)
def _nothing_written_into_the_repository(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test whose workspace silently became the checkout (no --config, cwd = the repo) would
    start an embedded broker under ./.mainboard and leave it running: fail it by name."""
    state = request.config.rootpath / ".mainboard"
    before = state.exists()
    yield
    if not before and state.exists():
        pytest.fail(f"{state} appeared during {request.node.nodeid} (or a test running beside "
                    f"it on another xdist worker): give that test a workspace (tmp_path)")


_CLOCK: cpuclock.CpuClock | None = None


def pytest_configure(config: pytest.Config) -> None:
    """`MAINBOARD_TEST_CPU=DIR`: each test's CPU seconds, its processes included
    (tests/support/cpuclock.py); a stale pyenv lock an earlier, killed run left is cleared.
    A suite started with Ctrl-C ignored (a background job of a shell without job control,
    nohup, some CI runners) would pass that on to every command a test stops with Ctrl-C:
    they would run on (each such test failed so); Ctrl-C gets its usual meaning back here."""
    global _CLOCK
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _CLOCK = cpuclock.start(os.environ.get("PYTEST_XDIST_WORKER", "main"))
    if "PYTEST_XDIST_WORKER" not in os.environ:  # once, before any worker starts
        clear_stale_pyenv_lock()


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection loaded (the test modules, mainboard, numpy, Celery...) frozen: the
    collector's full passes during the ~500 tests of each xdist worker no longer walk it
    (as mainboard's own processes do after their start, mainboard.names.hold_gc)."""
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _CLOCK is None:
        yield
        return
    yield from cpuclock.timed(_CLOCK, item.nodeid)
