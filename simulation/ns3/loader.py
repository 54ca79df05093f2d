"""Load ns-3 (only the modules a DLCP simulation uses) and compile the project's C++ into it.

The wheel's own loader (`from ns import ns`) parses the headers of all ~50 ns-3 modules: 10-13 CPU s
and ~640 MB. Loading the six modules used here with the same cppyy calls (include path,
`<module>-module.h`, the shared libraries, `Ptr` registered as a smart pointer) takes ~2 CPU s and
~280 MB. cppyy compiles `cpp/*.h` when first needed (a few seconds, once per process).

One simulation per process: ns-3's Simulator is a singleton, and its random streams continue
across `Simulator::Destroy()`, so a second run in the same process would not repeat the first.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

CPP_DIR = Path(__file__).resolve().parent / "cpp"
# the switch's C pipeline core, and dlcp_wire.h: the wire format and the switch's names, generated
# from dlcp/wire/layout.py and dlcp/network/pipeline_names.py (`make gen`)
CORE_DIR = Path(__file__).resolve().parents[2] / "dlcp" / "switch" / "c"
# the receive core the hosts share with the UDP driver's extension (rx_core.h)
RX_CORE_DIR = Path(__file__).resolve().parents[2] / "dlcp" / "transport" / "c"
MODULES = ("core", "network", "internet", "point-to-point", "traffic-control", "applications")
EXTRA_HINT = "pip install '.[sim]' (or: pip install 'ns3==3.44.*')"


class Ns3Unavailable(RuntimeError):
    """ns-3 cannot be loaded; the message is one line saying what to install."""


_ns = None
_compiled: set[str] = set()
# cling prints this for every module set (ns-3's static time initialiser); harmless: ns-3's Time works
HARMLESS = "[runStaticInitializersOnce]: Failed to materialize symbols"


@contextlib.contextmanager
def _without_cling_noise():
    """Hold back what C++ writes to stderr while cppyy loads or compiles, then pass on every line
    but cling's known harmless ones."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                if not line.startswith(HARMLESS):
                    print(line, file=sys.stderr)


def available() -> str | None:
    """None when ns-3 can be loaded, else the one-line reason (for skips and errors)."""
    if importlib.util.find_spec("cppyy") is None or importlib.util.find_spec("ns") is None:
        return f"backend ns3 needs the sim extra, which is not installed: {EXTRA_HINT}"
    return None


def _prefix() -> Path:
    import cppyy

    return Path(cppyy.__file__).resolve().parent.parent / "ns3"


def ns():
    """The `ns3` C++ namespace (cppyy.gbl.ns3) with the six modules loaded; `.cppyy` is cppyy."""
    global _ns
    if _ns is not None:
        return _ns
    reason = available()
    if reason:
        raise Ns3Unavailable(reason)
    import cppyy
    import libcppyy

    prefix = _prefix()
    libdir = prefix / "lib64"
    if not libdir.is_dir():
        raise Ns3Unavailable(f"the ns3 wheel has no {libdir}: reinstall it ({EXTRA_HINT})")
    libcppyy.AddSmartPtrType("Ptr")
    cppyy.add_include_path(str(prefix / "include"))
    cppyy.add_library_path(str(libdir))
    with _without_cling_noise():
        for m in MODULES:
            cppyy.include(f"ns3/{m}-module.h")
        for m in MODULES:
            libs = glob.glob(str(libdir / f"libns3.*-{m}.so"))
            if len(libs) != 1:
                raise Ns3Unavailable(f"the ns3 wheel has {len(libs)} libraries for module {m} in {libdir}")
            cppyy.load_library(libs[0])
    cppyy.add_include_path(str(CPP_DIR))
    cppyy.add_include_path(str(CORE_DIR))
    cppyy.add_include_path(str(RX_CORE_DIR))
    _ns = cppyy.gbl.ns3
    _ns.cppyy = cppyy
    return _ns


def compile_cpp(*names: str):
    """Compile `cpp/<name>.h` into the process once; returns the ns3 namespace."""
    n = ns()
    for name in names:
        if name not in _compiled:
            path = CPP_DIR / f"{name}.h"
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such C++ source")
            with _without_cling_noise():
                n.cppyy.include(str(path))
            _compiled.add(name)
    return n


def versions() -> dict[str, str | None]:
    """The simulator's versions for meta.json."""
    from importlib import metadata

    def v(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    return {"ns3": v("ns3"), "cppyy": v("cppyy")}
