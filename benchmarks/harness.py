"""Small reusable pieces of the benchmark harness: cases, timing, devices, tables, output.

Nothing here knows about particular ops; ``benchmarks.run`` builds the cases. Timing follows one
rule everywhere: warm-up calls (a few, and for a minimum time), then repeat until at least
``min_time`` seconds (and at least ``min_reps`` samples, at most ``max_reps``) have run, and
report the median of the per-call ``time.perf_counter`` times. On CUDA the device is
synchronized before the clock stops (CuPy's ``Device().synchronize()`` for torchlean buffers,
``torch.cuda.synchronize()`` for torch), and each sample is ~1 ms of back-to-back calls.
``CpuMonitor`` tells how much CPU other processes took meanwhile, so a shared machine's noise is
detected (and the case re-timed by the driver) instead of silently reported.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from torchlean.kernels.cpu.elementwise import MIN_WORK as EW_MIN_WORK

# -- cases and results -----------------------------------------------------------------------


@dataclass
class Case:
    """One benchmark: the same work in torchlean (``tl``) and in PyTorch eager (``torch``).

    ``nbytes``: bytes read + written by one call (set for bandwidth-bound cases: GB/s and % of
    the measured copy bandwidth are reported). ``flops``: floating-point operations of one call
    (GFLOP/s is reported). ``per``: (unit, count): also report microseconds per ``unit`` (one
    call does ``count`` of them). ``check``: optional callable run once before timing; it
    returns a short string (e.g. the max abs difference of the two results) for the notes.
    """

    group: str
    name: str
    size: str
    tl: Callable[[], Any]
    torch: Callable[[], Any]
    nbytes: int | None = None
    flops: int | None = None
    per: tuple[str, int] | None = None
    check: Callable[[], str] | None = None
    note: str = ""
    warmup: int = 2
    min_reps: int = 3


@dataclass
class Result:
    group: str
    name: str
    size: str
    tl_s: float
    torch_s: float
    tl_reps: int
    torch_reps: int
    tl_min_s: float = 0.0
    torch_min_s: float = 0.0
    nbytes: int | None = None
    flops: int | None = None
    per: tuple[str, int] | None = None
    check: str = ""
    note: str = ""
    other_cores: float | None = None  # average cores other processes used while this case was timed
    attempts: int = 1

    @property
    def ratio(self) -> float:
        return self.tl_s / self.torch_s if self.torch_s > 0 else float("inf")

    def gbps(self, seconds: float) -> float | None:
        return None if not self.nbytes else self.nbytes / seconds / 1e9

    def gflops(self, seconds: float) -> float | None:
        return None if not self.flops else self.flops / seconds / 1e9

    def to_json(self, copy_gbps: float | None) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        for who, s in (("tl", self.tl_s), ("torch", self.torch_s)):
            g = self.gbps(s)
            d[f"{who}_gbps"] = g
            d[f"{who}_pct_copy_bw"] = (100.0 * g / copy_gbps) if (g is not None and copy_gbps) else None
            d[f"{who}_gflops"] = self.gflops(s)
            d[f"{who}_us_per_{self.per[0]}" if self.per else f"{who}_us_per"] = (
                1e6 * s / self.per[1] if self.per else None)
        return d


# -- timing ----------------------------------------------------------------------------------


def no_sync() -> None:
    return None


def time_samples(fn: Callable[[], Any], sync: Callable[[], None] = no_sync, *, warmup: int = 2,
                 min_time: float = 0.2, min_reps: int = 3, max_reps: int = 1000, inner: int = 1,
                 warm_time: float = 0.0) -> list[float]:
    """Per-call seconds of ``fn``: at least ``warmup`` untimed calls (and, when ``warm_time`` is
    set, untimed calls for at least that many seconds, so that thread pools are in their steady
    state and threads another library left spinning have gone to sleep), then timed samples
    until at least ``min_reps`` samples and ``min_time`` seconds (or ``max_reps`` samples).

    A sample is ``inner`` back-to-back calls followed by ``sync()``, inside the timed region (the
    device must be done before the clock stops), divided by ``inner``; ``sync`` also runs once
    before the first sample. Results are dropped only after the clock stops (except the
    ``inner - 1`` earlier results of a sample), so freeing them is not timed.
    """
    t_warm = time.perf_counter()
    n_warm = 0
    while n_warm < warmup or (warm_time > 0 and time.perf_counter() - t_warm < warm_time and n_warm < max_reps):
        out = fn()
        sync()
        del out
        n_warm += 1
    times: list[float] = []
    total = 0.0
    sync()
    while len(times) < max_reps and (len(times) < min_reps or total < min_time):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn()
        sync()
        dt = time.perf_counter() - t0
        del out
        times.append(dt / inner)
        total += dt
    return times


def median_synced(fn: Callable[[], Any], sync: Callable[[], None], reps: int) -> float:
    """Median seconds of max(reps, 20) calls, each followed by ``sync`` (3 warm-up calls first): the
    per-call timer of the GPU check scripts (fast_cuda.py, optim_cuda.py)."""
    for _ in range(3):
        fn()
    sync()
    samples = []
    for _ in range(max(reps, 20)):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def calibrate_inner(fn: Callable[[], Any], sync: Callable[[], None], target: float, limit: int = 1000) -> int:
    """How many back-to-back calls of ``fn`` take about ``target`` seconds (1 when one call does):
    on an asynchronous device this keeps the launch + synchronize latency out of small cases."""
    one = statistics.median(time_samples(fn, sync, warmup=1, min_time=0.0, min_reps=3))
    return max(1, min(limit, int(target / max(one, 1e-9))))


def time_fn(fn: Callable[[], Any], sync: Callable[[], None] = no_sync, *, warmup: int = 2,
            min_time: float = 0.2, min_reps: int = 3, max_reps: int = 1000) -> tuple[float, int]:
    """Median seconds per call of ``fn`` and the number of timed calls (see ``time_samples``)."""
    times = time_samples(fn, sync, warmup=warmup, min_time=min_time, min_reps=min_reps, max_reps=max_reps)
    return statistics.median(times), len(times)


def time_pair(a: Callable[[], Any], sync_a: Callable[[], None], b: Callable[[], Any], sync_b: Callable[[], None],
              *, rounds: int = 1, warmup: int = 2, min_time: float = 0.2, min_reps: int = 3,
              max_reps: int = 1000, batch_target: float | None = None,
              warm_time: float = 0.0) -> tuple[list[float], list[float], int, int]:
    """Per-call seconds of ``a`` and ``b``, timed in alternating rounds (a, b, a, b, ...), and the
    number of calls per timed sample of each.

    Each framework gets ``min_time`` seconds (and at least ``min_reps`` samples) in total, split
    over ``rounds`` rounds, so that background load on a shared machine hits both alike.
    Warm-up runs before every round (``warm_time`` seconds at least, ``warmup`` calls only in the
    first round): switching framework means switching thread pools (NumPy's OpenBLAS threads keep
    spinning for ~0.1 s after a call and slow torch's OpenMP threads down meanwhile). With ``batch_target`` (seconds; for CUDA) each
    sample runs as many back-to-back calls as take about that long before synchronizing.
    """
    ta: list[float] = []
    tb: list[float] = []
    per_min = -(-min_reps // rounds)
    per_max = max(1, max_reps // rounds)
    ia = ib = 1
    for r in range(rounds):
        w = warmup if r == 0 else 0
        if r == 0 and batch_target:
            ia = calibrate_inner(a, sync_a, batch_target)
        ta += time_samples(a, sync_a, warmup=w, min_time=min_time / rounds, min_reps=per_min, max_reps=per_max,
                           inner=ia, warm_time=warm_time)
        if r == 0 and batch_target:
            ib = calibrate_inner(b, sync_b, batch_target)
        tb += time_samples(b, sync_b, warmup=w, min_time=min_time / rounds, min_reps=per_min, max_reps=per_max,
                           inner=ib, warm_time=warm_time)
    return ta, tb, ia, ib


class CpuMonitor:
    """How busy the CPU was with *other* processes between ``start()`` and ``stop()``.

    Reads /proc/stat (all CPU time but idle and iowait) and this process's own CPU time; the
    difference, divided by the wall time, is the average number of cores that other processes
    (or the hypervisor: steal time) took. On a shared machine a busy neighbour ruins multi-threaded
    timings (an OpenMP or OpenBLAS barrier waits for a thread that has no core), so the driver
    re-times cases that ran while others were busy. Returns None where /proc is missing.
    """

    def __init__(self) -> None:
        self._t0: tuple[float, float, float] | None = None

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            busy = sum(v) - v[3] - (v[4] if len(v) > 4 else 0)  # minus idle and iowait
            with open("/proc/self/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own = int(fields[11]) + int(fields[12])  # utime + stime, all threads
        except (OSError, ValueError, IndexError):
            return None
        return time.perf_counter(), busy / _HZ, own / _HZ

    def start(self) -> None:
        self._t0 = self._sample()

    def stop(self) -> float | None:
        t1 = self._sample()
        if self._t0 is None or t1 is None or t1[0] - self._t0[0] <= 0:
            return None
        other = (t1[1] - self._t0[1]) - (t1[2] - self._t0[2])
        return max(0.0, other / (t1[0] - self._t0[0]))


try:
    _HZ = float(os.sysconf("SC_CLK_TCK"))
except (ValueError, OSError, AttributeError):
    _HZ = 100.0


# -- threads and devices ---------------------------------------------------------------------

_BLAS_SYMBOLS = (
    "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
    "openblas_get_num_threads", "MKL_Get_Max_Threads", "mkl_get_max_threads",
    "bli_thread_get_num_threads",
)


def blas_threads() -> tuple[int, str]:
    """The thread count of the BLAS NumPy loaded (and where that number came from).

    Looks for an OpenBLAS / MKL / BLIS library in this process's memory map and asks it; falls
    back to the usual environment variables, then to the number of usable CPU cores.
    """
    for path in _blas_libs():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in _BLAS_SYMBOLS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                n = int(fn())
                if n > 0:
                    return n, f"{os.path.basename(path)}:{sym}()"
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(var, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v), f"${var}"
    return cpu_count(), "usable CPU cores"


_BLAS_SET_SYMBOLS = (
    "scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
    "openblas_set_num_threads", "MKL_Set_Num_Threads", "bli_thread_set_num_threads",
)


def _blas_libs() -> list[str]:
    import numpy  # noqa: F401  (make sure NumPy's BLAS is loaded)

    libs: list[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                path = parts[-1] if parts else ""
                low = path.lower()
                if path.startswith("/") and any(k in low for k in ("openblas", "mkl_rt", "libblis")) and path not in libs:
                    libs.append(path)
    except OSError:
        pass
    return libs


def set_blas_threads(n: int) -> bool:
    """Set the thread count of NumPy's BLAS (OpenBLAS / MKL / BLIS); False if no setter was found."""
    for path in _blas_libs():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in _BLAS_SET_SYMBOLS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(int(n))
                return True
    return False


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit(cwd: str | None = None) -> str:
    """The checkout's short commit (+ a note when it has uncommitted changes). A tree exported with
    ``git archive`` (no .git of its own, perhaps inside another checkout) says so instead of naming
    the enclosing checkout's commit; TORCHLEAN_COMMIT, when set, names the export's commit."""
    if os.environ.get("TORCHLEAN_COMMIT"):
        return os.environ["TORCHLEAN_COMMIT"] + " (export)"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd or root, capture_output=True, text=True,
                             timeout=10)
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(root):
            return "unknown (not a git checkout; set TORCHLEAN_COMMIT)"
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10)
        rev = out.stdout.strip() if out.returncode == 0 else "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10)
        if rev != "unknown" and dirty.returncode == 0 and dirty.stdout.strip():
            rev += " (+ uncommitted changes)"
        return rev
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def measure_copy_bandwidth_cpu(n: int = 1 << 25) -> dict[str, float]:
    """GB/s (bytes read + written) of a large NumPy copy: into a preallocated array (the reference
    for '% of copy BW') and into a freshly allocated one (what a primitive that returns a new
    array pays: page faults on first touch included)."""
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t_pre, _ = time_fn(lambda: np.copyto(dst, src), warmup=2, min_time=0.3, min_reps=5)
    t_new, _ = time_fn(lambda: src.copy(), warmup=2, min_time=0.3, min_reps=5)
    nbytes = 2 * src.nbytes
    return {"copy_gbps": nbytes / t_pre / 1e9, "alloc_copy_gbps": nbytes / t_new / 1e9, "copy_elems": float(n)}


def measure_copy_bandwidth_cuda(n: int = 1 << 28) -> dict[str, float]:
    """GB/s (read + write) of a device-to-device copy of ``n`` float32: CuPy if present, else torch."""
    try:
        import cupy

        src = cupy.ones(n, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        sync = cupy.cuda.Device().synchronize
        t, _ = time_fn(lambda: cupy.copyto(dst, src), sync, warmup=3, min_time=0.3, min_reps=10)
        via = "cupy.copyto"
    except ImportError:
        import torch

        src = torch.ones(n, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        t, _ = time_fn(lambda: dst.copy_(src), torch.cuda.synchronize, warmup=3, min_time=0.3, min_reps=10)
        via = "torch copy_"
    return {"copy_gbps": 2 * 4 * n / t / 1e9, "copy_elems": float(n), "copy_via": via}  # type: ignore[dict-item]


# -- formatting ------------------------------------------------------------------------------


def fmt_time(s: float) -> str:
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def throughput(r: Result, seconds: float, copy_gbps: float | None) -> str:
    if r.flops:
        return f"{r.gflops(seconds):.1f} GFLOP/s"
    if r.nbytes:
        g = r.gbps(seconds)
        pct = f" ({100 * g / copy_gbps:.0f}%)" if copy_gbps else ""
        return f"{g:.1f} GB/s{pct}"
    if r.per:
        return f"{fmt_time(seconds / r.per[1])}/{r.per[0]}"
    return ""


TABLE_HEADERS = ("case", "size", "torchlean", "torch", "ratio", "torchlean throughput", "torch throughput")


BUSY_CORES = 0.25  # other processes used more than this many cores on average: the case was disturbed


def disturbed(r: Result) -> bool:
    return r.other_cores is not None and r.other_cores > BUSY_CORES


def table_rows(results: Sequence[Result], copy_gbps: float | None) -> list[tuple[str, ...]]:
    return [(r.name, r.size, fmt_time(r.tl_s), fmt_time(r.torch_s), fmt_ratio(r.ratio) + (" *" if disturbed(r) else ""),
             throughput(r, r.tl_s, copy_gbps), throughput(r, r.torch_s, copy_gbps)) for r in results]


def format_text_table(results: Sequence[Result], copy_gbps: float | None) -> str:
    rows = table_rows(results, copy_gbps)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(TABLE_HEADERS)]
    right = {2, 3, 4, 5, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(TABLE_HEADERS), "  ".join("-" * w for w in widths)]
    group = None
    for r, row in zip(results, rows):
        if group is not None and r.group != group:
            out.append("")
        group = r.group
        out.append(line(row))
    return "\n".join(out)


def format_markdown_table(results: Sequence[Result], copy_gbps: float | None) -> str:
    rows = table_rows(results, copy_gbps)
    out = ["| " + " | ".join(TABLE_HEADERS) + " |",
           "|" + "|".join(["---", "---", "---:", "---:", "---:", "---:", "---:"]) + "|"]
    for row in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(out)


def header_lines(meta: dict[str, Any]) -> list[str]:
    """Human-readable description of the run (shared by the terminal output and markdown)."""
    lines = [
        f"device: {meta['device']} ({meta['device_name']}); date {meta['date']}; commit {meta['commit']}",
        f"threads: numpy/BLAS {meta['blas_threads']} (from {meta['blas_threads_source']}), "
        f"torch.set_num_threads({meta['torch_threads']}); torchlean's arithmetic element-wise kernels split over "
        f"Numba's threads from 2 x {EW_MIN_WORK} elements (below, and exp/log/tanh-like functions, NumPy ufuncs "
        f"on one thread)" + ("; torch THP_MEM_ALLOC_ENABLE=1" if meta.get("torch_thp") else ""),
        f"versions: python {meta['python']}, numpy {meta['numpy']}, torch {meta['torch']}, torchlean {meta['torchlean']}",
    ]
    if "other_cores_mean" in meta:
        lines.append(f"other processes used {meta['other_cores_mean']:.2f} cores on average while cases were timed "
                     f"(at most {meta['other_cores_max']:.2f}); {meta['retimed_cases']} case(s) re-timed because "
                     f"others used more than {BUSY_CORES} cores (up to {meta['retries']} retries)")
    bw = meta.get("bandwidth", {})
    if bw:
        s = f"measured copy bandwidth: {bw['copy_gbps']:.1f} GB/s (read+write, {int(bw['copy_elems'])} float32"
        s += f", {bw.get('copy_via', 'numpy.copyto into a preallocated array')})"
        if "alloc_copy_gbps" in bw:
            s += f"; into a new array (page faults included): {bw['alloc_copy_gbps']:.1f} GB/s"
        lines.append(s)
    how = "time = median per call after warm-up"
    if meta.get("device") == "cuda":
        how += " (each sample: ~1 ms of back-to-back calls, then synchronize)"
    lines.append(how + "; ratio = torchlean / torch (< 1: torchlean faster); throughput = GB/s of bytes "
                 "read+written (% of copy bandwidth; above 100% the data fit in cache), GFLOP/s for bmm, "
                 "time per op for dispatch cases")
    if meta.get("quick"):
        lines.append("QUICK run (--quick): smaller sizes and shorter timing; not for BENCHMARKS.md")
    return lines


def notes_lines(results: Sequence[Result]) -> list[str]:
    out = []
    busy = [r for r in results if disturbed(r)]
    if busy:
        out.append(f"* {len(busy)} case(s) ran while other processes used more than {BUSY_CORES} of a core on "
                   "average (even after re-timing); their multi-threaded timings are unreliable")
    for r in results:
        bits = [b for b in (r.note, r.check) if b]
        if bits:
            out.append(f"{r.name} [{r.size}]: " + "; ".join(bits))
    return out


def markdown_section(results: Sequence[Result], meta: dict[str, Any], title: str | None = None) -> str:
    copy_gbps = meta.get("bandwidth", {}).get("copy_gbps")
    title = title or f"{meta['device'].upper()} results ({meta['date']})"
    parts = [f"### {title}", ""]
    parts += [f"- {ln}" for ln in header_lines(meta)]
    parts += ["", format_markdown_table(results, copy_gbps), ""]
    notes = notes_lines(results)
    if notes:
        parts += ["Notes and equivalence checks (torchlean vs torch on the same inputs):", ""]
        parts += [f"- {n}" for n in notes]
        parts.append("")
    return "\n".join(parts)


def write_json(path: str, results: Sequence[Result], meta: dict[str, Any]) -> None:
    copy_gbps = meta.get("bandwidth", {}).get("copy_gbps")
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": [r.to_json(copy_gbps) for r in results]}, f, indent=1, default=str)
        f.write("\n")


def write_report(out_dir: str, name: str, lines: Sequence[str], record: Any) -> None:
    """``out_dir/name.md`` (the lines) and ``out_dir/name.json`` (the record) of a GPU script."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(record, f, indent=1)


def today() -> str:
    return _dt.date.today().isoformat()
