"""Complex tensors in PyTorch's .pt files: a reference FNO checkpoint (complex64 weights saved by
torch.save) loads into torchlean's modules; complex128 is rounded with the float64 warning."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean as tl

torch = pytest.importorskip("torch")


def test_a_torch_saved_complex_state_dict_loads_into_spectral_conv2d(tmp_path):
    torch.manual_seed(0)
    w1 = torch.rand(3, 4, 2, 3, dtype=torch.cfloat) / 12
    w2 = torch.rand(3, 4, 2, 3, dtype=torch.cfloat) / 12
    path = tmp_path / "sc.pt"
    torch.save({"weights1": torch.nn.Parameter(w1), "weights2": torch.nn.Parameter(w2)}, path)
    sd = tl.load(str(path))
    assert tl.is_complex(sd["weights1"]) and sd["weights1"].shape == (3, 4, 2, 3)
    assert np.array_equal(sd["weights2"].numpy(), w2.numpy())
    m = tl.nn.SpectralConv2d(3, 4, 2, 3)
    m.load_state_dict(sd)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    # the reference forward, in torch
    X = torch.fft.rfft2(torch.tensor(x))
    out = torch.zeros(2, 4, 8, 5, dtype=torch.cfloat)
    out[:, :, :2, :3] = torch.einsum("bixy,ioxy->boxy", X[:, :, :2, :3], w1)
    out[:, :, -2:, :3] = torch.einsum("bixy,ioxy->boxy", X[:, :, -2:, :3], w2)
    want = torch.fft.irfft2(out, s=(8, 8)).numpy()
    np.testing.assert_allclose(m(tl.tensor(x)).detach().numpy(), want, rtol=1e-4, atol=1e-6)


def test_complex128_is_rounded_with_a_warning_and_complex_tensors_keep_their_values(tmp_path):
    z = torch.tensor([[1 + 2j, -3.5 + 0.25j]], dtype=torch.cdouble)
    path = tmp_path / "c.pt"
    torch.save({"z": z, "c64": z.to(torch.cfloat)}, path)
    with pytest.warns(UserWarning, match="rounded to float32"):
        got = tl.load(str(path))
    assert got["z"].dtype == tl.complex64 and got["z"].tolist() == [[1 + 2j, -3.5 + 0.25j]]
    assert np.array_equal(got["c64"].numpy(), z.to(torch.cfloat).numpy())

