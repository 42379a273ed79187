"""`mainboard batch list|show|watch` as a user reads them: the table of batches (and the line
when there is none), a broken batch log named in one warning line, a restarted watch saying
what was announced before it.

Jobs run on a local host; the ssh host of ``plain_workspace`` is a port nobody listens on.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.batch_helpers import fleet_file, plain_workspace
from tests.support.workspace import run_cli

FLEET = ('[defaults]\ntarget = "scratch"\n[[jobs]]\nname = "quick"\ncommand = "true"\n'
         '[[jobs]]\nname = "far"\ntarget = "edge"\ncommand = "true"\n')
BROKEN = "20260101-000000-broken-abcdef"  # a batch folder whose log lost its first line


def test_batch_list_shows_each_batch_with_what_it_still_owes(tmp_path: Path) -> None:
    config = plain_workspace(tmp_path)
    empty = run_cli(config, "batch", "list")
    assert (empty.returncode, empty.stderr) == (0, "")
    assert empty.stdout == "no batches yet (`mainboard batch run fleet.toml`)\n"
    ran = run_cli(config, "batch", "run", str(fleet_file(config.parent, FLEET)))
    assert ran.returncode == 0, ran.stderr
    batch_id = ran.stdout.strip()
    (config.parent / ".mainboard" / "batches" / BROKEN).mkdir()
    (config.parent / ".mainboard" / "batches" / BROKEN / "receipts.ndjson").write_text("")

    listed = run_cli(config, "batch", "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["BATCH", "CREATED", "JOBS", "OUTCOMES"]
    assert row.startswith(batch_id) and row.split()[3:] == ["2", "-", "(2", "owed)"], row
    (warning,) = listed.stderr.splitlines()
    assert warning.startswith(f"mainboard: warning: {config.parent / '.mainboard'}") \
        and BROKEN in warning and "no readable batch.created line" in warning, warning

    jobs = config.parent / ".mainboard" / "jobs"
    (jobs / "20260101-000000-torn-abcdef.ndjson").write_text("{torn\n")  # each sweep says so
    watched = run_cli(config, "batch", "watch", batch_id, "--interval", "0.05")
    assert watched.returncode == 1, watched.stderr  # a job did not complete
    assert f"mainboard: warning: {jobs / '20260101-000000-torn-abcdef.ndjson'}:1: not a JSON " \
        "receipt line" in watched.stderr
    assert "completed: quick on scratch (exit 0)" in watched.stdout.splitlines()
    again = run_cli(config, "batch", "watch", batch_id)  # a watch started again
    assert again.returncode == 1, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0] == f"batch {batch_id} (fleet): 2 of 2 outcomes already announced"
    assert lines[-1] == (f"batch {batch_id} (fleet): 2 jobs: 1 completed, 1 unreachable; spend "
                         "so far $0.0000 (1 job(s) rate unknown)")
    shown = json.loads(run_cli(config, "batch", "list", "--json").stdout)
    assert [(b["batch"], b["jobs"], b["complete"], b["outcomes"]) for b in shown] == [
        (batch_id, 2, True, {"unreachable": 1, "completed": 1})]
