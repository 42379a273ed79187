"""`mainboard runs show|tasks|logs|trace|remove` on a finished run's receipts (a real run's,
tests/fixtures/runs/), with the embedded broker not running or a configured broker that is
down: what reads receipts still answers, what lives in the broker fails in one line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.run_receipts import copy_run
from tests.support.services import free_port
from tests.support.workspace import run_cli

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "e884b1a784943b0f" / \
    "receipts.ndjson"
RUN_ID = "0123456789abcdef"


def _workspace(directory: Path, broker: str = "") -> Path:
    directory.mkdir()
    (directory / "mainboard.toml").write_text(f'[workspace]\nname = "runs"\n{broker}')
    copy_run(CAPTURED, directory / ".mainboard", RUN_ID, "captured")
    return directory / "mainboard.toml"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A workspace holding the finished run ``captured``; its embedded broker not running."""
    return _workspace(tmp_path / "ws")


def test_runs_show_reads_the_timeline_and_refuses_csv_for_a_single_run(config: Path) -> None:
    shown = run_cli(config, "runs", "show", "captured", "--timeline")
    assert (shown.returncode, shown.stderr) == (0, "")
    lines = shown.stdout.splitlines()
    assert lines[0] == f"run        {RUN_ID} (captured)"
    events = lines[lines.index("timeline") + 1:]
    assert [e.split()[4] for e in events] == ["start", "dispatch", "complete", "adapt",
                                              "snapshot", "dispatch", "complete", "adapt",
                                              "snapshot", "finish"]
    assert events[0].split()[2:] == ["+", "0.000s", "start", "run", "captured", "created"]
    assert events[-1].split()[5:] == ["it", "2", "max_samples"]
    refused = run_cli(config, "runs", "show", "captured", "--csv")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == ("mainboard runs show: error: --csv exports the table of a scan, "
                              f"tune or campaign; run {RUN_ID} is a single run (use --json)\n")
    copy_run(CAPTURED, config.parent / ".mainboard", "fedcba9876543210", "cut", keep=1)
    cut = run_cli(config, "runs", "show", "cut").stdout.splitlines()  # no run.finished line
    assert cut[1] == "status     unfinished" and not any(ln.startswith("result") for ln in cut)
    tasks = run_cli(config, "runs", "tasks", "captured")
    assert tasks.stdout == (f"run {RUN_ID} has no [[tasks]]: it is one sample task "
                            f"(`mainboard runs show {RUN_ID}`)\n")


def test_what_lives_in_the_broker_is_one_line_when_it_is_not_running(config: Path) -> None:
    for args in (("logs", "captured"), ("trace", "captured", "-o", "t.json")):
        done = run_cli(config, "runs", *args)
        assert (done.returncode, done.stdout) == (1, ""), done.stderr  # the broker: exit 1
        assert done.stderr == ("mainboard: error: the embedded broker is not running, and a "
                               "run's logs and spans live in it; start it with `mainboard "
                               "broker up`\n")
    assert not (config.parent / "t.json").exists()


def test_runs_remove_asks_for_yes_off_a_terminal_then_removes(config: Path) -> None:
    asked = run_cli(config, "runs", "remove", "captured")
    assert (asked.returncode, asked.stdout) == (2, "")
    assert asked.stderr == (f"mainboard runs remove: error: removing run {RUN_ID} (captured, "
                            "finished) needs confirmation: pass --yes\n")
    removed = run_cli(config, "runs", "remove", "captured", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout == (f"removed run {RUN_ID} (captured, finished): receipts and 0 "
                              "Redis keys\n")
    assert not (config.parent / ".mainboard" / "runs" / RUN_ID).exists()


def test_a_configured_broker_that_is_down_leaves_runs_show_whole(tmp_path: Path) -> None:
    config = _workspace(tmp_path / "down", f'[broker]\nurl = "redis://:pw@127.0.0.1:'
                                           f'{free_port()}/0"\n')
    shown = run_cli(config, "runs", "show", "captured")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"run        {RUN_ID} (captured)"
    (line,) = shown.stderr.splitlines()
    assert line.startswith("forecast: the broker did not answer (") and "pw" not in line
    logs = run_cli(config, "runs", "logs", "captured")
    assert (logs.returncode, logs.stdout) == (1, "")
    (line,) = logs.stderr.splitlines()
    assert line.startswith("mainboard: error: ") and "pw" not in line
