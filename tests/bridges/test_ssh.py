"""Board over a real loopback sshd with real paramiko: pooling, host keys, errors, SFTP, the CLI."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mainboard.board import Board
from mainboard.bridges import ssh
from mainboard.bridges.ssh_session import remote_word
from mainboard.errors import (
    AuthFailed,
    CommandFailed,
    CommandTimeout,
    HostKeyMismatch,
    HostUnreachable,
    UserError,
)
from tests.support.boards import interrupt_cli_run, process_gone, ssh_host, write_config
from tests.support.cliserver import run_mainboard
from tests.support.services import SshServer, free_port, start_sshd

HOSTILE = "a'; echo pwned $(touch {mark}) `touch {mark}` \"q\" x"


@pytest.fixture
def known_hosts(sshd_server: SshServer, tmp_path: Path) -> Path:
    """A known_hosts that trusts the session sshd."""
    return sshd_server.known_hosts(tmp_path / "known_hosts")


@pytest.fixture
def board(sshd_server: SshServer, known_hosts: Path, tmp_path: Path) -> Iterator[Board]:
    """Hosts "box" (ssh), "login" (slurm via ssh login) and "hostile" with a hostile root
    (host names themselves are plain words: a hostile one is refused at load)."""
    mark = tmp_path / "pwned"
    write_config(tmp_path, {
        "box": ssh_host(sshd_server, known_hosts, root=str(tmp_path / "box root")),
        "login": {**ssh_host(sshd_server, known_hosts), "kind": "slurm", "login": "ssh",
                  "root": str(tmp_path / "cluster")},
        "hostile": ssh_host(
            sshd_server, known_hosts, root=str(tmp_path / HOSTILE.format(mark=mark))),
    })
    with Board(tmp_path / "mainboard.toml") as b:
        yield b


def _accepted(server: SshServer) -> int:
    """How many connections sshd has authenticated (it logs one line per connection)."""
    return (server.dir / "sshd.log").read_text().count("Accepted publickey")


def test_ssh_run_captures_streams_code_and_runs_in_the_created_root(board: Board,
                                                                    tmp_path: Path) -> None:
    result = board.on("box").run("echo out; echo err >&2; pwd -P; exit 3")
    assert (result.stdout, result.stderr, result.returncode, result.host) == (
        f"out\n{(tmp_path / 'box root').resolve()}\n", "err\n", 3, "box")
    with pytest.raises(CommandFailed) as caught:
        board.on("box").run(["sh", "-c", "echo boom >&2; exit 4"], check=True)
    assert caught.value.host == "box" and "exit code 4" in str(caught.value)
    assert "sh -c 'echo boom >&2; exit 4'" in str(caught.value) and "boom" in str(caught.value)


def test_tilde_root_expands_remotely_and_the_rest_is_quoted(sshd_server: SshServer,
                                                           known_hosts: Path,
                                                           tmp_path: Path) -> None:
    relative = f".cache/mainboard-test-{uuid.uuid4().hex[:8]}/it's $(x)"
    home = Path(os.path.expanduser(f"~{sshd_server.user}"))
    write_config(tmp_path, {"box": ssh_host(sshd_server, known_hosts, root=f"~/{relative}")})
    try:
        with Board(tmp_path / "mainboard.toml") as b:
            assert b.on("box").run("pwd").stdout.strip() == str(home / relative)
    finally:
        shutil.rmtree(home / relative.split("/")[0] / relative.split("/")[1],
                      ignore_errors=True)


@pytest.mark.parametrize(("path", "expected"), [
    ("~", "{home}"),
    ("~/", "{home}"),
    ("~/a b/it's", "{home}/a b/it's"),
    ("~root/x $(y)", "{root_home}/x $(y)"),
    ("-rf", "./-rf"),
    ("/abs/$(touch x)/`y`", "/abs/$(touch x)/`y`"),
    ("rel/~not-home", "rel/~not-home"),
    ("~$(id)", "~$(id)"),
])
def test_remote_word_expands_only_a_leading_tilde(path: str, expected: str) -> None:
    home, root_home = "/home/h o'me", os.path.expanduser("~root")
    shell = subprocess.run(["sh", "-c", f"printf %s {remote_word(path)}"], check=True,
                           capture_output=True, text=True, env={"HOME": home, "PATH": "/usr/bin:/bin"})
    assert shell.stdout == expected.format(home=home, root_home=root_home)


def test_hostile_root_command_and_env_run_safely(board: Board, tmp_path: Path) -> None:
    mark = tmp_path / "pwned"
    name = HOSTILE.format(mark=mark)
    host = board.on("hostile")
    result = host.run(["printf", "%s|%s", name, "$MB_X"], env={"MB_X": name}, check=True)
    assert result.stdout == f"{name}|$MB_X"
    assert host.run('printf "%s" "$MB_X"', env={"MB_X": name}).stdout == name
    assert host.run("pwd -P").stdout.strip() == str((tmp_path / name).resolve())
    assert (tmp_path / name).is_dir()  # the root exists exactly as named
    assert host.put(__file__, f"{name}.py").endswith(f"/{name}/{name}.py")
    assert (tmp_path / name / f"{name}.py").read_text() == Path(__file__).read_text()
    assert not mark.exists() and "pwned\n" not in result.stdout


def test_one_pooled_connection_serves_calls_boards_and_threads(board: Board,
                                                              sshd_server: SshServer,
                                                              tmp_path: Path) -> None:
    ssh.close_all()
    before = _accepted(sshd_server)
    first = board.on("box")
    first.run("true", check=True)
    transport = first.transport.paramiko_transport
    first.run("true", check=True)
    assert first.transport.paramiko_transport is transport
    with Board(tmp_path / "mainboard.toml") as other:  # another Board, same (host, port, user)
        other.on("box").run("true", check=True)
        assert other.on("box").transport.paramiko_transport is transport
        board.on("login").run("true", check=True)  # another host entry, same target
        results: list[str] = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            other.on("box").run(f"echo {i}", check=True).stdout)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(results) == sorted(f"{i}\n" for i in range(8))
    assert _accepted(sshd_server) == before + 1
    assert transport.is_active()  # `other` closed, but `board` still holds it


def test_a_live_connection_is_never_borrowed_under_another_key_or_policy(
        board: Board, sshd_server: SshServer, tmp_path: Path) -> None:
    board.on("box").run("true", check=True)  # pooled, accepted by box's known_hosts
    stranger = tmp_path / "stranger_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    with _one_host_board(tmp_path / "strict", ssh_host(  # same target, an unauthorized key
            sshd_server, tmp_path / "known_hosts", identity=str(stranger))) as other:
        with pytest.raises(AuthFailed):
            other.on("box").run("true")
    strict = tmp_path / "strict"
    empty = strict / "known_hosts"
    with _one_host_board(strict, ssh_host(sshd_server, empty)) as other:
        with pytest.raises(HostKeyMismatch, match="is not in"):
            other.on("box").run("true")
    assert not empty.exists()
    with _one_host_board(strict, ssh_host(sshd_server, empty, trust="first-use")) as other:
        assert other.on("box").run("echo tofu").stdout == "tofu\n"
    assert empty.read_text() == f"[127.0.0.1]:{sshd_server.port} {sshd_server.host_key_line}\n"


def test_board_close_releases_the_pooled_connection(board: Board) -> None:
    ssh.close_all()
    board.on("box").run("true", check=True)
    transport = board.on("box").transport.paramiko_transport
    board.close()
    assert not transport.is_active()
    assert board.on("box").run("echo again").stdout == "again\n"  # usable again after close


def test_slurm_host_with_ssh_login_runs_over_ssh(board: Board, tmp_path: Path) -> None:
    result = board.on("login").run('echo "$SSH_CONNECTION"; pwd -P', check=True)
    connection, cwd = result.stdout.splitlines()
    assert connection.startswith("127.0.0.1 ") and cwd == str((tmp_path / "cluster").resolve())


def test_stdin_env_and_streaming_over_ssh(board: Board, tmp_path: Path) -> None:
    box = board.on("box")
    assert box.run(["wc", "-c"], stdin=b"x" * 300_000).stdout.strip() == "300000"
    flag = tmp_path / "flag"
    script = (f"echo first; i=0; while [ ! -e '{flag}' ] && [ $i -lt 200 ]; do sleep 0.05; "
              f"i=$((i+1)); done; [ -e '{flag}' ] && echo second >&2")

    def sink(name: str, text: str) -> None:
        if "first" in text:
            flag.touch()  # the remote command goes on only once the first line reached us

    result = box.run(script, stream=sink)
    assert (result.stdout, result.stderr) == ("first\n", "second\n")


def test_timeout_over_ssh_kills_the_remote_process_group(board: Board, tmp_path: Path) -> None:
    pidfile = tmp_path / "remote.pid"
    with pytest.raises(CommandTimeout) as caught:
        board.on("box").run(f"sleep 600 & echo $! > '{pidfile}'; echo started; wait", timeout=1)
    assert caught.value.host == "box" and caught.value.stdout == "started\n"
    assert "mainboard-pgid" not in caught.value.stderr
    assert process_gone(int(pidfile.read_text()))


def test_put_get_round_trip_over_sftp(board: Board, tmp_path: Path) -> None:
    payload = os.urandom(1 << 20)
    source = tmp_path / "payload.bin"
    source.write_bytes(payload)
    source.chmod(0o750)
    box = board.on("box")
    remote = box.put(source, "deep/er/payload.bin")
    assert Path(remote).read_bytes() == payload  # loopback: the "remote" file is visible here
    assert Path(remote).stat().st_mode & 0o777 == 0o750
    back = box.get("deep/er/payload.bin", tmp_path / "back" / "payload.bin")
    assert back.read_bytes() == payload
    with pytest.raises(UserError, match="remote file .*missing.bin does not exist"):
        box.get("missing.bin", tmp_path / "nope")


# -- failures: each one a clear error naming the host and the fix --------------------------------

def _one_host_board(tmp_path: Path, keys: dict[str, object]) -> Board:
    tmp_path.mkdir(exist_ok=True)
    write_config(tmp_path, {"box": keys})  # type: ignore[dict-item]
    return Board(tmp_path / "mainboard.toml")


def test_closed_port_is_host_unreachable(sshd_server: SshServer, known_hosts: Path,
                                         tmp_path: Path) -> None:
    port = free_port()
    with _one_host_board(tmp_path, ssh_host(sshd_server, known_hosts, port=port,
                                            connect_timeout=1.0)) as b:
        with pytest.raises(HostUnreachable) as caught:
            b.on("box").run("true")
    assert f"box: cannot reach 127.0.0.1:{port}: connection refused" in str(caught.value)


def test_silent_port_is_host_unreachable_after_connect_timeout(sshd_server: SshServer,
                                                               known_hosts: Path,
                                                               tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts TCP (kernel backlog) but never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        with _one_host_board(tmp_path, ssh_host(sshd_server, known_hosts, port=port,
                                                connect_timeout=0.5)) as b:
            with pytest.raises(HostUnreachable, match=f"127.0.0.1:{port}: no ssh handshake "
                                                      "within 0.5s"):
                b.on("box").run("true")


def test_wrong_key_is_auth_failed_naming_user_host_and_identity(sshd_server: SshServer,
                                                                known_hosts: Path,
                                                                tmp_path: Path) -> None:
    stranger = tmp_path / "stranger_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    with _one_host_board(tmp_path, ssh_host(sshd_server, known_hosts,
                                            identity=str(stranger))) as b:
        with pytest.raises(AuthFailed) as caught:
            b.on("box").run("true")
    text = str(caught.value)
    assert f"root@127.0.0.1:{sshd_server.port}" in text and str(stranger) in text
    secret = stranger.read_text().split("-----")[2].strip().splitlines()[0]
    assert secret not in text


def test_missing_identity_file_is_a_user_error(sshd_server: SshServer, known_hosts: Path,
                                              tmp_path: Path) -> None:
    with _one_host_board(tmp_path, ssh_host(sshd_server, known_hosts,
                                            identity="keys/nope")) as b:
        with pytest.raises(UserError, match=f"identity file {tmp_path}/keys/nope does not exist"):
            b.on("box").run("true")


def _fingerprint(public_key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(public_key)], check=True,
                         capture_output=True, text=True).stdout
    return out.split()[1]


def test_known_hosts_mismatch_is_refused_naming_fingerprint_and_line(
        sshd_server: SshServer, tmp_path: Path) -> None:
    other = tmp_path / "other_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    name = f"[127.0.0.1]:{sshd_server.port}"
    known = tmp_path / "known_hosts"
    known.write_text(f"# comment\nunrelated.example {sshd_server.host_key_line}\n"
                     f"{name} {' '.join(Path(f'{other}.pub').read_text().split()[:2])}\n")
    for trust in ("known-hosts", "first-use"):  # a changed key is refused whatever the trust
        ssh.close_all()
        with _one_host_board(tmp_path, ssh_host(sshd_server, known, trust=trust)) as b:
            with pytest.raises(HostKeyMismatch) as caught:
                b.on("box").run("true")
        text = str(caught.value)
        assert text.startswith(f"box: host key for {name} CHANGED")
        assert _fingerprint(sshd_server.dir / "host_ed25519.pub") in text  # what we saw
        assert f"{known}:3" in text and _fingerprint(Path(f"{other}.pub")) in text
        assert f"ssh-keygen -R '{name}' -f {known}" in text
    assert known.read_text().count("\n") == 3  # nothing was added


def test_unknown_host_key_is_refused_by_default(sshd_server: SshServer, tmp_path: Path) -> None:
    ssh.close_all()
    known = tmp_path / "empty_known_hosts"
    with _one_host_board(tmp_path, ssh_host(sshd_server, known)) as b:
        with pytest.raises(HostKeyMismatch) as caught:
            b.on("box").run("true")
    assert "is not in" in str(caught.value) and 'trust = "first-use"' in str(caught.value)
    assert _fingerprint(sshd_server.dir / "host_ed25519.pub") in str(caught.value)
    assert not known.exists()


def test_first_use_records_the_key_then_refuses_a_changed_one(tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "sshd")
    known = tmp_path / "home" / ".ssh" / "known_hosts"
    config = ssh_host(server, known, trust="first-use")
    try:
        ssh.close_all()
        with _one_host_board(tmp_path, config) as b:
            assert b.on("box").run("echo hi").stdout == "hi\n"
        assert known.read_text() == f"[127.0.0.1]:{server.port} {server.host_key_line}\n"
        ssh.close_all()
        with _one_host_board(tmp_path, config) as b:  # recorded key is now simply trusted
            assert b.on("box").run("echo again").ok
        server.stop()
        for old in (server.dir / "host_ed25519", server.dir / "host_ed25519.pub"):
            old.unlink()  # same port, same client key, new host key
        server = start_sshd(server.dir, port=server.port)
        ssh.close_all()
        with _one_host_board(tmp_path, config) as b:
            with pytest.raises(HostKeyMismatch, match="CHANGED"):
                b.on("box").run("true")
        assert known.read_text().count("\n") == 1
    finally:
        server.stop()


def test_dead_pooled_connection_is_reconnected_transparently(tmp_path: Path) -> None:
    server = start_sshd(tmp_path / "sshd")
    try:
        with _one_host_board(tmp_path, ssh_host(server, server.known_hosts())) as b:
            box = b.on("box")
            box.run("true", check=True)
            dead = box.transport.paramiko_transport
            for pid in _children(server.proc.pid):  # the per-connection sshd processes
                os.kill(pid, signal.SIGKILL)
            assert box.run("echo back").stdout == "back\n"
            assert box.transport.paramiko_transport is not dead
            assert _accepted(server) == 2
    finally:
        server.stop()


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


# -- the CLI against the ssh host --------------------------------------------------------------

def test_cli_run_on_an_ssh_host(board: Board, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
    proc = run_mainboard(
        ["--config", str(tmp_path / "mainboard.toml"), "run",
         "--on", "box", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
        env=env, cwd="/", timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_cli_run_ctrl_c_stops_the_remote_command(board: Board, tmp_path: Path) -> None:
    pidfile = tmp_path / "remote.pid"
    code, child = interrupt_cli_run(
        ["--config", str(tmp_path / "mainboard.toml"), "run", "--on", "box", "--",
         f"sleep 600 & echo $! > '{pidfile}'; wait"], pidfile, tmp_path)
    assert code == 130 and process_gone(child)
