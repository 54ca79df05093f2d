"""Pieces shared by the ns-3 tests' scripts (each script runs in a child process: ns-3 has one
simulator per process)."""

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
