"""What is trained: the workload contract, the registry, the synthetic workload, the torch trainer
(trainer/) and per-tensor compute profiles (profile.py, profiles/*.json)."""
