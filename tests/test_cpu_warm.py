"""kernels/cpu/warm.py: the recorded first-use lists resolve to today's kernels, helpers compile
into Numba's disk cache what ``missing`` reports, and stop when their parent has gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from torchlean.examples import NAMES
from torchlean.kernels.cpu import warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a small njit kernel and a small task body: seconds to compile, not tens
SMALL = [{"kind": "njit", "fn": "torchlean.kernels.cpu.tasks:_run_ser",
          "sig": "(int64, Array(int64, 1, 'C', False, aligned=True), int64)"},
         {"kind": "task", "fn": "torchlean.kernels.cpu.elementwise:_unary_task"}]


def test_every_example_has_a_list_and_every_entry_resolves():
    lists = json.loads(warm.LISTS.read_text())
    assert set(lists) == set(NAMES)
    for name, ents in lists.items():
        assert len(ents) >= 5, name
        for e in ents:
            py_func, sig, thunk = warm._resolve(e)  # raises if a kernel was renamed: record the lists again
            assert callable(thunk) and py_func.__module__.startswith("torchlean.kernels.cpu"), e
            assert (sig is None) == (e["kind"] == "task"), e


def _in_fresh_cache(tmp_path, body: str, **env) -> subprocess.CompletedProcess:
    """``body`` in a new process whose Numba cache is an empty folder."""
    script = "import json\nfrom torchlean.kernels.cpu import warm\n" + textwrap.dedent(body)
    e = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=ROOT, **env)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=e)


def test_compiled_entries_are_cached_and_no_longer_missing(tmp_path):
    r = _in_fresh_cache(tmp_path, f"""
        small = {SMALL!r}
        gone = {{"kind": "task", "fn": "torchlean.kernels.cpu.elementwise:_no_such_body"}}
        assert warm.missing(small + [gone]) == small   # not cached yet; the stale entry dropped
        assert warm.compile_entries(small + [gone]) == 2  # the stale one skipped, not fatal
        assert warm.missing(small) == []
        other = dict(small[0], sig="(int64, Array(int64, 1, 'C', False, aligned=True), int32)")
        assert warm.missing([other]) == [other]  # the same kernel for other argument types: not cached
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_helper_compiles_into_the_cache_this_process_reads(tmp_path):
    # the helper's command line, run on a list of our own; a second process then finds both cached
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps({"mlp": SMALL}))
    check = ("import json; from torchlean.kernels.cpu import warm; "
             f"print(len(warm.missing(json.load(open({str(lists)!r}))['mlp'])))")
    r = _in_fresh_cache(tmp_path, f"""
        import subprocess, sys
        from pathlib import Path
        warm.LISTS = Path({str(lists)!r})
        assert len(warm.missing(warm.entries("mlp"))) == 2
        assert warm.main(["compile", "mlp"]) == 0
        print(subprocess.run([sys.executable, "-c", {check!r}], capture_output=True, text=True).stdout.strip())
    """)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr


def test_a_helper_stops_once_its_parent_is_gone(tmp_path):
    r = _in_fresh_cache(tmp_path, f"""
        import os
        not_parent = os.getppid() + 1_000_000
        print(warm.compile_entries({SMALL!r}, parent=not_parent), len(warm.missing({SMALL!r})))
    """)
    assert r.returncode == 0 and r.stdout.split() == ["0", "2"], r.stderr


def test_no_helpers_when_switched_off_or_nothing_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHLEAN_PRECOMPILE", "off")
    assert warm.start("mlp") == []
    monkeypatch.setenv("TORCHLEAN_PRECOMPILE", "on")
    monkeypatch.setattr(warm, "missing", lambda ents: [])
    assert warm.start("mlp") == []
    assert warm._helpers(0) == 0 and warm._helpers(3) == 0  # too few to be worth a process


def test_shares_cover_each_entry_once_the_examples_next_kernels_first():
    todo = list(range(27))
    for n in (1, 2, 8):
        got = warm.shares(todo, n)
        assert len(got) == n and sorted(i for share in got for i in share) == todo
        head = len(todo) // (n + 1)  # this process's own front part: the helpers' last resort
        for share in got:
            rest, front = [i for i in share if i >= head], [i for i in share if i < head]
            assert share == rest + front and rest == sorted(rest) and front == sorted(front, reverse=True)
    assert warm.shares(todo, 1) == [list(range(13, 27)) + list(range(12, -1, -1))]
    assert warm.shares([], 0) == []
