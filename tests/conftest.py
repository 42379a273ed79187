"""Shared fixtures: real services started once per session from tests/services.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures_slurm import slurm_cluster  # noqa: F401 - the session's one SLURM
from tests.services import RedisServer, SshServer, start_redis, start_sshd
from tests.sim_provider import SimulatedProviderServer, start_simulated_provider


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
