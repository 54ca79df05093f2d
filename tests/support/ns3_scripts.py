"""Pieces shared by the ns-3 tests' scripts (each script runs in a child process: ns-3 has one
simulator per process)."""

from dlcp.runs.bench import small_ps_experiment

# a 3-host star at 50 Mbit/s with the dlcp policy, its switch built; the script imports C (config),
# T (topology), loader and build_network
STAR3_NETWORK = r"""
cfg = C.validate({"name": "t", "topology": {"kind": "star", "hosts": 3}, "workload": {"workers": 2},
                  "dlcp": {"policy": "dlcp"}, "links": {"host_mbps": 50}})
spec = T.from_config(cfg)
ns = loader.compile_cpp("dlcp_switch", "dlcp_net", "dlcp_host")
d = cfg["dlcp"]
net = build_network(spec, spec.runtimes(cfg), cfg["links"], d["data_port"])
"""


def tiny_ps(iterations: int) -> str:
    """The smallest ns-3 experiment the run and series tests use (`small_ps_experiment`)."""
    return small_ps_experiment("tiny-ps", iterations, timeout_s=20)


def leaf_spine4(name: str, mbps: float) -> str:
    """The head of the small ns-3 experiments' TOML: a 4-worker all-reduce on a leaf-spine of 2
    spines and 2 leaves of 2 hosts, every link at `mbps`; it ends inside [workload], and the tests
    add the rest."""
    return f"""
name = "{name}"
backend = "ns3"
timeout_s = 20
[topology]
kind = "leaf_spine"
spines = 2
leaves = 2
hosts_per_leaf = 2
[links]
host_mbps = {mbps}
fabric_mbps = {mbps}
[workload]
mode = "allreduce"
workers = 4
"""
