"""The examples' data cache (torchlean/data_cache.py) and the generators it keeps off the critical path.

Every test points TORCHLEAN_DATA_CACHE at its own tmp_path (conftest.py already keeps the whole
session away from the user's cache).
"""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest

from torchlean import data_cache, examples
from torchlean import train as train_mod
from torchlean.cli import main
from torchlean.examples import cnn, fno1d

GENERATOR = '''
import numpy as np
NAME = "fake"
DATA_KEYS = ("seed", "n")
CALLS = []

def make_data(cfg):
    CALLS.append(dict(cfg))
    rng = np.random.default_rng(cfg["seed"])
    return {"x": rng.standard_normal((cfg["n"], 3)).astype(np.float32), "y": np.arange(cfg["n"]),
            "scale": 0.1 + cfg["n"], "note": "fake", "nothing": None, "s64": np.float64(1) / 3,
            "c": np.exp(1j * np.arange(3.0)), "mask": np.arange(5) % 2 == 0, "empty": np.zeros((0, 4), np.int16),
            "big_endian": np.arange(4, dtype=">f8"), "strided": np.arange(12.0).reshape(3, 4)[:, ::2],
            "zero_d": np.array(7, np.uint8)}
'''


def _fake_example(tmp_path, source=GENERATOR, name="fake_example"):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _get(ex, cfg, **kw):
    return data_cache.cached_data(ex, cfg, lambda: ex.make_data(cfg), **kw)


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert type(a[k]) is type(b[k]), k
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            assert a[k].tobytes() == b[k].tobytes(), k
        elif isinstance(a[k], float) and math.isnan(a[k]):
            assert math.isnan(b[k])
        else:
            assert a[k] == b[k], k


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TORCHLEAN_DATA_CACHE", str(folder))
    return folder


def _entries(folder):
    return sorted(p for p in folder.glob("*.tldata")) if folder.exists() else []


def test_hit_returns_the_same_data_without_generating(tmp_path, cache):
    ex = _fake_example(tmp_path)
    cfg = {"seed": 3, "n": 5, "steps": 10}
    first, how = _get(ex, cfg)
    assert "cached at" in how and len(ex.CALLS) == 1
    assert len(_entries(cache)) == 1
    again, how = _get(ex, cfg)
    assert how.startswith("loaded from the cache") and len(ex.CALLS) == 1
    _same(first, again)
    assert list(again) == list(first)
    again["x"][0, 0] += 1  # loaded arrays are ordinary writable arrays
    # a key the generator does not read (the schedule) does not change the entry
    _, how = _get(ex, dict(cfg, steps=99, lr=1.0))
    assert how.startswith("loaded from the cache") and len(ex.CALLS) == 1


def test_a_changed_data_config_or_generator_is_a_miss(tmp_path, cache):
    ex = _fake_example(tmp_path)
    cfg = {"seed": 3, "n": 5}
    base, _ = _get(ex, cfg)
    other, how = _get(ex, dict(cfg, seed=4))
    assert "cached at" in how and len(ex.CALLS) == 2
    assert not np.array_equal(base["x"], other["x"])
    _get(ex, dict(cfg, n=6))
    assert len(ex.CALLS) == 3 and len(_entries(cache)) == 3
    # the same config, but the generator's code changed: its old entries are not used
    edited = _fake_example(tmp_path, GENERATOR.replace("standard_normal", "random"), name="fake_example")
    data, how = _get(edited, cfg)
    assert "cached at" in how and len(edited.CALLS) == 1
    assert not np.array_equal(base["x"], data["x"])


@pytest.mark.parametrize("damage", ["flip_payload", "flip_header", "truncate", "empty", "garbage", "other_key"])
def test_a_damaged_entry_is_regenerated_and_replaced(tmp_path, cache, damage):
    ex = _fake_example(tmp_path)
    cfg = {"seed": 1, "n": 40}
    good, _ = _get(ex, cfg)
    (path,) = _entries(cache)
    raw = bytearray(path.read_bytes())
    if damage == "flip_payload":
        raw[-100] ^= 0x01
    elif damage == "flip_header":
        at = raw.index(b'"seed": 1')
        raw[at + 8:at + 9] = b"2"  # the entry now claims another config
    elif damage == "truncate":
        raw = raw[:len(raw) // 2]
    elif damage == "empty":
        raw = bytearray()
    elif damage == "garbage":
        raw = bytearray(os.urandom(len(raw)))
    elif damage == "other_key":  # a valid entry of another config copied under this name
        _get(ex, dict(cfg, seed=2))
        (other,) = [p for p in _entries(cache) if p != path]
        raw = bytearray(other.read_bytes())
    path.write_bytes(bytes(raw))
    calls = len(ex.CALLS)
    data, how = _get(ex, cfg)
    assert len(ex.CALLS) == calls + 1 and "replaced" in how
    _same(good, data)
    again, how = _get(ex, cfg)  # the entry was rewritten whole
    assert how.startswith("loaded from the cache") and len(ex.CALLS) == calls + 1
    _same(good, again)


@pytest.mark.parametrize("value", ["off", "0", "False", "no"])
def test_the_environment_turns_the_cache_off(tmp_path, monkeypatch, value):
    monkeypatch.setenv("TORCHLEAN_DATA_CACHE", value)
    monkeypatch.chdir(tmp_path)  # were the value taken for a folder name, it would appear here
    ex = _fake_example(tmp_path)
    for _ in range(2):
        _, how = _get(ex, {"seed": 0, "n": 3})
        assert how == "generated"
    assert len(ex.CALLS) == 2
    assert not (tmp_path / value).exists() and not list(tmp_path.rglob("*.tldata"))


def test_enabled_false_neither_reads_nor_writes(tmp_path, cache):
    ex = _fake_example(tmp_path)
    _get(ex, {"seed": 0, "n": 3})
    _, how = _get(ex, {"seed": 0, "n": 3}, enabled=False)
    assert how == "generated" and len(ex.CALLS) == 2
    _, how = _get(ex, {"seed": 0, "n": 4}, enabled=False)
    assert len(_entries(cache)) == 1


def test_default_folder_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHLEAN_DATA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_cache.cache_dir() == tmp_path / "xdg" / "torchlean" / "datasets"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec: relative paths are invalid
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_cache.cache_dir() == tmp_path / "home" / ".cache" / "torchlean" / "datasets"


def test_an_unwritable_cache_costs_a_generation_not_the_run(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TORCHLEAN_DATA_CACHE", str(blocker / "datasets"))
    ex = _fake_example(tmp_path)
    said = []
    data, how = _get(ex, {"seed": 0, "n": 3}, say=said.append)
    assert how == "generated (not cached)" and data["x"].shape == (3, 3)
    assert len(said) == 1 and "could not write" in said[0]


def test_unstorable_values_are_not_cached(tmp_path, cache):
    ex = _fake_example(tmp_path, GENERATOR.replace('"note": "fake"', '"note": object()'))
    _, how = _get(ex, {"seed": 0, "n": 3})
    assert how == "generated (not cached)" and _entries(cache) == []


def test_without_data_keys_nothing_is_cached(tmp_path, cache):
    ex = _fake_example(tmp_path, GENERATOR.replace('DATA_KEYS = ("seed", "n")', ""))
    for _ in range(2):
        _, how = _get(ex, {"seed": 0, "n": 3})
        assert how == "generated"
    assert _entries(cache) == []


def test_slow_enough_threshold(tmp_path, cache):
    ex = _fake_example(tmp_path)
    _, how = _get(ex, {"seed": 0, "n": 3}, min_seconds=60.0)
    assert how == "generated" and _entries(cache) == []


class _Reads(dict):
    """A config that records the keys read from it."""

    def __init__(self, *a):
        super().__init__(*a)
        self.read = set()

    def __getitem__(self, k):
        self.read.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self.read.add(k)
        return super().get(k, default)


@pytest.mark.parametrize("name", examples.NAMES)
def test_data_keys_are_exactly_what_make_data_reads(name):
    ex = examples.get(name)
    cfg = _Reads(dict(ex.default_config(), **ex.tiny_config()))
    ex.make_data(cfg)
    assert sorted(cfg.read) == sorted(ex.DATA_KEYS)


def test_train_reuses_the_data_and_learns_the_same(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(train_mod, "_CACHE_MIN_SECONDS", 0.0)
    runs = [train_mod.train("fno1d", device="cpu", tiny=True, steps=3, say=lambda s: None, progress=False)
            for _ in range(2)]
    assert "cached at" in runs[0]["data_source"]
    assert runs[1]["data_source"].startswith("loaded from the cache")
    assert runs[0]["losses"] == runs[1]["losses"]
    assert runs[0]["evaluation"] == runs[1]["evaluation"]
    off = train_mod.train("fno1d", device="cpu", tiny=True, steps=3, say=lambda s: None, progress=False,
                          data_cache=False)
    assert off["data_source"] == "generated" and off["losses"] == runs[0]["losses"]


def test_cli_no_data_cache_flag(tmp_path, cache, monkeypatch, capsys):
    monkeypatch.setattr(train_mod, "_CACHE_MIN_SECONDS", 0.0)
    assert main(["train", "mlp", "--device", "cpu", "--tiny", "--steps", "2", "--no-data-cache"]) == 0
    assert "data: generated (" in capsys.readouterr().out and _entries(cache) == []
    assert main(["train", "mlp", "--device", "cpu", "--tiny", "--steps", "2"]) == 0
    assert len(_entries(cache)) == 1
    assert main(["train", "mlp", "--device", "cpu", "--tiny", "--steps", "2"]) == 0
    assert "data: loaded from the cache" in capsys.readouterr().out


# -- the generators: fast, and the same bits however they are split ----------------------------------

def test_burgers_solve_bits_do_not_depend_on_blocks_or_workers(monkeypatch):
    u0 = fno1d.grf_1d(np.random.default_rng(5), 23, 64)
    ref = fno1d.burgers_solve(u0, time_steps=20, workers=1)
    monkeypatch.setattr(fno1d, "_BLOCK_BYTES", 16 * 33 * 4)  # 4 rows a block: 6 blocks
    for workers in (1, 3, None):
        out = fno1d.burgers_solve(u0, time_steps=20, workers=workers)
        assert out.tobytes() == ref.tobytes()
    one = fno1d.burgers_solve(u0[7], time_steps=20)  # a single sample keeps its shape and bits
    assert one.shape == (64,) and one.tobytes() == ref[7].tobytes()


def test_cnn_draws_each_image_with_its_own_shape():
    size = 12
    rng = np.random.default_rng(0)
    x, y = cnn.draw_shapes(rng, 64, size, noise=0.0)
    assert set(np.unique(y)) == {0, 1, 2, 3}
    # without noise each image is background + level * mask: recover the mask and compare it with
    # every shape's formula at the image's parameters, drawn again from the same stream
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 64)
    r = rng.uniform(0.2, 0.4, (64, 1, 1)) * size
    cx = rng.uniform(0, 1, (64, 1, 1)) * (size - 2 * r) + r - 0.5
    cy = rng.uniform(0, 1, (64, 1, 1)) * (size - 2 * r) + r - 0.5
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    for i in range(64):
        dx, dy, ri = xx - cx[i], yy - cy[i], r[i]
        t = max(0.5, 0.25 * float(ri[0, 0]))
        want = [dx ** 2 + dy ** 2 <= ri ** 2,
                (np.abs(dx) <= 0.8 * ri) & (np.abs(dy) <= 0.8 * ri),
                (dy <= ri) & (np.abs(dx) <= (dy + ri) / 2),
                ((np.abs(dx) <= t) & (np.abs(dy) <= ri)) | ((np.abs(dy) <= t) & (np.abs(dx) <= ri))][labels[i]]
        got = x[i, 0] > x[i, 0].min() + 1e-3
        assert np.array_equal(got, want) and labels[i] == y[i]


def test_a_config_value_that_is_not_plain_data_is_not_cached(tmp_path, cache):
    ex = _fake_example(tmp_path)
    _, how = _get(ex, {"seed": 0, "n": 3, "unused": object()})  # not a data key: fine
    assert "cached at" in how
    ex2 = _fake_example(tmp_path, GENERATOR.replace('DATA_KEYS = ("seed", "n")', 'DATA_KEYS = ("seed", "n", "f")')
                        .replace("CALLS.append", "cfg['f']; CALLS.append"), name="fake_f")
    _, how = _get(ex2, {"seed": 0, "n": 3, "f": object()})
    assert how == "generated"
