"""torchlean vs PyTorch eager on one device, in one run.

    python3 -m benchmarks.run [--device cpu|cuda] [--quick] [--out FILE.json] [--markdown FILE.md]
                              [--only SUBSTR ...] [--min-time SECONDS] [--threads N] [--torch-thp]
                              [--retries N] [--rounds N]

Both frameworks get the same float32 inputs (made once from the same NumPy arrays) on the same
device: torch's CPU with ``torch.set_num_threads`` equal to NumPy's BLAS thread count, or
``torch.cuda`` next to torchlean's CUDA backend. Only public torchlean APIs are used
(``torchlean.runtime``'s Buffer and primitives, ``torchlean.tensor`` and the ops), so the CUDA
path runs unchanged once the CUDA backend exists; until then ``--device cuda`` exits with
torchlean's reason. See BENCHMARKS.md for the method and the latest table.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from . import harness as H
from .harness import Case, Result
from .nn_cases import nn_specs

F32 = np.float32


# -- environment -----------------------------------------------------------------------------


class Env:
    """The device both frameworks run on, with converters and synchronizers."""

    def __init__(self, device: str, quick: bool) -> None:
        import torch

        import torchlean
        from torchlean import runtime as rt

        self.torch = torch
        self.tl = torchlean
        self.rt = rt
        self.device = device
        self.quick = quick
        self.tl_device = "cpu" if device == "cpu" else "cuda"
        self.torch_device = torch.device("cpu" if device == "cpu" else "cuda")
        if device == "cuda":
            import cupy

            # True float32 on both sides: cuDNN's TF32 switch defaults to on in PyTorch.
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
            self.tl_sync: Callable[[], None] = cupy.cuda.Device().synchronize
            self.torch_sync: Callable[[], None] = torch.cuda.synchronize
        else:
            self.tl_sync = H.no_sync
            self.torch_sync = H.no_sync

    # data ------------------------------------------------------------------------------------
    def buf(self, a: np.ndarray):
        return self.rt.Buffer.from_numpy(a, self.tl_device)

    def tt(self, a: np.ndarray):
        """A torch tensor on the device with a's values (float32 stays float32, ints int64)."""
        return self.torch.from_numpy(np.array(a, order="C")).to(self.torch_device)  # a copy: never aliases ``a``

    def tl_tensor(self, a: np.ndarray, requires_grad: bool = False):
        return self.tl.tensor(a, device=self.tl_device, requires_grad=requires_grad)

    # results to host -------------------------------------------------------------------------
    def host(self, x: Any) -> np.ndarray:
        if isinstance(x, self.rt.Buffer):
            return x.to_numpy()
        if isinstance(x, self.tl.Tensor):
            return x.numpy()
        if isinstance(x, self.torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def compare(self, tl_fn: Callable[[], Any], torch_fn: Callable[[], Any], rtol: float = 1e-5) -> Callable[[], str]:
        """A check: run both once, report the max abs difference relative to max |torch result|."""

        def check() -> str:
            a = self.host(tl_fn()).reshape(-1).astype(np.float64)
            b = self.host(torch_fn()).reshape(-1).astype(np.float64)
            if a.shape != b.shape:
                return f"CHECK FAILED: sizes {a.size} vs {b.size}"
            if a.size == 0:
                return ""
            scale = max(float(np.max(np.abs(b))), 1e-30)
            err = float(np.max(np.abs(a - b))) / scale
            return "" if err <= rtol else f"CHECK: max|tl - torch| / max|torch| = {err:.1e}"

        return check


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@functools.lru_cache(maxsize=12)
def normal(seed: int, *shape: int) -> np.ndarray:
    """Standard normal float32 data, cached (read-only) so cases of one size share their inputs."""
    a = rng(seed).standard_normal(shape, dtype=F32)
    a.setflags(write=False)
    return a


def p2(n: int) -> str:
    e = n.bit_length() - 1
    return f"2^{e}" if n == 1 << e else str(n)


# -- case specs ------------------------------------------------------------------------------


@dataclass
class Spec:
    """A case not yet built: the inputs are allocated only when the case is about to run."""

    group: str
    name: str
    size: str
    build: Callable[[], Case]


def elementwise_specs(env: Env, sizes: list[int]) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    thr = torch.ops.aten.threshold_backward

    def unary(name: str, tl_op, th_op):
        def make(n: int) -> Callable[[], Case]:
            def build() -> Case:
                x = normal(1, n)
                xb, xt = env.buf(x), env.tt(x)
                del x
                f, g = (lambda: tl_op(xb)), (lambda: th_op(xt))
                return Case("elementwise", name, p2(n), f, g, nbytes=8 * n, check=env.compare(f, g))
            return build
        return make

    def binary(name: str, tl_op, th_op):
        def make(n: int) -> Callable[[], Case]:
            def build() -> Case:
                a, b = normal(1, n), normal(2, n)
                ab, bb, at, bt = env.buf(a), env.buf(b), env.tt(a), env.tt(b)
                del a, b
                f, g = (lambda: tl_op(ab, bb)), (lambda: th_op(at, bt))
                return Case("elementwise", name, p2(n), f, g, nbytes=12 * n, check=env.compare(f, g))
            return build
        return make

    ops = [
        ("add", binary("add", rt.add, torch.add)),
        ("mul", binary("mul", rt.mul, torch.mul)),
        ("exp", unary("exp", rt.exp, torch.exp)),
        ("sigmoid", unary("sigmoid", rt.sigmoid, torch.sigmoid)),
        ("tanh", unary("tanh", rt.tanh, torch.tanh)),
        ("relu", unary("relu", rt.relu, torch.relu)),
        # PyTorch's relu backward is threshold_backward(grad, input, 0)
        ("relu_bwd", binary("relu_bwd", rt.relu_bwd, lambda x, dy: thr(dy, x, 0))),
        ("scale", unary("scale", lambda x: rt.scale(x, 0.5), lambda x: torch.mul(x, 0.5))),
        ("axpy", binary("axpy", lambda a, b: rt.axpy(a, b, 0.5), lambda a, b: torch.add(a, b, alpha=0.5))),
    ]
    for name, make in ops:
        for n in sizes:
            yield Spec("elementwise", name, p2(n), make(n))


def reduction_specs(env: Env, sizes: list[int], mats: list[tuple[int, int]]) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    for n in sizes:
        def build(n: int = n) -> Case:
            x = normal(3, n)
            xb, xt = env.buf(x), env.tt(x)
            f, g = (lambda: rt.reduce_sum(xb)), (lambda: torch.sum(xt))
            return Case("reduce", "reduce_sum", p2(n), f, g, nbytes=4 * n + 4, check=env.compare(f, g, rtol=1e-4))
        yield Spec("reduce", "reduce_sum", p2(n), build)
    for axis in (0, 1):
        for r, c in mats:
            def build(r: int = r, c: int = c, axis: int = axis) -> Case:
                x = normal(4, r, c)
                xb, xt = env.buf(x), env.tt(x)
                prim = rt.reduce_sum_axis0 if axis == 0 else rt.reduce_sum_axis1
                f, g = (lambda: prim(xb, r, c)), (lambda: torch.sum(xt, dim=axis))
                n_out = c if axis == 0 else r
                return Case("reduce", f"reduce_sum_axis{axis}", f"{r}x{c}", f, g, nbytes=4 * (r * c + n_out),
                            check=env.compare(f, g, rtol=1e-4))
            yield Spec("reduce", f"reduce_sum_axis{axis}", f"{r}x{c}", build)


def softmax_specs(env: Env, shapes: list[tuple[int, int]]) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    aten = torch.ops.aten
    kinds = [
        ("softmax_rows", rt.softmax_rows, rt.softmax_rows_bwd, lambda x: torch.softmax(x, dim=1),
         lambda y, dy: aten._softmax_backward_data(dy, y, 1, torch.float32)),
        ("log_softmax_rows", rt.log_softmax_rows, rt.log_softmax_rows_bwd, lambda x: torch.log_softmax(x, dim=1),
         lambda y, dy: aten._log_softmax_backward_data(dy, y, 1, torch.float32)),
    ]
    for name, fwd, bwd, tfwd, tbwd in kinds:
        for r, c in shapes:
            def build_f(r: int = r, c: int = c, fwd=fwd, tfwd=tfwd, name=name) -> Case:
                x = 3 * normal(5, r, c)
                xb, xt = env.buf(x), env.tt(x)
                f, g = (lambda: fwd(xb, r, c)), (lambda: tfwd(xt))
                return Case("softmax", name, f"{r}x{c}", f, g, nbytes=8 * r * c, check=env.compare(f, g))

            def build_b(r: int = r, c: int = c, fwd=fwd, bwd=bwd, tfwd=tfwd, tbwd=tbwd, name=name) -> Case:
                x, dy = 3 * normal(5, r, c), normal(6, r, c)
                xt, dyt = env.tt(x), env.tt(dy)
                yt = tfwd(xt)  # the same forward output for both frameworks
                yb, dyb = env.buf(env.host(yt)), env.buf(dy)
                f, g = (lambda: bwd(yb, dyb, r, c)), (lambda: tbwd(yt, dyt))
                return Case("softmax", name + "_bwd", f"{r}x{c}", f, g, nbytes=12 * r * c, check=env.compare(f, g))

            yield Spec("softmax", name, f"{r}x{c}", build_f)
            yield Spec("softmax", name + "_bwd", f"{r}x{c}", build_b)


def bmm_specs(env: Env, shapes: list[tuple[int, int, int, int]]) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    for b, m, n, p in shapes:
        size = f"{b}x{m}x{n}x{p}"

        def build(b: int = b, m: int = m, n: int = n, p: int = p, size: str = size) -> Case:
            x, y = normal(7, b, m, n), normal(8, b, n, p)
            xb, yb, xt, yt = env.buf(x), env.buf(y), env.tt(x), env.tt(y)
            f, g = (lambda: rt.bmm(xb, yb, b, m, n, p)), (lambda: torch.bmm(xt, yt))
            return Case("bmm", "bmm", size, f, g, flops=2 * b * m * n * p, check=env.compare(f, g, rtol=1e-4))

        yield Spec("bmm", "bmm", size, build)


def layout_specs(env: Env, square: int, table: tuple[int, int], k: int) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    s = square

    def transpose() -> Case:
        x = normal(9, s, s)
        xb, xt = env.buf(x), env.tt(x)
        f, g = (lambda: rt.transpose2d(xb, s, s)), (lambda: xt.t().contiguous())
        return Case("layout", "transpose2d", f"{s}x{s}", f, g, nbytes=8 * s * s, check=env.compare(f, g),
                    note="torch: x.t().contiguous()")

    def bcast_rows() -> Case:
        v = normal(10, s)
        vb, vt = env.buf(v), env.tt(v)
        f = lambda: rt.broadcast_to(vb, (s,), (s, s), (0, 1))  # noqa: E731
        g = lambda: vt.expand(s, s).contiguous()  # noqa: E731
        return Case("layout", "broadcast_to rows", f"[{s}]->{s}x{s}", f, g, nbytes=4 * (s + s * s),
                    check=env.compare(f, g), note="torch: v.expand(s, s).contiguous()")

    def bcast_cols() -> Case:
        v = normal(11, s)
        vb, vt = env.buf(v), env.tt(v)
        f = lambda: rt.broadcast_to(vb, (s,), (s, s), (1, 0))  # noqa: E731
        g = lambda: vt[:, None].expand(s, s).contiguous()  # noqa: E731
        return Case("layout", "broadcast_to cols", f"[{s}]->{s}x{s}", f, g, nbytes=4 * (s + s * s),
                    check=env.compare(f, g), note="torch: v[:, None].expand(s, s).contiguous()")

    rows, cols = table

    def gather() -> Case:
        t = normal(12, rows, cols)
        idx = rng(13).integers(0, rows, size=k, dtype=np.int64)
        tb, tt, it = env.buf(t), env.tt(t), env.tt(idx)
        f = lambda: rt.gather_rows(tb, rows, cols, idx, k)  # noqa: E731
        g = lambda: torch.index_select(tt, 0, it)  # noqa: E731
        return Case("index", "gather_rows", f"{rows}x{cols}, k={k}", f, g, nbytes=8 * k * cols + 8 * k,
                    check=env.compare(f, g), note="torch: index_select(table, 0, idx)")

    def scatter(det: bool = False) -> Case:
        t = normal(14, rows, cols)
        v = normal(15, k, cols)
        idx = rng(16).integers(0, rows, size=k, dtype=np.int64)
        tb, vb, tt, vt, it = env.buf(t), env.buf(v), env.tt(t), env.tt(v), env.tt(idx)

        def f():
            with rt.deterministic(det):
                return rt.scatter_add_rows(tb, vb, rows, cols, idx, k)

        g = lambda: torch.index_add(tt, 0, it, vt)  # noqa: E731
        name = "scatter_add_rows deterministic" if det else "scatter_add_rows"
        return Case("index", name, f"{rows}x{cols}, k={k}", f, g,
                    nbytes=4 * (2 * rows * cols + k * cols) + 8 * k, check=env.compare(f, g, rtol=1e-5),
                    note="out of place in both: torch.index_add (= clone + index_add_); bytes = read table + "
                         "write result + read values")

    yield Spec("layout", "transpose2d", f"{s}x{s}", transpose)
    yield Spec("layout", "broadcast_to rows", f"[{s}]->{s}x{s}", bcast_rows)
    yield Spec("layout", "broadcast_to cols", f"[{s}]->{s}x{s}", bcast_cols)
    yield Spec("index", "gather_rows", f"{rows}x{cols}, k={k}", gather)
    yield Spec("index", "scatter_add_rows", f"{rows}x{cols}, k={k}", scatter)
    if env.device == "cuda":  # fast mode uses atomics there; deterministic mode sorts and sums segments
        yield Spec("index", "scatter_add_rows deterministic", f"{rows}x{cols}, k={k}",
                   functools.partial(scatter, True))


def rng_specs(env: Env, sizes: list[int]) -> Iterator[Spec]:
    rt, torch = env.rt, env.torch
    dev = env.torch_device
    for n in sizes:
        def uni(n: int = n) -> Case:
            f = lambda: rt.rand_uniform(n, 12345, env.tl_device)  # noqa: E731
            g = lambda: torch.rand(n, device=dev)  # noqa: E731
            return Case("rng", "rand_uniform", p2(n), f, g, nbytes=4 * n, warmup=1,
                        note="vs torch.rand; bytes = output written")

        def nrm(n: int = n) -> Case:
            f = lambda: rt.rand_normal(n, 12345, env.tl_device)  # noqa: E731
            g = lambda: torch.randn(n, device=dev)  # noqa: E731
            return Case("rng", "rand_normal", p2(n), f, g, nbytes=4 * n, warmup=1,
                        note="vs torch.randn; bytes = output written")

        yield Spec("rng", "rand_uniform", p2(n), uni)
        yield Spec("rng", "rand_normal", p2(n), nrm)


def dispatch_specs(env: Env, chain: int = 100, n: int = 8) -> Iterator[Spec]:
    rt, torch, tl = env.rt, env.torch, env.tl
    size = f"{chain} ops x {n} elems"

    def prim() -> Case:
        a, b = normal(17, n), normal(18, n)
        ab, bb, at, bt = env.buf(a), env.buf(b), env.tt(a), env.tt(b)

        def f():
            for _ in range(chain):
                out = rt.add(ab, bb)
            return out

        def g():
            for _ in range(chain):
                out = torch.add(at, bt)
            return out

        return Case("dispatch", "primitive add", size, f, g, per=("op", chain),
                    note="torchlean.runtime.add on Buffers vs torch.add, no autograd")

    def nograd() -> Case:
        x, c = normal(19, n), normal(20, n)
        xl, cl, xt, ct = env.tl_tensor(x, True), env.tl_tensor(c), env.tt(x).requires_grad_(), env.tt(c)

        def f():
            with tl.no_grad():
                y = xl
                for _ in range(chain):
                    y = y + cl
            return y

        def g():
            with torch.no_grad():
                y = xt
                for _ in range(chain):
                    y = y + ct
            return y

        return Case("dispatch", "tensor add, no_grad", size, f, g, per=("op", chain), check=env.compare(f, g),
                    note="y = y + c under no_grad")

    def tape() -> Case:
        x, c = normal(21, n), normal(22, n)
        xl, cl, xt, ct = env.tl_tensor(x, True), env.tl_tensor(c), env.tt(x).requires_grad_(), env.tt(c)

        def f():
            xl.grad = None
            y = xl
            for _ in range(chain):
                y = y + cl
            y.sum().backward()
            return xl.grad

        def g():
            xt.grad = None
            y = xt
            for _ in range(chain):
                y = y + ct
            y.sum().backward()
            return xt.grad

        return Case("dispatch", "autograd add chain fwd+bwd", size, f, g, per=("op", chain),
                    check=env.compare(f, g),
                    note="y = y + c recorded on the tape, then y.sum().backward(); µs per add (fwd + bwd)")

    yield Spec("dispatch", "primitive add", size, prim)
    yield Spec("dispatch", "tensor add, no_grad", size, nograd)
    yield Spec("dispatch", "autograd add chain fwd+bwd", size, tape)


def mlp_spec(env: Env, batch: int = 256, dims: tuple[int, ...] = (64, 256, 256, 1), lr: float = 0.01) -> Spec:
    tl, torch = env.tl, env.torch
    import torch.nn.functional as TF

    import torchlean.nn.functional as LF

    size = f"batch {batch}, {'->'.join(map(str, dims))}"

    def init() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        g = rng(23)
        params = []
        for fan_in, fan_out in zip(dims[:-1], dims[1:]):
            bound = 1.0 / np.sqrt(fan_in)  # PyTorch's nn.Linear default init
            params.append(g.uniform(-bound, bound, (fan_out, fan_in)).astype(F32))
            params.append(g.uniform(-bound, bound, (fan_out,)).astype(F32))
        x = g.standard_normal((batch, dims[0]), dtype=F32)
        y = np.sin(x[:, :dims[-1]]).astype(F32)
        return params, x, y

    def make_steps():
        params, x, y = init()
        lp = [env.tl_tensor(p, True) for p in params]
        tp = [env.tt(p).requires_grad_() for p in params]
        lx, ly, tx, ty = env.tl_tensor(x), env.tl_tensor(y), env.tt(x), env.tt(y)

        def tl_step():
            h = lx
            for i in range(0, len(lp), 2):
                h = LF.linear(h, lp[i], lp[i + 1])
                if i + 2 < len(lp):
                    h = LF.tanh(h)
            loss = LF.mse_loss(h, ly)
            loss.backward()
            with tl.no_grad():
                for p in lp:
                    p.sub_(p.grad, alpha=lr)
                    p.grad = None
            return loss

        def torch_step():
            h = tx
            for i in range(0, len(tp), 2):
                h = TF.linear(h, tp[i], tp[i + 1])
                if i + 2 < len(tp):
                    h = torch.tanh(h)
            loss = TF.mse_loss(h, ty)
            loss.backward()
            with torch.no_grad():
                for p in tp:
                    p.sub_(p.grad, alpha=lr)
                    p.grad = None
            return loss

        return tl_step, torch_step

    def build() -> Case:
        a, b = make_steps()  # a fresh pair for the check: 5 steps from identical weights
        la = [float(env.host(a())) for _ in range(5)]
        lb = [float(env.host(b())) for _ in range(5)]
        rel = max(abs(u - v) / max(abs(v), 1e-30) for u, v in zip(la, lb))
        check = f"losses over 5 steps from identical weights agree to {rel:.1e} (rel)"
        if rel > 1e-4:
            check = "CHECK: " + check
        f, g = make_steps()
        return Case("mlp", "MLP train step", size, f, g, per=("step", 1), check=lambda: check,
                    note="linear/tanh/linear/tanh/linear, mse_loss, backward, SGD p.sub_(p.grad, alpha=lr) "
                         "under no_grad")

    return Spec("mlp", "MLP train step", size, build)


def all_specs(env: Env) -> list[Spec]:
    quick, cuda = env.quick, env.device == "cuda"
    if quick:
        ew = [1 << 16, 1 << 20]
        mats = [(1024, 1024)]
        smax = [(1024, 1024)]
        bmms = [(1, 256, 256, 256), (32, 64, 64, 64)]
        square, table, k = 1024, (10_000, 256), 4096
        rngs = [1 << 20]
    else:
        ew = [1 << 16, 1 << 20, 1 << 24]
        mats = [(4096, 4096)]
        smax = [(4096, 1024)]
        bmms = [(1, 512, 512, 512), (1, 1024, 1024, 1024), (32, 128, 128, 128)]
        square, table, k = 4096, (50_000, 256), 16_384
        rngs = [1 << 24]
        if cuda:
            ew += [1 << 26, 1 << 28]
            mats += [(8192, 8192), (16384, 16384)]
            smax += [(65536, 1024)]
            bmms += [(1, 4096, 4096, 4096), (64, 512, 512, 512)]
            rngs += [1 << 26]
    specs: list[Spec] = []
    specs += elementwise_specs(env, ew)
    specs += reduction_specs(env, ew, mats)
    specs += softmax_specs(env, smax)
    specs += bmm_specs(env, bmms)
    specs += layout_specs(env, square, table, k)
    specs += rng_specs(env, rngs)
    specs += dispatch_specs(env)
    specs.append(mlp_spec(env))
    specs += nn_specs(env)
    return specs


# -- driver ----------------------------------------------------------------------------------


def cuda_problem() -> str | None:
    """Why --device cuda cannot run here, or None."""
    from torchlean.runtime import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        return f"torchlean: {reason}"
    import torch

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} has no usable CUDA device (torch.cuda.is_available() is False)"
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return f"CuPy is needed to synchronize torchlean's CUDA buffers ({exc})"
    return None


def collect_meta(env: Env, args: argparse.Namespace, threads: int, source: str) -> dict[str, Any]:
    import torch

    import torchlean

    if env.device == "cuda":
        device_name = torch.cuda.get_device_name(0)
    else:
        device_name = f"{H.cpu_model()}, {H.cpu_count()} cores"
    return {
        "date": H.today(),
        "device": env.device,
        "device_name": device_name,
        "cpu_model": H.cpu_model(),
        "cpu_cores": H.cpu_count(),
        "blas_threads": threads,
        "blas_threads_source": source,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torchlean": torchlean.__version__,
        "commit": H.git_commit(),
        "quick": bool(args.quick),
        "torch_thp": os.environ.get("THP_MEM_ALLOC_ENABLE", "") not in ("", "0"),
        "min_time": args.min_time,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m benchmarks.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--quick", action="store_true", help="smaller sizes and shorter timing (a smoke run)")
    ap.add_argument("--out", metavar="FILE.json", help="write every result and the run's metadata as JSON")
    ap.add_argument("--markdown", metavar="FILE.md", help="write the table as a markdown section")
    ap.add_argument("--only", metavar="SUBSTR", action="append",
                    help="run only cases whose name contains SUBSTR (repeatable)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds of timed calls per case and framework (default 0.2, 0.05 with --quick)")
    ap.add_argument("--threads", type=int, default=None,
                    help="set NumPy's BLAS and torch to this many threads (default: leave BLAS as it is and give "
                         "torch the same count)")
    ap.add_argument("--torch-thp", action="store_true",
                    help="set THP_MEM_ALLOC_ENABLE=1 for torch (transparent huge pages for its CPU allocations; "
                         "off by default, as in a plain PyTorch install)")
    ap.add_argument("--retries", type=int, default=3,
                    help="re-time a case up to this many times when other processes used the CPU meanwhile "
                         "(default 3; the least disturbed attempt is kept and '*' marks one still disturbed)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate torchlean and torch in this many timing rounds per case (default 1)")
    args = ap.parse_args(argv)
    if args.min_time is None:
        args.min_time = 0.05 if args.quick else 0.2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        problem = cuda_problem()
        if problem is not None:
            print(f"benchmarks.run: --device cuda is not available: {problem}", file=sys.stderr)
            return 2

    if args.torch_thp:
        os.environ["THP_MEM_ALLOC_ENABLE"] = "1"  # read by torch's CPU allocator: must precede the import
    import torch

    if args.threads is not None:
        if args.threads < 1 or not H.set_blas_threads(args.threads):
            print(f"benchmarks.run: cannot set NumPy's BLAS to --threads {args.threads}", file=sys.stderr)
            return 2
    threads, source = H.blas_threads()
    torch.set_num_threads(threads)
    mon = H.CpuMonitor()
    mon.start()
    time.sleep(0.5)
    idle_other = mon.stop()
    if idle_other is not None and idle_other > H.BUSY_CORES:
        print(f"benchmarks.run: WARNING: other processes are using {idle_other:.2f} cores right now; multi-threaded "
              f"timings (torch, BLAS) suffer on a shared CPU: disturbed cases are re-timed up to {args.retries} "
              f"times and marked '*' if still disturbed", file=sys.stderr)
    env = Env(args.device, args.quick)
    meta = collect_meta(env, args, threads, source)
    print("\n".join(H.header_lines(meta)[:3]), file=sys.stderr)

    meta["bandwidth"] = (H.measure_copy_bandwidth_cuda() if args.device == "cuda"
                         else H.measure_copy_bandwidth_cpu(1 << 23 if args.quick else 1 << 25))
    copy_gbps = meta["bandwidth"]["copy_gbps"]
    print(f"copy bandwidth: {copy_gbps:.1f} GB/s", file=sys.stderr)

    specs = all_specs(env)
    if args.only:
        specs = [s for s in specs if any(o in s.name for o in args.only)]
    max_reps = 100 if args.quick else 1000
    # CUDA: time back-to-back calls (~1 ms per sample, then synchronize) so that small cases
    # measure the kernels and dispatch, not one launch + synchronize round trip per call.
    batch_target = 1e-3 if args.device == "cuda" else None
    warm_time = 0.05 if args.quick else 0.15
    results: list[Result] = []
    t_start = time.perf_counter()
    for i, spec in enumerate(specs, 1):
        t0 = time.perf_counter()
        case = spec.build()
        check = ""
        if case.check is not None:
            try:
                check = case.check()
            except Exception as exc:  # noqa: BLE001 - a failed check is reported, not fatal
                check = f"CHECK ERROR: {type(exc).__name__}: {exc}"
        best: tuple[float, list[float], list[float]] | None = None
        attempts = 0
        while attempts < 1 + args.retries:
            attempts += 1
            mon = H.CpuMonitor()
            mon.start()
            ta, tb, _, _ = H.time_pair(case.tl, env.tl_sync, case.torch, env.torch_sync, rounds=args.rounds,
                                       warmup=case.warmup, min_time=args.min_time, min_reps=case.min_reps,
                                       max_reps=max_reps, batch_target=batch_target, warm_time=warm_time)
            other = mon.stop()
            busy = other if other is not None else 0.0
            if best is None or busy < best[0]:
                best = (busy, ta, tb)
            if other is None or busy <= H.BUSY_CORES:
                break
            time.sleep(min(2.0, 0.5 * attempts))  # give the neighbour a moment before re-timing
        other, ta, tb = best
        tl_s, th_s = statistics.median(ta), statistics.median(tb)
        r = Result(case.group, case.name, case.size, tl_s, th_s, len(ta), len(tb), min(ta), min(tb), case.nbytes,
                   case.flops, case.per, check, case.note, other_cores=round(other, 3), attempts=attempts)
        results.append(r)
        del case
        gc.collect()
        print(f"[{i:2d}/{len(specs)}] {r.name:<28} {r.size:<22} tl {H.fmt_time(tl_s):>10}  torch "
              f"{H.fmt_time(th_s):>10}  {H.fmt_ratio(r.ratio):>7}  ({time.perf_counter() - t0:.1f} s, "
              f"{attempts} attempt(s), others used {other:.2f} cores)"
              + (f"  {check}" if check else ""), file=sys.stderr)
    meta["wall_s"] = round(time.perf_counter() - t_start, 1)
    others = [r.other_cores for r in results if r.other_cores is not None]
    if others:
        meta["other_cores_mean"] = round(statistics.fmean(others), 3)
        meta["other_cores_max"] = round(max(others), 3)
        meta["retimed_cases"] = sum(r.attempts > 1 for r in results)
        meta["retries"] = args.retries

    print()
    print("\n".join(H.header_lines(meta)))
    print()
    print(H.format_text_table(results, copy_gbps))
    notes = H.notes_lines(results)
    if notes:
        print("\nnotes:")
        print("\n".join(f"  {n}" for n in notes))
    print(f"\n{len(results)} cases in {meta['wall_s']} s")
    if args.out:
        H.write_json(args.out, results, meta)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(H.markdown_section(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
