"""Layout primitives (concat, slice, broadcast, transpose, axis swaps) and bmm on NumPy arrays."""

from __future__ import annotations

import numpy as np

F32 = np.float32

__all__ = [
    "concat1d", "slice1d", "broadcast_vec_to_rows", "broadcast_vec_to_cols", "broadcast_to",
    "reduce_from_broadcast", "swap_adjacent_at_depth", "transpose2d", "bmm", "bmm_nt", "bmm_tn",
]


def concat1d(a, b, n, m):
    return np.concatenate([a, b])


def slice1d(b, n, start, length):
    return b[start:start + length].copy()


def broadcast_vec_to_rows(vec, rows, cols):
    return np.ascontiguousarray(np.broadcast_to(vec, (rows, cols))).reshape(-1)


def broadcast_vec_to_cols(vec, rows, cols):
    return np.ascontiguousarray(np.broadcast_to(vec[:, None], (rows, cols))).reshape(-1)


def _aligned_view(x, in_dims, out_dims, axis_map):
    """View x (shape in_dims) with one axis per output axis: size 1 where the output broadcasts."""
    xs = x.reshape(in_dims)
    used = [a - 1 for a in axis_map if a != 0]
    dropped = tuple(a for a in range(len(in_dims)) if a not in used)  # unmapped axes have size 1
    xs = xs.reshape([d for a, d in enumerate(in_dims) if a not in dropped])
    remaining = [a for a in range(len(in_dims)) if a not in dropped]
    xs = xs.transpose([remaining.index(a) for a in used])
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    return xs.reshape(shape)


def broadcast_to(x, in_dims, out_dims, axis_map):
    view = _aligned_view(x, in_dims, out_dims, axis_map)
    return np.ascontiguousarray(np.broadcast_to(view, out_dims)).reshape(-1)


def reduce_from_broadcast(dout, in_dims, out_dims, axis_map):
    d = dout.reshape(out_dims)
    shape = [1 if a == 0 else in_dims[a - 1] for a in axis_map]
    axes = tuple(j for j, (s, o) in enumerate(zip(shape, out_dims)) if s == 1 and o != 1)
    if axes:
        with np.errstate(all="ignore"):
            d = np.add.reduce(d, axis=axes, keepdims=True)
    # d now has the aligned-view shape; undo the axis permutation to reach in_dims' order
    used = [a - 1 for a in axis_map if a != 0]
    kept = [j for j, a in enumerate(axis_map) if a != 0]
    d = d.reshape([d.shape[j] for j in kept]) if kept else d.reshape(())
    order = sorted(range(len(used)), key=lambda i: used[i])
    d = d.transpose(order)
    return np.ascontiguousarray(d, dtype=F32).reshape(-1)


def swap_adjacent_at_depth(b, dims, depth):
    if depth + 1 >= len(dims):
        return b.copy()
    return np.ascontiguousarray(np.swapaxes(b.reshape(dims), depth, depth + 1)).reshape(-1)


def transpose2d(b, rows, cols):
    return np.ascontiguousarray(b.reshape(rows, cols).T).reshape(-1)


def bmm(a, b, batch, m, n, p):
    if n == 0:
        return np.zeros(batch * m * p, dtype=F32)
    with np.errstate(all="ignore"):
        return np.matmul(a.reshape(batch, m, n), b.reshape(batch, n, p)).reshape(-1)


def bmm_nt(a, b, batch, m, n, p):
    """a b^T with b stored (batch, p, n): BLAS reads the transposed view, nothing is copied."""
    if n == 0:
        return np.zeros(batch * m * p, dtype=F32)
    with np.errstate(all="ignore"):
        return np.matmul(a.reshape(batch, m, n), b.reshape(batch, p, n).transpose(0, 2, 1)).reshape(-1)


def bmm_tn(a, b, batch, m, n, p):
    """a^T b with a stored (batch, n, m)."""
    if n == 0:
        return np.zeros(batch * m * p, dtype=F32)
    with np.errstate(all="ignore"):
        return np.matmul(a.reshape(batch, n, m).transpose(0, 2, 1), b.reshape(batch, n, p)).reshape(-1)
