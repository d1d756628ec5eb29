"""Examples with embedded data (generated on the fly; nothing is downloaded), each one readable module.

Every example module exposes the same protocol (``NAME``, ``DESCRIPTION``, ``METRIC``,
``LOWER_IS_BETTER``, ``default_config``, ``cuda_config``, ``tiny_config``, ``make_data``,
``make_model``, ``make_optimizer``, ``get_batch``, ``loss_fn``, ``evaluate`` and optionally
``plot_predictions`` and ``DATA_KEYS``, the config keys ``make_data`` reads, which lets
``torchlean train`` keep the generated data in its cache, torchlean/data_cache.py);
``torchlean.train.train`` runs any of them, and ``torchlean train NAME`` from the command line.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ArgumentError

NAMES = ("mlp", "cnn", "fno1d", "fno2d", "fno2d_ns", "gpt_adder", "mamba")


def get(name: str) -> ModuleType:
    if name not in NAMES:
        raise ArgumentError(f"torchlean examples: unknown example {name!r} (known: {', '.join(NAMES)})")
    return importlib.import_module(f"{__name__}.{name}")


def available() -> list[tuple[str, str]]:
    """(name, description) of every example whose module imports (all of them on a complete install)."""
    out = []
    for n in NAMES:
        try:
            out.append((n, get(n).DESCRIPTION))
        except ImportError as exc:  # an example still being written, or a missing optional dependency
            out.append((n, f"(unavailable: {exc})"))
    return out
