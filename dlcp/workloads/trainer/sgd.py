"""Plain SGD with momentum and weight decay: the update torch.optim.SGD makes with its defaults
(no dampening, no Nesterov), without torch.optim. Constructing torch's optimizer imports torch's
compiler stack (torch._dynamo: ~1.9 s of CPU), once in every worker and PS of every run; on a
2-core machine that start-up was a third of a short run's wall time.

For each parameter p with a gradient g:  d = g + weight_decay * p;  buf = d on the first step,
else momentum * buf + d;  p -= lr * buf  (tests/unit/test_sgd.py checks it against torch.optim.SGD).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class SGD:
    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        self.params = list(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self._buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad if self.weight_decay == 0 else p.grad.add(p, alpha=self.weight_decay)
            if self.momentum != 0:
                buf = self._buffers[i]
                if buf is None:
                    buf = self._buffers[i] = d.clone().detach()
                else:
                    buf.mul_(self.momentum).add_(d)
                d = buf
            p.add_(d, alpha=-self.lr)
