"""``torchlean.backends`` (PyTorch's ``torch.backends``): the switches programs set at start-up.

* ``backends.cuda.matmul.allow_tf32``: torchlean's TF32 switch for CUDA matrix products (off by
  default, as PyTorch's).
* ``backends.cudnn``: torchlean does not use cuDNN (its convolutions are its own kernels over
  cuBLAS), so ``is_available()`` is False; ``allow_tf32`` is the same TF32 switch (PyTorch keeps a
  second one for convolutions, on by default; torchlean's is off until asked for),
  ``deterministic`` is torchlean's deterministic mode (as ``use_deterministic_algorithms``),
  ``benchmark`` and ``enabled`` are accepted and change nothing (there is no algorithm search).
* ``backends.mps.is_available()`` is False: torchlean has CPU and CUDA devices only.

The kernels themselves live in ``torchlean.kernels``.
"""

from . import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps"]
