"""Benchmarks that need root: switch forwarding rate and transport goodput."""
