"""The package's shape, read from its source with ``ast`` (nothing is imported).

Three rules (docs/architecture.md draws the picture):

1. layers import only downward: every module belongs to one layer of ``LAYERS`` and may import
   modules of its own layer or of layers below it;
2. no import cycle between modules (within a layer too);
3. no module takes a private name (a leading underscore) from another module: ``from m import _x``
   and ``m._x`` for a module ``m`` of the package. A private MODULE (``torchlean/ops/_base.py``)
   is private to its package: only modules of that package (``torchlean.ops.*``) import it.

Every import counts, also one inside a function or under ``if TYPE_CHECKING:``: a deferred import
still ties the two modules, only later. What is NOT an arrow, on purpose:

* a parent package's ``__init__`` that Python runs before a submodule: importing
  ``torchlean.runtime.buffer`` runs ``torchlean/__init__.py`` and ``torchlean/runtime/__init__.py``,
  but the importer uses only the submodule; an explicit ``from .. import x`` or
  ``from ..runtime import Buffer`` is an arrow to that ``__init__`` and counts;
* ``importlib.import_module`` (a name computed at run time: the examples registry loads the example
  that the command line names; the CPU backend loads its conv module lazily), which ``ast`` cannot
  follow;
* private attributes of objects (``tensor._buf``, ``buffer._ctx``): the package's own fields, whose
  owners a static reading cannot tell.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass, field

PACKAGE = "torchlean"
ROOT = pathlib.Path(__file__).resolve().parents[1] / PACKAGE

# Top to bottom. A module belongs to the layer with the longest matching prefix ("torchlean.nn"
# matches torchlean.nn and torchlean.nn.modules.linear, not torchlean.nnx).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry", ("torchlean.__main__", "torchlean.cli")),
    # programs over the whole package: the check command, the training loop, the examples and
    # the test support (error_inputs drives the front end; primitive_table the runtime)
    ("apps", ("torchlean.check", "torchlean.train", "torchlean.examples", "torchlean.testing")),
    ("face", ("torchlean",)),  # torchlean/__init__.py: the public names, gathered from below
    ("checkpoint", ("torchlean.checkpoint",)),
    ("library", ("torchlean.nn", "torchlean.optim", "torchlean.utils", "torchlean.distributed")),
    # the PyTorch-style front end: operators and methods bound onto Tensor, the fast-kernel
    # router, DLPack and PyTorch state-dict interop
    ("front", ("torchlean._methods", "torchlean.fast_kernels", "torchlean._dlpack", "torchlean.interop",
               "torchlean._dtype_api", "torchlean.complex_tensor")),
    ("ops", ("torchlean.ops",)),
    ("tensor", ("torchlean.tensor",)),
    ("tape", ("torchlean.autograd",)),
    ("runtime", ("torchlean.runtime",)),
    ("kernels", ("torchlean.kernels",)),
    ("contract", ("torchlean.contract",)),
    ("spec", ("torchlean.spec",)),
    ("base", ("torchlean.errors", "torchlean._validate", "torchlean._atomic_file", "torchlean.dtypes",
               "torchlean.size", "torchlean.memory_format")),
]


@dataclass
class Module:
    name: str
    is_package: bool
    tree: ast.Module
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module, line)
    private: list[str] = field(default_factory=list)  # rule 3 findings, as messages


def module_name(path: pathlib.Path, root: pathlib.Path) -> tuple[str, bool]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def read_package(root: pathlib.Path = ROOT) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        name, is_pkg = module_name(path, root)
        mods[name] = Module(name, is_pkg, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    for m in mods.values():
        scan_imports(m, mods)
    return mods


def _base_of(m: Module, level: int, target: str | None) -> str:
    """The absolute module named by a relative ``from`` (level dots, then ``target``)."""
    if level == 0:
        return target or ""
    parts = m.name.split(".") if m.is_package else m.name.split(".")[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_module_ok(importer: str, target: str) -> bool:
    """A private module (a part of its path starts with _) is open to modules of its package only."""
    parts = target.split(".")
    for i, p in enumerate(parts):
        if _is_private(p):
            owner = ".".join(parts[:i])
            return importer == owner or importer.startswith(owner + ".")
    return True


def scan_imports(m: Module, mods: dict[str, Module]) -> None:
    bound: dict[str, str] = {}  # local name -> package module it names (for rule 3's m._x)
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                    m.imports.append((a.name, node.lineno))
                    if not _private_module_ok(m.name, a.name):
                        m.private.append(f"{m.name}:{node.lineno} imports the private module {a.name}")
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(m, node.level, node.module)
            if not (base == PACKAGE or base.startswith(PACKAGE + ".")):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                target = sub if sub in mods else base
                m.imports.append((target, node.lineno))
                if not _private_module_ok(m.name, target):
                    m.private.append(f"{m.name}:{node.lineno} imports the private module {target}")
                if target == sub:
                    bound[a.asname or a.name] = sub
                elif _is_private(a.name):
                    m.private.append(f"{m.name}:{node.lineno} takes the private name {a.name} from {base}")
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = _dotted(node.value, bound)
            if owner is not None and owner != m.name:
                if f"{owner}.{node.attr}" in mods:
                    if not _private_module_ok(m.name, f"{owner}.{node.attr}"):
                        m.private.append(f"{m.name}:{node.lineno} uses the private module {owner}.{node.attr}")
                else:
                    m.private.append(f"{m.name}:{node.lineno} uses the private name {owner}.{node.attr}")


def _dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The package module that an expression such as ``P`` or ``torchlean.runtime`` names, else None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, bound)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None


def layer_of(name: str, layers=LAYERS) -> int:
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best is None:
        raise AssertionError(f"{name} is on no layer: add it to LAYERS in tests/test_architecture.py")
    return best


def upward_imports(mods: dict[str, Module], layers=LAYERS) -> list[str]:
    out = []
    for m in mods.values():
        here = layer_of(m.name, layers)
        for target, line in m.imports:
            if target in mods and layer_of(target, layers) < here:
                out.append(f"{m.name}:{line} ({layers[here][0]}) imports {target} "
                           f"({layers[layer_of(target, layers)][0]}), a higher layer")
    return out


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a self-import), each
    reported as one concrete loop through it."""
    graph = {n: sorted({t for t, _ in m.imports if t in mods}) for n, m in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan's algorithm (the graph is small: recursion is fine)
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [_loop_in(comp, graph) for comp in comps]


def _loop_in(comp: list[str], graph: dict[str, list[str]]) -> list[str]:
    """One loop through the component's first module (a shortest path back to it)."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


# -- the rules on the package -------------------------------------------------------------------
def test_every_module_is_on_a_layer():
    for name in read_package():
        layer_of(name)


def test_layers_import_only_downward():
    bad = upward_imports(read_package())
    assert not bad, "imports from a lower layer to a higher one:\n" + "\n".join(bad)


def test_no_import_cycles():
    found = cycles(read_package())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_no_private_names_across_modules():
    bad = [msg for m in read_package().values() for msg in m.private]
    assert not bad, "private names taken from another module:\n" + "\n".join(bad)


# -- the checker itself can fail --------------------------------------------------------------------
def _synthetic(tmp_path: pathlib.Path, files: dict[str, str]) -> dict[str, Module]:
    root = tmp_path / PACKAGE
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return read_package(root)


def test_checker_finds_an_upward_import_a_cycle_and_private_names(tmp_path):
    mods = _synthetic(tmp_path, {
        "__init__.py": "",
        "errors.py": "def f():\n    from .ops import helpers  # deferred, still an arrow\n",
        "ops/__init__.py": "",
        "ops/helpers.py": "from ..runtime import prims\n_secret = 1\n",
        "ops/_base.py": "",
        "runtime/__init__.py": "",
        "runtime/prims.py": ("from ..ops.helpers import _secret\n"
                             "from ..ops import helpers as h\n"
                             "from ..ops import _base\n"
                             "x = h._secret\n"),
    })
    layers = [("ops", ("torchlean.ops",)), ("runtime", ("torchlean.runtime",)),
              ("base", ("torchlean.errors", "torchlean"))]
    up = upward_imports(mods, layers)
    assert any(u.startswith("torchlean.errors:2") and "torchlean.ops.helpers" in u for u in up), up
    assert any(u.startswith("torchlean.runtime.prims:1") for u in up), up
    assert cycles(mods) == [["torchlean.ops.helpers", "torchlean.runtime.prims", "torchlean.ops.helpers"]]
    private = mods["torchlean.runtime.prims"].private
    assert any("private name _secret from torchlean.ops.helpers" in p for p in private), private
    assert any("private module torchlean.ops._base" in p for p in private), private
    assert any("private name torchlean.ops.helpers._secret" in p for p in private), private


def test_checker_accepts_a_clean_package(tmp_path):
    mods = _synthetic(tmp_path, {
        "__init__.py": "from . import ops\n",
        "ops/__init__.py": "from .add import add\n",
        "ops/_base.py": "def new():\n    return 1\n",
        "ops/add.py": "from ._base import new\nfrom ..runtime import prims\n\ndef add():\n    return new()\n",
        "runtime/__init__.py": "",
        "runtime/prims.py": "import torchlean.errors\n__all__ = []\n",
        "errors.py": "",
    })
    layers = [("face", ("torchlean",)), ("ops", ("torchlean.ops",)), ("runtime", ("torchlean.runtime",)),
              ("base", ("torchlean.errors",))]
    assert upward_imports(mods, layers) == []
    assert cycles(mods) == []
    assert [p for m in mods.values() for p in m.private] == []
