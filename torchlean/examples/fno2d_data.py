"""The data of the 2-D Fourier Neural Operator examples (Li et al., ICLR 2021, sections 5.2 and 5.3),
generated here from a seed: NumPy and SciPy only, float64, vectorized over samples.

* ``grf_periodic``: the Gaussian random field of the paper's Navier-Stokes data,
  N(0, 7^3 (-Delta + 49 I)^(-2.5)) on the unit torus (alpha 2.5, tau 7), mean free.
* ``navier_stokes``: the vorticity form on the unit torus,

      w_t + u . grad w = nu Delta w + f,   u = (psi_y, -psi_x),   -Delta psi = w,

  with nu = 1e-3 and f = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)), solved as the paper's
  generator does: pseudo-spectral in space (rfft2), the advection term explicit and dealiased by
  the 2/3 rule, the diffusion Crank-Nicolson, the vorticity recorded at every unit of time.
* ``grf_cosine`` and ``darcy_coefficient``: the coefficient of the Darcy data, a = 12 where a
  cosine-series Gaussian random field N(0, (-Delta + 9 I)^(-2)) (alpha 2, tau 3) is >= 0, else 3.
* ``darcy_solve``: -div(a grad u) = 1 on the unit square, u = 0 on the boundary: the paper's
  five-point finite differences (coefficients averaged onto the cell faces), one sparse direct
  solve per sample. Solved on a fine grid of n points a side (the paper: 421) and subsampled by
  ``subsample`` (the paper: 5, giving 85 points a side).

The examples keep these data sets in their data cache (torchlean/data_cache.py), keyed by this
file's source too (their ``DATA_MODULES``).
"""

from __future__ import annotations

import math
import sys
from typing import Callable

import numpy as np

NU = 1e-3


def _threads(n_blocks: int, workers: int | None) -> int:
    if workers is None:
        import torchlean

        workers = torchlean.get_num_threads()
    return min(n_blocks, max(1, int(workers)))


def _blocked(fn: Callable[[slice], None], n: int, block: int, workers: int | None) -> None:
    """fn(rows) for consecutive blocks of ``block`` rows of n, on ``workers`` threads (NumPy's FFTs,
    array arithmetic and SuperLU release the GIL). Each row goes through the same operations
    whatever the blocking, so results do not depend on the block size or the thread count."""
    blocks = [slice(s, min(s + block, n)) for s in range(0, n, block)]
    workers = _threads(len(blocks), workers)
    if workers > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fn, blocks))
    else:
        for b in blocks:
            fn(b)


# -- Navier-Stokes ---------------------------------------------------------------------------

def _wavenumbers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """k_x (n, 1) and k_y (1, n // 2 + 1): the integer wavenumbers of rfft2's output, axis 0 is x."""
    k = np.fft.fftfreq(n, 1.0 / n)
    return k[:, None], np.abs(k[None, :n // 2 + 1])


def grf_periodic(rng: np.random.Generator, n_samples: int, n: int, alpha: float = 2.5, tau: float = 7.0) -> np.ndarray:
    """n_samples draws of N(0, tau^(2 alpha - 2) (-Delta + tau^2 I)^(-alpha)) on the unit torus at
    n x n points x_i = i / n (axis 0 is x): float64 (n_samples, n, n). The paper's ``GaussianRF``
    (dim 2, sigma = tau^(alpha - 1)): complex white noise times the covariance's square-root
    eigenvalues, the real part of its inverse FFT; the mean (k = 0) is zero."""
    kx, ky = np.meshgrid(np.fft.fftfreq(n, 1.0 / n), np.fft.fftfreq(n, 1.0 / n), indexing="ij")
    sigma = tau ** (0.5 * (2 * alpha - 2))
    sqrt_eig = n * n * math.sqrt(2.0) * sigma * (4 * math.pi ** 2 * (kx ** 2 + ky ** 2) + tau ** 2) ** (-alpha / 2)
    sqrt_eig[0, 0] = 0.0
    noise = rng.standard_normal((n_samples, n, n, 2))
    coeff = sqrt_eig * (noise[..., 0] + 1j * noise[..., 1])
    return np.fft.ifft2(coeff).real


def ns_forcing(n: int) -> np.ndarray:
    """f = 0.1 (sin 2 pi (x + y) + cos 2 pi (x + y)) at x_i = i / n, y_j = j / n: (n, n)."""
    t = np.arange(n) / n
    s = t[:, None] + t[None, :]
    return 0.1 * (np.sin(2 * math.pi * s) + np.cos(2 * math.pi * s))


def navier_stokes(w0: np.ndarray, forcing: np.ndarray | None, nu: float = NU, t_final: float = 20.0,
                  dt: float = 1e-3, record_every: float = 1.0, workers: int | None = None) -> np.ndarray:
    """The vorticity at t = record_every, 2 record_every, ..., t_final from w0 (n_samples, n, n):
    float64 (n_samples, n, n, n_records). ``forcing`` (n, n) or None (unforced).

    The paper's scheme (its ns_2d.py, there with dt = 1e-4 on a 256 grid): per step, with hats for
    rfft2 coefficients, psi^ = w^ / (4 pi^2 |k|^2), u = psi_y, v = -psi_x and the gradient of w by
    spectral differentiation, N^ = dealias(rfft2(u w_x + v w_y)) (2/3 rule on |k_x| and |k_y|),
    then w^ <- ((1 - dt nu 2 pi^2 |k|^2) w^ + dt (f^ - N^)) / (1 + dt nu 2 pi^2 |k|^2).
    Samples are solved in blocks on ``workers`` threads (bits independent of both)."""
    w0 = np.asarray(w0, dtype=np.float64)
    n_samples, n = w0.shape[0], w0.shape[-1]
    steps = int(round(t_final / dt))
    every = int(round(record_every / dt))
    if steps < 1 or every < 1 or steps % every or abs(steps * dt - t_final) > 1e-9 * t_final:
        raise ValueError(f"navier_stokes: t_final ({t_final}) and record_every ({record_every}) must be whole "
                         f"multiples of dt ({dt}), record_every of dt and t_final of record_every")
    kx, ky = _wavenumbers(n)
    lap = 4 * math.pi ** 2 * (kx ** 2 + ky ** 2)
    lap[0, 0] = 1.0  # psi^ of the mean: w has none (the GRF and the forcing are mean free)
    kmax = n // 2
    dealias = (np.abs(kx) <= 2.0 / 3.0 * kmax) & (ky <= 2.0 / 3.0 * kmax)
    f_h = np.zeros((n, n // 2 + 1), complex) if forcing is None else np.fft.rfft2(forcing)
    ops = (2j * math.pi * kx, 2j * math.pi * ky, lap, dealias, f_h)
    out = np.empty((n_samples, n, n, steps // every))
    block = max(1, (1 << 19) // (16 * n * (n // 2 + 1)))  # about 8 spectra a block in a core's L2

    def solve(rows: slice) -> None:
        out[rows] = _ns_solve(w0[rows], nu, dt, steps, every, ops)

    _blocked(solve, n_samples, block, workers)
    return out


def _ns_solve(w0: np.ndarray, nu: float, dt: float, steps: int, every: int, ops: tuple) -> np.ndarray:
    dx, dy, lap, dealias, f_h = ops
    n = w0.shape[-1]
    shape = (n, n)
    implicit = 0.5 * dt * nu * lap
    gain = (1.0 - implicit) / (1.0 + implicit)
    push = dt / (1.0 + implicit)
    w_h = np.fft.rfft2(w0)
    rec = []
    for step in range(1, steps + 1):
        psi_h = w_h / lap
        u = np.fft.irfft2(dy * psi_h, s=shape)
        v = np.fft.irfft2(-dx * psi_h, s=shape)
        w_x = np.fft.irfft2(dx * w_h, s=shape)
        w_y = np.fft.irfft2(dy * w_h, s=shape)
        adv_h = np.fft.rfft2(u * w_x + v * w_y) * dealias
        w_h = gain * w_h + push * (f_h - adv_h)
        if step % every == 0:
            rec.append(np.fft.irfft2(w_h, s=shape))
    return np.stack(rec, axis=-1)


# -- Darcy flow ------------------------------------------------------------------------------

def grf_cosine(rng: np.random.Generator, n_samples: int, n: int, alpha: float = 2.0, tau: float = 3.0) -> np.ndarray:
    """n_samples draws of the paper's Darcy random field on n x n points of the unit square:
    u = idct2(n tau^(alpha - 1) (pi^2 |k|^2 + tau^2)^(-alpha / 2) xi), xi ~ N(0, 1), k >= 0, the
    k = 0 coefficient zero (its MATLAB GRF.m: orthonormal inverse DCT-II). float64 (n_samples, n, n)."""
    from scipy.fft import idctn

    k1, k2 = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    coef = tau ** (alpha - 1) * (math.pi ** 2 * (k1 ** 2 + k2 ** 2) + tau ** 2) ** (-alpha / 2)
    coef[0, 0] = 0.0
    xi = rng.standard_normal((n_samples, n, n))
    return idctn(n * coef * xi, axes=(-2, -1), norm="ortho")


def darcy_coefficient(field: np.ndarray, high: float = 12.0, low: float = 3.0) -> np.ndarray:
    """The paper's piecewise constant permeability: ``high`` where field >= 0, else ``low``."""
    return np.where(field >= 0, high, low)


def darcy_matrix(a: np.ndarray):
    """The five-point matrix of -div(a grad u) on the (n - 2)^2 interior nodes of an n x n grid
    with spacing h = 1 / (n - 1) and u = 0 on the boundary, a (n, n) given at the nodes: the flux
    across each cell face uses the mean of a at its two nodes (the paper's solve_gwf.m).
    scipy.sparse CSC, rows in C order of the interior (i along axis 0)."""
    import scipy.sparse as sp

    n = a.shape[0]
    m = n - 2
    inv_h2 = float((n - 1) ** 2)
    # face coefficients of interior node (i, j) (1 <= i, j <= n - 2), each (m, m)
    north = 0.5 * (a[1:-1, 1:-1] + a[:-2, 1:-1])   # towards i - 1
    south = 0.5 * (a[1:-1, 1:-1] + a[2:, 1:-1])    # towards i + 1
    west = 0.5 * (a[1:-1, 1:-1] + a[1:-1, :-2])    # towards j - 1
    east = 0.5 * (a[1:-1, 1:-1] + a[1:-1, 2:])     # towards j + 1
    idx = np.arange(m * m).reshape(m, m)
    rows = [idx.ravel()]
    cols = [idx.ravel()]
    vals = [(north + south + west + east).ravel()]
    for coef, di, dj in ((north, -1, 0), (south, 1, 0), (west, 0, -1), (east, 0, 1)):
        ii, jj = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
        ok = (ii + di >= 0) & (ii + di < m) & (jj + dj >= 0) & (jj + dj < m)  # a boundary neighbour is 0
        rows.append(idx[ok])
        cols.append(idx[ii[ok] + di, jj[ok] + dj])
        vals.append(-coef[ok])
    mat = sp.coo_matrix((np.concatenate(vals) * inv_h2, (np.concatenate(rows), np.concatenate(cols))),
                        shape=(m * m, m * m))
    return mat.tocsc()


def _darcy_block(a: np.ndarray) -> np.ndarray:
    """The interior solutions (k, n-2, n-2) of a block of coefficients a (k, n, n), one sparse
    solve each (a module-level function: process pools call it)."""
    from scipy.sparse.linalg import spsolve

    m = a.shape[-1] - 2
    rhs = np.ones(m * m)
    if not len(a):
        return np.zeros((0, m, m))
    # the matrix is symmetric: a minimum-degree ordering of A^T + A fills in less than SuperLU's
    # default COLAMD (BENCHMARKS.md)
    return np.stack([spsolve(darcy_matrix(a_s), rhs, permc_spec="MMD_AT_PLUS_A").reshape(m, m) for a_s in a])


# Grids at least this fine are solved in worker processes: SuperLU keeps the GIL for most of a
# factorization, so threads do not add up there (16 threads ran no faster than one on a 16-core
# host at 421 x 421); below it a process costs more to start than the solves take.
_PROCESS_MIN_GRID = 128


def darcy_solve(a: np.ndarray, workers: int | None = None) -> np.ndarray:
    """u solving -div(a grad u) = 1 on the unit square, u = 0 on the boundary, for each sample's
    node coefficients a (n_samples, n, n): float64 (n_samples, n, n), boundary rows zero. Each
    sample is one solve whatever the worker count, so the bits do not depend on it."""
    a = np.asarray(a, dtype=np.float64)
    n_samples, n = a.shape[0], a.shape[-1]
    out = np.zeros_like(a)
    n_workers = _threads(n_samples, workers)
    if n_workers > 1 and n >= _PROCESS_MIN_GRID and sys.platform.startswith("linux"):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # blocks of a few samples, many more than workers (the solves' times vary with a)
        step = max(1, min(8, n_samples // (4 * n_workers)))
        blocks = [slice(s, min(s + step, n_samples)) for s in range(0, n_samples, step)]
        # fork, as PyTorch's DataLoader workers: the children run SciPy only (never CUDA, which a forked
        # child of a process holding a CUDA context must not touch), and spawn would re-run the user's
        # script in every child
        with ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context("fork")) as pool:
            for b, u in zip(blocks, pool.map(_darcy_block, (a[b] for b in blocks))):
                out[b, 1:-1, 1:-1] = u
        return out

    def solve(rows: slice) -> None:
        out[rows, 1:-1, 1:-1] = _darcy_block(a[rows])

    _blocked(solve, n_samples, 1, workers)
    return out


def darcy_data(rng: np.random.Generator, n_samples: int, solve_grid: int, subsample: int,
               workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(a, u) pairs at every ``subsample``-th node of a ``solve_grid`` grid: float64, each
    (n_samples, s, s) with s = (solve_grid - 1) // subsample + 1 (the paper: 421, 5 -> 85)."""
    if (solve_grid - 1) % subsample:
        raise ValueError(f"darcy_data: solve_grid - 1 ({solve_grid - 1}) must be a multiple of subsample ({subsample})")
    a = darcy_coefficient(grf_cosine(rng, n_samples, solve_grid))
    u = darcy_solve(a, workers)
    return a[:, ::subsample, ::subsample], u[:, ::subsample, ::subsample]
