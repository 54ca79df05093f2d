"""Root, as far as a run is concerned: whether this process may build network namespaces, and
giving what a run under sudo wrote back to the user who ran sudo."""

from __future__ import annotations

import os
from pathlib import Path

# Mininet unshares network namespaces (CAP_SYS_ADMIN) and makes veths, addresses and tc queues in
# them (CAP_NET_ADMIN); capabilities(7) numbers
CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def effective_capabilities() -> int | None:
    """The effective capability set (a bit per capability), None where /proc does not say."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return None


def privileged() -> bool:
    """Root's powers for network namespaces: the capabilities themselves, not the user id (root
    with its capabilities dropped, e.g. in a container, cannot build a network either)."""
    caps = effective_capabilities()
    if caps is None:
        return os.geteuid() == 0
    need = (1 << CAP_NET_ADMIN) | (1 << CAP_SYS_ADMIN)
    return caps & need == need


def hand_over_to_sudo_user(path: Path, created: list[Path]) -> None:
    """Under sudo, give what the run wrote (results, reports, and the directories above them it
    created) to the user who ran sudo, so a run started as `sudo dlcp run` (or by `make demo` as a
    normal user) leaves nothing root-owned."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid or uid == "0" or not path.exists():
        return
    for p in [*created, *path.rglob("*")]:
        try:
            os.chown(p, int(uid), int(gid), follow_symlinks=False)
        except OSError:
            pass
