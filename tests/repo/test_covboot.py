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


MEASURED = """
import os
import sys


def shape(n):
    if n % 2:
        return "odd"
    return "even"


def child():
    return [shape(n) for n in range(3)]


if __name__ == "__main__":
    how = sys.argv[1]
    print(shape(len(how)))
    if how == "fork":
        pid = os.fork()
        if pid == 0:
            child()
            os._exit(0)
        os.waitpid(pid, 0)
    if how == "exit":
        os._exit(0)
"""


def _measured_env(config: Path, data_file: Path, **extra: str) -> dict[str, str]:
    """A new interpreter's environment that starts coverage through tests/covboot, as the
    suite's processes do, with ``config`` and ``data_file`` instead of the suite's own."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("COVERAGE_", "PYTHON", "MAINBOARD_COVERAGE"))}
    return {**env, **extra, "PYTHONPATH": str(ROOT / "tests" / "covboot"),
            "COVERAGE_PROCESS_START": str(config), "COVERAGE_FILE": str(data_file)}


def _measure(tmp_path: Path, name: str, extra: dict[str, str]) -> Path:
    """prog.py run under coverage three ways (plain exit, os._exit, a forked child), each a
    new interpreter started through tests/covboot as the suite's are; their data folder."""
    data = tmp_path / name
    data.mkdir()
    env = _measured_env(tmp_path / "covrc", data / "cov", **extra)
    for how in ("plain", "exit", "fork"):
        subprocess.run([sys.executable, str(tmp_path / "prog.py"), how], env=env, check=True,
                       capture_output=True)
    return data


COMBINE = """
import json, sys
from pathlib import Path
import coverage
sys.path.insert(0, sys.argv[1])
import fastsave
data, config = Path(sys.argv[2]), sys.argv[3]
fastsave.gather(data)
cov = coverage.Coverage(data_file=str(data / "all"), config_file=config)
cov.combine([str(p) for p in data.iterdir() if p.name.startswith("cov.")], keep=True)
combined = cov.get_data()
print(json.dumps({Path(f).name: sorted(combined.arcs(f) or ()) for f in combined.measured_files()}))
"""


def _combine(data: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """fastsave.gather (what scripts/coverage_report.py runs), then coverage's combine, in a
    process of their own: a ``coverage.Coverage`` built in this one would stop this
    process's own save (coverage's ``_prevent_sub_process_measurement``)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COVERAGE_")}
    return subprocess.run([sys.executable, "-c", COMBINE, str(ROOT / "tests" / "covboot"),
                           str(data), str(config)], env=env, capture_output=True, text=True,
                          check=True)


def _arcs(data: Path, tmp_path: Path) -> dict[str, set[tuple[int, int]]]:
    done = _combine(data, tmp_path / "covrc")
    return {name: {tuple(arc) for arc in arcs} for name, arcs in json.loads(done.stdout).items()}


def test_the_fast_save_records_the_arcs_coverage_own_save_records(tmp_path: Path) -> None:
    """tests/covboot/fastsave.py: each process writes a marshal file, not a SQLite one, and
    fastsave.gather reads them back into exactly coverage's own data."""
    (tmp_path / "prog.py").write_text(MEASURED)
    (tmp_path / "covrc").write_text(f"[run]\nbranch = True\nparallel = True\n"
                                    f"source = {tmp_path}\npatch = _exit\n    fork\n")
    fast = _measure(tmp_path, "fast", {})
    sqlite = _measure(tmp_path, "sqlite", {"MAINBOARD_COVERAGE_SQLITE_SAVE": "1"})
    assert {p.name.split(".")[0] for p in fast.iterdir()} == {"mcov"}
    assert len(list(fast.iterdir())) == 4  # plain, exit, fork's parent and its child
    assert {p.name.split(".")[0] for p in sqlite.iterdir()} == {"cov"}
    got, want = _arcs(fast, tmp_path), _arcs(sqlite, tmp_path)
    assert got == want
    assert (7, 8) in got["prog.py"] and (7, 9) in got["prog.py"]  # both ways of the branch
    assert not [p for p in fast.iterdir() if p.name.startswith("mcov.")]  # read, then deleted


def test_a_fast_save_file_left_half_written_is_named_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "covrc").write_text("[run]\nbranch = True\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "mcov.host.pid1.ab12.part").write_bytes(b"\x00\x01")
    done = _combine(data, tmp_path / "covrc")
    assert "1 data file(s) left unfinished by a process killed while saving" in done.stderr
    assert json.loads(done.stdout) == {} and not (data / "mcov.host.pid1.ab12.part").exists()


CALLER = """
import json
import sys

import redis

seen = {}


def get_connection(self, *args, **kwargs):
    seen["inside"] = sys.gettrace() is None
    raise redis.ConnectionError("no server here")


redis.connection.ConnectionPool.get_connection = get_connection
before = sys.gettrace() is not None
try:
    redis.Redis(port=1).ping()  # the pool's get_connection above answers: no socket opened
except redis.ConnectionError:
    pass
print(json.dumps({"before": before, "untraced_inside": seen["inside"],
                  "after": sys.gettrace() is not None}))
"""


def test_redis_commands_run_untraced_and_the_tracer_is_back_after(tmp_path: Path) -> None:
    """tests/covboot/foreign_calls.py: redis-py's command path runs with the thread's tracer
    put aside (it calls nothing of ours), and it is back when the command returns or raises;
    MAINBOARD_COVERAGE_TRACE_FOREIGN_CALLS=1 leaves it traced."""
    (tmp_path / "caller.py").write_text(CALLER)
    (tmp_path / "covrc").write_text(f"[run]\nbranch = True\nparallel = True\n"
                                    f"source = {tmp_path}\n")
    for traced, inside in (("0", True), ("1", False)):
        env = _measured_env(tmp_path / "covrc", tmp_path / "cov",
                            MAINBOARD_COVERAGE_TRACE_FOREIGN_CALLS=traced)
        done = subprocess.run([sys.executable, str(tmp_path / "caller.py")], check=True,
                              env=env, capture_output=True, text=True)
        assert json.loads(done.stdout) == {"before": True, "untraced_inside": inside,
                                           "after": True}, done.stderr


THREAD = """
import json, sys, threading, types
sys.path.insert(0, sys.argv[1])
import foreign_calls

seen = {}


class Transport:  # paramiko's shape: a thread body that calls a handler handed over earlier
    def request_port_forward(self, address, port, handler=None):
        self.handler = handler

    def run(self):
        seen["run"] = sys.gettrace() is None
        self.handler()


def handler():
    seen["handler"] = sys.gettrace() is not None


module = types.ModuleType("paramiko.transport")
module.Transport = Transport
foreign_calls.wrap(module)
sys.settrace(lambda *args: None)
threading.settrace(lambda *args: None)
transport = Transport()
transport.request_port_forward("127.0.0.1", 0, handler=handler)
thread = threading.Thread(target=transport.run)
thread.start()
thread.join()
print(json.dumps({**seen, "main": sys.gettrace() is not None}))
"""


def test_a_transport_thread_runs_untraced_and_the_handler_it_calls_traced() -> None:
    """tests/covboot/foreign_calls.py CALLBACKS: paramiko's transport thread body runs with
    its tracer put aside, and the port forward's handler (ours) with it taken back."""
    done = subprocess.run([sys.executable, "-c", THREAD, str(ROOT / "tests" / "covboot")],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"run": True, "handler": True, "main": True}
