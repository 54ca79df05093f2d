"""Only the C extensions live here; everything else is in pyproject.toml.

Both are optional: if one cannot be compiled, the built-in switch falls back to its Python engine
and the UDP transport to its Python receive path (slower, same semantics), and each says so when
it starts.
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, HERE / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rel(path: Path) -> str:
    return str(path.relative_to(HERE.resolve()))


fastpath_source = _load("fastpath_source", "emulation/builtin_switch/fastpath_source.py")
rxpath_source = _load("rxpath_source", "dlcp/transport/rxpath_source.py")

# baked into each module so a binary built from other sources is refused
SHA = fastpath_source.source_sha()
SOURCE, *HEADERS = (_rel(path) for path in fastpath_source.SOURCES)
RX_SHA = rxpath_source.source_sha()
RX_SOURCE, *RX_HEADERS = (_rel(path) for path in rxpath_source.SOURCES)

setup(
    ext_modules=[
        Extension(
            "emulation.builtin_switch._fastpath",
            [SOURCE],
            depends=HEADERS,
            include_dirs=[str(fastpath_source.CORE_DIR.relative_to(HERE.resolve()))],
            extra_compile_args=["-O2", "-Wall"],
            libraries=["m"],
            define_macros=[("FASTPATH_SOURCE_SHA", f'"{SHA}"')],
            optional=True,
        ),
        Extension(
            "dlcp.transport._rxpath",
            [RX_SOURCE],
            depends=RX_HEADERS,
            include_dirs=[_rel(rxpath_source.CORE_DIR), _rel(rxpath_source.WIRE_DIR)],
            extra_compile_args=["-O2", "-Wall"],
            libraries=["m"],
            define_macros=[("RXPATH_SOURCE_SHA", f'"{RX_SHA}"')],
            optional=True,
        ),
    ]
)
