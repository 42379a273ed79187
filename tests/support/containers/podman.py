"""Container images and a Docker-compatible API for pytest-celery, through podman alone.

pytest-celery starts its broker and worker as containers through a Docker API. Here that
API is ``podman system service``, and every image comes from Debian packages, with no
registry: the base image is ``debootstrap --variant=minbase`` imported with ``podman
import``; the Redis and worker images are ``podman build``s of ``tests/support/containers/*/
Containerfile`` on top of it. podman's layer cache keys every step on its instruction and
on the checksum of the files it copies, so building again with the same files takes a
second or two, and a changed mainboard rebuilds only the worker's last layer.

The worker image installs wheels placed in its build context: the runtime dependencies of
pyproject.toml (``pip download`` here, reused while that list stays the same) and a wheel of
mainboard built from this checkout (rebuilt when one of its files changes).

``python -m tests.support.containers.podman build`` (run by ``scripts/bootstrap test``) builds or
reuses the images; tests/tasks/test_celery_containers.py calls the same :meth:`Podman.images`
and runs :meth:`Podman.api_service` for its session.

All podman state (storage, run state, networks, temporary files) lives under one folder,
``$MAINBOARD_PODMAN_DIR`` or ``~/.cache/mainboard/podman``, never in the machine's own.
Settings that this kind of machine needs, harmless elsewhere: runc (crun refuses cgroup v1
"hybrid" mounts), the cgroupfs manager (no systemd), ulimits no higher than the hard ones we
have, and a short ``exit_command_delay`` (else each readiness exec leaves a conmon for 300 s).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SUITE = "bookworm"
MIRROR = os.environ.get("MAINBOARD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_IMAGE = f"localhost/mainboard-test/debian:{SUITE}-minbase"
REDIS_IMAGE = "localhost/mainboard-test/redis:latest"
WORKER_IMAGE = "localhost/mainboard-test/worker:latest"
# Programs the images and the API need (Debian package names are the same).
PROGRAMS = ("podman", "runc", "debootstrap", "iptables")
# redis-py needs async-timeout below Python 3.11.3, and Debian 12's python3 is 3.11.2;
# `pip download` here resolves for this interpreter, so it is asked for by name.
WORKER_EXTRA_REQUIREMENTS = ("async-timeout>=4.0.3",)

Log = Callable[[str], None]


class PodmanError(RuntimeError):
    """A podman, debootstrap or pip step failed; the message ends with its output."""


@dataclass(frozen=True)
class Images:
    """The tags of the built images."""

    redis: str
    worker: str


def podman_dir() -> Path:
    """Where podman keeps everything for the tests: ``$MAINBOARD_PODMAN_DIR`` or the cache."""
    if os.environ.get("MAINBOARD_PODMAN_DIR"):
        return Path(os.environ["MAINBOARD_PODMAN_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "mainboard" / "podman"


def missing_programs() -> list[str]:
    """The programs of :data:`PROGRAMS` that are not installed."""
    return [p for p in PROGRAMS
            if not (shutil.which(p) or any(Path(d, p).exists() for d in ("/usr/sbin", "/sbin")))]


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def _tail(text: str | bytes, lines: int = 40) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless ``path`` already holds it."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


class Podman:
    """podman with its storage, run state and networks under one folder of our own."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or podman_dir()).absolute()
        found = shutil.which("podman")
        if not found:
            raise PodmanError("podman is not installed")
        self.exe = found
        self._configure()

    def _configure(self) -> None:
        for sub in ("storage", "run", "tmp", "networks", "runc", "context"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        nproc = 32768 if nproc == resource.RLIM_INFINITY else min(32768, nproc)
        nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
        _write(self.root / "storage.conf", (
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{self.root}/storage"\n'
            f'runroot = "{self.root}/run/storage"\n'))
        _write(self.root / "containers.conf", (
            "[containers]\n"
            f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            "\n[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'events_logfile_path = "{self.root}/run/events.log"\n'
            f'tmp_dir = "{self.root}/run/libpod"\n'
            "exit_command_delay = 5\n"
            "\n[network]\n"
            f'network_config_dir = "{self.root}/networks"\n'))

    @property
    def env(self) -> dict[str, str]:
        """The environment every podman command of ours runs with."""
        return {**os.environ,
                "CONTAINERS_CONF": str(self.root / "containers.conf"),
                "CONTAINERS_STORAGE_CONF": str(self.root / "storage.conf"),
                "TMPDIR": str(self.root / "tmp")}

    def argv(self, *args: str) -> list[str]:
        return [self.exe, "--runtime-flag", f"root={self.root / 'runc'}", *args]

    def run(self, *args: str, stdin: int | None = None) -> str:
        """Run ``podman ARGS``; its output, or PodmanError with the output's tail."""
        done = subprocess.run(self.argv(*args), env=self.env, stdin=stdin,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise PodmanError(f"podman {' '.join(args[:3])} ... exited {done.returncode}:\n"
                              f"{_tail(done.stdout + done.stderr)}")
        return done.stdout

    def has_image(self, tag: str) -> bool:
        return subprocess.run(self.argv("image", "exists", tag), env=self.env).returncode == 0

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """One image build at a time per folder (bootstrap and a test run may overlap)."""
        with open(self.root / "build.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # -- images --------------------------------------------------------------------

    def images(self, log: Log = lambda _: None) -> Images:
        """Build the Redis and worker images, or reuse them when nothing they hold changed."""
        with self._lock():
            self._base(log)
            self._build(REDIS_IMAGE, HERE / "redis" / "Containerfile",
                        self.root / "context" / "redis", log)
            worker = self.root / "context" / "worker"
            self._dependency_wheels(worker / "deps", log)
            self._mainboard_wheel(worker / "dist", log)
            self._build(WORKER_IMAGE, HERE / "worker" / "Containerfile", worker, log)
        return Images(redis=REDIS_IMAGE, worker=WORKER_IMAGE)

    def _base(self, log: Log) -> None:
        """Debian minbase from the Debian mirror, imported as an image (once per folder)."""
        if self.has_image(BASE_IMAGE):
            log(f"{BASE_IMAGE}: cached")
            return
        started = time.monotonic()
        rootfs = self.root / "tmp" / f"rootfs-{SUITE}"
        shutil.rmtree(rootfs, ignore_errors=True)
        done = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), MIRROR],
                              capture_output=True, text=True,
                              env={**os.environ, "PATH": os.environ.get("PATH", "") +
                                   ":/usr/sbin:/sbin"})
        if done.returncode != 0:
            shutil.rmtree(rootfs, ignore_errors=True)
            raise PodmanError(f"debootstrap {SUITE} from {MIRROR} exited {done.returncode}:\n"
                              f"{_tail(done.stdout + done.stderr)}")
        try:
            with subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                                  stdout=subprocess.PIPE) as tar:
                assert tar.stdout is not None
                self.run("import", "--quiet", "-", BASE_IMAGE, stdin=tar.stdout.fileno())
            if tar.returncode != 0:
                raise PodmanError(f"tar of the {SUITE} root file system exited {tar.returncode}")
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
        log(f"{BASE_IMAGE}: debootstrap + import in {time.monotonic() - started:.0f} s")

    def _build(self, tag: str, containerfile: Path, context: Path, log: Log) -> None:
        """``podman build`` with the layer cache; logs how many steps were cached."""
        context.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        out = self.run("build", "--layers", "--build-arg", f"BASE={BASE_IMAGE}",
                       "-f", str(containerfile), "-t", tag, str(context))
        steps = sum(line.startswith("STEP ") for line in out.splitlines()) - 1  # FROM aside
        rebuilt = steps - out.count("--> Using cache")
        what = "cached" if rebuilt == 0 else f"{rebuilt} of {steps} steps built"
        if rebuilt:
            self.run("image", "prune", "--force")  # the image this tag named before, if unused
        log(f"{tag}: {what} ({time.monotonic() - started:.1f} s)")

    def _dependency_wheels(self, deps: Path, log: Log) -> None:
        """The runtime requirements' wheels, downloaded again only when the list changes."""
        pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
        requirements = [*pyproject["project"]["dependencies"], *WORKER_EXTRA_REQUIREMENTS]
        key = _digest(json.dumps([requirements, sys.version_info[:2],
                                  platform.machine()]).encode())
        if (deps / ".key").is_file() and (deps / ".key").read_text() == key:
            return
        started = time.monotonic()
        fresh = deps.with_name("deps.new")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q",
                               "--only-binary=:all:", "-d", str(fresh), *requirements],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise PodmanError(f"pip download exited {done.returncode}:\n"
                              f"{_tail(done.stdout + done.stderr)}")
        (fresh / "requirements.txt").write_text("\n".join(requirements) + "\n")
        shutil.rmtree(deps, ignore_errors=True)
        fresh.rename(deps)
        (deps / ".key").write_text(key)
        log(f"runtime wheels: {len(list(deps.glob('*.whl')))} downloaded "
            f"({time.monotonic() - started:.0f} s)")

    def _mainboard_wheel(self, dist: Path, log: Log) -> None:
        """A wheel of this checkout, built again only when one of its files changed."""
        pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
        setuptools = pyproject["tool"]["setuptools"]
        folders = sorted(set(setuptools["package-dir"].values()))
        files = [REPO / "pyproject.toml", REPO / pyproject["project"]["readme"],
                 *(REPO / name for name in pyproject["project"].get("license-files", []))]
        for folder in folders:
            files += sorted(p for p in (REPO / folder).rglob("*")
                            if p.is_file() and "__pycache__" not in p.parts)
        key = _digest(*(part for f in files
                        for part in (str(f.relative_to(REPO)).encode(), f.read_bytes())))
        if (dist / ".key").is_file() and (dist / ".key").read_text() == key:
            return
        started = time.monotonic()
        stage = self.root / "tmp" / "mainboard-src"
        shutil.rmtree(stage, ignore_errors=True)
        for f in files:
            target = stage / f.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        fresh = dist.with_name("dist.new")
        shutil.rmtree(fresh, ignore_errors=True)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                               "-w", str(fresh), str(stage)], capture_output=True, text=True)
        shutil.rmtree(stage, ignore_errors=True)
        if done.returncode != 0:
            raise PodmanError(f"pip wheel (mainboard) exited {done.returncode}:\n"
                              f"{_tail(done.stdout + done.stderr)}")
        shutil.rmtree(dist, ignore_errors=True)
        fresh.rename(dist)
        (dist / ".key").write_text(key)
        log(f"mainboard wheel: built ({time.monotonic() - started:.1f} s)")

    # -- the Docker-compatible API -----------------------------------------------------

    @contextmanager
    def api_service(self, directory: Path, timeout: float = 30.0) -> Iterator[str]:
        """``podman system service`` on a socket in ``directory``; yields its DOCKER_HOST URL.

        Stopped by its own pid when the block ends (its log stays in ``directory``); should
        the test process die first, it ends by itself 5 minutes after its last request.
        """
        sock = directory / "podman.sock"
        url = f"unix://{sock}"
        with open(directory / "podman-service.log", "wb") as log:
            proc = subprocess.Popen(self.argv("system", "service", "--time=300", url),
                                    env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while not _answers(sock):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise PodmanError(f"podman system service did not answer on {sock}:\n"
                                      f"{_tail((directory / 'podman-service.log').read_text())}")
                time.sleep(0.05)
            yield url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def _answers(sock: Path) -> bool:
    """True when something accepts connections on the unix socket ``sock``."""
    if not sock.exists():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(sock))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.containers.podman",
                                     description="Build or reuse the images of "
                                                 "tests/tasks/test_celery_containers.py.")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    missing = missing_programs()
    if missing:
        print(f"podman images: missing {' '.join(missing)}", file=sys.stderr)
        return 1
    try:
        podman = Podman()
        podman.images(log=lambda line: print(f"podman images: {line}", file=sys.stderr))
    except PodmanError as exc:
        print(f"podman images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
