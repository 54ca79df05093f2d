"""Simulated networks: the same experiment files on a packet-level simulator instead of Mininet.

`simulation/ns3/` is `backend = "ns3"` (the `sim` extra: `pip install '.[sim]'`). Like
`emulation/`, it sits above `dlcp/` and below `dlcp_cli/`; it needs no root. docs/simulation.md.
"""
