"""Shared pytest set-up: markers `root`, `bmv2` and `ns3` skip cleanly (with the reason) where the
machine cannot run them."""

from __future__ import annotations

import os
import shutil

import pytest


def _missing_bmv2() -> str | None:
    # DLCP_P4C / DLCP_BMV2_BIN point at installations off PATH (emulation/bmv2/build.py, bmv2switch.py)
    tools = {"p4c": os.environ.get("DLCP_P4C") or "p4c",
             "simple_switch_grpc": os.environ.get("DLCP_BMV2_BIN") or "simple_switch_grpc"}
    absent = [b for b, exe in tools.items() if shutil.which(exe) is None]
    return f"{' and '.join(absent)} not on PATH (install p4c/bmv2 to run the bmv2 tests)" if absent else None


def pytest_collection_modifyitems(config, items):
    not_root = None if os.geteuid() == 0 else "needs root (network namespaces)"
    no_bmv2 = _missing_bmv2()
    from simulation.ns3.loader import available
    no_ns3 = available()
    for item in items:
        if not_root and ("root" in item.keywords or "bmv2" in item.keywords):
            item.add_marker(pytest.mark.skip(reason=not_root))
        elif no_bmv2 and "bmv2" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=no_bmv2))
        elif no_ns3 and "ns3" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=no_ns3))
