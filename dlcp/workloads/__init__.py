"""What is trained: the workload contract, the registry, the synthetic workload."""
