"""`backend = "ns3"`: DLCP experiments on the ns-3 simulator (docs/simulation.md).

Per-packet work is C++ in `cpp/` (the switch pipeline, its queue disc, the hosts' data path),
compiled at run time by cppyy, which the `ns3` wheel brings; Python builds the network from the
experiment's topology and runtime files, runs per-message logic and writes the records.
Importing this package needs nothing; `loader.ns()` needs the `sim` extra and says so in one line.
"""
