"""What an endpoint ignored (malformed or unexpected packets and control frames), counted by cause;
the first of each cause is logged with its detail, the rest only counted (a flood of bad packets
must not become a flood of log lines)."""

from __future__ import annotations

import collections
import logging

log = logging.getLogger("dlcp.transport")


class DropCounts(collections.Counter):
    def note(self, rank: int, cause: str, detail: str = "") -> None:
        first = cause not in self
        self[cause] += 1
        if first:
            log.warning(
                "rank %s: dropped %s%s (further drops of this kind are only counted)",
                rank,
                cause,
                f": {detail}" if detail else "",
            )
