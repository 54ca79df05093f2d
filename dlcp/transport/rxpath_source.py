"""What the UDP driver's C receive path is built from, and its digest: setup.py bakes it into the
module, the driver checks it on load (a module built from other sources is stale). Imports nothing
of the project, so setup.py can load this file on its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the receive core shared with the ns-3 hosts, and the wire header generated from dlcp/wire/layout.py
CORE_DIR = HERE / "c"
WIRE_DIR = ROOT / "dlcp" / "switch" / "c"
SOURCES = (HERE / "_rxpath.c", CORE_DIR / "rx_core.h", WIRE_DIR / "dlcp_wire.h")


def source_sha(sources: tuple[Path, ...] = SOURCES) -> str:
    h = hashlib.sha256()
    for path in sources:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
