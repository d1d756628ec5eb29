"""Primitive table entries of the attention family."""
