"""The wire format: DLCP header, control frames, tensor <-> packets, per-packet tagging."""
