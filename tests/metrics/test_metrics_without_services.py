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


def test_a_registered_source_joins_the_merge_and_a_json_that_is_no_trace_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``register_source`` is the extension point (CUPTI timelines): ``KIND:REF`` is read
    by its reader; a JSON file that is not a Chrome trace is one line naming it."""
    from mainboard.errors import UserError
    from mainboard.hosts.access import Hosts
    from mainboard.runs.trace import TraceSpan
    from mainboard.trace import merge as merging

    (tmp_path / "mainboard.toml").write_text("")
    board = Hosts(tmp_path / "mainboard.toml")
    monkeypatch.setattr(merging, "SOURCES", dict(merging.SOURCES))

    def gpu(ref: str) -> merging.Part:
        span = TraceSpan("gpu0", "stream 7", "kernel", 100.0, 0.5, {"ref": ref})
        return merging.Part("gpu", ref, f"cupti {ref}", 0.0, [span])

    merging.register_source("gpu", gpu)
    parts = merging.resolve(board, ["gpu:run-1.cupti"], None)
    doc = merging.merge(parts, "local")
    assert doc["otherData"]["merge"]["parts"] == [
        {"kind": "gpu", "id": "run-1.cupti", "source": "cupti run-1.cupti", "offset_s": 0.0,
         "events": 1}]
    other = tmp_path / "other.json"
    for text in ("[1, 2]", '{"traceEvents": [{"ph": "X"}]}'):  # a list once gave a traceback
        other.write_text(text)
        with pytest.raises(UserError, match=r"other\.json: not a trace file written by "
                                            "mainboard"):
            merging.resolve(board, [str(other)], None)
