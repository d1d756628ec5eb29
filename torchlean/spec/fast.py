"""The fast-kernel family (issue 6): stub, filled by the fast-kernels task."""

__all__ = []
