"""The summary of a ``scripts/bootstrap stress`` folder: each run's exit, time and counts, then
every failure with its run, test id and first line, so a flake is named with the run (its
``command`` and ``pytest.log``) that shows it. Written to ``summary.txt`` too; exits 1 when a
run failed.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def run_lines(run: Path) -> tuple[str, list[str]]:
    """One line for the run, and one per failed or erroring test of it."""
    code, _, took = (run / "exit").read_text().strip().partition(" ") \
        if (run / "exit").exists() else ("?", "", "?")
    junit = run / "junit.xml"
    if not junit.exists():
        return f"{run.name}: exit {code} after {took} s, no JUnit report", []
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    failures: list[str] = []
    for case in suite.iter("testcase"):
        for kind in ("failure", "error"):
            for found in case.findall(kind):
                first = (found.get("message") or found.text or "").strip().splitlines()
                node = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
                failures.append(f"{run.name}: {kind.upper()} {node}: "
                                f"{first[0][:200] if first else '?'}")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return (f"{run.name}: exit {code} after {took} s, {counts['tests']} tests, "
            f"{counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} "
            "skipped", failures)


def main(folder: str) -> int:
    base = Path(folder)
    runs = sorted((p for p in base.glob("run-*") if p.is_dir()),
                  key=lambda p: int(p.name.split("-")[1]))
    lines, failures = [], []
    for run in runs:
        line, failed = run_lines(run)
        lines.append(line)
        failures += failed
    bad = [r for r in runs if not (r / "exit").exists()
           or (r / "exit").read_text().split()[0] != "0"]
    text = "\n".join([f"stress summary: {base}", *lines,
                      *(["failures:", *failures] if failures else ["no failures"])]) + "\n"
    (base / "summary.txt").write_text(text)
    sys.stdout.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: stress_summary.py .stress/<time>")
    sys.exit(main(sys.argv[1]))
