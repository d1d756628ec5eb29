"""Optimizers (SGD, Adam, AdamW), schedulers, clip_grad_norm_ and the fused step primitives.

* every optimizer against torch.optim for 20 steps on the same parameters and gradients
  (float32): |ours - torch| <= TOL_K u (|p| + lr) per step taken (the kernels round as torch's CPU
  kernels do, fma included; the remaining difference is torch's CPU sqrt (MKL, not correctly
  rounded: 0.75 ulp measured) and the rounding differences that it feeds into later steps);
* the fused primitives: known answers (step 1, zero gradients), bitwise equality with a NumPy
  transcription of PyTorch's kernel sequence, and fake kernels that the contracts reject (the
  generic random/edge tests are in test_primitives_parity.py through the table);
* state dicts: a resumed run is bitwise equal to an uninterrupted one; a torch optimizer's state
  dict loads; schedulers equal to torch's for 50 steps; clip_grad_norm_ equal to torch's;
* errors (PyTorch's checks, our unsupported options, the primitives' argument checks).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean import optim
from torchlean.errors import ArgumentError, DeviceError, ShapeError, TorchLeanError
from torchlean.nn.utils import NonFiniteNormError, clip_grad_norm_
from torchlean.optim import lr_scheduler
from torchlean.runtime import Buffer
from torchlean.runtime import primitives as P
from torchlean.runtime import primitives_optim as PO
from torchlean.runtime.arrays import to_host
from torchlean.testing.primitive_table import TABLE, run_case

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:The epoch parameter:UserWarning")]

F32 = np.float32
U = 2.0**-24
TOL_K = 8  # measured worst: 2.5 (Adam), SGD bitwise
SHAPES = [(5, 3), (3,), (7,), (2, 2, 3)]


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, F32).reshape(-1), np.asarray(b, F32).reshape(-1)
    an, bn = np.isnan(a), np.isnan(b)
    return a.shape == b.shape and bool(np.array_equal(an, bn) and np.array_equal(a.view(np.uint32)[~an],
                                                                               b.view(np.uint32)[~bn]))


def make_params(device, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(s).astype(F32) for s in shapes]
    ours = [tl.nn.Parameter(tl.tensor(h, device=device)) for h in host]
    theirs = [torch.nn.Parameter(torch.tensor(h)) for h in host]
    return ours, theirs


def set_grads(ours, theirs, rng, zero_some=False):
    for k, (p, t) in enumerate(zip(ours, theirs)):
        g = (rng.standard_normal(p.shape) * 2.0).astype(F32)
        if zero_some and k == 1:
            g[:] = 0.0
        p.grad = tl.tensor(g, device=p.device)
        t.grad = torch.tensor(g)


def assert_close(ours, theirs, lr, steps, what):
    for i, (p, t) in enumerate(zip(ours, theirs)):
        a, b = p.numpy().astype(np.float64), t.detach().numpy().astype(np.float64)
        tol = TOL_K * U * (np.abs(b) + lr) * steps
        err = np.abs(a - b)
        assert (err <= tol).all(), (f"{what}: param {i} after {steps} steps: max |ours - torch| = {err.max():.3g}, "
                                    f"tolerance {tol[np.argmax(err - tol)]:.3g}")


CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=0.1, betas=(0.3, 0.5))),   # lerp weight >= 0.5: torch's other lerp form
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.5, betas=(0.9, 0.95))),
]


@pytest.mark.parametrize("name, kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_optimizer_matches_torch(name, kw, device):
    ours, theirs = make_params(device)
    opt, topt = getattr(optim, name)(ours, **kw), getattr(torch.optim, name)(theirs, **kw)
    rng = np.random.default_rng(1)
    for step in range(1, 21):
        set_grads(ours, theirs, rng, zero_some=step % 5 == 0)
        opt.step()
        topt.step()
        assert_close(ours, theirs, kw["lr"], step, f"{name}{kw}")
    # the state too: moments (Adam) or momentum buffers (SGD)
    for p, t in zip(ours, theirs):
        st, tst = opt.state[p], topt.state[t]
        assert set(st) == set(tst)
        for key in st:
            a = st[key].numpy()
            b = tst[key].numpy()
            assert np.allclose(a, b, rtol=64 * U, atol=1e-30), key


def test_sgd_is_bitwise_torch():
    # SGD's kernels round exactly as torch's (fma where torch's vector kernel fuses) and torch's
    # SGD takes no sqrt: bitwise equal on sizes that are multiples of the vector width. The last
    # shape is large enough for the CPU kernel to split into parallel chunks.
    ours, theirs = make_params("cpu", 3, [(64,), (16, 8), (256, 300)])
    kw = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    opt, topt = optim.SGD(ours, **kw), torch.optim.SGD(theirs, **kw)
    rng = np.random.default_rng(4)
    for _ in range(20):
        set_grads(ours, theirs, rng)
        opt.step()
        topt.step()
    for p, t in zip(ours, theirs):
        assert same_bits(p.numpy(), t.detach().numpy())


def test_module_training_loop_matches_torch(device):
    """A Linear model trained with Adam and StepLR, gradients from torchlean's backward."""
    tl.manual_seed(0)
    model = tl.nn.Sequential(tl.nn.Linear(6, 8), tl.nn.Tanh(), tl.nn.Linear(8, 2)).to(device)
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    opt, topt = optim.Adam(model.parameters(), lr=0.01), torch.optim.Adam(tmodel.parameters(), lr=0.01)
    sched, tsched = lr_scheduler.StepLR(opt, 5, 0.5), torch.optim.lr_scheduler.StepLR(topt, 5, 0.5)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 6)).astype(F32), rng.standard_normal((16, 2)).astype(F32)
    for step in range(1, 16):
        opt.zero_grad()
        loss = ((model(tl.tensor(x, device=device)) - tl.tensor(y, device=device)) ** 2).mean()
        loss.backward()
        for p, t in zip(model.parameters(), tmodel.parameters()):
            t.grad = torch.tensor(p.grad.numpy())
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert sched.get_last_lr() == tsched.get_last_lr()
        assert_close(list(model.parameters()), list(tmodel.parameters()), 0.01, step, "training loop")
    assert all(p.grad is None for p in model.parameters()) is False
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


# -- the fused primitives ---------------------------------------------------------------------------
def torch_sequence_adam(p, g, m, v, lr, b1, b2, eps, wd, step, decoupled):
    """PyTorch's CPU kernel sequence in NumPy float32 (fma as float64 product + one rounding)."""
    def fma(a, b, c):
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(F32)

    if wd != 0:
        if decoupled:
            p = p * F32(1 - lr * wd)
        else:
            g = fma(p, F32(wd), g)
    w = F32(1 - b1)
    m = fma(w, g - m, m) if w < 0.5 else fma(w - F32(1), g - m, g)
    v = fma(F32(1 - b2) * g, g, v * F32(b2))
    den = np.sqrt(v) / F32((1 - b2**step) ** 0.5) + F32(eps)
    return p + (F32(-lr / (1 - b1**step)) * m) / den, m, v


@pytest.mark.parametrize("decoupled, wd, b1", [(False, 0.0, 0.9), (False, 0.1, 0.9), (True, 0.1, 0.9),
                                                (False, 0.0, 0.2)])
def test_adam_step_rounds_as_torch_sequence(decoupled, wd, b1, device):
    rng = np.random.default_rng(5)
    n = 1027  # not a multiple of the float4 / SIMD width
    p, g, m = (rng.standard_normal(n).astype(F32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(F32)
    out = P.adam_step(*(Buffer.from_numpy(a, device) for a in (p, g, m, v)), n, 1e-3, b1, 0.999, 1e-8, wd, 3,
                      decoupled)
    ref = torch_sequence_adam(p, g, m, v, 1e-3, b1, 0.999, 1e-8, wd, 3, decoupled)
    for o, r in zip(out, ref):
        assert same_bits(o.to_numpy(), r)


def test_adam_step_known_answers(device):
    # step 1 from zero moments: m = (1 - b1) g, v = (1 - b2) g^2, p' = p - lr g / (|g| + eps)
    g = np.array([0.5, -2.0, 0.0, 1e-3], F32)
    p = np.array([1.0, 1.0, -3.0, 0.0], F32)
    z = np.zeros(4, F32)
    pn, mn, vn = P.adam_step(*(Buffer.from_numpy(a, device) for a in (p, g, z, z)), 4, 0.1, 0.9, 0.999, 1e-8, 0.0,
                             1, False)
    np.testing.assert_allclose(pn.to_numpy(), p - 0.1 * g / (np.abs(g) + 1e-8), rtol=4 * U)
    np.testing.assert_allclose(mn.to_numpy(), 0.1 * g, rtol=2 * U)
    np.testing.assert_allclose(vn.to_numpy(), 0.001 * g.astype(np.float64) ** 2, rtol=4 * U)
    assert pn.to_numpy()[2] == -3.0  # zero gradient: unchanged
    # plain SGD: p - lr g; nesterov first step: p - lr (g + momentum g)
    pn, bn = P.sgd_step(Buffer.from_numpy(p, device), Buffer.from_numpy(g, device), None, 4, 0.5, 0.0, 0.0, 0.0,
                        False, True)
    assert same_bits(pn.to_numpy(), p - F32(0.5) * g) and same_bits(bn.to_numpy(), g)
    pn, _ = P.sgd_step(Buffer.from_numpy(p, device), Buffer.from_numpy(g, device), None, 4, 0.5, 0.5, 0.0, 0.0,
                       True, True)
    np.testing.assert_allclose(pn.to_numpy(), p - 0.5 * 1.5 * g, rtol=2 * U)


def test_inputs_are_not_modified(device):
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(9).astype(F32) for _ in range(4)]
    bufs = [Buffer.from_numpy(a, device) for a in arrays]
    P.adam_step(*bufs, 9, 0.1, 0.9, 0.999, 1e-8, 0.1, 2, True)
    P.sgd_step(bufs[0], bufs[1], bufs[2], 9, 0.1, 0.9, 0.0, 0.1, True, False)
    for b, a in zip(bufs, arrays):
        assert same_bits(b.to_numpy(), a)


def _mutated(monkeypatch, name, fn):
    monkeypatch.setattr(PO, name, fn)
    info = TABLE["adam_step"]
    fails = 0
    for seed in range(20):
        args = info.sample(np.random.default_rng(seed), (30,), "normal")
        args[10] = 100  # step: bias corrections matter
        fails += not run_case(info, args, "cpu")[0].ok
    return fails


def test_contract_rejects_wrong_kernels(monkeypatch):
    honest = PO.adam_coefficients
    assert _mutated(monkeypatch, "adam_coefficients", honest) == 0
    # betas rounded to float32 before the bias corrections (not what torch does)
    f = _mutated(monkeypatch, "adam_coefficients",
                 lambda lr, b1, b2, e, wd, s, d: honest(lr, float(F32(b1)), float(F32(b2)), e, wd, s, d))
    assert f >= 5
    # off-by-one step count
    assert _mutated(monkeypatch, "adam_coefficients",
                    lambda lr, b1, b2, e, wd, s, d: honest(lr, b1, b2, e, wd, s + 1, d)) >= 5
    # the second bias correction without its square root
    def no_sqrt(lr, b1, b2, e, wd, s, d):
        c = list(honest(lr, b1, b2, e, wd, s, d))
        c[5] = float(F32(c[5] * c[5]))
        return tuple(c)
    assert _mutated(monkeypatch, "adam_coefficients", no_sqrt) >= 5


def test_sgd_contract_rejects_missing_dampening():
    info = TABLE["sgd_step"]
    args = info.sample(np.random.default_rng(0), (30,), "normal")
    args[4:10] = [0.1, 0.9, 0.5, 0.0, False, False]
    assert run_case(info, args, "cpu")[0].ok
    ref = run_case(info, args, "cpu")[2]
    sargs = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    tol = info.contract.bound(ref, *sargs)
    wrong = list(args)
    wrong[6] = 0.0
    out = run_case(info, wrong, "cpu")[1]
    from torchlean import contract
    assert not contract.compare(out, ref, tol).ok


def test_adam_step_parallel_path_matches_sequential():
    # the CPU kernel runs in parallel chunks from two chunks (2**16 elements) on: same bits as one thread
    from torchlean.kernels.cpu import optim as cpu_optim
    rng = np.random.default_rng(7)
    n = (1 << 17) + 5
    p, g, m = (rng.standard_normal(n).astype(F32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(F32)
    coef = PO.adam_coefficients(1e-3, 0.9, 0.999, 1e-8, 0.01, 4, False)
    par = cpu_optim.adam_step(p, g, m, v, n, *coef)
    ref = torch_sequence_adam(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 4, False)
    for o, r in zip(par, ref):
        assert same_bits(o, r)


# -- state dicts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kw", [("Adam", dict(lr=0.01, weight_decay=0.1)), ("AdamW", {}),
                                      ("SGD", dict(lr=0.1, momentum=0.9))])
def test_state_dict_resume_is_bitwise(name, kw):
    def grads(k):
        rng = np.random.default_rng(100 + k)
        return [rng.standard_normal(s).astype(F32) for s in SHAPES]

    full, _ = make_params("cpu")
    opt = getattr(optim, name)(full, **kw)
    for k in range(20):
        for p, g in zip(full, grads(k)):
            p.grad = tl.tensor(g)
        opt.step()
        if k == 9:
            saved = opt.state_dict()
            saved_params = [p.numpy().copy() for p in full]
    part = [tl.nn.Parameter(tl.tensor(a)) for a in saved_params]
    opt2 = getattr(optim, name)(part, lr=123.0)  # the state dict brings the hyperparameters back
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for k in range(10, 20):
        for p, g in zip(part, grads(k)):
            p.grad = tl.tensor(g)
        opt2.step()
    for a, b in zip(full, part):
        assert same_bits(a.numpy(), b.numpy())
    assert saved["state"][0].keys() == opt.state_dict()["state"][0].keys()
    assert saved["param_groups"][0]["params"] == list(range(len(SHAPES)))


def test_load_torch_state_dict():
    ours, theirs = make_params("cpu")
    topt = torch.optim.Adam(theirs, lr=0.01, weight_decay=0.05)
    rng = np.random.default_rng(8)
    for _ in range(10):
        for t in theirs:
            t.grad = torch.tensor(rng.standard_normal(t.shape).astype(F32))
        topt.step()
    for p, t in zip(ours, theirs):
        p._buf = Buffer.from_numpy(t.detach().numpy(), "cpu")
    opt = optim.Adam(ours)
    opt.load_state_dict(topt.state_dict())
    assert opt.param_groups[0]["weight_decay"] == 0.05
    assert float(opt.state[ours[0]]["step"]) == 10.0
    for k in range(1, 11):
        set_grads(ours, theirs, rng)
        opt.step()
        topt.step()
        assert_close(ours, theirs, 0.01, k, "after loading torch's state dict")
    # and ours loads into torch (tensors converted)
    sd = opt.state_dict()
    conv = {"state": {k: {kk: torch.tensor(vv.numpy()) for kk, vv in st.items()} for k, st in sd["state"].items()},
            "param_groups": sd["param_groups"]}
    topt2 = torch.optim.Adam(theirs)
    topt2.load_state_dict(conv)
    assert float(topt2.state[theirs[0]]["step"]) == 20.0


def test_state_dict_errors():
    ours, _ = make_params("cpu")
    opt = optim.Adam(ours)
    with pytest.raises(ArgumentError, match="parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})
    with pytest.raises(ArgumentError, match="parameters"):
        opt.load_state_dict({"state": {}, "param_groups": [dict(opt.state_dict()["param_groups"][0], params=[0])]})


# -- schedulers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, kw", [("StepLR", dict(step_size=7, gamma=0.3)),
                                     ("CosineAnnealingLR", dict(T_max=12, eta_min=1e-4)),
                                     ("CosineAnnealingLR", dict(T_max=50))])
def test_scheduler_matches_torch(cls, kw):
    ours, theirs = make_params("cpu")
    opt = optim.SGD([{"params": ours[:2]}, {"params": ours[2:], "lr": 0.5}], lr=0.1)
    topt = torch.optim.SGD([{"params": theirs[:2]}, {"params": theirs[2:], "lr": 0.5}], lr=0.1)
    s, ts = getattr(lr_scheduler, cls)(opt, **kw), getattr(torch.optim.lr_scheduler, cls)(topt, **kw)
    assert s.get_last_lr() == ts.get_last_lr()
    for k in range(50):
        opt.step()
        topt.step()
        s.step()
        ts.step()
        assert s.get_last_lr() == ts.get_last_lr(), k
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
        if k == 20:
            sd = s.state_dict()
    s2 = getattr(lr_scheduler, cls)(optim.SGD([{"params": ours[:2]}, {"params": ours[2:]}], lr=0.1), **kw)
    s2.load_state_dict(sd)
    assert s2.last_epoch == 21 and s2.base_lrs == [0.1, 0.5]
    # closed form through step(epoch)
    s.step(30)
    ts.step(30)
    assert s.get_last_lr() == ts.get_last_lr()


# -- clip_grad_norm_ --------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, "inf", 3.0])
@pytest.mark.parametrize("max_norm", [1.0, 1e6])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, device):
    # torch refuses the inf norm of an empty gradient (no identity); ours takes it as 0
    shapes = [(40,), (3, 5), (1,)] + ([(0,)] if norm_type not in (math.inf, "inf") else [])
    ours, theirs = make_params(device, 4, shapes)
    set_grads(ours, theirs, np.random.default_rng(9))
    total = clip_grad_norm_(ours, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert total.shape == ()
    rt = 16 * U if norm_type in (2.0, 1.0, math.inf, "inf") else 64 * U
    assert abs(total.item() - ttotal.item()) <= rt * ttotal.item()
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=2 * rt, atol=1e-30)
    if max_norm == 1e6:  # coefficient clamped to 1: gradients unchanged bit for bit
        for p, t in zip(ours, theirs):
            assert same_bits(p.grad.numpy(), t.grad.numpy())


def test_clip_grad_norm_nonfinite(device):
    p = tl.nn.Parameter(tl.tensor(np.zeros(4, F32), device=device))
    t = torch.nn.Parameter(torch.zeros(4))
    g = np.array([1.0, np.nan, 2.0, np.inf], F32)
    for nt in (2.0, math.inf):
        p.grad, t.grad = tl.tensor(g, device=device), torch.tensor(g)
        a, b = clip_grad_norm_(p, 1.0, nt).item(), torch.nn.utils.clip_grad_norm_(t, 1.0, nt).item()
        assert math.isnan(a) and math.isnan(b)
        p.grad = tl.tensor(g, device=device)
        with pytest.raises(NonFiniteNormError, match="error_if_nonfinite"):
            clip_grad_norm_([p], 1.0, nt, error_if_nonfinite=True)
    p.grad = tl.tensor(np.array([1.0, -np.inf, 2.0, 0.0], F32), device=device)
    assert clip_grad_norm_(p, 1.0, math.inf).item() == math.inf
    assert clip_grad_norm_([], 1.0).item() == 0.0
    assert issubclass(NonFiniteNormError, TorchLeanError)
    with pytest.raises(ArgumentError, match="norm_type"):
        clip_grad_norm_(p, 1.0, 0)


# -- errors -----------------------------------------------------------------------------------------
def test_constructor_errors():
    ours, _ = make_params("cpu")
    with pytest.raises(ArgumentError, match="Invalid learning rate"):
        optim.Adam(ours, lr=-1.0)
    with pytest.raises(ArgumentError, match="Invalid learning rate"):
        optim.SGD(ours, lr=-0.1)
    with pytest.raises(ArgumentError, match="Invalid epsilon"):
        optim.AdamW(ours, eps=-1e-8)
    for betas, idx in (((1.0, 0.9), 0), ((0.9, -0.1), 1), ((-0.5, 0.9), 0), ((0.9, 1.0), 1)):
        with pytest.raises(ArgumentError, match=f"beta parameter at index {idx}"):
            optim.Adam(ours, betas=betas)
    with pytest.raises(ArgumentError, match="Invalid weight_decay"):
        optim.Adam(ours, weight_decay=-1.0)
    with pytest.raises(ArgumentError, match="empty parameter list"):
        optim.Adam([])
    with pytest.raises(ArgumentError, match="more than one parameter group"):
        optim.SGD([{"params": ours[:2]}, {"params": ours[1:]}], lr=0.1)
    with pytest.raises(ArgumentError, match="Nesterov"):
        optim.SGD(ours, lr=0.1, nesterov=True)
    with pytest.raises(ArgumentError, match="Invalid momentum"):
        optim.SGD(ours, lr=0.1, momentum=-0.5)
    for kw in (dict(amsgrad=True), dict(maximize=True), dict(capturable=True), dict(differentiable=True)):
        with pytest.raises(ArgumentError, match="not supported"):
            optim.Adam(ours, **kw)
    with pytest.raises(ArgumentError, match="not supported"):
        optim.SGD(ours, maximize=True)
    optim.Adam(ours, foreach=False, fused=None)  # no-ops, accepted
    optim.AdamW(ours, fused=True)  # nanoGPT asks for fused on CUDA: every step is fused here anyway
    optim.SGD(ours, lr=0.1, foreach=True)
    with pytest.raises(ArgumentError, match="Tensor"):
        optim.Adam(ours[0])
    opt = optim.Adam(ours[:2])
    with pytest.raises(ArgumentError, match="set"):
        opt.add_param_group({"params": set(ours[2:])})
    opt.add_param_group({"params": ours[2:], "lr": 0.5})
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ArgumentError, match="more than one"):
        opt.add_param_group({"params": [ours[0]]})
    with pytest.raises(ArgumentError, match="not an Optimizer"):
        lr_scheduler.StepLR(object(), 3)
    with pytest.raises(ArgumentError, match="step_size"):
        lr_scheduler.StepLR(opt, 0)


def test_primitive_errors():
    b3, b4 = Buffer.from_numpy(np.ones(3, F32)), Buffer.from_numpy(np.ones(4, F32))
    with pytest.raises(ShapeError, match="adam_step: argument v must hold 3"):
        P.adam_step(b3, b3, b3, b4, 3, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step: argument step"):
        P.adam_step(b3, b3, b3, b3, 3, 0.1, 0.9, 0.999, 1e-8, 0.0, 0, False)
    with pytest.raises(ArgumentError, match="adam_step: argument beta1"):
        P.adam_step(b3, b3, b3, b3, 3, 0.1, 1.0, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step: argument lr must be finite"):
        P.adam_step(b3, b3, b3, b3, 3, math.inf, 0.9, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step: argument eps"):
        P.adam_step(b3, b3, b3, b3, 3, 0.1, 0.9, 0.999, -1.0, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step: argument decoupled"):
        P.adam_step(b3, b3, b3, b3, 3, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, "yes")
    with pytest.raises(ArgumentError, match="sgd_step: argument buf may be None only"):
        P.sgd_step(b3, b3, None, 3, 0.1, 0.9, 0.0, 0.0, False, False)
    with pytest.raises(ShapeError, match="sgd_step: argument g must hold 3"):
        P.sgd_step(b3, b4, None, 3, 0.1, 0.0, 0.0, 0.0, False, True)
    with pytest.raises(ArgumentError, match="sgd_step: argument momentum must be a real"):
        P.sgd_step(b3, b3, None, 3, 0.1, "0.9", 0.0, 0.0, False, True)


def test_mixed_devices_are_refused(cuda_device):
    b = Buffer.from_numpy(np.ones(3, F32))
    c = Buffer.from_numpy(np.ones(3, F32), cuda_device)
    with pytest.raises(DeviceError, match="adam_step"):
        P.adam_step(b, c, b, b, 3, 0.1, 0.9, 0.999, 1e-8, 0.0, 1, False)


def test_step_with_closure_and_missing_grads():
    ours, _ = make_params("cpu")
    opt = optim.SGD(ours, lr=0.1)
    before = [p.numpy().copy() for p in ours]
    ours[0].grad = tl.tensor(np.ones(ours[0].shape, F32))
    calls = []
    loss = opt.step(lambda: calls.append(1) or 3.5)
    assert loss == 3.5 and calls == [1]
    assert same_bits(ours[1].numpy(), before[1])  # no grad: untouched
    assert same_bits(ours[0].numpy(), before[0] - F32(0.1))
    opt.zero_grad(set_to_none=False)
    assert (ours[0].grad.numpy() == 0).all()


# -- adam_step_many: T tensors in one call, the same bits as T adam_step calls -----------------
def _many_inputs(rng, sizes):
    return ([rng.standard_normal(s).astype(np.float32) for s in sizes] for _ in range(3))


@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_step_many_equals_adam_step_bitwise(device, decoupled):
    rng = np.random.default_rng(5)
    sizes = [0, 1, 3, 4, 5, 17, 1000, 4099, 2, 0, 64]
    ps, gs, ms = _many_inputs(rng, sizes)
    vs = [np.abs(rng.standard_normal(s)).astype(np.float32) for s in sizes]
    up = lambda arrs: [Buffer.from_numpy(a, device) for a in arrs]  # noqa: E731
    hyper = (3e-3, 0.9, 0.999, 1e-8, 0.05, 4, decoupled)
    out = P.adam_step_many(up(ps), up(gs), up(ms), up(vs), *hyper)
    t = len(sizes)
    assert len(out) == 3 * t
    for i, s in enumerate(sizes):
        one = P.adam_step(*up([ps[i], gs[i], ms[i], vs[i]]), s, *hyper)
        for k in range(3):
            a, b = out[k * t + i].to_numpy(), one[k].to_numpy()
            assert a.shape == (s,) and np.array_equal(a.view(np.uint32), b.view(np.uint32)), (i, k)


def test_adam_step_many_takes_unaligned_views(cuda_device):
    # A DLPack view into the middle of a torch tensor is not 16-byte aligned: it takes the
    # one-tensor kernel's scalar path, with the same bits.
    t = torch.arange(40, dtype=torch.float32, device="cuda") / 7
    views = [tl.from_dlpack(t[1:10])._buf, tl.from_dlpack(t[11:40])._buf]
    plain = [Buffer.from_numpy(v.to_numpy(), cuda_device) for v in views]
    hyper = (1e-2, 0.9, 0.999, 1e-8, 0.0, 2, False)
    a = P.adam_step_many(views, views, views, views, *hyper)
    b = P.adam_step_many(plain, plain, plain, plain, *hyper)
    for x, y in zip(a, b):
        assert np.array_equal(x.to_numpy().view(np.uint32), y.to_numpy().view(np.uint32))


def test_adam_step_many_errors():
    b3, b4 = Buffer.from_numpy(np.ones(3, np.float32)), Buffer.from_numpy(np.ones(4, np.float32))
    hyper = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step_many: ps, gs, ms and vs must have the same length"):
        P.adam_step_many([b3], [b3, b3], [b3], [b3], *hyper)
    with pytest.raises(ShapeError, match=r"adam_step_many.*gs\[0\]"):
        P.adam_step_many([b3], [b4], [b3], [b3], *hyper)
    with pytest.raises(ArgumentError, match="adam_step_many: argument ps must be a list or tuple"):
        P.adam_step_many(b3, [b3], [b3], [b3], *hyper)
    with pytest.raises(ArgumentError, match="adam_step_many: argument beta1"):
        P.adam_step_many([b3], [b3], [b3], [b3], 1e-3, 1.5, 0.999, 1e-8, 0.0, 1, False)
    assert P.adam_step_many([], [], [], [], *hyper) == ()


def test_adam_groups_parameters_into_one_call_per_step_count(monkeypatch):
    # Parameters whose state was loaded at different step counts are stepped in separate calls.
    calls = []
    for name in ("adam_step_many", "adam_step_many_inplace"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, real=real: calls.append((len(a[0]), a[9])) or real(*a))
    ws = [tl.tensor(np.ones(k, np.float32), requires_grad=True) for k in (2, 3, 4)]
    opt = optim.Adam(ws, lr=0.1)
    for w in ws:
        w.grad = tl.ones(*w.shape)
    opt.step()
    opt.state[ws[0]]["step"] = tl.tensor(5.0)
    opt.step()
    assert calls == [(3, 1), (1, 6), (2, 2)]


# -- adam_step_many_inplace: the same bits written over p, m, v; Adam uses it only when unobservable --
@pytest.mark.parametrize("decoupled", [False, True])
def test_adam_step_many_inplace_equals_adam_step_many_bitwise(device, decoupled):
    rng = np.random.default_rng(7)
    sizes = [1, 3, 4, 5, 17, 64, 0, 1031, (1 << 16) + 37]  # the last one: the CPU's parallel chunks
    hyper = (1e-2, 0.9, 0.999, 1e-8, 0.1, 3, decoupled)

    def draw():
        return [[Buffer.from_numpy(rng.standard_normal(n).astype(F32), device) for n in sizes] for _ in range(4)]

    ps, gs, ms, vs = draw()
    vs = [Buffer.from_numpy(np.abs(v.to_numpy()), device) for v in vs]
    out = P.adam_step_many(ps, gs, ms, vs, *hyper)
    before = [g.to_numpy() for g in gs]
    assert P.adam_step_many_inplace(ps, gs, ms, vs, *hyper) == (*ps, *ms, *vs)
    t = len(sizes)
    for i in range(t):
        for got, want in ((ps[i], out[i]), (ms[i], out[t + i]), (vs[i], out[2 * t + i])):
            assert same_bits(got.to_numpy(), want.to_numpy())
        assert same_bits(gs[i].to_numpy(), before[i])  # the gradients are only read


def test_adam_step_many_inplace_refuses_aliased_buffers():
    a, b, c, g = (Buffer.from_numpy(np.ones(3, F32)) for _ in range(4))
    hyper = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1, False)
    with pytest.raises(ArgumentError, match="adam_step_many_inplace: ps, ms and vs must be 3 distinct buffers"):
        P.adam_step_many_inplace([a], [g], [a], [c], *hyper)
    with pytest.raises(ArgumentError, match="none of them in gs"):
        P.adam_step_many_inplace([a], [b], [b], [c], *hyper)
    assert same_bits(a.to_numpy(), np.ones(3, F32))  # nothing was written


def _adam_run(ws_init, grads, hold):
    """Three Adam steps on tensors from ws_init; hold(ws, opt) may keep references; returns the
    final parameters and whatever hold kept."""
    ws = [tl.nn.Parameter(tl.tensor(w)) for w in ws_init]
    opt = optim.Adam(ws, lr=0.05, weight_decay=0.1)
    kept = []
    for k in range(3):
        for w, g in zip(ws, grads[k]):
            w.grad = tl.tensor(g)
        opt.step()
        if k == 0:
            kept.append(hold(ws, opt))
    return [w.numpy() for w in ws], kept


def test_adam_writes_in_place_once_nobody_else_sees_the_buffers(monkeypatch):
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(F32) for s in ((4, 3), (5,))]
    grads = [[rng.standard_normal(w.shape).astype(F32) for w in init] for _ in range(3)]
    calls = _adam_paths(monkeypatch)
    ref, _ = _adam_run(init, grads, lambda ws, opt: None)
    # Parameter(t) shares t's buffer (as torch's does), so the first step gives each parameter a
    # copy of its own, one at a time; the moments are new: every step writes in place
    assert calls == ["copy", "copy"] + ["adam_step_many_inplace"] * 3
    # Whatever another holder keeps is a snapshot: the step after it does not write over it.
    holders = {
        "detach": lambda ws, opt: [(w.detach(), w.numpy().copy()) for w in ws],
        "module-style state dict": lambda ws, opt: [(t, t.numpy().copy()) for t in
                                                    (w.detach() for w in ws)],
        "optimizer state dict": lambda ws, opt: [(t, t.numpy().copy()) for st in opt.state_dict()["state"].values()
                                                 for t in (st["exp_avg"], st["exp_avg_sq"])],
        "raw array": lambda ws, opt: [(w._buf.data, w.numpy().copy()) for w in ws],
        # a slice is a view of the parameter's memory (slice1d's no-copy case)
        "slice view": lambda ws, opt: [(t, t.numpy().copy()) for t in (w.detach()[0] for w in ws)],
    }
    for name, hold in holders.items():
        calls.clear()
        final, kept = _adam_run(init, grads, hold)
        for a, b in zip(final, ref):
            assert same_bits(a, b), name  # the same training either way
        for obj, snap in kept[0]:
            now = obj.numpy() if isinstance(obj, tl.Tensor) else to_host(obj)  # (a raw array: NumPy or CuPy)
            assert same_bits(now, snap), f"{name}: a held buffer was written over"
        assert "copy" in calls[2:], name  # the held tensor's buffer was copied, not written over


def test_adam_step_keeps_a_retained_graph_valid():
    w = tl.nn.Parameter(tl.tensor(np.array([1.0, 2.0], F32)))
    opt = optim.Adam([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    g1 = w.grad.numpy().copy()
    opt.step()  # the retained graph holds w's old buffer: stepped out of place
    w.grad = None
    loss.backward()
    assert same_bits(w.grad.numpy(), g1)  # the graph still sees the values it was built on


def test_a_sliced_parameter_is_never_stepped_in_place():
    # A NumPy view of a view refers to the array that owns the memory, not to the one it was cut
    # from: the reference counts alone would not see a slice1d view of a parameter whose array is
    # itself a view (what most CPU kernels return). Buffer._shared does.
    from torchlean.optim.optimizer import exclusively_held
    from torchlean.runtime.device import get_context

    owner = np.zeros((2, 8), F32)
    w = tl.Tensor._wrap(Buffer(owner.reshape(-1), get_context("cpu", "test")), (16,), requires_grad=True)
    assert exclusively_held(w)
    view = P.slice1d(w._buf, 16, 8, 8)
    assert not exclusively_held(w)
    del view


def _adam_paths(monkeypatch):
    """Records the optimizer's primitive calls by name: the steps and the copies that own_rows makes."""
    calls = []
    for name in ("adam_step_many", "adam_step_many_inplace", "copy"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, name=name, real=real: calls.append(name) or real(*a))
    return calls


def test_naming_a_variable_changes_nothing(monkeypatch):
    """Ownership is kept state, not reference counts: a local name for the parameter's buffer (or
    for its array, taken privately as the kernels do) does not turn in-place steps off."""
    calls = _adam_paths(monkeypatch)
    w = tl.randn(6, requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    for _ in range(3):
        buf = w._buf
        arr = buf._data  # noqa: F841
        w.grad = tl.ones(6)
        opt.step()
    assert calls == ["adam_step_many_inplace"] * 3


def test_a_dropped_holder_costs_one_copy(monkeypatch):
    """A detach() or a graph dropped without backward keeps the buffer's counts up even after it
    dies (Tensors have no finalizer): the next step first gives the parameter a copy of its own,
    and every step writes in place."""
    calls = _adam_paths(monkeypatch)
    w = tl.randn(6, requires_grad=True)
    opt = optim.Adam([w], lr=0.1)
    w.grad = tl.ones(6)
    opt.step()
    d = w.detach()
    del d
    (w * w).sum()  # recorded, never run backward: its node pins w's buffer until it dies
    for _ in range(3):
        w.grad = tl.ones(6)
        opt.step()
    assert calls == ["adam_step_many_inplace", "copy"] + ["adam_step_many_inplace"] * 3


def test_backward_unpins_what_the_tape_read():
    w = tl.randn(5, requires_grad=True)
    loss = w.exp().sum()
    assert w._buf._pins == 1
    loss.backward(retain_graph=True)
    assert w._buf._pins == 1  # a retained graph still reads it
    loss.backward()
    assert w._buf._pins == 0


# -- sgd_step_many: T tensors in one call, the same bits as T sgd_step calls -------------------
# (momentum, dampening, weight_decay, nesterov, first, bufs given): plain SGD, the first step with
# momentum (buffers not read), later steps with dampening, weight decay, nesterov
_SGD_CASES = [(0.0, 0.0, 0.0, False, True, False), (0.0, 0.3, 0.05, False, True, False),
              (0.9, 0.0, 0.01, False, True, False), (0.9, 0.0, 0.1, True, True, True),
              (0.9, 0.3, 0.01, False, False, True), (0.9, 0.0, 0.1, True, False, True),
              (0.5, 0.0, 0.0, False, False, True)]
_SGD_SIZES = [0, 1, 3, 4, 5, 17, 1000, 4099, 2, 0, 64, (1 << 16) + 37]  # the last: the CPU's parallel chunks


def _sgd_many_inputs(rng, sizes, device):
    """ps, gs, bufs as Buffers, with NaN, infinities and huge values among the normal ones."""
    def draw(n):
        a = rng.standard_normal(n).astype(F32)
        a[rng.integers(0, n, min(n, 3))] = rng.choice(np.array([np.nan, np.inf, -np.inf, 3e38], F32), min(n, 3))
        return Buffer.from_numpy(a, device)
    return [[draw(n) for n in sizes] for _ in range(3)]


def _bits(buf):
    return buf.to_numpy().view(np.uint32)


def _sgd_many_case(case, seed, device):
    """(ps, gs, bufs or None, the hyperparameters, sgd_step_many's output) of a _SGD_CASES entry."""
    mom, damp, wd, nesterov, first, given = case
    ps, gs, bufs = _sgd_many_inputs(np.random.default_rng(seed), _SGD_SIZES, device)
    bufs = bufs if given else None
    hyper = (0.05, mom, damp, wd, nesterov, first)
    return ps, gs, bufs, hyper, P.sgd_step_many(ps, gs, bufs, *hyper)


@pytest.mark.parametrize("case", _SGD_CASES)
def test_sgd_step_many_equals_sgd_step_bitwise(device, case):
    ps, gs, bufs, hyper, out = _sgd_many_case(case, 11, device)
    t = len(_SGD_SIZES)
    assert len(out) == 2 * t
    for i, n in enumerate(_SGD_SIZES):
        one = P.sgd_step(ps[i], gs[i], None if bufs is None else bufs[i], n, *hyper)
        for k in range(2):
            a = out[k * t + i]
            assert a.size == n and np.array_equal(_bits(a), _bits(one[k])), (i, k)


@pytest.mark.parametrize("case", _SGD_CASES)
def test_sgd_step_many_inplace_equals_sgd_step_many_bitwise(device, case):
    ps, gs, bufs, hyper, out = _sgd_many_case(case, 12, device)
    before = [_bits(g) for g in gs]
    written = P.sgd_step_many_inplace(ps, gs, bufs, *hyper)
    # the written buffers themselves, in order: ps then bufs (ps alone without bufs: none is kept)
    want = ps if bufs is None else ps + bufs
    assert len(written) == len(want) and all(a is b for a, b in zip(written, want))
    for got, ref in zip(written, out):
        assert np.array_equal(_bits(got), _bits(ref))
    for g, b in zip(gs, before):
        assert np.array_equal(_bits(g), b)  # the gradients are only read


@pytest.mark.cuda
def test_sgd_step_many_takes_unaligned_views(cuda_device):
    # DLPack views into the middle of torch tensors are not 16-byte aligned: they take the
    # one-tensor kernel's scalar path (in place: into scratch, copied back), with the same bits.
    src = [torch.arange(40, dtype=torch.float32, device="cuda") / k for k in (7, 3, 5)]
    views = [[tl.from_dlpack(t[1:10])._buf, tl.from_dlpack(t[11:40])._buf] for t in src]
    plain = [[Buffer.from_numpy(v.to_numpy(), cuda_device) for v in row] for row in views]
    hyper = (1e-2, 0.9, 0.1, 0.01, False, False)
    a = P.sgd_step_many(*views, *hyper)
    b = P.sgd_step_many(*plain, *hyper)
    for x, y in zip(a, b):
        assert np.array_equal(_bits(x), _bits(y))
    P.sgd_step_many_inplace(*views, *hyper)
    for x, y in zip(views[0] + views[2], b):
        assert np.array_equal(_bits(x), _bits(y))


def test_sgd_step_many_errors():
    b3, b4 = Buffer.from_numpy(np.ones(3, F32)), Buffer.from_numpy(np.ones(4, F32))
    hyper = (0.1, 0.9, 0.0, 0.0, False, False)
    with pytest.raises(ArgumentError, match="sgd_step_many: ps, gs and bufs must have the same length"):
        P.sgd_step_many([b3], [b3, b3], [b3], *hyper)
    with pytest.raises(ArgumentError, match="sgd_step_many: ps and gs must have the same length"):
        P.sgd_step_many([b3], [], None, 0.1, 0.0, 0.0, 0.0, False, True)
    with pytest.raises(ShapeError, match=r"sgd_step_many.*gs\[0\]"):
        P.sgd_step_many([b3], [b4], [b3], *hyper)
    with pytest.raises(ShapeError, match=r"sgd_step_many.*bufs\[0\]"):
        P.sgd_step_many([b3], [b3], [b4], *hyper)
    with pytest.raises(ArgumentError, match="sgd_step_many: argument ps must be a list or tuple"):
        P.sgd_step_many(b3, [b3], [b3], *hyper)
    with pytest.raises(ArgumentError, match="sgd_step_many: argument bufs must be a list or tuple"):
        P.sgd_step_many([b3], [b3], b3, *hyper)
    with pytest.raises(ArgumentError, match="sgd_step_many: argument bufs may be None only when first=True"):
        P.sgd_step_many([b3], [b3], None, *hyper)
    with pytest.raises(ArgumentError, match="sgd_step_many: argument momentum must be a real"):
        P.sgd_step_many([b3], [b3], [b3], 0.1, "0.9", 0.0, 0.0, False, False)
    with pytest.raises(ArgumentError, match="sgd_step_many: argument lr must be finite"):
        P.sgd_step_many([b3], [b3], [b3], math.inf, 0.9, 0.0, 0.0, False, False)
    with pytest.raises(ArgumentError, match="sgd_step_many_inplace: argument nesterov must be a bool"):
        P.sgd_step_many_inplace([b3], [b3], [b4], 0.1, 0.9, 0.0, 0.0, "yes", False)
    assert P.sgd_step_many([], [], [], *hyper) == ()
    assert P.sgd_step_many_inplace([], [], None, 0.1, 0.0, 0.0, 0.0, False, True) == ()


def test_sgd_step_many_inplace_refuses_aliased_buffers():
    a, b, g = (Buffer.from_numpy(np.ones(3, F32)) for _ in range(3))
    hyper = (0.1, 0.9, 0.0, 0.0, False, False)
    with pytest.raises(ArgumentError, match="sgd_step_many_inplace: ps and bufs must be 2 distinct buffers"):
        P.sgd_step_many_inplace([a], [g], [a], *hyper)
    with pytest.raises(ArgumentError, match="none of them in gs"):
        P.sgd_step_many_inplace([a], [b], [b], *hyper)
    with pytest.raises(ArgumentError, match="ps and bufs must be 2 distinct buffers"):
        P.sgd_step_many_inplace([a, a], [g, g], None, 0.1, 0.0, 0.0, 0.0, False, True)
    for x in (a, b):
        assert same_bits(x.to_numpy(), np.ones(3, F32))  # nothing was written


# -- SGD.step: one sgd_step_many call per group and buffer presence, in place when unobservable ----
_SGD_KWS = [dict(lr=0.1), dict(lr=0.05, weight_decay=0.01, dampening=0.2),
            dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
            dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1)]
_SGD_STEPS = 4


def _sgd_grads(init, rng):
    """Gradients per step; parameter 1 has none at step 0 (no momentum buffer until step 1) and
    parameter 2 none at step 2."""
    grads = [[rng.standard_normal(w.shape).astype(F32) for w in init] for _ in range(_SGD_STEPS)]
    grads[0][1] = grads[2][2] = None
    return grads


def _sgd_reference(init, grads, kw, device):
    """SGD as it was before sgd_step_many: one P.sgd_step per parameter and step, always rebinding."""
    lr, mom, damp = kw["lr"], kw.get("momentum", 0.0), kw.get("dampening", 0.0)
    wd, nesterov = kw.get("weight_decay", 0.0), kw.get("nesterov", False)
    ps = [Buffer.from_numpy(w.reshape(-1), device) for w in init]
    bufs = [None] * len(init)
    for step in grads:
        for i, g in enumerate(step):
            if g is None:
                continue
            gb = Buffer.from_numpy(g.reshape(-1), device)
            if mom != 0:
                ps[i], bufs[i] = P.sgd_step(ps[i], gb, bufs[i], ps[i].size, lr, mom, damp, wd, nesterov,
                                            bufs[i] is None)
            else:
                ps[i], _ = P.sgd_step(ps[i], gb, None, ps[i].size, lr, 0.0, damp, wd, False, True)
    return [p.to_numpy() for p in ps], [None if b is None else b.to_numpy() for b in bufs]


def _sgd_run(init, grads, kw, device, hold):
    """SGD.step over tensors from init; hold(ws, opt) may keep references after step 0 (before
    step 1); returns the final parameters, momentum buffers and what hold kept."""
    ws = [tl.nn.Parameter(tl.tensor(w, device=device)) for w in init]
    opt = optim.SGD(ws, **kw)
    kept = None
    for k, step in enumerate(grads):
        for w, g in zip(ws, step):
            w.grad = None if g is None else tl.tensor(g, device=device)
        opt.step()
        if k == 0:
            kept = hold(ws, opt)
    bufs = [opt.state[w].get("momentum_buffer") if w in opt.state else None for w in ws]
    return [w.numpy().reshape(-1) for w in ws], [None if b is None else b.numpy().reshape(-1) for b in bufs], kept


_SGD_HOLDERS = {
    "nothing": lambda ws, opt: [],
    "detach": lambda ws, opt: [(t, t.numpy().copy()) for t in (ws[0].detach(),)],
    "optimizer state dict": lambda ws, opt: [(t, t.numpy().copy()) for st in opt.state_dict()["state"].values()
                                             for t in st.values() if t is not None],
    "raw array": lambda ws, opt: [(ws[3]._buf.data, ws[3].numpy().copy())],
}


@pytest.mark.parametrize("holder", list(_SGD_HOLDERS))
@pytest.mark.parametrize("kw", _SGD_KWS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items()))
def test_sgd_equals_per_parameter_sgd_step_bitwise(device, kw, holder):
    rng = np.random.default_rng(21)
    init = [rng.standard_normal(s).astype(F32) for s in SHAPES + [(70000,)]]
    grads = _sgd_grads(init, rng)
    ref_p, ref_b = _sgd_reference(init, grads, kw, device)
    got_p, got_b, kept = _sgd_run(init, grads, kw, device, _SGD_HOLDERS[holder])
    for i, (a, b) in enumerate(zip(got_p, ref_p)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (holder, i)
    for i, (a, b) in enumerate(zip(got_b, ref_b)):
        assert (a is None) == (b is None) and (a is None or np.array_equal(a.view(np.uint32), b.view(np.uint32))), i
    for obj, snap in kept:  # a holder's values are never written over
        now = obj.numpy() if isinstance(obj, tl.Tensor) else to_host(obj)  # (a raw array: NumPy or CuPy)
        assert same_bits(now, snap), holder


def _sgd_paths(monkeypatch):
    """Records (name, tensors) of the steps and ("copy", 1) of the copies that own_rows makes."""
    calls = []
    for name in ("sgd_step_many", "sgd_step_many_inplace", "copy"):
        real = getattr(P, name)
        monkeypatch.setattr(P, name, lambda *a, name=name, real=real: calls.append(
            (name, 1 if name == "copy" else len(a[0]))) or real(*a))
    return calls


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_one_call_per_group_in_place_when_unobservable(monkeypatch, momentum):
    calls = _sgd_paths(monkeypatch)
    ws = [tl.randn(k, requires_grad=True) for k in (2, 3, 4, 5)]
    opt = optim.SGD(ws, lr=0.1, momentum=momentum)

    def step():
        calls.clear()
        for w in ws:
            w.grad = tl.ones(*w.shape)
        opt.step()
        return list(calls)

    # every step writes in place (the first one with momentum into the buffers it makes)
    assert step() == [("sgd_step_many_inplace", 4)]
    assert step() == [("sgd_step_many_inplace", 4)]
    snap = opt.state_dict()
    held = ws[1].detach()
    # w1 (a detached view) and, with momentum, every buffer (in the snapshot) get copies first
    assert step() == [("copy", 1)] * (5 if momentum else 1) + [("sgd_step_many_inplace", 4)]
    del snap, held  # the step above rebound what they held: no copies again
    assert step() == [("sgd_step_many_inplace", 4)]


def test_sgd_buckets_by_momentum_buffer_presence(monkeypatch):
    # a parameter without a gradient at the first step has no buffer at the second: two calls
    calls = _sgd_paths(monkeypatch)
    ws = [tl.randn(3, requires_grad=True) for _ in range(3)]
    opt = optim.SGD(ws, lr=0.1, momentum=0.9)
    ws[0].grad, ws[2].grad = tl.ones(3), tl.ones(3)
    opt.step()
    ws[1].grad = tl.ones(3)
    calls.clear()
    opt.step()
    assert sorted(calls) == [("sgd_step_many_inplace", 1), ("sgd_step_many_inplace", 2)]
    assert all("momentum_buffer" in opt.state[w] for w in ws)


# -- the step-count cache: bounded, and emptied by collect_allocator(True) ----------------------------
@pytest.mark.parametrize("name", ["adam", "adamw", "sgd_momentum"])
def test_optimizer_leaves_no_buffers_behind(name):
    import gc

    from torchlean.optim import optimizer as base
    from torchlean.runtime import allocator_stats, collect_allocator

    make = {"adam": lambda ps: optim.Adam(ps, lr=1e-2), "adamw": lambda ps: optim.AdamW(ps, lr=1e-2),
            "sgd_momentum": lambda ps: optim.SGD(ps, lr=1e-2, momentum=0.9)}[name]
    collect_allocator(True)
    before = allocator_stats("cpu")
    w = tl.randn(8, 4, requires_grad=True)
    b = tl.zeros(4, requires_grad=True)
    opt = make([w, b])
    for _ in range(40):
        opt.zero_grad()
        y = tl.ones(3, 8) @ w + b
        (y * y).sum().backward()
        opt.step()
        assert len(base._step_buffers) <= base._STEP_CACHE_MAX
    del opt, w, b, y
    gc.collect()
    collect_allocator(True)
    after = allocator_stats("cpu")
    # every buffer made for the run is gone (the step cache kept one per step: 41 left behind)
    assert after.alloc_count - before.alloc_count == after.free_count - before.free_count
    assert after.live_bytes == before.live_bytes
