"""API coverage: which everyday PyTorch names torchlean provides.

``torch_names.txt`` lists names that real training programs use, one per line, as dotted paths:
``torch.X...`` (a module attribute; under torchlean ``torchlean.X...``), ``Tensor.X`` (a method or
attribute of a tensor) and ``Module.X`` (of ``nn.Module``). ``known_missing.txt`` lists the names
torchlean does not have yet; tests/test_api_coverage.py keeps it exact, so the figure can only
go up and the gaps stay visible.

    python -m tests.api_coverage            # the coverage figure (for the README)
    python -m tests.api_coverage --missing  # also list the missing names
    python -m tests.api_coverage --update   # rewrite known_missing.txt from today's torchlean
"""

from __future__ import annotations

import importlib
import os

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES_FILE = os.path.join(HERE, "torch_names.txt")
KNOWN_MISSING_FILE = os.path.join(HERE, "known_missing.txt")

# Where the three kinds of name live in each framework.
_ROOTS = {
    "torch": {"torch": "torch", "Tensor": "torch.Tensor", "Module": "torch.nn.Module"},
    "torchlean": {"torch": "torchlean", "Tensor": "torchlean.Tensor", "Module": "torchlean.nn.Module"},
}


def read_names(path: str) -> list[str]:
    with open(path) as f:
        lines = (line.split("#", 1)[0].strip() for line in f)
        return [line for line in lines if line]


def _import_path(path: str):
    """The object at dotted ``path``, importing submodules on the way (``torch.utils.data``)."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError as missing_attribute:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError as exc:
                if exc.name != ".".join(parts[:i]):
                    raise
                raise missing_attribute from None
    return obj


def _instance(kind: str, framework: str):
    """A plain tensor or module, for attributes that exist only on instances (``shape``, ``training``)."""
    mod = importlib.import_module(framework)
    if kind == "Tensor":
        return mod.zeros(2, 3)
    return importlib.import_module(f"{framework}.nn").Module()


def resolve(name: str, framework: str = "torchlean") -> tuple[bool, str]:
    """Whether ``name`` exists in ``framework``; with the reason when it does not.

    A name whose lookup raises anything other than AttributeError or ImportError counts as
    present: it exists and reports its own error when used.
    """
    kind, _, rest = name.partition(".")
    if kind not in _ROOTS[framework] or not rest:
        raise ValueError(f"api coverage: a name starts with torch., Tensor. or Module., got {name!r}")
    path = _ROOTS[framework][kind] + "." + rest if kind != "torch" else _ROOTS[framework]["torch"] + "." + rest
    try:
        _import_path(path)
        return True, ""
    except (AttributeError, ImportError) as exc:
        first_error = f"{type(exc).__name__}: {exc}"
    except Exception:   # exists, and raises its own error on lookup
        return True, ""
    if kind in ("Tensor", "Module"):
        try:
            obj = _instance(kind, framework)
            for part in rest.split("."):
                obj = getattr(obj, part)
            return True, ""
        except AttributeError:
            pass
        except Exception:
            return True, ""
    return False, first_error


def coverage(framework: str = "torchlean") -> tuple[list[str], list[str]]:
    """(present, missing) names of torch_names.txt in ``framework``."""
    present, missing = [], []
    for name in read_names(NAMES_FILE):
        (present if resolve(name, framework)[0] else missing).append(name)
    return present, missing


def figure(present: list[str], missing: list[str]) -> str:
    total = len(present) + len(missing)
    return f"torchlean provides {len(present)} of {total} everyday PyTorch names ({100.0 * len(present) / total:.1f}%)"
