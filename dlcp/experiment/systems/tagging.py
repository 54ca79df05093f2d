"""The tagging policies as systems: each sets `dlcp.policy` alone, so `--policies fifo,dlcp`, a
`--vary system=` of these names and `--vary dlcp.policy=` run the same configs."""

from dlcp.experiment.systems import SystemEntry, register_system
from dlcp.wire.tagging import POLICIES

_WHAT = {
    "fifo": "one FIFO queue, tail drop only, every packet protected (the bounded-loss transport's baseline)",
    "layer": "priority from the layer, no drop precedence",
    "magnitude": "drop precedence from the magnitude, one data queue",
    "dlcp": "DLCP (arXiv 2008.08445) and MLT (NSDI'24): priority from the layer, drop precedence from the magnitude",
}

for _policy in POLICIES:
    register_system(SystemEntry(name=_policy, description=_WHAT[_policy], settings={"dlcp.policy": _policy}))
