"""The CUDA kernels' names against their launch sites, without a GPU or CuPy: every kernel name a
launcher in torchlean/kernels/cuda/*.py passes (a literal, or an f-string pattern) exists in the .cu
file that launcher loads, every ``extern "C" __global__`` kernel is launched by some pattern (no dead
kernels), and every kernel carries its family's name. Kernel names are resolved from the sources
with a small expander of the function-like macros that build them (``##`` pasting, nested macros)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from torchlean.kernels.cuda.sources import with_includes

CUDA = Path(__file__).resolve().parent.parent / "torchlean" / "kernels" / "cuda"
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"#define\s+(\w+)\(([^)]*)\)(.*)")
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')


def _logical_lines(text: str) -> list[str]:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = text.replace("\\\n", " ")
    return [re.sub(r"//.*", "", line) for line in text.split("\n")]


def _split_args(s: str, start: int) -> tuple[list[str], int]:
    """The comma-separated arguments of the call whose '(' is at s[start]; and the index after ')'."""
    depth, args, cur = 0, [], []
    for i in range(start, len(s)):
        ch = s[i]
        if ch == "(":
            depth += 1
            if depth == 1:
                continue
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    raise AssertionError(f"unbalanced parentheses in {s[start:start + 80]!r}")


def _expand(text: str, macros: dict, depth: int = 0) -> str:
    assert depth < 8, "macro expansion too deep"
    out, pos = [], 0
    for m in _IDENT.finditer(text):
        if m.start() < pos:
            continue
        name = m.group(0)
        rest = text[m.end():]
        if name not in macros or not rest.lstrip().startswith("("):
            continue
        params, body = macros[name]
        args, end = _split_args(text, m.end() + (len(rest) - len(rest.lstrip())))
        assert len(args) == len(params), f"{name}: {len(params)} parameters, called with {args}"
        sub = dict(zip(params, args))
        body = _IDENT.sub(lambda t: sub.get(t.group(0), t.group(0)), body)
        body = re.sub(r"\s*##\s*", "", body)
        out.append(text[pos:m.start()])
        out.append(_expand(body, macros, depth + 1))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def kernels_of(path: Path) -> set[str]:
    """The names of the extern "C" __global__ kernels that ``path`` defines, macros expanded."""
    macros, code = {}, []
    for line in _logical_lines(with_includes(path.name)):  # what NVRTC sees, headers inlined
        m = _DEFINE.match(line.strip())
        if m:
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            macros[m.group(1)] = (params, m.group(3))
        elif not line.lstrip().startswith("#"):
            code.append(line)
    return set(_KERNEL.findall(_expand("\n".join(code), macros)))


def _pattern(node: ast.JoinedStr) -> str:
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(re.escape(str(v.value)))
        else:
            parts.append(r"\w*")
    return "".join(parts)


def launch_names(path: Path) -> tuple[str | None, set[str], set[str]]:
    """(the .cu file the module loads (its _FILE), literal kernel names, f-string name patterns).
    A name is a string constant or f-string that starts with ``tl_`` and is a single identifier, or
    an f-string ``f"{prefix}_rest"`` whose prefix is such a constant (a regex ``tl_\\w*_rest``)."""
    tree = ast.parse(path.read_text())
    file, literals, patterns = None, set(), set()
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    fstring_parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", "") == "_FILE":
            file = node.value.value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and id(node) not in fstring_parts:
            if re.fullmatch(r"tl_\w+", node.value):
                literals.add(node.value)
        elif isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith("tl_"):
                patterns.add(_pattern(node))
            elif isinstance(first, ast.FormattedValue) and len(node.values) > 1 \
                    and isinstance(node.values[1], ast.Constant) and str(node.values[1].value).startswith("_"):
                patterns.add(r"tl_\w*" + _pattern(ast.JoinedStr(values=node.values[1:])))
    return file, literals, patterns


def _modules():
    return sorted(p for p in CUDA.glob("*.py") if p.name != "__init__.py")


def _all_kernels() -> dict[str, set[str]]:
    return {p.name: kernels_of(p) for p in sorted(CUDA.glob("*.cu"))}


def test_the_expander_finds_macro_built_kernels():
    src = CUDA / "layout.cu"
    names = kernels_of(src)
    # nested macros with ## pasting: TL_STRIDED_ALL_R(MODE) -> TL_STRIDED(MODE, R)
    assert {f"tl_layout_strided_m{m}_r{r}" for m in range(3) for r in range(1, 9)} <= names
    assert "tl_layout_transpose" in names


def test_every_launched_kernel_exists_in_its_cu_file():
    kernels = _all_kernels()
    problems = []
    for mod in _modules():
        file, literals, patterns = launch_names(mod)
        if not literals and not patterns:
            continue
        assert file in kernels, f"{mod.name} launches kernels but loads no known .cu file ({file!r})"
        defined = kernels[file]
        for name in sorted(literals):
            # a constant that names no kernel must at least begin some (a prefix the code completes)
            if name not in defined and not any(k.startswith(name + "_") for k in defined):
                problems.append(f"{mod.name}: {name!r} is not a kernel of {file}")
        for pat in sorted(patterns):
            if not any(re.fullmatch(pat, k) for k in defined):
                problems.append(f"{mod.name}: no kernel of {file} matches the launch pattern {pat!r}")
    assert not problems, "\n".join(problems)


def test_every_kernel_is_launched():
    kernels = _all_kernels()
    launched: dict[str, tuple[set, set]] = {}
    for mod in _modules():
        file, literals, patterns = launch_names(mod)
        if file is not None:
            lit, pat = launched.setdefault(file, (set(), set()))
            lit |= literals
            pat |= patterns
    dead = []
    for file, names in kernels.items():
        lit, pat = launched.get(file, (set(), set()))
        for k in sorted(names):
            if k not in lit and not any(re.fullmatch(p, k) for p in pat):
                dead.append(f"{file}: {k}")
    assert not dead, "kernels no launcher names:\n" + "\n".join(dead)


# The name every kernel of a file starts with (after tl_): the primitive, or the family for helper
# kernels shared by several primitives (layout's gathers serve permute, broadcast_to, transpose2d...).
_FAMILY_PREFIXES = {
    "attention.cu": ("flash_attention_",),
    "attention_mma.cu": ("flash_attention_mma_",),
    "attention_mma_tf32.cu": ("flash_attention_mma_",),
    "classify.cu": ("gelu", "cross_entropy_rows", "cross_entropy_reduce"),
    "conv.cu": ("conv_",),
    "fast.cu": ("fast_gemm_", "mse_loss_fwd", "mse_loss_bwd"),
    "index.cu": ("gather_vec", "gather_rows", "scatter_add"),
    "layout.cu": ("layout_", "narrow_block", "concat_block"),
    "norm.cu": ("layer_norm_", "batch_norm_", "norm_", "running_stat_update"),
    "optim.cu": ("adam_step", "sgd_step", "norm2_many", "scale_many"),
    "pool.cu": ("max_pool_", "avg_pool_", "smooth_max_pool_"),
    "reduce.cu": ("reduce_", "softmax_rows_", "log_softmax_rows_"),
    "rng.cu": ("rand_uniform", "rand_normal", "bernoulli_mask"),
    "rnn.cu": ("lstm_cell_", "gru_cell_"),
    "rnn_seq.cu": ("lstm_recurrence_",),
    "scan.cu": ("selective_scan_",),
    "spectral.cu": ("irfft1d_packed_", "spectral_conv1d_rfft_"),
    "spectral_nd.cu": ("spectral_conv_nd_rfft_",),  # shared by spectral_conv{2,3}d_rfft_*
}


def test_every_kernel_carries_its_primitive_or_family_name():
    kernels = _all_kernels()
    assert set(_FAMILY_PREFIXES) | {"elementwise.cu"} == set(kernels)
    wrong = [f"{file}: {k}" for file, names in kernels.items() if file in _FAMILY_PREFIXES
             for k in sorted(names) if not k.startswith(tuple("tl_" + p for p in _FAMILY_PREFIXES[file]))]
    assert not wrong, "kernels named after neither their primitive nor their family:\n" + "\n".join(wrong)


@pytest.mark.parametrize("bad", ["tl_no_such_kernel"])
def test_a_misspelled_launch_is_caught(tmp_path, bad):
    """The check itself: a launcher naming a kernel its .cu file lacks is reported."""
    mod = tmp_path / "fake.py"
    mod.write_text(f'_FILE = "layout.cu"\n\ndef f(kernel):\n    kernel(_FILE, "{bad}")\n'
                   'def g(kernel, m):\n    kernel(_FILE, f"tl_layout_strided_q{m}")\n')
    file, literals, patterns = launch_names(mod)
    defined = kernels_of(CUDA / file)
    assert bad in literals and bad not in defined
    assert not any(re.fullmatch(p, k) for p in patterns for k in defined)
