"""Helpers shared by the training programs in this folder.

The programs run under PyTorch and under torchlean with only the import switched, so this file
uses nothing but the API the two share. PyTorch and torchlean draw different random numbers from
the same seed, so a program's losses can only be compared step by step when none of its random
inputs comes from the framework's generator. Comparison mode ("deterministic init") draws every
one of them from NumPy instead: parameters (``np_init``), data, noise, batch indices, and turns
dropout off.
"""

import os
import zlib

import numpy as np

if os.environ.get("TORCHLEAN_PROGRAMS_FRAMEWORK", "torchlean") == "torch":
    import torch
else:
    import torchlean as torch


def np_rng(seed, stream=""):
    """A NumPy generator for one named stream, so adding a draw in one place leaves the others alone."""
    return np.random.default_rng([seed, zlib.crc32(stream.encode())])


def _draw(rng, name, shape):
    leaf = name.rsplit(".", 1)[-1]
    if leaf.endswith("bias"):
        return rng.uniform(-0.05, 0.05, size=shape)
    if len(shape) == 1:
        # Norm weights, Mamba's D: PyTorch starts these at one.
        return np.ones(shape)
    fan_in = int(np.prod(shape[1:]))
    bound = 1.0 / np.sqrt(fan_in)       # the bound of PyTorch's default Linear/Conv init
    return rng.uniform(-bound, bound, size=shape)


def np_init(model, seed):
    """Overwrite every parameter of ``model`` with values drawn from NumPy.

    Each parameter's values depend only on its qualified name and ``seed``, never on the order of
    ``named_parameters``, so the same model defined in either framework gets the same weights.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.is_complex():
                # The reference FNO's spectral weights, scale * torch.rand(in, out, ..., dtype=cfloat):
                # real and imaginary parts uniform in [0, 1 / (in * out)).
                shape = tuple(p.shape)
                values = np_rng(seed, name).uniform(0.0, 1.0 / (shape[0] * shape[1]), size=shape + (2,))
                p.copy_(torch.view_as_complex(torch.from_numpy(values.astype(np.float32))).to(p.device))
                continue
            values = _draw(np_rng(seed, name), name, tuple(p.shape)).astype(np.float32)
            p.copy_(torch.from_numpy(values).to(p.device))
    return model


def np_randn_like(rng, t):
    """Standard normal noise shaped like ``t``, from NumPy, on ``t``'s device."""
    values = rng.standard_normal(tuple(t.shape)).astype(np.float32)
    return torch.from_numpy(values).to(t.device)


def np_randn(rng, shape, device):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(device)


def np_randint(rng, high, shape, device):
    return torch.from_numpy(rng.integers(0, high, size=shape).astype(np.int64)).to(device)


def cli(main, default_steps):
    """The command line every program shares: ``--steps``, ``--seed``, ``--deterministic``."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--deterministic", action="store_true",
                        help="weights, data and noise from NumPy; dropout off (for comparing frameworks)")
    args = parser.parse_args()
    losses = main(args.steps, args.seed, deterministic=args.deterministic)
    print("losses:", " ".join(f"{v:.4f}" for v in losses))
