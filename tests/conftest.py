"""Shared test configuration: the per-backend ``device`` fixture and the Hypothesis profiles.

A test that takes ``device`` is written once and runs on every backend (CuPy's style). The
"cuda" run carries the ``cuda`` marker, so ``pytest -m "not cuda"`` leaves it out, and where no
usable GPU is present it is skipped with the reason torchlean gives, never silently.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from torchlean.runtime import cuda_unavailable_reason

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "thorough", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def _private_data_cache(tmp_path_factory):
    """No test reads or fills the user's data cache (torchlean/data_cache.py): one temporary folder
    per session, inherited by the subprocesses tests start."""
    old = os.environ.get("TORCHLEAN_DATA_CACHE")
    os.environ["TORCHLEAN_DATA_CACHE"] = str(tmp_path_factory.mktemp("torchlean-data-cache"))
    yield
    if old is None:
        os.environ.pop("TORCHLEAN_DATA_CACHE", None)
    else:
        os.environ["TORCHLEAN_DATA_CACHE"] = old


@pytest.fixture(scope="session", autouse=True)
def _no_compile_helpers():
    """`torchlean train` from a test starts no helper processes (kernels/cpu/warm.py): they would
    go on compiling beside later tests; tests/test_cpu_warm.py starts its own."""
    old = os.environ.get("TORCHLEAN_PRECOMPILE")
    os.environ["TORCHLEAN_PRECOMPILE"] = "off"
    yield
    if old is None:
        os.environ.pop("TORCHLEAN_PRECOMPILE", None)
    else:
        os.environ["TORCHLEAN_PRECOMPILE"] = old


def skip_unless_cuda() -> None:
    """Skip the calling test, with torchlean's reason, where CUDA cannot be used."""
    reason = cuda_unavailable_reason()
    if reason is not None:
        pytest.skip(f"CUDA unavailable: {reason}")


# Session scope: a device is just a name, and a function-scoped fixture would trip Hypothesis's
# function_scoped_fixture health check in the @given tests that take it. A skip raised here is
# cached by pytest and reported, with its reason, for every cuda test.
@pytest.fixture(scope="session", params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request) -> str:
    if request.param == "cuda":
        skip_unless_cuda()
    return request.param


@pytest.fixture(scope="session")
def cuda_device() -> str:
    """For tests that only make sense on a GPU (they also carry ``pytest.mark.cuda``)."""
    skip_unless_cuda()
    return "cuda"


@pytest.fixture(autouse=True)
def _audit_cuda_ownership(request):
    """On CUDA tests: every array the free list takes back must be referenced by nothing else
    (tests/ownership_audit.py); a test that makes it take a held one fails."""
    if request.node.get_closest_marker("cuda") is None or cuda_unavailable_reason() is not None:
        yield
        return
    import ownership_audit as audit  # (tests/ is on sys.path: conftest.py lives there)

    audit.install()
    start = len(audit.violations)
    yield
    found = audit.violations[start:]
    assert not found, found[0]


@pytest.fixture(params=[1, 2])
def numba_threads(request):
    """The CPU kernels' thread count for the test: 1, then 2 (the caller's count put back). Fails,
    rather than skips, where the pool cannot run 2 threads: a bits-on-2-threads test would then
    prove nothing."""
    from torchlean.kernels.cpu import parallel

    if request.param > parallel.max_threads():
        pytest.fail("these tests need 2 Numba threads (NUMBA_NUM_THREADS >= 2, not the workqueue layer)")
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(request.param)
    yield request.param
    numba.set_num_threads(before)
