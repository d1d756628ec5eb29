"""dtypes: integer and bool tensors keep PyTorch's dtype through the ops that keep it in PyTorch.

Each case runs the same code under torch and torchlean and compares the result's dtype, device
and values. CPU cases always run; the same table runs on CUDA under the ``cuda`` marker.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")


def _name(d) -> str:
    return str(d).split(".")[-1]


def _check(got, want) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _check(g, w)
        return
    if not isinstance(want, torch.Tensor):
        assert type(got) is type(want) and got == want, (got, want)
        return
    assert isinstance(got, tl.Tensor), type(got)
    assert _name(got.dtype) == _name(want.dtype), (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    g, w = got.numpy(), want.detach().cpu().numpy()
    if want.dtype.is_floating_point:
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    else:
        assert g.dtype == w.dtype and np.array_equal(g, w), (g, w)


I = [[3, -1, 4], [1, -5, 9]]
B = [[True, False, True], [False, False, True]]
F = [[0.5, -1.5, 2.25], [3.0, -0.75, 1.0]]

# (id, code): code(m, dev) -> a tensor (or a tuple / Python value), run under m = torch and m = torchlean
CASES = [
    ("int_add_int", lambda m, d: m.tensor(I, device=d) + 2),
    ("int_radd", lambda m, d: 2 + m.tensor(I, device=d)),
    ("int_sub_rsub", lambda m, d: (m.tensor(I, device=d) - 1, 10 - m.tensor(I, device=d))),
    ("int_mul", lambda m, d: m.tensor(I, device=d) * 3),
    ("int_floordiv", lambda m, d: (m.tensor(I, device=d) // 2, m.tensor(I, device=d) // -2)),
    ("int_mod", lambda m, d: (m.tensor(I, device=d) % 4, m.tensor(I, device=d) % -4)),
    ("int_pow", lambda m, d: m.tensor(I, device=d) ** 2),
    ("int_neg_abs", lambda m, d: (-m.tensor(I, device=d), abs(m.tensor(I, device=d)))),
    ("int_truediv", lambda m, d: m.tensor(I, device=d) / 2),
    ("int_mul_float", lambda m, d: m.tensor(I, device=d) * 1.5),
    ("int_add_floattensor", lambda m, d: m.tensor(I, device=d) + m.tensor(F, device=d)),
    ("int_int_tensors", lambda m, d: m.tensor(I, device=d) * m.tensor(I, device=d) - m.tensor(I, device=d)),
    ("int32_int64", lambda m, d: m.tensor(I, dtype=m.int32, device=d) + m.tensor(I, device=d)),
    ("uint8_int8", lambda m, d: m.tensor([[1, 2, 3]], dtype=m.uint8, device=d) + m.tensor([[1, 2, 3]], dtype=m.int8,
                                                                                           device=d)),
    ("uint8_wraps", lambda m, d: m.tensor([2, 250], dtype=m.uint8, device=d) + 10),
    ("int32_scalar", lambda m, d: m.tensor(I, dtype=m.int32, device=d) * 7),
    ("int16_0d_int64", lambda m, d: m.tensor(I, dtype=m.int16, device=d) + m.tensor(5, device=d)),
    ("bool_add_bool", lambda m, d: m.tensor(B, device=d) + m.tensor(B, device=d)),
    ("bool_mul_bool", lambda m, d: m.tensor(B, device=d) * m.tensor(B, device=d)),
    ("bool_plus_int", lambda m, d: m.tensor(B, device=d) + 1),
    ("bool_times_float", lambda m, d: m.tensor(B, device=d) * 0.5),
    ("bitwise", lambda m, d: (m.tensor(I, device=d) & 6, m.tensor(I, device=d) | 8, m.tensor(I, device=d) ^ 5,
                              ~m.tensor(I, device=d), m.tensor(I, device=d) << 2, m.tensor(I, device=d) >> 1)),
    ("bool_bitwise", lambda m, d: (m.tensor(B, device=d) & m.tensor(B, device=d).logical_not(),
                                   m.tensor(B, device=d) | True, ~m.tensor(B, device=d))),
    ("compare_int", lambda m, d: (m.tensor(I, device=d) > 1, m.tensor(I, device=d) == 4, m.tensor(I, device=d) <= 1.5,
                                  m.tensor(I, device=d).ne(9), m.tensor(I, device=d).ge(m.tensor(I, device=d)))),
    ("compare_float", lambda m, d: (m.tensor(F, device=d) > 0, m.tensor(F, device=d).eq(1.0),
                                    m.tensor(F, device=d) < m.tensor(I, device=d), m.tensor([0.1], device=d) == 0.1)),
    ("logical", lambda m, d: (m.logical_and(m.tensor(I, device=d), m.tensor(B, device=d)),
                              m.logical_or(m.tensor(B, device=d), m.tensor(F, device=d) > 1),
                              m.logical_xor(m.tensor(B, device=d), m.tensor(B, device=d).t().t()),
                              m.logical_not(m.tensor(I, device=d)))),
    ("sum_bool", lambda m, d: ((m.tensor(B, device=d)).sum(), m.tensor(B, device=d).sum(1),
                               m.tensor(B, device=d).sum(0, keepdim=True))),
    ("sum_int32", lambda m, d: m.tensor(I, dtype=m.int32, device=d).sum()),
    ("sum_item", lambda m, d: (m.tensor(F, device=d) > 0).sum().item()),
    ("cat_int", lambda m, d: (m.cat([m.tensor(I, device=d), m.tensor(I, device=d)]),
                              m.cat([m.tensor(I, device=d), m.tensor(I, device=d)], 1))),
    ("cat_mixed", lambda m, d: m.cat([m.tensor(I, device=d), m.tensor(F, device=d)])),
    ("cat_int32_int64", lambda m, d: m.cat([m.tensor(I, dtype=m.int32, device=d), m.tensor(I, device=d)])),
    ("layout_int", lambda m, d: (m.tensor(I, device=d).t(), m.tensor(I, device=d).T,
                                 m.tensor(I, device=d).transpose(0, 1), m.tensor(I, device=d).permute(1, 0),
                                 m.tensor(I, device=d).reshape(3, 2), m.tensor(I, device=d).view(-1),
                                 m.tensor(I, device=d).flatten(), m.tensor(I, device=d).unsqueeze(1),
                                 m.tensor(I, device=d)[:1].squeeze(0), m.tensor(I, device=d)[:1].expand(4, 3),
                                 m.tensor(I, device=d).contiguous() if hasattr(m.Tensor, "contiguous") else
                                 m.tensor(I, device=d).clone())),
    ("layout_3d_bool", lambda m, d: m.tensor([B, B], device=d).permute(2, 0, 1)),
    ("index_int", lambda m, d: (m.tensor(I, device=d)[1], m.tensor(I, device=d)[:, 1:], m.tensor(I, device=d)[0, 2],
                                m.tensor(I, device=d)[m.tensor([1, 0, 1], device=d)],
                                m.tensor(I, device=d)[m.tensor(B, device=d)])),
    ("index_float_by_int", lambda m, d: (m.tensor(F, device=d)[m.tensor([1, 1, 0], device=d)],
                                         m.tensor(F, device=d)[m.tensor(F, device=d) > 0],
                                         m.tensor(F, device=d)[:, m.tensor([2, 0], device=d)])),
    ("conversions", lambda m, d: (m.tensor(F, device=d).long(), m.tensor(F, device=d).int(),
                                  m.tensor(F, device=d).bool(), m.tensor(I, device=d).float(),
                                  m.tensor(I, device=d).to(m.uint8), m.tensor(I, device=d).type(m.int16),
                                  m.tensor(I, device=d).to(dtype=m.bool), m.tensor(B, device=d).long(),
                                  m.tensor(F, device=d).to(m.int8))),
    ("factories", lambda m, d: (m.zeros(2, 3, dtype=m.int64, device=d), m.ones(3, dtype=m.bool, device=d),
                                m.full((2,), 7, device=d), m.full((2,), True, device=d),
                                m.full((2,), 3, dtype=m.float32, device=d), m.arange(5, device=d),
                                m.arange(1, 7, 2, dtype=m.int32, device=d), m.empty(0, dtype=m.int64, device=d),
                                m.tensor([1, 2], dtype=m.int8, device=d), m.tensor(3, device=d),
                                m.tensor([1.7, -1.7], dtype=m.int64, device=d))),
    ("like_and_new", lambda m, d: (m.zeros_like(m.tensor(I, device=d)), m.ones_like(m.tensor(B, device=d)),
                                   m.full_like(m.tensor(I, device=d), 4), m.zeros_like(m.tensor(I, device=d),
                                                                                      dtype=m.float32),
                                   m.tensor(I, device=d).new_zeros(2), m.tensor(I, device=d).new_ones((1, 2)),
                                   m.tensor(I, device=d).new_full((2,), 5), m.tensor(B, device=d).new_tensor([1, 0]),
                                   m.tensor(F, device=d).new_zeros(3, dtype=m.int32))),
    ("clone_copy", lambda m, d: (m.tensor(I, device=d).clone(),
                                 m.zeros(2, 3, dtype=m.int64, device=d).copy_(m.tensor(F, device=d)),
                                 m.zeros(2, 3, device=d).copy_(m.tensor(I, device=d)),
                                 m.zeros(2, 3, dtype=m.int32, device=d).copy_(m.tensor([1, 2, 3], device=d)))),
    ("inplace_int", lambda m, d: _inplace(m, d)),
    ("python_values", lambda m, d: (m.tensor(I, device=d).tolist(), m.tensor(7, device=d).item(),
                                    m.tensor(True, device=d).item(), int(m.tensor([4], device=d)),
                                    [3, 4, 5][m.tensor(1, device=d)], len(m.tensor(I, device=d)),
                                    [t.tolist() for t in m.tensor(I, device=d)], bool(m.tensor([1], device=d)),
                                    f"{m.tensor(2.5, device=d):.3f}", f"{m.tensor(7, device=d):d}", f"{m.tensor([1, 2])}")),
    ("from_numpy", lambda m, d: (m.from_numpy(np.arange(4, dtype=np.int32)), m.from_numpy(np.arange(3)),
                                 m.from_numpy(np.array([True, False])), m.from_numpy(np.arange(3.0)).float())),
    ("data_detach", lambda m, d: (m.tensor(I, device=d).data, m.tensor(F, device=d).data)),
    ("promotion_api", lambda m, d: (_name(m.promote_types(m.uint8, m.int8)), _name(m.promote_types(m.bool, m.int32)),
                                    _name(m.promote_types(m.int64, m.float32)),
                                    _name(m.result_type(m.tensor(I, dtype=m.int32), 5)),
                                    _name(m.result_type(m.tensor(I, dtype=m.uint8), m.tensor(1000))),
                                    _name(m.result_type(m.tensor(B), 2.5)), m.is_floating_point(m.tensor(F)),
                                    m.tensor(I).is_floating_point(), m.is_tensor(m.tensor(I)),
                                    m.iinfo(m.int8).max, m.iinfo(m.uint8).min, m.finfo(m.float32).eps,
                                    m.int64.is_floating_point, m.float32.is_floating_point, m.int32.itemsize,
                                    _name(m.get_default_dtype()), m.tensor(I).dtype == m.int64,
                                    m.tensor(I).dtype == m.long, m.float == m.float32)),
]


def _inplace(m, d):
    x = m.tensor(I, device=d)
    x += 2
    x *= 3
    x -= m.tensor(I, device=d)
    x //= 2
    y = m.tensor(B, device=d)
    y &= m.tensor(B, device=d).logical_not().logical_not()
    z = m.tensor(I, device=d)
    z.fill_(5)
    w = m.tensor(I, device=d)
    w.zero_()
    return x, y, z, w


def _run(code, device):
    """torch on the CPU is the oracle of dtypes and values; torchlean's tensors must be on ``device``."""
    want = code(torch, None)
    got = code(tl, device)
    _check(got, want)
    expect = "cpu" if device is None or code is dict(CASES)["from_numpy"] else "cuda:0"
    for g in (got if isinstance(got, (tuple, list)) else (got,)):
        if isinstance(g, tl.Tensor):
            assert g.device == expect, (g.device, expect)


@pytest.mark.parametrize("code", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_dtype_table_cpu(code):
    _run(code, None)


@pytest.mark.cuda
@pytest.mark.parametrize("code", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_dtype_table_cuda(code, cuda_device):
    _run(code, cuda_device)


def test_int_tensors_hold_arrays_of_their_device():
    x = tl.tensor([[1, 2], [3, 4]])
    assert isinstance(x._arr, np.ndarray) and x._arr.dtype == np.int64
    assert isinstance((x > 1)._arr, np.ndarray) and (x > 1).device == "cpu"


@pytest.mark.cuda
def test_int_tensors_live_on_cuda():
    cupy = pytest.importorskip("cupy")
    x = tl.tensor([[1, 2], [3, 4]], device="cuda")
    for t in (x, x > 1, x + 1, x.t(), x.sum(), tl.randn(2, 2, device="cuda") > 0, x[x > 1], tl.randn(3).long().cuda()):
        assert isinstance(t._arr, cupy.ndarray) and t.device == "cuda:0"
    assert x.cpu().device == "cpu" and isinstance(x.cpu()._arr, np.ndarray) and x.cpu().tolist() == [[1, 2], [3, 4]]
    with pytest.raises(tl.DeviceError, match="add"):
        x + tl.tensor([[1, 2], [3, 4]])
    with pytest.raises(tl.DeviceError, match="cat"):
        tl.cat([x, x.cpu()])
    f = tl.randn(2, 2, device="cuda", requires_grad=True)
    (f * x).sum().backward()  # an int operand on the device joins float math (promoted, no grad of its own)
    np.testing.assert_array_equal(f.grad.numpy(), x.numpy().astype(np.float32))


# -- errors: clear TorchLeanErrors where PyTorch refuses or torchlean computes in float32 only ------------
@pytest.mark.parametrize("code,match", [
    (lambda: tl.tensor([1.0]).double(), "float32"),
    (lambda: tl.tensor([1.0]).half(), "float32"),
    (lambda: tl.tensor([1.0]).to(tl.bfloat16), "float32"),
    (lambda: tl.zeros(2, dtype=tl.float64), "float32"),
    (lambda: tl.tensor([1, 2], dtype=tl.float16), "float32"),
    (lambda: tl.set_default_dtype(tl.float64), "float32"),
    (lambda: tl.tensor([True]) - tl.tensor([True]), "bool"),
    (lambda: -tl.tensor([True]), "bool"),
    (lambda: tl.tensor([1.5]) & 1, "integer or bool"),
    (lambda: ~tl.tensor([1.5]), "integer or bool"),
    (lambda: tl.tensor([3]) // 0, "division by zero"),
    (lambda: tl.tensor([3]) ** -1, "negative integer powers"),
    (lambda: tl.tensor([1, 2]).mean(), "floating point"),
    (lambda: tl.tensor([1, 2]).requires_grad_(), "gradients"),
    (lambda: tl.tensor([1, 2], requires_grad=True), "gradients"),
    (lambda: tl.randn(3)[tl.tensor([0.0])], "integer or boolean"),
    (lambda: _iadd_float(), "cannot be cast"),
    (lambda: f"{tl.tensor([1]):d}", "0-d tensor"),
])
def test_dtype_errors(code, match):
    with pytest.raises(tl.TorchLeanError, match=match):
        code()


def _iadd_float():
    x = tl.tensor([1, 2])
    x += 1.5


def test_dtype_objects():
    assert repr(tl.int64) == "torchlean.int64" and repr(tl.bool) == "torchlean.bool"
    assert tl.long is tl.int64 and tl.int is tl.int32 and tl.short is tl.int16 and tl.double is tl.float64
    assert tl.tensor([1]).dtype == tl.int64 and tl.tensor([1]).dtype != tl.int32
    assert tl.tensor([1.0]).dtype == np.float32  # stores as NumPy's float32
    assert np.zeros(2, dtype=tl.uint8).dtype == np.uint8
    assert {tl.int64: 1}[tl.tensor([3]).dtype] == 1
    assert tl.float16.is_floating_point and tl.bfloat16.itemsize == 2 and not tl.uint8.is_signed
    assert repr(tl.tensor([1, 2], dtype=tl.int32)) == "tensor([1, 2], dtype=torchlean.int32)"


def test_to_accepts_dtype_positionally_and_other_tensor():
    x = tl.tensor([1.7, 2.2])
    assert x.to(tl.int64).tolist() == [1, 2]
    assert x.to("cpu", tl.int32).dtype == tl.int32
    assert x.to(tl.tensor([True])).dtype == tl.bool


def test_randint():
    tl.manual_seed(0)
    a = tl.randint(3, 9, (1000,))
    assert a.dtype == tl.int64 and a.shape == (1000,)
    v = a.numpy()
    assert v.min() == 3 and v.max() == 8
    tl.manual_seed(0)
    assert tl.randint(3, 9, (1000,)).tolist() == a.tolist()
    assert tl.randint(5, (2, 2), dtype=tl.uint8).dtype == tl.uint8
    with pytest.raises(tl.ArgumentError, match="low < high"):
        tl.randint(3, 3, (2,))
