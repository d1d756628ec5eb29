"""Primitive table entries of the spectral family."""
