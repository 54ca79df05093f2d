"""Programs that run inside Mininet hosts (worker, PS, background traffic).

One intra-op thread for torch and the BLAS libraries: every agent stands for one machine, and on
an emulation host several agents share a few cores. Thread pools sized for the whole machine
then fight each other: the digits CNN's step took a median 109 ms with torch's 2 threads against
6 ms with 1, on 2 loaded cores. Set before anything imports numpy or torch.
"""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
