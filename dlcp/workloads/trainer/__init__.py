"""Torch training for DLCP: models and data (models.py, data.py), fill rules (fill.py), flat
per-message buffers (flat.py), the Workload implementations (torch_workload.py), in-process
collectives with emulated packet loss (exchange.py), training loops (loop.py), the accuracy
benchmark (accuracy_bench.py) and the PyTorch DDP communication hook (ddp_hook.py).
Details: docs/trainer.md."""
