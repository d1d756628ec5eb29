"""RNN, LSTM, GRU and their cells against PyTorch with copied weights (outputs, final states and every
gradient), the recurrent-cell primitives (lstm_cell_*, gru_cell_*: parity with the spec is in
test_primitives_parity.py through the table; here the VJPs against finite differences and a
contract that rejects wrong kernels), and the errors of unsupported arguments and wrong shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchlean as tl
import torchlean.nn as tnn
from torchlean import contract, spec
from torchlean.errors import ArgumentError, DTypeError, ShapeError, TorchLeanError
from torchlean.testing.primitive_table import TABLE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32
ATOL, RTOL = 2e-5, 2e-4


def np_of(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.detach().cpu().numpy() if hasattr(t, "cpu") else t.numpy())


def close(got, want, what: str) -> None:
    g, w = np_of(got), np_of(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=what)


def pair(cls_name: str, *args, device: str = "cpu", **kwargs):
    """The torch module and a torchlean one with the torch module's state_dict loaded."""
    torch.manual_seed(0)
    t = getattr(torch.nn, cls_name)(*args, **kwargs)
    m = getattr(tnn, cls_name)(*args, **kwargs)
    assert list(m.state_dict()) == list(t.state_dict())
    m.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return t, m.to(device)


def inputs(rng, shape, device):
    x = rng.standard_normal(shape).astype(F32)
    return torch.tensor(x, requires_grad=True), tl.tensor(x, requires_grad=True, device=device)


def check_grads(t, m, pairs_of_leaves):
    named = dict(m.named_parameters())
    for name, p in t.named_parameters():
        close(named[name].grad, p.grad, f"grad of {name}")
    for a, b, what in pairs_of_leaves:
        close(b.grad, a.grad, f"grad of {what}")


# -- the layers against torch -------------------------------------------------------------------------
LAYERS = [
    ("LSTM", {}),
    ("GRU", {}),
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu"}),
]
CONFIGS = [
    {},
    {"batch_first": True},
    {"bidirectional": True},
    {"num_layers": 2, "dropout": 0.0},
    {"num_layers": 2, "bidirectional": True, "batch_first": True, "bias": False},
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "plain")
@pytest.mark.parametrize("cls_name, kw", LAYERS, ids=["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_layer_matches_torch(cls_name, kw, config, device):
    rng = np.random.default_rng(1)
    t, m = pair(cls_name, 5, 6, **kw, **config, device=device)
    D = 2 if config.get("bidirectional") else 1
    L = config.get("num_layers", 1)
    T, B = 4, 3
    xt, xl = inputs(rng, (B, T, 5) if config.get("batch_first") else (T, B, 5), device)
    ht, hl = inputs(rng, (L * D, B, 6), device)
    lstm = cls_name == "LSTM"
    if lstm:
        ct, cl = inputs(rng, (L * D, B, 6), device)
        ot, (hnt, cnt) = t(xt, (ht, ct))
        ol, (hnl, cnl) = m(xl, (hl, cl))
        close(cnl, cnt, "c_n")
    else:
        ot, hnt = t(xt, ht)
        ol, hnl = m(xl, hl)
    close(ol, ot, "output")
    close(hnl, hnt, "h_n")
    w = rng.standard_normal(tuple(ot.shape)).astype(F32)
    lt = (ot * torch.tensor(w)).sum() + (hnt ** 2).sum() + ((cnt * 3).sum() if lstm else 0)
    ll = (ol * tl.tensor(w, device=device)).sum() + (hnl ** 2).sum() + ((cnl * 3).sum() if lstm else 0)
    lt.backward()
    ll.backward()
    leaves = [(xt, xl, "input"), (ht, hl, "h_0")] + ([(ct, cl, "c_0")] if lstm else [])
    check_grads(t, m, leaves)


@pytest.mark.parametrize("cls_name", ["LSTM", "GRU", "RNN"])
def test_unbatched_input_and_default_state(cls_name):
    rng = np.random.default_rng(2)
    t, m = pair(cls_name, 4, 3, num_layers=2, bidirectional=True)
    xt, xl = inputs(rng, (5, 4), "cpu")
    ot, st = t(xt)
    ol, sl = m(xl)
    close(ol, ot, "output")
    if cls_name == "LSTM":
        close(sl[0], st[0], "h_n")
        close(sl[1], st[1], "c_n")
    else:
        close(sl, st, "h_n")
    ot.sum().backward()
    ol.sum().backward()
    check_grads(t, m, [(xt, xl, "input")])


# -- the cells -----------------------------------------------------------------------------------------
CELLS = [("LSTMCell", {}), ("GRUCell", {}), ("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}),
         ("GRUCell", {"bias": False})]


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("cls_name, kw", CELLS, ids=["lstm", "gru", "rnn_tanh", "rnn_relu", "gru_nobias"])
def test_cell_matches_torch(cls_name, kw, batched, device):
    rng = np.random.default_rng(3)
    t, m = pair(cls_name, 5, 4, **kw, device=device)
    lead = (3,) if batched else ()
    xt, xl = inputs(rng, lead + (5,), device)
    ht, hl = inputs(rng, lead + (4,), device)
    if cls_name == "LSTMCell":
        ct, cl = inputs(rng, lead + (4,), device)
        (h2t, c2t), (h2l, c2l) = t(xt, (ht, ct)), m(xl, (hl, cl))
        close(c2l, c2t, "c'")
        lt, ll = (h2t * 2).sum() + (c2t ** 2).sum(), (h2l * 2).sum() + (c2l ** 2).sum()
        leaves = [(xt, xl, "input"), (ht, hl, "h"), (ct, cl, "c")]
    else:
        h2t, h2l = t(xt, ht), m(xl, hl)
        lt, ll = (h2t ** 2).sum(), (h2l ** 2).sum()
        leaves = [(xt, xl, "input"), (ht, hl, "hx")]
    close(h2l, h2t, "h'")
    lt.backward()
    ll.backward()
    check_grads(t, m, leaves)


def test_cell_without_state_starts_from_zeros():
    rng = np.random.default_rng(4)
    t, m = pair("LSTMCell", 3, 2)
    xt, xl = inputs(rng, (2, 3), "cpu")
    (ht, ct), (hl, cl) = t(xt), m(xl)
    close(hl, ht, "h'")
    close(cl, ct, "c'")


# -- a word-level language model: embedding, 2-layer LSTM, decoder, hidden state carried ------------
def test_lstm_language_model_steps_match_torch():
    V, E, H, B, T = 11, 6, 8, 3, 5
    rng = np.random.default_rng(5)

    def build(nn, lib):
        class LM(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(V, E)
                self.rnn = nn.LSTM(E, H, 2, dropout=0.0)
                self.dec = nn.Linear(H, V)

            def forward(self, x, hidden):
                out, hidden = self.rnn(self.emb(x), hidden)
                return self.dec(out).reshape(-1, V), hidden

        return LM()

    torch.manual_seed(0)
    tm, lm = build(torch.nn, torch), build(tnn, tl)
    lm.load_state_dict({k: tl.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.5)
    lopt = tl.optim.SGD(lm.parameters(), lr=0.5)
    hid_t = (torch.zeros(2, B, H), torch.zeros(2, B, H))
    hid_l = (tl.zeros(2, B, H), tl.zeros(2, B, H))
    for step in range(3):
        data = rng.integers(0, V, (T + 1, B))
        x, y = data[:-1], data[1:].reshape(-1)
        hid_t = tuple(h.detach() for h in hid_t)
        hid_l = tuple(h.detach() for h in hid_l)
        out_t, hid_t = tm(torch.tensor(x), hid_t)
        out_l, hid_l = lm(tl.tensor(x), hid_l)
        loss_t = torch.nn.functional.cross_entropy(out_t, torch.tensor(y))
        loss_l = tl.nn.functional.cross_entropy(out_l, tl.tensor(y))
        assert abs(float(loss_l.item()) - float(loss_t.item())) < 1e-4, f"step {step}"
        topt.zero_grad()
        lopt.zero_grad()
        loss_t.backward()
        loss_l.backward()
        topt.step()
        lopt.step()
    for name, p in tm.named_parameters():
        close(dict(lm.named_parameters())[name], p, name)


def test_dropout_between_layers_uses_our_rng():
    m = tnn.GRU(3, 4, num_layers=2, dropout=0.5)
    x = tl.tensor(np.random.default_rng(6).standard_normal((5, 2, 3)).astype(F32), requires_grad=True)
    tl.manual_seed(7)
    a, _ = m(x)
    tl.manual_seed(7)
    b, _ = m(x)
    m.eval()
    c, _ = m(x)
    np.testing.assert_array_equal(np_of(a), np_of(b))  # same seed, same mask
    assert not np.allclose(np_of(a), np_of(c))         # dropout acted in training only
    a.sum().backward()
    assert x.grad is not None and np.isfinite(np_of(x.grad)).all()


def test_module_path_and_state_dict_names():
    import torchlean.nn.modules.rnn as path

    assert path.LSTM is tnn.LSTM and path.GRUCell is tnn.GRUCell and path.RNNBase is tnn.RNNBase
    t, m = pair("LSTM", 2, 3, num_layers=2, bidirectional=True)
    assert [tuple(v.shape) for v in m.state_dict().values()] == [tuple(v.shape) for v in t.state_dict().values()]
    bound = 1 / np.sqrt(3)
    fresh = tnn.GRU(2, 3)
    for p in fresh.parameters():
        assert np.all(np.abs(np_of(p)) <= bound) and np.std(np_of(p)) > 0
    m.flatten_parameters()
    assert len(m.all_weights) == 4 and len(m.all_weights[0]) == 4


# -- errors --------------------------------------------------------------------------------------------
def test_unsupported_arguments_are_refused():
    with pytest.raises(ArgumentError, match="proj_size"):
        tnn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ArgumentError, match="proj_size"):
        tnn.GRU(3, 4, proj_size=2)
    with pytest.raises(ArgumentError, match="nonlinearity"):
        tnn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ArgumentError, match="nonlinearity"):
        tnn.RNNCell(3, 4, nonlinearity="gelu")
    with pytest.raises(ArgumentError, match="dropout"):
        tnn.LSTM(3, 4, 2, dropout=1.5)
    with pytest.raises(ArgumentError, match="hidden_size"):
        tnn.GRU(3, 0)

    class PackedSequence:  # stands in for torch.nn.utils.rnn.PackedSequence
        pass

    with pytest.raises(ArgumentError, match="nn.LSTM: PackedSequence input is not supported"):
        tnn.LSTM(3, 4)(PackedSequence())
    with pytest.raises(ArgumentError, match="PackedSequence"):
        tnn.GRU(3, 4)(torch.nn.utils.rnn.pack_padded_sequence(torch.zeros(2, 1, 3), [2]))


def test_wrong_shapes_name_the_call():
    x = tl.zeros(4, 2, 3)
    with pytest.raises(ShapeError, match=r"nn.LSTM: expected input to be 2-D .* got 4-D"):
        tnn.LSTM(3, 5)(tl.zeros(1, 4, 2, 3))
    with pytest.raises(ShapeError, match="input_size. Expected 3, got 7"):
        tnn.GRU(3, 5)(tl.zeros(4, 2, 7))
    with pytest.raises(ShapeError, match=r"nn.GRU: expected hx of size \(2, 2, 5\), got \(1, 2, 5\)"):
        tnn.GRU(3, 5, bidirectional=True)(x, tl.zeros(1, 2, 5))
    with pytest.raises(ShapeError, match="should also be 3-D"):
        tnn.RNN(3, 5)(x, tl.zeros(2, 5))
    with pytest.raises(ArgumentError, match=r"nn.LSTM: hx must be a tuple \(h_0, c_0\)"):
        tnn.LSTM(3, 5)(x, tl.zeros(1, 2, 5))
    with pytest.raises(ShapeError, match="c_0"):
        tnn.LSTM(3, 5)(x, (tl.zeros(1, 2, 5), tl.zeros(1, 3, 5)))
    with pytest.raises(DTypeError, match="nn.RNN: expected a Tensor for input, got numpy.ndarray"):
        tnn.RNN(3, 5)(np.zeros((4, 2, 3), F32))
    with pytest.raises(ShapeError, match="sequence length"):
        tnn.LSTM(3, 5)(tl.zeros(0, 2, 3))
    with pytest.raises(ShapeError, match="nn.LSTMCell: Expected input to be 1D or 2D, got 3D"):
        tnn.LSTMCell(3, 5)(x)
    with pytest.raises(ShapeError, match="nn.GRUCell: input has inconsistent input_size: got 4 expected 3"):
        tnn.GRUCell(3, 5)(tl.zeros(2, 4))
    with pytest.raises(ShapeError, match="nn.RNNCell: expected hx of shape"):
        tnn.RNNCell(3, 5)(tl.zeros(2, 3), tl.zeros(3, 5))
    for err in (ShapeError, ArgumentError, DTypeError):
        assert issubclass(err, TorchLeanError)


def test_primitives_check_their_buffers():
    from torchlean.runtime import Buffer
    from torchlean.runtime import primitives as P

    z = Buffer.from_numpy(np.zeros(8, F32), "cpu")
    with pytest.raises(ShapeError, match="lstm_cell_fwd"):
        P.lstm_cell_fwd(z, z, z, 1, 4)  # gi needs 16 elements
    with pytest.raises(ShapeError, match="gru_cell_bwd"):
        P.gru_cell_bwd(z, z, z, 1, 4)


# -- the primitives: VJPs against finite differences, and contracts that reject wrong kernels ----------
def _fd_vjp(f, args, which, cot, eps=1e-6):
    """sum over outputs of <cot_k, d out_k / d args[which]> by central differences (float64)."""
    x = args[which]
    grad = np.zeros_like(x)
    for i in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        op = f(*args[:which], xp, *args[which + 1:])
        om = f(*args[:which], xm, *args[which + 1:])
        grad[i] = sum(np.dot(c, (p - m) / (2 * eps)) for c, p, m in zip(cot, op, om))
    return grad


def test_lstm_cell_vjp_matches_finite_differences():
    rng = np.random.default_rng(8)
    B, H = 2, 3
    gi, gh, c = rng.standard_normal(4 * B * H), rng.standard_normal(4 * B * H), rng.standard_normal(B * H)
    dh, dc = rng.standard_normal(B * H), rng.standard_normal(B * H)
    _, _, act = spec.lstm_cell_fwd(gi, gh, c, B, H)
    dg, dcp = spec.lstm_cell_bwd(act, c, dh, dc, B, H)

    def f(gi_, c_):
        h, cn, _ = spec.lstm_cell_fwd(gi_, gh, c_, B, H)
        return h, cn

    np.testing.assert_allclose(dg, _fd_vjp(f, [gi, c], 0, [dh, dc]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dcp, _fd_vjp(f, [gi, c], 1, [dh, dc]), rtol=1e-6, atol=1e-8)


def test_gru_cell_vjp_matches_finite_differences():
    rng = np.random.default_rng(9)
    B, H = 2, 3
    gi, gh, hp = rng.standard_normal(3 * B * H), rng.standard_normal(3 * B * H), rng.standard_normal(B * H)
    dh = rng.standard_normal(B * H)
    _, act = spec.gru_cell_fwd(gi, gh, hp, B, H)
    dgi, dgh, dhp = spec.gru_cell_bwd(act, hp, dh, B, H)

    def f(gi_, gh_, hp_):
        return (spec.gru_cell_fwd(gi_, gh_, hp_, B, H)[0],)

    np.testing.assert_allclose(dgi, _fd_vjp(f, [gi, gh, hp], 0, [dh]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dgh, _fd_vjp(f, [gi, gh, hp], 1, [dh]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dhp, _fd_vjp(f, [gi, gh, hp], 2, [dh]), rtol=1e-6, atol=1e-8)  # direct term only


def test_recurrence_vjp_matches_finite_differences():
    """The whole layer node (BPTT through the fused cells and the GEMMs), in float32 against central
    differences of the float32 forward: a loose tolerance, but a wrong term is an O(1) change."""
    rng = np.random.default_rng(10)
    for cls in ("LSTM", "GRU"):
        m = getattr(tnn, cls)(2, 3, bidirectional=True)
        x0 = rng.standard_normal((3, 2, 2)).astype(F32)
        w = rng.standard_normal((3, 2, 6)).astype(F32)
        x = tl.tensor(x0, requires_grad=True)
        (m(x)[0] * tl.tensor(w)).sum().backward()
        eps = 1e-2
        fd = np.zeros_like(x0)
        with tl.no_grad():
            for i in range(x0.size):
                xp, xm = x0.copy().reshape(-1), x0.copy().reshape(-1)
                xp[i] += eps
                xm[i] -= eps
                lp = float((m(tl.tensor(xp.reshape(x0.shape)))[0] * tl.tensor(w)).sum().item())
                lm = float((m(tl.tensor(xm.reshape(x0.shape)))[0] * tl.tensor(w)).sum().item())
                fd.reshape(-1)[i] = (lp - lm) / (2 * eps)
        np.testing.assert_allclose(np_of(x.grad), fd, rtol=2e-2, atol=2e-3, err_msg=cls)


def _gate_swap_lstm(gi, gh, c, B, H):
    """A wrong kernel: the f and i gates exchanged."""
    a, b = gi.reshape(B, 4, H)[:, [1, 0, 2, 3]].reshape(-1), gh.reshape(B, 4, H)[:, [1, 0, 2, 3]].reshape(-1)
    return tuple(o.astype(F32) for o in spec.lstm_cell_fwd(a, b, c, B, H))


def _no_reset_gru(gi, gh, hp, B, H):
    """A wrong kernel: n = tanh(gi_n + gh_n), the reset gate forgotten."""
    h, act = spec.gru_cell_fwd(gi, gh, hp, B, H)
    a, b = gi.reshape(B, 3, H), gh.reshape(B, 3, H)
    z = act.reshape(B, 4, H)[:, 1]
    n = np.tanh(a[:, 2] + b[:, 2])
    return (n + z * (hp.reshape(B, H) - n)).reshape(-1).astype(F32), act.astype(F32)


def _float32_rounding_only(name):
    def run(*args):
        out = getattr(spec, name)(*args)
        return tuple(o.astype(F32) for o in out)
    return run


@pytest.mark.parametrize("name, fake, fails", [
    ("lstm_cell_fwd", _gate_swap_lstm, True),
    ("gru_cell_fwd", _no_reset_gru, True),
    ("lstm_cell_fwd", _float32_rounding_only("lstm_cell_fwd"), False),
    ("gru_cell_bwd", _float32_rounding_only("gru_cell_bwd"), False),
])
def test_contracts_reject_wrong_kernels(name, fake, fails):
    info = TABLE[name]
    rng = np.random.default_rng(11)
    args = info.sample(rng, (4, 5), "normal")
    sargs = [a.astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    ref = info.spec(*sargs)
    verdict = contract.compare(fake(*sargs), ref, info.contract.bound(ref, *sargs))
    assert verdict.ok is not fails, verdict.detail
