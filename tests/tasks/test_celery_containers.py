"""mainboard's stage tasks in a pytest-celery worker container, as a user's CI would test them.

pytest-celery starts a Redis container and a Celery worker container (mainboard installed
from a wheel of this checkout with only its runtime dependencies, ``celery -A app worker
-Q mainboard.batches``); the test side talks to them with mainboard's own hardened app.
A whole run coordinated here must match the in-process driver to the last bit, and numpy
arrays must cross the msgpack codec both ways while a pickled message is refused.

The containers run on podman through its Docker-compatible API, with images built from
Debian packages by tests/support/containers/podman.py (no Docker engine, no registry; podman's
layer cache makes the build a no-op when nothing changed). pytest-celery's plugin is not
loaded at every pytest start (see pyproject.toml): the fixtures it provides are imported
below, and the ones that pick images, queues and the app are overridden. A missing podman
skips the module locally and fails it under CI=true.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import docker
import numpy as np
import pytest
import redis
from celery import Celery
from pytest_celery import (
    DEFAULT_WORKER_CONTAINER_TIMEOUT,
    DEFAULT_WORKER_VOLUME,
    REDIS_CONTAINER_TIMEOUT,
    CeleryBrokerCluster,
    CeleryTestSetup,
    CeleryTestWorker,
    CeleryWorkerCluster,
    CeleryWorkerContainer,
    RedisContainer,
    RedisTestBroker,
)

# pytest-celery's fixtures used as they are (its plugin is not autoloaded; see module doc)
from pytest_celery.defaults import default_pytest_celery_network
from pytest_celery.fixtures.backend import celery_backend_cluster_config
from pytest_celery.fixtures.broker import celery_broker_cluster_config
from pytest_celery.fixtures.setup import (
    celery_setup,
    celery_setup_app,
    celery_setup_config,
    celery_setup_name,
)
from pytest_celery.fixtures.worker import celery_worker_cluster_config
from pytest_celery.vendors.redis.broker.fixtures import (
    celery_redis_broker,
    default_redis_broker_command,
    default_redis_broker_env,
    default_redis_broker_ports,
)
from pytest_celery.vendors.worker.fixtures import (
    celery_setup_worker,
    default_worker_app,
    default_worker_app_module,
    default_worker_cls,
    default_worker_command,
    default_worker_env,
    default_worker_initial_content,
    default_worker_ports,
    default_worker_signals,
    default_worker_tasks,
    default_worker_utils_module,
    default_worker_volume,
)
from pytest_docker_tools import container, fxtr

import mainboard
import mainboard.tasks.stages
from mainboard import keys
from mainboard.config import Config, load_config
from mainboard.integrators import stages
from mainboard.integrators.driver import RunResult, integrate_local
from mainboard.integrators.stages import build_run, process_batch
from mainboard.tasks import BATCH_QUEUE, STAGE_PREFIX, codec
from mainboard.tasks.app import BROKER_URL_ENV, make_app
from mainboard.tasks.coordinator import publish_run
from mainboard.tasks.stages import unpack_batch
from tests.support.containers.podman import HERE, Images, Podman, PodmanError, missing_programs
from tests.support.integration import GAUSS_4D, spec
from tests.support.services import unavailable

pytestmark = pytest.mark.live
TIMEOUT = 60
RUN = spec(GAUSS_4D, name="containers", stop={"max_samples": 40_000},
           batching={"batch_size": 5_000, "batches_per_iteration": 4})


# -- podman: images and the Docker-compatible API ----------------------------------------

@pytest.fixture(scope="module")
def podman() -> Podman:
    missing = missing_programs()
    if missing:
        unavailable(f"{' '.join(missing)} not installed: pytest-celery's containers run on "
                    "podman (run the README test command)")
    return Podman()


@pytest.fixture(scope="module")
def images(podman: Podman) -> Images:
    """Built, or reused from podman's layer cache when nothing they hold changed."""
    try:
        return podman.images(log=print)  # shown with -s, and with the report of a failure
    except PodmanError as exc:
        unavailable(f"the test images could not be built: {exc}")


@pytest.fixture(scope="module")
def docker_client(podman: Podman,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[docker.DockerClient]:
    """pytest-docker-tools' client, on a podman API service of this module's own."""
    with podman.api_service(tmp_path_factory.mktemp("podman")) as url:
        client = docker.DockerClient(base_url=url, timeout=120)
        yield client
        client.close()


@pytest.fixture(scope="module", autouse=True)
def _docker_tools_option(request: pytest.FixtureRequest) -> None:
    """pytest-docker-tools' factories read its --reuse-containers option; its plugin is not
    loaded (pyproject.toml), so the option takes its default here."""
    if not hasattr(request.config.option, "reuse_containers"):
        request.config.option.reuse_containers = False


# -- pytest-celery, pointed at our images, queue and app ---------------------------------

class Redis(RedisContainer):
    """Debian's redis-server; URLs with explicit ports, the published one on 127.0.0.1."""

    def get_addr(self, port: str) -> tuple[str, int]:
        # On a machine with /.dockerenv (a CI container, some VMs) pytest-docker-tools hands
        # out the container's own port, 6379, which may be the machine's own Redis there.
        return "127.0.0.1", self.ports[port][0]

    @property
    def url(self) -> str:
        return f"redis://{self.hostname}:6379/{self.vhost}"

    @property
    def host_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self.vhost}"


class Worker(CeleryWorkerContainer):
    """A batch worker: mainboard's app and queue, one process, as a fleet worker runs."""

    @classmethod
    def worker_name(cls) -> str:
        return "containers"

    @classmethod
    def worker_queue(cls) -> str:
        return BATCH_QUEUE

    @classmethod
    def command(cls, *args: str, **kwargs: Any) -> list[str]:
        return super().command("--concurrency=1", "--without-mingle", "--without-gossip",
                               *args, **kwargs)

    @classmethod
    def app_module(cls) -> ModuleType:
        """tests/support/containers/worker/app.py, loaded but not run here (it builds the app)."""
        found = importlib.util.spec_from_file_location("app", HERE / "worker" / "app.py")
        assert found is not None
        return importlib.util.module_from_spec(found)

    @classmethod
    def tasks_modules(cls) -> set[ModuleType]:
        return {mainboard.tasks.stages}

    @classmethod
    def initial_env(cls, celery_worker_cluster_config: dict, initial: dict | None = None) -> dict:
        env = super().initial_env(celery_worker_cluster_config, initial)
        env[BROKER_URL_ENV] = env["CELERY_BROKER_URL"]  # how mainboard's app finds its broker
        return env


class Setup(CeleryTestSetup):
    """The test side speaks through mainboard's own app (codec, routes, key prefix)."""

    @classmethod
    def create_setup_app(cls, celery_setup_config: dict, celery_setup_app_name: str) -> Celery:
        return make_app(broker_url=celery_setup_config["broker_url"], name=celery_setup_app_name)


# pytest-celery's two container fixtures again, with our wrapper classes
default_redis_broker = container(
    image="{default_redis_broker_image}",
    ports=fxtr("default_redis_broker_ports"),
    environment=fxtr("default_redis_broker_env"),
    network="{default_pytest_celery_network.name}",
    wrapper_class=Redis,
    timeout=REDIS_CONTAINER_TIMEOUT,
    command=fxtr("default_redis_broker_command"),
)
default_worker_container = container(
    image="{celery_base_worker_image.id}",
    ports=fxtr("default_worker_ports"),
    environment=fxtr("default_worker_env"),
    network="{default_pytest_celery_network.name}",
    volumes={"{default_worker_volume.name}": DEFAULT_WORKER_VOLUME},
    wrapper_class=Worker,
    timeout=DEFAULT_WORKER_CONTAINER_TIMEOUT,
    command=fxtr("default_worker_command"),
)


@pytest.fixture
def default_redis_broker_cls() -> type[RedisContainer]:
    return Redis


@pytest.fixture
def default_redis_broker_image(images: Images) -> str:
    return images.redis


@pytest.fixture
def default_worker_container_cls() -> type[CeleryWorkerContainer]:
    return Worker


@pytest.fixture(scope="module")
def celery_base_worker_image(docker_client: docker.DockerClient, images: Images) -> Any:
    return docker_client.images.get(images.worker)


@pytest.fixture
def celery_setup_cls() -> type[CeleryTestSetup]:
    return Setup


@pytest.fixture
def celery_broker_cluster(celery_redis_broker: RedisTestBroker) -> Iterator[CeleryBrokerCluster]:
    cluster = CeleryBrokerCluster(celery_redis_broker)
    yield cluster
    cluster.teardown()


@pytest.fixture
def celery_backend_cluster() -> None:
    """None: results go to the broker's Redis, as everywhere in mainboard."""
    return None


@pytest.fixture
def celery_worker_cluster(celery_setup_worker: CeleryTestWorker) -> Iterator[CeleryWorkerCluster]:
    cluster = CeleryWorkerCluster(celery_setup_worker)
    yield cluster
    cluster.teardown()


# -- helpers -------------------------------------------------------------------------

def broker_url(setup: CeleryTestSetup) -> str:
    url = setup.broker.config()["host_url"]
    assert urlsplit(url).port != 6379, "the test must use the container's Redis"
    return url


def same_numbers(a: RunResult, b: RunResult) -> None:
    """Every number of two results equal to the last bit (wall time aside)."""
    assert (a.estimate, a.error, a.chi2_dof, a.samples, a.iterations, a.nan_count) == \
           (b.estimate, b.error, b.chi2_dof, b.samples, b.iterations, b.nan_count)


# -- tests ---------------------------------------------------------------------------

def test_a_run_on_the_container_worker_is_bit_identical_to_the_local_driver(
        celery_setup: CeleryTestSetup, tmp_path: Path) -> None:
    (tmp_path / "mainboard.toml").write_text(
        f'[workspace]\nname = "containers"\n\n[broker]\nurl = "{broker_url(celery_setup)}"\n')
    config: Config = load_config(tmp_path / "mainboard.toml")

    result = mainboard.integrate(RUN, workers=0, config=config)  # the container is the fleet

    same_numbers(result, integrate_local(RUN))
    assert result.samples == 40_000 and abs(result.estimate - result.exact) < 5 * result.error
    logs = celery_setup.worker.logs()
    # Flower and the worker log show the shadow name: stage, run name, iteration, batch
    assert "Task integrate.bundle[run=containers it=1 b=0]" in logs, logs[-3000:]
    assert " succeeded in " in logs, logs[-3000:]


def test_arrays_cross_the_codec_both_ways_and_pickle_is_refused(
        celery_setup: CeleryTestSetup) -> None:
    app, r = celery_setup.app, redis.Redis.from_url(broker_url(celery_setup))
    run_id = "containers-codec"
    run = build_run(spec(RUN, batching={"fuse": False}))
    sampler = run.new_sampler()
    publish_run(r, run_id, run.spec.model_dump(mode="json"))
    r.set(keys.iteration_sampler(run_id, 0), codec.dumps(sampler.snapshot()))

    def call(stage: str, *args: Any) -> dict[str, Any]:
        return app.tasks[STAGE_PREFIX + stage].delay(*args).get(timeout=TIMEOUT)

    latent = call("sample", run_id, 0, 0, 2000)
    points = unpack_batch(call("materialize", latent)["batch"])  # arrays made in the container
    local = stages.materialize(run, sampler, stages.sample(run, sampler, 0, 0, 2000))
    assert points.x.dtype == np.float64 and points.x.shape == (2000, 4)
    assert np.array_equal(points.x, local.x) and points.x.strides == local.x.strides
    assert np.array_equal(points.weights, local.weights)

    evaluated = call("evaluate", call("materialize", latent))  # and arrays sent to it
    assert np.array_equal(evaluated["result"]["partial"]["mean"],
                          process_batch(run, sampler, 0, 0, 2000).partial.mean)

    refused = app.send_task(STAGE_PREFIX + "sample", args=(run_id, 0, 1, 100),
                            serializer="pickle")
    celery_setup.worker.assert_log_exists("Refusing to deserialize untrusted content of type "
                                          "pickle", timeout=TIMEOUT)
    assert refused.state == "PENDING"
    assert call("sample", run_id, 0, 1, 100)["ref"]["batch"] == 1  # the worker carries on


def test_the_wheel_imports_whole_with_only_its_runtime_dependencies(
        docker_client: docker.DockerClient, images: Images) -> None:
    """The worker image holds mainboard's wheel and its declared runtime dependencies, no
    test extras: every module of the package must import there."""
    code = ("import importlib, importlib.util, pkgutil, mainboard\n"
            "names = [m.name for m in pkgutil.walk_packages(mainboard.__path__, 'mainboard.')\n"
            "         if not m.name.endswith('__main__')]\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "print(len(names), importlib.util.find_spec('pytest') is None)\n")
    out = docker_client.containers.run(images.worker, ["python", "-c", code], remove=True,
                                       network_mode="none").decode()
    count, no_pytest = out.split()
    assert int(count) > 100 and no_pytest == "True", out
