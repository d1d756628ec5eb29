"""nn.Transformer and its encoder/decoder (layers) against PyTorch with copied weights.

Every case loads a PyTorch module's state dict (random biases and norm weights, so every parameter
matters) into torchlean's module and compares the output and the gradients of the inputs and of
every parameter with PyTorch float32 and float64 (dropout 0): both layouts (batch_first), both
norm orders (norm_first), the activations, and masks of every kind (bool / float, 2-D / 3-D
attention masks, bool / float key padding masks, the generated causal mask with the is_causal
hints). Then eval mode under no_grad, where PyTorch's nested-tensor path zeroes padded positions,
the generated mask itself, attention dropout's returned weights, and the errors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import torchlean as tl
from torchlean import nn
from torchlean.errors import ArgumentError, ShapeError

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests; install torchlean[test]")
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")  # PyTorch's notice

U = 2.0**-24
D, H, FF = 8, 2, 16  # d_model, nhead, dim_feedforward
N, S, T = 2, 5, 4  # batch, source length, target length


def assert_close(ours: np.ndarray, t32, t64, what: str) -> None:
    ref = t64.detach().cpu().numpy()
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != {ref.shape}"
    e_ours = np.max(np.abs(ours.astype(np.float64) - ref), initial=0.0)
    e_torch = np.max(np.abs(t32.detach().cpu().double().numpy() - ref), initial=0.0)
    tol = 4 * e_torch + 64 * U * max(np.max(np.abs(ref), initial=0.0), 1.0)
    assert e_ours <= tol, f"{what}: max error {e_ours:.3g} > {tol:.3g} (torch float32's error {e_torch:.3g})"


def _torch_module(kind: str, seed: int, **kw):
    torch.manual_seed(seed)
    args = dict(dim_feedforward=FF, dropout=0.0, **kw)
    if kind == "encoder_layer":
        m = torch.nn.TransformerEncoderLayer(D, H, **args)
    elif kind == "decoder_layer":
        m = torch.nn.TransformerDecoderLayer(D, H, **args)
    elif kind == "encoder":
        m = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, **args), 2,
                                        norm=torch.nn.LayerNorm(D), enable_nested_tensor=False)
    elif kind == "decoder":
        m = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(D, H, **args), 2, norm=torch.nn.LayerNorm(D))
    else:
        m = torch.nn.Transformer(D, H, 2, 2, **args)
    with torch.no_grad():  # distinct layers, non-zero biases, non-unit norm weights: every parameter matters
        for name, p in m.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.1) + (1.0 if "norm" in name and
                                                                          name.endswith("weight") else 0.0))
    return m


def _ours(kind: str, **kw):
    args = dict(dim_feedforward=FF, dropout=0.0, **kw)
    if kind == "encoder_layer":
        return nn.TransformerEncoderLayer(D, H, **args)
    if kind == "decoder_layer":
        return nn.TransformerDecoderLayer(D, H, **args)
    if kind == "encoder":
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, **args), 2, norm=nn.LayerNorm(D),
                                     enable_nested_tensor=False)
    if kind == "decoder":
        return nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, **args), 2, norm=nn.LayerNorm(D))
    return nn.Transformer(D, H, 2, 2, **args)


def _masks(case: str, rng) -> dict:
    """numpy masks by argument name (bool: True = blocked; float: added) for a mask case."""
    out: dict = {}
    src_kpm = np.zeros((N, S), bool)
    src_kpm[1, 3:] = True
    tgt_kpm = np.zeros((N, T), bool)
    tgt_kpm[0, 2:] = True
    causal = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    if case == "bool_mask":
        m = rng.random((S, S)) < 0.4
        np.fill_diagonal(m, False)  # no fully blocked row (those give NaN or 0 by path in PyTorch)
        out["src_mask"] = m
    elif case == "float_mask":
        m = rng.standard_normal((S, S)).astype(np.float32)
        m[rng.random((S, S)) < 0.3] = -np.inf
        np.fill_diagonal(m, 0.5)
        out["src_mask"] = m
    elif case == "mask_3d":
        m = rng.random((N * H, S, S)) < 0.4
        m[:, :, 0] = False
        out["src_mask"] = m
    elif case == "padding_bool":
        out["src_key_padding_mask"] = src_kpm
    elif case == "padding_float":
        out["src_key_padding_mask"] = np.where(src_kpm, -np.inf, 0.0).astype(np.float32)
    elif case == "causal":
        out["src_mask"] = np.triu(np.full((S, S), -np.inf, np.float32), 1)
        out["is_causal"] = True
    elif case == "float_and_padding":
        out["src_mask"] = (rng.standard_normal((S, S)) * 0.5).astype(np.float32)
        out["src_key_padding_mask"] = src_kpm
    elif case == "tgt_causal":
        out["tgt_mask"], out["tgt_is_causal"] = causal, True
    elif case == "memory_mask":
        m = rng.random((T, S)) < 0.4
        m[:, 0] = False
        out["memory_mask"] = m
    elif case == "decoder_all":
        out["tgt_mask"] = causal
        out["memory_mask"] = np.where(rng.random((T, S)) < 0.3, -np.inf, 0.0).astype(np.float32)
        out["memory_mask"][:, 0] = 0.0
        out["tgt_key_padding_mask"], out["memory_key_padding_mask"] = tgt_kpm, src_kpm
    elif case == "transformer_all":
        out["src_mask"] = np.zeros((S, S), bool)
        out["tgt_mask"] = causal
        out["src_key_padding_mask"], out["tgt_key_padding_mask"] = src_kpm, tgt_kpm
        out["memory_key_padding_mask"] = src_kpm
    return out


def _convert(masks: dict, make):
    return {k: (make(v) if isinstance(v, np.ndarray) else v) for k, v in masks.items()}


def _call(kind: str, m, x, mem, masks: dict):
    if kind == "encoder_layer":
        return m(x, masks.get("src_mask"), masks.get("src_key_padding_mask"), is_causal=masks.get("is_causal", False))
    if kind == "encoder":
        return m(x, mask=masks.get("src_mask"), src_key_padding_mask=masks.get("src_key_padding_mask"),
                 is_causal=masks.get("is_causal"))
    if kind in ("decoder_layer", "decoder"):
        return m(x, mem, tgt_mask=masks.get("tgt_mask"), memory_mask=masks.get("memory_mask"),
                 tgt_key_padding_mask=masks.get("tgt_key_padding_mask"),
                 memory_key_padding_mask=masks.get("memory_key_padding_mask"),
                 tgt_is_causal=masks.get("tgt_is_causal", False if kind == "decoder_layer" else None))
    return m(x, mem, src_mask=masks.get("src_mask"), tgt_mask=masks.get("tgt_mask"),
             memory_mask=masks.get("memory_mask"), src_key_padding_mask=masks.get("src_key_padding_mask"),
             tgt_key_padding_mask=masks.get("tgt_key_padding_mask"),
             memory_key_padding_mask=masks.get("memory_key_padding_mask"), tgt_is_causal=masks.get("tgt_is_causal"))


def _check(kind: str, mask_case: str, device: str = "cpu", seed: int = 0, **kw) -> None:
    batch_first = kw.get("batch_first", False)
    rng = np.random.default_rng(seed)
    t32 = _torch_module(kind, seed, **kw)
    t64 = _torch_module(kind, seed, **kw).double()
    t64.load_state_dict(t32.state_dict())
    ours = _ours(kind, **kw)
    ours.load_state_dict(t32.state_dict())
    ours.to(device)
    shape = lambda n: (N, n, D) if batch_first else (n, N, D)  # noqa: E731
    x_len = S if kind in ("encoder_layer", "encoder", "transformer") else T
    a = rng.standard_normal(shape(x_len)).astype(np.float32)
    b = rng.standard_normal(shape(T if kind == "transformer" else S)).astype(np.float32)
    masks = _masks(mask_case, rng)
    g = None
    grads = {}
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's "mismatched mask types" deprecation notice
        for name, m, lib, dt in (("t32", t32, torch, torch.float32), ("t64", t64, torch, torch.float64)):
            xa = torch.tensor(a, dtype=dt, requires_grad=True)
            xb = torch.tensor(b, dtype=dt, requires_grad=True)
            tm = _convert(masks, lambda v: torch.tensor(v) if v.dtype == bool else torch.tensor(v, dtype=dt))
            out = _call(kind, m, xa, xb, tm)
            if g is None:
                g = rng.standard_normal(tuple(out.shape))
            (out * torch.tensor(g, dtype=dt)).sum().backward()
            results[name] = out
            grads[name] = [xa.grad, xb.grad if xb.grad is not None else torch.zeros(b.shape, dtype=dt)] + \
                [p.grad for _, p in m.named_parameters()]
    xa = tl.tensor(a, device=device, requires_grad=True)
    xb = tl.tensor(b, device=device, requires_grad=True)
    om = _convert(masks, lambda v: tl.tensor(v) if v.dtype == bool else tl.tensor(v, device=device))
    out = _call(kind, ours, xa, xb, om)
    (out * tl.tensor(g.astype(np.float32), device=device)).sum().backward()
    what = f"{kind} {mask_case} {kw}"
    assert_close(out.numpy(), results["t32"], results["t64"], f"{what} output")
    ours_grads = [xa.grad, xb.grad] + [p.grad for _, p in ours.named_parameters()]
    names = ["input", "memory"] + [n for n, _ in ours.named_parameters()]
    for n, mine, g32, g64 in zip(names, ours_grads, grads["t32"], grads["t64"]):
        mine = np.zeros(tuple(g64.shape), np.float32) if mine is None else mine.numpy()
        assert_close(mine, g32, g64, f"{what} d {n}")


@pytest.mark.parametrize("kind", ["encoder_layer", "decoder_layer", "encoder", "decoder", "transformer"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_layouts_and_norm_order_match_pytorch(device, kind, batch_first, norm_first):
    mask_case = {"encoder_layer": "padding_bool", "encoder": "float_and_padding", "decoder_layer": "tgt_causal",
                 "decoder": "decoder_all", "transformer": "transformer_all"}[kind]
    _check(kind, mask_case, device, batch_first=batch_first, norm_first=norm_first)


@pytest.mark.parametrize("mask_case", ["none", "bool_mask", "float_mask", "mask_3d", "padding_bool", "padding_float",
                                       "causal", "float_and_padding"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_masks_match_pytorch(mask_case, batch_first):
    _check("encoder_layer", mask_case, batch_first=batch_first, seed=3)


@pytest.mark.parametrize("mask_case", ["none", "tgt_causal", "memory_mask", "decoder_all"])
def test_decoder_layer_masks_match_pytorch(mask_case):
    _check("decoder_layer", mask_case, batch_first=True, seed=4)


@pytest.mark.parametrize("activation", ["gelu", "relu", "silu_callable", "gelu_module"])
def test_activations_match_pytorch(activation):
    act = {"silu_callable": (torch.nn.functional.silu, nn.functional.silu),
           "gelu_module": (torch.nn.GELU(), nn.GELU())}.get(activation, (activation, activation))
    t32 = _torch_module("encoder_layer", 5, activation=act[0])  # torch's activation there, ours here
    t64 = _torch_module("encoder_layer", 5, activation=act[0]).double()
    t64.load_state_dict(t32.state_dict())
    ours = _ours("encoder_layer", activation=act[1])
    ours.load_state_dict(t32.state_dict())
    a = np.random.default_rng(5).standard_normal((S, N, D)).astype(np.float32)
    assert_close(ours(tl.tensor(a)).numpy(), t32(torch.tensor(a)), t64(torch.tensor(a, dtype=torch.float64)),
                 f"activation {activation}")
    assert ours.activation_relu_or_gelu == t32.activation_relu_or_gelu


def test_parameter_names_and_shapes_match_pytorch():
    cases = [
        (lambda: torch.nn.Transformer(D, H, 2, 1, FF), lambda: nn.Transformer(D, H, 2, 1, FF)),
        (lambda: torch.nn.Transformer(D, H, 1, 1, FF, bias=False), lambda: nn.Transformer(D, H, 1, 1, FF, bias=False)),
        (lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(D, H, FF), 3),
         lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF), 3)),
        (lambda: torch.nn.TransformerDecoderLayer(D, H, FF, norm_first=True),
         lambda: nn.TransformerDecoderLayer(D, H, FF, norm_first=True)),
    ]
    for make_t, make_o in cases:
        theirs, ours = make_t(), make_o()
        assert [(n, tuple(p.shape)) for n, p in theirs.named_parameters()] == \
            [(n, tuple(p.shape)) for n, p in ours.named_parameters()]
        assert list(theirs.state_dict()) == list(ours.state_dict())


def test_cloned_layers_are_independent_and_transformer_init_is_xavier():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF), 2)
    w0, w1 = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert w0 is not w1 and np.array_equal(w0.numpy(), w1.numpy())  # deep copies, as PyTorch
    tl.manual_seed(0)
    m = nn.Transformer(16, 4, 1, 1, 64)
    w = m.encoder.layers[0].linear1.weight.numpy()  # xavier_uniform_: U(-a, a), a = sqrt(6 / (16 + 64))
    a = np.sqrt(6.0 / 80.0)
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.8 * a
    assert m.d_model == 16 and m.nhead == 4 and m.batch_first is False


@pytest.mark.parametrize("sz", [0, 1, 5])
def test_generate_square_subsequent_mask_equals_pytorch(sz):
    ours = nn.Transformer.generate_square_subsequent_mask(sz)
    theirs = torch.nn.Transformer.generate_square_subsequent_mask(sz)
    assert ours.dtype == tl.float32 and ours.shape == tuple(theirs.shape)
    assert np.array_equal(ours.numpy(), theirs.numpy())
    m = nn.Transformer(D, H, 1, 1, FF)
    assert np.array_equal(m.generate_square_subsequent_mask(sz).numpy(), theirs.numpy())


def _eval_pair(enable_nested_tensor: bool, batch_first: bool = True, norm: bool = True):
    torch.manual_seed(7)
    layer = torch.nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=batch_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "enable_nested_tensor is True, but ..." for batch_first=False
        theirs = torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(D) if norm else None,
                                             enable_nested_tensor=enable_nested_tensor)
    ours = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, batch_first=batch_first), 2,
                                 norm=nn.LayerNorm(D) if norm else None, enable_nested_tensor=enable_nested_tensor)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("enable_nested_tensor, batch_first, norm", [(True, True, True), (True, True, False),
                                                                    (False, True, True), (True, False, True)])
def test_eval_no_grad_matches_pytorch_including_zeroed_padding(enable_nested_tensor, batch_first, norm):
    ours, theirs = _eval_pair(enable_nested_tensor, batch_first, norm)
    rng = np.random.default_rng(8)
    a = rng.standard_normal((N, S, D) if batch_first else (S, N, D)).astype(np.float32)
    kpm = np.zeros((N, S), bool)
    kpm[0, 3:] = True  # left-aligned padding (PyTorch's nested path needs it)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype in PyTorch
        with torch.no_grad():
            ref = theirs(torch.tensor(a), src_key_padding_mask=torch.tensor(kpm)).numpy()
    with tl.no_grad():
        out = ours(tl.tensor(a), src_key_padding_mask=tl.tensor(kpm)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    # the padded positions: PyTorch's nested path gives exactly 0 before the final norm
    padded = out[0, 3:] if batch_first else out[3:, 0]
    zeroed = enable_nested_tensor and batch_first
    if zeroed and not norm:
        assert np.all(padded == 0.0)
    elif not zeroed:
        assert np.all(np.abs(padded) > 0.0)
    # with gradients wanted PyTorch takes the ordinary path: nothing is zeroed
    ref_grad = theirs(torch.tensor(a), src_key_padding_mask=torch.tensor(kpm)).detach().numpy()
    out_grad = ours(tl.tensor(a), src_key_padding_mask=tl.tensor(kpm)).numpy()
    np.testing.assert_allclose(out_grad, ref_grad, rtol=1e-4, atol=1e-5)


def test_transformer_eval_mode_with_dropout_matches_pytorch():
    """A trained-in-PyTorch model (dropout 0.1) loaded and run in eval mode: the same outputs."""
    torch.manual_seed(9)
    theirs = torch.nn.Transformer(D, H, 2, 2, FF, dropout=0.1, batch_first=True).eval()
    ours = nn.Transformer(D, H, 2, 2, FF, dropout=0.1, batch_first=True).eval()
    ours.load_state_dict(theirs.state_dict())
    rng = np.random.default_rng(9)
    src, tgt = (rng.standard_normal((N, n, D)).astype(np.float32) for n in (S, T))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T)
    ref = theirs(torch.tensor(src), torch.tensor(tgt), tgt_mask=mask).detach().numpy()
    out = ours(tl.tensor(src), tl.tensor(tgt), tgt_mask=nn.Transformer.generate_square_subsequent_mask(T)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_training_dropout_is_seeded_and_active():
    m = nn.TransformerEncoderLayer(D, H, FF, dropout=0.5)
    x = tl.tensor(np.random.default_rng(10).standard_normal((S, N, D)).astype(np.float32))
    tl.manual_seed(1)
    a = m(x).numpy()
    tl.manual_seed(1)
    b = m(x).numpy()
    c = m.eval()(x).numpy()
    assert np.array_equal(a, b) and not np.allclose(a, c)


def test_attention_dropout_returns_dropped_weights_as_pytorch():
    """PyTorch returns the weights after dropout (zeros and 1/(1-p)-scaled entries); so do we."""
    m = nn.MultiheadAttention(D, H, dropout=0.5, batch_first=True)
    x = tl.tensor(np.random.default_rng(11).standard_normal((N, S, D)).astype(np.float32))
    tl.manual_seed(2)
    out, w = m(x, x, x, average_attn_weights=False)
    _, w_eval = m.eval()(x, x, x, average_attn_weights=False)
    w, w_eval = w.numpy(), w_eval.numpy()
    dropped = w == 0.0
    assert dropped.any() and (~dropped).any()
    np.testing.assert_allclose(w[~dropped], 2.0 * w_eval[~dropped], rtol=1e-5)
    # the output is those weights applied to the values
    m.train()
    tl.manual_seed(2)
    out2, _ = m(x, x, x, need_weights=True)
    np.testing.assert_array_equal(out.numpy(), out2.numpy())


def test_errors_name_the_call():
    with pytest.raises(ArgumentError, match=r"^TransformerEncoderLayer: activation should be 'relu', 'gelu'"):
        nn.TransformerEncoderLayer(D, H, activation="tanh")
    with pytest.raises(ArgumentError, match=r"^TransformerDecoderLayer: activation"):
        nn.TransformerDecoderLayer(D, H, activation=3)
    m = nn.Transformer(D, H, 1, 1, FF)
    with pytest.raises(ShapeError, match=r"^Transformer: the batch number of src and tgt must be equal"):
        m(tl.randn(S, 2, D), tl.randn(T, 3, D))
    with pytest.raises(ShapeError, match=r"^Transformer: the feature number"):
        m(tl.randn(S, 2, D), tl.randn(T, 2, D + 1))
    with pytest.raises(ArgumentError, match=r"^MultiheadAttention: add_bias_kv .* got add_bias_kv=True"):
        nn.MultiheadAttention(D, H, add_bias_kv=True)
    with pytest.raises(ArgumentError, match=r"^Transformer.generate_square_subsequent_mask: sz"):
        nn.Transformer.generate_square_subsequent_mask(-1)


def test_module_paths():
    from torchlean.nn.modules.transformer import Transformer, TransformerEncoderLayer

    assert Transformer is nn.Transformer and TransformerEncoderLayer is nn.TransformerEncoderLayer
    assert tl.nn.TransformerDecoder is nn.TransformerDecoder
