"""tests/covboot/foreign_imports.py in a real interpreter: another project's module body runs
untraced, a module of ours that it imports is traced, and the thread's tracer is back after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[3]]
import foreign_imports
foreign_imports.install(sys.argv[2])
seen = []
def tracer(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "<module>":
        seen.append(frame.f_code.co_filename.rsplit("/", 1)[-1])
    return None
sys.settrace(tracer)
import foreign_pkg_for_covboot
back = sys.gettrace() is tracer
sys.settrace(None)
print(json.dumps({"seen": seen, "back": back, "value": foreign_pkg_for_covboot.VALUE}))
"""


def test_foreign_module_bodies_run_untraced_and_ours_inside_them_traced(tmp_path: Path) -> None:
    ours, foreign = tmp_path / "ours", tmp_path / "site"
    (ours / "ours_pkg_for_covboot").mkdir(parents=True)
    (ours / "ours_pkg_for_covboot" / "__init__.py").write_text("VALUE = 41\n")
    foreign.mkdir()
    (foreign / "foreign_helper_for_covboot.py").write_text("HELPER = 1\n")
    (foreign / "foreign_pkg_for_covboot.py").write_text(
        "import foreign_helper_for_covboot\nimport ours_pkg_for_covboot\n"
        "VALUE = ours_pkg_for_covboot.VALUE + foreign_helper_for_covboot.HELPER\n")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("COVERAGE_", "PYTHON"))}
    done = subprocess.run(
        [sys.executable, "-S", "-c", PROGRAM, str(ROOT / "tests" / "covboot"), str(ours),
         str(foreign)], env=env, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    assert report == {"seen": ["__init__.py"], "back": True, "value": 42}
