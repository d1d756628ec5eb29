"""One SGD step of a small tanh MLP through the front end: the workload shared by the CUDA
tests (loss-curve parity, the leak test) and ``benchmarks.gpu_extras``."""

from __future__ import annotations

from typing import Sequence

from .. import autograd
from ..nn import functional as F
from ..tensor import Tensor


def tanh_mlp_sgd_step(x: Tensor, y: Tensor, params: Sequence[Tensor], lr: float) -> Tensor:
    """loss = mse(linear(tanh(linear(x, w1, b1)), w2, b2), y); backward; p -= lr * grad. Returns loss."""
    w1, b1, w2, b2 = params
    h = F.linear(x, w1, b1).tanh()
    loss = F.mse_loss(F.linear(h, w2, b2), y)
    loss.backward()
    with autograd.no_grad():
        for p in params:
            p.sub_(p.grad, alpha=lr)
            p.grad = None
    return loss
