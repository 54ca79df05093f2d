"""Torch training for DLCP: models and data (models.py, data.py), fill policies (fill.py), flat
per-message buffers (flat.py), the Workload implementations (torch_workload.py), in-process
collectives with emulated packet loss (exchange.py) and training loops (loop.py).
`dlcp.trainer` re-exports what agents and users need. Details: docs/trainer.md."""
