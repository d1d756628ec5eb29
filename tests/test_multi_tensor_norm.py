"""clip_grad_norm_'s multi-tensor primitives, norm2_many and scale_many, and the p = 2 path built on them.

* scale_many is bitwise mul(x, broadcast_to(coef, n)) per tensor (specials, subnormals, signed zeros);
* norm2_many within about an ulp of a float64 reference (known answers, huge and tiny values that a
  float32 sum of squares would overflow or flush), its CPU kernel summing in exactly the order of the
  CUDA kernels (a NumPy model of optim.cu's two kernels, written from the .cu file), bits that do
  not depend on the thread count, and a contract that rejects a float32 sum and a dropped element;
* the arguments' checks (types, lengths, a non-length-1 coef);
* clip_grad_norm_(norm_type=2): a number of primitive calls that does not grow with the number of
  parameters, and agreement with torch for many parameters of mixed sizes;
* on CUDA (``cuda_device``): the same bits as the CPU (norm2_many: the same order of summation;
  scale_many: one product), repeatable bits, T above one launch's table, unaligned DLPack views,
  the pointer tables reused.
(The primitive table's random and edge cases run through test_primitives_parity.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean import contract, spec
from torchlean.errors import ArgumentError, BufferReleasedError, DeviceError, DTypeError, ShapeError, TorchLeanError
from torchlean.nn.utils import clip_grad_norm_
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
U = 2.0**-24
CHUNK = 8192  # TL_NORM2_CHUNK in optim.cu (kernels/cpu/optim.py: _N2_CHUNK)
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 1e20, 1e-30,
                     0.5, -2.0], F32)


def up(a, device="cpu") -> Buffer:
    return Buffer.from_numpy(np.asarray(a, dtype=F32), device)


def bits(a) -> np.ndarray:
    """float32 bits, every NaN as one pattern (payloads may differ between kernels)."""
    a = np.asarray(a.to_numpy() if isinstance(a, Buffer) else a, F32).reshape(-1).copy()
    a[np.isnan(a)] = np.nan
    return a.view(np.uint32)


def lists(seed: int, kinds=("normal", "wide", "special"), t: int = 12, big: int = 0) -> list[np.ndarray]:
    """t float32 arrays of sizes 0..13 and a few over a chunk (plus one of ``big`` elements)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        n = int(rng.integers(0, 3 * CHUNK)) if i % 5 == 3 else int(rng.integers(0, 14))
        kind = kinds[i % len(kinds)]
        if kind == "normal":
            v = rng.standard_normal(n) * 2.0
        elif kind == "wide":
            v = 10.0 ** rng.uniform(-25, 25, n) * rng.choice([-1.0, 1.0], n)
        else:
            v = np.where(rng.random(n) < 0.3, rng.choice(SPECIALS, n), rng.standard_normal(n))
        out.append(v.astype(F32))
    if big:
        out.insert(t // 2, (rng.standard_normal(big) * 0.01).astype(F32))
    return out


def norm_ref(xs) -> np.ndarray:
    return spec.norm2_many([x.astype(np.float64) for x in xs])


def assert_norms_close(got: np.ndarray, xs) -> None:
    ref = norm_ref(xs)
    tol = contract.CONTRACTS["norm2_many"].bound(ref, [x.astype(np.float64) for x in xs])
    verdict = contract.compare(got, ref, tol)
    assert verdict.ok, verdict.detail


# -- scale_many -------------------------------------------------------------------------------------
def _mul_broadcast(x: Buffer, coef: Buffer) -> Buffer:
    return P.mul(x, P.broadcast_to(coef, (), (x.size,), (0,)))


@pytest.mark.parametrize("c", [0.3, 1.0, -0.0, np.inf, np.nan, 1e-45, 3e38, 1.5e-7, -2.5])
def test_scale_many_equals_mul_bitwise(device, c):
    xs = [up(a, device) for a in lists(3, kinds=("normal", "wide", "special")) + [SPECIALS, SPECIALS[3:]]]
    coef = up([c], device)
    out = P.scale_many(xs, coef)
    assert isinstance(out, tuple) and len(out) == len(xs)
    for x, o in zip(xs, out):
        assert o.size == x.size and o.device == x.device and o is not x
        assert np.array_equal(bits(o), bits(_mul_broadcast(x, coef))), (c, x.size)


def test_scale_many_leaves_inputs_and_edge_lists(device):
    xs = [up(a, device) for a in lists(4)]
    before = [bits(x) for x in xs]
    coef = up([0.25], device)
    P.scale_many(xs, coef)
    assert all(np.array_equal(b, bits(x)) for b, x in zip(before, xs))
    assert np.array_equal(bits(coef), bits(np.array([0.25], F32)))
    assert P.scale_many([], coef) == ()
    assert P.scale_many((), up([1.0])) == ()  # T = 0: no device to match
    empty = P.scale_many([up([], device), up([], device)], coef)
    assert [b.size for b in empty] == [0, 0]


# -- norm2_many -------------------------------------------------------------------------------------
def test_norm2_many_known_answers(device):
    xs = [[3.0, 4.0], [], [-0.0], [1e20, -1e20, 1e20, -1e20], [1e-30] * 4, [1e-45], [3.4e38, 3.4e38],
          [np.inf, 1.0], [np.nan, np.inf], [-np.inf], [2.0] * (CHUNK + 1)]
    got = P.norm2_many([up(a, device) for a in xs]).to_numpy()
    assert got.dtype == F32 and got.shape == (len(xs),)
    assert got[0] == 5.0 and got[1] == 0.0 and got[2] == 0.0 and not np.signbit(got[2])
    assert got[3] == F32(2e20)           # squares of 1e20 overflow float32, not double
    assert got[4] == F32(2e-30)          # squares of 1e-30 underflow float32, not double
    assert got[5] == F32(1e-45)          # the smallest subnormal: sqrt of its exact square
    assert got[6] == np.inf              # 4.8e38: beyond float32
    assert got[7] == np.inf and np.isnan(got[8]) and got[9] == np.inf
    assert got[10] == F32(2.0 * np.sqrt(CHUNK + 1))
    t0 = P.norm2_many([])
    assert t0.size == 0 and t0.device == "cpu"


@pytest.mark.parametrize("seed", range(4))
def test_norm2_many_within_an_ulp_of_float64(device, seed):
    xs = lists(seed, big=300_000 if seed == 0 else 0)
    got = P.norm2_many([up(a, device) for a in xs]).to_numpy()
    assert_norms_close(got, xs)
    ref = norm_ref(xs)
    fin = np.isfinite(ref) & (ref < 3e38)
    # about an ulp: the double sum is far inside float32's rounding
    assert np.all(np.abs(got[fin].astype(np.float64) - ref[fin]) <= 1.01 * U * ref[fin] + 2.0**-149)


def test_norm2_many_is_repeatable_and_leaves_inputs(device):
    xs = [up(a, device) for a in lists(5, big=100_000)]
    before = [bits(x) for x in xs]
    a, b = P.norm2_many(xs), P.norm2_many(tuple(xs))
    assert np.array_equal(bits(a), bits(b))
    assert all(np.array_equal(v, bits(x)) for v, x in zip(before, xs))


def _tree32(v: np.ndarray) -> np.ndarray:
    """CUDA's xor butterfly on each row of 32 lanes: v += __shfl_xor_sync(v, o), o = 16 .. 1."""
    lanes = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        v = v + v[..., lanes ^ o]
    return v


def cuda_model(x: np.ndarray) -> F32:
    """optim.cu's norm2_many, modelled from the kernels' text: per chunk of 8192 elements, thread j
    of 256 adds the quad sums (x0^2 + x1^2) + (x2^2 + x3^2) of quads j + 256 k, k = 0..7, in k order
    (missing elements 0); tl_block_sum_d: a butterfly per warp, then the 8 warp sums (lanes 8..31
    zero) through one more; tl_norm2_many_finish: lane l adds partials l, l + 32, ... in order, a
    butterfly; (float)sqrt."""
    n = x.size
    partials = []
    for lo in range(0, n, CHUNK):
        xc = np.zeros(CHUNK)
        xc[:min(n - lo, CHUNK)] = x[lo:lo + CHUNK]
        q = xc.reshape(8, 256, 4)  # [k, j, element of the quad]: quad j + 256 k
        acc = np.zeros(256)
        for k in range(8):
            v = q[k]
            acc = acc + ((v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1]) + (v[:, 2] * v[:, 2] + v[:, 3] * v[:, 3]))
        warps = _tree32(acc.reshape(8, 32))[:, 0]
        second = np.zeros(32)
        second[:8] = warps
        partials.append(_tree32(second)[0])
    lanes = np.zeros(32)
    for c, p in enumerate(partials):
        lanes[c % 32] = lanes[c % 32] + p
    return F32(np.sqrt(_tree32(lanes)[0]))


@pytest.mark.parametrize("seed", range(3))
def test_cpu_kernel_sums_in_the_cuda_kernels_order(seed):
    # sizes that cross chunks and lane counts: 33 chunks make lane 0 add two partials
    rng = np.random.default_rng(seed)
    xs = lists(10 + seed, t=10) + [(rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(F32)
                                   for n in (CHUNK - 3, 33 * CHUNK + 5, 70_001)]
    got = P.norm2_many([up(a) for a in xs]).to_numpy()
    want = np.array([cuda_model(a) for a in xs], F32)
    assert np.array_equal(bits(got), bits(want))


def test_norm2_many_bits_do_not_depend_on_threads(numba_threads):
    xs = [(np.random.default_rng(2).standard_normal(40 * CHUNK + 7) * 3.0).astype(F32),
          np.linspace(-1, 1, 5, dtype=F32)]
    got = P.norm2_many([up(a) for a in xs]).to_numpy()
    want = np.array([cuda_model(a) for a in xs], F32)
    assert np.array_equal(bits(got), bits(want)), numba_threads


def test_norm2_many_contract_rejects_a_float32_sum_and_a_dropped_element():
    rng = np.random.default_rng(7)
    xs = [(rng.standard_normal(200_000) * (1.0 + rng.random(200_000))).astype(F32), np.full(3, 1e20, F32)]
    x64 = [x.astype(np.float64) for x in xs]
    ref = spec.norm2_many(x64)
    tol = contract.CONTRACTS["norm2_many"].bound(ref, x64)
    honest = P.norm2_many([up(a) for a in xs]).to_numpy()
    assert contract.compare(honest, ref, tol).ok
    with np.errstate(over="ignore"):  # float32 squares, a float32 running sum: 1e20^2 overflows
        f32_sum = np.array([np.sqrt(np.cumsum(x * x, dtype=F32)[-1]) for x in xs], F32)
    assert not contract.compare(f32_sum, ref, tol).ok
    dropped = np.array([np.sqrt(np.sum(x[1:].astype(np.float64) ** 2)) for x in xs], F32)
    assert not contract.compare(dropped, ref, tol).ok


# -- argument checks ------------------------------------------------------------------------------------
def test_errors():
    b3, c1 = up([1.0, 2.0, 3.0]), up([0.5])
    for op, call in (("norm2_many", lambda xs: P.norm2_many(xs)), ("scale_many", lambda xs: P.scale_many(xs, c1))):
        with pytest.raises(ArgumentError, match=f"{op}: argument xs must be a list or tuple of Buffers, got Buffer"):
            call(b3)
        with pytest.raises(ArgumentError, match=f"{op}: argument xs must be a list or tuple"):
            call(np.ones((2, 3), F32))
        with pytest.raises(DTypeError, match=rf"{op}: argument xs\[1\] must be a Buffer, got ndarray"):
            call([b3, np.ones(3, F32)])
        with pytest.raises(DTypeError, match=rf"{op}: argument xs\[0\] must be a Buffer, got float"):
            call([1.0])
        gone = up([1.0])
        gone.release()
        with pytest.raises(BufferReleasedError, match=rf"{op}: argument xs\[1\] was used after release"):
            call([b3, gone])
    with pytest.raises(ShapeError, match="scale_many: argument coef must be a length-1 Buffer .* got 3 elements"):
        P.scale_many([b3], b3)
    with pytest.raises(ShapeError, match="scale_many: argument coef must be a length-1 Buffer .* got 0 elements"):
        P.scale_many([b3], up([]))
    with pytest.raises(ShapeError, match="scale_many: argument coef"):
        P.scale_many([], b3)  # checked with no tensors too
    with pytest.raises(DTypeError, match="scale_many: argument coef must be a Buffer, got float"):
        P.scale_many([b3], 0.5)
    with pytest.raises(DTypeError, match="scale_many: argument coef must be a Buffer, got ndarray"):
        P.scale_many([b3], np.array([0.5], F32))
    assert issubclass(ShapeError, TorchLeanError) and issubclass(DeviceError, TorchLeanError)
    # (mixed devices need a GPU: test_cuda_mixed_devices_are_refused below)


# -- clip_grad_norm_(norm_type=2) ---------------------------------------------------------------------------
def _count_calls(monkeypatch):
    """Record every primitive (P.__all__) called through the primitives module from now on."""
    calls = []
    for name in P.__all__:
        f = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, _n=name, _f=f, **k: calls.append(_n) or _f(*a, **k))
    return calls


def _params(device, sizes, seed=0):
    rng = np.random.default_rng(seed)
    ours, theirs = [], []
    for n in sizes:
        w = rng.standard_normal(n).astype(F32)
        g = (rng.standard_normal(n) * 3.0).astype(F32)
        p = tl.nn.Parameter(tl.tensor(w, device=device))
        p.grad = tl.tensor(g, device=device)
        t = torch.nn.Parameter(torch.tensor(w))
        t.grad = torch.tensor(g)
        ours.append(p)
        theirs.append(t)
    return ours, theirs


def test_clip_grad_norm_launches_do_not_grow_with_parameters(device, monkeypatch):
    counts = []
    for t in (2, 9, 60):
        ours, _ = _params(device, [3 + 5 * i for i in range(t)], seed=t)
        calls = _count_calls(monkeypatch)
        clip_grad_norm_(ours, 0.5)
        counts.append(list(calls))
        monkeypatch.undo()
    assert counts[0] == counts[1] == counts[2], counts
    assert counts[0].count("norm2_many") == 1 and counts[0].count("scale_many") == 1
    assert len(counts[0]) <= 10, counts[0]
    # the other orders keep their per-gradient path
    ours, _ = _params(device, [4, 5, 6])
    calls = _count_calls(monkeypatch)
    clip_grad_norm_(ours, 0.5, norm_type=1.0)
    assert "norm2_many" not in calls and "scale_many" not in calls


@pytest.mark.parametrize("max_norm", [0.5, 1e9])
def test_clip_grad_norm_many_parameters_matches_torch(device, max_norm):
    sizes = [1, 7, 64, 3, 0, 2 * CHUNK + 1, 130, 5, 33_000, 1] * 4
    ours, theirs = _params(device, sizes, seed=11)
    before = [p.grad for p in ours]
    total = clip_grad_norm_(ours, max_norm)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert total.shape == () and total.device == ours[0].device
    assert abs(total.item() - ttotal.item()) <= 16 * U * ttotal.item()
    for p, t, g0 in zip(ours, theirs, before):
        assert p.grad is g0  # the same gradient tensors, rebound to their scaled values
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=32 * U, atol=1e-30)
    if max_norm == 1e9:  # coefficient 1: the gradients' bits unchanged
        for p, t in zip(ours, theirs):
            assert np.array_equal(bits(p.grad.numpy()), bits(t.grad.numpy()))


def test_clip_grad_norm_rebinds_as_mul_does(device):
    # the scaled gradients are what g.mul_(coef) gives under no_grad, bit for bit, and the
    # gradients that needed no scaling are left as they were
    from torchlean.nn.utils import clip_grad

    ours, _ = _params(device, [5, 9, 12, 1], seed=3)
    twins, _ = _params(device, [5, 9, 12, 1], seed=3)
    total = clip_grad_norm_(ours, 0.25)
    coef = tl.Tensor._wrap(clip_grad._coefficient(total.buffer, 0.25, total.device), ())
    assert 0.0 < coef.item() < 1.0
    with tl.no_grad():
        for t in twins:
            t.grad.mul_(coef)
    for p, t in zip(ours, twins):
        assert p.grad.shape == t.grad.shape
        assert np.array_equal(bits(p.grad.numpy()), bits(t.grad.numpy()))


# -- CUDA: the same bits as the CPU ---------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("seed", range(3))
def test_cuda_norm2_many_same_bits_as_cpu(cuda_device, seed):
    xs = lists(20 + seed, t=40, big=(6_500_000 if seed == 0 else 70_000))
    cpu = P.norm2_many([up(a) for a in xs]).to_numpy()
    dev_bufs = [up(a, cuda_device) for a in xs]
    gpu = P.norm2_many(dev_bufs)
    assert gpu.device.startswith("cuda") and gpu.size == len(xs)
    assert np.array_equal(bits(gpu), bits(cpu))
    for _ in range(3):  # repeatable
        assert np.array_equal(bits(P.norm2_many(dev_bufs)), bits(cpu))
    assert_norms_close(gpu.to_numpy(), xs)


@pytest.mark.cuda
def test_cuda_norm2_many_and_scale_many_many_tensors(cuda_device):
    # 1500 tensors: norm2_many is still two launches (no per-launch tensor limit), scale_many two
    # launches of its 1024-tensor table; empty tensors among them
    rng = np.random.default_rng(4)
    xs = [(rng.standard_normal(int(n)) * 2.0).astype(F32) for n in rng.integers(0, 40, 1500)]
    xs[700] = (rng.standard_normal(3 * CHUNK + 1)).astype(F32)
    coef = np.array([0.37], F32)
    cpu_n = P.norm2_many([up(a) for a in xs]).to_numpy()
    gpu_bufs = [up(a, cuda_device) for a in xs]
    assert np.array_equal(bits(P.norm2_many(gpu_bufs)), bits(cpu_n))
    cpu_s = P.scale_many([up(a) for a in xs], up(coef))
    gpu_s = P.scale_many(gpu_bufs, up(coef, cuda_device))
    for a, b in zip(cpu_s, gpu_s):
        assert b.device.startswith("cuda") and np.array_equal(bits(a), bits(b))
    # all tensors empty: zeros, no partials
    assert np.array_equal(P.norm2_many([up([], cuda_device)] * 3).to_numpy(), np.zeros(3, F32))


@pytest.mark.cuda
@pytest.mark.parametrize("c", [0.3, -0.0, np.nan, 1e-45, 3e38])
def test_cuda_scale_many_same_bits_as_cpu_and_mul(cuda_device, c):
    xs = lists(30, t=20) + [SPECIALS]
    coef = np.array([c], F32)
    cpu = P.scale_many([up(a) for a in xs], up(coef))
    gbufs = [up(a, cuda_device) for a in xs]
    gcoef = up(coef, cuda_device)
    gpu = P.scale_many(gbufs, gcoef)
    for a, b, x in zip(cpu, gpu, gbufs):
        assert np.array_equal(bits(a), bits(b))
        assert np.array_equal(bits(b), bits(_mul_broadcast(x, gcoef)))


@pytest.mark.cuda
def test_cuda_unaligned_views(cuda_device):
    # DLPack views into the middle of a torch tensor are not 16-byte aligned: both kernels load
    # them as scalars, in the same order (norm2_many) or with the same products (scale_many)
    t = torch.arange(3 * CHUNK + 40, dtype=torch.float32, device="cuda") / 7 - 300.0
    views = [tl.from_dlpack(t[1:10])._buf, tl.from_dlpack(t[11:CHUNK + 30])._buf,
             tl.from_dlpack(t[CHUNK + 33:])._buf]
    plain = [Buffer.from_numpy(v.to_numpy(), cuda_device) for v in views]
    assert np.array_equal(bits(P.norm2_many(views)), bits(P.norm2_many(plain)))
    assert np.array_equal(bits(P.norm2_many(views)), bits(P.norm2_many([up(v.to_numpy()) for v in views])))
    coef = up([0.3], cuda_device)
    for a, b in zip(P.scale_many(views, coef), P.scale_many(plain, coef)):
        assert np.array_equal(bits(a), bits(b))


@pytest.mark.cuda
def test_cuda_tables_are_reused(cuda_device, monkeypatch):
    from torchlean.kernels.cuda import optim as cuda_optim

    built = []
    table = cuda_optim._table
    monkeypatch.setattr(cuda_optim, "_table", lambda *a: built.append(1) or table(*a))
    xs = [up(a, cuda_device) for a in lists(40, t=6)]
    first = P.norm2_many(xs)
    assert len(built) == 1
    assert np.array_equal(bits(P.norm2_many(xs)), bits(first))
    assert len(built) == 1  # the same pointers and sizes: the kept table
    P.norm2_many(xs[:-1])
    assert len(built) == 2


@pytest.mark.cuda
def test_cuda_mixed_devices_are_refused(cuda_device):
    g, c = up([1.0, 2.0], cuda_device), up([1.0, 2.0])
    with pytest.raises(ArgumentError, match=r"norm2_many: all buffers must be on one device; xs\[0\] is on cuda"):
        P.norm2_many([g, c])
    with pytest.raises(ArgumentError, match=r"scale_many: all buffers must be on one device"):
        P.scale_many([c, g], up([0.5]))
    with pytest.raises(DeviceError, match="scale_many: expected all buffers on one device"):
        P.scale_many([g], up([0.5]))


@pytest.mark.cuda
def test_cuda_clip_grad_norm_matches_cpu(cuda_device):
    sizes = [1, 7, 64, 3, 0, 2 * CHUNK + 1, 130, 5, 33_000, 1] * 3
    cpu, _ = _params("cpu", sizes, seed=12)
    gpu, _ = _params(cuda_device, sizes, seed=12)
    a, b = clip_grad_norm_(cpu, 0.5), clip_grad_norm_(gpu, 0.5)
    # the per-gradient norms agree in bits; reduce_sum adds their float32 squares in a different
    # order on the two backends (pairwise float32 on the CPU, double on CUDA)
    assert abs(a.item() - b.item()) <= 16 * U * a.item()
    for p, q in zip(cpu, gpu):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=40 * U, atol=1e-30)
