"""The communication layer: collectives over a transport (PS, ring, all-to-all)."""
