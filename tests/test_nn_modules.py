"""nn.Module habits, Parameter, init, containers, Linear, and multi-head attention (seed form and
nn.MultiheadAttention) against PyTorch.

Composite modules are compared with PyTorch through a float64 reference: torch float64 with the
same parameters. Our float32 error must stay within a small multiple of torch float32's own error
on the same inputs (plus a few ulps of the output scale): both run the same float32 operations
(GEMMs, softmax) whose contracts are of the same class, so a larger error means a wrong result.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.errors import ArgumentError, DTypeError, ShapeError
from torchlean.ops import mha

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests; install torchlean[test]")

U = 2.0**-24


def assert_close_to_torch(ours: np.ndarray, t32: "torch.Tensor", t64: "torch.Tensor", what: str) -> None:
    ref = t64.detach().cpu().numpy()
    e_ours = np.max(np.abs(ours.astype(np.float64) - ref), initial=0.0)
    e_torch = np.max(np.abs(t32.detach().cpu().double().numpy() - ref), initial=0.0)
    tol = 4 * e_torch + 32 * U * np.max(np.abs(ref), initial=0.0)
    assert e_ours <= tol, f"{what}: max error {e_ours:.3g} > {tol:.3g} (torch float32's error {e_torch:.3g})"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.GELU()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 3, bias=False)])
        self.scale = nn.Parameter(tl.ones(3))
        self.register_buffer("steps", tl.zeros(1))
        self.register_buffer("scratch", tl.zeros(2), persistent=False)

    def forward(self, x):
        x = self.act(self.fc1(x))
        for layer in self.layers:
            x = layer(x)
        return x * self.scale


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.act = torch.nn.GELU()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 3, bias=False)])
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)

    def forward(self, x):
        x = self.act(self.fc1(x))
        for layer in self.layers:
            x = layer(x)
        return x * self.scale


# -- Module ---------------------------------------------------------------------------------------
def test_registration_names_and_order_match_pytorch():
    ours, theirs = Block(), TorchBlock()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [(n, p.shape) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())  # the non-persistent buffer is left out
    assert [n for n, _ in ours.named_buffers()] == ["steps", "scratch"]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert all(p.requires_grad for p in ours.parameters())


def test_torch_state_dict_loads_and_outputs_match():
    ours, theirs = Block(), TorchBlock()
    with torch.no_grad():
        theirs.scale.copy_(torch.tensor([0.5, -2.0, 3.0]))
    res = ours.load_state_dict(theirs.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    y = ours(tl.tensor(x)).numpy()
    t64 = TorchBlock().double()
    t64.load_state_dict(theirs.state_dict())
    assert_close_to_torch(y, theirs(torch.tensor(x)), t64(torch.tensor(x, dtype=torch.float64)), "Block")
    # and back: our state dict loads into torch
    theirs2 = TorchBlock()
    theirs2.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    np.testing.assert_array_equal(theirs2.fc1.weight.detach().numpy(), ours.fc1.weight.numpy())


def test_load_state_dict_errors_change_nothing():
    m = Block()
    before = {k: v.numpy() for k, v in m.state_dict().items()}
    sd = {k: v.numpy() for k, v in m.state_dict().items()}
    sd["fc1.weight"] = np.zeros((8, 5), np.float32)
    sd["fc1.bias"] = np.ones(8, np.float32)  # valid, but must not be applied: a later entry is bad
    with pytest.raises(ShapeError, match=r"fc1\.weight.*\(8, 5\).*\(8, 4\)"):
        m.load_state_dict(sd)
    del sd["fc1.weight"]
    sd["extra"] = np.zeros(1)
    with pytest.raises(ArgumentError, match=r"missing keys \['fc1.weight'\].*unexpected keys \['extra'\]"):
        m.load_state_dict(sd)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc1.weight"] and res.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(m.fc1.bias.numpy(), np.ones(8, np.float32))


def test_train_eval_zero_grad_and_attribute_rules():
    m = Block()
    assert m.training and m.layers[0].training
    m.eval()
    assert not m.training and not m.layers[1].training
    m.train()
    y = m(tl.randn(3, 4)).sum()
    y.backward()
    assert all(p.grad is not None for p in m.parameters())
    m.zero_grad(set_to_none=False)
    assert all(float(np.abs(p.grad.numpy()).max()) == 0.0 for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    with pytest.raises(DTypeError, match="parameter 'scale'"):
        m.scale = tl.ones(3)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope  # noqa: B018
    del m.scale
    assert "scale" not in dict(m.named_parameters())
    with pytest.raises(ArgumentError, match="ModuleList is not callable"):
        m.layers(tl.ones(1))


def test_containers():
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and len(seq[:2]) == 2
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert seq(tl.randn(5, 3)).shape == (5, 2)
    from collections import OrderedDict

    named = nn.Sequential(OrderedDict(a=nn.Linear(2, 2), b=nn.Tanh()))
    assert [n for n, _ in named.named_parameters()] == ["a.weight", "a.bias"]
    with pytest.raises(tl.IndexOutOfRangeError):
        seq[3]
    d = nn.ModuleDict({"x": nn.Linear(1, 1)})
    assert "x" in d and list(d.keys()) == ["x"]
    shared = nn.Linear(2, 2)
    tied = nn.Sequential(shared, shared)
    assert len(list(tied.parameters())) == 2  # a shared module counts once, as in PyTorch


def test_init_is_seeded_and_within_pytorch_bounds():
    tl.manual_seed(7)
    a = nn.Linear(50, 30)
    tl.manual_seed(7)
    b = nn.Linear(50, 30)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    bound = 1 / math.sqrt(50)
    w = a.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound  # U(-b, b) has std b/sqrt(3)
    t = nn.init.xavier_uniform_(nn.Parameter(tl.zeros(20, 10)))
    assert np.abs(t.numpy()).max() <= math.sqrt(6 / 30)
    k = nn.init.kaiming_normal_(nn.Parameter(tl.zeros(400, 100)), nonlinearity="relu")
    assert abs(k.numpy().std() - math.sqrt(2 / 100)) < 0.01
    tn = nn.init.trunc_normal_(nn.Parameter(tl.zeros(1000)), std=1.0, a=-0.5, b=0.5)
    assert tn.numpy().min() >= -0.5 and tn.numpy().max() <= 0.5
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        nn.init.xavier_uniform_(nn.Parameter(tl.zeros(3)))


def test_module_to_device_keeps_parameter_identity(device):
    m = nn.Linear(3, 2)
    params = list(m.parameters())
    m.to(device)
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    assert all(p.device.startswith(device) for p in m.parameters())
    assert m(tl.randn(4, 3, device=device)).device == m.weight.device


# -- multi-head attention -------------------------------------------------------------------------
def _mha_pair(E, H, seed=0, **kw):
    torch.manual_seed(seed)
    theirs = torch.nn.MultiheadAttention(E, H, **kw)
    with torch.no_grad():  # non-zero biases so that every parameter matters
        for name, p in theirs.named_parameters():
            if "bias" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    ours = nn.MultiheadAttention(E, H, **kw)
    ours.load_state_dict(theirs.state_dict())
    t64 = torch.nn.MultiheadAttention(E, H, **kw).double()
    t64.load_state_dict(theirs.state_dict())
    return ours, theirs, t64


def test_multihead_attention_parameters_match_pytorch():
    for kw in ({}, {"kdim": 6, "vdim": 5}, {"bias": False}):
        ours, theirs = nn.MultiheadAttention(8, 2, **kw), torch.nn.MultiheadAttention(8, 2, **kw)
        assert [(n, p.shape) for n, p in ours.named_parameters()] == \
            [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("case", ["plain", "batch_first", "bool_mask", "float_mask", "padding", "causal",
                                  "cross_kdim", "unbatched", "per_head_mask"])
def test_multihead_attention_matches_pytorch(device, case, need_weights):
    E, H, L, S, N = 16, 4, 7, 7, 3
    kw = {"batch_first": case == "batch_first"}
    if case == "cross_kdim":
        kw.update(kdim=6, vdim=5)
        S = 9
    ours, theirs, t64 = _mha_pair(E, H, **kw)
    ours.to(device)
    rng = np.random.default_rng(1)
    kd, vd = kw.get("kdim", E), kw.get("vdim", E)

    def shaped(n, d):
        if case == "unbatched":
            return rng.standard_normal((n, d)).astype(np.float32)
        return rng.standard_normal((N, n, d) if kw["batch_first"] else (n, N, d)).astype(np.float32)

    q = shaped(L, E)
    k, v = (shaped(S, kd), shaped(S, vd)) if case == "cross_kdim" else (q, q)
    extra, textra = {}, {}
    if case == "bool_mask":
        m = rng.random((L, S)) < 0.3
        m[2] = True  # a fully blocked row: NaN with need_weights (as PyTorch), else 0; checked apart
        extra["attn_mask"], textra["attn_mask"] = tl.tensor(m), torch.tensor(m)
    elif case == "float_mask":
        m = (rng.standard_normal((L, S)) * 2).astype(np.float32)
        extra["attn_mask"], textra["attn_mask"] = tl.tensor(m, device=device), torch.tensor(m)
    elif case == "per_head_mask":
        m = rng.random((N * H, L, S)) < 0.3
        m[..., 0] = False
        extra["attn_mask"], textra["attn_mask"] = tl.tensor(m), torch.tensor(m)
    elif case == "padding":
        m = np.zeros((N, S), bool)
        m[0, -2:] = True
        m[2, :3] = True
        extra["key_padding_mask"], textra["key_padding_mask"] = tl.tensor(m), torch.tensor(m)
    elif case == "causal":
        m = np.triu(np.ones((L, S), bool), 1)
        extra["is_causal"] = True
        textra["attn_mask"], textra["is_causal"] = torch.tensor(m), True
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out_t, w_t = theirs(tq, tk if case == "cross_kdim" else tq, tv if case == "cross_kdim" else tq,
                        need_weights=need_weights, **textra)
    t64q, t64k, t64v = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    textra64 = {key: (val.double() if isinstance(val, torch.Tensor) and val.is_floating_point() else val)
                for key, val in textra.items()}
    out_64, w_64 = t64(t64q, t64k if case == "cross_kdim" else t64q, t64v if case == "cross_kdim" else t64q,
                       need_weights=need_weights, **textra64)
    xq = tl.tensor(q, device=device, requires_grad=True)
    xk = tl.tensor(k, device=device, requires_grad=True) if case == "cross_kdim" else xq
    xv = tl.tensor(v, device=device, requires_grad=True) if case == "cross_kdim" else xq
    out, w = ours(xq, xk, xv, need_weights=need_weights, **extra)
    o = out.numpy()
    query_axis = -2 if kw["batch_first"] else 0  # (N, L, E) or (L, N, E); unbatched (L, E) has it at 0
    rows = np.ones(L, bool)
    if case == "bool_mask":  # fully blocked query row 2: NaN with the weights (as PyTorch), else 0 then out_proj
        rows[2] = False
        blocked = np.take(o, 2, axis=query_axis)
        assert np.isnan(np.take(out_t.detach().numpy(), 2, axis=query_axis)).all() == need_weights
        if need_weights:
            assert np.isnan(blocked).all()
        else:
            np.testing.assert_array_equal(blocked, np.broadcast_to(ours.out_proj.bias.numpy(), (N, E)))
    sel = (lambda a: np.take(a, np.flatnonzero(rows), axis=query_axis))
    assert_close_to_torch(sel(o), torch.tensor(sel(out_t.detach().numpy())), torch.tensor(sel(out_64.detach().numpy())),
                          f"MHA {case} output")
    if need_weights:
        assert w is not None and w.shape == tuple(w_t.shape)
        wa = w.numpy()
        if case != "bool_mask":
            assert_close_to_torch(wa, w_t, w_64, f"MHA {case} weights")
    else:
        assert w is None
    if case == "bool_mask":
        return  # torch's NaN row poisons its gradients
    g = rng.standard_normal(o.shape).astype(np.float32)
    (out * tl.tensor(g, device=device)).sum().backward()
    (out_t * torch.tensor(g)).sum().backward()
    (out_64 * torch.tensor(g, dtype=torch.float64)).sum().backward()
    assert_close_to_torch(xq.grad.numpy(), tq.grad, t64q.grad, f"MHA {case} d query")
    for (name, p), (_, pt), (_, p64) in zip(ours.named_parameters(), theirs.named_parameters(), t64.named_parameters()):
        assert_close_to_torch(p.grad.numpy(), pt.grad, p64.grad, f"MHA {case} d {name}")


def test_multihead_attention_errors():
    with pytest.raises(ArgumentError, match="multiple of num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ArgumentError, match="add_bias_kv"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)
    m = nn.MultiheadAttention(8, 2)
    with pytest.raises(ShapeError, match="query"):
        m(tl.randn(3, 2, 7), tl.randn(3, 2, 7), tl.randn(3, 2, 7))
    with pytest.raises(ShapeError, match="attn_mask"):
        m(tl.randn(3, 2, 8), tl.randn(3, 2, 8), tl.randn(3, 2, 8), attn_mask=tl.tensor(np.ones((2, 2), bool)))


def _seed_mha_ref(x, wq, wk, wv, wo, heads, mask):
    """The seed's formula in float64 NumPy: per head softmax(Q K^T / sqrt(hd), blocked = -1000) V."""
    x, wq, wk, wv, wo = (a.astype(np.float64) for a in (x, wq, wk, wv, wo))
    n, dm = x.shape
    hd = dm // heads
    q, k, v = ((x @ w).reshape(n, heads, hd).transpose(1, 0, 2) for w in (wq, wk, wv))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
    if mask is not None:
        s = np.where(mask, s, -1000.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(1, 0, 2).reshape(n, dm)
    return o @ wo


@pytest.mark.parametrize("use_flash", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_seed_multi_head_attention(device, use_flash, masked):
    rng = np.random.default_rng(3)
    n, dm, heads = 9, 12, 3
    x = rng.standard_normal((n, dm)).astype(np.float32)
    ws = [(rng.standard_normal((dm, dm)) / math.sqrt(dm)).astype(np.float32) for _ in range(4)]
    mask = None
    if masked:
        mask = rng.random((n, n)) < 0.6
        mask[4] = False  # fully blocked row: uniform weights under the -1000 fill
    ref = _seed_mha_ref(x, *ws, heads, mask)
    xt = tl.tensor(x, device=device, requires_grad=True)
    wts = [tl.tensor(w, device=device, requires_grad=True) for w in ws]
    # the name the README gives: torchlean.ops.multi_head_attention
    y = tl.ops.multi_head_attention(xt, *wts, heads, mask=None if mask is None else tl.tensor(mask),
                                    use_flash=use_flash)
    # Bound: the GEMM chain's error, gamma(k) times the same chain on absolute values.
    xa, wa = np.abs(x.astype(np.float64)), [np.abs(w.astype(np.float64)) for w in ws]
    scale = ((xa @ wa[0]).max() * (xa @ wa[1]).max() / math.sqrt(dm // heads) + 1) * (xa @ wa[2]).max()
    tol = 64 * U * dm * (scale * wa[3].sum(0).max() + np.abs(ref).max())
    assert np.abs(y.numpy() - ref).max() <= tol
    y.sum().backward()
    assert all(np.isfinite(w.grad.numpy()).all() for w in wts)


def test_seed_multi_head_attention_paths_agree_in_gradients(device):
    rng = np.random.default_rng(4)
    n, dm, heads = 17, 16, 2
    x = rng.standard_normal((2, n, dm)).astype(np.float32)
    ws = [(rng.standard_normal((dm, dm)) / math.sqrt(dm)).astype(np.float32) for _ in range(4)]
    grads = []
    for use_flash in (False, True):
        xt = tl.tensor(x, device=device, requires_grad=True)
        wts = [tl.tensor(w, device=device, requires_grad=True) for w in ws]
        mha.multi_head_attention(xt, *wts, heads, use_flash=use_flash, causal=True).sum().backward()
        grads.append([xt.grad.numpy()] + [w.grad.numpy() for w in wts])
    for a, b in zip(*grads):
        assert np.abs(a - b).max() <= 1e-4 * (np.abs(a).max() + 1)


# -- layers of issue 6 that exist already: conv, pool, norms, embedding ---------------------------
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_conv_norm_pool_stack_matches_pytorch(device, mode):
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                 torch.nn.MaxPool2d(2),
                                 torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
                                 torch.nn.AvgPool2d(2), torch.nn.Identity())
    ours = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1), nn.AvgPool2d(2),
                         nn.Identity())
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with torch.no_grad():
        theirs[1].running_mean.uniform_(-0.5, 0.5)
        theirs[1].running_var.uniform_(0.5, 2.0)
        theirs[1].weight.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())
    ours.to(device)
    import copy

    t64 = copy.deepcopy(theirs).double()
    for m in (theirs, t64):
        m.train(mode == "train")
    ours.train(mode == "train")
    x = np.random.default_rng(0).standard_normal((4, 3, 10, 10)).astype(np.float32)
    y = ours(tl.tensor(x, device=device))
    assert_close_to_torch(y.numpy(), theirs(torch.tensor(x)), t64(torch.tensor(x, dtype=torch.float64)), mode)
    bn, tbn, t64bn = ours[1], theirs[1], t64[1]
    assert_close_to_torch(bn.running_mean.numpy(), tbn.running_mean, t64bn.running_mean, "running_mean")
    assert_close_to_torch(bn.running_var.numpy(), tbn.running_var, t64bn.running_var, "running_var")
    assert int(bn.num_batches_tracked.numpy()) == int(tbn.num_batches_tracked)


def test_layer_norm_and_embedding_modules_match_pytorch():
    torch.manual_seed(1)
    ln, tln = nn.LayerNorm(6), torch.nn.LayerNorm(6)
    with torch.no_grad():
        tln.weight.uniform_(0.5, 1.5)
        tln.bias.uniform_(-1, 1)
    ln.load_state_dict(tln.state_dict())
    x = np.random.default_rng(2).standard_normal((3, 6)).astype(np.float32)
    t64 = torch.nn.LayerNorm(6).double()
    t64.load_state_dict(tln.state_dict())
    assert_close_to_torch(ln(tl.tensor(x)).numpy(), tln(torch.tensor(x)), t64(torch.tensor(x, dtype=torch.float64)),
                          "LayerNorm")
    emb, temb = nn.Embedding(10, 4, padding_idx=0), torch.nn.Embedding(10, 4, padding_idx=0)
    assert not emb.weight.numpy()[0].any()
    emb.load_state_dict(temb.state_dict())
    idx = np.array([[1, 0, 9], [3, 3, 2]])
    np.testing.assert_array_equal(emb(tl.tensor(idx)).numpy(), temb(torch.tensor(idx)).detach().numpy())


def test_batch_norm_cumulative_momentum_and_untracked():
    bn, tbn = nn.BatchNorm1d(3, momentum=None), torch.nn.BatchNorm1d(3, momentum=None)
    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal((8, 3)).astype(np.float32)
        bn(tl.tensor(x))
        tbn(torch.tensor(x))
    np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)
    free = nn.BatchNorm2d(2, track_running_stats=False, affine=False).eval()
    assert list(free.state_dict()) == []
    assert free(tl.randn(2, 2, 3, 3)).shape == (2, 2, 3, 3)
    with pytest.raises(ShapeError, match="BatchNorm2d: expected a 4-D input"):
        nn.BatchNorm2d(2)(tl.randn(2, 2))
    with pytest.raises(ArgumentError, match="groups"):  # (grouped convs are supported: 4 is not divisible by 3)
        nn.Conv2d(4, 4, 3, groups=3)
