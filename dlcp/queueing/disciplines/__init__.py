"""The queue disciplines, one module each; every module registers its discipline in
`dlcp.queueing.registry.DISCIPLINES`, which imports this package before its first lookup, so a new
discipline is a new module here (and its C case in dlcp/switch/c/switch_core.h)."""
