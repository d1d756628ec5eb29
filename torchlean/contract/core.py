"""The contract layer's vocabulary: float32 constants, gamma(k), ulp32, the Contract record, the
registry every family adds to (``register``) and the bounds shared by several families.

The package's ``__init__`` explains the notation and why sums use gamma(k) * sum|x|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["U", "TINY", "F32_MAX", "F32_OVERFLOW", "LIB", "gamma", "ulp32", "abs64", "Contract", "CONTRACTS",
           "register", "zero_bound", "sum_bound"]

U = 2.0**-24
TINY = 2.0**-126
F32_MAX = float(np.finfo(np.float32).max)
# A float64 value rounds to float32 infinity when its magnitude reaches this (max + half an ulp).
F32_OVERFLOW = F32_MAX + 2.0**103
LIB = 8 * U  # relative error of one float32 library transcendental (4 ulp)


def gamma(k: float) -> float:
    k = max(float(k), 0.0)
    return k * U / (1.0 - k * U) if k * U < 0.5 else np.inf


def ulp32(r: Any) -> np.ndarray:
    """Spacing of the float32 grid at |r| (2**-149 at 0), computed in float64."""
    a = np.abs(np.asarray(r, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log2(np.where((a > 0) & np.isfinite(a), a, 1.0)))
    e = np.maximum(e, -126.0)
    return np.where(a > 0, np.ldexp(1.0, (e - 23).astype(np.int64)), 2.0**-149)


def abs64(x):
    return np.abs(np.asarray(x, dtype=np.float64))


@dataclass(frozen=True)
class Contract:
    """``bound(ref, *spec_args)`` -> allowed |out - ref| per element (a tuple for tuple outputs)."""

    name: str
    statement: str
    bound: Callable[..., Any]
    exact: bool = False


CONTRACTS: dict[str, Contract] = {}


def register(name: str, statement: str, bound: Callable[..., Any], exact: bool = False) -> None:
    CONTRACTS[name] = Contract(name, statement, bound, exact)


def zero_bound(ref, *args):
    if isinstance(ref, tuple):
        return tuple(np.zeros_like(np.asarray(r, dtype=np.float64)) for r in ref)
    return np.zeros_like(np.asarray(ref, dtype=np.float64))


def sum_bound(k: int, abs_sum, ref):
    """gamma(k - 1) * sum|terms| + ulp(ref)/2: a sum of k terms in any order."""
    return gamma(max(k - 1, 0)) * abs_sum + 0.5 * ulp32(ref) * (k > 0)

