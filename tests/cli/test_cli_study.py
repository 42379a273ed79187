"""`mainboard study run|show|list` as a user runs them: the ids on stdout, one line per job on
stderr, the ledger's table and counts, a broken ledger named in one warning line.

Jobs run on a local host (`true`), so nothing here needs a service.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.jobs_workspace import make_workspace
from tests.support.workspace import run_cli

STUDY = ('[study]\nname = "{name}"\n[[jobs]]\nname = "a"\ntarget = "scratch"\ncommand = "true"\n'
         'params = {{ k = 1 }}\n[[jobs]]\nname = "b"\ntarget = "scratch"\ncommand = "true"\n'
         'params = {{ k = 2 }}\n')


def _study(ws: Path, name: str) -> Path:
    path = ws / f"{name}.toml"
    path.write_text(STUDY.format(name=name))
    return path


def test_study_list_shows_every_study_with_its_counts_and_names_a_broken_ledger(
        tmp_path: Path) -> None:
    config = make_workspace(tmp_path)
    ws = config.parent
    empty = run_cli(config, "study", "list")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "")
    ran = run_cli(config, "study", "run", str(_study(ws, "alpha")))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "alpha\n"
    assert [line.split(" (")[0] for line in ran.stderr.splitlines()] == [
        "submitted a", "submitted b"]
    ran_json = run_cli(config, "study", "run", str(_study(ws, "beta")), "--json")
    assert ran_json.returncode == 0 and ran_json.stderr == "", ran_json.stderr
    assert json.loads(ran_json.stdout)["study"] == "beta"
    # A ledger with no `study.job` line is skipped with one warning naming its file.
    (ws / ".mainboard" / "studies" / "gamma.ndjson").write_text("")

    shown = run_cli(config, "study", "list")
    assert shown.returncode == 0
    assert shown.stdout.splitlines() == ["alpha: 2 runs: 2 in-flight",
                                         "beta: 2 runs: 2 in-flight"]
    (warning,) = shown.stderr.splitlines()
    assert warning.startswith("mainboard: warning: ") and "gamma.ndjson: no study.job line" \
        in warning
    listed = run_cli(config, "study", "list", "--json")
    assert json.loads(listed.stdout) == [
        {"study": name, "runs": 2, "counts": {"completed": 0, "failed": 0, "lost": 0,
                                              "cancelled": 0, "in-flight": 2}}
        for name in ("alpha", "beta")]
    table = run_cli(config, "study", "show", "alpha").stdout.splitlines()
    assert table[0].split() == ["run_id", "name", "target", "job", "attempts", "verdict",
                                "exit_code"]
    assert [row.split()[1] for row in table[1:3]] == ["a", "b"]
    assert table[-1] == "study alpha: 2 runs: 2 in-flight"
