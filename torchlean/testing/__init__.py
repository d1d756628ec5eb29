"""Test support shipped with the package: the primitive table used by the tests and ``torchlean check``,
and PyTorch's ``torch.testing.assert_close``."""

from .close import CloseError, assert_close

__all__ = ["assert_close", "CloseError"]
