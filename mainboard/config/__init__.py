"""mainboard.toml: found like git finds a repo, validated into pydantic models. Import point.

``find_config`` walks up from the working directory (``MAINBOARD_CONFIG`` overrides);
``load_config`` parses it with the staged loader in ``mainboard.config.loader`` so that every
error is one line naming the file, the key path, the line, the bad value and what is valid.

Inheritance rule for ``[hosts.defaults]``: every key is copied into each host that does not
set it (tables such as ``env``, ``defaults`` and ``queues`` are merged key by key; the
host wins). Connection keys (user, port, identity, trust, known-hosts, connect-timeout,
python) are skipped for kinds that have no such connection (local, provider). Any other key
that a host's kind does not accept (e.g. ``partition`` for an ssh host) is an inheritance
conflict and an error naming both the default and the host; ``kind`` and ``host`` cannot
be inherited at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mainboard.config.base import JobDefaults, QueuePolicy
from mainboard.config.brokerurl import BROKER_URL_ENV
from mainboard.config.durations import (
    DURATION_FORMS,
    parse_duration,
    positive_duration,
)
from mainboard.config.hostkinds import (
    HOST_KINDS,
    HostConfig,
    LocalHost,
    PbsHost,
    ProviderHost,
    SlurmHost,
    SshHost,
    SshParams,
)
from mainboard.config.loader import CONNECTION_KEYS, Loader, describe_keys
from mainboard.config.models import (
    AUTO,
    BrokerConfig,
    Config,
    ContainerConfig,
    FleetConfig,
    PoolConfig,
    ProviderConfig,
    PythonConfig,
    RouterConfig,
    WorkspaceConfig,
)
from mainboard.errors import ConfigError, ConfigNotFound
from mainboard.redact import remember_secrets, url_secrets

__all__ = [
    "AUTO", "RouterConfig",
    "CONFIG_NAME", "CONNECTION_KEYS", "DURATION_FORMS", "HOST_KINDS", "BrokerConfig", "Config", "ContainerConfig",
    "FleetConfig", "HostConfig", "JobDefaults", "LocalHost", "PbsHost", "PoolConfig",
    "ProviderConfig", "ProviderHost",
    "PythonConfig", "QueuePolicy", "SlurmHost", "SshHost", "SshParams", "WorkspaceConfig",
    "describe_keys", "find_config", "load_config", "loads_config", "parse_duration",
    "positive_duration",
]

CONFIG_NAME = "mainboard.toml"
ENV_VAR = "MAINBOARD_CONFIG"


def find_config(start: Path | None = None) -> Path:
    """MAINBOARD_CONFIG if set, else the nearest mainboard.toml in ``start`` (cwd) or a parent."""
    override = os.environ.get(ENV_VAR)
    if override:
        return _explicit(Path(override), f"{ENV_VAR}={override}")
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    raise ConfigNotFound(
        f"no {CONFIG_NAME} in {here} or any parent directory",
        valid=f"create {here / CONFIG_NAME} (see deploy/mainboard.example.toml), "
              f"set {ENV_VAR}=/path/to/{CONFIG_NAME}, or pass --config")


def _explicit(path: Path, origin: str) -> Path:
    """A config path the user named: a file, or a directory holding mainboard.toml."""
    candidate = path / CONFIG_NAME if path.is_dir() else path
    if not candidate.is_file():
        raise ConfigNotFound(f"config file {candidate} does not exist (from {origin})",
                             file=str(candidate),
                             valid=f"the path of an existing {CONFIG_NAME}, or neither --config "
                                   f"nor {ENV_VAR} to search upwards from the working directory")
    return candidate.resolve()


def load_config(path: str | Path | None = None, *, required: bool = False) -> Config:
    """Load and validate mainboard.toml; without one (and not required) the implicit default."""
    if path is not None:
        file = _explicit(Path(path), "--config / MAINBOARD_CONFIG")
    else:
        try:
            file = find_config()
        except ConfigNotFound:
            if required or os.environ.get(ENV_VAR):
                raise
            return Config(path=None, root=Path.cwd())
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", file=str(file),
                          valid="a readable UTF-8 TOML file") from None
    return loads_config(text, file)


def loads_config(text: str, path: Path | None = None) -> Config:
    """Validate TOML text as if it were the file ``path`` (which sets Config.root).

    The workspace's secrets are handed to the one redaction (:func:`workspace_secrets`),
    so nothing this process prints or logs afterwards shows them, pattern or not.
    """
    config = Loader(text, path).load()
    remember_secrets(workspace_secrets(config))
    return config


def workspace_secrets(config: Config, env: Mapping[str, str] = os.environ) -> list[str]:
    """The exact secrets a workspace's process may come across: the broker URLs' passwords
    (mainboard.toml's and ``$MAINBOARD_BROKER_URL``'s) and each provider's API key, read
    from the variable its ``api_key_env`` names."""
    urls = (config.broker.url, config.broker.worker_url, env.get(BROKER_URL_ENV))
    found = [s for url in urls if url for s in url_secrets(url.strip())]
    keys = (env.get(p.api_key_env, "").strip() for p in config.providers.values()
            if p.api_key_env)
    return found + [k for k in keys if k]


