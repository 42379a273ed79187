"""Metrics and trace paths that need no running service: a scrape of a workspace whose
broker does not answer (one section marked down, the reason logged, nothing raised), the
Flower side's workspace without a config file, and a py-spy that failed named in words."""

from __future__ import annotations

import logging
import socket
import subprocess
from pathlib import Path

import pytest

from mainboard.config import load_config
from mainboard.metrics.exposition import WorkspaceCollector
from mainboard.metrics.flower import workspace
from mainboard.trace.spy import Sampler


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_broker_that_does_not_answer_is_a_section_down_not_an_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "mainboard.toml"
    path.write_text(f'[broker]\nurl = "redis://:hunter2@127.0.0.1:{closed_port()}/0"\n')
    collector = WorkspaceCollector(load_config(path))
    with caplog.at_level(logging.WARNING, logger="mainboard.metrics"):
        families = {f.name: f for f in collector.collect()}
    assert families["mainboard_broker_up"].samples[0].value == 0.0
    assert "metrics: broker not read: " in caplog.text and "hunter2" not in caplog.text
    again = collector.snapshot()  # within the cache time: the fleet part is reused
    assert again.broker_up is False and "broker" in again.errors


def test_flower_s_workspace_without_a_config_file_is_the_state_folder_s_parent(
        tmp_path: Path) -> None:
    config = workspace(tmp_path / ".mainboard", None)
    assert config.path is None and config.root == tmp_path


@pytest.mark.parametrize(("stderr", "why"), [
    ("Error: Permission denied (os error 13)", "this host forbids ptrace"),
    ("first line\nFailed to find python version", "Failed to find python version"),
    ("", "no output"),
])
def test_a_failed_py_spy_is_named_in_words(tmp_path: Path, stderr: str, why: str) -> None:
    out = tmp_path / "never-written.txt"
    proc = subprocess.Popen(["/bin/sh", "-c", 'printf "%s" "$1" >&2; exit 1', "sh", stderr,
                             str(out)], stderr=subprocess.PIPE, text=True)
    stacks, reason = Sampler(1.0).finish_local(proc)
    assert stacks is None and why in reason
