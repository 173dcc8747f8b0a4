"""AdamW for the linear heads that pooled probes train on cached features: torch.optim.AdamW's update, op for op.

Why not torch.optim itself: constructing any `torch.optim.Optimizer` imports torch._dynamo (2.5 s measured on a
2-core machine), more than all the rest of a cached classification stage's work. This restates the path that
torch.optim.AdamW takes for CPU tensors (single-tensor: foreach and fused are off on CPU, no amsgrad, not
capturable), in the same order of the same in-place ops, so the trained weights are bit-identical;
tests/test_adamw.py checks that against torch.optim.AdamW.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class AdamW:
    def __init__(self, params: Iterable[torch.nn.Parameter], *, lr: float, weight_decay: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        self.lr, self.weight_decay, self.eps = float(lr), float(weight_decay), float(eps)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        # torch.optim counts steps in a float32 tensor and reads it back with .item(): the same here
        self.steps = [torch.tensor(0.0, dtype=torch.float32) for _ in self.params]

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for param, exp_avg, exp_avg_sq, step_t in zip(self.params, self.exp_avg, self.exp_avg_sq, self.steps,
                                                      strict=True):
            if param.grad is None:
                continue
            grad = param.grad
            step_t += 1
            if self.weight_decay != 0:
                param.mul_(1 - self.lr * self.weight_decay)  # decoupled weight decay
            exp_avg.lerp_(grad, 1 - self.beta1)
            exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
            step = step_t.item()
            bias_correction1 = 1 - self.beta1**step
            bias_correction2 = 1 - self.beta2**step
            denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(self.eps)
            param.addcdiv_(exp_avg, denom, value=-(self.lr / bias_correction1))
