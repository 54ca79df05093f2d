"""The `dlcp` command: above both `dlcp/` (library) and `emulation/` (root, Mininet, bmv2)."""
