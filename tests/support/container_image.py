"""A real, tiny podman image made from this machine's files, with no registry and no network.

``build_python_image`` copies the host's python (binary, stdlib, and every shared library
that it, its extension modules and the given extra binaries link to) plus ``/bin/sh`` into
a root file system, tars it and ``podman import``s it. That is exactly what a site's fixed
image is to mainboard: an interpreter at a known path, nothing of ours inside.

``podman_shim`` writes a ``podman`` wrapper for machines like this test VM, which mount
cgroup v1 and v2 side by side ("hybrid", refused by crun) and forbid raising rlimits: it
runs the real podman in a private mount namespace without the v2 mount, with a
containers.conf that turns cgroups off (crun; cgroupfs with runc alone) and asks only for
rlimits we may set. On a normal machine it just execs podman.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "lib2to3", "pydoc_data",
               "site-packages", "dist-packages"}


def _libraries(binaries: list[str]) -> set[str]:
    """Absolute paths of the shared libraries (and loader) that ``binaries`` need."""
    found: set[str] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                found.add(path)
    return found


def _copy(path: str, rootfs: Path) -> None:
    """Copy ``path`` into ``rootfs`` at the same place, keeping each symlink in its chain."""
    for _ in range(16):
        parent = os.path.realpath(os.path.dirname(path))
        here = os.path.join(parent, os.path.basename(path))
        target = rootfs / here.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(here):
            link = os.readlink(here)
            if not target.is_symlink():
                target.symlink_to(link)
            path = link if link.startswith("/") else os.path.join(parent, link)
            continue
        if not target.exists():
            shutil.copy2(here, target)
        return


def build_python_image(tag: str, workdir: Path, python: str = "/usr/bin/python3",
                       extra_binaries: tuple[str, ...] = ()) -> str:
    """``podman import`` a root file system holding ``python`` (same path) and ``/bin/sh``."""
    info = subprocess.run([python, "-c", "import sys, sysconfig; print(sys.executable); "
                           "print(sysconfig.get_paths()['stdlib'])"],
                          capture_output=True, text=True, check=True).stdout.split()
    executable, stdlib = info[0], info[1]
    rootfs = workdir / "rootfs"
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.islink(f"/{top}"):
            (rootfs / top).parent.mkdir(parents=True, exist_ok=True)
            (rootfs / top).symlink_to(os.readlink(f"/{top}"))
    for directory in ("tmp", "root", "etc", "proc", "sys", "dev"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    shutil.copytree(stdlib, rootfs / stdlib.lstrip("/"), symlinks=True,
                    ignore=lambda d, names: [n for n in names if d == stdlib and n in STDLIB_SKIP])
    wheels = Path("/usr/share/python-wheels")  # Debian's ensurepip takes pip from here
    if wheels.is_dir():
        shutil.copytree(wheels, rootfs / str(wheels).lstrip("/"))
    sh = os.path.realpath("/bin/sh")
    dynload = [str(p) for p in Path(stdlib).glob("lib-dynload/*.so")]
    for path in [python, executable, "/bin/sh", *extra_binaries,
                 *_libraries([executable, sh, *dynload, *extra_binaries])]:
        _copy(path, rootfs)
    tarball = workdir / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(rootfs, arcname=".")
    subprocess.run(["podman", "import", "--quiet", str(tarball), tag], check=True,
                   capture_output=True)
    shutil.rmtree(rootfs)
    tarball.unlink()
    return tag


def podman_shim(directory: Path, podman: str) -> Path:
    """A directory holding a ``podman`` that works on this VM (see module doc), for PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "containers.conf"
    # cgroups = "disabled" is crun-only; with runc alone (podman's dependency is "crun |
    # runc", so installing runc next to podman leaves crun out) use cgroupfs instead.
    cgroups = 'cgroups = "disabled"\n' if shutil.which("crun") else ""
    engine = "" if cgroups else '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'
    conf.write_text(f'[containers]\n{cgroups}'
                    'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n' + engine)
    shim = directory / "podman"
    shim.write_text(
        "#!/bin/sh\n"
        f"export CONTAINERS_CONF={shlex.quote(str(conf))}\n"
        "if mountpoint -q /sys/fs/cgroup/unified 2>/dev/null && "
        "mountpoint -q /sys/fs/cgroup/memory 2>/dev/null; then\n"
        "  exec unshare -m --propagation private /bin/sh -c "
        "'umount /sys/fs/cgroup/unified && exec \"$0\" \"$@\"' "
        f"{shlex.quote(podman)} \"$@\"\n"
        "fi\n"
        f"exec {shlex.quote(podman)} \"$@\"\n")
    shim.chmod(0o755)
    return directory
