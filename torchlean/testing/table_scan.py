"""Primitive table entries of the scan family."""
