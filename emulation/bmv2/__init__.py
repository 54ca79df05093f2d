"""bmv2 `simple_switch_grpc` running p4/dlcp.p4: build, process, control plane, bench."""
