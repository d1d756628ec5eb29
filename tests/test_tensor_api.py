"""The PyTorch-style front end: factories, properties, conversions, devices, dtypes, comparisons,
promotion, error types and messages, and the nn.functional surface against torch's signatures."""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

import torchlean as tl
from torchlean import ops
from torchlean.errors import (ArgumentError, AutogradError, AxisError, DeviceError, DTypeError, ShapeError,
                              TorchLeanError)
from torchlean.runtime import derive_key
from torchlean.runtime import primitives as P
from torchlean.runtime.device import cuda_unavailable_reason
from torchlean.spec import rng as spec_rng

F32 = np.float32


@pytest.fixture(autouse=True)
def _keep_rng_state():
    """Tests here reseed the default generator; leave it as we found it for other modules."""
    state = tl.get_rng_state()
    yield
    tl.set_rng_state(state)


# -- tensor() and dtype inference --------------------------------------------------------------------
@pytest.mark.parametrize("data, dtype, shape", [
    (1.5, tl.float32, ()),
    (3, tl.int64, ()),
    (True, tl.bool, ()),
    ([1.0, 2.0], tl.float32, (2,)),
    ([1, 2, 3], tl.int64, (3,)),
    ([True, False], tl.bool, (2,)),
    ([1, 2.5], tl.float32, (2,)),
    ([[1, 2, 3], [4, 5, 6]], tl.int64, (2, 3)),
    ([[[1.0], [2.0]]], tl.float32, (1, 2, 1)),
    (np.arange(6, dtype=np.float64).reshape(2, 3), tl.float32, (2, 3)),
    (np.arange(4, dtype=np.int32), tl.int32, (4,)),  # NumPy's integer dtypes are kept, as in PyTorch
    (np.array([True, False, True]), tl.bool, (3,)),
    (np.float64(2.0), tl.float32, ()),
    (np.array(7, dtype=np.int16), tl.int16, ()),
    ([], tl.float32, (0,)),
])
def test_tensor_dtype_inference_and_shape(data, dtype, shape):
    t = tl.tensor(data)
    assert t.dtype == dtype
    assert t.shape == shape
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))
    assert t.numpy().dtype == dtype
    assert t.device == "cpu"
    assert not t.requires_grad


def test_tensor_rounds_float64_to_float32():
    v = 0.1
    t = tl.tensor([v])
    assert t.numpy()[0] == np.float32(v)
    assert t.item() == float(np.float32(v))


def test_tensor_explicit_dtype_and_copy():
    assert tl.tensor([1, 2], dtype=tl.float32).dtype == tl.float32
    assert tl.tensor([1, 2], dtype="float32").dtype == tl.float32
    assert tl.tensor([1.7, -2.7], dtype=tl.long).tolist() == [1, -2]
    a = np.array([1.0, 2.0], F32)
    t = tl.tensor(a)
    a[0] = 99.0
    assert t.tolist() == [1.0, 2.0]  # copied
    u = tl.tensor(t)
    assert u is not t and u.tolist() == [1.0, 2.0]
    with pytest.raises(DTypeError):
        tl.tensor([1.0], dtype=np.float64)
    assert tl.tensor([1 + 2j]).dtype is tl.complex64  # complex data: complex64 (tests/test_complex_tensor.py)
    with pytest.raises(ShapeError, match="tensor"):
        tl.tensor([[1.0, 2.0], [3.0]])


def test_tensor_requires_grad():
    t = tl.tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.grad is None
    with pytest.raises(DTypeError):
        tl.tensor([1, 2], requires_grad=True)


# -- factories ------------------------------------------------------------------------------------------
def test_zeros_ones_full():
    for f, v in ((tl.zeros, 0.0), (tl.ones, 1.0)):
        for args in ((2, 3), ((2, 3),), ([2, 3],)):
            t = f(*args)
            assert t.shape == (2, 3) and t.dtype == tl.float32
            np.testing.assert_array_equal(t.numpy(), np.full((2, 3), v, F32))
        assert f().shape == ()
        assert f(0, 3).numel() == 0
    t = tl.full((2, 2), 2.5)
    np.testing.assert_array_equal(t.numpy(), np.full((2, 2), 2.5, F32))
    assert tl.full(3, -1.0).shape == (3,)
    assert tl.zeros(2, requires_grad=True).requires_grad
    with pytest.raises(ShapeError, match="zeros"):
        tl.zeros(-1)
    with pytest.raises(ShapeError):
        tl.ones(2.5)


def test_zeros_like_ones_like():
    x = tl.tensor(np.arange(6.0).reshape(3, 2))
    z, o = tl.zeros_like(x), tl.ones_like(x)
    assert z.shape == o.shape == (3, 2)
    np.testing.assert_array_equal(z.numpy(), np.zeros((3, 2)))
    np.testing.assert_array_equal(o.numpy(), np.ones((3, 2)))
    assert tl.zeros_like(x, requires_grad=True).requires_grad


def test_arange():
    a = tl.arange(5)
    assert a.dtype == tl.int64 and a.tolist() == [0, 1, 2, 3, 4]
    b = tl.arange(2, 8, 2)
    assert b.tolist() == [2, 4, 6]
    c = tl.arange(0.0, 1.0, 0.25)
    assert c.dtype == tl.float32
    np.testing.assert_array_equal(c.numpy(), np.array([0.0, 0.25, 0.5, 0.75], F32))


def test_rand_randn_shapes():
    tl.manual_seed(0)
    assert tl.rand(2, 3).shape == (2, 3)
    assert tl.randn((4,)).shape == (4,)
    assert tl.rand(0).numel() == 0
    assert tl.randn(2, 2, requires_grad=True).requires_grad


def test_rand_reproducible_with_manual_seed():
    tl.manual_seed(1234)
    a1, b1 = tl.rand(3, 4).numpy(), tl.randn(5).numpy()
    tl.manual_seed(1234)
    a2, b2 = tl.rand(3, 4).numpy(), tl.randn(5).numpy()
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(b1, b2)
    tl.manual_seed(1235)
    assert not np.array_equal(tl.rand(3, 4).numpy(), a1)
    # successive draws differ
    tl.manual_seed(1234)
    assert not np.array_equal(tl.rand(3, 4).numpy(), tl.rand(3, 4).numpy())


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_rand_equals_rand_uniform_with_derived_key(seed):
    tl.manual_seed(seed)
    first, second = tl.rand(3, 5), tl.rand(7)
    k0, k1 = derive_key(seed, 0), derive_key(seed, 1)
    np.testing.assert_array_equal(first.numpy().reshape(-1), P.rand_uniform(15, k0).to_numpy())
    np.testing.assert_array_equal(second.numpy(), P.rand_uniform(7, k1).to_numpy())
    # and the exact-integer reference of the spec
    np.testing.assert_array_equal(first.numpy().reshape(-1), spec_rng.rand_uniform(15, k0))
    assert np.all((first.numpy() >= 0) & (first.numpy() <= 1))


def test_randn_equals_rand_normal_with_derived_key():
    seed = 99
    tl.manual_seed(seed)
    z = tl.randn(4, 3).numpy().reshape(-1)
    key = derive_key(seed, 0)
    np.testing.assert_array_equal(z, P.rand_normal(12, key).to_numpy())
    ref = spec_rng.rand_normal(12, key)
    ulp = np.spacing(np.abs(ref).astype(F32)).astype(np.float64)
    assert np.all(np.abs(z - ref) <= ulp)


def test_generator_argument():
    g = tl.Generator(42)
    a = tl.rand(6, generator=g).numpy()
    np.testing.assert_array_equal(a, spec_rng.rand_uniform(6, derive_key(42, 0)))
    tl.manual_seed(42)
    np.testing.assert_array_equal(tl.rand(6).numpy(), a)


def test_bernoulli():
    seed, n = 5, 64
    p = np.linspace(0.0, 1.0, n).astype(F32)
    tl.manual_seed(seed)
    b = tl.bernoulli(tl.tensor(p))
    u = spec_rng.rand_uniform(n, derive_key(seed, 0))
    np.testing.assert_array_equal(b.numpy(), (p > u).astype(F32))
    assert b.dtype == tl.float32 and b.shape == (n,) and not b.requires_grad
    # constant probability: bit for bit the bernoulli_mask primitive (same key, same u)
    tl.manual_seed(seed)
    c = tl.bernoulli(tl.full((n,), 0.3))
    np.testing.assert_array_equal(c.numpy(), spec_rng.bernoulli_mask(n, 0.3, derive_key(seed, 0)))
    np.testing.assert_array_equal(c.numpy(), P.bernoulli_mask(n, 0.3, derive_key(seed, 0)).to_numpy())
    tl.manual_seed(seed)
    assert tl.bernoulli(tl.zeros(2, 3)).numpy().sum() == 0
    assert tl.bernoulli(tl.zeros(2, 3)).shape == (2, 3)
    with pytest.raises(DTypeError):
        tl.bernoulli(0.5)
    with pytest.raises(DTypeError):
        tl.bernoulli(tl.tensor([0, 1]))


# -- properties and conversions -----------------------------------------------------------------------------
def test_properties():
    x = tl.tensor(np.zeros((2, 3, 4), F32))
    assert x.shape == (2, 3, 4)
    assert x.ndim == 3 and x.dim() == 3
    assert x.numel() == 24
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dtype == tl.float32 == np.float32
    assert x.device == "cpu"
    assert x.is_floating_point() and not tl.tensor([1]).is_floating_point()  # a method, as in PyTorch
    with pytest.raises(AxisError, match="size"):
        x.size(3)
    s = tl.tensor(2.0)
    assert s.shape == () and s.ndim == 0 and s.numel() == 1


def test_numpy_item_tolist_float_len_iter():
    x = tl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    a = x.numpy()
    assert a.dtype == F32 and a.shape == (3, 2)
    a[0, 0] = 100.0
    assert x.numpy()[0, 0] == 1.0  # numpy() is a copy
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert len(x) == 3
    rows = list(x)
    assert [r.tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    v = tl.tensor([2.5])
    assert v.item() == 2.5 and isinstance(v.item(), float)
    assert float(tl.tensor(1.25)) == 1.25
    assert int(tl.tensor(3)) == 3 and isinstance(tl.tensor(3).item(), int)
    assert tl.tensor(True).item() is True
    assert bool(tl.tensor([1.0])) is True
    with pytest.raises(ShapeError, match="item"):
        x.item()
    with pytest.raises(ShapeError):
        bool(x)
    with pytest.raises(ShapeError):
        len(tl.tensor(1.0))
    assert np.asarray(x).shape == (3, 2)


def test_repr():
    r = repr(tl.tensor([1.0, 2.5]))
    assert r.startswith("tensor(") and "1." in r and "2.5" in r
    assert "requires_grad=True" in repr(tl.tensor([1.0], requires_grad=True))
    y = tl.tensor([1.0], requires_grad=True) * 2.0
    assert "grad_fn=<" in repr(y)
    assert repr(tl.tensor([1, 2])) == "tensor([1, 2])"  # int64 (and bool) go without a dtype, as in PyTorch
    assert "dtype=torchlean.int32" in repr(tl.tensor([1, 2], dtype=tl.int32))


def test_to_cpu():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    assert x.to("cpu").tolist() == [1.0, 2.0]
    assert x.to("cpu").device == "cpu" and x.cpu().device == "cpu"
    assert x.to(dtype=tl.long).dtype == tl.int64
    y = x.to("cpu") * 3.0
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_unknown_device_is_a_device_error():
    with pytest.raises(DeviceError, match="tpu"):
        tl.zeros(2, device="tpu")
    with pytest.raises(DeviceError):
        tl.tensor([1.0]).to("gpu0")


CUDA_CALLS = {
    "zeros": lambda: tl.zeros(2, device="cuda"),
    "tensor": lambda: tl.tensor([1.0], device="cuda"),
    "rand": lambda: tl.rand(2, device="cuda"),
    "to": lambda: tl.tensor([1.0]).to("cuda"),
    "cuda": lambda: tl.tensor([1.0]).cuda(),
    "to_cuda1": lambda: tl.tensor([1.0]).to("cuda:1"),
    "int_to": lambda: tl.tensor([1, 2]).to("cuda"),
    "bool_cuda": lambda: tl.tensor([True]).cuda(),
}


@pytest.mark.parametrize("name", sorted(CUDA_CALLS))
def test_cuda_unavailable_raises_device_error_with_reason(name):
    reason = cuda_unavailable_reason()
    if reason is None:
        pytest.skip("CUDA is available here; this test checks the error raised where it is not")
    assert not tl.is_cuda_available()
    with pytest.raises(DeviceError) as exc:
        CUDA_CALLS[name]()
    assert "not available" in str(exc.value) and reason in str(exc.value)


def test_float_long_bool_conversions():
    x = tl.tensor([-1.7, 0.0, 2.5])
    lo = x.long()
    assert lo.dtype == tl.int64 and lo.tolist() == [-1, 0, 2]  # truncation toward zero, as torch
    b = x.bool()
    assert b.dtype == tl.bool and b.tolist() == [True, False, True]
    f = tl.tensor([1, 2]).float()
    assert f.dtype == tl.float32 and f.tolist() == [1.0, 2.0]
    assert x.float() is x
    assert tl.tensor([True, False]).float().tolist() == [1.0, 0.0]
    assert not lo.requires_grad


@pytest.mark.parametrize("op, npop", [
    (lambda a, b: a < b, np.less), (lambda a, b: a <= b, np.less_equal),
    (lambda a, b: a > b, np.greater), (lambda a, b: a >= b, np.greater_equal),
    (lambda a, b: a == b, np.equal), (lambda a, b: a != b, np.not_equal),
], ids=["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_return_bool_tensors(op, npop):
    av = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 2.0]], F32)
    bv = np.array([2.0, 2.0, 1.0], F32)
    a = tl.tensor(av, requires_grad=True)
    for other, other_np in ((tl.tensor(bv), bv), (2.0, 2.0), (tl.tensor(av), av)):
        r = op(a, other)
        assert isinstance(r, tl.Tensor), f"comparison returned {type(r).__name__}, not a bool tensor"
        assert r.dtype == tl.bool and not r.requires_grad
        np.testing.assert_array_equal(r.numpy(), npop(av, other_np))


def test_bool_mask_from_comparison_indexes():
    x = tl.tensor([-1.0, 2.0, -3.0, 4.0], requires_grad=True)
    y = x[x > 0]
    assert y.tolist() == [2.0, 4.0]
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 1.0]


# -- dtypes: rejection and promotion --------------------------------------------------------------------------
def test_integer_tensors_rejected_where_float_is_needed():
    i = tl.tensor([1, 2, 3])
    with pytest.raises(DTypeError, match="requires_grad"):
        i.requires_grad_()
    with pytest.raises(DTypeError, match="buffer"):
        i.buffer
    with pytest.raises(DTypeError, match="index_select"):
        ops.index_select(tl.tensor([1.0, 2.0]), 0, tl.tensor([0.0]))
    with pytest.raises(DTypeError, match="gather_vec"):
        ops.gather_vec(tl.tensor([1.0, 2.0]), tl.tensor([True, False]))
    with pytest.raises(DTypeError, match="pow"):
        tl.tensor([1.0]) ** "2"  # (tensor ** tensor is torch.pow's, supported since issue 22)
    with pytest.raises(DTypeError, match="backward"):
        (tl.tensor([1.0], requires_grad=True) * 2.0).backward(tl.tensor([1]))
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, TorchLeanError)


def test_int_float_promotion():
    i = tl.tensor([1, 2, 3])
    f = tl.tensor([0.5, 0.25, 2.0], requires_grad=True)
    for r, expect in ((i + f, [1.5, 2.25, 5.0]), (f * i, [0.5, 0.5, 6.0]), (i - f, [0.5, 1.75, 1.0]),
                      (f / i, [0.5, 0.125, 2.0 / 3.0]), (i * 0.5, [0.5, 1.0, 1.5]), (i + 0.5, [1.5, 2.5, 3.5])):
        assert r.dtype == tl.float32
        np.testing.assert_array_equal(r.numpy(), np.array(expect, F32))
    (i * f).sum().backward()
    assert f.grad.tolist() == [1.0, 2.0, 3.0]
    m = tl.tensor([[1, 0], [0, 1]]) @ tl.tensor([[1.5], [2.5]])
    assert m.dtype == tl.float32 and m.tolist() == [[1.5], [2.5]]


# -- shape errors: right subclass, op name in the message --------------------------------------------------------
X = lambda *s: tl.tensor(np.ones(s, F32))  # noqa: E731

SHAPE_ERRORS = [
    ("add_not_broadcastable", lambda: X(2, 3) + X(4), ShapeError, "add"),
    ("mul_not_broadcastable", lambda: X(2, 3) * X(3, 2), ShapeError, "mul"),
    ("reshape_bad", lambda: X(2, 3).reshape(4, 2), ShapeError, "reshape"),
    ("reshape_two_minus1", lambda: X(2, 3).reshape(-1, -1), ShapeError, "reshape"),
    ("view_bad", lambda: X(2, 3).view(5), ShapeError, "reshape"),
    ("matmul_bad", lambda: X(2, 3) @ X(4, 5), ShapeError, "matmul"),
    ("matmul_0d", lambda: ops.matmul(tl.tensor(1.0), X(2)), ShapeError, "matmul"),
    ("matmul_batch_bad", lambda: X(2, 2, 3) @ X(3, 3, 4), ShapeError, "matmul"),
    ("bmm_bad", lambda: ops.bmm(X(2, 3, 4), X(3, 4, 5)), ShapeError, "bmm"),
    ("linear_bad", lambda: ops.linear(X(2, 3), X(4, 5)), ShapeError, "linear"),
    ("linear_bias_bad", lambda: ops.linear(X(2, 3), X(4, 3), X(3)), ShapeError, "linear"),
    ("cat_mismatch", lambda: ops.cat([X(2, 3), X(2, 4)], 0), ShapeError, "cat"),
    ("cat_rank_mismatch", lambda: ops.cat([X(2, 3), X(3)], 0), ShapeError, "cat"),
    ("cat_empty", lambda: ops.cat([], 0), ShapeError, "cat"),
    ("mse_loss_mismatch", lambda: ops.mse_loss(X(2, 3), X(3, 2)), ShapeError, "mse_loss"),
    ("expand_bad", lambda: X(2, 3).expand((4,)), ShapeError, "expand"),
    ("permute_not_perm", lambda: X(2, 3).permute(0, 0), ShapeError, "permute"),
    ("sum_dim_oob", lambda: X(2, 3).sum(2), AxisError, "sum"),
    ("mean_dim_oob", lambda: X(2, 3).mean(-3), AxisError, "mean"),
    ("transpose_dim_oob", lambda: X(2, 3).transpose(0, 2), AxisError, "transpose"),
    ("softmax_dim_oob", lambda: X(2, 3).softmax(2), AxisError, "softmax"),
    ("log_softmax_dim_oob", lambda: ops.log_softmax(X(2, 3), -3), AxisError, "log_softmax"),
    ("permute_dim_oob", lambda: X(2, 3).permute(0, 2), AxisError, "permute"),
    ("cat_dim_oob", lambda: ops.cat([X(2, 3), X(2, 3)], 2), AxisError, "cat"),
    ("unsqueeze_dim_oob", lambda: X(2, 3).unsqueeze(4), AxisError, "unsqueeze"),
    ("flatten_dim_oob", lambda: X(2, 3).flatten(0, 5), AxisError, "flatten"),
    ("index_select_dim_oob", lambda: ops.index_select(X(2, 3), 2, tl.tensor([0])), AxisError, "index_select"),
    ("index_select_index_oob", lambda: ops.index_select(X(2, 3), 0, tl.tensor([2])), ArgumentError, "index_select"),
]


@pytest.mark.parametrize("name, fn, err, opname", SHAPE_ERRORS, ids=[c[0] for c in SHAPE_ERRORS])
def test_shape_errors(name, fn, err, opname):
    with pytest.raises(err) as exc:
        fn()
    assert isinstance(exc.value, TorchLeanError)
    assert re.search(rf"\b{re.escape(opname)}\b", str(exc.value)), str(exc.value)


def test_error_hierarchy_matches_builtins():
    assert issubclass(ShapeError, ValueError)
    assert issubclass(AxisError, ShapeError) and issubclass(AxisError, IndexError)
    assert issubclass(DeviceError, RuntimeError) and issubclass(AutogradError, RuntimeError)


def test_getitem_out_of_range_is_an_index_error():
    # errors.py: classes derive from the closest built-in so that code written for PyTorch/NumPy
    # catching IndexError keeps working; x[10] on a length-3 tensor is an IndexError there.
    x = X(3, 2)
    with pytest.raises(TorchLeanError, match="getitem"):
        x[10]
    with pytest.raises(IndexError):
        x[10]
    with pytest.raises(IndexError):
        x[:, 5]


# -- torch calling conventions of the Tensor methods ------------------------------------------------------------
def test_methods_accept_torch_calling_conventions():
    x = X(3, 1)
    assert x.reshape(1, 3).shape == x.reshape((1, 3)).shape == (1, 3)
    assert x.view(3).shape == (3,)
    assert x.permute(1, 0).shape == x.permute((1, 0)).shape == (1, 3)
    assert x.sum(dim=0, keepdim=True).shape == (1, 1)
    assert x.mean(dim=(0, 1)).shape == ()
    assert x.softmax(dim=0).shape == (3, 1)
    assert x.unsqueeze(dim=0).shape == (1, 3, 1)
    assert x.squeeze(dim=1).shape == (3,)
    assert x.flatten(start_dim=0).shape == (3,)
    assert x.clamp(min=0.0).shape == (3, 1)
    assert x.expand((2, 3, 4)).shape == (2, 3, 4)
    assert x.transpose(1, 0).shape == (1, 3)


def test_expand_accepts_sizes_as_varargs():
    # torch: Tensor.expand(*sizes) (x.expand(2, 3, 4)) as well as expand(sizes)
    assert X(3, 1).expand(2, 3, 4).shape == (2, 3, 4)
    assert X(3, 1).expand(-1, 5).shape == (3, 5)


def test_transpose_accepts_dim0_dim1_keywords():
    # torch: Tensor.transpose(dim0, dim1)
    assert X(3, 1).transpose(dim0=0, dim1=1).shape == (1, 3)


# -- nn.functional against torch's signatures -----------------------------------------------------------------------
FUNCTIONAL = ["relu", "sigmoid", "tanh", "softplus", "softmax", "log_softmax", "linear", "mse_loss", "dropout"]
# Differences we accept on purpose: torch's softmax/log_softmax default dim=None is a deprecated
# implicit choice (it warns and picks a dim from the rank); torchlean's documented convention is the
# last axis.
ACCEPTED_DEFAULT_DIFFS = {("softmax", "dim"), ("log_softmax", "dim")}
# Extensions: optional parameters torch lacks, which a torch call never passes (dropout's
# generator=, as torch.rand(..., generator=) has).
ACCEPTED_EXTRA = {("dropout", "generator")}


def _torch_params(fn) -> list[tuple[str, object]]:
    """(name, default) of torch's parameters; builtins are read from the first docstring line."""
    try:
        sig = inspect.signature(fn)
        return [(p.name, p.default) for p in sig.parameters.values()]
    except (TypeError, ValueError):
        first = fn.__doc__.strip().splitlines()[0]
        inner = first[first.index("(") + 1:first.rindex(")")]
        out = []
        for part in [p.strip() for p in inner.split(",") if p.strip()]:
            if "=" in part:
                k, v = part.split("=", 1)
                out.append((k.strip(), eval(v.strip())))  # noqa: S307 - torch's own doc literals
            else:
                out.append((part, inspect.Parameter.empty))
        return out


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_matches_torch_signature(name):
    torch = pytest.importorskip("torch", reason="torch's signatures are the reference of this test")
    import torchlean.nn.functional as TF

    assert name in TF.__all__
    ours = inspect.signature(getattr(TF, name)).parameters
    theirs = _torch_params(getattr(torch.nn.functional, name))
    tnames = [n for n, _ in theirs]
    tdefaults = dict(theirs)
    # required (positional) parameters: same names in the same order, so keyword calls port
    ours_required = [p.name for p in ours.values() if p.default is inspect.Parameter.empty]
    theirs_required = [n for n, d in theirs if d is inspect.Parameter.empty]
    assert ours_required == theirs_required, f"{name}: required parameters {ours_required} vs torch {theirs_required}"
    # every optional parameter exists in torch, with the same default
    for p in ours.values():
        if p.default is inspect.Parameter.empty or (name, p.name) in ACCEPTED_EXTRA:
            continue
        assert p.name in tnames, f"{name}: parameter {p.name!r} is not in torch's signature {tnames}"
        if (name, p.name) not in ACCEPTED_DEFAULT_DIFFS:
            assert p.default == tdefaults[p.name], f"{name}({p.name}=...): default {p.default!r} vs torch {tdefaults[p.name]!r}"


def test_functional_calls_like_torch():
    import torchlean.nn.functional as TF

    x = tl.tensor([[1.0, -2.0], [0.5, 3.0]])
    w = tl.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert TF.linear(x, w).shape == (2, 3)
    assert TF.linear(x, w, bias=tl.zeros(3)).shape == (2, 3)
    assert TF.softmax(x, dim=1).shape == (2, 2)
    assert TF.log_softmax(x, dim=0).shape == (2, 2)
    assert TF.mse_loss(x, x, reduction="sum").item() == 0.0
    assert TF.relu(x).tolist() == [[1.0, 0.0], [0.5, 3.0]]
    np.testing.assert_allclose(TF.sigmoid(tl.tensor([0.0])).numpy(), [0.5])
    np.testing.assert_allclose(TF.tanh(tl.tensor([0.0])).numpy(), [0.0])
    np.testing.assert_allclose(TF.softplus(tl.tensor([0.0])).numpy(), [math.log(2.0)], rtol=1e-6)
    assert tl.nn.functional is TF


def test_swap_adjacent_out_of_range_depth_is_the_identity():
    """The seed's Ops page: a depth with no axis pair behind it leaves the tensor as it is."""
    x = tl.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), requires_grad=True)
    for depth in (2, 3, 100):
        y = ops.swap_adjacent(x, depth)
        assert tuple(y.shape) == (2, 3, 4) and np.array_equal(y.numpy(), x.numpy())
    ops.swap_adjacent(x, 5).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.ones((2, 3, 4), np.float32))
    assert tuple(ops.swap_adjacent(tl.zeros(5), 0).shape) == (5,)
    for bad in (-1, 1.0, "0", True):
        with pytest.raises(ArgumentError, match="swap_adjacent"):
            ops.swap_adjacent(x, bad)
