"""Reaching a declared host: its transport's paths, its root, and what a command streams."""

from __future__ import annotations

from pathlib import Path

import pytest

from mainboard.bridges.ssh import SshTransport
from mainboard.hosts.access import Hosts, _progress_only
from tests.support.boards import write_config


def test_relative_key_paths_are_next_to_mainboard_toml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAINBOARD_SSH_CONFIG", "none")  # this user's ~/.ssh/config aside
    config = write_config(tmp_path, {"box": {"kind": "ssh", "host": "box.example", "user": "me",
                                             "identity": "keys/id_ed25519",
                                             "known_hosts": "keys/known_hosts"}})
    with Hosts(config) as hosts:
        box = hosts.on("box")
        transport = box.transport  # made, not connected
        assert isinstance(transport, SshTransport)
        described = transport.describe()
        assert described["identity"] == str(tmp_path / "keys" / "id_ed25519")
        assert described["known_hosts"] == str(tmp_path / "keys" / "known_hosts")
        assert repr(box) == "<Host box kind=ssh root='~/mainboard'>"
        assert repr(hosts) == f"<Hosts {config} hosts=['local', 'box']>"
        assert box.path("data/x.csv") == "~/mainboard/data/x.csv"


def test_provisioning_progress_goes_where_the_command_streams_only_stderr() -> None:
    """A caller's sink gets the environment build's progress (stderr), never its result
    line (stdout), which is the provisioning driver's, not the user's."""
    seen: list[tuple[str, str]] = []
    sink = _progress_only(lambda name, text: seen.append((name, text)))
    assert callable(sink)
    sink("stdout", '{"env_dir": "/x"}\n')
    sink("stderr", "resolving 3 packages\n")
    assert seen == [("stderr", "resolving 3 packages\n")]
    assert _progress_only(False) is False
