"""Pick the host for a job: every declared host scored by fit, price and time to result.

Fit: the host answers (one quick access check, all hosts at once), its queue policy and
``[hosts.X.defaults]`` accept the job (the same check a submit makes, on this machine),
and its facts show enough GPUs and memory (a job asking for GPUs is never sent where
no facts say there are any); a provider host fits when an offer does. Price: the
cheapest fitting offer (providers), an owned host's ``usd_hr`` (0 without one), at most
``[router] max_usd_hr``. Time to result: the host's setup p50 (queue wait included, as
this workspace's receipts measured it; plus the host's timed environment build when the
job's environment is not built there yet) plus the job's ``runtime_s``; a host nobody has
timed has no number and ranks after the timed ones, never on a guess. ``prefer = "time"``
(the default) ranks by time then price, ``"cost"`` by price then time; declaration order
breaks ties. Every candidate stays in the ``Decision``, the excluded with their reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mainboard.errors import NoHostFits, UserError, first_line
from mainboard.hosts.compute import host_access
from mainboard.hosts.rates import host_rate
from mainboard.jobs.job import bridge_of, store_of, submit
from mainboard.jobs.timing import (
    EnvBuild,
    Setup,
    env_build,
    env_builds,
    fit,
    setup_samples,
    with_env,
)
from mainboard.receipts import JobRouted

if TYPE_CHECKING:
    from mainboard.hosts.access import Hosts
    from mainboard.hosts.rates import Rate
    from mainboard.jobs.job import Job

__all__ = ["Candidate", "Decision", "NoHostFits", "rank", "submit_auto"]

ACCESS_TIMEOUT_S = 5.0
_GB = 1e9


@dataclass(frozen=True)
class Candidate:
    """One host as the router saw it; ``rank`` is None when it was excluded (``reason``)."""

    host: str
    kind: str
    fits: bool
    reason: str                     # why excluded, or where the rate came from
    usd_hr: float | None = None
    hardware: str = ""
    setup: Setup = field(default_factory=lambda: Setup(0))
    expected_s: float | None = None   # setup p50 + runtime_s
    expected_usd: float | None = None
    rank: int | None = None
    env: EnvBuild = EnvBuild("-")     # the environment to build first (included in setup)


@dataclass(frozen=True)
class Decision:
    """The ranking: every candidate, best first, then the excluded in declaration order."""

    prefer: str
    max_usd_hr: float | None
    asked: dict[str, Any]
    candidates: list[Candidate]

    @property
    def chosen(self) -> str | None:
        """The best fitting host, or None when none fits."""
        return next((c.host for c in self.candidates if c.fits), None)

    def as_json(self) -> dict[str, Any]:
        """What ``--json`` shows and ``job.routed`` records."""
        return {"prefer": self.prefer, "max_usd_hr": self.max_usd_hr, "chosen": self.chosen,
                "asked": self.asked, "candidates": [asdict(c) for c in self.candidates]}

    def refusal(self) -> NoHostFits:
        """The one-line error when nothing fits: each host and why."""
        why = "; ".join(f"{c.host}: {c.reason}" for c in self.candidates)
        return NoHostFits(f"no declared host fits this job ({why})")


def _fit(board: Hosts, name: str, asked: dict[str, Any], rate: Rate) -> str | None:
    """Why ``name`` cannot take the job (queue policy, GPUs, memory), or None."""
    host = board.config.host(name)
    if host.kind != "provider":
        try:
            bridge_of(board.on(name)).prepare(**{k: v for k, v in asked.items()
                                                 if v is not None and k != "runtime_s"})
        except UserError as exc:
            return f"queue policy: {first_line(exc)}"
        gpus, mem_gb, facts = asked.get("gpus") or 0, asked.get("mem_gb"), rate.facts
        if gpus and facts is None:
            return (f"asks {gpus} GPUs and no facts say {name} has any "
                    f"(mainboard facts --on {name})")
        if facts is not None and len(facts.gpus) < gpus:
            return f"asks {gpus} GPUs, facts show {len(facts.gpus)}"
        if mem_gb and facts is not None and facts.memory_total is not None \
                and facts.memory_total < mem_gb * _GB:
            return f"asks {mem_gb:g} GB, facts show {facts.memory_total / _GB:.1f} GB"
    if rate.usd_hr is None:
        return rate.source
    return None


def _only_root_missing(access: str, reason: str | None) -> bool:
    """A host whose only lack is its root folder is usable: the first submit creates it."""
    parts = (reason or "").split("; ")
    return access == "not-set-up" and all(p.startswith("root ") and p.endswith(" missing")
                                          for p in parts)


def _access(board: Hosts, names: list[str], timeout: float) -> dict[str, str | None]:
    """Per host: why it cannot be used now (unreachable, not set up...), or None."""
    config = board.config

    def check(name: str) -> str | None:
        found = host_access(board, name, config.host(name), config, timeout)
        if found.access in ("here", "ready") or _only_root_missing(found.access, found.reason):
            return None
        return found.access + (f" ({found.reason})" if found.reason else "")

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(names)))) as pool:
        return dict(zip(names, pool.map(check, names), strict=True))


def _score(c: Candidate, prefer: str, order: int) -> tuple[Any, ...]:
    """Sort key, lower is better: timed hosts before untimed ones (no guessed numbers)."""
    timed = (c.setup.p50_s is None, c.setup.p50_s or 0.0)
    price = c.usd_hr if c.usd_hr is not None else float("inf")
    return (*timed, price, order) if prefer == "time" else (price, *timed, order)


def rank(board: Hosts, *, walltime: int | str | None = None, gpus: int | None = None,
         mem_gb: float | None = None, cpus: int | None = None, queue: str | None = None,
         attempt: int = 1, runtime_s: float | None = None, name: str = "job",
         timeout: float = ACCESS_TIMEOUT_S) -> Decision:
    """Score every declared host for a job asking these resources; nothing is submitted."""
    config = board.config
    router = config.router
    asked = {"walltime": walltime, "gpus": gpus, "mem_gb": mem_gb, "cpus": cpus,
             "queue": queue, "attempt": attempt, "runtime_s": runtime_s}
    names = config.host_names()
    down = _access(board, names, timeout)
    samples = setup_samples(config.state_dir)
    builds = env_builds(config.state_dir)
    out: list[tuple[tuple[Any, ...], Candidate]] = []
    for order, host_name in enumerate(names):
        kind = config.host(host_name).kind
        if down[host_name] is not None:
            out.append(((), Candidate(host_name, kind, False, str(down[host_name]))))
            continue
        rate = host_rate(config, host_name, gpus=gpus, mem_gb=mem_gb)
        why = _fit(board, host_name, {**asked, "name": name, "command": "true"}, rate)
        if why is None and router.max_usd_hr is not None and rate.usd_hr is not None \
                and rate.usd_hr > router.max_usd_hr:
            why = f"{rate.usd_hr:.4f} USD/h is over [router] max_usd_hr = {router.max_usd_hr:g}"
        env = env_build(config, host_name, builds)
        setup = with_env(fit(samples.get(host_name, [])), env)
        expected_s = None if setup.p50_s is None else setup.p50_s + (runtime_s or 0.0)
        usd = None if expected_s is None or rate.usd_hr is None or runtime_s is None \
            else rate.usd_hr * expected_s / 3600
        found = Candidate(host_name, kind, why is None, why or rate.source, rate.usd_hr,
                          rate.hardware, setup, expected_s, usd, env=env)
        out.append((_score(found, router.prefer, order) if why is None else (), found))
    ranked = sorted((item for item in out if item[1].fits), key=lambda item: item[0])
    candidates = [replace(c, rank=i) for i, (_key, c) in enumerate(ranked, 1)]
    candidates += [c for _key, c in out if not c.fits]
    return Decision(router.prefer, router.max_usd_hr, asked, candidates)


RANKED = ("walltime", "gpus", "mem_gb", "cpus", "queue", "attempt", "name")  # submit options rank reads


def submit_auto(board: Hosts, cmd: str | Sequence[str], decision: Decision,
                **options: Any) -> Job:
    """Submit to the best host of ``decision`` (``jobs.submit`` options), record it there.

    Nothing is sent when no host fits (NoHostFits names each host and why). The ranking
    is written to the job's own receipts (``job.routed``) right after the host accepts it.
    """
    if decision.chosen is None:
        raise decision.refusal()
    job = submit(board, decision.chosen, cmd, **options)
    shown = decision.as_json()
    store_of(board).append(job.id, JobRouted(
        id=job.id, chosen=decision.chosen, prefer=decision.prefer,
        max_usd_hr=decision.max_usd_hr, asked=shown["asked"], candidates=shown["candidates"]))
    return job
