"""The host side of provisioning: sent to the host's python on stdin, never imported there.

``python - check|install ROOT MANIFEST_JSON [WHEEL]`` checks (one round trip) or builds
the cached environment ``ROOT/.mainboard/envs/<key>/`` (under ``.mainboard`` like the
job directories, so a mirrored workspace with its own ``envs/`` cannot collide with it).
The key hashes the manifest (dependency set, project version and content hash, container
image) with this interpreter's version and path, so the same set on the same python is
never installed twice. ``install`` holds a
per-key lock: a second provision of the same set waits, then finds it ready. Everything
runs through argv lists (no shell). The last stdout line is ``mb-provision:{json}``.

Stdlib only and plain syntax, so that even a too-old python can say that it is too old.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

TAG = "mb-provision:"
MARKER = ".mainboard-env.json"
UV_REQUIREMENT = "uv>=0.4"
LOG_NAME = "provision.log"
ACTIONS: list = []  # what this run did, reported back to the caller


def say(text: str) -> None:
    """Progress on stderr (streamed back to the caller); stdout carries the result."""
    sys.stderr.write("mainboard provision: " + text + "\n")
    sys.stderr.flush()


def finish(result: dict) -> None:
    sys.stdout.write(TAG + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


class Unavailable(Exception):
    """The declared interpreter cannot be had on this host (the message says what was tried)."""


def env_key(manifest: dict) -> str:
    """Hash of what the environment holds and the interpreter it is built on: with a
    declared python (``python_request``) the declaration itself, else this interpreter."""
    if manifest.get("python_request"):
        ident = {"manifest": manifest, "machine": platform.machine(),
                 "libc": platform.libc_ver()[0]}
    else:
        ident = {"manifest": manifest, "python": sys.version,
                 "implementation": platform.python_implementation(),
                 "executable": os.path.realpath(sys.executable), "machine": platform.machine()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def env_python(env_dir: str) -> str:
    return os.path.join(env_dir, "bin", "python")


def python_version(env_dir: str) -> str:
    """The env's own interpreter version (it may not be the one running this driver)."""
    done = subprocess.run([env_python(env_dir), "-S", "-c", "import platform; "
                           "print(platform.python_version())"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def read_marker(env_dir: str) -> dict:
    try:
        with open(os.path.join(env_dir, MARKER)) as handle:
            marker = json.load(handle)
    except (OSError, ValueError):
        return {}
    return marker if isinstance(marker, dict) else {}


def is_ready(env_dir: str, key: str) -> bool:
    """The marker is written last, so its presence (with our key) means a finished env."""
    return read_marker(env_dir).get("key") == key and os.path.exists(env_python(env_dir))


def log_action(envs: str, key: str, action: str) -> None:
    """One line per thing done, so a caller can prove that nothing was (re)installed."""
    ACTIONS.append(action)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(os.path.join(envs, LOG_NAME), "a") as handle:
        handle.write(f"{stamp} {key} {action}\n")


def run(argv: list, env: dict | None = None) -> None:
    """Run one step with its output on our stderr; stop with its exit code if it fails."""
    say("$ " + " ".join(argv))
    code = subprocess.call(argv, stdout=sys.stderr, stderr=sys.stderr, env=env)
    if code != 0:
        say(f"step failed with exit code {code}: {argv[0]}")
        sys.exit(code)


def works(uv: str) -> bool:
    try:
        return subprocess.call([uv, "--version"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def tools_dir(root: str) -> str:
    """uv is a native binary: one copy per machine type and libc, shared by all envs."""
    libc = platform.libc_ver()[0] or "libc"
    return os.path.join(root, ".mainboard", "tools", f"uv-{platform.machine()}-{libc}")


def find_uv(root: str) -> str | None:
    """Our own copy first, then one on PATH or in the usual user locations."""
    tools = tools_dir(root)
    home = os.path.expanduser("~")
    candidates = [os.path.join(tools, "venv", "bin", "uv"),
                  os.path.join(tools, "pkgs", "bin", "uv"),
                  shutil.which("uv"), os.path.join(home, ".local", "bin", "uv"),
                  os.path.join(home, ".cargo", "bin", "uv")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and works(candidate):
            return candidate
    return None


def install_uv(root: str, envs: str, key: str) -> str:
    """uv from PyPI into ROOT/.mainboard/tools: ``pip install --target`` with this python's pip
    (quick; a target dir is not the externally managed system site), else a private venv."""
    tools = tools_dir(root)
    venv, pkgs = os.path.join(tools, "venv"), os.path.join(tools, "pkgs")
    pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    attempts = [
        ([[sys.executable, *pip, "--target", pkgs, UV_REQUIREMENT]], pkgs),
        ([[sys.executable, "-m", "venv", venv],
          [os.path.join(venv, "bin", "python"), *pip, UV_REQUIREMENT]], venv),
    ]
    for steps, where in attempts:
        shutil.rmtree(where, ignore_errors=True)
        say("installing uv into " + where)
        if all(subprocess.call(step, stdout=sys.stderr, stderr=sys.stderr) == 0 for step in steps):
            uv = os.path.join(where, "bin", "uv")
            if works(uv):
                log_action(envs, key, "uv-install " + uv)
                return uv
        shutil.rmtree(where, ignore_errors=True)
    say(f"could not install uv with {sys.executable} (no venv/ensurepip and no pip?); install "
        "uv on this host (https://docs.astral.sh/uv/) or python3-venv, then retry")
    sys.exit(4)


class Locked:
    """An exclusive flock on a file, held for the ``with`` block."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> Locked:
        self.handle = open(self.path, "a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def pythons_dir(root: str) -> str:
    """Where uv keeps the interpreters it installs for this root."""
    return os.path.join(root, ".mainboard", "pythons")


def find_interpreter(uv: str, request: str, preference: str, uv_env: dict) -> str | None:
    """An interpreter that satisfies ``request``: uv-managed ones under this root first
    (``preference`` as uv's ``--python-preference``; ``only-managed`` ignores PATH), or None."""
    done = subprocess.run([uv, "python", "find", "--no-project", "--python-preference",
                           preference, request], env=uv_env, capture_output=True, text=True)
    found = done.stdout.strip().splitlines()
    return found[-1] if done.returncode == 0 and found else None


def install_interpreter(uv: str, envs: str, key: str, request: str, preference: str,
                        uv_env: dict) -> str:
    """``uv python install`` from the host's mirror or downloads list; raise Unavailable
    naming what was tried (uv removes its partial download itself)."""
    found = find_interpreter(uv, request, preference, uv_env)
    if found:
        return found
    install_env = dict(uv_env, UV_PYTHON_DOWNLOADS="manual")
    say(f"$ {uv} python install --no-bin {request}")
    done = subprocess.run([uv, "python", "install", "--no-bin", "--no-config", request],
                          env=install_env, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(done.stderr)
    found = find_interpreter(uv, request, preference, uv_env) if done.returncode == 0 else None
    if not found:
        tried = [f"{name}={uv_env[name]}" for name in
                 ("UV_PYTHON_INSTALL_MIRROR", "UV_PYTHON_DOWNLOADS_JSON_URL") if uv_env.get(name)]
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        why = why.strip().removeprefix("error:")
        raise Unavailable(f"python {request} is not available: tried uv python install "
                          f"({', '.join(tried) or 'default downloads'}): {why.strip()}; set "
                          "[python] mirror or downloads in mainboard.toml, or change [deps] python")
    log_action(envs, key, "python-install " + found)
    return found


def build(root: str, envs: str, key: str, env_dir: str, manifest: dict, wheel: str | None) -> None:
    """Create the env with uv (on the declared interpreter, installed when missing), install
    the deps (and the project), then write the marker."""
    with Locked(os.path.join(root, ".mainboard", "tools", ".lock")):
        uv = find_uv(root) or install_uv(root, envs, key)
    uv_env = dict(os.environ)
    uv_env["UV_PYTHON_INSTALL_DIR"] = pythons_dir(root)
    # The cache next to the envs (same file system) lets uv hardlink instead of copying.
    uv_env.setdefault("UV_CACHE_DIR", os.path.join(root, ".mainboard", "cache", "uv"))
    uv_env["UV_PYTHON_DOWNLOADS"] = "never"
    # Trust the host's certificate store, as pip (truststore) does: a site's proxy CA lives
    # there, not in uv's bundled roots. The host's `env` may set these to 0.
    uv_env.setdefault("UV_NATIVE_TLS", "1")  # uv < 0.10
    uv_env.setdefault("UV_SYSTEM_CERTS", "1")
    if os.path.exists(env_dir):
        shutil.rmtree(env_dir)  # left half-built by an interrupted install (no marker)
    base = sys.executable
    request = manifest.get("python_request")
    if request:
        with Locked(os.path.join(root, ".mainboard", "tools", ".python.lock")):
            base = install_interpreter(uv, envs, key, request,
                                       manifest.get("python_preference") or "managed", uv_env)
    run([uv, "venv", "--quiet", "--python", base, env_dir], uv_env)
    log_action(envs, key, "env-create " + env_dir)
    project = manifest.get("project") or {}
    targets = list(manifest["deps"])
    if wheel:  # as a URL: uv would read a bare path with spaces or ';' as a requirement
        targets.append(project["name"] + " @ " + pathlib.Path(wheel).as_uri())
    elif project.get("requirement"):
        targets.append(project["requirement"])
    if targets:  # compiled once here, as pip does: else every worker start compiles its
        # imports again wherever the env is read-only or PYTHONDONTWRITEBYTECODE is set
        # (a worker's imports: 1.5 s of CPU from source, 0.55 s from bytecode)
        run([uv, "pip", "install", "--compile-bytecode", "--python", env_python(env_dir)]
            + targets, uv_env)
        log_action(envs, key, f"deps-install {len(targets)}")
    if project.get("import"):
        run([env_python(env_dir), "-c", "import " + project["import"]])
    tmp = os.path.join(env_dir, MARKER + ".tmp")
    with open(tmp, "w") as handle:
        json.dump({"key": key, "manifest": manifest, "python": python_version(env_dir),
                   "base": os.path.realpath(base), "created": time.time()}, handle)
    os.replace(tmp, os.path.join(env_dir, MARKER))


def size_of(path: str) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                pass
    return total


def envs_report(root: str, envs: str, key: str, manifest: dict, remove: bool) -> dict:
    """Every env under ROOT (key, python, size, created), and the declared interpreter as
    found now (never installed here); ``remove`` deletes them all first-hand."""
    listed = []
    for name in sorted(os.listdir(envs)) if os.path.isdir(envs) else []:
        path = os.path.join(envs, name)
        if name.startswith(".") or not os.path.isdir(path):
            continue
        marker = read_marker(path)
        listed.append({"key": name, "python": marker.get("python"), "created":
                       marker.get("created"), "size": size_of(path), "built": bool(marker)})
        if remove:
            shutil.rmtree(path, ignore_errors=True)
    report = {"envs": listed, "interpreter": None}
    request = manifest.get("python_request")
    uv = find_uv(root)
    if request and uv:
        report["interpreter"] = find_interpreter(
            uv, request, manifest.get("python_preference") or "managed",
            dict(os.environ, UV_PYTHON_INSTALL_DIR=pythons_dir(root)))
    return report


def main(argv: list) -> None:
    mode, root, manifest = argv[1], argv[2], json.loads(argv[3])
    wheel = argv[4] if len(argv) > 4 else None
    root = os.path.abspath(os.path.expanduser(root))
    need = tuple(manifest.get("requires_python") or (3, 0))
    result = {"root": root, "python_version": sys.version.split()[0],
              "base_python": os.path.realpath(sys.executable)}
    if sys.version_info[:len(need)] < need:
        result["error"] = (f"python {result['python_version']} at {sys.executable} is too old: "
                           f"the environment needs >= {'.'.join(str(n) for n in need)}; "
                           "set `python = ...` for this host in mainboard.toml")
        finish(result)
        return
    key = env_key(manifest)
    envs = os.path.join(root, ".mainboard", "envs")
    env_dir = os.path.join(envs, key)
    result.update(key=key, env_dir=env_dir, python=env_python(env_dir), actions=[])
    result["ready"] = is_ready(env_dir, key)
    if result["ready"]:
        result["python_version"] = read_marker(env_dir).get("python", result["python_version"])
    if mode in ("status", "remove"):
        result.update(envs_report(root, envs, key, manifest, mode == "remove"))
        finish(result)
        return
    if result["ready"] and mode == "check":
        finish(result)
        return
    try:  # before anything is uploaded: a root that cannot hold the env fails here, clearly
        os.makedirs(os.path.join(root, ".mainboard", "tools"), exist_ok=True)
        os.makedirs(os.path.join(envs, ".uploads"), exist_ok=True)
    except OSError as exc:
        result["error"] = (f"cannot create {envs}: {exc.strerror or exc}; check this host's "
                           "`root` in mainboard.toml")
        finish(result)
        return
    if mode == "check":
        finish(result)
        return
    try:
        with Locked(os.path.join(envs, key + ".lock")):
            if not is_ready(env_dir, key):
                build(root, envs, key, env_dir, manifest, wheel)
    except Unavailable as exc:
        shutil.rmtree(env_dir, ignore_errors=True)  # nothing half-built left behind
        result.update(error=str(exc), unavailable=True)
        finish(result)
        return
    finally:
        if wheel:
            shutil.rmtree(os.path.dirname(wheel), ignore_errors=True)  # the upload's own dir
    result.update(ready=True, actions=ACTIONS,
                  python_version=read_marker(env_dir).get("python", result["python_version"]))
    finish(result)


if __name__ == "__main__":
    main(sys.argv)
