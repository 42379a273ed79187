"""A provisioned host's worker start in one round trip: root, environment, port and secret.

Starting a worker on a host whose environment is built already used to cost five
commands there (root, provisioning check, a free port for the tunnel, the secret, the
submission), each a new ssh session and a login shell; on a busy machine that is most
of `fleet up`. After the first full start, a stamp (``.mainboard/fleet/env-stamps.json``)
remembers, per host and what its environment is made of, the absolute root and the
environment (its key, python, base version). The next start sends one command that
enters the root, checks with the environment's own python that its marker still holds
that key on that base python, picks the tunnel's port and writes the broker URL into
its 0600 file (the URL on stdin, never in argv). Anything else (no stamp, a changed
set, a rebuilt or deleted env, another root) answers "not ready" and the launch takes
the full path, which writes a new stamp. Nothing but the submission remains after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

from mainboard.bridges.transport import Transport
from mainboard.config import Config
from mainboard.errors import HostError
from mainboard.hosts.root import TAG, tagged
from mainboard.locks import flocked
from mainboard.statedir import fleet_dir

STAMPS = "env-stamps.json"
_TAG = "mb-warm:"
MARKER = ".mainboard-env.json"  # the provision driver's marker, written last in an env
# Runs on the environment's python (-S: stdlib only, no site to import) in the root.
_CODE = f"""\
import json, os, socket, sys
root, env_dir, key, version, secret, tunnel = sys.argv[1:7]
ok = os.getcwd() == root and sys.version.split()[0] == version
try:
    with open(os.path.join(env_dir, {MARKER!r})) as handle:
        ok = ok and json.load(handle).get("key") == key
except (OSError, ValueError, AttributeError):
    ok = False
out = {{"ready": ok, "root": os.getcwd()}}
if ok:
    port = ""
    if tunnel == "1":
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = str(s.getsockname()[1]); s.close()
    url = json.loads(sys.stdin.read())
    os.umask(0o077)
    os.makedirs(os.path.dirname(secret), exist_ok=True)
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, (url["head"] + port + url["tail"]).encode()); os.close(fd)
    out["port"] = int(port) if port else None
print({_TAG!r} + json.dumps(out))
"""


@dataclass(frozen=True)
class Stamp:
    """What a full start found on a host: its absolute root and its built environment."""

    root: str
    python: str          # the environment's interpreter, which the worker execs
    key: str
    env_dir: str
    python_version: str  # of the base python, as the provision driver reports it


@dataclass(frozen=True)
class Ready:
    """A warm start's answer: the secret is written; ``port`` is the tunnel's far end."""

    port: int | None


def stamp_id(config: Config, name: str, manifest: str) -> str:
    """The stamp's key: the host's whole table (address, root, python, env...) and the
    digest of what its environment is made of (``provision.manifest_digest``)."""
    host = config.host(name).model_dump(mode="json")
    text = json.dumps({"host": name, "table": host, "manifest": manifest}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path(config: Config) -> Path:
    return fleet_dir(config.state_dir) / STAMPS


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(config: Config, stamp: str) -> Stamp | None:
    """The stamp recorded under ``stamp`` (None when there is none or it is unreadable)."""
    found = _read(_path(config)).get(stamp)
    try:
        return Stamp(**found) if isinstance(found, dict) else None
    except TypeError:
        return None


def record(config: Config, stamp: str, value: Stamp | None) -> None:
    """Remember (or, with None, forget) the stamp; concurrent launches take turns."""
    path = _path(config)
    with flocked(path.with_suffix(".lock")):
        data = _read(path)
        if value is None:
            data.pop(stamp, None)
        else:
            data[stamp] = asdict(value)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        tmp.replace(path)


def prepare(transport: Transport, stamp: Stamp, secret: str, url: tuple[str, str],
            *, tunnel: bool) -> Ready | None:
    """One command on the host: enter the root, check the environment, pick the tunnel's
    port (``tunnel``) and write ``url`` (head + port + tail) into ``secret``; None when the
    host is not as stamped (nothing written then) or the command failed."""
    q = shlex.quote
    script = (f"mkdir -p -- {q(stamp.root)} && cd -- {q(stamp.root)} && exec {q(stamp.python)} "
              f"-S -c {q(_CODE)} {q(stamp.root)} {q(stamp.env_dir)} {q(stamp.key)} "
              f"{q(stamp.python_version)} {q(secret)} {'1' if tunnel else '0'}")
    head, tail = url
    done = transport.run(["/bin/sh", "-c", script], timeout=60,
                         stdin=json.dumps({"head": head, "tail": tail}).encode())
    lines = [ln[len(_TAG):] for ln in done.stdout.splitlines() if ln.startswith(_TAG)]
    if not done.ok or not lines:
        return None
    try:
        found = json.loads(lines[-1])
    except ValueError:
        return None
    if not found.get("ready"):
        return None
    port = found.get("port")
    return Ready(int(port) if port is not None else None)


# -- the same steps one command each (the full path of a start) --------------------------


def free_remote_port(transport: Transport, python: str) -> int:
    """A TCP port nobody listens on at the host's 127.0.0.1 (the tunnel's far end)."""
    code = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
            f"print('{TAG}%d' % s.getsockname()[1])")
    done = transport.run([python, "-c", code], timeout=60, check=True)
    found = tagged(done.stdout)
    if not found or not found.isdigit():
        raise HostError(f"{transport.name}: could not pick a free port for the broker tunnel")
    return int(found)


def write_secret(transport: Transport, path: str, url: str) -> None:
    """The broker URL into a fresh 0600 file on the host, through stdin (never argv)."""
    script = 'umask 077 && mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
    transport.run(["/bin/sh", "-c", script, "mb-secret", path], stdin=url.encode(), timeout=60,
                  check=True)


def remove_secret(transport: Transport, path: str) -> None:
    """Best effort: the worker has the URL in its environment already."""
    with contextlib.suppress(Exception):
        transport.run(["rm", "-f", "--", path], timeout=30)
