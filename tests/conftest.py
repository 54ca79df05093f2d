"""Shared pytest set-up. The folder is the tier: tests/unit needs nothing but the venv, tests/root
root and network namespaces, tests/ns3 the sim extra, tests/bmv2 p4c and simple_switch_grpc (and
root). Each test gets its folder's marker (`-m "not root"` etc. select by tier), skips cleanly with
the reason where the machine cannot run its tier, and a test marked for another tier than its
folder's is a collection error. Helpers shared by several tests live in tests/support (on the path)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "root", "ns3", "bmv2")
MARKERS = ("root", "ns3", "bmv2")  # unit has none: it is what carries no marker


def _missing_bmv2() -> str | None:
    # DLCP_P4C / DLCP_BMV2_BIN point at installations off PATH (emulation/bmv2/build.py, bmv2switch.py)
    tools = {
        "p4c": os.environ.get("DLCP_P4C") or "p4c",
        "simple_switch_grpc": os.environ.get("DLCP_BMV2_BIN") or "simple_switch_grpc",
    }
    absent = [b for b, exe in tools.items() if shutil.which(exe) is None]
    return f"{' and '.join(absent)} not on PATH (install p4c/bmv2 to run the bmv2 tests)" if absent else None


def tier_of(path: Path) -> str:
    """The tier folder a test file lives in (a UsageError for a test outside them)."""
    try:
        tier = Path(path).resolve().relative_to(TESTS).parts[0]
    except ValueError:
        tier = None
    if tier not in TIERS:
        raise pytest.UsageError(f"{path}: a test file belongs in one of tests/{{{','.join(TIERS)}}}")
    return tier


def skip_reasons() -> dict[str, str | None]:
    """Why each tier cannot run here (None: it can)."""
    from simulation.ns3.loader import available

    not_root = None if os.geteuid() == 0 else "needs root (network namespaces)"
    return {"unit": None, "root": not_root, "ns3": available(), "bmv2": not_root or _missing_bmv2()}


def pytest_collection_modifyitems(config, items):
    reasons = skip_reasons()
    for item in items:
        tier = tier_of(item.path)
        stray = [m for m in MARKERS if m != tier and item.get_closest_marker(m)]
        if stray:
            raise pytest.UsageError(f"{item.nodeid}: marked {stray[0]} but lives in tests/{tier}: move it")
        if tier != "unit":
            item.add_marker(getattr(pytest.mark, tier))
            if tier == "bmv2":
                item.add_marker(pytest.mark.root)  # every bmv2 test starts switches in namespaces
        if reasons[tier]:
            item.add_marker(pytest.mark.skip(reason=reasons[tier]))
