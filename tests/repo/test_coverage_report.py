"""scripts/coverage_report.py against real coverage data files: a file a process left
unfinished (killed while it saved) is named once and skipped, the rest combine."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from pathlib import Path

import coverage
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(monkeypatch: pytest.MonkeyPatch) -> object:
    spec = importlib.util.spec_from_file_location(
        "coverage_report", ROOT / "scripts" / "coverage_report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "coverage_report", module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module


def test_a_torn_data_file_is_named_once_and_dropped_and_a_whole_one_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = coverage.CoverageData(basename=str(tmp_path / "cov.host.pid1.whole"))
    whole.add_arcs({str(ROOT / "mainboard" / "names.py"): [(-1, 1), (1, 2)]})
    whole.write()
    torn = tmp_path / "cov.host.pid2.torn"
    sqlite3.connect(torn).close()  # created, never given coverage's schema
    kept = _script(monkeypatch).drop_torn(sorted(tmp_path.iterdir()))  # type: ignore[attr-defined]
    assert kept == [tmp_path / "cov.host.pid1.whole"] and not torn.exists()
    assert capsys.readouterr().err == ("coverage_report: 1 data file(s) left unfinished by a "
                                       "process killed while saving (skipped): "
                                       "cov.host.pid2.torn\n")
