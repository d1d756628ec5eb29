"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, LBFGS and the schedulers, against torch.optim.

* every optimizer (and its variants: momentum, centered, weight decay, decoupled decay, maximize)
  runs 25 steps beside torch's on the same parameters, in two groups with different learning
  rates: first with the same injected gradients (|ours - torch| <= 16 u (|p| + 10 lr) per step: our
  element-wise ops round twice where torch's CPU kernels fuse a multiply-add, and torch's sqrt is
  MKL's), then with gradients of the same loss taken by each framework's own backward;
* state dicts: a resumed run is bitwise the uninterrupted one, a snapshot does not move with later
  steps, a torch optimizer's state dict loads and continues as torch does, and a state dict that
  does not fit (keys, shapes) is refused with nothing changed;
* LBFGS (with and without strong Wolfe line search) follows torch's trajectory on Rosenbrock
  functions, counts the same function evaluations, and resumes from its (or torch's) state dict;
* every scheduler gives torch's learning rates (and momenta) for 60 steps, loads torch's state
  dicts and its own, and ReduceLROnPlateau follows torch on metric sequences.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean import optim
from torchlean.errors import ArgumentError, ShapeError, TorchLeanError
from torchlean.optim import lr_scheduler as L

TL_S = torch.optim.lr_scheduler
F32 = np.float32
U = 2.0 ** -24
SHAPES = [(4, 3), (3,), (2, 2, 2)]

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]

OPTIMIZERS = [
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.5, maximize=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.2)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.05, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, betas=(0.5, 0.9))),
]
IDS = [f"{n}-{'-'.join(sorted(kw)) or 'defaults'}" for n, kw in OPTIMIZERS]


def host(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def make_pair(name, kw, device="cpu", seed=0, lr2=None):
    """The same parameters under both frameworks, in two groups (the second with its own lr)."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(F32) for s in SHAPES]
    ours = [tl.nn.Parameter(tl.tensor(h, device=device)) for h in init]
    theirs = [torch.nn.Parameter(torch.tensor(h)) for h in init]
    lr2 = lr2 if lr2 is not None else kw.get("lr", 0.01) * 3
    opt = getattr(optim, name)([{"params": ours[:2]}, {"params": ours[2:], "lr": lr2}], **kw)
    topt = getattr(torch.optim, name)([{"params": theirs[:2]}, {"params": theirs[2:], "lr": lr2}], **kw)
    return ours, theirs, opt, topt


def inject(ours, theirs, rng):
    for p, t in zip(ours, theirs):
        g = (rng.standard_normal(p.shape) * 2.0).astype(F32)
        p.grad = tl.tensor(g, device=p.device)
        t.grad = torch.tensor(g)


def assert_close(ours, theirs, steps, lr, k=16):
    """|ours - torch| <= k u (|p| + 10 lr) per step taken: an adaptive step is up to ~10 lr early
    on (RMSprop's first is lr / sqrt(1 - alpha)), and its rounding scales with it."""
    for p, t in zip(ours, theirs):
        a, b = host(p), host(t)
        scale = U * steps * (np.abs(b) + 10 * lr)
        assert np.all(np.abs(a - b) <= k * scale), (np.abs(a - b) / scale).max()


@pytest.mark.parametrize("name, kw", OPTIMIZERS, ids=IDS)
def test_optimizer_matches_torch_same_gradients(name, kw, device):
    ours, theirs, opt, topt = make_pair(name, kw, device)
    rng = np.random.default_rng(1)
    for step in range(1, 26):
        inject(ours, theirs, rng)
        opt.step()
        topt.step()
        assert_close(ours, theirs, step, max(g["lr"] for g in topt.param_groups))
    # the state too (same keys; tensors within the same bound, NAdam's float32 mu_product equal)
    for p, t in zip(ours, theirs):
        st, tst = opt.state[p], topt.state[t]
        assert sorted(st) == sorted(tst)
        for key in tst:
            a, b = host(st[key]), tst[key].numpy()
            assert a.shape == b.shape, key
            if key in ("step", "mu_product"):
                assert a.astype(F32) == b, key
            else:
                assert np.allclose(a, b, rtol=1e-4, atol=1e-6), key


@pytest.mark.parametrize("name, kw", OPTIMIZERS, ids=IDS)
def test_optimizer_matches_torch_on_a_training_loss(name, kw):
    """Gradients from each framework's backward of the same least-squares loss."""
    rng = np.random.default_rng(2)
    w0, b0 = rng.standard_normal((5, 3)).astype(F32), rng.standard_normal(3).astype(F32)
    x, y = rng.standard_normal((16, 5)).astype(F32), rng.standard_normal((16, 3)).astype(F32)
    w, b = tl.nn.Parameter(tl.tensor(w0)), tl.nn.Parameter(tl.tensor(b0))
    tw, tb = torch.nn.Parameter(torch.tensor(w0)), torch.nn.Parameter(torch.tensor(b0))
    opt = getattr(optim, name)([{"params": [w]}, {"params": [b], "lr": 0.02}], **kw)
    topt = getattr(torch.optim, name)([{"params": [tw]}, {"params": [tb], "lr": 0.02}], **kw)
    lx, ly, tx, ty = tl.tensor(x), tl.tensor(y), torch.tensor(x), torch.tensor(y)
    for _ in range(25):
        opt.zero_grad()
        d = lx @ w + b - ly
        (d * d).mean().backward()
        opt.step()
        topt.zero_grad()
        ((tx @ tw + tb - ty) ** 2).mean().backward()
        topt.step()
    for p, t in ((w, tw), (b, tb)):
        np.testing.assert_allclose(host(p), host(t), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, kw", OPTIMIZERS, ids=IDS)
def test_state_dict_resumes_bitwise(name, kw):
    ours, _, opt, _ = make_pair(name, kw)
    rng = np.random.default_rng(3)
    grads = [[(rng.standard_normal(p.shape) * 2).astype(F32) for p in ours] for _ in range(12)]

    def run(params, o, gs):
        for step_grads in gs:
            for p, g in zip(params, step_grads):
                p.grad = tl.tensor(g)
            o.step()

    run(ours, opt, grads[:6])
    sd = opt.state_dict()
    frozen = copy.deepcopy({k: {n: host(v) if isinstance(v, tl.Tensor) else v for n, v in st.items()}
                            for k, st in sd["state"].items()})
    at6 = [host(p).copy() for p in ours]
    run(ours, opt, grads[6:])
    # the snapshot did not move with the later steps
    for k, st in sd["state"].items():
        for n, v in st.items():
            assert np.array_equal(host(v), frozen[k][n]), (k, n)
    # a new optimizer over the step-6 parameters, loaded from the snapshot, lands on the same bits
    params2 = [tl.nn.Parameter(tl.tensor(a)) for a in at6]
    opt2 = getattr(optim, name)([{"params": params2[:2]}, {"params": params2[2:]}], **kw)
    opt2.load_state_dict(sd)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    run(params2, opt2, grads[6:])
    for p, q in zip(ours, params2):
        assert np.array_equal(host(p).view(np.uint32), host(q).view(np.uint32))


@pytest.mark.parametrize("name, kw", OPTIMIZERS, ids=IDS)
def test_torch_state_dict_loads_and_continues(name, kw):
    _, theirs, _, topt = make_pair(name, kw)
    rng = np.random.default_rng(4)
    for _ in range(5):
        for t in theirs:
            t.grad = torch.tensor((rng.standard_normal(t.shape) * 2).astype(F32))
        topt.step()
    ours = [tl.nn.Parameter(tl.tensor(host(t).copy())) for t in theirs]
    opt = getattr(optim, name)([{"params": ours[:2]}, {"params": ours[2:]}], **kw)
    opt.load_state_dict(topt.state_dict())
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
    for step in range(1, 11):
        inject(ours, theirs, rng)
        opt.step()
        topt.step()
    assert_close(ours, theirs, 15, max(g["lr"] for g in topt.param_groups))


def test_state_dict_that_does_not_fit_is_refused_whole():
    ours, _, opt, _ = make_pair("RMSprop", dict(lr=0.01, momentum=0.9, centered=True))
    for p in ours:
        p.grad = tl.ones(*p.shape)
    opt.step()
    good = opt.state_dict()
    before = {id(p): {k: host(v).copy() for k, v in opt.state[p].items()} for p in ours}

    def unchanged():
        return all(np.array_equal(host(opt.state[p][k]), v) for p in ours for k, v in before[id(p)].items())

    no_grad_avg = copy.deepcopy(good)
    del no_grad_avg["state"][2]["grad_avg"]
    with pytest.raises(ArgumentError, match=r"RMSprop.load_state_dict: state\[2\] has keys"):
        opt.load_state_dict(no_grad_avg)
    assert unchanged()
    # without momentum and centering the group keeps no momentum_buffer / grad_avg: refused too
    plain = copy.deepcopy(good)
    plain["param_groups"][1].update(momentum=0, centered=False)
    with pytest.raises(ArgumentError, match="for this parameter group's options"):
        opt.load_state_dict(plain)
    wrong_shape = copy.deepcopy(good)
    wrong_shape["state"][1]["square_avg"] = tl.zeros(4)
    with pytest.raises(ShapeError, match=r"state\[1\]\['square_avg'\] has shape \(4,\)"):
        opt.load_state_dict(wrong_shape)
    assert unchanged()
    ours, _, nadam, _ = make_pair("NAdam", {})
    for p in ours:
        p.grad = tl.ones(*p.shape)
    nadam.step()
    bad = nadam.state_dict()
    bad["state"][0]["mu_product"] = tl.ones(2)
    with pytest.raises(ShapeError, match="mu_product'\\] must have one element"):
        nadam.load_state_dict(bad)


def test_constructor_checks_and_unsupported_options():
    p = tl.nn.Parameter(tl.zeros(3))
    cases = [("RMSprop", dict(lr=-1.0), "Invalid learning rate"), ("RMSprop", dict(alpha=-0.5), "Invalid alpha"),
             ("Adagrad", dict(lr_decay=-1), "Invalid lr_decay"), ("Adadelta", dict(rho=1.5), "Invalid rho"),
             ("Adamax", dict(betas=(1.0, 0.9)), "beta parameter at index 0"),
             ("NAdam", dict(momentum_decay=-1), "Invalid momentum_decay"), ("RAdam", dict(eps=-1), "epsilon"),
             ("RMSprop", dict(differentiable=True), "differentiable=True is not supported"),
             ("NAdam", dict(capturable=True), "capturable=True is not supported")]
    for name, kw, msg in cases:
        with pytest.raises(ArgumentError, match=msg):
            getattr(optim, name)([p], **kw)
    with pytest.raises(ArgumentError, match="LBFGS doesn't support per-parameter options"):
        optim.LBFGS([{"params": [p]}, {"params": [tl.nn.Parameter(tl.zeros(2))]}])
    with pytest.raises(ArgumentError, match="line_search_fn"):
        optim.LBFGS([p], line_search_fn="backtracking")
    with pytest.raises(ArgumentError, match="LBFGS.step: a closure"):
        optim.LBFGS([p]).step()
    assert issubclass(ArgumentError, TorchLeanError)


def test_add_param_group_and_adagrad_eager_state():
    a, b = tl.nn.Parameter(tl.ones(2)), tl.nn.Parameter(tl.ones(3))
    ta, tb = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    opt, topt = optim.Adagrad([a], lr=0.1, initial_accumulator_value=0.5), torch.optim.Adagrad(
        [ta], lr=0.1, initial_accumulator_value=0.5)
    assert sorted(opt.state_dict()["state"][0]) == sorted(topt.state_dict()["state"][0]) == ["step", "sum"]
    assert np.array_equal(host(opt.state[a]["sum"]), topt.state[ta]["sum"].numpy())
    opt.add_param_group({"params": [b], "lr": 0.3})  # (torch's Adagrad would fail at the next step)
    assert np.array_equal(host(opt.state[b]["sum"]), np.full(3, 0.5, F32))
    with pytest.raises(ArgumentError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    # a group added later steps with its own lr, as torch's
    opt, topt = optim.RMSprop([a], lr=0.01, momentum=0.5), torch.optim.RMSprop([ta], lr=0.01, momentum=0.5)
    opt.add_param_group({"params": [b], "lr": 0.3, "centered": True})
    topt.add_param_group({"params": [tb], "lr": 0.3, "centered": True})
    rng = np.random.default_rng(6)
    for step in range(1, 6):
        inject([a, b], [ta, tb], rng)
        opt.step()
        topt.step()
        assert_close([a, b], [ta, tb], step, 0.3)
    assert sorted(opt.state[b]) == sorted(topt.state[tb])


# -- LBFGS ---------------------------------------------------------------------------------------------
def rosenbrock(x, B):
    """f and its gradient in float32 NumPy: the same numbers go to both optimizers."""
    x = x.astype(F32)
    a, b = x[1:] - x[:-1] * x[:-1], F32(1) - x[:-1]
    f = np.sum(F32(B) * a * a + b * b, dtype=F32)
    g = np.zeros_like(x)
    g[:-1] += F32(-4 * B) * x[:-1] * a - F32(2) * b
    g[1:] += F32(2 * B) * a
    return F32(f), g


def lbfgs_pair(x0, B, **kw):
    x, tx = tl.nn.Parameter(tl.tensor(x0)), torch.nn.Parameter(torch.tensor(x0))
    opt, topt = optim.LBFGS([x], **kw), torch.optim.LBFGS([tx], **kw)

    def closure():
        f, g = rosenbrock(x.numpy(), B)
        x.grad = tl.tensor(g)
        return tl.tensor(f)

    def tclosure():
        f, g = rosenbrock(tx.detach().numpy(), B)
        tx.grad = torch.tensor(g)
        return torch.tensor(f)

    return x, tx, opt, topt, closure, tclosure


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("x0", [[-1.5, 2.0], [-1.2, 1.0, 0.5], [0.5, 0.5, 0.5, 0.5]])
def test_lbfgs_follows_torch_on_rosenbrock(line_search_fn, x0):
    kw = dict(lr=1 if line_search_fn else 0.02, max_iter=10, history_size=4, line_search_fn=line_search_fn)
    x, tx, opt, topt, closure, tclosure = lbfgs_pair(np.array(x0, F32), 10, **kw)
    # A fixed step on Rosenbrock's valley amplifies any rounding difference after ~30 iterations
    # (torch against itself with fma off would part the same way): 3 outer steps there.
    for _ in range(5 if line_search_fn else 3):
        loss, tloss = opt.step(closure), topt.step(tclosure)
        assert math.isclose(float(loss), float(tloss), rel_tol=1e-3, abs_tol=1e-6)
        np.testing.assert_allclose(x.numpy(), host(tx), rtol=1e-4, atol=2e-5)
        assert opt.state[x]["func_evals"] == topt.state[tx]["func_evals"]
        assert opt.state[x]["n_iter"] == topt.state[tx]["n_iter"]
    if line_search_fn:
        np.testing.assert_allclose(x.numpy(), 1.0, atol=1e-4)  # converged, as torch's


def test_lbfgs_strong_wolfe_converges_on_the_classic_rosenbrock():
    """B = 100: float32 rounding differences grow along the way (|x - x_torch| up to 1e-2 mid-run),
    but both land on the minimum (1, 1)."""
    x, tx, opt, topt, closure, tclosure = lbfgs_pair(np.array([-1.5, 2.0], F32), 100, lr=1, max_iter=20,
                                                     line_search_fn="strong_wolfe")
    for _ in range(4):
        opt.step(closure)
        topt.step(tclosure)
    np.testing.assert_allclose(x.numpy(), 1.0, atol=1e-3)
    np.testing.assert_allclose(host(tx), 1.0, atol=1e-3)


def test_lbfgs_with_autograd_closure_and_several_parameters(device):
    rng = np.random.default_rng(5)
    A, y = rng.standard_normal((20, 4)).astype(F32), rng.standard_normal((20, 2)).astype(F32)
    w0, b0 = (rng.standard_normal((4, 2)) * 0.1).astype(F32), np.zeros(2, F32)
    w, b = tl.nn.Parameter(tl.tensor(w0, device=device)), tl.nn.Parameter(tl.tensor(b0, device=device))
    tw, tb = torch.nn.Parameter(torch.tensor(w0)), torch.nn.Parameter(torch.tensor(b0))
    opt = optim.LBFGS([w, b], history_size=5, max_iter=8, line_search_fn="strong_wolfe")
    topt = torch.optim.LBFGS([tw, tb], history_size=5, max_iter=8, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        d = tl.tensor(A, device=device) @ w + b - tl.tensor(y, device=device)
        loss = (d * d).mean()
        loss.backward()
        return loss

    def tclosure():
        topt.zero_grad()
        loss = ((torch.tensor(A) @ tw + tb - torch.tensor(y)) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
        topt.step(tclosure)
    np.testing.assert_allclose(w.numpy(), host(tw), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.numpy(), host(tb), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_state_dict_resumes_and_loads_torchs(line_search_fn):
    kw = dict(lr=1 if line_search_fn else 0.02, max_iter=5, history_size=3, line_search_fn=line_search_fn)
    x0 = np.array([-1.2, 1.0, 0.5], F32)
    x, tx, opt, topt, closure, tclosure = lbfgs_pair(x0, 10, **kw)
    for _ in range(3):
        opt.step(closure)
        topt.step(tclosure)
    # (torch's state_dict() refers to its live state, which its later steps change: a deep copy)
    sd, tsd, at3, tat3 = opt.state_dict(), copy.deepcopy(topt.state_dict()), x.numpy().copy(), host(tx).copy()
    assert sorted(sd["state"][0]) == sorted(tsd["state"][0])
    frozen = [host(v).copy() for v in sd["state"][0]["old_dirs"]]
    for _ in range(2):
        opt.step(closure)
        topt.step(tclosure)
    assert all(np.array_equal(host(v), f) for v, f in zip(sd["state"][0]["old_dirs"], frozen))
    for source in (sd, tsd):  # ours resumes bitwise; torch's continues as torch did
        x2, _, opt2, _, closure2, _ = lbfgs_pair(at3 if source is sd else tat3, 10, **kw)
        opt2.load_state_dict(source)
        for _ in range(2):
            opt2.step(closure2)
        if source is sd:
            assert np.array_equal(x2.numpy().view(np.uint32), x.numpy().view(np.uint32))
        else:
            np.testing.assert_allclose(x2.numpy(), host(tx), rtol=1e-4, atol=2e-5)
    bad = copy.deepcopy(tsd)
    bad["state"][0]["d"] = torch.zeros(5)
    with pytest.raises(ShapeError, match=r"state\[0\]\['d'\] has shape \(5,\), expected \(3,\)"):
        opt.load_state_dict(bad)


# -- schedulers ----------------------------------------------------------------------------------------
def sched_pair(opt_name="SGD", **kw):
    kw = kw or dict(lr=0.1, momentum=0.9)
    ours = [tl.nn.Parameter(tl.zeros(2)), tl.nn.Parameter(tl.zeros(3))]
    theirs = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))]
    return (getattr(optim, opt_name)([{"params": ours[:1]}, {"params": ours[1:], "lr": 0.5}], **kw),
            getattr(torch.optim, opt_name)([{"params": theirs[:1]}, {"params": theirs[1:], "lr": 0.5}], **kw))


class Decay:
    """A callable object: LambdaLR saves its __dict__."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate ** epoch


SCHEDULERS = {
    "LambdaLR": lambda M, o: M.LambdaLR(o, lambda e: 0.95 ** e),
    "LambdaLR-objects": lambda M, o: M.LambdaLR(o, [Decay(0.9), lambda e: 1.0 / (e + 1)]),
    "MultiplicativeLR": lambda M, o: M.MultiplicativeLR(o, lambda e: 0.97),
    "StepLR": lambda M, o: M.StepLR(o, 7, 0.5),
    "MultiStepLR": lambda M, o: M.MultiStepLR(o, [5, 12, 12, 30], 0.5),
    "ConstantLR": lambda M, o: M.ConstantLR(o, 0.25, 7),
    "LinearLR": lambda M, o: M.LinearLR(o, 0.1, 0.9, 20),
    "ExponentialLR": lambda M, o: M.ExponentialLR(o, 0.93),
    "PolynomialLR": lambda M, o: M.PolynomialLR(o, 30, 2.0),
    "CosineAnnealingLR": lambda M, o: M.CosineAnnealingLR(o, 13, 1e-3),
    "CyclicLR-triangular2": lambda M, o: M.CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=7, step_size_down=4,
                                                    mode="triangular2"),
    "CyclicLR-exp_range": lambda M, o: M.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range", gamma=0.97),
    "OneCycleLR": lambda M, o: M.OneCycleLR(o, [0.3, 1.0], total_steps=70),
    "OneCycleLR-three-phase": lambda M, o: M.OneCycleLR(o, 0.3, epochs=7, steps_per_epoch=10, three_phase=True,
                                                        anneal_strategy="linear"),
    "CosineAnnealingWarmRestarts": lambda M, o: M.CosineAnnealingWarmRestarts(o, 7, 2, 1e-3),
    "CosineAnnealingWarmRestarts-Tmult1": lambda M, o: M.CosineAnnealingWarmRestarts(o, 9),
    "SequentialLR": lambda M, o: M.SequentialLR(o, [M.LinearLR(o, 0.1, total_iters=5), M.CosineAnnealingLR(o, 20),
                                                    M.ExponentialLR(o, 0.9)], milestones=[5, 25]),
    "ChainedScheduler": lambda M, o: M.ChainedScheduler([M.ConstantLR(o, 0.5, 4), M.ExponentialLR(o, 0.95)]),
}


def lrs_and_momenta(opt):
    return [(g["lr"], g.get("momentum"), g.get("betas")) for g in opt.param_groups]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_matches_torch(name, opt_name):
    opt, topt = sched_pair(opt_name, lr=0.1)
    s, ts = SCHEDULERS[name](L, opt), SCHEDULERS[name](TL_S, topt)
    assert s.get_last_lr() == ts.get_last_lr()
    for k in range(60):
        opt.step()
        topt.step()
        s.step()
        ts.step()
        assert s.get_last_lr() == ts.get_last_lr(), k
        assert lrs_and_momenta(opt) == lrs_and_momenta(topt), k
        assert getattr(s, "last_epoch", None) == getattr(ts, "last_epoch", None), k


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_state_dicts_ours_and_torchs(name):
    opt, topt = sched_pair()
    s, ts = SCHEDULERS[name](L, opt), SCHEDULERS[name](TL_S, topt)
    for _ in range(23):
        s.step()
        ts.step()
    sd, tsd = s.state_dict(), ts.state_dict()
    assert sorted(sd) == sorted(tsd)  # PyTorch's keys, so each loads the other's
    for source in (sd, tsd):
        opt2, topt2 = sched_pair()
        s2, ts2 = SCHEDULERS[name](L, opt2), SCHEDULERS[name](TL_S, topt2)
        s2.load_state_dict(copy.deepcopy(source))
        ts2.load_state_dict(copy.deepcopy(tsd))
        assert s2.get_last_lr() == ts2.get_last_lr() == ts.get_last_lr()
        for g, g2, tg in zip(opt2.param_groups, topt2.param_groups, topt.param_groups):
            for key in ("lr", "momentum"):  # (the optimizer's own state dict carries these)
                g[key] = g2[key] = tg[key]
        for k in range(20):
            s2.step()
            ts2.step()
            assert s2.get_last_lr() == ts2.get_last_lr(), (k, source is sd)
    # our state dict loads into torch's scheduler too
    topt3 = sched_pair()[1]
    ts3 = SCHEDULERS[name](TL_S, topt3)
    ts3.load_state_dict(copy.deepcopy(sd))
    assert ts3.get_last_lr() == ts.get_last_lr()


@pytest.mark.parametrize("kw", [dict(), dict(mode="max", factor=0.5, patience=2, threshold=0.01,
                                             threshold_mode="abs", cooldown=2, min_lr=[0.01, 0.02]),
                                dict(patience=0, cooldown=1, eps=1e-3)])
def test_reduce_lr_on_plateau_follows_torch(kw):
    opt, topt = sched_pair()
    s, ts = L.ReduceLROnPlateau(opt, **kw), TL_S.ReduceLROnPlateau(topt, **kw)
    metrics = np.cumsum(np.random.default_rng(0).standard_normal(90)) * 0.1
    for k, m in enumerate(metrics):
        s.step(tl.tensor(F32(m)) if k % 2 else float(m))
        ts.step(float(F32(m)) if k % 2 else float(m))
        assert s.get_last_lr() == ts.get_last_lr(), k
        assert (s.best, s.num_bad_epochs, s.cooldown_counter, s.last_epoch) == (
            ts.best, ts.num_bad_epochs, ts.cooldown_counter, ts.last_epoch), k
        if k == 45:
            tsd = ts.state_dict()
            assert sorted(s.state_dict()) == sorted(tsd)
    opt2 = sched_pair()[0]
    s2 = L.ReduceLROnPlateau(opt2, **kw)
    s2.load_state_dict(tsd)
    assert (s2.best, s2.num_bad_epochs, s2.last_epoch) == (tsd["best"], tsd["num_bad_epochs"], 46)
    with pytest.raises(ArgumentError, match="ReduceLROnPlateau.load_state_dict: 'mode' must be one of"):
        s2.load_state_dict({**tsd, "mode": "median"})
    with pytest.raises(ArgumentError, match="Factor should be < 1.0"):
        L.ReduceLROnPlateau(opt, factor=1.5)


@pytest.mark.parametrize("name, make", [
    ("MultiStepLR", lambda M, o: M.MultiStepLR(o, [3, 8, 8], 0.5)),
    ("ConstantLR", lambda M, o: M.ConstantLR(o, 0.5, 6)),
    ("LinearLR", lambda M, o: M.LinearLR(o, 0.2, 1.0, 10)),
    ("ExponentialLR", lambda M, o: M.ExponentialLR(o, 0.9)),
    ("PolynomialLR", lambda M, o: M.PolynomialLR(o, 12, 0.5)),
    ("CosineAnnealingWarmRestarts", lambda M, o: M.CosineAnnealingWarmRestarts(o, 4, 2)),
])
def test_scheduler_step_with_epoch_uses_the_closed_form(name, make):
    opt, topt = sched_pair()
    s, ts = make(L, opt), make(TL_S, topt)
    for epoch in (3, 9, 2, 15, 7.5 if name == "CosineAnnealingWarmRestarts" else 7):
        s.step(epoch)
        ts.step(epoch)
        assert s.get_last_lr() == ts.get_last_lr(), epoch
        assert s.last_epoch == ts.last_epoch


def test_scheduler_load_refuses_bad_state_whole():
    opt = sched_pair()[0]
    seq = SCHEDULERS["SequentialLR"](L, opt)
    for _ in range(7):
        seq.step()
    good = seq.state_dict()
    before = copy.deepcopy(good)
    bad = copy.deepcopy(good)
    bad["_schedulers"][2]["gamma"] = "0.9"  # the last child is wrong: the first two must not change
    with pytest.raises(ArgumentError, match="ExponentialLR.load_state_dict: 'gamma' must be a finite real"):
        seq.load_state_dict(bad)
    assert seq.state_dict() == before
    with pytest.raises(ArgumentError, match="'_schedulers' must be a list of 3 state dicts"):
        seq.load_state_dict({**good, "_schedulers": good["_schedulers"][:2]})
    lam = L.LambdaLR(opt, [Decay(0.9), lambda e: 1.0])
    sd = lam.state_dict()
    assert sd["lr_lambdas"] == [{"rate": 0.9}, None]
    with pytest.raises(ArgumentError, match="data attributes only"):
        lam.load_state_dict({**sd, "lr_lambdas": [{"__call__": print}, None]})
    lam.load_state_dict({**sd, "lr_lambdas": [{"rate": 0.5}, None]})
    assert lam.lr_lambdas[0].rate == 0.5
    with pytest.raises(ArgumentError, match="OneCycleLR.step: Tried to step 4 times"):
        one = L.OneCycleLR(opt, 0.1, total_steps=3)
        for _ in range(4):
            one.step()
    with pytest.raises(ArgumentError, match="SequentialLR: Sequential Schedulers expects"):
        L.SequentialLR(opt, [L.ExponentialLR(opt, 0.9)], milestones=[3])
    with pytest.raises(ArgumentError, match="optimizer must support momentum or beta1"):
        L.OneCycleLR(optim.Adagrad([tl.nn.Parameter(tl.zeros(1))]), 0.1, total_steps=5)


@pytest.mark.parametrize("make", [lambda o: L.OneCycleLR(o, 0.1, total_steps=20),
                                  lambda o: L.CyclicLR(o, 0.01, 0.1)])
def test_optimizer_state_dict_loads_with_cycling_scheduler_keys(make):
    """PyTorch's cycling schedulers write their own keys into the param groups; the optimizer's
    state dict carries them and loads back."""
    p = tl.nn.Parameter(tl.zeros(2))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    make(opt)
    sd = opt.state_dict()
    opt2 = optim.SGD([tl.nn.Parameter(tl.zeros(2))], lr=0.1, momentum=0.9)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["max_momentum"] == sd["param_groups"][0]["max_momentum"]


class Warmup(L.LRScheduler):
    """A custom schedule as programs write them: a subclass with its own attributes."""

    def __init__(self, optimizer, warmup, last_epoch=-1):
        self.warmup = warmup
        self.notes = {"kind": "linear", "ends": [warmup]}
        self.hook = print  # not data: never saved or loaded
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * min(1.0, (self.last_epoch + 1) / self.warmup) for base in self.base_lrs]


class TorchWarmup(TL_S.LRScheduler):
    def __init__(self, optimizer, warmup, last_epoch=-1):
        self.warmup = warmup
        self.notes = {"kind": "linear", "ends": [warmup]}
        self.hook = print
        super().__init__(optimizer, last_epoch)

    get_lr = Warmup.get_lr


def test_custom_scheduler_subclass_state_dict_like_torchs():
    opt, topt = sched_pair()
    s, ts = Warmup(opt, 4), TorchWarmup(topt, 4)
    for _ in range(6):
        s.step()
        ts.step()
        assert s.get_last_lr() == ts.get_last_lr()
    sd, tsd = s.state_dict(), ts.state_dict()
    assert sorted(sd) == sorted(k for k in tsd if k != "hook") and sd["warmup"] == 4
    s2 = Warmup(sched_pair()[0], 9)
    s2.load_state_dict({k: v for k, v in tsd.items() if k != "hook"})
    assert (s2.warmup, s2.last_epoch, s2.notes) == (4, 6, {"kind": "linear", "ends": [4]})
    for bad in ({**sd, "hook": len}, {**sd, "get_lr": [1.0]}, {**sd, "warmup": object()}):
        with pytest.raises(ArgumentError, match="Warmup.load_state_dict: the state dict must have exactly"):
            s2.load_state_dict(bad)
    assert s2.hook is print and s2.warmup == 4
