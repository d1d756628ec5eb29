"""Primitive-table entries of the 2-D and 3-D spectral convolutions.

Every output sums over the whole grid, so the entries draw SUM_KINDS (finite values; which outputs
a NaN reaches is the FFT library's algorithm, tested separately in tests/test_spectral_nd.py).
Random geometries cover even and odd grids, modes at both bounds (1, n//2 on the corner axes,
n//2 + 1 on the last axis), batch and channels 0; the edge cases add 1-wide grids, a Bluestein
length (a prime above 128) and the Nyquist column kept.
"""

from __future__ import annotations

import numpy as np

from .table_core import F32, SUM_KINDS, PrimitiveInfo, add, values


def _pick(rng, pick: int, top: int) -> int:
    return 1 if pick % 3 == 0 else top if pick % 3 == 1 else int(rng.integers(1, top + 1))


def _geometry(rng, d, nd):
    """(batch, cin, cout, ns, ms) from the drawn sizes."""
    batch = 0 if d[0] % 13 == 12 else 1 + d[0] % 2
    cin = 0 if d[1] % 17 == 16 else 1 + d[1] % 3
    cout = 1 + d[2] % 3
    ns, ms = [], []
    for j in range(nd):
        last = j == nd - 1
        n = (1 if last else 2) + int(rng.integers(0, 9 if nd == 2 else 6))
        ns.append(n)
        ms.append(_pick(rng, d[3] + j, n // 2 + 1 if last else n // 2))
    return batch, cin, cout, tuple(ns), tuple(ms)


def _n_w(cin, cout, ms):
    return 2 ** (len(ms) - 1) * cin * cout * int(np.prod(ms)) * 2


def _args(name, batch, cin, cout, ns, ms, draw):
    n_x, n_y = batch * cin * int(np.prod(ns)), batch * cout * int(np.prod(ns))
    args = [draw(n_x, 0), draw(_n_w(cin, cout, ms), 1)]
    if not name.endswith("_fwd"):
        args.append(draw(n_y, 2))
    return args + [batch, cin, cout, *ns, *ms]


def _sampler(name, nd):
    def sample(rng, d, kind):
        return _args(name, *_geometry(rng, d, nd), lambda n, _: values(rng, n, kind))

    return sample


def _case(name, geometry, seed):
    def draw(n, k):
        return np.random.default_rng(seed + k).standard_normal(n).astype(F32)

    return _args(name, *geometry, draw)


_EDGES = {
    2: [
        (1, 1, 1, (2, 1), (1, 1)),      # the smallest grid: one row per corner, the mean column
        (2, 2, 3, (8, 8), (4, 5)),      # both bounds: the corners meet, the Nyquist column kept
        (1, 3, 2, (7, 9), (3, 5)),      # odd sizes at the bounds
        (3, 2, 2, (6, 5), (1, 1)),
        (0, 2, 2, (4, 4), (2, 2)),      # empty batch
        (2, 0, 2, (4, 4), (1, 2)),      # no input channels: zeros
        (1, 1, 2, (4, 131), (2, 3)),    # Bluestein last axis
        (1, 2, 1, (134, 4), (3, 3)),    # a long leading axis (134 = 2 * 67: a generic radix-67 pass)
    ],
    3: [
        (1, 1, 1, (2, 2, 1), (1, 1, 1)),
        (2, 2, 2, (4, 6, 6), (2, 3, 4)),  # every bound at once
        (1, 2, 3, (5, 3, 7), (2, 1, 4)),  # odd sizes
        (0, 1, 2, (4, 4, 4), (1, 1, 1)),
        (2, 0, 1, (4, 2, 3), (1, 1, 2)),
    ],
}

for _nd in (2, 3):
    for _kind in ("fwd", "bwd_x", "bwd_w"):
        _name = f"spectral_conv{_nd}d_rfft_{_kind}"
        add(PrimitiveInfo(_name, _sampler(_name, _nd), 4, kinds=SUM_KINDS, max_dim=30,
                          edge_cases=[_case(_name, g, 10 * i) for i, g in enumerate(_EDGES[_nd])]))
