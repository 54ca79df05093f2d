"""Only the C extension lives here; everything else is in pyproject.toml.

The extension is optional: if it cannot be compiled, the built-in switch falls back to its
Python engine (slower, same semantics) and says so when it starts.
"""

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("fastpath_source", HERE / "emulation/builtin_switch/fastpath_source.py")
fastpath_source = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fastpath_source)

# baked into the module so the switch can refuse a binary built from other sources
SHA = fastpath_source.source_sha()
SOURCE, *HEADERS = (str(path.relative_to(HERE.resolve())) for path in fastpath_source.SOURCES)

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
        )
    ]
)
