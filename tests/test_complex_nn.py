"""Complex parameters in modules and optimizers, state dicts and files, against torch 2.13: PyTorch's
optimizers step view_as_real(p) of a complex parameter, and so do torchlean's."""

from __future__ import annotations

import io

import numpy as np
import pytest

import torchlean as tl
from torchlean.errors import DTypeError, ShapeError

torch = pytest.importorskip("torch")


def crand(rng, *shape):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)


def _spectral(lib, x, w1, w2, m1=2, m2=2):
    """The reference FNO's spectral product: an einsum per corner written into a zero spectrum."""
    b, _, n1, n2 = x.shape
    out = lib.zeros(b, w1.shape[1], n1, n2, dtype=lib.cfloat)
    out[:, :, :m1, :m2] = lib.einsum("bixy,ioxy->boxy", x[:, :, :m1, :m2], w1)
    out[:, :, -m1:, :m2] = lib.einsum("bixy,ioxy->boxy", x[:, :, -m1:, :m2], w2)
    return out


def _models(rng):
    w1, w2 = crand(rng, 3, 4, 2, 2) * 0.3, crand(rng, 3, 4, 2, 2) * 0.3

    class TL(tl.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tl.nn.Parameter(tl.tensor(w1))
            self.w2 = tl.nn.Parameter(tl.tensor(w2))
            self.lin = tl.nn.Linear(4, 4)

    class TO(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = torch.nn.Parameter(torch.tensor(w1))
            self.w2 = torch.nn.Parameter(torch.tensor(w2))
            self.lin = torch.nn.Linear(4, 4)

    a, b = TL(), TO()
    with torch.no_grad():
        b.lin.weight.copy_(torch.tensor(a.lin.weight.numpy()))
        b.lin.bias.copy_(torch.tensor(a.lin.bias.numpy()))
    return a, b


def _loss(lib, m, x):
    out = _spectral(lib, x, m.w1, m.w2)
    mag = out.abs()  # (b, o, n1, n2)
    return (m.lin(mag.permute(0, 2, 3, 1)) ** 2).mean() + out.real.sum() * 0.01


def test_complex_parameter_registration_and_fno_grads():
    rng = np.random.default_rng(0)
    m, mt = _models(rng)
    assert [n for n, _ in m.named_parameters()] == ["w1", "w2", "lin.weight", "lin.bias"]
    assert m.w1.is_complex() and m.w1.requires_grad and m.w1.is_leaf
    xa = crand(rng, 2, 3, 6, 4)
    x, xt = tl.tensor(xa), torch.tensor(xa)
    lo, lt = _loss(tl, m, x), _loss(torch, mt, xt)
    np.testing.assert_allclose(lo.item(), lt.item(), rtol=1e-5)
    lo.backward()
    lt.backward()
    for (n, p), (_, q) in zip(m.named_parameters(), mt.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=n)
    m.zero_grad()
    assert m.w1.grad is None


@pytest.mark.parametrize("name,kw", [("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                                     ("Adam", dict(lr=0.05)), ("AdamW", dict(lr=0.05, weight_decay=0.1))])
def test_optimizers_match_torch_over_three_steps(name, kw):
    rng = np.random.default_rng(1)
    m, mt = _models(rng)
    xa = crand(rng, 2, 3, 6, 4)
    x, xt = tl.tensor(xa), torch.tensor(xa)
    opt, optt = getattr(tl.optim, name)(m.parameters(), **kw), getattr(torch.optim, name)(mt.parameters(), **kw)
    for _ in range(3):
        opt.zero_grad()
        optt.zero_grad()
        _loss(tl, m, x).backward()
        _loss(torch, mt, xt).backward()
        opt.step()
        optt.step()
    for (n, p), (_, q) in zip(m.named_parameters(), mt.named_parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_clip_grad_norm_uses_moduli():
    rng = np.random.default_rng(2)
    for norm_type in (2.0, 1.0, float("inf")):
        m, mt = _models(rng)
        xa = crand(rng, 2, 3, 6, 4)
        _loss(tl, m, tl.tensor(xa)).backward()
        _loss(torch, mt, torch.tensor(xa)).backward()
        a = tl.nn.utils.clip_grad_norm_(m.parameters(), 0.01, norm_type=norm_type)
        b = torch.nn.utils.clip_grad_norm_(mt.parameters(), 0.01, norm_type=norm_type)
        np.testing.assert_allclose(a.item(), b.item(), rtol=1e-5)
        np.testing.assert_allclose(m.w1.grad.numpy(), mt.w1.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_state_dict_round_trips_and_checks():
    rng = np.random.default_rng(3)
    m, mt = _models(rng)
    sd = m.state_dict()
    assert sd["w1"].is_complex() and sd["w1"].shape == (3, 4, 2, 2)
    m2, _ = _models(np.random.default_rng(4))
    m2.load_state_dict(sd)
    np.testing.assert_array_equal(m2.w1.numpy(), m.w1.numpy())
    m2.load_state_dict(mt.state_dict())  # a PyTorch state dict with complex entries
    np.testing.assert_array_equal(m2.w2.numpy(), mt.w2.detach().numpy())
    bad = dict(sd, w1=tl.zeros(3, 4, 2, 1, dtype=tl.cfloat))
    with pytest.raises(ShapeError, match=r"'w1' has shape \(3, 4, 2, 1\)"):
        m2.load_state_dict(bad)
    with pytest.raises(DTypeError, match="'lin.bias' is complex64"):
        m2.load_state_dict(dict(sd, **{"lin.bias": tl.zeros(4, dtype=tl.cfloat)}))
    opt = tl.optim.Adam(m2.parameters())
    assert opt.param_groups[0]["params"][0] is m2.w1.real_view()


def test_save_load_complex_state_dict():
    rng = np.random.default_rng(5)
    m, _ = _models(rng)
    f = io.BytesIO()
    tl.save({"model": m.state_dict(), "z": tl.tensor(crand(rng, 2)), "p": m.w1}, f)
    f.seek(0)
    back = tl.load(f)
    np.testing.assert_array_equal(back["model"]["w2"].numpy(), m.w2.numpy())
    assert back["z"].is_complex() and back["p"].requires_grad
    assert type(back["p"]).__name__ == "ComplexParameter"


def test_module_to_moves_complex_parameters_in_place():
    m, _ = _models(np.random.default_rng(6))
    w = m.w1
    m.to("cpu").requires_grad_(False)
    assert m.w1 is w and not w.requires_grad


def test_deepcopy_keeps_a_complex_parameter():
    import copy

    m, _ = _models(np.random.default_rng(7))
    m2 = copy.deepcopy(m)
    assert type(m2.w1).__name__ == "ComplexParameter" and m2.w1.real_view() is not m.w1.real_view()
    np.testing.assert_array_equal(m2.w1.numpy(), m.w1.numpy())
