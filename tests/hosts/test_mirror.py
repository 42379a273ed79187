"""The workspace mirror, for real: a local "remote" root and the loopback sshd, real tar and zstd."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mainboard.board import Board
from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.transport import LocalTransport, Output, Transport
from mainboard.errors import MirrorError, UserError
from mainboard.hosts.archive import PROBE
from mainboard.hosts.mirror import Mirror, SyncReport, mirror_for, plan, sync
from mainboard.statedir import manifest_path
from tests.support.boards import ssh_host, write_config
from tests.support.services import SshServer, require

FILES = {
    "main.py": "print('hi')\n", "pkg/__init__.py": "", "pkg/mod.py": "x = 1\n" * 200,
    "run.sh": "#!/bin/sh\necho run\n", "docs/guide.md": "# guide\n", ".gitignore": "*.log\n",
    "notes.log": "ignored by .gitignore\n", "data/raw.bin": "excluded by [workspace]\n",
    "pkg/__pycache__/mod.pyc": "always excluded\n",
}
CARRIED = [".gitignore", "docs/guide.md", "latest", "main.py", "mainboard.toml",
           "pkg/__init__.py", "pkg/mod.py", "run.sh"]
HOSTILE = ["a b.txt", "it's.txt", 'dq".txt', "semi; touch PWNED", "$(touch PWNED)",
           "`touch PWNED`", "-rf", "new\nline.txt", "ünï/çødé.txt", "dir with space/ x "]


class Recorder:
    """Mixin for a real transport that remembers every command and the stdin it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, bytes]] = []

    def _execute(self, command: Any, text: str, env: dict[str, str], cwd: Any,
                 stdin: bytes | None, output: Output, timeout: float | None) -> int | None:
        self.sent.append((text, stdin or b""))
        return super()._execute(command, text, env, cwd, stdin, output, timeout)  # type: ignore[misc]


class RecordingLocal(Recorder, LocalTransport):
    """LocalTransport that records."""


class RecordingSsh(Recorder, SshTransport):
    """SshTransport that records."""


@dataclass
class Setup:
    """A workspace whose host ``host`` mirrors into ``remote`` (a directory on this machine)."""

    board: Board
    workspace: Path
    remote: Path
    host: str
    transport: Recorder

    def mirror(self, **options: Any) -> Mirror:
        return mirror_for(self.board, self.host, self.transport, **options)  # type: ignore[arg-type]

    def sync(self, **options: Any) -> SyncReport:
        self.transport.sent.clear()
        return self.mirror(**options).sync()

    def streams(self) -> list[list[str]]:
        """The paths inside every tar stream piped to the host since the last sync began."""
        tar = require("tar")
        flag = "--zstd" if shutil.which("zstd") else "-z"
        return [subprocess.run([tar, flag, "-tf", "-"], input=data, capture_output=True,
                               check=True).stdout.decode().splitlines()
                for text, data in self.transport.sent if text.startswith("tar ") and data]

    @property
    def manifest(self) -> Path:
        return manifest_path(self.board.config.state_dir, self.host)


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def snapshot(root: Path, names: list[str] | None = None) -> dict[str, tuple[str, int]]:
    """path -> (content or link target, permission bits) for every file and link under root."""
    found: dict[str, tuple[str, int]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("-> " + os.readlink(path), 0)
            elif path.is_file() and (names is None or rel in names):
                found[rel] = (path.read_text(), path.stat().st_mode & 0o777)
    return found


@pytest.fixture(params=["local", "ssh"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    """The same workspace mirrored to a local host, or over the loopback sshd."""
    workspace, remote = tmp_path / "ws", tmp_path / f"{request.param} root; it's $(touch PWNED)"
    workspace.mkdir()
    hosts: dict[str, Any] = {"box": {"kind": "local", "root": str(remote)}}
    transport: Recorder = RecordingLocal("box")
    if request.param == "ssh":
        server = request.getfixturevalue("sshd_server")
        known = server.known_hosts(tmp_path / "known_hosts")
        hosts = {"box": ssh_host(server, known, root=str(remote))}
        transport = RecordingSsh(server.host, port=server.port, user=server.user,
                                 identity=str(server.identity), known_hosts=str(known),
                                 name="box")
    write_config(workspace, hosts, extra='[workspace]\nexclude = ["data/"]\n')
    write_tree(workspace, FILES)
    (workspace / "run.sh").chmod(0o755)
    os.symlink("pkg/mod.py", workspace / "latest")
    with Board(workspace / "mainboard.toml") as board:
        yield Setup(board, workspace, remote, "box", transport)
    assert isinstance(transport, Transport)
    transport.close()


def test_first_sync_sends_all_then_an_unchanged_tree_sends_nothing(setup: Setup) -> None:
    first = setup.sync()
    assert first.files == CARRIED and first.deleted == [] and first.tracked == len(CARRIED)
    assert first.raw_bytes == sum(os.lstat(setup.workspace / n).st_size for n in CARRIED)
    assert [sorted(s) for s in setup.streams()] == [CARRIED]
    assert snapshot(setup.remote) == snapshot(setup.workspace, CARRIED)
    assert (setup.remote / "run.sh").stat().st_mode & 0o111  # executable bit travels
    recorded = json.loads(setup.manifest.read_text())
    assert recorded["root"] == str(setup.remote) and recorded["synced_at"]
    assert set(recorded["files"]) == set(CARRIED)
    assert set(recorded["files"]["main.py"]) == {"size", "mtime_ns", "mode", "sha256"}
    shown = json.loads(json.dumps(first.as_json()))  # what a caller prints as JSON
    assert shown["synced_at"] == first.synced_at.isoformat() and shown["files"] == CARRIED

    assert [text.split()[0] for text, _ in setup.transport.sent] == ["command", "tar"]
    second = setup.sync()
    assert (second.files, second.deleted, second.wire_bytes, second.via) == ([], [], 0, None)
    assert setup.transport.sent == []  # not one command, let alone a tar stream


def test_one_changed_file_sends_exactly_that_file(setup: Setup) -> None:
    setup.sync()
    (setup.workspace / "pkg/mod.py").write_text("x = 2\n")
    touched = setup.workspace / "main.py"
    os.utime(touched, ns=(1, 1_000_000_000))  # new mtime, same content: must not ship
    os.utime(setup.workspace / "latest", ns=(1, 2_000_000_000), follow_symlinks=False)  # a link too
    report = setup.sync()
    assert report.files == ["pkg/mod.py"] and report.raw_bytes == 6
    assert setup.streams() == [["pkg/mod.py"]]
    assert (setup.remote / "pkg/mod.py").read_text() == "x = 2\n"
    entry = json.loads(setup.manifest.read_text())["files"]["main.py"]
    assert entry["mtime_ns"] == 1_000_000_000  # recorded, so it is not hashed again
    assert setup.sync().files == []


def test_deletions_propagate_and_host_made_files_are_kept(setup: Setup) -> None:
    setup.sync()
    write_tree(setup.remote, {"results/out.txt": "made there", "docs/host-notes.txt": "mine"})
    (setup.workspace / "main.py").unlink()
    (setup.workspace / "latest").unlink()
    shutil.rmtree(setup.workspace / "pkg")
    report = setup.sync()
    assert report.deleted == ["latest", "main.py", "pkg/__init__.py", "pkg/mod.py"]
    assert report.files == [] and setup.streams() == []
    assert not (setup.remote / "pkg").exists()  # left empty, so removed too
    assert (setup.remote / "results/out.txt").read_text() == "made there"
    assert (setup.remote / "docs/host-notes.txt").exists() and (setup.remote / "docs/guide.md").exists()
    assert sorted(json.loads(setup.manifest.read_text())["files"]) == [
        ".gitignore", "docs/guide.md", "mainboard.toml", "run.sh"]


def test_hostile_names_travel_and_are_deleted_safely(setup: Setup, tmp_path: Path) -> None:
    write_tree(setup.workspace, {name: f"content of {name!r}" for name in HOSTILE})
    assert set(HOSTILE) <= set(setup.sync().files)
    assert snapshot(setup.remote) == snapshot(setup.workspace, CARRIED + HOSTILE)
    for name in HOSTILE:
        (setup.workspace / name).unlink()
    report = setup.sync()
    assert sorted(report.deleted) == sorted(HOSTILE)
    assert snapshot(setup.remote) == snapshot(setup.workspace, CARRIED)
    assert not (setup.remote / "ünï").exists()
    assert not [p for p in tmp_path.rglob("PWNED")] and not Path("PWNED").exists()


def test_failed_extraction_keeps_the_manifest_and_the_next_sync_resends(setup: Setup) -> None:
    setup.sync()
    before = setup.manifest.read_bytes()
    (setup.workspace / "pkg/mod.py").write_text("new\n")
    (setup.workspace / "main.py").unlink()
    blocker = setup.remote / "pkg/mod.py"
    blocker.unlink()
    write_tree(blocker, {"busy/file": "a non-empty directory where the file must go"})
    with pytest.raises(MirrorError, match="nothing recorded") as caught:
        setup.sync()
    assert "pkg/mod.py" in str(caught.value)  # tar's own complaint is shown
    assert setup.manifest.read_bytes() == before
    shutil.rmtree(blocker)
    report = setup.sync()
    assert report.files == ["pkg/mod.py"] and report.deleted == ["main.py"]
    assert len(setup.transport.sent) == 1  # removal and unpacking share one round trip
    assert (setup.remote / "pkg/mod.py").read_text() == "new\n"
    assert not (setup.remote / "main.py").exists()


def test_unusable_root_fails_first_sync_without_a_manifest(setup: Setup) -> None:
    setup.remote.write_text("a file where the mirror root should be")
    with pytest.raises(MirrorError, match=re.escape(str(setup.remote))):
        setup.sync()
    assert not setup.manifest.exists()
    setup.remote.unlink()
    assert setup.sync().files == CARRIED


def test_plan_predicts_the_sync_exactly_and_sends_nothing(setup: Setup) -> None:
    blind = setup.mirror().plan()
    assert setup.transport.sent == [] and not blind.codec_known and blind.last_sync is None
    probed = setup.mirror().plan(probe=True)
    assert [text for text, _ in setup.transport.sent] == [PROBE]
    assert not setup.manifest.exists()
    first = setup.sync()
    assert (probed.files, probed.raw_bytes, probed.wire_bytes, probed.codec) == (
        first.files, first.raw_bytes, first.wire_bytes, first.codec)
    assert [len(data) for text, data in setup.transport.sent if data] == [first.wire_bytes]

    (setup.workspace / "docs/guide.md").write_text("# longer guide\n" * 50)
    (setup.workspace / "run.sh").unlink()
    setup.transport.sent.clear()
    later = plan(setup.board, setup.host, setup.transport)  # type: ignore[arg-type]
    assert setup.transport.sent == [] and later.codec_known and later.last_sync == first.synced_at
    assert later.as_json()["last_sync"] == first.synced_at.isoformat()
    report = setup.sync()
    assert (later.files, later.deleted, later.raw_bytes, later.wire_bytes, later.codec) == (
        report.files, report.deleted, report.raw_bytes, report.wire_bytes, report.codec)
    assert later.tracked == report.tracked == len(CARRIED) - 1


def test_large_archives_are_uploaded_then_unpacked(setup: Setup) -> None:
    report = setup.sync(inline_limit=0)
    assert report.via == "upload" and report.files == CARRIED
    assert snapshot(setup.remote) == snapshot(setup.workspace, CARRIED)  # no archive left over
    assert not [data for _, data in setup.transport.sent if data]


@pytest.mark.parametrize("setup", ["local"], indirect=True)  # the sshd's PATH is its own
def test_gzip_when_zstd_is_missing(setup: Setup, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Without zstd (here: a PATH without it, on both sides) the stream is gzip."""
    monkeypatch.setenv("PATH", str(_tools_without_zstd(tmp_path / "bin")))
    report = setup.sync()
    assert report.codec == "gzip" and report.files == CARRIED
    assert [data[:2] for _, data in setup.transport.sent if data] == [b"\x1f\x8b"]
    assert snapshot(setup.remote) == snapshot(setup.workspace, CARRIED)


def _tools_without_zstd(directory: Path) -> Path:
    """A PATH directory holding what the mirror needs on a host, but no zstd."""
    directory.mkdir()
    for tool in ("tar", "gzip", "grep", "rm", "rmdir", "sh", "mkdir"):
        os.symlink(require(tool), directory / tool)
    return directory


def test_a_host_that_lost_zstd_is_asked_again_and_gets_gzip(tmp_path: Path) -> None:
    """The codec is remembered per host; when unpacking with it fails, the host is probed
    again and the same sync retried with what it has now (its env PATH here lacks zstd)."""
    require("zstd")
    tools = _tools_without_zstd(tmp_path / "bin")
    write_config(tmp_path, {"box": {"kind": "local", "root": str(tmp_path / "r")}},
                 extra=f'[hosts.box.env]\nPATH = "{tools}"\n')
    write_tree(tmp_path, {"a.txt": "a"})
    with Board(tmp_path / "mainboard.toml") as board:
        assert sync(board, "box").codec == "gzip"
        path = manifest_path(board.config.state_dir, "box")
        path.write_text(path.read_text().replace('"codec": "gzip"', '"codec": "zstd"'))
        (tmp_path / "a.txt").write_text("changed")
        assert plan(board, "box").codec == "zstd"  # what it believes, without asking
        report = sync(board, "box")
        assert (report.files, report.codec) == (["a.txt"], "gzip")
        assert json.loads(path.read_text())["codec"] == "gzip"
        assert (tmp_path / "r/a.txt").read_text() == "changed"


def test_module_functions_use_the_boards_own_transport(tmp_path: Path, sshd_server: SshServer) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    write_config(workspace, {"far": ssh_host(sshd_server, sshd_server.known_hosts(
        tmp_path / "kh"), root=str(tmp_path / "far root"))})
    write_tree(workspace, {"a.txt": "a", "b/c.txt": "c"})
    with Board(workspace / "mainboard.toml") as board:
        assert plan(board, "far").files == ["a.txt", "b/c.txt", "mainboard.toml"]
        assert sync(board, "far").files == ["a.txt", "b/c.txt", "mainboard.toml"]
        assert sync(board.on("far")).files == []
        assert (tmp_path / "far root/b/c.txt").read_text() == "c"


def test_local_host_in_the_workspace_is_not_copied_into_itself(tmp_path: Path) -> None:
    write_config(tmp_path, {"here": {"kind": "local"}, "inside": {"kind": "local",
                                                                    "root": "mirrors/inside"}})
    write_tree(tmp_path, {"a.txt": "a"})
    with Board(tmp_path / "mainboard.toml") as board:
        same = sync(board, "here")
        assert same.in_place and same.files == [] and plan(board, "here").in_place
        assert not manifest_path(board.config.state_dir, "here").exists()
        assert sync(board, "inside").files == ["a.txt", "mainboard.toml"]
        assert sync(board, "inside").files == []  # the copy did not become part of the source
        assert (tmp_path / "mirrors/inside/a.txt").read_text() == "a"


@pytest.mark.parametrize("setup", ["local"], indirect=True)
def test_a_moved_root_starts_a_fresh_mirror(setup: Setup, tmp_path: Path) -> None:
    setup.sync()
    moved = mirror_for(setup.board.config, setup.host, setup.transport,  # type: ignore[arg-type]
                       root=str(tmp_path / "moved")).sync()
    assert moved.files == CARRIED and moved.deleted == []
    assert json.loads(setup.manifest.read_text())["root"] == str(tmp_path / "moved")
    with pytest.raises(TypeError, match="needs the host name and its root"):
        mirror_for(setup.board.config, setup.host)  # type: ignore[arg-type]


@pytest.mark.parametrize("content", ["{not json", '{"version": 1, "host": "box"}',
                                     '{"version": 1, "host": "box", "root": "/r", "files": '
                                     '{"a": {"size": "big"}}}'])
def test_corrupt_manifest_is_reported_with_its_file(tmp_path: Path, content: str) -> None:
    write_config(tmp_path, {"box": {"kind": "local", "root": str(tmp_path / "r")}})
    with Board(tmp_path / "mainboard.toml") as board:
        path = manifest_path(board.config.state_dir, "box")
        path.parent.mkdir(parents=True)
        path.write_text(content)
        with pytest.raises(UserError, match=f"{path}: not a valid mirror manifest.*delete it"):
            sync(board, "box")
        with pytest.raises(UserError, match="not a valid mirror manifest"):
            plan(board, "box")


def test_provider_host_plans_before_rental_and_bad_options_are_refused(tmp_path: Path) -> None:
    write_config(tmp_path, {"gpu": {"kind": "provider", "provider": "vast"},
                            "odd.name": {"kind": "local", "root": str(tmp_path / "o")}},
                 extra='[providers.vast]\nkind = "vast"\n')
    write_tree(tmp_path, {"a.txt": "a"})
    with Board(tmp_path / "mainboard.toml") as board:
        ahead = plan(board, "gpu")
        assert ahead.files == ["a.txt", "mainboard.toml"] and ahead.wire_bytes > 0
        assert ahead.root == "~/mainboard" and ahead.codec == "gzip" and not ahead.codec_known
        with pytest.raises(UserError, match="fleet up gpu"):
            sync(board, "gpu")
        with pytest.raises(UserError, match="inline_limit must be 0 or more bytes"):
            Mirror.of(board.on("gpu"), inline_limit=-1)
        assert sync(board, "odd.name").files == ["a.txt", "mainboard.toml"]
        # host names are plain words; a manifest path stays one file whatever it is given
        assert manifest_path(board.config.state_dir, "odd/name").name == "odd%2Fname.json"


@pytest.mark.parametrize("setup", ["local"], indirect=True)
def test_concurrent_syncs_of_one_host_send_each_file_once(setup: Setup) -> None:
    """The per-host lock: the second sync waits, then finds nothing left to send."""
    reports: list[SyncReport] = []
    threads = [threading.Thread(target=lambda: reports.append(setup.mirror().sync()))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(len(r.files) for r in reports) == [0, len(CARRIED)]


@pytest.mark.parametrize("setup", ["local"], indirect=True)
def test_a_name_that_is_not_utf8_is_refused_unless_excluded(setup: Setup) -> None:
    bad = setup.workspace / os.fsdecode(b"bad\xff name.txt")
    bad.write_text("x")
    with pytest.raises(UserError, match=r"not UTF-8 \(b'bad\\xff name.txt'\).*exclude"):
        setup.sync()
    assert not setup.manifest.exists()
    (setup.workspace / ".gitignore").write_text("*.log\nbad*\n")
    assert setup.sync().files == CARRIED


def test_board_handle_sync_and_plan_delegate_to_the_mirror(tmp_path: Path) -> None:
    """``board.on(h).sync()`` / ``.plan()`` are the user-facing doors to the mirror."""
    from mainboard.board import Board

    work, remote = tmp_path / "work", tmp_path / "remote"
    work.mkdir()
    (work / "mainboard.toml").write_text(f'[hosts.box]\nkind = "local"\nroot = "{remote}"\n')
    (work / "a.txt").write_text("hello\n")
    with Board(work / "mainboard.toml") as board:
        handle = board.on("box")
        assert handle.plan().files == ["a.txt", "mainboard.toml"]
        assert handle.sync().files == ["a.txt", "mainboard.toml"]
        assert (remote / "a.txt").read_text() == "hello\n"
        assert handle.sync().files == []
