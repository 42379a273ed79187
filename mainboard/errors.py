"""Every error mainboard raises on purpose, in one hierarchy.

User errors (bad input) exit with code 2 and print one line; the CLI adds a
traceback only under ``--debug``. Messages name the offending file, key or value
and say what is valid. Infrastructure that stayed down exits 3; anything else 1.
Every class keeps a one-line docstring; ``first_line`` is the one way to show an
error in one line (a table row, a receipt, a report).

Error hierarchy (exit code in brackets; ``+ValueError``: also a ValueError, why at the class)::

    MainboardError [1]
     ├── UserError [2]
     │    ├── ConfigError
     │    │    ├── NotPositive
     │    │    ├── ConfigNotFound
     │    │    └── ExpressionError
     │    ├── SpecError (+ValueError)
     │    ├── UnknownHost, UnknownJob, AmbiguousJob, UnknownRun, UnknownBatch
     │    ├── MissingDependency, InterpreterUnavailable, PinNotMet
     │    ├── RunNotRunning, RunIsRunning, QueuePolicyError, NoHostFits, StudyError
     │    ├── BatchError, MergeError
     │    └── OfferNotFound, PriceLimitExceeded (also ProviderError)
     ├── HostError
     │    ├── JobCapReached, HostUnreachable, AuthFailed, HostKeyMismatch
     │    └── MirrorError, FleetSyncError, TunnelError
     ├── CommandFailed
     │    └── CommandTimeout
     ├── BrokerError
     │    ├── SentinelsDown [3], BrokerLost [3]
     │    └── BrokerRestarted [3]
     ├── ProviderError
     │    ├── ProviderAuthFailed, ProviderHttpError, SimulatedApiAnswer, SandboxError
     │    └── OfferNotFound, PriceLimitExceeded (also UserError)
     ├── ProcessError
     │    ├── ProcessProtocolError, ProcessTimeout, ProcessCrashed, ProcessRemoteError
     │    └── StreamClosed, DeadlineExceeded
     ├── IntegrationFailed, LostBatch, TimeNeedUnmet, WaitTimedOut
     ├── CodecError (+ValueError)
     ├── FactsError, BuildError, ReceiptError
     └── SupervisorError, FlowerError

Not here, on purpose (``tests/repo/test_architecture.py`` names them): control-flow signals that
are never errors (``tasks/steering.Halt``, ``tasks/context.Skip``, ``supervisor/up._Interrupted``),
a warning category (``integrators/gammaboard.IgnoredKeys``) and ``bridges/provision_driver``'s
``Unavailable``, raised on a host by a stdlib-only script that never imports mainboard.

Errors that cross processes (Celery results) keep their constructor arguments in ``args``
so they are rebuilt as ``cls(*args)`` on the other side.
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


# --------------------------------------------------------------------------- moved into
# the one tree from the rooms that raise them (each room imports it from here)


# Also a ValueError: raised inside pydantic validators, which turn only ValueError (and
# AssertionError) into the ValidationError that names the field.
class SpecError(UserError, ValueError):
    """A run file's cross-field check failed; ``key`` is the dotted path to blame."""

    def __init__(self, key: str, message: str, value: Any = None, valid: str | None = None
                 ) -> None:
        super().__init__(message)
        self.key, self.value, self.valid = key, value, valid


class UnknownJob(UserError):
    """No job (or more than one) matches the id or id suffix the user gave."""


class AmbiguousJob(UserError):
    """A scheduler's id that jobs on several hosts were given (two clusters number alike)."""


class UnknownRun(UserError):
    """No run (or more than one) matches the id, id prefix or name the user gave."""


class UnknownBatch(UserError):
    """No batch (or more than one) matches the id or id suffix the user gave."""


class BatchError(UserError):
    """A batch broke the domain contract at a named stage (materialize, transform, evaluate, ...)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(stage, message)
        self.stage = stage
        self.message = message

    def __str__(self) -> str:
        return f"batch invalid after stage {self.stage!r}: {self.message}"


class MergeError(UserError):
    """Batch results cannot be merged: mixed iterations, duplicate or missing batch indices."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BrokerRestarted(BrokerError):
    """The broker answers as a new server (run_id changed): its last writes may be gone."""

    exit_code = 3


class ProviderHttpError(ProviderError):
    """A provider's HTTP error answer; ``code`` tells "unknown offer" from an outage."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class SimulatedApiAnswer(ProviderError):
    """The simulated provider's error answer: HTTP code and vast's ``error``/``msg`` fields."""

    def __init__(self, code: int, error: str, msg: str) -> None:
        super().__init__(msg)
        self.code, self.error, self.msg = code, error, msg


class SandboxError(ProviderError):
    """Building or tearing down a simulated machine (netns, veth, sshd) failed."""


class ProcessError(MainboardError):
    """An external process broke the protocol, a limit, or could not run: names the command."""

    def __init__(self, message: str, command: str = "", stderr_tail: str = "") -> None:
        super().__init__(message, command, stderr_tail)
        self.message, self.command, self.stderr_tail = message, command, stderr_tail

    def __str__(self) -> str:
        text = f"process `{self.command}`: {self.message}" if self.command else self.message
        if self.stderr_tail:
            text += f"\n--- process stderr (last lines) ---\n{self.stderr_tail}"
        return text


class ProcessProtocolError(ProcessError):
    """The process wrote something that is not a valid frame or response, or exceeded a limit."""


class ProcessTimeout(ProcessError):
    """The process did not answer within the per-request timeout and was killed."""


class ProcessCrashed(ProcessError):
    """The process exited (or closed its pipes) while the host waited for it."""

    def __init__(self, message: str, command: str = "", stderr_tail: str = "",
                 returncode: int | None = None) -> None:
        MainboardError.__init__(self, message, command, stderr_tail, returncode)
        self.message, self.command, self.stderr_tail = message, command, stderr_tail
        self.returncode = returncode


class ProcessRemoteError(ProcessError):
    """The process answered with a JSON-RPC error (an exception in user code): carries its traceback."""


class StreamClosed(ProcessError):
    """A pipe's far end closed (usually: the process exited); ``where`` says at which point."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.args = (where,)
        self.where = where


class DeadlineExceeded(ProcessError):
    """The request deadline passed while waiting on a pipe; ``where`` says at which point."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.args = (where,)
        self.where = where


class LostBatch(MainboardError):
    """A batch was lost more often than MAX_ATTEMPTS allows (its workers keep dying)."""


class TimeNeedUnmet(MainboardError):
    """A task no worker had the time for, given up after its bounded wait."""


# Also a ValueError: a value the wire cannot carry is a bad value to every caller that
# encodes or decodes (kombu's serializer registry among them), as before it moved here.
class CodecError(MainboardError, ValueError):
    """A value cannot be encoded by (or a payload decoded with) the mainboard codec."""


class BuildError(MainboardError):
    """The project's wheel could not be made from its pyproject.toml."""


class ReceiptError(MainboardError):
    """A receipt line could not be written or does not match its topic's model."""


class SupervisorError(MainboardError):
    """`mainboard up` could not start or keep its services running."""


class FlowerError(MainboardError):
    """Flower could not be started or stopped."""


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """An error in one line of at most ``limit`` characters: what a table row, a receipt or a
    one-line report shows of it. A failed command is named with its exit code and the last
    line it printed (its own first line says neither); anything else gives its first line,
    or its type's name when it says nothing."""
    if isinstance(error, CommandFailed):
        last = (error.stderr.strip().splitlines() or error.stdout.strip().splitlines()
                or ["-"])[-1]
        command = error.command if len(error.command) <= 60 else error.command[:57] + "..."
        text = (f"command `{command}` failed on {error.host} with exit code "
                f"{error.returncode}: {last.strip()}")
        return text[:limit]
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:limit]
