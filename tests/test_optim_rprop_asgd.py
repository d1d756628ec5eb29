"""Rprop and ASGD against torch.optim (CPU, torch's single-tensor path).

* signatures: names, order, kinds and defaults are torch's;
* a small model's parameters, in two groups, take 5 steps beside torch's with the same injected
  gradients (zeros among them, so Rprop's sign-0 branch runs) and end within float32 rounding
  (Rprop: the step-size clamps and the sign-flip branch are checked to have run; ASGD: with t0
  small enough that the running average moves by mu < 1);
* a complex parameter is stepped through its real view, as torch steps view_as_real(p);
* state: created at the first step as in torch, PyTorch's keys and shapes, a state_dict loads
  into a fresh optimizer (ours or torch's dict) and the run continues exactly;
* bad hyperparameters raise ArgumentError naming the call where torch raises ValueError;
* maximize is the step on the negated gradient.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean import optim
from torchlean.errors import ArgumentError, TorchLeanError

F32 = np.float32
SHAPES = [(5, 4), (5,), (3, 5), (3,)]  # Linear(4, 5) -> Linear(5, 3)

CASES = [
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.02, etas=(0.3, 1.5), step_sizes=(5e-3, 0.05))),
    ("Rprop", dict(lr=0.02, etas=(0.3, 1.5), step_sizes=(5e-3, 0.05), maximize=True)),
    ("ASGD", dict()),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=1, weight_decay=0.1)),
    ("ASGD", dict(lr=0.05, lambd=0.2, t0=0, maximize=True)),
]
IDS = [f"{n}-{'-'.join(sorted(kw)) or 'defaults'}" for n, kw in CASES]


def host(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def make_pair(name, kw, seed=0):
    """A Linear-Linear model's parameters under both frameworks, in two groups (the second with
    its own lr)."""
    rng = np.random.default_rng(seed)
    m = tl.nn.Sequential(tl.nn.Linear(4, 5), tl.nn.Tanh(), tl.nn.Linear(5, 3))
    ours = list(m.parameters())
    assert [p.shape for p in ours] == SHAPES
    init = [rng.standard_normal(s).astype(F32) for s in SHAPES]
    with tl.no_grad():
        for p, h in zip(ours, init):
            p.copy_(tl.tensor(h))
    theirs = [torch.nn.Parameter(torch.tensor(h)) for h in init]
    lr2 = kw.get("lr", 0.01) * 3
    opt = getattr(optim, name)([{"params": ours[:2]}, {"params": ours[2:], "lr": lr2}], **kw)
    topt = getattr(torch.optim, name)([{"params": theirs[:2]}, {"params": theirs[2:], "lr": lr2}], foreach=False,
                                      **kw)
    return ours, theirs, opt, topt


def grads(rng, shapes):
    """Gradients with about one zero in five (Rprop's sign(grad * prev) == 0 branch)."""
    return [(rng.standard_normal(s) * 2.0 * (rng.random(s) > 0.2)).astype(F32) for s in shapes]


def inject(ours, theirs, gs):
    for p, t, g in zip(ours, theirs, gs):
        p.grad = tl.tensor(g)
        t.grad = torch.tensor(g)


def assert_close(a, b):
    # float32 rounding: ASGD's p - eta * grad is one fused multiply-add in torch's CPU kernel
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def run_steps(ours, theirs, opt, topt, rng, n):
    for _ in range(n):
        inject(ours, theirs, grads(rng, [p.shape for p in ours]))
        opt.step()
        topt.step()


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_signature_is_torchs(name):
    def sig(cls):
        return [(p.name, p.kind, p.default) for p in inspect.signature(cls).parameters.values()]

    assert sig(getattr(optim, name)) == sig(getattr(torch.optim, name))
    assert name in optim.__all__


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_five_steps_match_torch(name, kw):
    ours, theirs, opt, topt = make_pair(name, kw)
    run_steps(ours, theirs, opt, topt, np.random.default_rng(1), 5)
    for p, t in zip(ours, theirs):
        assert_close(p.numpy(), host(t))
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sorted(sd["state"]) == sorted(tsd["state"]) == [0, 1, 2, 3]
    for k, st in sd["state"].items():
        assert set(st) == set(tsd["state"][k])
        for key, v in st.items():
            assert tuple(v.shape) == tuple(tsd["state"][k][key].shape), key
            assert_close(np.asarray(v.numpy()), host(tsd["state"][k][key]))
    if name == "Rprop" and "step_sizes" in kw:  # both clamps and the sign-flip branch were reached
        lo, hi = kw["step_sizes"]
        sizes = np.concatenate([sd["state"][k]["step_size"].numpy().ravel() for k in range(4)])
        assert np.any(sizes == F32(lo)) and np.any(sizes == F32(hi))
        assert np.any(sizes < F32(kw["lr"])) and np.any(sizes > F32(kw["lr"]))
    if name == "ASGD" and kw.get("t0", 1e6) < 5:  # the average moved by mu < 1, so ax != p
        assert float(sd["state"][0]["mu"].item()) < 1
        assert not np.array_equal(sd["state"][0]["ax"].numpy(), ours[0].numpy())


@pytest.mark.parametrize("name,kw", [CASES[1], CASES[4]], ids=[IDS[1], IDS[4]])
def test_complex_parameter_steps_its_real_view(name, kw):
    rng = np.random.default_rng(2)
    init = rng.standard_normal((3, 4, 2)).astype(F32)
    zp = tl.nn.Parameter(tl.view_as_complex(tl.tensor(init)))
    tp = torch.nn.Parameter(torch.view_as_complex(torch.tensor(init)))
    opt = getattr(optim, name)([zp], **kw)
    topt = getattr(torch.optim, name)([tp], foreach=False, **kw)
    for _ in range(5):
        g = grads(rng, [(3, 4, 2)])[0]
        zp.real_view().grad = tl.tensor(g)
        tp.grad = torch.view_as_complex(torch.tensor(g))
        opt.step()
        topt.step()
    assert_close(zp.real_view().numpy(), torch.view_as_real(tp.detach()).numpy())
    st, tst = opt.state_dict()["state"][0], topt.state_dict()["state"][0]
    for key, v in st.items():  # our state is the real view's: complex torch state seen as real
        t = tst[key]
        assert_close(np.asarray(v.numpy()), torch.view_as_real(t).numpy() if t.is_complex() else host(t))


@pytest.mark.parametrize("name,kw", [CASES[1], CASES[4]], ids=[IDS[1], IDS[4]])
def test_state_is_created_at_the_first_step_with_torchs_keys(name, kw):
    ours, theirs, opt, topt = make_pair(name, kw)
    assert opt.state_dict()["state"] == {} == topt.state_dict()["state"]
    run_steps(ours, theirs, opt, topt, np.random.default_rng(3), 1)
    st = opt.state_dict()["state"][2]
    want = {"Rprop": {"step": (), "prev": (3, 5), "step_size": (3, 5)},
            "ASGD": {"step": (), "eta": (), "mu": (), "ax": (3, 5)}}[name]
    assert {k: tuple(v.shape) for k, v in st.items()} == want
    assert float(st["step"].item()) == 1.0


@pytest.mark.parametrize("name,kw", [CASES[1], CASES[4]], ids=[IDS[1], IDS[4]])
@pytest.mark.parametrize("source", ["ours", "torch"])
def test_state_dict_loads_into_a_fresh_optimizer_and_continues(name, kw, source):
    ours, theirs, opt, topt = make_pair(name, kw)
    rng = np.random.default_rng(4)
    run_steps(ours, theirs, opt, topt, rng, 3)
    sd = opt.state_dict() if source == "ours" else topt.state_dict()
    snapshot = {k: {key: np.array(v.numpy()) for key, v in st.items()} for k, st in opt.state_dict()["state"].items()}

    fresh = [tl.nn.Parameter(tl.tensor(p.numpy())) for p in ours]
    opt2 = getattr(optim, name)([{"params": fresh[:2]}, {"params": fresh[2:]}], **kw)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[1]["lr"] == opt.param_groups[1]["lr"]
    for _ in range(2):
        gs = grads(rng, SHAPES)
        inject(ours, theirs, gs)
        for p, g in zip(fresh, gs):
            p.grad = tl.tensor(g)
        opt.step()
        opt2.step()
        topt.step()
    for p, q, t in zip(ours, fresh, theirs):
        if source == "ours":
            np.testing.assert_array_equal(q.numpy(), p.numpy())  # resuming is not stopping
        assert_close(q.numpy(), host(t))
    assert float(opt2.state_dict()["state"][0]["step"].item()) == 5.0
    # the snapshot taken after 3 steps did not move with the later ones
    for k, st in sd["state"].items():
        if source == "ours":
            for key, v in st.items():
                np.testing.assert_array_equal(np.asarray(v.numpy()), snapshot[k][key])


@pytest.mark.parametrize("name,kw", [CASES[0], CASES[3]], ids=[IDS[0], IDS[3]])
def test_state_dict_with_wrong_keys_is_refused_and_changes_nothing(name, kw):
    ours, theirs, opt, topt = make_pair(name, kw)
    run_steps(ours, theirs, opt, topt, np.random.default_rng(5), 1)
    sd = opt.state_dict()
    bad = {"state": {k: dict(st) for k, st in sd["state"].items()}, "param_groups": sd["param_groups"]}
    bad["state"][0].pop("step")
    before = opt.state_dict()["state"][0]
    with pytest.raises(ArgumentError, match=rf"{name}.load_state_dict: state\[0\] has keys"):
        opt.load_state_dict(bad)
    for key, v in opt.state_dict()["state"][0].items():
        np.testing.assert_array_equal(np.asarray(v.numpy()), np.asarray(before[key].numpy()))


BAD = [
    ("Rprop", dict(lr=-0.1), r"Rprop: Invalid learning rate: -0.1"),
    ("Rprop", dict(etas=(1.5, 1.2)), r"Rprop: Invalid eta values: 1.5, 1.2"),
    ("Rprop", dict(etas=(0.5, 1.0)), r"Rprop: Invalid eta values: 0.5, 1.0"),
    ("Rprop", dict(etas=(0.0, 1.2)), r"Rprop: Invalid eta values: 0.0, 1.2"),
]
OURS_ONLY = [
    ("Rprop", dict(etas=(0.5,)), r"Rprop: etas must be a pair of floats"),
    ("Rprop", dict(step_sizes=(1e-6, float("nan"))), r"Rprop: step_sizes\[1\] must not be NaN"),
    ("Rprop", dict(lr="0.1"), r"Rprop: lr must be a real number"),
    ("Rprop", dict(capturable=True), r"Rprop: option capturable=True is not supported"),
    ("Rprop", dict(differentiable=True), r"Rprop: option differentiable=True is not supported"),
    ("ASGD", dict(lambd=None), r"ASGD: lambd must be a real number"),
    ("ASGD", dict(t0=float("nan")), r"ASGD: t0 must not be NaN"),
    ("ASGD", dict(capturable=True), r"ASGD: option capturable=True is not supported"),
    ("ASGD", dict(differentiable=True), r"ASGD: option differentiable=True is not supported"),
]
BAD += [
    ("ASGD", dict(lr=-1.0), r"ASGD: Invalid learning rate: -1.0"),
    ("ASGD", dict(weight_decay=-0.5), r"ASGD: Invalid weight_decay value: -0.5"),
]


@pytest.mark.parametrize("name,kw,msg", BAD + OURS_ONLY)
def test_bad_hyperparameters_name_the_call(name, kw, msg):
    p = tl.nn.Parameter(tl.zeros(3))
    with pytest.raises(ArgumentError, match=msg):
        getattr(optim, name)([p], **kw)
    if (name, kw, msg) in BAD:  # where torch refuses the same value
        with pytest.raises(ValueError):
            getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(3))], **kw)


@pytest.mark.parametrize("name", ["Rprop", "ASGD"])
def test_bad_param_group_is_refused(name):
    opt = getattr(optim, name)([tl.nn.Parameter(tl.zeros(3))])
    with pytest.raises(TorchLeanError, match=rf"{name}: Invalid learning rate"):
        opt.add_param_group({"params": [tl.nn.Parameter(tl.zeros(2))], "lr": -1.0})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("name,kw", [CASES[1], CASES[4]], ids=[IDS[1], IDS[4]])
def test_maximize_is_the_step_on_the_negated_gradient(name, kw):
    rng = np.random.default_rng(6)
    init = rng.standard_normal((4, 3)).astype(F32)
    a, b = tl.nn.Parameter(tl.tensor(init)), tl.nn.Parameter(tl.tensor(init))
    up = getattr(optim, name)([a], **kw, maximize=True)
    down = getattr(optim, name)([b], **kw)
    for _ in range(5):
        g = grads(rng, [(4, 3)])[0]
        a.grad, b.grad = tl.tensor(g), tl.tensor(-g)
        up.step()
        down.step()
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), init)


def test_foreach_is_accepted_and_changes_nothing():
    rng = np.random.default_rng(7)
    init = rng.standard_normal(6).astype(F32)
    ps = [tl.nn.Parameter(tl.tensor(init)) for _ in range(3)]
    opts = [optim.Rprop([ps[0]]), optim.Rprop([ps[1]], foreach=True), optim.Rprop([ps[2]], foreach=False)]
    for _ in range(3):
        g = grads(rng, [(6,)])[0]
        for p, o in zip(ps, opts):
            p.grad = tl.tensor(g)
            o.step()
    np.testing.assert_array_equal(ps[0].numpy(), ps[1].numpy())
    np.testing.assert_array_equal(ps[0].numpy(), ps[2].numpy())


def test_closure_loss_is_returned_and_params_without_grad_are_skipped():
    p, q = tl.nn.Parameter(tl.ones(3)), tl.nn.Parameter(tl.ones(2))
    opt = optim.ASGD([p, q], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    assert float(opt.step(closure).item()) == 3.0
    # p (1 - lambd eta) - eta grad, grad = 2 p
    np.testing.assert_allclose(p.numpy(), np.full(3, (1 - 1e-4 * 0.1) - 0.1 * 2), rtol=1e-6)
    np.testing.assert_array_equal(q.numpy(), np.ones(2, F32))
    assert set(opt.state_dict()["state"]) == {0}
