"""DLCP emulator library: wire format, tagging, chunking, transport, trainer, reports.

Nothing here needs root, Mininet or bmv2; `emulation/` and `agents/` build on it.
"""

__version__ = "0.1.0"
