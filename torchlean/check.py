"""``torchlean check``: every primitive, on random and edge inputs, against its spec and contract."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .testing.primitive_table import TABLE, run_case


@dataclass
class CheckRow:
    name: str
    device: str
    cases: int
    worst_ratio: float  # max observed |err| / bound (0 for exact results)
    ok: bool
    detail: str


def check_primitive(name: str, device: str, samples: int, seed: int) -> CheckRow:
    info = TABLE[name]
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    worst, cases, detail = 0.0, 0, ""
    argsets = list(info.edge_cases)
    for i in range(samples):
        kind = info.kinds[i % len(info.kinds)]
        dims = tuple(int(v) for v in rng.integers(0, info.max_dim + 1, info.ndims))
        argsets.append(info.sample(rng, dims, kind))
    with np.errstate(all="ignore"):
        for args in argsets:
            verdict, _, _ = run_case(info, args, device)
            cases += 1
            worst = max(worst, verdict.ratio)
            if not verdict.ok:
                return CheckRow(name, device, cases, worst, False, verdict.detail)
    return CheckRow(name, device, cases, worst, True, detail)


def run_check(devices: list[str], samples: int = 200, seed: int = 0) -> list[CheckRow]:
    return [check_primitive(name, dev, samples, seed) for dev in devices for name in TABLE]


def format_rows(rows: list[CheckRow]) -> str:
    lines = [f"{'primitive':24} {'device':7} {'cases':>5}  {'max err/bound':>13}  result"]
    for r in rows:
        ratio = "exact" if r.worst_ratio == 0 else f"{r.worst_ratio:13.3g}"
        lines.append(f"{r.name:24} {r.device:7} {r.cases:5d}  {ratio:>13}  {'PASS' if r.ok else 'FAIL ' + r.detail}")
    bad = sum(not r.ok for r in rows)
    lines.append(f"{len(rows) - bad} passed, {bad} failed")
    return "\n".join(lines)
