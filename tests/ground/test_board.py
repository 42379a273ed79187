"""Board on this machine and `mainboard run`: real subprocesses, real files, no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import mainboard
from mainboard.board import Board
from mainboard.bridges.transport import Completed, LocalTransport
from mainboard.errors import CommandFailed, CommandTimeout, UnknownHost, UserError
from tests.support.boards import interrupt_cli_run, process_gone, write_config
from tests.support.cliserver import popen_mainboard

WAIT_FOR_FLAG = ("echo first; i=0; while [ ! -e {flag} ] && [ $i -lt 200 ]; do sleep 0.05; "
                 "i=$((i+1)); done; [ -e {flag} ] && echo second || echo never-saw-flag")


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    """A Board over a workspace with a local host rooted in a sub-directory, a slurm and a provider."""
    write_config(tmp_path, {
        "here": {"kind": "local", "root": "sub dir/work"},
        "cluster": {"kind": "slurm", "login": "local"},
        "gpu": {"kind": "provider", "provider": "vast"},
    }, extra='[providers.vast]\nkind = "vast"\n')
    with Board(tmp_path / "mainboard.toml") as b:
        yield b


def test_board_is_exported_from_the_package() -> None:
    assert mainboard.Board is Board
    assert "Board" in mainboard.__all__


def test_run_captures_stdout_stderr_and_returncode(board: Board) -> None:
    result = board.run("echo out; echo err >&2; exit 3")
    assert isinstance(result, Completed)
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 3)
    assert result.host == "local" and not result.ok
    assert board.run("true").ok


def test_check_raises_command_failed_with_command_code_and_stderr_tail(board: Board) -> None:
    lines = "; ".join(f"echo line{i} >&2" for i in range(30))
    with pytest.raises(CommandFailed) as caught:
        board.run(f"{lines}; exit 7", check=True)
    exc = caught.value
    assert exc.returncode == 7 and exc.host == "local" and "line29" in exc.stderr
    text = str(exc)
    assert "exit code 7" in text and "exit 7" in text  # the command itself is shown
    assert "line29" in text and "line20" in text and "line5\n" not in text  # only the tail


def test_board_runs_in_the_workspace_root_not_the_cwd(board: Board, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")
    assert board.run("pwd -P").stdout.strip() == str(tmp_path.resolve())
    made = board.run(["mkdir", "-p", "x"], cwd="nested/deeper")
    assert made.ok and (tmp_path / "nested" / "deeper" / "x").is_dir()


def test_local_host_root_is_created_on_first_use(board: Board, tmp_path: Path) -> None:
    assert not (tmp_path / "sub dir").exists()
    result = board.on("here").run("pwd -P")
    assert result.stdout.strip() == str((tmp_path / "sub dir" / "work").resolve())
    assert result.host == "here"


def test_list_commands_are_quoted_and_never_reparsed(board: Board, tmp_path: Path) -> None:
    mark = tmp_path / "pwned"
    hostile = f"a'; echo pwned; $(touch {mark}) `touch {mark}` \"q\" *"
    result = board.run(["printf", "%s", hostile], check=True)
    assert result.stdout == hostile and not mark.exists()
    assert result.command.startswith("printf %s '")


def test_env_is_added_and_values_are_not_shell_parsed(board: Board, tmp_path: Path) -> None:
    mark = tmp_path / "pwned"
    value = f"it's $(touch {mark})"
    result = board.run('printf "%s|%s" "$MB_VALUE" "$HOME"', env={"MB_VALUE": value})
    assert result.stdout == f"{value}|{os.environ['HOME']}" and not mark.exists()


def test_stdin_is_fed_to_the_command(board: Board) -> None:
    data = b"".join(b"line %d\n" % i for i in range(20000))  # larger than a pipe buffer
    result = board.run(["wc", "-l"], stdin=data)
    assert result.stdout.strip() == "20000"


def test_missing_program_reports_127_like_a_shell(board: Board) -> None:
    result = board.run(["mainboard-no-such-program"])
    assert result.returncode == 127 and "command not found" in result.stderr


def test_timeout_kills_the_whole_process_group(board: Board, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    with pytest.raises(CommandTimeout) as caught:
        board.run(f"sleep 600 & echo $! > '{pidfile}'; echo started; wait", timeout=3)
    assert caught.value.returncode == 124 and "timed out after 3s" in str(caught.value)
    assert caught.value.stdout == "started\n"
    assert process_gone(int(pidfile.read_text()))


def test_stream_delivers_output_while_the_command_still_runs(board: Board, tmp_path: Path) -> None:
    flag, seen = tmp_path / "flag", []

    def sink(name: str, text: str) -> None:
        seen.append((name, text))
        if "first" in text:
            flag.touch()  # the command only prints "second" once it sees this

    result = board.run(WAIT_FOR_FLAG.format(flag=flag), stream=sink)
    assert result.stdout == "first\nsecond\n"
    assert "".join(t for n, t in seen if n == "stdout") == result.stdout


def test_stream_keeps_multibyte_characters_whole(tmp_path: Path) -> None:
    chunks: list[str] = []
    text = "π≈3.14159 – ünïcödé ✓\n" * 2000
    (tmp_path / "u.txt").write_text(text)
    result = LocalTransport().run(["cat", str(tmp_path / "u.txt")],
                                  stream=lambda n, t: chunks.append(t))
    assert result.stdout == text and "".join(chunks) == text and "\ufffd" not in result.stdout


def test_a_failing_sink_never_blocks_the_command(board: Board) -> None:
    def sink(name: str, text: str) -> None:
        raise BrokenPipeError("reader went away")

    with pytest.raises(BrokenPipeError):  # raised once the command is done, output captured
        board.run("yes | head -c 300000; echo done > done.txt", stream=sink)
    assert (board.config.root / "done.txt").read_text() == "done\n"


def test_cli_run_into_a_closed_pipe_exits_quietly(board: Board, tmp_path: Path) -> None:
    proc = subprocess.run(
        f"{sys.executable} -m mainboard run -- 'yes | head -c 300000' | head -c 10",
        shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.stdout == "y\ny\ny\ny\ny\n" and "Traceback" not in proc.stderr


def test_local_put_and_get_copy_files_into_the_host_root(board: Board, tmp_path: Path) -> None:
    source = tmp_path / "in.bin"
    source.write_bytes(os.urandom(4096))
    placed = board.on("here").put(source, "files/in.bin")
    assert Path(placed) == tmp_path / "sub dir" / "work" / "files" / "in.bin"
    back = board.on("here").get("files/in.bin", tmp_path / "out" / "back.bin")
    assert back.read_bytes() == source.read_bytes()


def test_batch_host_with_local_login_runs_here(board: Board, tmp_path: Path) -> None:
    result = board.on("cluster").run("pwd -P", check=True)
    assert result.stdout.strip() == str(tmp_path.resolve()) and result.host == "cluster"


@pytest.mark.parametrize(("call", "message"), [
    (lambda b: b.run(""), "empty command"),
    (lambda b: b.run([]), "empty command"),
    (lambda b: b.run(b"echo"), "not bytes"),
    (lambda b: b.run("true", env={"BAD NAME": "x"}), "'BAD NAME' is not valid"),
    (lambda b: b.run("true", env={"1X": "x"}), "not starting with a digit"),
    (lambda b: b.run("true", timeout=0), "timeout must be a positive"),
    (lambda b: b.on("here").put("/nonexistent/file", "x"), "/nonexistent/file does not exist"),
    (lambda b: b.on("here").put("/", "x"), "is a directory"),
    (lambda b: b.on("here").get("nope.txt", "/tmp/x"), "nope.txt does not exist"),
    (lambda b: b.on("gpu").run("true"), "no api_key_env"),
], ids=["empty-str", "empty-list", "bytes", "env-space", "env-digit", "timeout-zero",
        "put-missing", "put-dir", "get-missing", "provider"])
def test_bad_input_is_one_clear_user_error(board: Board, call: Callable[[Board], object],
                                           message: str) -> None:
    with pytest.raises(UserError) as caught:
        call(board)
    assert message in str(caught.value)


def test_unknown_host_lists_the_declared_ones(board: Board) -> None:
    with pytest.raises(UnknownHost) as caught:
        board.on("nope")
    assert "'nope'" in str(caught.value) and "local, here, cluster, gpu" in str(caught.value)


# -- the CLI, as a real process ---------------------------------------------------------------

def _mainboard(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MAINBOARD_CONFIG", None)
    return popen_mainboard([*args], cwd=cwd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cli_run_exits_with_the_command_code_and_both_streams(board: Board,
                                                              tmp_path: Path) -> None:
    proc = _mainboard("run", "--", "sh", "-c", "echo out; echo err >&2; exit 3", cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (3, "out\n", "err\n")


def test_cli_run_one_argument_is_shell_text(board: Board, tmp_path: Path) -> None:
    proc = _mainboard("run", "--on", "here", "--", "echo a | tr a b; pwd -P", cwd=tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out.splitlines() == ["b", str((tmp_path / "sub dir" / "work").resolve())]


def test_cli_run_streams_live_not_at_the_end(board: Board, tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    proc = _mainboard("run", "--", WAIT_FOR_FLAG.format(flag=flag), cwd=tmp_path)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "first\n"  # arrives while the command still waits
    flag.touch()
    rest, _ = proc.communicate(timeout=60)
    assert rest == "second\n" and proc.returncode == 0


def test_cli_run_timeout_exits_124(board: Board, tmp_path: Path) -> None:
    proc = _mainboard("run", "--timeout", "0.3", "--", "sleep 30", cwd=tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 124 and "timed out after 0.3s" in err


def test_cli_run_unknown_host_is_exit_2_one_line_listing_hosts(board: Board,
                                                               tmp_path: Path) -> None:
    proc = _mainboard("run", "--on", "nope", "--", "true", cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "unknown host 'nope'" in err and "local, here, cluster, gpu" in err


def test_cli_run_ctrl_c_stops_the_command_and_exits_130(board: Board, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code, child = interrupt_cli_run(
        ["run", "--", f"sleep 600 & echo $! > '{pidfile}'; wait"], pidfile, tmp_path)
    assert code == 130 and process_gone(child)


def test_board_without_a_path_finds_mainboard_toml_like_git(board: Board, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Board() walks up from the cwd; MAINBOARD_CONFIG wins; no file means just `local`."""
    monkeypatch.delenv("MAINBOARD_CONFIG", raising=False)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    with Board() as found:
        assert found.config.path == tmp_path / "mainboard.toml" and "here" in found.hosts
        assert found.run("pwd -P").stdout.strip() == str(tmp_path.resolve())
    empty = tmp_path.parent / f"{tmp_path.name}-empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with Board() as bare:
        assert bare.config.path is None and bare.hosts == ["local"]
        assert bare.run(["pwd", "-P"], check=True).stdout.strip() == str(empty.resolve())
    monkeypatch.setenv("MAINBOARD_CONFIG", str(tmp_path / "mainboard.toml"))
    with Board() as named:
        assert named.config.path == tmp_path / "mainboard.toml"
