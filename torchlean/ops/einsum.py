"""einsum and the matrix products around it: mm, addmm, baddbmm, addbmm, outer, dot,
inner, tensordot, einsum.

einsum: the equation is parsed (explicit '->' or implicit output, '...' broadcast dims); an index
that appears only in one operand and not in the output is summed first; then operands are
contracted two at a time, always the pair whose result is smallest (the greedy order of
opt_einsum), and each contraction is a permute + reshape onto one bmm (batch = indices both keep,
n = indices summed there). An index repeated within one operand (a diagonal, 'ii->i') is refused
with a clear error; take ``diagonal`` first.
"""

from __future__ import annotations

import itertools
import numbers
from typing import Any, Sequence

from .._validate import type_name
from ..errors import ArgumentError, ShapeError
from ._base import Tensor, broadcast_shapes, numel, operand, same_device, tensor_arg
from .elementwise import add, mul
from .linalg import bmm, matmul
from .reduce import sum
from .shape import expand, permute, reshape

__all__ = ["einsum", "mm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "outer", "dot", "vdot", "inner",
           "tensordot", "kron"]


def _scaled(x: Tensor, c: float) -> Tensor:
    return x if c == 1 else mul(x, float(c))


def mm(a: Tensor, b: Tensor) -> Tensor:
    tensor_arg("mm", "input", a)
    tensor_arg("mm", "mat2", b)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm: expected two 2-D tensors, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


def mv(a: Tensor, v: Tensor) -> Tensor:
    tensor_arg("mv", "input", a)
    tensor_arg("mv", "vec", v)
    if a.ndim != 2 or v.ndim != 1:
        raise ShapeError(f"mv: expected a 2-D and a 1-D tensor, got shapes {a.shape} and {v.shape}")
    return matmul(a, v)


def _add_scaled(op: str, input: Any, prod: Tensor, beta: float, alpha: float) -> Tensor:
    for name, v in (("beta", beta), ("alpha", alpha)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ArgumentError(f"{op}: {name} must be a number, got {type_name(v)}")
    inp = operand(op, input, prod)
    broadcast_shapes(op, inp.shape, prod.shape)
    if inp.shape != prod.shape and broadcast_shapes(op, inp.shape, prod.shape) != prod.shape:
        raise ShapeError(f"{op}: input of shape {inp.shape} does not broadcast to the product's shape {prod.shape}")
    if beta == 0:  # PyTorch ignores input (NaN and inf included) when beta is 0
        return _scaled(prod, alpha)
    return add(_scaled(inp, beta), _scaled(prod, alpha))


def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    return _add_scaled("addmm", input, mm(mat1, mat2), beta, alpha)


def addmv(input: Any, mat: Tensor, vec: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    return _add_scaled("addmv", input, mv(mat, vec), beta, alpha)


def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    return _add_scaled("baddbmm", input, bmm(batch1, batch2), beta, alpha)


def addbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    return _add_scaled("addbmm", input, sum(bmm(batch1, batch2), 0), beta, alpha)


def outer(a: Tensor, b: Tensor) -> Tensor:
    tensor_arg("outer", "input", a)
    tensor_arg("outer", "vec2", b)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"outer: expected two 1-D tensors, got shapes {a.shape} and {b.shape}")
    return matmul(reshape(a, (a.shape[0], 1)), reshape(b, (1, b.shape[0])))


def dot(a: Tensor, b: Tensor) -> Tensor:
    tensor_arg("dot", "input", a)
    tensor_arg("dot", "tensor", b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"dot: expected two 1-D tensors of one size, got shapes {a.shape} and {b.shape}")
    return matmul(a, b)


vdot = dot


def inner(a: Tensor, b: Tensor) -> Tensor:
    tensor_arg("inner", "input", a)
    tensor_arg("inner", "other", b)
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def kron(a: Tensor, b: Tensor) -> Tensor:
    tensor_arg("kron", "input", a)
    tensor_arg("kron", "other", b)
    r = max(a.ndim, b.ndim)
    a2 = reshape(a, (1,) * (r - a.ndim) + a.shape)
    b2 = reshape(b, (1,) * (r - b.ndim) + b.shape)
    inter_a = tuple(itertools.chain.from_iterable((s, 1) for s in a2.shape))
    inter_b = tuple(itertools.chain.from_iterable((1, s) for s in b2.shape))
    return reshape(mul(reshape(a2, inter_a), reshape(b2, inter_b)), tuple(x * y for x, y in zip(a2.shape, b2.shape)))


def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    tensor_arg("tensordot", "a", a)
    tensor_arg("tensordot", "b", b)
    if isinstance(dims, numbers.Integral) and not isinstance(dims, bool):
        k = int(dims)
        if k < 0 or k > a.ndim or k > b.ndim:
            raise ArgumentError(f"tensordot: dims={k} out of range for shapes {a.shape} and {b.shape}")
        da, db = list(range(a.ndim - k, a.ndim)), list(range(k))
    elif isinstance(dims, (list, tuple)) and len(dims) == 2:
        da = [dims[0]] if isinstance(dims[0], numbers.Integral) else list(dims[0])
        db = [dims[1]] if isinstance(dims[1], numbers.Integral) else list(dims[1])
        da = [d % a.ndim for d in da]
        db = [d % b.ndim for d in db]
    else:
        raise ArgumentError(f"tensordot: dims must be an int or a pair of dim lists, got {dims!r}")
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        raise ShapeError(f"tensordot: contracted dims {da} of {a.shape} and {db} of {b.shape} do not match")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(da, db):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in da] + [c for j, c in enumerate(sb) if j not in db]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", a, b)


# -- einsum ------------------------------------------------------------------------------------
def _parse(eq: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """Subscripts per operand and for the output, with '...' expanded to fresh upper-case-free
    labels (digits) shared right-aligned across operands."""
    eq = eq.replace(" ", "")
    if "->" in eq:
        lhs, rhs = eq.split("->", 1)
        if "->" in rhs:
            raise ArgumentError(f"einsum: the equation {eq!r} has more than one '->'")
    else:
        lhs, rhs = eq, None
    parts = lhs.split(",")
    if len(parts) != len(ranks):
        raise ArgumentError(f"einsum: the equation names {len(parts)} operands, got {len(ranks)} tensors")
    n_ell = 0
    for p, r in zip(parts, ranks):
        if "..." in p:
            n_ell = max(n_ell, r - len(p.replace("...", "")))
    ell = [f"#{i}" for i in range(n_ell)]  # ellipsis labels, never letters

    def expand_part(p: str, r: int | None) -> list[str]:
        if p.count("...") > 1 or "." in p.replace("...", ""):
            raise ArgumentError(f"einsum: invalid subscripts {p!r} in {eq!r}")
        for c in p.replace("...", ""):
            if not c.isalpha():
                raise ArgumentError(f"einsum: invalid subscript {c!r} in {eq!r} (letters and '...' only)")
        if "..." not in p:
            return list(p)
        pre, post = p.split("...")
        k = (r - len(pre) - len(post)) if r is not None else n_ell
        if k < 0:
            raise ShapeError(f"einsum: subscripts {p!r} have more letters than the operand has dims ({r})")
        return list(pre) + ell[n_ell - k:] + list(post)

    subs = []
    for p, r in zip(parts, ranks):
        s = expand_part(p, r)
        if len(s) != r:
            raise ShapeError(f"einsum: subscripts {p!r} name {len(s)} dims, the operand has {r}")
        if len(set(s)) != len(s):
            raise ArgumentError(f"einsum: the index {next(c for c in s if s.count(c) > 1)!r} repeats within operand "
                                f"{p!r} (a diagonal); take torch.diagonal first, then einsum")
        subs.append(s)
    if rhs is None:
        counts: dict[str, int] = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell + sorted(c for c, k in counts.items() if k == 1 and not c.startswith("#"))
    else:
        out = expand_part(rhs, None)
        if len(set(out)) != len(out):
            raise ArgumentError(f"einsum: the output subscripts {rhs!r} repeat an index")
        known = set().union(*subs) if subs else set()
        for c in out:
            if c not in known:
                raise ArgumentError(f"einsum: the output index {c!r} appears in no operand of {eq!r}")
    return subs, out


def einsum(equation: str, *operands: Any) -> Tensor:
    if not isinstance(equation, str):
        raise ArgumentError(f"einsum: the equation must be a string, got {type_name(equation)}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ArgumentError("einsum: expected at least one operand")
    for i, t in enumerate(operands):
        tensor_arg("einsum", f"operands[{i}]", t)
    ts = [t.float() if t._buf is None else t for t in operands]
    same_device("einsum", *ts)
    subs, out = _parse(equation, [t.ndim for t in ts])
    sizes: dict[str, int] = {}
    for t, s in zip(ts, subs):
        for c, n in zip(s, t.shape):
            if c in sizes and sizes[c] != n and n != 1 and sizes[c] != 1:
                raise ShapeError(f"einsum: index {c!r} has sizes {sizes[c]} and {n} in {equation!r}")
            sizes[c] = n if c not in sizes or sizes[c] == 1 else sizes[c]
    # size-1 dims that broadcast against a larger size (ellipsis broadcasting) are expanded
    for i, (t, s) in enumerate(zip(ts, subs)):
        full = tuple(sizes[c] for c in s)
        if full != t.shape:
            ts[i] = expand(t, full)
    items = list(zip(ts, subs))

    def needed(exclude: set[int]) -> set[str]:
        keep = set(out)
        for j, (_, s) in enumerate(items):
            if j not in exclude:
                keep.update(s)
        return keep

    # sum away the indices that only one operand has and the output does not
    for i in range(len(items)):
        t, s = items[i]
        other = needed({i})
        drop = [k for k, c in enumerate(s) if c not in other]
        if drop:
            t = sum(t, drop)
            s = [c for k, c in enumerate(s) if k not in drop]
        items[i] = (t, s)
    while len(items) > 1:
        best = None
        for i, j in itertools.combinations(range(len(items)), 2):
            keep = needed({i, j})
            res = [c for c in dict.fromkeys(items[i][1] + items[j][1]) if c in keep]
            cost = numel([sizes[c] for c in res])
            if best is None or cost < best[0]:
                best = (cost, i, j)
        _, i, j = best
        keep = needed({i, j})
        merged = _contract(items[i], items[j], keep, sizes)
        items = [it for k, it in enumerate(items) if k not in (i, j)] + [merged]
    t, s = items[0]
    drop = [k for k, c in enumerate(s) if c not in out]
    if drop:
        t = sum(t, drop)
        s = [c for k, c in enumerate(s) if k not in drop]
    perm = [s.index(c) for c in out]
    if perm != list(range(len(perm))):
        t = permute(t, perm)
    return t if t is not operands[0] else mul(t, 1.0)


def _contract(a: tuple[Tensor, list[str]], b: tuple[Tensor, list[str]], keep: set[str],
              sizes: dict[str, int]) -> tuple[Tensor, list[str]]:
    """One pairwise contraction as a bmm: (batch, m, k) @ (batch, k, n)."""
    ta, sa = a
    tb, sb = b
    batch = [c for c in sa if c in sb and c in keep]
    contr = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    pa = [sa.index(c) for c in batch + left + contr]
    pb = [sb.index(c) for c in batch + contr + right]
    ta = permute(ta, pa) if pa != list(range(len(pa))) else ta
    tb = permute(tb, pb) if pb != list(range(len(pb))) else tb
    nb, nm, nk, nn = (numel([sizes[c] for c in g]) for g in (batch, left, contr, right))
    r = bmm(reshape(ta, (nb, nm, nk)), reshape(tb, (nb, nk, nn)))
    labels = batch + left + right
    return reshape(r, tuple(sizes[c] for c in labels)), labels
