"""Real services for tests, as importable functions (the rq habit).

Each ``start_*`` function starts a real process on loopback on a free port and
returns a handle with ``stop()``. ``require`` skips a test locally when a program
is missing but fails it under ``CI=true``: in CI a missing service is a defect.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(msg: str) -> NoReturn:
    """A service a test needs is missing: a failure under CI=true, a skip only locally."""
    if IN_CI:
        pytest.fail(msg, pytrace=False)
    pytest.skip(f"{msg} (not CI, so skipped; under CI=true this fails)")
    raise AssertionError("unreachable")


def require(program: str, why: str = "") -> str:
    """Path of ``program``; skip (locally) or fail (under CI=true) when it is missing."""
    found = shutil.which(program) or next(
        (p for p in (f"/usr/sbin/{program}", f"/usr/bin/{program}") if os.path.exists(p)), None)
    if found:
        return found
    unavailable(f"{program} not installed{': ' + why if why else ''} "
                "(run the README test command)")


def clear_stale_pyenv_lock() -> None:
    """Remove pyenv's rehash lock when no rehash holds it. The hosts' ``python3`` may be a
    pyenv shim, which rehashes after ``python -m pip install`` under a lock file; a rehash
    killed mid-way (an earlier run stopped by SIGKILL) leaves the lock, and every later
    install on the host then waits 60 s and fails ("cannot overwrite existing file")."""
    lock = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "shims" / ".pyenv-shim"
    if not lock.exists():
        return
    running = subprocess.run(["pgrep", "-f", "pyenv-rehash"], capture_output=True, check=False)
    if running.returncode != 0:  # nothing holds it
        lock.unlink(missing_ok=True)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Block until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class RedisServer:
    """A private redis-server on loopback."""

    port: int
    password: str | None
    dir: Path
    proc: subprocess.Popen = field(repr=False)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        _terminate(self.proc)


def start_redis(directory: Path, password: str | None = None) -> RedisServer:
    """Start redis-server on a free loopback port with its data in ``directory``."""
    binary = require("redis-server")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = directory / "redis.conf"
    lines = [f"port {port}", "bind 127.0.0.1", "save ''", "appendonly no",
             f"dir {directory}", "daemonize no", f"logfile {directory / 'redis.log'}"]
    if password:
        lines.append(f"requirepass {password}")
    conf.write_text("\n".join(lines) + "\n")
    conf.chmod(0o600)
    proc = subprocess.Popen([binary, str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_port("127.0.0.1", port)
    return RedisServer(port=port, password=password, dir=directory, proc=proc)


@dataclass
class SshServer:
    """A real OpenSSH sshd on loopback that accepts one client key for ``user``."""

    host: str
    port: int
    user: str
    identity: Path
    host_key_line: str
    dir: Path
    proc: subprocess.Popen = field(repr=False)

    def known_hosts(self, path: Path | None = None) -> Path:
        """Write a known_hosts file that trusts this server and return its path."""
        path = path or self.dir / "known_hosts"
        path.write_text(f"[{self.host}]:{self.port} {self.host_key_line}\n")
        return path

    def stop(self) -> None:
        _terminate(self.proc)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, stdout=subprocess.DEVNULL)


COVERAGE_ENV = ("COVERAGE_PROCESS_START", "COVERAGE_FILE", "MAINBOARD_COVERAGE_ROOT",
                "MAINBOARD_COVERAGE_SITE")


def coverage_setenv() -> str:
    """sshd's ``SetEnv`` line under ``scripts/bootstrap test``: commands run on the test hosts
    are measured too (tests/covboot/ on their PYTHONPATH); empty when coverage is off."""
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return ""
    pairs = {name: os.environ[name] for name in COVERAGE_ENV if os.environ.get(name)}
    pairs["PYTHONPATH"] = str(Path(__file__).parents[1] / "covboot")
    return "SetEnv " + " ".join(f'"{name}={value}"' for name, value in pairs.items()) + "\n"


def start_sshd(directory: Path, user: str = "root", port: int | None = None, *,
               listen: str = "127.0.0.1", wrapper: Sequence[str] = (),
               unreachable: bool = False) -> SshServer:
    """Start sshd on a free (or the given) loopback port; the client key is ``directory/client_ed25519``.

    Keys already in ``directory`` are reused, so a test can restart a server with a new
    host key but the same client key (or the reverse) on the same port. ``listen`` and
    ``wrapper`` (argv run before sshd, e.g. ``ip netns exec NS``) serve another network.
    ``unreachable``: this process cannot connect to it (e.g. the loopback of another
    network namespace, reached only through a jump host), so readiness is read from
    sshd's log instead of probed.
    """
    sshd = require("sshd", "apt-get install openssh-server")
    require("ssh-keygen")
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    if not host_key.exists():
        _keygen(host_key)
    if not client_key.exists():
        _keygen(client_key)
    auth = directory / "authorized_keys"
    auth.write_text((directory / "client_ed25519.pub").read_text())
    auth.chmod(0o644)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    conf = directory / "sshd_config"
    conf.write_text(
        f"Port {port}\nListenAddress {listen}\nHostKey {host_key}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\n"
        "MaxStartups 100:30:200\nMaxSessions 50\nSubsystem sftp internal-sftp\n"
        + coverage_setenv())
    log = directory / "sshd.log"
    seen = log.read_text(errors="replace").count("Server listening") if log.exists() else 0
    proc = subprocess.Popen([*wrapper, sshd, "-f", str(conf), "-D", "-E", str(log)])
    if unreachable:
        _wait_listening(log, seen, proc)
    else:
        wait_port(listen, port)
    key_type, key_b64 = (directory / "host_ed25519.pub").read_text().split()[:2]
    return SshServer(host=listen, port=port, user=user, identity=client_key,
                     host_key_line=f"{key_type} {key_b64}", dir=directory, proc=proc)


def _wait_listening(log: Path, seen: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Block until sshd logs one more "Server listening" line than ``seen`` (it is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count("Server listening") > seen:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with code {proc.returncode}; see {log}")
        time.sleep(0.05)
    raise TimeoutError(f"sshd did not report listening within {timeout}s; see {log}")


MULTI_PARTITION = "multi"
SECOND_NODE = "mbnode2"


@dataclass
class SlurmCluster:
    """A real single-node SLURM (slurmctld + slurmd + munge) on loopback.

    ``env`` holds ``SLURM_CONF``; pass it to every sbatch/squeue/qsub call.
    """

    dir: Path
    conf: Path
    node: str
    partition: str
    procs: list[subprocess.Popen] = field(repr=False)
    multi: str = MULTI_PARTITION  # both nodes: a 2-node allocation on this one machine

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _terminate(proc)


def start_slurm(directory: Path, cpus: int = 8) -> SlurmCluster:
    """Start munged, slurmctld and slurmd with state in ``directory`` (fresh state each time).

    ``cpus`` more than the machine has (config_overrides): several fleet allocations run at
    once on this one node, as on a cluster. A second slurmd (``-N mbnode2``: its own port,
    pid file and spool, the same machine) is a second node, only in partition ``multi``
    with the first: a real 2-node allocation (``srun`` runs a task on each) where the
    other partitions see one node."""
    munged = require("munged", "apt-get install munge")
    slurmctld = require("slurmctld", "apt-get install slurm-wlm")
    slurmd = require("slurmd", "apt-get install slurm-wlm")
    require("sbatch", "apt-get install slurm-wlm")
    directory.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool", "munge"):
        (directory / sub).mkdir(exist_ok=True)
    key = directory / "munge" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = directory / "munge" / "munge.socket"
    procs = [subprocess.Popen(
        [munged, "-F", "--force", f"--key-file={key}", f"--socket={sock}",
         f"--pid-file={directory / 'munge' / 'munged.pid'}",
         f"--log-file={directory / 'munge' / 'munged.log'}",
         f"--seed-file={directory / 'munge' / 'munged.seed'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 10
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    node = socket.gethostname().split(".")[0]
    d = directory
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=mbtest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
CommunicationParameters=NoInAddrAny
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d}/jobcomp.txt
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=1
MinJobAge=300
KillWait=5
MailProg=/bin/true
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
NodeName={SECOND_NODE} NodeHostname={node} NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus} \
RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=short Nodes={node} Default=NO MaxTime=00:10:00 State=UP
PartitionName={MULTI_PARTITION} Nodes={node},{SECOND_NODE} Default=NO MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    procs.append(subprocess.Popen([slurmctld, "-D", "-i", "-f", str(conf)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for name in (node, SECOND_NODE):
        procs.append(subprocess.Popen([slurmd, "-D", "-N", name, "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    cluster = SlurmCluster(dir=d, conf=conf, node=node, partition="debug", procs=procs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T", "-n", f"{node},{SECOND_NODE}"],
                             env=env, capture_output=True, text=True)
        states = out.stdout.split()
        if out.returncode == 0 and len(states) >= 2 \
                and set(states) <= {"idle", "mixed", "allocated"}:
            return cluster
        time.sleep(0.3)
    cluster.stop()
    raise TimeoutError(f"SLURM node {node} not idle after 30s; see {d}/slurmctld.log")
