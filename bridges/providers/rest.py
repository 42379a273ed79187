"""REST adapter for the vast.ai-style GPU marketplace API (stdlib urllib, no dependency).

Request and response shapes follow the public vast.ai REST API (``/api/v0``):
``POST /bundles/`` searches offers with a JSON query (``{"gpu_name": {"eq": ...},
"dph_total": {"lte": ...}, "order": [...]}``) and answers ``{"offers": [...]}``;
``PUT /asks/{id}/`` rents an offer and answers ``{"success": true, "new_contract": N}``;
``POST /instances/{id}/ssh/`` attaches a public key; ``GET /instances/{id}/`` answers
``{"instances": {...}}`` with ``actual_status``, ``ssh_host``, ``ssh_port``,
``dph_total``; ``DELETE /instances/{id}/`` destroys; ``GET /users/current`` carries the
credit. Sizes are in MB as the API sends them. The key travels only in the
``Authorization: Bearer`` header (never in a URL), redirects are refused so the header
cannot follow them elsewhere, and plain http is accepted only for a loopback API (the
simulated provider). The key is never logged and is scrubbed from any error text.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from mainboard.errors import (
    ConfigError,
    OfferNotFound,
    ProviderAuthFailed,
    ProviderError,
    ProviderHttpError,
    UserError,
)

from .base import Offer, ProviderAdapter, Rental, RentalState, check_public_key

log = logging.getLogger("mainboard.providers")

VAST_URL = "https://console.vast.ai"
DEFAULT_IMAGE = "vastai/base-image:@vastai-automatic-tag"
_STATES: dict[str | None, RentalState] = {
    None: "pending", "created": "pending", "loading": "pending", "scheduling": "pending",
    "running": "running", "stopped": "stopped", "frozen": "stopped", "exited": "failed",
    "offline": "failed", "rebooting": "pending", "unknown": "unknown", "destroyed": "destroyed",
}
_RETRY = (429, 500, 502, 503, 504)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would replay the Authorization header to the new location."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def check_api_url(url: str, provider: str) -> str:
    """An https URL, or http on loopback only: the bearer key must not cross a network in clear."""
    parsed = urllib.parse.urlsplit(url)
    key = f"providers.{provider}.api_url"
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError("not an http(s) URL", key=key, value=url,
                          valid="https://HOST[:PORT] (http only on 127.0.0.1/localhost)")
    if parsed.scheme == "http":
        host = parsed.hostname
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError("plain http would send the API key in clear", key=key, value=url,
                              valid="an https:// URL (http only on 127.0.0.1/localhost)")
    return url.rstrip("/")


class RestProvider(ProviderAdapter):
    """A vast.ai-shaped marketplace at ``api_url``; the key is read from ``api_key_env``."""

    def __init__(self, name: str, *, api_url: str | None, api_key_env: str | None,
                 image: str | None = None, region: str | None = None, timeout: float = 30.0,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(name)
        if not api_key_env:
            raise ConfigError("no api_key_env: give the NAME of the environment variable that "
                              "holds the API key", key=f"providers.{name}.api_key_env",
                              valid="an environment variable name, e.g. VAST_API_KEY")
        self.api_url = check_api_url(api_url or VAST_URL, name)
        self.api_key_env = api_key_env
        self.image, self.region, self.timeout = image, region, timeout
        self.attempts = 3  # for GET/DELETE (idempotent); a quick listing asks once
        self._env = env if env is not None else os.environ

    def __repr__(self) -> str:
        return f"RestProvider({self.name!r}, api_url={self.api_url!r}, env={self.api_key_env})"

    # -- HTTP ---------------------------------------------------------------------------------

    def _key(self) -> str:
        key = self._env.get(self.api_key_env, "")
        if not key.strip():
            raise ProviderAuthFailed(f"provider {self.name}: environment variable "
                                     f"{self.api_key_env} is not set; export your API key in it")
        return key.strip()

    def _scrub(self, text: str) -> str:
        key = self._env.get(self.api_key_env, "").strip()
        return text.replace(key, "***") if key else text

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 query: dict[str, str] | None = None, missing_ok: bool = False
                 ) -> dict[str, Any] | None:
        """One API call; JSON in and out. ``missing_ok`` turns a 404 into None."""
        url = f"{self.api_url}/api/v0{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        attempts = self.attempts if method in ("GET", "DELETE") else 1
        for attempt in range(1, attempts + 1):
            request = urllib.request.Request(url, data=data, method=method, headers={
                "Authorization": f"Bearer {self._key()}", "Accept": "application/json",
                "Content-Type": "application/json", "User-Agent": "mainboard"})
            try:
                with _OPENER.open(request, timeout=self.timeout) as response:
                    raw = response.read()
                    log.debug("provider %s: %s %s -> %s", self.name, method, path, response.status)
                    break
            except urllib.error.HTTPError as exc:
                log.debug("provider %s: %s %s -> %s", self.name, method, path, exc.code)
                if exc.code in _RETRY and attempt < attempts:
                    time.sleep(0.5 * attempt)
                    continue
                detail = self._error_detail(exc)
                if exc.code in (401, 403):
                    raise ProviderAuthFailed(
                        f"credentials refused for provider {self.name} (env var "
                        f"{self.api_key_env}): HTTP {exc.code}; check the key in "
                        f"{self.api_key_env}") from None
                if exc.code == 404 and missing_ok:
                    return None
                if 300 <= exc.code < 400:
                    raise ProviderError(f"provider {self.name}: {method} {path} was redirected to "
                                        f"{exc.headers.get('Location')!r}; set api_url to the "
                                        "final address (redirects are refused)") from None
                raise self._http_error(method, path, exc.code, detail) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if attempt < attempts:
                    time.sleep(0.5 * attempt)
                    continue
                raise ProviderError(f"provider {self.name}: cannot reach {self.api_url} "
                                    f"({self._scrub(str(reason))})") from None
        try:
            decoded = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            raise ProviderError(f"provider {self.name}: {method} {path} answered non-JSON: "
                                f"{self._scrub(raw[:200].decode('utf-8', 'replace'))!r}") from None
        if not isinstance(decoded, dict):
            raise ProviderError(f"provider {self.name}: {method} {path} answered "
                                f"{type(decoded).__name__}, expected a JSON object")
        return decoded

    def _error_detail(self, exc: urllib.error.HTTPError) -> dict[str, Any]:
        try:
            detail = json.loads(exc.read() or b"{}")
        except (json.JSONDecodeError, OSError):
            return {}
        return detail if isinstance(detail, dict) else {}

    def _http_error(self, method: str, path: str, code: int, detail: dict[str, Any]
                    ) -> ProviderHttpError:
        msg = self._scrub(str(detail.get("msg") or detail.get("error") or "no detail"))[:300]
        return ProviderHttpError(f"provider {self.name}: {method} {path} failed with HTTP {code}: {msg}",
                          code)

    # -- adapter ------------------------------------------------------------------------------

    def _search(self, gpu: str | None, max_usd_hr: float | None) -> list[Offer]:
        query: dict[str, Any] = {"rentable": {"eq": True}, "rented": {"eq": False},
                                 "order": [["dph_total", "asc"]], "type": "on-demand",
                                 "limit": 200}
        if gpu:
            query["gpu_name"] = {"eq": gpu.replace("_", " ")}
        if max_usd_hr is not None:
            query["dph_total"] = {"lte": max_usd_hr}
        if self.region:
            query["geolocation"] = {"eq": self.region}
        answer = self._request("POST", "/bundles/", query) or {}
        rows = answer.get("offers")
        if not isinstance(rows, list):
            raise ProviderError(f"provider {self.name}: offer search answered without an "
                                "'offers' list")
        return [self._offer(row) for row in rows]

    def _offer(self, row: Any) -> Offer:
        try:
            return Offer(id=str(int(row["id"])), gpu=str(row["gpu_name"]),
                         gpu_count=int(row["num_gpus"]), vram_gb=float(row["gpu_ram"]) / 1000,
                         usd_hr=float(row["dph_total"]),
                         cpus=float(row.get("cpu_cores_effective") or row.get("cpu_cores") or 0),
                         ram_gb=float(row.get("cpu_ram") or 0) / 1000,
                         region=row.get("geolocation"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(f"provider {self.name}: malformed offer in search answer "
                                f"({type(exc).__name__}: {exc})") from None

    def _rental(self, row: Any) -> Rental:
        try:
            status = row.get("actual_status")
            port = row.get("ssh_port")
            return Rental(id=str(int(row["id"])), state=_STATES.get(status, "unknown"),
                          ssh_host=row.get("ssh_host") or None,
                          ssh_port=int(port) if port else None,
                          ssh_user=str(row.get("ssh_user") or "root"),
                          usd_hr=float(row.get("dph_total") or 0.0), label=row.get("label"),
                          started_at=row.get("start_date"), message=row.get("status_msg"))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ProviderError(f"provider {self.name}: malformed instance in answer "
                                f"({type(exc).__name__}: {exc})") from None

    def rent(self, offer_id: str, *, ssh_public_key: str, label: str,
             image: str | None = None) -> Rental:
        key_line = check_public_key(ssh_public_key)
        if not str(offer_id).isdigit():
            raise OfferNotFound(f"provider {self.name}: offer id {offer_id!r} is not valid; "
                                "valid: the numeric id of an entry of offers()")
        body = {"client_id": "me", "image": image or self.image or DEFAULT_IMAGE,
                "label": label, "disk": 16, "runtype": "ssh_direct"}
        try:
            answer = self._request("PUT", f"/asks/{offer_id}/", body) or {}
        except ProviderHttpError as exc:
            if exc.code in (404, 410):
                raise OfferNotFound(f"provider {self.name}: offer {offer_id} is not available "
                                    "(unknown or already rented); pick an id from offers()"
                                    ) from None
            raise
        if not answer.get("success") or answer.get("new_contract") is None:
            raise ProviderError(f"provider {self.name}: renting offer {offer_id} failed: "
                                f"{self._scrub(str(answer.get('msg') or answer))[:300]}")
        rental_id = str(answer["new_contract"])
        try:
            self._request("POST", self._rental_path(rental_id, "ssh/"), {"ssh_key": key_line})
            return self.status(rental_id)
        except BaseException as exc:
            try:
                self.destroy(rental_id)  # never leave a rental we cannot log into
            except Exception as undo:  # noqa: BLE001 - report both, raise the first
                exc.add_note(f"and destroying rental {rental_id} failed too: {undo}")
            raise

    def _rental_path(self, rental_id: str, tail: str = "") -> str:
        """``/instances/ID/``; ids go into the URL, so only digits are accepted."""
        if not str(rental_id).isdigit():
            raise UserError(f"provider {self.name}: rental id {rental_id!r} is not valid; "
                            "valid: the numeric id rent() returned")
        return f"/instances/{rental_id}/{tail}"

    def status(self, rental_id: str) -> Rental:
        answer = self._request("GET", self._rental_path(rental_id), query={"owner": "me"},
                               missing_ok=True)
        row = (answer or {}).get("instances")
        if not row:
            return Rental(id=str(rental_id), state="destroyed", ssh_host=None, ssh_port=None,
                          ssh_user="root", usd_hr=0.0)
        return self._rental(row)

    def destroy(self, rental_id: str) -> None:
        self._request("DELETE", self._rental_path(rental_id), {}, missing_ok=True)

    def balance(self) -> float:
        answer = self._request("GET", "/users/current", query={"owner": "me"}) or {}
        answer.pop("api_key", None)  # vast echoes the key here: drop it at once
        try:
            return float(answer["credit"])
        except (KeyError, TypeError, ValueError):
            raise ProviderError(f"provider {self.name}: user answer has no numeric 'credit'"
                                ) from None

    def list_rentals(self, label_prefix: str | None = None) -> list[Rental]:
        answer = self._request("GET", "/instances/", query={"owner": "me"}) or {}
        rows = answer.get("instances")
        if not isinstance(rows, list):
            raise ProviderError(f"provider {self.name}: instance list answered without an "
                                "'instances' list")
        rentals = [self._rental(row) for row in rows]
        return [r for r in rentals
                if label_prefix is None or (r.label or "").startswith(label_prefix)]
