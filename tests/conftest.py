"""Shared pytest set-up: markers `root` and `bmv2` skip cleanly (with the reason) where the machine
cannot run them."""

from __future__ import annotations

import os
import shutil

import pytest


def _missing_bmv2() -> str | None:
    absent = [b for b in ("p4c", "simple_switch_grpc") if shutil.which(b) is None]
    return f"{' and '.join(absent)} not on PATH (install p4c/bmv2 to run the bmv2 tests)" if absent else None


def pytest_collection_modifyitems(config, items):
    not_root = None if os.geteuid() == 0 else "needs root (network namespaces)"
    no_bmv2 = _missing_bmv2()
    for item in items:
        if not_root and ("root" in item.keywords or "bmv2" in item.keywords):
            item.add_marker(pytest.mark.skip(reason=not_root))
        elif no_bmv2 and "bmv2" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=no_bmv2))
