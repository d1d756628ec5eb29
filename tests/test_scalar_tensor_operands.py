"""x * c, c * x, x + c and x - c with c a one-element tensor (clip_grad_norm_'s coefficient, a
learning-rate tensor): on the CPU with nothing to record they run as the scalar primitives instead of
expanding c to x's size. The bits must equal the broadcast product's (NumPy's float32 x * c), non-finite
values included, and the recorded path (c or x requiring a gradient) must still give both gradients."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl
from torchlean import autograd
from torchlean.ops import elementwise

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32


def _x():
    x = np.random.default_rng(3).standard_normal((37, 11)).astype(F32)
    x[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    return x


def _bits(a):
    """The bits, every NaN as one (x86 keeps the first operand's NaN payload and sign, so c * x and
    x * c may differ there; no contract tells NaNs apart)."""
    a = np.array(a, F32)
    a[np.isnan(a)] = np.nan
    return a.view(np.uint32)


@pytest.mark.parametrize("c", [0.37, -2.5, 0.0, -0.0, np.inf, np.nan])
@pytest.mark.parametrize("cshape", [(), (1,), (1, 1)])
def test_ops_with_a_one_element_tensor_equal_numpys_broadcast_bits(c, cshape):
    x = _x()
    cv = np.full(cshape, c, F32)
    tx, tc = tl.tensor(x), tl.tensor(cv)
    with np.errstate(all="ignore"):
        cases = [(tx * tc, x * cv), (tc * tx, cv * x), (tx + tc, x + cv), (tc + tx, cv + x), (tx - tc, x - cv),
                 (tc - tx, cv - x)]
    for got, want in cases:
        assert tuple(got.shape) == want.shape
        assert np.array_equal(_bits(got.numpy()), _bits(want))


def test_in_place_scaling_by_a_tensor_skips_the_broadcast(monkeypatch):
    calls = []
    real = elementwise.expand
    monkeypatch.setattr(elementwise, "expand", lambda *a: calls.append(a) or real(*a))
    g = tl.tensor(_x())
    with tl.no_grad():
        g.mul_(tl.tensor(0.5))
    assert not calls
    assert np.array_equal(_bits(g.numpy()), _bits(_x() * F32(0.5)))


def test_recorded_products_still_give_both_gradients():
    x = tl.tensor(_x()[1:], requires_grad=True)
    c = tl.tensor(np.array(0.75, F32), requires_grad=True)
    (x * c).sum().backward()
    assert np.allclose(x.grad.numpy(), 0.75)
    assert np.isclose(float(c.grad.numpy()), float(_x()[1:].astype(np.float64).sum()), rtol=1e-5)
    assert autograd.is_grad_enabled()
