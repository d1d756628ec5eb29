"""exp / tanh around 2**20 elements, where the CPU kernel used to split the work over Python threads
(now one NumPy call on the calling thread: kernels/cpu/parallel.py): both sides against the spec
within the contract, and the result bitwise equal to one NumPy call over the whole array."""

from __future__ import annotations

import numpy as np
import pytest

from torchlean.kernels.cpu import elementwise as cpu_elementwise
from torchlean.testing.primitive_table import SPECIALS, TABLE, run_case

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F32 = np.float32
LIMIT = 1 << 20


def _x(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 30).astype(F32)
    x[:: 97][: SPECIALS.size] = SPECIALS[: x[:: 97].size]
    return x


@pytest.mark.parametrize("name,ufunc", [("exp", np.exp), ("tanh", np.tanh)])
@pytest.mark.parametrize("n", [LIMIT - 1, LIMIT + 7])
def test_split_ufuncs_within_contract_and_unchanged(name, ufunc, n, device):
    x = _x(n)
    verdict, out, _ = run_case(TABLE[name], [x], device)
    assert verdict.ok, f"{name}[{n}] on {device}: {verdict.detail}"
    if device == "cpu":
        with np.errstate(all="ignore"):
            whole = ufunc(x)
        same = np.asarray(out).view(np.uint32) == whole.view(np.uint32)
        assert np.all(same | (np.isnan(np.asarray(out)) & np.isnan(whole)))
