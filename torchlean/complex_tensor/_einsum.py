"""``einsum`` and ``matmul`` with complex operands, as real contractions of the parts.

A product of k complex operands expands into 2^k real einsums, one per choice of the real or the
imaginary part of each, weighted by i^(number of imaginary parts): for the FNO's
``einsum("bixy,ioxy->boxy", x, w)`` the four of (xr wr - xi wi) + i (xr wi + xi wr). Each is the
real einsum (its own contraction order and kernels), so the accuracy is the real one's; Gauss's
three-product trick would save one contraction at the price of cancellation error."""

from __future__ import annotations

import itertools
from typing import Any

from .. import fast_kernels, ops
from .._validate import type_name
from ..errors import DTypeError
from ..tensor import Tensor
from ._core import ComplexTensor
from ._math import pack, parts

__all__ = ["einsum", "matmul", "has_complex", "expand_parts"]


def has_complex(args: Any) -> bool:
    for a in args:
        if isinstance(a, ComplexTensor):
            return True
        if isinstance(a, (list, tuple)) and any(isinstance(b, ComplexTensor) for b in a):
            return True
    return False


def _expand(op: str, operands: list[Any], contract) -> ComplexTensor:
    """sum over part choices of contract(chosen parts), signs and i's from the imaginary count."""
    choices = []
    for i, x in enumerate(operands):
        if isinstance(x, ComplexTensor):
            choices.append(list(enumerate(parts(x))))
        elif isinstance(x, Tensor):
            choices.append([(0, x if x.dtype.is_floating_point else x.float())])
        else:
            raise DTypeError(f"{op}: expected a Tensor for operand {i}, got {type_name(x)}")
    re = im = None
    for combo in itertools.product(*choices):
        k = sum(c for c, _ in combo) % 4  # i^k: 0 -> +re, 1 -> +im, 2 -> -re, 3 -> -im
        term = contract([t for _, t in combo])
        if k in (0, 2):
            re = term if re is None else (ops.add(re, term) if k == 0 else ops.sub(re, term))
            if re is term and k == 2:
                re = ops.neg(term)
        else:
            im = term if im is None else (ops.add(im, term) if k == 1 else ops.sub(im, term))
            if im is term and k == 3:
                im = ops.neg(term)
    return pack(re, im, op)


def expand_parts(op: str, operands: list[Any], contract) -> ComplexTensor:
    """``contract`` (a real multilinear map of the operands) with complex operands allowed."""
    return _expand(op, operands, contract)


def einsum(equation: str, *operands: Any) -> Any:
    """``torch.einsum`` with complex operands (real ones mixed in are allowed)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return _expand("einsum", list(operands), lambda ts: ops.einsum(equation, *ts))


def matmul(a: Any, b: Any) -> ComplexTensor:
    """``torch.matmul`` / ``@`` with a complex operand: the real matmul of the parts."""
    return _expand("matmul", [a, b], lambda ts: fast_kernels.matmul(ts[0], ts[1]))
