"""What the C fast path is built from, and its digest: setup.py bakes it into the module, the switch
checks it on load (a module built from other sources is stale). Imports nothing of the project, so
setup.py can load this file on its own."""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the C pipeline core shared with the ns-3 switch, and the header generated from dlcp/wire/layout.py,
# dlcp/network/pipeline_names.py and dlcp/queueing (python -m dlcp.codegen)
CORE_DIR = ROOT / "dlcp" / "switch" / "c"
SOURCES = (HERE / "_fastpath.c", CORE_DIR / "switch_core.h", CORE_DIR / "dlcp_wire.h")


def source_sha(sources: tuple[Path, ...] = SOURCES) -> str:
    h = hashlib.sha256()
    for path in sources:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
