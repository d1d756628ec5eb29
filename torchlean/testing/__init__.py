"""Test support shipped with the package: the primitive table used by the tests and ``torchlean check``."""
