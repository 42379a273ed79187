"""A host's root directory: made when missing, and found among a login's banner lines.

Apart from ``access.py`` so that what reaches a host before any handle exists (a rental
being proven, a fleet worker being launched) needs nothing of the handles.
"""

from __future__ import annotations

from mainboard.bridges.ssh_session import remote_word
from mainboard.bridges.transport import Transport
from mainboard.errors import HostError

TAG = "mb-tag:"  # marks the line a remote command prints for us among login banners


def ensure_root(transport: Transport, name: str, root: str) -> str:
    """Create the host's root when missing (like ``git clone``) and return it absolute."""
    word = remote_word(root)
    done = transport.run(["/bin/sh", "-c", f"mkdir -p -- {word} && cd -- {word} && "
                          f"printf '{TAG}%s\\n' \"$PWD\""], timeout=60)
    found = tagged(done.stdout)
    if not done.ok or not found:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise HostError(f"host {name!r}: root {root!r} does not exist and cannot be created "
                        f"({why}); set `root` of [hosts.{name}] to a directory you may write")
    return found


def tagged(stdout: str) -> str | None:
    """The value of the last ``TAG`` line a remote command printed (banners are skipped)."""
    lines = [ln[len(TAG):] for ln in stdout.splitlines() if ln.startswith(TAG)]
    return lines[-1] if lines else None
