"""``torchlean check``: every primitive, on random and edge inputs, against its spec and contract."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .testing.primitive_table import TABLE, run_case

SAMPLES = 200  # random cases per primitive (``torchlean check --samples``'s default)


@dataclass
class CheckRow:
    name: str
    device: str
    cases: int
    worst_ratio: float  # max observed |err| / bound (0 for exact results)
    ok: bool
    detail: str


def random_cases(name: str, samples: int, seed: int) -> list[tuple[str, list]]:
    """The (kind, args) of the random cases ``check`` draws for a primitive at a seed (the kinds
    in turn: normal, wide, int, special...), so that tests can run exactly the same cases."""
    info = TABLE[name]
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    cases = []
    for i in range(samples):
        kind = info.kinds[i % len(info.kinds)]
        dims = tuple(int(v) for v in rng.integers(0, info.max_dim + 1, info.ndims))
        cases.append((kind, info.sample(rng, dims, kind)))
    return cases


def check_primitive(name: str, device: str, samples: int, seed: int) -> CheckRow:
    """The edge cases then the random ones; the first case outside the contract (or raising) fails
    the row, and its detail says which case it was."""
    info = TABLE[name]
    worst, cases = 0.0, 0
    argsets = [(f"edge case {i}", a) for i, a in enumerate(info.edge_cases)]
    argsets += [(f"random case {i} ({kind})", a) for i, (kind, a) in enumerate(random_cases(name, samples, seed))]
    with np.errstate(all="ignore"):
        for label, args in argsets:
            cases += 1
            try:
                verdict, _, _ = run_case(info, args, device)
            except Exception as exc:  # noqa: BLE001 - a raising kernel fails its row; the other rows still run
                return CheckRow(name, device, cases, worst, False, f"{label} raised {type(exc).__name__}: {exc}")
            worst = max(worst, verdict.ratio)
            if not verdict.ok:
                return CheckRow(name, device, cases, worst, False, f"{label}: {verdict.detail}")
    return CheckRow(name, device, cases, worst, True, "")


def run_check(devices: list[str], samples: int = SAMPLES, seed: int = 0) -> list[CheckRow]:
    return [check_primitive(name, dev, samples, seed) for dev in devices for name in TABLE]


def format_rows(rows: list[CheckRow]) -> str:
    lines = [f"{'primitive':24} {'device':7} {'cases':>5}  {'max err/bound':>13}  result"]
    for r in rows:
        ratio = "exact" if r.worst_ratio == 0 else f"{r.worst_ratio:13.3g}"
        lines.append(f"{r.name:24} {r.device:7} {r.cases:5d}  {ratio:>13}  {'PASS' if r.ok else 'FAIL ' + r.detail}")
    bad = sum(not r.ok for r in rows)
    lines.append(f"{len(rows) - bad} passed, {bad} failed")
    return "\n".join(lines)
