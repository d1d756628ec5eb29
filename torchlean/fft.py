"""``torchlean.fft`` (PyTorch's ``torch.fft``): not supported yet. Every function raises
``NotSupportedError`` naming the call: FFTs return complex tensors, and torchlean has none yet
(planned: complex tensors). The FNO example's spectral layer uses ``ops.spectral`` (real DFT
matrices) instead."""

from __future__ import annotations

from typing import Any

from .errors import NotSupportedError

_NAMES = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
          "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift")
__all__ = list(_NAMES)


def _unsupported(name: str):
    def fn(*args: Any, **kwargs: Any) -> Any:
        raise NotSupportedError(f"fft.{name}: not supported yet (planned: complex tensors); torchlean has no complex "
                                f"dtype. For Fourier layers see torchlean.nn.SpectralConv1d")
    fn.__name__ = name
    return fn


for _n in _NAMES:
    globals()[_n] = _unsupported(_n)
del _n
