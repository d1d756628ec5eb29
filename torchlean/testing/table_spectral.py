"""Primitive-table entries of the spectral family: rfft1d_packed, irfft1d_packed and the spectral convolution.

Every entry accumulates (all n inputs reach every output), so it draws SUM_KINDS: finite values
only. NaN and inf are left out on purpose: which bins an FFT turns into NaN is the library's
algorithm (pocketfft keeps Im X_0 = 0 next to a NaN input, a direct sum does not), not a contract.
Random sizes cover even and odd lengths; the edge cases bring n = 1, 2, a Bluestein length (a prime
above 128), tiny grids and modes at the limits (0, 1 and grid//2 + 1, even and odd grid).
"""

from __future__ import annotations

import numpy as np

from .table_core import F32, SUM_KINDS, PrimitiveInfo, add, values

_CONV_BWD = ("spectral_conv1d_rfft_bwd_x", "spectral_conv1d_rfft_bwd_wre", "spectral_conv1d_rfft_bwd_wim",
             "spectral_conv1d_rfft_bwd_w")


def _ar(n: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (np.arange(n, dtype=np.float64) * scale + shift).astype(F32)


def _mix(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(F32)


# -- rfft / irfft ----------------------------------------------------------------------------------------
def _rfft(rng, d, kind):
    batch, n = d[0] % 4, 1 + d[1]
    return [values(rng, batch * n, kind), batch, n]


def _irfft(rng, d, kind):
    batch, n = d[0] % 4, 1 + d[1]
    return [values(rng, batch * (n // 2 + 1) * 2, kind), batch, n]


add(PrimitiveInfo("rfft1d_packed", _rfft, 2, kinds=SUM_KINDS, max_dim=40, edge_cases=[
    [_ar(4, 1.0, 1.0), 1, 4],                  # [1, 2, 3, 4]: bin 1 = -2 + 2i
    [np.zeros(0, F32), 0, 5],                  # no rows
    [np.array([3.5, -1.0], F32), 2, 1],        # n = 1: X_0 = x_0, Im 0
    [_mix(6, 1), 3, 2],                        # n = 2
    [_mix(2 * 131, 2), 2, 131],                # a prime above RADIX_MAX (Bluestein)
    [np.eye(8, dtype=F32).reshape(-1), 8, 8],  # deltas: every bin of modulus 1
    [np.full(30, 1e-40, F32), 2, 15],          # subnormal inputs
]))
add(PrimitiveInfo("irfft1d_packed", _irfft, 2, kinds=SUM_KINDS, max_dim=40, edge_cases=[
    [np.array([1, 5, 2, 3, 3, 7], F32), 1, 4],    # Im of bins 0 and 2 ignored (even n)
    [np.array([1, 5, 2, 3, 3, 7], F32), 1, 5],    # odd n: only Im X_0 ignored
    [np.zeros(0, F32), 0, 3],
    [np.array([3.0, 9.0, -2.0, 4.0], F32), 2, 1],  # n = 1: x_0 = Re X_0
    [_mix(2 * 2 * 2, 3), 2, 2],                    # n = 2
    [_mix(3 * 66 * 2, 4), 3, 131],                 # Bluestein length
]))


# -- spectral convolution --------------------------------------------------------------------------------
def _conv_geometry(rng, d):
    """(batch, grid, width, modes): batch 0-3 (0 rare), grid 1-24, width 1-4 (0 rare), modes 0..grid//2+1
    with both limits common (0 rare)."""
    batch = 0 if d[0] % 13 == 12 else 1 + d[0] % 3
    grid = 1 + d[1] % 24
    width = 0 if d[2] % 17 == 16 else 1 + d[2] % 4
    top = grid // 2 + 1
    pick = d[3] % 9
    modes = 0 if pick == 8 else 1 if pick % 4 == 0 else top if pick % 4 == 1 else int(rng.integers(1, top + 1))
    return batch, grid, width, modes


def _conv_args(name: str):
    def sample(rng, d, kind):
        batch, grid, width, modes = _conv_geometry(rng, d)
        n_x, n_w = batch * grid * width, modes * width * width
        x, wr, wi = values(rng, n_x, kind), values(rng, n_w, kind), values(rng, n_w, kind)
        if name == "spectral_conv1d_rfft_fwd":
            return [x, wr, wi, grid, width, modes, batch]
        return [x, wr, wi, values(rng, n_x, kind), grid, width, modes, batch]

    return sample


def _case(name, batch, grid, width, modes, seed):
    n_x, n_w = batch * grid * width, modes * width * width
    args = [_mix(n_x, seed), _mix(n_w, seed + 1), _mix(n_w, seed + 2)]
    if name != "spectral_conv1d_rfft_fwd":
        args.append(_mix(n_x, seed + 3))
    return args + [grid, width, modes, batch]


_GEOMETRIES = [
    (1, 1, 1, 1),     # grid 1: the only bin
    (2, 2, 3, 2),     # grid 2, modes = 2: bin 0 and the Nyquist bin
    (2, 8, 3, 5),     # even grid, modes = grid//2 + 1 (Nyquist kept)
    (2, 8, 3, 1),     # modes = 1: the mean only
    (1, 9, 2, 5),     # odd grid, modes at the limit (no Nyquist bin)
    (3, 7, 4, 3),
    (0, 6, 2, 2),     # empty batch
    (2, 5, 0, 2),     # no channels
    (1, 131, 2, 4),   # Bluestein grid
    (2, 8, 3, 0),     # modes = 0: no bin kept, zeros (the seed accepts it)
]
for _name in ("spectral_conv1d_rfft_fwd",) + _CONV_BWD:
    add(PrimitiveInfo(_name, _conv_args(_name), 4, kinds=SUM_KINDS, max_dim=40,
                       edge_cases=[_case(_name, *g, seed=10 * i) for i, g in enumerate(_GEOMETRIES)]))
