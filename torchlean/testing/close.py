"""``torchlean.testing.assert_close`` (PyTorch's ``torch.testing.assert_close``)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import TorchLeanError
from ..tensor import Tensor

__all__ = ["assert_close", "CloseError"]

# PyTorch's default tolerances by dtype (rtol, atol); integers and bools compare exactly
_TOLERANCES = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
               "float64": (1e-7, 1e-7)}


class CloseError(TorchLeanError, AssertionError):
    """assert_close: the values (or their shapes, dtypes or devices) differ."""


def _values(x: Any) -> tuple[np.ndarray, str, str]:
    if isinstance(x, Tensor):
        return x.numpy(), x.dtype.name, str(x.device)
    a = np.asarray(x)
    if a.dtype.kind == "f":
        return a.astype(np.float64), "float64", "cpu"
    return a, ("bool" if a.dtype.kind == "b" else "int64"), "cpu"


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False,
                 msg: Any = None) -> None:
    """Raise ``CloseError`` (an AssertionError) unless |actual - expected| <= atol + rtol * |expected|
    elementwise, with the same shape (and dtype and device unless told not to check them);
    sequences and mappings compare item by item."""
    _close(actual, expected, "", rtol, atol, equal_nan, check_device, check_dtype, msg)


def _close(actual: Any, expected: Any, where: str, rtol: Any, atol: Any, equal_nan: bool, check_device: bool,
           check_dtype: bool, msg: Any) -> None:
    def fail(text: str) -> None:
        text = f"assert_close: {text}{f' (at {where})' if where else ''}"
        raise CloseError(msg(text) if callable(msg) else msg if msg is not None else text)

    if (rtol is None) != (atol is None):
        raise CloseError("assert_close: both 'rtol' and 'atol' must be either specified or omitted")
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        if set(actual) != set(expected):
            fail(f"the mappings have different keys: {sorted(map(str, actual))} and {sorted(map(str, expected))}")
        for k in expected:
            _close(actual[k], expected[k], f"{where}[{k!r}]", rtol, atol, equal_nan, check_device, check_dtype, msg)
        return
    if (isinstance(expected, Sequence) and isinstance(actual, Sequence) and not isinstance(expected, str)
            and not isinstance(actual, Tensor) and not isinstance(expected, Tensor)):
        if len(actual) != len(expected):
            fail(f"the sequences have different lengths: {len(actual)} and {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _close(a, e, f"{where}[{i}]", rtol, atol, equal_nan, check_device, check_dtype, msg)
        return
    if not isinstance(actual, (Tensor, numbers.Number, np.ndarray, np.number)) or \
            not isinstance(expected, (Tensor, numbers.Number, np.ndarray, np.number)):
        if actual != expected:
            fail(f"{actual!r} != {expected!r}")
        return
    if isinstance(actual, Tensor) != isinstance(expected, Tensor):
        fail(f"expected both to be tensors or both numbers, got {type(actual).__name__} and "
             f"{type(expected).__name__}")
    a, adt, adev = _values(actual)
    e, edt, edev = _values(expected)
    if a.shape != e.shape:
        fail(f"the values have different shapes: {a.shape} and {e.shape}")
    if check_dtype and adt != edt:
        fail(f"the values have different dtypes: {adt} and {edt}")
    if check_device and adev != edev:
        fail(f"the values are on different devices: {adev} and {edev}")
    r, t = (rtol, atol) if rtol is not None else _TOLERANCES.get(edt, (0.0, 0.0))
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isclose(a64, e64, rtol=r, atol=t, equal_nan=equal_nan) | ((a64 == e64) & np.isinf(e64))
    if not ok.all():
        bad = int((~ok).sum())
        diff = np.abs(a64 - e64)
        worst = int(np.nanargmax(np.where(ok, -np.inf, np.nan_to_num(diff, nan=np.inf))))
        fail(f"tensor-likes are not close! Mismatched elements: {bad} / {ok.size}; greatest absolute difference "
             f"{diff.reshape(-1)[worst]} at index {tuple(int(i) for i in np.unravel_index(worst, ok.shape)) if ok.ndim else ()} "
             f"(up to {t} allowed), rtol {r}")
