"""Jobs on an ssh host: the detached-process bridge run over the host's SshTransport.

Everything (launch with nohup/setsid, pid and exit code under
``<root>/.mainboard/jobs/<uid>/`` on the host, status, cancel, logs) is the local
bridge's logic; only the transport differs, so a job keeps running when the ssh
connection or the submitting process goes away.
"""

from __future__ import annotations

from .local import ProcessBridge


class RemoteBridge(ProcessBridge):
    """Detached jobs on an ssh host; the root defaults to ``~/mainboard`` there."""

    kind = "ssh"


class RentalBridge(ProcessBridge):
    """Detached jobs on a provider host's rented machine, over the rental's SshTransport."""

    kind = "provider"
