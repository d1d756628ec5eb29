"""API coverage over everyday PyTorch names (tests/api_coverage/torch_names.txt).

Every listed name exists in PyTorch; every name torchlean lacks is listed in
tests/api_coverage/known_missing.txt, and every name listed there is really missing, so the
coverage can only go up and the list of gaps stays honest. After adding names, run
``python -m tests.api_coverage --update`` and review the diff of known_missing.txt.
"""

from __future__ import annotations

import collections

import pytest

from api_coverage import KNOWN_MISSING_FILE, NAMES_FILE, coverage, figure, read_names, resolve

MIN_NAMES = 500


def test_name_list_is_large_and_unique():
    names = read_names(NAMES_FILE)
    duplicates = [n for n, k in collections.Counter(names).items() if k > 1]
    assert not duplicates, f"torch_names.txt lists these twice: {duplicates}"
    assert len(names) >= MIN_NAMES, f"torch_names.txt has {len(names)} names, want at least {MIN_NAMES}"


def test_every_name_exists_in_pytorch():
    pytest.importorskip("torch")
    absent = {name: resolve(name, "torch")[1] for name in read_names(NAMES_FILE) if not resolve(name, "torch")[0]}
    assert not absent, f"not PyTorch names (torch_names.txt must list real ones): {absent}"


def test_missing_names_are_exactly_the_known_missing_list():
    present, missing = coverage("torchlean")
    print(figure(present, missing))
    known = read_names(KNOWN_MISSING_FILE)
    names = set(read_names(NAMES_FILE))
    stale = [n for n in known if n not in names]
    assert not stale, f"known_missing.txt lists names that torch_names.txt does not: {stale}"
    newly_missing = [n for n in missing if n not in set(known)]
    now_present = [n for n in known if n not in set(missing)]
    assert not newly_missing, (
        f"torchlean lost (or never had) these names, and known_missing.txt does not list them: {newly_missing}")
    assert not now_present, (
        f"these names now exist in torchlean: delete them from known_missing.txt "
        f"(python -m tests.api_coverage --update): {now_present}")


def test_every_missing_name_raises_a_clear_error():
    """Issue 22: a name we lack says so (a TorchLeanError naming it), and hasattr stays False."""
    import importlib

    import torchlean
    from torchlean.errors import NotSupportedError

    for name in read_names(KNOWN_MISSING_FILE):
        path, attr = name.rsplit(".", 1)
        module = importlib.import_module(path.replace("torch", "torchlean", 1))
        with pytest.raises(NotSupportedError, match="not supported") as err:
            getattr(module, attr)
        assert attr in str(err.value)
        assert not hasattr(module, attr)
    with pytest.raises(AttributeError) as plain:
        torchlean.no_such_name  # noqa: B018
    assert not isinstance(plain.value, NotSupportedError)


def test_resolver_tells_present_from_missing():
    # The checker itself must be able to fail: a made-up name is missing, a real one present.
    assert resolve("torch.tensor", "torchlean") == (True, "")
    assert resolve("Tensor.sum", "torchlean") == (True, "")
    found, why = resolve("torch.nn.NoSuchLayer", "torchlean")
    assert not found and "NoSuchLayer" in why
    assert not resolve("torch.no_such_function", "torchlean")[0]
    assert not resolve("Tensor.no_such_method", "torchlean")[0]
    assert not resolve("Module.no_such_method", "torchlean")[0]
    with pytest.raises(ValueError, match="torch., Tensor. or Module."):
        resolve("numpy.zeros", "torchlean")
