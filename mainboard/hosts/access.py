"""Reaching the hosts of mainboard.toml: run commands and copy files in each host's root.

``Hosts(config=...).on("gpu-box").run(cmd)`` runs in that host's ``root`` over ssh when the
host is remote; ssh connections are pooled per route across the process. An ssh host's
``host`` may be an alias of ``~/.ssh/config`` (or ``$MAINBOARD_SSH_CONFIG``): keys written
in mainboard.toml win, the ssh config fills the others (HostName, User, Port,
IdentityFile, ProxyJump...), as ``ssh alias`` would.
This is everything the :class:`mainboard.Board` facade does except submitting jobs and
mirroring the workspace (``hosts/mirror.py`` builds on this module), so the rooms below the
facade (jobs, batch, fleet) can reach hosts without importing it.
"""

from __future__ import annotations

import os
import posixpath
import sys
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Self

from mainboard.bridges.envs import backend_for, env_declared, in_env
from mainboard.bridges.provision import ProvisionedEnv
from mainboard.bridges.ssh import SshTransport
from mainboard.bridges.transport import Command, Completed, LocalTransport, StreamSink, Transport
from mainboard.config import Config, HostConfig, ProviderHost, load_config


class Host:
    """One declared host: run commands and copy files in its root directory."""

    def __init__(self, board: Hosts, name: str, config: HostConfig) -> None:
        self.board, self.name, self.config = board, name, config
        self._transport: Transport | None = None
        self._env: ProvisionedEnv | None = None
        self._lock = threading.Lock()

    @property
    def remote(self) -> bool:
        """True when the host is another machine: ssh, batch with login = "ssh", provider."""
        return self.config.ssh_params() is not None or isinstance(self.config, ProviderHost)

    @property
    def transport(self) -> Transport:
        """The transport for this host, made on first use (no connection until a command).

        A provider host's is its live rental's, rented (and waited for) when it has none.
        """
        return self.reach(rent=True)

    @property
    def opened(self) -> Transport | None:
        """The transport if one was made already (a provider host: if it is rented here)."""
        return self._transport

    def reach(self, *, rent: bool) -> Transport:
        """The transport; ``rent=False`` (asking about work already sent) never rents:
        a provider host without a live rental raises HostError instead."""
        with self._lock:
            if self._transport is None:
                self._transport = self._make_transport(rent)
            return self._transport

    def _make_transport(self, rent: bool) -> Transport:
        if isinstance(self.config, ProviderHost):
            # lazy: start-up time, rentals (leases, facts, rates, the provider bridge) only
            # for a provider host
            from mainboard.hosts.rentals import provider_transport

            return provider_transport(self.board.config, self.name, self.config, self.root,
                                      rent=rent)
        params = self.config.ssh_params()
        if params is None:
            return LocalTransport(self.name)
        # Relative identity/known_hosts paths mean "next to mainboard.toml", not the cwd.
        base = self.board.config.root
        if params.identity and not os.path.isabs(params.identity):
            params = replace(params, identity=str(base / params.identity))
        if not os.path.isabs(params.known_hosts):
            params = replace(params, known_hosts=str(base / params.known_hosts))
        # Keys written in mainboard.toml win; ~/.ssh/config fills the rest (an alias resolves).
        return SshTransport.from_params(params, self.name, given=self.config.model_fields_set)

    @property
    def root(self) -> str:
        """The host's workspace directory: absolute locally; may start with ``~`` remotely."""
        root = self.config.root
        if self.remote:
            return root or "~/mainboard"
        if root is None:
            return str(self.board.config.root)
        return str(self.board.config.root / Path(root).expanduser())

    def path(self, relative: str | os.PathLike[str]) -> str:
        """``relative`` inside the host's root (an absolute path is kept as-is)."""
        if self.remote:
            return posixpath.join(self.root, os.fspath(relative))
        return str(Path(self.root) / Path(relative).expanduser())

    def run(self, command: Command, *, check: bool = False, timeout: float | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            stream: bool | StreamSink = False, stdin: bytes | None = None) -> Completed:
        """Run ``command`` in the host's root (or ``cwd`` inside it) with the host's env added.

        A str is shell text run as-is by the host's shell; a list is an argv, quoted.
        When the workspace declares ``[deps] python`` or ``[python.deps]`` the command runs
        inside that environment, provisioned on first use (see ``environment``).
        ``check=True`` raises CommandFailed; ``stream=True`` prints output as it arrives.
        """
        built = self.environment(stream=stream)
        if built is not None:
            command = in_env(command, built.env_dir)
        return self.transport.run(
            command, check=check, timeout=timeout, env={**self.config.env, **(env or {})},
            cwd=self.path(cwd) if cwd is not None else self.root, stdin=stdin, stream=stream)

    def environment(self, stream: bool | StreamSink = False) -> ProvisionedEnv | None:
        """The workspace's declared environment on this host, built when missing (reused by
        its key otherwise: one round trip, once per handle); None when nothing is declared."""
        config = self.board.config
        if not env_declared(config):
            return None
        if self._env is None:
            self._env = backend_for(config).build(config, self.name, self.transport,
                                                  self.root, stream=_progress_only(stream))
        return self._env

    def put(self, local: str | os.PathLike[str], remote: str | os.PathLike[str]) -> str:
        """Copy a local file to ``remote`` (relative to the host root); returns that path."""
        target = self.path(remote)
        self.transport.put(local, target)
        return target

    def get(self, remote: str | os.PathLike[str], local: str | os.PathLike[str]) -> Path:
        """Copy ``remote`` (relative to the host root) to the local file ``local``."""
        self.transport.get(self.path(remote), local)
        return Path(local)

    def close(self) -> None:
        """Let go of this host's connection (the last user of a pooled one closes it)."""
        with self._lock:
            if self._transport is not None:
                self._transport.close()
                self._transport = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} kind={self.config.kind} root={self.root!r}>"


class Hosts:
    """mainboard.toml made usable: ``run`` here, ``on(name).run`` there, ``close`` when done.

    ``config`` (an already loaded Config) skips finding and loading mainboard.toml.
    """

    handle_type: type[Host] = Host

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 config: Config | None = None) -> None:
        self.config: Config = config or load_config(None if path is None else Path(path))
        self._handles: dict[str, Host] = {}
        self._lock = threading.Lock()

    def on(self, name: str) -> Host:
        """The named host; UnknownHost (listing the declared ones) when it is not declared."""
        with self._lock:
            if name not in self._handles:
                self._handles[name] = self.handle_type(self, name, self.config.host(name))
            return self._handles[name]

    def run(self, command: Command, *, check: bool = False, timeout: float | None = None,
            env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
            stream: bool | StreamSink = False, stdin: bytes | None = None) -> Completed:
        """Run ``command`` on this machine in the workspace root (see Host.run)."""
        return self.on("local").run(command, check=check, timeout=timeout, env=env, cwd=cwd,
                                    stream=stream, stdin=stdin)

    @property
    def hosts(self) -> list[str]:
        """Every host name: "local" first, then the declared ones in file order."""
        return self.config.host_names()

    def close(self) -> None:
        """Close every transport opened here."""
        with self._lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.config.path or 'no mainboard.toml'} hosts={self.hosts}>"


def _progress_only(stream: bool | StreamSink) -> bool | StreamSink:
    """Provisioning shows its progress (stderr) where the command's output goes; its stdout
    is the driver's result line, not the user's."""
    if stream is False:
        return False
    if stream is True:
        return lambda name, text: print(text, end="", file=sys.stderr, flush=True) \
            if name == "stderr" else None
    return lambda name, text: stream(name, text) if name == "stderr" else None
