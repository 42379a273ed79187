"""Stand-ins for the programs the facts probe asks on a host and this machine lacks.

No NVIDIA GPU, nvidia-smi or macOS can exist on the test machine, so these are
SIMULATIONS: shell scripts on a PATH of the test's own that print what the real program
prints, in its exact layout (sources named at each constant), and fail as it fails.
"""

from __future__ import annotations

from pathlib import Path

# nvidia-smi --query-gpu=name,memory.total,uuid,driver_version --format=csv,noheader,nounits
# Values from published real nvidia-smi output: names/UUIDs from an `nvidia-smi -L` listing of
# an 8x H100 node, 81559 MiB as nvidia-smi reports an H100 80GB, driver from a 535-series host.
RECORDED_CSV = (
    "NVIDIA H100 80GB HBM3, 81559, GPU-f75045e8-4d87-49d1-2eb9-39ec2baddf9b, 535.86.10\n"
    "NVIDIA H100 80GB HBM3, 81559, GPU-b91556d8-5215-d0ed-50b8-a88720e5b29c, 535.86.10\n")
# nvidia-smi's own message (exit 9) when the driver is not loaded.
DRIVER_DOWN = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.")
# `sysctl -n NAME` on a 16 GB, 10-core Apple M1 Pro under macOS 14; macOS's sysctl says
# "unknown oid" (exit 1) for a name it lacks.
MAC_SYSCTL = {"hw.memsize": "17179869184", "hw.physicalcpu": "10",
              "machdep.cpu.brand_string": "Apple M1 Pro"}


def fake_program(bin_dir: Path, name: str, body: str) -> Path:
    """An executable ``bin_dir/name`` running ``body`` under /bin/sh."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def fake_nvidia_smi(bin_dir: Path, query: list[str], body: str) -> Path:
    """nvidia-smi that refuses any arguments but the probe's ``query``, then runs ``body``."""
    expected = " ".join(query)
    return fake_program(bin_dir, "nvidia-smi",
                        f'[ "$*" = "{expected}" ] || {{ echo "unexpected args: $*" >&2; exit 2; }}\n'
                        + body)


def fake_mac_sysctl(bin_dir: Path) -> Path:
    """macOS's ``sysctl -n NAME`` for the names in ``MAC_SYSCTL``."""
    cases = "".join(f'  {name}) echo "{value}" ;;\n' for name, value in MAC_SYSCTL.items())
    return fake_program(bin_dir, "sysctl",
                        '[ "$1" = "-n" ] || exit 64\ncase "$2" in\n' + cases
                        + "  *) echo \"sysctl: unknown oid '$2'\" >&2; exit 1 ;;\nesac\n")
