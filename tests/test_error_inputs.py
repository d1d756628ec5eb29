"""Every entry of torchlean.testing.error_inputs: the bad call raises its TorchLeanError subclass
with a message naming the user's call, PyTorch refuses the same call where the entry says so, and
a refused call leaves the tensors, modules and optimizers it touched as they were."""

from __future__ import annotations

import re

import numpy as np
import pytest

import torchlean as tl
from torchlean.testing.error_inputs import ERROR_INPUTS

# The primitives and helpers a user never calls: a message must not lead with one of them.
_INTERNAL = {"rand_uniform", "rand_normal", "broadcast_to", "Buffer.from_numpy", "conv", "conv_transpose",
             "conv_bwd_input", "max_pool", "avg_pool", "add_module", "swap_adjacent_at_depth"}


def test_table_names_are_unique_and_every_match_leads_with_the_call():
    names = [e.name for e in ERROR_INPUTS]
    assert len(names) == len(set(names))
    assert len(names) >= 200
    for e in ERROR_INPUTS:
        head = re.match(r"\^([A-Za-z_][A-Za-z0-9_.]*)", e.match)
        assert head and head.group(1) not in _INTERNAL, e.name


@pytest.mark.parametrize("entry", ERROR_INPUTS, ids=lambda e: e.name)
def test_error_input(entry):
    tl.manual_seed(0)
    with pytest.raises(entry.error) as info:
        entry.call()
    msg = str(info.value)
    assert isinstance(info.value, tl.TorchLeanError)
    assert re.search(entry.match, msg), f"message {msg!r} does not match {entry.match!r}"


@pytest.mark.parametrize("entry", [e for e in ERROR_INPUTS if e.torch is not None], ids=lambda e: e.name)
def test_pytorch_refuses_it_too(entry):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    with pytest.raises(Exception):  # noqa: B017 - PyTorch's own classes vary (TypeError, RuntimeError...)
        entry.torch()


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a == b


@pytest.mark.parametrize("entry", [e for e in ERROR_INPUTS if e.state is not None], ids=lambda e: e.name)
def test_refused_call_leaves_state_unchanged(entry):
    call, snap = entry.state()
    before = snap()
    with pytest.raises(entry.error):
        call()
    assert _same(before, snap())
