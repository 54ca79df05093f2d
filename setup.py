"""Only the C extension lives here; everything else is in pyproject.toml.

The extension is optional: if it cannot be compiled, the built-in dataplane falls back to its
Python engine (slower, same semantics) and says so when it starts.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "emulation/refswitch/_fastpath.c"
# baked into the module so the switch can refuse a binary built from another version of the source
SHA = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()[:16]

setup(ext_modules=[Extension("emulation.refswitch._fastpath", [SOURCE], extra_compile_args=["-O2", "-Wall"],
                             define_macros=[("FASTPATH_SOURCE_SHA", f'"{SHA}"')], optional=True)])
