"""Compile the CPU kernels of a training example in helper processes, ahead of their first call.

Numba compiles a kernel at its first call and holds the GIL and its compiler lock while it does, so
on a fresh machine the first step of an example spends most of its time compiling, one kernel after
another on one core (BENCHMARKS.md). Numba looks in its disk cache before it compiles: a kernel that
another process has already compiled into the same cache is loaded instead. ``start(name)`` hands
the example's kernels that are not cached yet to helper processes while this process compiles
from the front of the list, in the order the example first calls them (``shares``: who does what).

The lists (``first_use.json`` next to this file, one per example) name each kernel by module and
qualified name, with the argument types of its first call, or as a task body (tasks.Task, compiled
to a C callback). ``scripts/record-first-use`` writes them by running every example for one step
with an empty cache. A kernel missing from a list is compiled at its first call, as without
helpers; an entry that no longer resolves is skipped. Helpers run at a lower priority, stop when
the process that started them has ended, and are off with TORCHLEAN_PRECOMPILE=off. Nothing they
do changes a result: the cache holds what this process would have compiled itself.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["LISTS", "entries", "missing", "shares", "start", "compile_entries"]

LISTS = Path(__file__).with_name("first_use.json")
_MODULE = "torchlean.kernels.cpu.warm"  # (not __name__: that is "__main__" when run with -m)
_HELPERS_MAX = 8        # the lists hold 7-27 kernels: more helpers than a few each would mostly start and stop
_PER_HELPER_MIN = 4     # entries a helper should have to be worth its start (an import of torchlean)


def entries(name: str) -> list[dict]:
    """The recorded first-use list of example ``name`` (empty if none is recorded)."""
    try:
        return json.loads(LISTS.read_text()).get(name, [])
    except (OSError, ValueError):
        return []


def _resolve(entry: dict):
    """(python function, argument types or None for a task body, compile thunk) of an entry; raises
    if it no longer resolves."""
    from numba.core import types

    module, _, qualname = entry["fn"].partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if entry["kind"] == "task":
        from .tasks import callback

        return obj, None, lambda: callback(obj)
    # the signature's repr, evaluated with Numba's type names only
    sig = eval(entry["sig"], {"__builtins__": {}}, vars(types))  # noqa: S307 - our own package data
    return obj.py_func, sig, lambda: obj.compile(sig)


def _cached(py_func, sig) -> bool:
    """Whether Numba's disk cache holds ``py_func`` compiled for the argument types ``sig`` (a task
    body's one signature: None), fresh for its source."""
    from numba.core.caching import FunctionCache

    try:
        index = FunctionCache(py_func)._cache_file._load_index()  # keys: (argument types, target, code hashes)
    except Exception:  # noqa: BLE001 - an unreadable or uncacheable entry counts as missing
        return False
    return bool(index) if sig is None else any(key[0] == sig for key in index)


def _missing_at(ents: list[dict]) -> list[int]:
    """The positions of the entries whose kernels are not in Numba's disk cache (unresolvable ones
    are left out: a renamed kernel compiles at its first call)."""
    out = []
    for i, e in enumerate(ents):
        try:
            py_func, sig, _ = _resolve(e)
        except Exception:  # noqa: BLE001
            continue
        if not _cached(py_func, sig):
            out.append(i)
    return out


def missing(ents: list[dict]) -> list[dict]:
    """The entries whose kernels are not in Numba's disk cache (unresolvable ones are dropped)."""
    return [ents[i] for i in _missing_at(ents)]


def _helpers(todo: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(_HELPERS_MAX, cores - 1, todo // _PER_HELPER_MIN))


def shares(todo: list, n: int) -> list[list]:
    """What each of n helpers compiles, in order. This process compiles ``todo`` from its front, as
    the example first calls the kernels; so the helpers split the rest, all but the front
    1/(n + 1), in list order (what the example needs soonest, first), then work back from the end
    of the front part towards this process, wherever a slow set-up has left it."""
    head = len(todo) // (n + 1)
    return [todo[head:][j::n] + todo[:head][::-1][j::n] for j in range(n)]


def start(name: str) -> list[subprocess.Popen]:
    """Start the helpers for example ``name`` (none when everything is cached, on one core, or with
    TORCHLEAN_PRECOMPILE=off); returns at once with their processes."""
    if os.environ.get("TORCHLEAN_PRECOMPILE", "").lower() in ("off", "0", "no"):
        return []
    todo = _missing_at(entries(name))
    cmd = [sys.executable, "-m", _MODULE, "compile", name, "--parent", str(os.getpid())]
    procs = []
    for share in shares(todo, _helpers(len(todo))):
        try:
            procs.append(subprocess.Popen(cmd + ["--at", ",".join(map(str, share))], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except OSError:  # no helper: every kernel compiles at first use, as before
            break
    return procs


def compile_entries(ents: list[dict], parent: int | None = None) -> int:
    """Compile ``ents`` in order into Numba's cache; stops early once ``parent`` is no longer this
    process's parent. Returns how many were compiled (or found cached)."""
    done = 0
    for e in ents:
        if parent is not None and os.getppid() != parent:
            break
        try:
            _resolve(e)[2]()
        except Exception:  # noqa: BLE001 - its first call compiles it and reports any error there
            continue
        done += 1
    return done


def main(argv: list[str]) -> int:
    """A helper's command line: ``compile NAME [--parent PID] [--at I,J,...]``."""
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m {_MODULE}", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_comp = sub.add_parser("compile", help="compile an example's kernels that are not cached")
    p_comp.add_argument("name")
    p_comp.add_argument("--parent", type=int, default=None)
    p_comp.add_argument("--at", default=None, help="positions in the list, in order (default: all missing)")
    a = ap.parse_args(argv)
    if a.parent is not None and hasattr(os, "nice"):
        os.nice(5)  # behind the process it helps, whose own compiles and steps come first
    ents = entries(a.name)
    if a.at is not None:  # (less what another process has compiled since)
        ents = [ents[int(i)] for i in a.at.split(",") if i and int(i) < len(ents)]
    compile_entries(missing(ents), a.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
