"""Every error mainboard raises on purpose, in one hierarchy.

User errors (bad input) exit with code 2 and print one line; the CLI adds a
traceback only under ``--debug``. Messages name the offending file, key or value
and say what is valid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mainboard.redact import redact_url


class MainboardError(Exception):
    """Base of every error mainboard raises on purpose."""

    exit_code: int = 1


class UserError(MainboardError):
    """Bad input from the user: exit code 2, one clear line with the fix."""

    exit_code = 2


class ConfigError(UserError):
    """A mainboard.toml (or run file) is invalid: names file, key path, line, value and what is valid."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        key: str | None = None,
        line: int | None = None,
        value: Any = None,
        valid: str | Iterable[str] | None = None,
    ) -> None:
        self.file, self.key, self.line, self.value = file, key, line, value
        self.valid = valid if valid is None or isinstance(valid, str) else ", ".join(valid)
        self.detail = message
        where = file or "<config>"
        if line is not None:
            where += f":{line}"
        parts = [where + ":"]
        if key:
            parts.append(f"{key}:")
        parts.append(message)
        if value is not None:  # a value may be a URL with its password: never shown
            parts.append(f"(got {redact_url(value) if isinstance(value, str) else value!r})")
        text = " ".join(parts)
        if self.valid:
            text += f"; valid: {self.valid}"
        super().__init__(text)


class NotPositive(ConfigError):
    """A well-formed number or duration that is zero or less (no list of forms would help)."""


class ConfigNotFound(ConfigError):
    """No mainboard.toml in the working directory or any parent, and MAINBOARD_CONFIG unset."""


class ExpressionError(ConfigError):
    """An expression or interpolation is malformed or uses something outside the whitelist."""


class UnknownHost(UserError):
    """A host name that mainboard.toml does not declare."""


class HostError(MainboardError):
    """A declared host could not be used."""


class JobCapReached(HostError):
    """A host's ``max_jobs`` is reached: wait for jobs to end (not a failed submission)."""


class HostUnreachable(HostError):
    """The host did not answer (DNS, refused, timeout)."""


class AuthFailed(HostError):
    """The host answered but refused our credentials."""


class HostKeyMismatch(HostError):
    """The host's key is unknown or differs from known_hosts: refused, possible interception."""


class CommandFailed(MainboardError):
    """A command run with check=True exited non-zero: shows command, code and stderr tail."""

    def __init__(self, command: str, returncode: int, stdout: str = "", stderr: str = "",
                 host: str = "local") -> None:
        self.command, self.returncode, self.stdout, self.stderr, self.host = (
            command, returncode, stdout, stderr, host)
        tail = "\n".join(stderr.rstrip().splitlines()[-10:])
        msg = f"command failed on {host} with exit code {returncode}: {command}"
        if tail:
            msg += f"\n--- stderr (last lines) ---\n{tail}"
        super().__init__(msg)


class BrokerError(MainboardError):
    """The broker (embedded or configured) could not be started, reached or stopped."""


class SentinelsDown(BrokerError):
    """No listed sentinel answered, or none knows the master: infrastructure down, exit 3."""

    exit_code = 3


class BrokerLost(BrokerError):
    """The broker stayed away longer than the outage budget; the run is resumable as it was."""

    exit_code = 3


class MissingDependency(UserError):
    """A program mainboard needs is not installed: the message says how to install it."""


class InterpreterUnavailable(UserError):
    """The declared [deps] python cannot be installed on a host: exit 2, nothing left half-built."""


class PinNotMet(UserError):
    """A host's python or tool does not satisfy a ``[deps]`` pin: refused before submitting."""


class FactsError(MainboardError):
    """The hardware probe failed or returned data that does not match the facts schema."""


class CommandTimeout(CommandFailed):
    """A command ran past its timeout and was killed: shows command, limit and output tail."""

    def __init__(self, command: str, timeout: float, stdout: str = "", stderr: str = "",
                 host: str = "local") -> None:
        super().__init__(command, 124, stdout, stderr, host)
        self.timeout = timeout
        tail = "\n".join(stderr.rstrip().splitlines()[-10:])
        msg = f"command timed out after {timeout:g}s on {host} and was killed: {command}"
        if tail:
            msg += f"\n--- stderr (last lines) ---\n{tail}"
        self.args = (msg,)


class IntegrationFailed(MainboardError):
    """A run stopped: a batch raised or kept getting lost; names the batch, stage and cause."""

    def __init__(self, message: str, *, batch: int | None = None,
                 stage: str | None = None) -> None:
        super().__init__(message)
        self.batch, self.stage = batch, stage


class RunNotRunning(UserError):
    """Pause or stop was asked of a run that no coordinator drives right now."""


class RunIsRunning(UserError):
    """Removing a run was refused: a coordinator drives it right now."""


class QueuePolicyError(UserError):
    """A job asks more than its queue allows (or names an unknown queue): refused before submit."""


class ProviderError(MainboardError):
    """A GPU rental provider's API failed, refused a request or answered something unusable."""


class ProviderAuthFailed(ProviderError):
    """The provider refused our API key (HTTP 401/403) or the key's environment variable is unset."""


class OfferNotFound(ProviderError, UserError):
    """The offer id is unknown to the provider or no longer rentable."""


class PriceLimitExceeded(ProviderError, UserError):
    """An offer costs more per hour than the host's max_usd_hr: refused before renting."""


class MirrorError(HostError):
    """Syncing the workspace mirror to a host failed; its manifest was left unchanged."""


class FleetSyncError(HostError):
    """A fleet host could not be given the workspace before a run (the run did not start)."""


class TunnelError(HostError):
    """A reverse ssh tunnel to a host could not be opened (remote port refused, no answer)."""


class WaitTimedOut(MainboardError):
    """``Job.wait(timeout=...)`` gave up before the job reached a final state (it keeps running)."""


class NoHostFits(UserError):
    """``--on auto``: no declared host fits the job; the message names each host and why."""


class StudyError(UserError):
    """A study file or study id that cannot be used as given."""


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first line of an error (its type's name when it says nothing), at most ``limit``
    characters: what a table row, a receipt or a one-line report shows of it."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:limit]
