"""A submit's lease on a provider host's job rentals, as the monitor reads them."""

from __future__ import annotations

import time
from pathlib import Path

from mainboard.hosts.leases import LEASES, holding, leased_hosts


def test_a_lease_holds_its_host_until_dropped_or_expired(tmp_path: Path) -> None:
    assert leased_hosts(tmp_path) == set()  # no lease was ever taken here
    with holding(tmp_path, "gpu", ttl=60) as lease:
        assert leased_hosts(tmp_path) == {"gpu"}
        assert leased_hosts(tmp_path, now=lease.expires + 1) == set()  # expired: removed
        assert not lease.path.exists()
        lease.renew(60)  # a live submit's next phase writes it again
        assert leased_hosts(tmp_path) == {"gpu"}
    assert leased_hosts(tmp_path) == set() and not lease.path.exists()


def test_an_unreadable_lease_protects_nothing_and_a_vanished_one_is_skipped(
        tmp_path: Path) -> None:
    folder = tmp_path / LEASES
    folder.mkdir()
    (folder / "torn.json").write_text('{"host": "gpu", "exp')  # a crash mid-write
    (folder / "old.json").write_text('{"host": "gpu"}')  # no expiry
    # a lease dropped between the listing and the read: its name still listed, no file
    (folder / "gone.json").symlink_to(folder / "dropped.json")
    with holding(tmp_path, "cpu", ttl=60):
        assert leased_hosts(tmp_path, now=time.time()) == {"cpu"}
    assert sorted(p.name for p in folder.iterdir()) == ["gone.json"]
