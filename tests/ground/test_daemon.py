"""The ground's process helpers against real processes: when a stopped service has let go
of its files (a service's stop waits for that before it reports)."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap
import time

from mainboard.daemon import port_is_free, proc_state, process_exiting


def test_a_process_is_exiting_until_it_is_a_zombie_or_gone() -> None:
    """What a service's stop waits for once its command line is gone: the exit itself (a
    zombie has closed its files, the listening socket among them)."""
    proc = subprocess.Popen(["sleep", "600"])
    assert process_exiting(proc.pid)
    proc.kill()
    deadline = time.monotonic() + 60  # a hang guard: the event is the zombie state
    while proc_state(proc.pid) != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not process_exiting(proc.pid)  # a zombie, not yet reaped
    proc.wait()
    assert not process_exiting(proc.pid)  # gone


SYS_EXIT = {"x86_64": 60, "aarch64": 93}  # exit(2): ends the calling thread only


def test_a_process_whose_main_thread_exited_first_is_exiting_until_its_last_thread_is() -> None:
    """The main thread is a zombie while another still runs and holds the files they share
    (seen: Flower's stop reported while its port was still held, failing CI)."""
    child = textwrap.dedent(f"""
        import ctypes, os, socket, sys, threading
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
        def last():
            sys.stdin.readline()
            os._exit(0)
        threading.Thread(target=last).start()
        print(s.getsockname()[1], flush=True)
        ctypes.CDLL(None).syscall({SYS_EXIT[platform.machine()]}, 0)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout and proc.stdin
    port = int(proc.stdout.readline())
    deadline = time.monotonic() + 60  # hang guards: the events are the thread states
    while proc_state(proc.pid) != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert process_exiting(proc.pid) and not port_is_free(port)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    while process_exiting(proc.pid):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert port_is_free(port)
    assert proc.wait() == 0
