"""mainboard.names' garbage-collector hold in processes of its own (the collector is process-wide): held, given
back frozen, by a timer at the latest, in a forked child, never for a library's caller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from mainboard import names


def _run(body: str, **env: str) -> dict[str, object]:
    """``body`` run by a new interpreter, which prints one JSON line: what it returns."""
    code = "import gc, json, os, sys, time\nfrom mainboard import names\n" + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_held_then_given_back_with_what_was_loaded_frozen() -> None:
    got = _run("""
        names.hold_gc()
        held = (gc.isenabled(), names.gc_held())
        import decimal, email.parser  # loaded while held
        names.release_gc()
        names.release_gc()  # twice: nothing more
        print(json.dumps({"held": held, "after": (gc.isenabled(), names.gc_held()),
                          "frozen": gc.get_freeze_count()}))
    """)
    assert got["held"] == [False, True] and got["after"] == [True, False]
    assert int(got["frozen"]) > 1_000  # type: ignore[call-overload]


def test_a_library_caller_and_a_collector_off_by_choice_are_left_alone() -> None:
    got = _run("""
        names.release_gc()  # never held: a program that imports mainboard
        library = (gc.isenabled(), gc.get_freeze_count())
        gc.disable()  # off on purpose: hold and release keep it so
        names.hold_gc()
        names.release_gc()
        print(json.dumps({"library": library, "chosen": (gc.isenabled(), names.gc_held())}))
    """)
    assert got == {"library": [True, 0], "chosen": [False, False]}


def test_the_variable_turns_the_hold_off() -> None:
    got = _run("""
        names.hold_gc()
        print(json.dumps([gc.isenabled(), names.gc_held()]))
    """, **{names.GC_HOLD_ENV: "0"})
    assert got == [True, False]


def test_a_limit_gives_the_collector_back_whatever_the_process_does() -> None:
    got = _run("""
        names.hold_gc(limit=0.05)
        deadline = time.monotonic() + 60  # a hang guard: the event is the timer's release
        while not gc.isenabled():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        print(json.dumps([names.gc_held(), gc.get_freeze_count() > 0]))
    """)
    assert got == [False, True]


def test_a_child_forked_while_held_releases_on_its_own() -> None:
    got = _run("""
        names.hold_gc()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            names.release_gc()
            os.write(w, json.dumps([gc.isenabled(), names.gc_held()]).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        child = json.loads(os.read(r, 100))
        print(json.dumps({"child": child, "parent": [gc.isenabled(), names.gc_held()]}))
    """)
    assert got == {"child": [True, False], "parent": [False, True]}


def test_a_command_ends_with_the_collector_back_and_its_imports_frozen() -> None:
    """`mainboard`'s main holds; the verb's end (cli/common.end) releases before the exit's
    collection, which then walks nothing the verb loaded."""
    got = _run("""
        import atexit
        from mainboard.cli import common
        names.hold_gc()
        atexit.register(lambda: print(json.dumps([gc.isenabled(), gc.get_freeze_count() > 0])))
        common.end(0)
    """)
    assert got == [True, True]


def test_the_limits_thread_blocks_every_signal_so_ctrl_c_reaches_the_main_thread() -> None:
    """A Ctrl-C the kernel hands to a thread leaves the main thread asleep in a blocking
    call; the limit's thread takes none (seen: `mainboard run` waiting on its child did not
    stop on Ctrl-C while the thread was there)."""
    got = _run("""
        import signal, threading
        names.hold_gc(limit=60)
        limiter = next(t for t in threading.enumerate() if t.name == "gc-hold-limit")
        def blocked(tid):
            status = open(f"/proc/self/task/{tid}/status").read()
            mask = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
            return [bool(mask & (1 << (s - 1))) for s in (signal.SIGINT, signal.SIGTERM)]
        print(json.dumps({"limit": blocked(limiter.native_id),
                          "main": blocked(threading.main_thread().native_id)}))
    """)
    assert got == {"limit": [True, True], "main": [False, False]}
