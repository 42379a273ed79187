"""The mirror's archive where it goes wrong: no tar on the host, zstd gone or failing here,
a file that vanished mid-sync, an upload that cannot land, and very long deletions."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mainboard.bridges.transport import LocalTransport
from mainboard.errors import MirrorError
from mainboard.hosts.archive import (
    DELETE_CHUNK,
    delete_commands,
    probe_codec,
    send_archive,
    write_archive,
)
from tests.support.services import require


def test_a_host_without_tar_is_told_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(MirrorError, match="^here: no `tar` on the host; install tar"):
        probe_codec(LocalTransport("here"), env={"PATH": str(tmp_path)})  # nothing on PATH


def test_zstd_that_vanished_or_cannot_write_fails_the_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("a" * 1000)
    zstd_dir = str(Path(require("zstd")).parent)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    with pytest.raises(MirrorError, match="no `zstd` binary any more"):
        write_archive(tmp_path, ["a.txt"], "zstd", io.BytesIO())
    monkeypatch.setenv("PATH", zstd_dir)
    with open("/dev/full", "wb") as full:  # every write: ENOSPC
        with pytest.raises(MirrorError, match=r"zstd failed compressing the mirror \(exit 1"):
            write_archive(tmp_path, ["a.txt"], "zstd", full)


def test_a_file_gone_since_the_listing_names_itself(tmp_path: Path) -> None:
    with pytest.raises(MirrorError, match=r"cannot archive the workspace \(.*/gone\.txt\): No "
                                          r"such file or directory; a file changed while"):
        write_archive(tmp_path, ["gone.txt"], "gzip", io.BytesIO())


def test_an_upload_that_cannot_land_is_one_error(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    write_archive(tmp_path, [], "gzip", archive.open("wb"))
    (tmp_path / "file").write_text("")  # the host's root is a file: nothing can go inside
    with pytest.raises(MirrorError, match=r"^box: uploading the mirror archive to .*/file/"
                                          r"\.mainboard-mirror-\w+\.tar\.gz failed"):
        send_archive(LocalTransport("box"), str(tmp_path / "file"), archive, "gzip",
                     inline_limit=0)


def test_deletions_are_cut_into_commands_below_the_argument_limit() -> None:
    paths = [f"dir{n % 3}/{'x' * 200}-{n}" for n in range(2 * DELETE_CHUNK // 200)]
    commands = delete_commands(paths)
    removed = [c.split(" && ")[0].removeprefix("rm -f -- ").split() for c in commands]
    assert len(commands) > 1 and [p for words in removed for p in words] == paths
    assert all(len(" ".join(words)) <= DELETE_CHUNK for words in removed)
    parents = [c.split("rmdir -p -- ")[1].split(" 2>")[0].split() for c in commands]
    assert all(sorted(words) == ["dir0", "dir1", "dir2"] for words in parents)  # then emptied
    assert delete_commands([]) == []
