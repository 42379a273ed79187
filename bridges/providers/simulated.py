"""LOCAL SIMULATED GPU PROVIDER: a simulation for tests and demos, not a real marketplace.

An HTTP server on 127.0.0.1 that speaks the same vast.ai-shaped REST API as
``rest.RestProvider`` (so the real adapter is what talks to it). Its offers are fake
GPU types whose names start with ``SIM`` and carry ``"simulated": true``. "Renting"
one builds a network namespace with a veth pair on a private /30 and starts an sshd
inside it (see ``netns``): the renter's key is authorised, ``hostname`` differs, and
the host's loopback services are out of reach, as on a real rented box. Destroying
kills everything in the namespace and removes veth and namespace. Billing is real
arithmetic on fake money: the balance falls by ``dph_total`` per hour of rental.
With ``"exclusive_offers": true`` in its state (``SimulatedProviderServer.exclusive``),
an offer is one machine, as on vast.ai: unlisted and unrentable while a rental holds it.

Every change goes through ``state.json`` under a file lock, so ``cleanup_all(DIR)``
(or ``--cleanup``) removes the machines of a server that crashed. A clean shutdown
(SIGTERM, Ctrl-C) destroys all rentals. Needs root and ``ip``/``sshd``.

    python -m mainboard.bridges.providers.simulated --port P --state DIR
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hmac
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mainboard.errors import SimulatedApiAnswer, UserError

from . import netns
from .base import check_public_key

_F = dict[str, Any]
OFFERS: tuple[_F, ...] = tuple(
    {"id": oid, "gpu_name": gpu, "num_gpus": n, "gpu_ram": vram, "dph_total": price,
     "cpu_cores_effective": cpus, "cpu_ram": ram, "geolocation": "SIM", "rentable": True,
     "rented": False, "verified": True, "external": False, "simulated": True}
    for oid, gpu, n, vram, price, cpus, ram in (
        (9001, "SIM RTX 4090", 1, 24564, 0.40, 8.0, 32000),
        (9002, "SIM RTX 4090", 2, 24564, 0.80, 16.0, 64000),
        (9003, "SIM A100 80GB", 1, 81920, 1.60, 16.0, 128000),
        (9004, "SIM H100 SXM", 1, 81559, 2.90, 24.0, 192000),
        (9005, "SIM H200", 1, 143771, 3.60, 32.0, 256000)))
_OPS = {"eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
        "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}
_QUERY_OPTIONS = {"order", "type", "limit", "allocated_storage", "disable_bundling"}


def _match(offer: _F, query: _F) -> bool:
    """Apply a vast search query (``{"field": {"op": value}}``) to one offer."""
    for field, condition in query.items():
        if field in _QUERY_OPTIONS:
            continue
        if not isinstance(condition, dict):
            raise SimulatedApiAnswer(400, "invalid_query", f"condition for {field!r} must be an object")
        for op, operand in condition.items():
            if op not in _OPS:
                raise SimulatedApiAnswer(400, "invalid_query", f"unknown operator {op!r} for {field!r}; "
                               f"valid: {', '.join(_OPS)}")
            if field not in offer:
                return False
            try:
                if not _OPS[op](offer[field], operand):
                    return False
            except TypeError as exc:
                raise SimulatedApiAnswer(400, "invalid_query", f"{field} {op} {operand!r}: {exc}") from None
    return True


class Store:
    """``state.json`` in the state directory, changed only inside a locked transaction."""

    def __init__(self, directory: Path, credit: float = 25.0) -> None:
        self.dir = directory
        self.path = directory / "state.json"
        directory.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            with self.transaction() as state:
                state.update({"simulation": True, "credit": credit, "next_id": 1,
                              "rentals": {}})

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_F]:
        """Lock, load, let the caller change the dict, write it back atomically."""
        with (self.dir / "state.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.path.read_text()) if self.path.exists() else {}
            yield state
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=1))
            os.replace(tmp, self.path)


def _spent(rental: _F, now: float) -> float:
    return rental["dph_total"] * ((rental["end"] or now) - rental["start"]) / 3600.0


def balance_of(state: _F, now: float | None = None) -> float:
    """Starting credit minus what every rental has cost so far."""
    now = time.time() if now is None else now
    return state["credit"] - sum(_spent(r, now) for r in state["rentals"].values())


def _instance(rental: _F) -> _F:
    """The vast-style instance record of a live rental."""
    sandbox = rental["sandbox"]
    up = netns.alive(sandbox.get("pid"))
    status = "loading" if not sandbox.get("pid") else "running" if up else "exited"
    return {"id": rental["id"], "actual_status": status,
            "intended_status": "running", "cur_state": "running", "label": rental["label"],
            "image_uuid": rental["image"], "gpu_name": rental["offer"]["gpu_name"],
            "num_gpus": rental["offer"]["num_gpus"], "dph_total": rental["dph_total"],
            "ssh_host": sandbox["ns_addr"] or None, "ssh_port": 22,
            "public_ipaddr": sandbox["ns_addr"] or None,
            "start_date": rental["start"], "hostname": sandbox["hostname"], "simulated": True,
            "status_msg": {"loading": "building the simulated machine", "running":
                           "simulated machine up", "exited": "sshd is not running"}[status]}


def _held(state: _F) -> set[int]:
    """Offers a live rental holds, when offers are exclusive (else none)."""
    if not state.get("exclusive_offers"):
        return set()
    return {r["offer"]["id"] for r in state["rentals"].values() if r["end"] is None}


def _destroy(rental: _F, now: float) -> None:
    """Tear the sandbox down and stop the clock (inside a transaction)."""
    if rental.get("sandbox"):
        netns.destroy(netns.Sandbox(**rental["sandbox"]))
        rental["sandbox"] = None
    rental["end"] = rental["end"] or now


class SimulatedProvider:
    """The simulated marketplace: API operations over the Store, served by ``serve``."""

    def __init__(self, state_dir: Path, *, api_key: str, credit: float = 25.0) -> None:
        if len(api_key) < 16:
            raise UserError("simulated provider: the API key must be at least 16 characters")
        self.store = Store(Path(state_dir), credit)
        self._api_key = api_key.encode()

    def authorised(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self._api_key)

    def _taken(self) -> set[int]:
        """Offers a live rental holds, when offers are exclusive (else none)."""
        with self.store.transaction() as state:
            return _held(state)

    def search(self, query: _F) -> list[_F]:
        taken = self._taken()
        found = [dict(o) for o in OFFERS if _match(o, query) and o["id"] not in taken]
        for field, direction in query.get("order") or []:
            found.sort(key=lambda o, f=field: o.get(f, 0), reverse=direction == "desc")
        return found[: int(query.get("limit") or len(found))]

    def record_user_data(self, offer_id: int, body: _F) -> None:
        """Keep each launch request as a real provider keeps an instance's user-data (its
        console and logs show it to anyone on the account): ``user-data.log``, a JSON line
        per request. What the client sends there must hold no secret."""
        line = json.dumps({"offer": offer_id, "time": time.time(), "request": body})
        with (self.store.dir / USER_DATA_LOG).open("a") as log:
            log.write(line + "\n")

    def create(self, offer_id: int, body: _F) -> _F:
        """Record the rental (state "loading") first, then build its machine outside the lock."""
        offer = next((o for o in OFFERS if o["id"] == offer_id), None)
        if offer is None:
            raise SimulatedApiAnswer(404, "no_such_ask", f"Instance type by id {offer_id} is not available.")
        self.record_user_data(offer_id, body)
        with self.store.transaction() as state:
            if offer_id in _held(state):
                raise SimulatedApiAnswer(404, "no_such_ask",
                               f"Instance type by id {offer_id} is not available.")
            if balance_of(state) < offer["dph_total"] / 60:
                raise SimulatedApiAnswer(402, "insufficient_credit", "not enough credit for a minute")
            rental_id = state["next_id"]
            state["next_id"] += 1
            sandbox = netns.plan(self.store.dir / "rentals" / str(rental_id),
                                 secrets.token_hex(4), f"sim-gpu-{rental_id}")
            state["rentals"][str(rental_id)] = {
                "id": rental_id, "offer": offer, "label": str(body.get("label") or ""),
                "image": str(body.get("image") or ""), "dph_total": offer["dph_total"],
                "start": time.time(), "end": None, "sandbox": sandbox.to_dict()}
        try:
            netns.create(sandbox)
            netns.start_sshd(sandbox)
        except BaseException:
            netns.destroy(sandbox)
            with self.store.transaction() as state:
                state["rentals"].pop(str(rental_id), None)  # never billed: it never ran
            raise
        with self.store.transaction() as state:
            rental = state["rentals"].get(str(rental_id))
            if rental is None or rental["end"] is not None:  # destroyed while loading
                netns.destroy(sandbox)
                raise SimulatedApiAnswer(409, "destroyed", f"Instance {rental_id} was destroyed while "
                               "it was being created.")
            rental["sandbox"] = sandbox.to_dict()
        return {"success": True, "new_contract": rental_id}

    def _live(self, state: _F, rental_id: int) -> _F:
        rental = state["rentals"].get(str(rental_id))
        if rental is None or rental["end"] is not None:
            raise SimulatedApiAnswer(404, "no_such_instance", f"Instance {rental_id} not found.")
        return rental

    def attach(self, rental_id: int, body: _F) -> _F:
        try:
            key = check_public_key(str(body.get("ssh_key") or ""))
        except UserError as exc:
            raise SimulatedApiAnswer(400, "invalid_ssh_key", str(exc)) from None
        with self.store.transaction() as state:
            netns.authorize(netns.Sandbox(**self._live(state, rental_id)["sandbox"]), key)
        return {"success": True, "msg": "ssh key attached"}

    def show(self, rental_id: int) -> _F:
        with self.store.transaction() as state:
            return {"instances": _instance(self._live(state, rental_id))}

    def list(self) -> _F:
        with self.store.transaction() as state:
            return {"instances": [_instance(r) for r in state["rentals"].values()
                                  if r["end"] is None]}

    def destroy(self, rental_id: int) -> _F:
        with self.store.transaction() as state:
            _destroy(self._live(state, rental_id), time.time())
        return {"success": True}

    def user(self) -> _F:
        with self.store.transaction() as state:
            return {"id": 1, "username": "simulated", "email": "simulated@localhost",
                    "credit": round(balance_of(state), 6), "balance": 0.0, "simulated": True,
                    "api_key": self._api_key.decode()}  # vast echoes the key; clients drop it


def cleanup_all(state_dir: Path) -> list[int]:
    """Destroy every live rental recorded under ``state_dir`` (e.g. after a server crash)."""
    path = Path(state_dir)
    if not (path / "state.json").exists():
        return []
    cleaned = []
    with Store(path).transaction() as state:
        for rental in state["rentals"].values():
            if rental.get("sandbox"):
                _destroy(rental, time.time())
                cleaned.append(rental["id"])
    return cleaned


_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (method, re.compile(rf"/api/v0{pattern}/?\Z"), op) for method, pattern, op in (
        ("POST", r"/bundles", "search"), ("GET", r"/bundles", "search"),
        ("PUT", r"/asks/(\d+)", "create"), ("GET", r"/instances", "list"),
        ("GET", r"/instances/(\d+)", "show"), ("DELETE", r"/instances/(\d+)", "destroy"),
        ("POST", r"/instances/(\d+)/ssh", "attach"), ("GET", r"/users/current", "user")))
USER_DATA_LOG = "user-data.log"
_KEY_IN_QUERY = re.compile(r"(api_key=)[^&\s]*")


class _Handler(BaseHTTPRequestHandler):
    """Routes vast-shaped requests to the provider; answers JSON, logs without secrets."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def _answer(self, code: int, body: _F) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _dispatch(self) -> None:
        path, _, query = self.path.partition("?")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization", "")
        presented = auth[7:] if auth.startswith("Bearer ") else params.get("api_key")
        provider = self.server.provider
        try:
            if not provider.authorised(presented):
                raise SimulatedApiAnswer(401, "auth_error", "Invalid user key")
            body = json.loads(raw) if raw.strip() else {}
            for method, pattern, op in _ROUTES:
                found = pattern.match(path)
                if method == self.command and found:
                    args = [int(g) for g in found.groups()]
                    if op == "search":
                        q = body if self.command == "POST" else json.loads(params.get("q", "{}"))
                        self._answer(200, {"offers": provider.search(q)})
                    elif op in ("create", "attach"):
                        self._answer(200, getattr(provider, op)(*args, body))
                    else:
                        self._answer(200, getattr(provider, op)(*args))
                    return
            raise SimulatedApiAnswer(404, "not_found", f"no route {self.command} {path}")
        except SimulatedApiAnswer as exc:
            self._answer(exc.code, {"success": False, "error": exc.error, "msg": exc.msg})
        except (json.JSONDecodeError, ValueError) as exc:
            self._answer(400, {"success": False, "error": "bad_request", "msg": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a simulator answers 500 like a real API
            self._answer(500, {"success": False, "error": "server_error",
                               "msg": f"{type(exc).__name__}: {exc}"})

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        text = _KEY_IN_QUERY.sub(r"\1***", format % args)
        sys.stderr.write(f"simulated-provider {self.address_string()} {text}\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], provider: SimulatedProvider) -> None:
        super().__init__(address, _Handler)
        self.provider = provider


def serve(provider: SimulatedProvider, port: int = 0) -> _Server:
    """Serve ``provider`` on 127.0.0.1 in a daemon thread; ``server_address[1]`` is the port."""
    server = _Server(("127.0.0.1", port), provider)
    threading.Thread(target=server.serve_forever, name="simulated-provider", daemon=True).start()
    return server


def _read_or_make_key(path: Path) -> str:
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(24) + "\n")
    return path.read_text().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mainboard.bridges.providers.simulated",
        description="SIMULATED GPU provider (a local simulation, not a real marketplace): a "
                    "vast.ai-shaped REST API on 127.0.0.1 whose rentals are network namespaces "
                    "running sshd. Needs root, ip and sshd.")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any)")
    parser.add_argument("--state", type=Path, required=True,
                        help="state directory (state.json, rentals, the API key file)")
    parser.add_argument("--api-key-file", type=Path,
                        help="file holding the API key (default STATE/api_key, made if missing)")
    parser.add_argument("--credit", type=float, default=25.0,
                        help="starting fake credit in USD for a new state directory")
    parser.add_argument("--cleanup", action="store_true",
                        help="destroy every simulated rental recorded in STATE and exit")
    args = parser.parse_args(argv)
    args.state.mkdir(parents=True, exist_ok=True)
    if args.cleanup:
        print(f"simulated provider: destroyed rentals {cleanup_all(args.state)}")
        return 0
    key = _read_or_make_key(args.api_key_file or args.state / "api_key")
    server = serve(SimulatedProvider(args.state, api_key=key, credit=args.credit), args.port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"SIMULATED provider listening on http://127.0.0.1:{server.server_address[1]} "
          f"(API key in {args.api_key_file or args.state / 'api_key'})", flush=True)
    stop.wait()
    server.shutdown()
    cleanup_all(args.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
