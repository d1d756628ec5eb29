"""What every entry of the primitive table shares: the entry type, the table, and the input drawers.

``primitive_table`` (the core primitives, and the runner) and the ``table_<family>`` modules add
their entries here with ``add``; none of them imports another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import contract, spec
from ..runtime import primitives as prim

F32 = np.float32
KINDS = ("normal", "wide", "int", "special")
# Accumulating primitives get specials without huge finite values: float32 overflow of a partial
# sum (inf - inf = NaN where float64 stays finite) is IEEE behaviour, not a kernel defect.
SUM_KINDS = ("normal", "wide", "int", "special_sum")
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, 1e-38, 3.4e38, -3.4e38, 0.5, 2.0],
                    dtype=F32)


def values(rng: np.random.Generator, n: int, kind: str, positive: bool = False) -> np.ndarray:
    """n float32 values of a kind: normal, wide magnitudes, small integers (exact sums), specials."""
    if kind == "normal":
        v = rng.standard_normal(n) * 2.0
    elif kind == "wide":  # magnitudes 1e-20 .. 1e15: wide, but products and sums stay finite
        v = 10.0 ** rng.uniform(-20, 15, n) * rng.choice([-1.0, 1.0], n)
    elif kind == "int":
        v = rng.integers(-8, 9, n).astype(np.float64)
    elif kind in ("special", "special_sum"):
        pool = SPECIALS if kind == "special" else SPECIALS[np.abs(SPECIALS) < 1e30]
        v = np.where(rng.random(n) < 0.5, rng.choice(pool, n), rng.standard_normal(n))
    else:
        raise ValueError(kind)
    v = v.astype(F32)
    return np.abs(v) if positive else v


def scalar(rng: np.random.Generator, kind: str) -> float:
    return float(values(rng, 1, "normal" if kind.startswith("special") else kind)[0])


@dataclass
class PrimitiveInfo:
    name: str
    sample: Callable[[np.random.Generator, tuple, str], list]  # (rng, dims, kind) -> args
    ndims: int  # how many size parameters the test draws (each 0..max)
    edge_cases: list[list] = field(default_factory=list)
    exact_on_int: bool = False  # integer inputs make the result exact in any order: must equal the spec
    max_dim: int = 9
    kinds: tuple = KINDS

    @property
    def runtime(self) -> Callable[..., Any]:
        return getattr(prim, self.name)

    @property
    def spec(self) -> Callable[..., Any]:
        return getattr(spec, self.name)

    @property
    def contract(self) -> contract.Contract:
        return contract.CONTRACTS[self.name]


TABLE: dict[str, PrimitiveInfo] = {}
# Primitives that write their results over some inputs (by argument position) and return them:
# every other input is left unchanged, as for all other primitives.
IN_PLACE: dict[str, tuple[int, ...]] = {"adam_step_many_inplace": (0, 2, 3), "sgd_step_many_inplace": (0, 2)}


ACCUMULATING = {"reduce_sum", "reduce_mean", "reduce_sum_axis0", "reduce_sum_axis1", "reduce_sum_axis",
                 "reduce_from_broadcast", "bmm", "bmm_nt", "bmm_tn", "scatter_add", "scatter_add_rows", "softmax_rows",
                 "log_softmax_rows", "softmax_rows_bwd", "log_softmax_rows_bwd", "axpy"}


def add(info: PrimitiveInfo) -> None:
    if info.name in ACCUMULATING:
        info.kinds = SUM_KINDS
    TABLE[info.name] = info
