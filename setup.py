"""Only the C extension lives here; everything else is in pyproject.toml.

The extension is optional: if it cannot be compiled, the built-in dataplane falls back to its
Python engine (slower, same semantics) and says so when it starts.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("emulation.refswitch._fastpath", ["emulation/refswitch/_fastpath.c"],
                             extra_compile_args=["-O2", "-Wall"], optional=True)])
