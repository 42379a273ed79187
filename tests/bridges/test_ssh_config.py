"""ssh hosts honour the user's ssh config (``$MAINBOARD_SSH_CONFIG``, else ~/.ssh/config).

Resolution is compared with OpenSSH's own (``ssh -G``). Connections are real: an alias
with HostName/User/Port/IdentityFile against a real sshd and a real second account, and
ProxyJump through a jump sshd in a network namespace to a target sshd that listens only
on that namespace's own loopback, which this process cannot reach except through the jump.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges import ssh
from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.ssh_route import CONFIG_ENV, resolve
from mainboard.errors import HostKeyMismatch, HostUnreachable, UserError
from tests.support.boards import write_config
from tests.support.netns import NetnsHost, free_subnet_index, make_netns_host
from tests.support.services import SshServer, require, start_sshd, unavailable

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]


def _accepted(server: SshServer) -> int:
    """How many connections sshd authenticated (one log line per connection)."""
    return (server.dir / "sshd.log").read_text().count("Accepted publickey")


def _openssh(config: Path, alias: str) -> dict[str, list[str]]:
    """What OpenSSH itself resolves for ``alias`` (``ssh -G``), key -> values."""
    out = subprocess.run([require("ssh", "apt-get install openssh-client"), "-G", "-F",
                          str(config), alias], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        found.setdefault(key, []).append(value)
    return found


def test_aliases_resolve_as_openssh_resolves_them(tmp_path: Path) -> None:
    keys = [tmp_path / name for name in ("k_box", "k_jump", "k_star")]
    for key in keys:
        key.write_text("not read here\n")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "jump.conf").write_text(
        f"Host jumpy\n  HostName 10.1.2.3\n  Port 2201\n  User hopper\n"
        f"  IdentityFile {keys[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Include {tmp_path}/conf.d/*.conf\n"
        f"Host box\n  HostName 192.0.2.7\n  User alice\n  Port 2222\n"
        f"  IdentityFile {keys[0]}\n  IdentityFile {tmp_path}/missing_key\n"
        f"  ProxyJump jumpy,carol@hop2:2300\n"
        f"Host plain\n  User bob\n"
        f"Host *\n  IdentityFile {keys[2]}\n  ConnectTimeout 7\n")
    for alias in ("box", "plain", "jumpy", "unknown.example"):
        mine = resolve(alias, ssh_config=config)
        theirs = _openssh(config, alias)
        assert mine.target.host == theirs["hostname"][0]
        assert str(mine.target.port) == theirs["port"][0]
        assert mine.target.user == theirs["user"][0]
        existing = [f for f in theirs["identityfile"] if os.path.isfile(f)]
        assert list(mine.target.identities) == existing  # missing files skipped, as ssh does
        assert mine.connect_timeout == float(theirs["connecttimeout"][0]) == 7.0
    box = resolve("box", ssh_config=config)
    assert _openssh(config, "box")["proxyjump"] == ["jumpy,carol@hop2:2300"]
    assert [(h.host, h.port, h.user) for h in box.jumps] == [
        ("10.1.2.3", 2201, "hopper"), ("hop2", 2300, "carol")]
    assert box.jumps[0].identities == (str(keys[1]), str(keys[2]))  # the jump's own entry
    # Values given explicitly (mainboard.toml) win over the ssh config.
    given = resolve("box", port=22, user="root", identity=str(keys[2]), jump="none",
                    known_hosts=tmp_path / "kh", ssh_config=config)
    assert (given.target.host, given.target.port, given.target.user) == ("192.0.2.7", 22, "root")
    assert given.target.identities == (str(keys[2]),) and given.jumps == ()
    assert given.known_hosts == tmp_path / "kh"
    assert resolve("box", ssh_config="none").target.host == "box"


def test_mainboard_toml_keys_win_and_the_rest_comes_from_the_ssh_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host box\n  HostName 192.0.2.9\n  Port 2222\n  User alice\n"
                      "  ConnectTimeout 4\n")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    write_config(tmp_path, {"plain": {"kind": "ssh", "host": "box"},
                            "pinned": {"kind": "ssh", "host": "box", "port": 22, "user": "root",
                                       "connect_timeout": 9}})
    with Board(tmp_path / "mainboard.toml") as board:
        plain, pinned = (board.on(n).transport for n in ("plain", "pinned"))
        assert isinstance(plain, SshTransport) and isinstance(pinned, SshTransport)
        assert (plain.host, plain.port, plain.user, plain.connect_timeout) == (
            "192.0.2.9", 2222, "alice", 4.0)
        assert (pinned.host, pinned.port, pinned.user, pinned.connect_timeout) == (
            "192.0.2.9", 22, "root", 9.0)  # written in mainboard.toml, so they win
        # Without the list of written keys, a value equal to the default counts as unset.
        params = board.config.host("pinned").ssh_params()
        if getattr(params, "given", None) is not None:  # SshParams that says what was written
            params = replace(params, given=None)
        guessed = SshTransport.from_params(params, "pinned")
        assert (guessed.port, guessed.user) == (2222, "alice")
        told = SshTransport.from_params(params, "pinned", given=("port", "user"))
        assert (told.port, told.user) == (22, "root")


def test_a_broken_ssh_config_is_a_user_error_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "nope"))
    with pytest.raises(UserError, match=f"{CONFIG_ENV} names .*nope, which is not a file"):
        resolve("box")
    bad = tmp_path / "bad"
    bad.write_text("Host box\n  Port many\n")
    monkeypatch.setenv(CONFIG_ENV, str(bad))
    with pytest.raises(UserError, match=f"ssh config {bad}: Port 'many' for 'box'"):
        resolve("box")
    loop = tmp_path / "loop"
    loop.write_text("Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    monkeypatch.setenv(CONFIG_ENV, str(loop))
    with pytest.raises(UserError, match="ProxyJump chains more than"):
        resolve("a")


# -- an alias with HostName, User, Port and IdentityFile, against a real sshd -----------------

@pytest.fixture(scope="module")
def open_sshd() -> Iterator[SshServer]:
    """A real sshd whose authorized_keys every account can read (a world-readable directory:
    sshd reads that file as the user logging in)."""
    directory = Path(tempfile.mkdtemp(prefix="mbt-sshcfg-"))
    directory.chmod(0o755)
    server = start_sshd(directory)
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def login_user() -> Iterator[str]:
    """A throwaway account (not root), so that the ssh config's ``User`` is seen to count."""
    if os.geteuid() != 0:
        unavailable("creating a login account needs root")
    useradd, userdel = require("useradd", "passwd"), require("userdel", "passwd")
    name = f"mbt{os.getpid()}"
    home = Path(tempfile.gettempdir()) / f"{name}-home"
    subprocess.run([useradd, "-m", "-d", str(home), "-s", "/bin/sh", name], check=True,
                   capture_output=True)
    try:
        subprocess.run(["usermod", "-p", "*", name], check=True)  # unlocked, no password
        yield name
    finally:
        subprocess.run([userdel, "-r", name], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def test_an_alias_resolves_hostname_user_port_and_identity(
        open_sshd: SshServer, login_user: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu-alias\n  HostName 127.0.0.1\n  User {login_user}\n"
                      f"  Port {open_sshd.port}\n  IdentityFile {open_sshd.identity}\n")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    known = tmp_path / "known_hosts"
    write_config(tmp_path, {
        "box": {"kind": "ssh", "host": "gpu-alias", "known_hosts": str(known),
                "trust": "first-use", "root": "~/work"},
        "as-root": {"kind": "ssh", "host": "gpu-alias", "user": "root", "known_hosts": str(known),
                    "root": str(tmp_path / "root-work")}})
    ssh.close_all()
    before = _accepted(open_sshd)
    with Board(tmp_path / "mainboard.toml") as board:
        out = board.on("box").run('id -un; echo "$SSH_CONNECTION"; pwd', check=True).stdout
        user, connection, cwd = out.splitlines()
        assert user == login_user and connection.split()[3] == str(open_sshd.port)
        assert cwd.endswith(f"{login_user}-home/work")
        # The key is recorded under the HostName and Port, as ssh records it (not the alias).
        assert known.read_text() == f"[127.0.0.1]:{open_sshd.port} {open_sshd.host_key_line}\n"
        # mainboard.toml's own `user` wins over the ssh config's User.
        assert board.on("as-root").run("id -un", check=True).stdout == "root\n"
    assert _accepted(open_sshd) == before + 2
    log = (open_sshd.dir / "sshd.log").read_text()
    assert f"Accepted publickey for {login_user} from 127.0.0.1" in log


# -- ProxyJump through a second real sshd -------------------------------------------------------

@dataclass
class Jumped:
    """A jump sshd reachable from here, and a target sshd reachable only from the jump."""

    ns: NetnsHost
    jump: SshServer
    target: SshServer
    config: Path

    def known_hosts(self, path: Path) -> Path:
        path.write_text(f"[{self.jump.host}]:{self.jump.port} {self.jump.host_key_line}\n"
                        f"[{self.target.host}]:{self.target.port} {self.target.host_key_line}\n")
        return path


@pytest.fixture(scope="module")
def jumped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jumped]:
    """Namespace NS: the jump sshd on its veth address (10.78.N.2), the target sshd on NS's
    own 127.0.0.1, which is not this process's loopback: only the jump host can reach it."""
    base = tmp_path_factory.mktemp("jump")
    ns = make_netns_host("sshjump", free_subnet_index(), base / "jump")
    try:
        assert ns.ssh is not None
        target = start_sshd(base / "target", listen="127.0.0.1", wrapper=ns.command([]),
                            unreachable=True)
        config = base / "ssh_config"
        config.write_text(
            f"Host jumpbox\n  HostName {ns.addr}\n  Port {ns.ssh.port}\n  User root\n"
            f"  IdentityFile {ns.ssh.identity}\n"
            f"Host inner\n  HostName 127.0.0.1\n  Port {target.port}\n  User root\n"
            f"  IdentityFile {target.identity}\n  ProxyJump jumpbox\n")
        yield Jumped(ns, ns.ssh, target, config)
        target.stop()
    finally:
        ns.cleanup()


def _board(tmp_path: Path, **keys: str) -> Board:
    write_config(tmp_path, {"inner": {"kind": "ssh", "host": "inner",
                                      "root": str(tmp_path / "work"), **keys}})
    return Board(tmp_path / "mainboard.toml")


def test_proxy_jump_reaches_a_target_only_the_jump_host_can_reach(
        jumped: Jumped, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(jumped.config))
    known = jumped.known_hosts(tmp_path / "known_hosts")
    direct = SshTransport("127.0.0.1", port=jumped.target.port, user="root",
                          identity=str(jumped.target.identity), known_hosts=known,
                          connect_timeout=3, name="direct")
    with pytest.raises(HostUnreachable, match="connection refused"):
        direct.run("true")  # from here the target's address is not reachable at all
    ssh.close_all()
    hops, accepted = _accepted(jumped.jump), _accepted(jumped.target)
    with _board(tmp_path, known_hosts=str(known)) as board:
        inner = board.on("inner")
        assert [h.target for h in inner.transport.jumps] == [  # type: ignore[attr-defined]
            f"root@{jumped.ns.addr}:{jumped.jump.port}"]
        out = inner.run('echo "$SSH_CONNECTION"', check=True).stdout
        client_ip, _port, server_ip, server_port = out.split()
        # The target saw a connection from its own loopback: the jump host's forwarding.
        assert (client_ip, server_ip, server_port) == ("127.0.0.1", "127.0.0.1",
                                                       str(jumped.target.port))
        payload = tmp_path / "payload.bin"
        payload.write_bytes(os.urandom(200_000))
        inner.put(payload, "in/payload.bin")  # SFTP over the jumped session
        assert inner.get("in/payload.bin", tmp_path / "back.bin").read_bytes() == \
            payload.read_bytes()
        with Board(tmp_path / "mainboard.toml") as other:  # same route: the pooled connection
            assert other.on("inner").run("echo pooled").stdout == "pooled\n"
    assert (_accepted(jumped.jump), _accepted(jumped.target)) == (hops + 1, accepted + 1)
    log = (jumped.target.dir / "sshd.log").read_text()
    assert "Accepted publickey for root from 127.0.0.1" in log


def test_pool_keys_include_the_jump_route(jumped: Jumped, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(jumped.config))
    known = jumped.known_hosts(tmp_path / "known_hosts")
    ssh.close_all()
    via = SshTransport("inner", known_hosts=known, name="via")
    same_target_direct = SshTransport("inner", known_hosts=known, jump="none", connect_timeout=3,
                                      name="direct")
    try:
        assert via.host == same_target_direct.host and via.port == same_target_direct.port
        assert via.run("echo via").stdout == "via\n"
        with pytest.raises(HostUnreachable, match="connection refused"):
            same_target_direct.run("true")  # never borrows the jumped connection
        again = SshTransport.from_description(via.describe(), "again")  # another process
        monkeypatch.setenv(CONFIG_ENV, "none")
        assert again.run("echo again").stdout == "again\n"
        assert again.paramiko_transport is via.paramiko_transport
    finally:
        for transport in (via, same_target_direct):
            transport.close()


def test_jump_host_keys_follow_the_same_trust_rules(jumped: Jumped, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(jumped.config))
    ssh.close_all()
    only_target = tmp_path / "only_target"
    only_target.write_text(f"[127.0.0.1]:{jumped.target.port} {jumped.target.host_key_line}\n")
    with _board(tmp_path, known_hosts=str(only_target)) as board:
        with pytest.raises(HostKeyMismatch) as caught:
            board.on("inner").run("true")
    assert f"host key for [{jumped.ns.addr}]:{jumped.jump.port} " in str(caught.value)
    assert "is not in" in str(caught.value)
    empty = tmp_path / "tofu" / "known_hosts"
    ssh.close_all()
    with _board(tmp_path, known_hosts=str(empty), trust="first-use") as board:
        assert board.on("inner").run("echo tofu").stdout == "tofu\n"
    assert empty.read_text().splitlines() == [
        f"[{jumped.ns.addr}]:{jumped.jump.port} {jumped.jump.host_key_line}",
        f"[127.0.0.1]:{jumped.target.port} {jumped.target.host_key_line}"]
    other = tmp_path / "other_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    changed = tmp_path / "changed"  # the target's key recorded as some other key
    changed.write_text(f"[{jumped.ns.addr}]:{jumped.jump.port} {jumped.jump.host_key_line}\n"
                       f"[127.0.0.1]:{jumped.target.port} "
                       f"{' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n")
    ssh.close_all()
    with _board(tmp_path, known_hosts=str(changed), trust="first-use") as board:
        with pytest.raises(HostKeyMismatch, match=rf"\[127.0.0.1\]:{jumped.target.port} CHANGED"):
            board.on("inner").run("true")


def test_a_dead_jump_route_is_rebuilt_transparently(jumped: Jumped, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(jumped.config))
    known = jumped.known_hosts(tmp_path / "known_hosts")
    ssh.close_all()
    with _board(tmp_path, known_hosts=str(known)) as board:
        inner = board.on("inner")
        inner.run("true", check=True)
        dead = inner.transport.paramiko_transport  # type: ignore[attr-defined]
        assert jumped.ns.kill_ssh_sessions() >= 1  # the jump host's sessions: the route dies
        assert inner.run("echo back").stdout == "back\n"
        assert inner.transport.paramiko_transport is not dead  # type: ignore[attr-defined]


def test_proxy_command_from_the_ssh_config(jumped: Jumped, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``ProxyCommand ssh -W %h:%p jumpbox``: OpenSSH's own client carries the session."""
    client = require("ssh", "apt-get install openssh-client")
    known = jumped.known_hosts(tmp_path / "known_hosts")
    config = tmp_path / "ssh_config"
    config.write_text(
        jumped.config.read_text().replace("  ProxyJump jumpbox\n", "")
        + f"Host viacmd\n  HostName 127.0.0.1\n  Port {jumped.target.port}\n  User root\n"
        f"  IdentityFile {jumped.target.identity}\n"
        f"  ProxyCommand {client} -F {config} -o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={known} -W %h:%p jumpbox\n")
    monkeypatch.setenv(CONFIG_ENV, str(config))
    ssh.close_all()
    hops = _accepted(jumped.jump)
    with _board(tmp_path, known_hosts=str(known), host="viacmd") as board:
        out = board.on("inner").run('echo "$SSH_CONNECTION"', check=True).stdout
    assert out.split()[0] == "127.0.0.1" and out.split()[3] == str(jumped.target.port)
    assert _accepted(jumped.jump) == hops + 1
