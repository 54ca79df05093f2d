"""Workloads: what a worker computes. `profile` holds per-tensor compute profiles of models."""
