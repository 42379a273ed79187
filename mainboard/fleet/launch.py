"""Starting one fleet worker on one host: (rent,) connect, root, provision, route, submit.

Order matters for money and for secrets. Everything that can be refused is refused in
``plan`` before any connection (unknown host, bad walltime, queue policy). A provider
host is rented inside a ``RentalGuard``, so a failure at any later step destroys the
rental. The broker URL a worker gets (the broker's worker user: no FLUSHALL, CONFIG,
KEYS... see ``mainboard.services.acl``) reaches the host on stdin into a 0600 file; the
job script reads it into ``$MAINBOARD_BROKER_URL`` and execs Celery, so it is never in an
argument list, the job's environment at submission (``scontrol show job``, ``qstat -f``),
a provider's user-data, a receipt or a log. A TLS broker's CA file (``ssl_ca_certs`` in
the URL) is copied beside it and the URL pointed at the copy.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from mainboard.bridges import bridge_class, bridge_for
from mainboard.bridges.base import Bridge, JobRecord, new_uid
from mainboard.bridges.jobscript import NODE_INDEX_ENV
from mainboard.bridges.jobspec import JobSpec, check_policy, format_walltime, resolve
from mainboard.bridges.pins import require_env_python
from mainboard.bridges.project import Project, local_project
from mainboard.bridges.provision import manifest_digest, provision_host
from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.transport import Transport
from mainboard.config import Config, HostConfig, ProviderHost, positive_duration
from mainboard.errors import ConfigError, HostError, NotPositive, UserError
from mainboard.fleet import warm
from mainboard.fleet.records import (
    NODE_SUFFIX,
    check_queue,
    fleet_receipts,
    host_queue,
    node_prefix,
    owner_tag,
)
from mainboard.fleet.sentinel_route import VIA as SENTINELS_VIA
from mainboard.fleet.sentinel_route import check_reachable
from mainboard.fleet.warm import Stamp, free_remote_port, remove_secret, write_secret
from mainboard.hosts.root import ensure_root
from mainboard.ids import safe_word
from mainboard.receipts import WorkerStarted, WorkerStopped, WorkerSubmitting, WorkerTunnel
from mainboard.redisclient import is_sentinel
from mainboard.tasks import BATCH_QUEUE, GPU_ENV, POOL_ENV, RETIRE_ENV, TASK_MODULES, WALLTIME_ENV
from mainboard.tasks.paths import WORKSPACE_ENV
from mainboard.tasks.workers import worker_argv

WORKER_MODULES = ("mainboard.tasks.fleet", *TASK_MODULES)
DEFAULT_RETIRE_BEFORE_S = 300
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class UpOptions:
    """What ``fleet up`` asks of every host (validated by ``parse`` before any traffic)."""

    concurrency: int = 1
    queues: tuple[str, ...] = (BATCH_QUEUE,)
    walltime: int | None = None
    retire_before: int = DEFAULT_RETIRE_BEFORE_S
    idle_timeout: float | None = None
    cpus: int | None = None       # per allocation (default: one per worker process)
    mem_gb: float | None = None
    gpus: int | None = None
    nodes: int = 1

    @classmethod
    def parse(cls, *, workers: int = 1, queues: str | Sequence[str] | None = None,
              walltime: str | int | None = None, retire_before: str | int | None = None,
              idle_timeout: str | int | None = None) -> UpOptions:
        """Options from CLI-shaped values; each bad one raises a UserError naming its flag."""
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise UserError(f"--workers {workers!r}: valid: an integer >= 1 (processes per "
                            "host worker)")
        names = queues.split(",") if isinstance(queues, str) else list(queues or [BATCH_QUEUE])
        names = [check_queue(q.strip()) for q in names if q.strip()]
        if not names:
            raise UserError("--queues is empty; valid: comma-separated queue names, e.g. "
                            f"{BATCH_QUEUE}")
        return cls(workers, tuple(dict.fromkeys(names)), _duration("--walltime", walltime),
                   _duration("--retire-before", retire_before) or DEFAULT_RETIRE_BEFORE_S,
                   _duration("--idle-timeout", idle_timeout))


def _duration(flag: str, value: str | int | None) -> int | None:
    """A flag's duration (unset when empty), each refusal naming the flag as typed."""
    if value is None or value == "":
        return None
    try:
        return positive_duration(value)
    except NotPositive as exc:
        raise UserError(f"{flag} {value!r}: {exc.detail}") from None
    except ConfigError as exc:
        raise UserError(f"{flag} {value!r}: not a duration; valid: {exc.valid}") from None


def worker_command(python: str, node: str, queues: Sequence[str], concurrency: int,
                   secret_path: str, root: str | None = None, *, job_suffix: bool = False,
                   per_node: bool = False) -> str:
    """Shell text: read the broker URL from its 0600 file into the environment, exec Celery.

    ``job_suffix``: the node is ``<node>-$MAINBOARD_JOB_ID@<machine>``, the scheduler's job
    id known only once the job runs (``slurm-hpc-12345@node07`` in Flower's list).
    ``per_node`` (one worker on each node of an allocation): ``-n<node index>`` follows
    the job id (``slurm-hpc-12345-n1@node08``), so two nodes of one allocation never share
    a Celery name or a heartbeat key, even when their machines share a hostname.

    ``root`` (the host's workspace root) goes first on the worker's PYTHONPATH, ahead of
    whatever the host's modules put there, so a run's ``kind = "python"`` integrand module
    in the workspace is found on every worker.
    """
    argv = worker_argv(python, queues, concurrency, include=WORKER_MODULES)
    index = f'{NODE_SUFFIX}"${NODE_INDEX_ENV}"' if per_node else ""
    name = (f'{shlex.quote(node)}-"$MAINBOARD_JOB_ID"{index}@%h' if job_suffix
            else shlex.quote(f"{node}@%h"))
    path = (f"PYTHONPATH={shlex.quote(root)}\"${{PYTHONPATH:+:$PYTHONPATH}}\" && "
            "export PYTHONPATH && ") if root else ""
    return (f"{path}MAINBOARD_BROKER_URL=\"$(cat {shlex.quote(secret_path)})\" && "
            f"export MAINBOARD_BROKER_URL && exec {shlex.join(argv)} -n {name}")


def worker_spec(name: str, host: HostConfig, options: UpOptions, *, worker_id: str,
                command: str = "celery worker", root: str | None = None,
                tag: str | None = None, pool: str | None = None) -> JobSpec:
    """The job that runs one worker on ``name``, with host defaults and queue policy applied.
    A scheduler reserves what a job asks for: a worker there asks a CPU per process."""
    bridge = bridge_class(host.kind, name)
    spec = JobSpec.from_params(
        command=command, name=f"mb-worker-{safe_word(name)}", walltime=options.walltime,
        cpus=options.cpus or (options.concurrency if bridge.scheduler_command() else None),
        mem_gb=options.mem_gb, gpus=options.gpus, nodes=options.nodes,
        per_node=options.nodes > 1, env={"MAINBOARD_FLEET_WORKER": worker_id, "MAINBOARD_FLEET_HOST": name,
             "MAINBOARD_HOST_KIND": host.kind,
             **({GPU_ENV: "1"} if options.gpus else {}),
             **({POOL_ENV: pool} if pool else {}),  # names it in put-back records
             **({WORKSPACE_ENV: root} if root else {})},  # its copy of the workspace
        workdir=root, tag=tag)  # retire_signal: JobSpec's default, Celery's warm shutdown
    spec = resolve(spec, host)
    check_policy(spec, host, name)
    if spec.walltime is not None:
        if options.retire_before >= spec.walltime:
            raise UserError(
                f"host {name!r}: --retire-before {format_walltime(options.retire_before)} is not "
                f"shorter than the walltime {format_walltime(spec.walltime)}; valid: a "
                "retire-before below the walltime (the worker must have time to work)")
        retire, env = options.retire_before, {**spec.env, WALLTIME_ENV: str(spec.walltime)}
        backstop = bridge.retire_backstop(retire)
        if backstop is not None:  # the worker retires by its own clock; the signal is a backstop
            env[RETIRE_ENV], retire = str(retire), backstop
        spec = JobSpec.model_validate({**spec.model_dump(), "retire_before": retire, "env": env})
    return spec


def plan(config: Config, names: Sequence[str], options: UpOptions) -> list[str]:
    """Check every host before any connection: declared, and its job within queue policy."""
    for name in names:
        worker_spec(name, config.host(name), options, worker_id="check")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class BrokerRoute:
    """The broker as the fleet sees it; ``url`` (the coordinator's) and ``workers`` (what
    its workers get, default ``url``) hold passwords: never print them."""

    url: str
    workers: str | None = None

    @property
    def worker_url(self) -> str:
        return self.workers or self.url

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or 6379

    @property
    def sentinel(self) -> bool:
        """A Sentinel-managed broker: its workers follow the sentinels, never a tunnel."""
        return is_sentinel(self.url)

    @property
    def loopback(self) -> bool:
        """One loopback-only server (a remote worker reaches it through a tunnel)."""
        return not self.sentinel and (self.host in LOOPBACK or self.host.startswith("127."))

    def via_port(self, port: int, url: str | None = None) -> str:
        """The workers' URL (or ``url``) pointing at ``127.0.0.1:port`` (a tunnel's far end)."""
        head, tail = self.around_port(url)
        return f"{head}{port}{tail}"

    def around_port(self, url: str | None = None) -> tuple[str, str]:
        """``via_port``'s URL before and after the port (the host picks the port itself)."""
        parts = urlsplit(url or self.worker_url)
        auth = parts.netloc.rpartition("@")[0]
        head = f"{parts.scheme}://{auth + '@' if auth else ''}127.0.0.1:"
        return head, urlunsplit(("", "", parts.path, parts.query, parts.fragment))


def remote(host: HostConfig) -> bool:
    """True when the host's commands run on another machine (ssh, ssh-login, provider)."""
    return host.ssh_params() is not None or isinstance(host, ProviderHost)


def ssh_dict(transport: SshTransport) -> dict[str, Any]:
    """Connection parameters (no secrets: key and known_hosts are paths) for a receipt,
    with the route (ProxyJump...) already resolved, so another process can rebuild it."""
    return transport.describe()


def ssh_from_dict(params: dict[str, Any], name: str) -> SshTransport:
    """The transport a receipt's ``ssh_dict`` describes (older receipts load too)."""
    return SshTransport.from_description(params, name)


CA_PARAM = "ssl_ca_certs"


def ca_path(secret: str) -> str:
    """Where a worker's copy of the broker's CA goes: beside its URL file."""
    return f"{secret[:-len('.broker')]}.ca.crt"


def ship_ca(transport: Transport, url: str, path: str) -> str:
    """``url`` with its TLS CA file (``ssl_ca_certs``, a path on this machine) copied to
    ``path`` on the host, and pointing there; unchanged when it names no CA."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    local = next((unquote(v) for k, v in query if k == CA_PARAM), None)
    if not local:
        return url
    try:
        data = Path(local).read_bytes()
    except OSError as exc:
        raise HostError(f"{transport.name}: the broker's CA file {local} ({CA_PARAM} in the "
                        f"broker URL) cannot be read: {exc.strerror}; fix the path") from None
    script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
    transport.run(["/bin/sh", "-c", script, "mb-ca", path], stdin=data, timeout=60, check=True)
    moved = [(k, path if k == CA_PARAM else v) for k, v in query]
    return urlunsplit(parts._replace(query=urlencode(moved, quote_via=quote, safe="/")))


@dataclass
class Target:
    """One host made reachable for a launch: its transport, absolute root and bridge maker."""

    name: str
    host: HostConfig
    transport: Transport
    root: str
    make_bridge: Callable[[str], Bridge]
    ssh: dict[str, Any] | None = None
    rental: dict[str, str] | None = None
    root_text: str = ""          # the root as configured (``root`` resolves it)
    stamp_id: str | None = None  # a host whose starts can be warm (fleet.warm)
    stamp: Stamp | None = None   # what the last full start found there


class Launcher:
    """Starts workers for one ``fleet up`` (thread-safe: one ``launch`` per host in parallel)."""

    def __init__(self, config: Config, options: UpOptions, broker: BrokerRoute,
                 ensure_keeper: Callable[[], None],
                 wait_tunnel: Callable[[str, float], int],
                 wake_keeper: Callable[[], None] = lambda: None) -> None:
        self.config, self.options, self.broker = config, options, broker
        self.receipts = fleet_receipts(config.state_dir)
        self._ensure_keeper, self._wait_tunnel = ensure_keeper, wait_tunnel
        self._wake_keeper = wake_keeper
        self.timings: dict[str, dict[str, float]] = {}  # host -> phase -> seconds (bench)
        self.pool: str | None = None  # the [fleet.pools.NAME] its workers belong to
        self.usd_hr_cap: float | None = None  # a rental's price at most (a pool's room left)
        self._project: Project | None = None
        self._project_lock = threading.Lock()

    def project(self) -> Project:
        """mainboard as installed here (its source hashed once per ``fleet up``)."""
        with self._project_lock:
            if self._project is None:
                self._project = local_project(self.config.state_dir)
            return self._project

    def _stamp_id(self, name: str, host: HostConfig) -> str | None:
        """The warm-start stamp of a host that provisions plainly (no container, not here)."""
        if host.kind == "local" or host.container_name():
            return None

        return warm.stamp_id(self.config, name, manifest_digest(self.config, name,
                                                                self.project()))

    @contextlib.contextmanager
    def phase(self, host: str, name: str) -> Iterator[None]:
        """Time one step of a host's launch into ``timings`` (rent, connect, provision...)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings.setdefault(host, {})[name] = time.perf_counter() - start

    def target(self, name: str, transport: Transport) -> Target:
        """A non-provider host: its root made absolute (and created) through ``transport``."""
        host = self.config.host(name)
        default = "~/mainboard" if remote(host) else str(self.config.root)
        text = host.root or default
        if not remote(host) and not posixpath.isabs(text):
            text = str(self.config.root / Path(text).expanduser())
        stamp_id = self._stamp_id(name, host)
        stamp = warm.lookup(self.config, stamp_id) if stamp_id else None
        if stamp is None:
            with self.phase(name, "connect"):
                root = ensure_root(transport, name, text)
        else:  # checked (and created) by the warm start's one command
            root = stamp.root
        container = self.config.container_of(host)
        return Target(name, host, transport, root, lambda r: bridge_for(
            name, host, transport, container=container, root=r),
            ssh_dict(transport) if isinstance(transport, SshTransport) else None,
            root_text=text, stamp_id=stamp_id, stamp=stamp)

    def warm_start(self, target: Target, worker_id: str, secret: str
                   ) -> tuple[str, str, str, int | None] | None:
        """(python, url, via, port) after one command on a host as stamped (root, env,
        port, secret), the tunnel asked of the keeper; None: take the full path."""
        stamp = target.stamp
        if stamp is None:
            return None
        tunnel = self.broker.loopback and target.ssh is not None

        require_env_python(self.config, target.name, stamp.python_version)  # a [deps] pin
        url = self.broker.worker_url
        if remote(target.host) and CA_PARAM in url:  # TLS: the CA first (one more command)
            url = ship_ca(target.transport, url, ca_path(secret))
        head_tail = self.broker.around_port(url) if tunnel else (url, "")
        ready = warm.prepare(target.transport, stamp, secret, head_tail, tunnel=tunnel)
        if ready is None:
            warm.record(self.config, target.stamp_id or "", None)
            return None
        if ready.port is None:  # the env is as stamped: its python can ask the sentinels
            return stamp.python, url, self._sentinels(target, stamp.python) or "direct", None
        self._ask_tunnel(target, worker_id, ready.port)
        return stamp.python, self.broker.via_port(ready.port, url), "tunnel", ready.port

    def _ask_tunnel(self, target: Target, worker_id: str, port: int) -> None:
        """Record the wanted tunnel and wake the keeper if it runs (a keeper starting reads
        the receipts first thing; ``await_tunnel`` starts one if none does)."""
        assert target.ssh is not None
        self.receipts.append(WorkerTunnel(
            worker_id=worker_id, host=target.name, ssh=target.ssh, remote_port=port,
            local_host=self.broker.host, local_port=self.broker.port))
        self._wake_keeper()

    def python_for(self, target: Target) -> str:
        """This interpreter for the local host; elsewhere the provisioned environment's."""
        if target.host.kind == "local":
            return sys.executable

        env = provision_host(self.config, target.name, target.transport, root=target.root,
                             project=self.project())
        if target.stamp_id:  # the next start on this host can be warm
            warm.record(self.config, target.stamp_id, warm.Stamp(
                target.root, env.python, env.key, env.env_dir, env.python_version))
        return env.python

    def tunnels(self, host: HostConfig) -> bool:
        """True when a worker on ``host`` reaches the broker through the keeper's tunnel."""
        return self.broker.loopback and remote(host)

    def route(self, target: Target, worker_id: str, python: str) -> tuple[str, str, int | None]:
        """(url, "direct"|"tunnel"|"sentinels", remote port): a tunnel when a remote host
        cannot reach a loopback-only broker, never for a Sentinel-managed one (its master
        moves: the worker asks the sentinels itself). A tunnel is asked of the keeper
        (recorded, the keeper woken) but not waited for: ``start`` submits the worker
        first, so it boots while the keeper dials (``await_tunnel``)."""
        if not (self.broker.loopback and target.ssh is not None):
            return self.broker.worker_url, self._sentinels(target, python) or "direct", None
        port = free_remote_port(target.transport, python)
        self._ask_tunnel(target, worker_id, port)
        return self.broker.via_port(port), "tunnel", port

    def _sentinels(self, target: Target, python: str) -> str | None:
        """``SENTINELS_VIA`` for a Sentinel-managed broker, once a remote host is seen to
        reach its sentinels and data nodes (HostError in one line when not); else None."""
        if not self.broker.sentinel:
            return None
        if remote(target.host):
            check_reachable(target.transport, python, target.name, self.broker.worker_url)
        return SENTINELS_VIA

    def await_tunnel(self, worker_id: str, port: int) -> None:
        """Until the keeper forwards ``port`` (TunnelError after 30 s)."""
        self._ensure_keeper()  # mostly started already, alongside the launch
        forwarded = self._wait_tunnel(worker_id, 30.0)
        if forwarded != port:  # the keeper binds the recorded port or fails
            raise HostError(f"the tunnel of worker {worker_id} came up on port {forwarded}, "
                            f"not the recorded {port}")

    def intent(self, worker_id: str, host: str, draft: dict[str, Any] | None = None) -> None:
        """The ``worker.submitting`` receipt: written before the scheduler or provider is
        asked, so a reconciler finds what a killed controller left (by its tag)."""
        self.receipts.append(WorkerSubmitting(
            worker_id=worker_id, host=host, tag=owner_tag(self.config.state_dir, worker_id),
            pid=os.getpid(), pool=self.pool, draft=draft or {}))

    def start(self, target: Target, idle_timeout: float | None = None,
              worker_id: str | None = None) -> WorkerStarted:
        """Provision, route, write the secret and submit the worker job on ``target``."""
        worker_id = worker_id or new_worker_id()
        node = node_prefix(target.host.kind, target.name)
        secret = posixpath.join(target.root, ".mainboard", "fleet", f"{worker_id}.broker")
        tunnelled = intended = False
        record: JobRecord | None = None
        try:
            with self.phase(target.name, "provision"):
                found = self.warm_start(target, worker_id, secret)
            if found is None:
                if target.stamp is not None:  # not as stamped: the full path, root first
                    with self.phase(target.name, "connect"):
                        target.root = ensure_root(target.transport, target.name,
                                                  target.root_text)
                    secret = posixpath.join(target.root, ".mainboard", "fleet",
                                            f"{worker_id}.broker")
                with self.phase(target.name, "provision"):
                    python = self.python_for(target)
                with self.phase(target.name, "route"):
                    url, via, port = self.route(target, worker_id, python)
            else:
                python, url, via, port = found
            tunnelled = port is not None
            with self.phase(target.name, "submit"):
                if found is None:
                    if remote(target.host):
                        url = ship_ca(target.transport, url, ca_path(secret))
                    write_secret(target.transport, secret, url)
                queues = [*self.options.queues, host_queue(target.name)]
                command = worker_command(python, node, queues, self.options.concurrency, secret,
                                         root=target.root, job_suffix=True,
                                         per_node=self.options.nodes > 1)
                spec = worker_spec(target.name, target.host, self.options, worker_id=worker_id,
                                   command=command, root=target.root,
                                   tag=owner_tag(self.config.state_dir, worker_id),
                                   pool=self.pool)
                bridge = target.make_bridge(target.root)
                spec = bridge.prepare(spec)
                uid = new_uid(spec.name)
                fields = dict(
                    worker_id=worker_id, host=target.name, kind=target.host.kind, node=node,
                    queues=queues, concurrency=self.options.concurrency, root=target.root,
                    python=python, broker_via=via, secret_path=secret, tunnel_port=port,
                    ssh=target.ssh if target.rental else None, rental=target.rental,
                    idle_timeout_s=idle_timeout, pool=self.pool, nodes=self.options.nodes)
                self.intent(worker_id, target.name, {**fields, "job": {
                    "uid": uid, "host": target.name, "kind": bridge.kind, "name": spec.name,
                    "submitted_at": time.time(),
                    "job_dir": bridge.job_dir(uid), "spec": spec.model_dump(mode="json")}})
                intended = True
                record = bridge.submit_prepared(spec, uid)
            if port is not None:  # the worker boots meanwhile (Celery retries its connection)
                with self.phase(target.name, "tunnel"):
                    self.await_tunnel(worker_id, port)
        except BaseException as exc:
            if tunnelled or intended:
                self.receipts.append(WorkerStopped(worker_id=worker_id, host=target.name,
                                                   reason=f"fleet up failed: {exc}"[:500]))
            if record is not None:  # submitted, but its tunnel never came up
                with contextlib.suppress(Exception):
                    target.make_bridge(target.root).cancel([record])
            remove_secret(target.transport, secret)
            raise
        assert record is not None  # submitted, or the except above re-raised
        started = adopted(fields, record)
        self.receipts.append(started)
        return started


def new_worker_id() -> str:
    return secrets.token_hex(3)


def adopted(draft: dict[str, Any], record: JobRecord) -> WorkerStarted:
    """The ``worker.started`` of a draft (a ``worker.submitting``'s) once its job has an id:
    the node is as the worker names itself (``job_suffix``)."""
    fields = {k: v for k, v in draft.items() if k != "job"}
    return WorkerStarted.model_validate({**fields, "node": f"{draft['node']}-{record.job_id}",
                                         "job": record.model_dump(mode="json")})
