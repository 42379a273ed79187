"""A private nginx for tests: its own config, port, pid and logs in a temporary directory,
started without root (``-p PREFIX -c CONF``), proxying one path prefix to a local server
as a reverse proxy in front of the dashboard would."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.services import free_port, require, wait_port

CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
http {{
  access_log {dir}/access.log;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location {prefix} {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_set_header Host $http_host;
      proxy_buffering off;
    }}
    location / {{ return 404; }}
  }}
}}
"""


@dataclass
class Nginx:
    """A running nginx: where it listens and its access log (one line per request)."""

    port: int
    dir: Path
    proc: subprocess.Popen[bytes] = field(repr=False)

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def requests(self) -> list[tuple[str, int]]:
        """(path, status) of every request so far, in order."""
        found = []
        for line in self.access_log.read_text().splitlines():
            request = line.split('"')[1].split()  # "GET /board/ HTTP/1.1"
            status = int(line.split('"')[2].split()[0])
            found.append((request[1], status))
        return found

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGQUIT)  # graceful: the master takes its workers
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start_nginx(directory: Path, prefix: str, upstream: int) -> Nginx:
    """nginx on a free port, forwarding ``prefix`` unchanged to 127.0.0.1:``upstream``."""
    binary = require("nginx", "apt-get install nginx (scripts/bootstrap test installs it)")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = directory / "nginx.conf"
    conf.write_text(CONF.format(dir=directory, port=port, prefix=prefix, upstream=upstream))
    proc = subprocess.Popen([binary, "-p", str(directory), "-c", str(conf),
                             "-e", str(directory / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port("127.0.0.1", port)
    except TimeoutError:
        proc.kill()
        raise AssertionError(f"nginx did not listen: {(directory / 'error.log').read_text()}"
                             ) from None
    return Nginx(port, directory, proc)
