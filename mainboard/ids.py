"""Ids of receipt-backed records (jobs, batches): their form and suffix resolution; safe words.

Both stores name records ``<time>-<name>-<hex>`` and let the user type any unique
suffix; one helper keeps the accepted form and the error wording the same for both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mainboard.errors import UserError

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class IdForm:
    """How one kind of record is named and listed, for checks and error messages."""

    kind: str            # "job"
    plural: str          # "jobs"
    example: str         # an id as the user would see it
    listing: str         # the command that lists the ids
    error: type[UserError]

    def check(self, value: str) -> str:
        """``value`` if it is a plain id (no slash, quote or dot-first), else ``error``."""
        if not ID.match(value):
            raise self.error(f"{value!r} is not a {self.kind} id; ids look like "
                             f"{self.example} (see `{self.listing}`)")
        return value

    def resolve(self, ref: str, ids: list[str], directory: Path) -> str:
        """The id ``ref`` names among ``ids``: an exact id, or a unique suffix (``1a2b3c``)."""
        if ref in ids:
            return ref
        found = [i for i in ids if ref and i.endswith(ref)]
        if len(found) == 1:
            return found[0]
        if not found:
            raise self.error(f"no {self.kind} {ref!r} in {directory}; `{self.listing}` shows "
                             f"the ids ({len(ids)} recorded)")
        raise self.error(f"{ref!r} matches {len(found)} {self.plural} "
                         f"({', '.join(found[:5])}); give more of the id")


def safe_word(text: str, limit: int = 40) -> str:
    """``text`` reduced to letters, digits and ``_.-`` (for node, queue and label names)."""
    return (_UNSAFE.sub("_", text).strip("._-") or "host")[:limit]
