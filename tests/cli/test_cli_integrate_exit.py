"""`mainboard integrate` ends its process at once (cli/common.end) but as Python would: a
message its code exits with is shown (exit 1), and a thread the run's code started is
joined first, so its work is not cut short.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.workspace import run_cli

# A gammaboard evaluator module that gives up at import, after starting a (non-daemon)
# thread that writes a file once it had a moment.
QUITS = '''import sys
import threading
import time
from pathlib import Path


def _finish():
    time.sleep(0.2)
    Path("finished.txt").write_text("the thread's work is done")


threading.Thread(target=_finish, name="evaluator-setup").start()
sys.exit("gb_quits: no licence for this evaluator on this machine")


class Quits:
    def eval(self, xs_discrete, xs_continuous):
        return xs_continuous[:, 0]
'''

RUN = '''name = "gb-quits"
[evaluator]
kind = "python_scalar"
module = "gb_quits"
class = "Quits"
continuous_dims = 1
discrete_dims = 0
[[task_queue]]
kind = "sample"
nr_samples = 1_000
observable = { config = "scalar" }
sampler_aggregator = { config = { kind = "naive_monte_carlo" } }
'''


def test_integrate_shows_the_message_code_exits_with_and_joins_its_threads(
        tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mainboard.toml").write_text('[workspace]\nname = "quits"\n')
    (ws / "gb_quits.py").write_text(QUITS)
    (ws / "run.toml").write_text(RUN)
    done = run_cli(ws / "mainboard.toml", "integrate", "run.toml", "--workers", "1")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines()[-1] == \
        "gb_quits: no licence for this evaluator on this machine"
    assert (ws / "finished.txt").read_text() == "the thread's work is done"
    assert not (ws / ".mainboard" / "redis").exists()  # refused before the broker started
