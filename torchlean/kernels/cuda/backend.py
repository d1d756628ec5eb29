"""One backend object per CUDA device: every primitive, bound to run on that device."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import cupy

from . import (attention, classify, conv, elementwise, fast, freelist, index, layout, linalg, memory, norm, optim, pool,
               reduce, rng, rnn, rnn_seq, scan, spectral)

_MODULES = (elementwise, reduce, layout, index, linalg, memory, conv, pool, norm, classify, spectral, scan,
            attention, optim, fast, rnn, rnn_seq)
from . import fft as _fft  # noqa: E402  (the fft family: cupy.fft, no raw kernels)
_MODULES += (_fft,)
from . import spectral_nd as _spectral_nd  # noqa: E402  (2-D/3-D spectral convolutions)
_MODULES += (_spectral_nd,)
_RNG = ("rand_uniform", "bernoulli_mask", "rand_normal")


def _on_device(fn: Callable[..., Any], device: int) -> Callable[..., Any]:
    """Run ``fn`` with ``device`` current (only wrapped where the process sees several GPUs)."""
    get, dev = cupy.cuda.runtime.getDevice, cupy.cuda.Device(device)

    def call(*args: Any) -> Any:
        if get() == device:
            return fn(*args)
        with dev:
            return fn(*args)

    call.__name__ = fn.__name__
    return call


def make_backend(device: int) -> SimpleNamespace:
    fns: dict[str, Callable[..., Any]] = {}
    for mod in _MODULES:
        for name in mod.__all__:
            fns[name] = getattr(mod, name)
    for name in _RNG:
        fns[name] = getattr(rng, name)
    if cupy.cuda.runtime.getDeviceCount() > 1:
        fns = {k: _on_device(f, device) for k, f in fns.items()}
    # recycle: called by dying Buffers (runtime/buffer.py), so not wrapped: it checks the device itself.
    # array_module: integer and bool tensors hold CuPy arrays (runtime/arrays.py).
    return SimpleNamespace(NAME=f"cuda:{device}", device=device, recycle=freelist.hook(device), array_module=cupy,
                           **fns)
