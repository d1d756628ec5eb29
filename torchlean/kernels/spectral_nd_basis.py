"""The truncated-DFT stages of the 2-D/3-D spectral convolutions, shared by both backends: the
float32 stage matrices (built on the host from float64 angles reduced exactly, rounded once) and
the layout walk that applies them, written once over a ``matmul``.

Axes 0 .. d-1 of lengths n_j keep K_j frequencies: the last (real) axis [0, m), every other axis
the two corners [0, m) and [n - m, n) (K_j = 2 m_j). A spectrum is a real array (L, 2, M),
L = batch * channels, M = K_0 ... K_{d-1}, [re, im] before the modes.

* analysis (the truncated rfftn): the last axis as one GEMM, x (P, n) @ A^T with A (2K, n) = [cos;
  -sin]; then every other axis j, last to first, as a batched GEMM per outer slice:
  (2 K_j, rest) = A_j (2K_j, 2n_j) @ (n_j, 2, rest), A_j rows (c', k), columns (t, c): the complex
  product by exp(-i theta) written as a real 2x2 block. Each stage leaves [re, im] right after the
  next axis' index, so no transposes are ever needed.
* synthesis (NumPy's irfftn of the zero-padded spectrum): the leading axes first, (n_j, 2, rest) =
  S_j (2n_j, 2K_j) @ (2, K_j, rest) (1/n_j exp(+i theta)), then the last axis (P, 2K) @ S^T with
  S (n, 2K) = (c_k / n) [cos | -sin]: the sin column is exactly 0 at bins 0 and n/2, so their
  imaginary parts are ignored after the leading inverses, as the convention asks.
* the adjoints (bwd_x) are the same walks with the transposed matrices: T^H dy is an analysis with
  the S's transposed, E^H dX a synthesis with the A's transposed.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

F32 = np.float32


class Bases(NamedTuple):
    """Per axis: the analysis and synthesis matrices, and their transposes for the adjoint walks."""
    ana: tuple[np.ndarray, ...]
    syn: tuple[np.ndarray, ...]
    ana_t: tuple[np.ndarray, ...]  # the adjoint's synthesis: ana[j].T
    syn_t: tuple[np.ndarray, ...]  # the adjoint's analysis: syn[j].T


def kept(n: int, m: int, last: bool) -> np.ndarray:
    low = np.arange(m, dtype=np.int64)
    return low if last else np.concatenate([low, np.arange(n - m, n, dtype=np.int64)])


def _cos_sin(n: int, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K, n) cos and sin of 2 pi f t / n, f t reduced modulo n exactly, exact at quarter turns."""
    r = (freqs[:, None] * np.arange(n, dtype=np.int64)[None, :]) % n
    theta = 2.0 * np.pi * r / n
    c, s = np.cos(theta), np.sin(theta)
    q = (4 * r) % n == 0
    quarter = ((4 * r) // n) % 4
    c = np.where(q, np.choose(quarter, [1.0, 0.0, -1.0, 0.0]), c)
    s = np.where(q, np.choose(quarter, [0.0, 1.0, 0.0, -1.0]), s)
    return c, s


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=F32)
    a.flags.writeable = False
    return a


def make_bases(ns: tuple[int, ...], ms: tuple[int, ...]) -> Bases:
    d = len(ns)
    ana, syn = [], []
    for j, (n, m) in enumerate(zip(ns, ms)):
        f = kept(n, m, j == d - 1)
        c, s = _cos_sin(n, f)
        k = f.size
        if j == d - 1:
            a = np.concatenate([c, -s])  # (2K, n)
            ck = np.where((f == 0) | (2 * f == n), 1.0, 2.0) / n
            sy = np.concatenate([(ck[:, None] * c).T, (-ck[:, None] * s).T], axis=1)  # (n, 2K)
        else:
            a = np.empty((2, k, n, 2))  # rows (c', k), columns (t, c)
            a[0, :, :, 0], a[0, :, :, 1], a[1, :, :, 0], a[1, :, :, 1] = c, s, -s, c
            a = a.reshape(2 * k, 2 * n)
            sy = np.empty((n, 2, 2, k))  # rows (t, c'), columns (c, k)
            sy[:, 0, 0], sy[:, 0, 1], sy[:, 1, 0], sy[:, 1, 1] = c.T / n, -s.T / n, s.T / n, c.T / n
            sy = sy.reshape(2 * n, 2 * k)
        ana.append(a)
        syn.append(sy)
    return Bases(tuple(_frozen(a) for a in ana), tuple(_frozen(s) for s in syn),
                 tuple(_frozen(a.T) for a in ana), tuple(_frozen(s.T) for s in syn))


def kept_counts(ms: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(m if j == len(ms) - 1 else 2 * m for j, m in enumerate(ms))


Real = Callable[..., object]  # (v (P, n), basis (2K, n)) -> (P, 2K) = v @ basis^T
Batched = Callable[..., object]  # (basis (r, q), v (outer, q, inner)) -> (outer, r, inner)


def analysis(v, lead: int, ns, ks, first: np.ndarray, rest: tuple, real_mm: Real, batched_mm: Batched):
    """(lead, 2, M) from v (lead, n_0 .. n_{d-1}): ``first`` (2K, n) on the last axis, then rest[j]
    (2K_j, 2n_j) on axis j = d-2 .. 0."""
    d = len(ns)
    p = lead * math.prod(ns[:-1])
    s = real_mm(v, first, p, ns[-1])
    inner = ks[-1]
    for j in range(d - 2, -1, -1):
        outer = lead * math.prod(ns[:j])
        s = batched_mm(rest[j], s, outer, 2 * ns[j], inner)
        inner *= ks[j]
    return s


def synthesis(s, lead: int, ns, ks, rest: tuple, last: np.ndarray, real_mm: Real, batched_mm: Batched):
    """(lead, n_0 .. n_{d-1}) from s (lead, 2, M): rest[j] (2n_j, 2K_j) on axis j = 0 .. d-2, then
    ``last`` (n, 2K) on the last axis."""
    d = len(ns)
    for j in range(d - 1):
        outer = lead * math.prod(ns[:j])
        s = batched_mm(rest[j], s, outer, 2 * ks[j], math.prod(ks[j + 1:]))
    p = lead * math.prod(ns[:-1])
    return real_mm(s, last, p, 2 * ks[-1])


def corner_index(ms: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per kept mode (flat, in K order): its corner (sum of 2^j over the leading axes j where the
    mode is in the high corner) and its index into that corner's (m_0, .., m_{d-1}) block."""
    d = len(ms)
    ks = kept_counts(ms)
    grids = np.meshgrid(*[np.arange(k) for k in ks], indexing="ij")
    corner = np.zeros(ks, np.int64)
    local = np.zeros(ks, np.int64)
    for j in range(d):
        hi = grids[j] >= ms[j] if j < d - 1 else np.zeros(ks, bool)
        corner += hi.astype(np.int64) << j
        local = local * ms[j] + np.where(hi, grids[j] - ms[j], grids[j])
    return corner.reshape(-1), local.reshape(-1)
