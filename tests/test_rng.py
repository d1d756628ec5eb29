"""Counter-based random numbers: the SplitMix64 formula of DESIGN.md, generators, distributions.

The expected values are computed here from the published algorithm with plain Python integers
(our own SplitMix64, anchored to the reference outputs), never from torchlean's spec.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st

import torchlean
import torchlean.nn.functional
from torchlean.kernels.cpu import rng as cpu_rng
from torchlean.errors import ArgumentError, ShapeError
from torchlean.runtime import Generator, derive_key, manual_seed, splitmix64
from torchlean.runtime import primitives as P
from torchlean.runtime import rng as runtime_rng

F32 = np.float32
MASK64 = 2**64 - 1
GAMMA = 0x9E3779B97F4A7C15
KEY = 0x0123456789ABCDEF


def sm64(x: int) -> int:
    """SplitMix64's output function applied to x + gamma (Steele, Lea, Flood 2014; Vigna's splitmix64.c)."""
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def to_f32(x: float) -> float:
    """Round a Python float to the nearest float32 (C's cast, round-half-even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def uniform_formula(n: int, key: int, start: int = 0) -> np.ndarray:
    """rand_uniform[i] = float32(low32(splitmix64(key + i)) / 2**32) for i in [start, start + n)."""
    return np.array([to_f32((sm64((key + i) & MASK64) & 0xFFFFFFFF) / 2**32) for i in range(start, start + n)], F32)


def box_muller_formula(n: int, key: int, start_pair: int = 0) -> np.ndarray:
    """float64 Box-Muller with libm: pair j uses w = splitmix64(key + j)."""
    out = []
    for j in range(start_pair, start_pair + (n + 1) // 2):
        w = sm64((key + j) & MASK64)
        u1 = ((w >> 32) + 1) / 2**32
        u2 = (w & 0xFFFFFFFF) / 2**32
        r = math.sqrt(-2.0 * math.log(u1))
        out += [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)]
    return np.array(out[:n])


def ulp_f32(r: np.ndarray) -> np.ndarray:
    """Spacing of the float32 grid at |r| (normal range; 2**-149 below it)."""
    _, e = np.frexp(np.abs(r))  # |r| = m 2**e, m in [0.5, 1)
    return np.where(np.abs(r) >= 2.0**-126, np.ldexp(1.0, e - 24), 2.0**-149)


def bits(a) -> np.ndarray:
    return np.asarray(a, F32).view(np.uint32)


@pytest.fixture
def restore_default_generator():
    state = runtime_rng.get_rng_state()
    yield
    runtime_rng.set_rng_state(state)


# -- SplitMix64 and keys --------------------------------------------------------------------------
def test_own_splitmix64_matches_published_reference_outputs():
    # splitmix64.c seeded with s outputs mix(s + k gamma) for k = 1, 2, ...: sm64(s + (k-1) gamma)
    seq = [sm64((1234567 + k * GAMMA) & MASK64) for k in range(5)]
    assert seq == [6457827717110365317, 3203168211198807973, 9817491932198370423,
                   4593380528125082431, 16408922859458223821]
    assert sm64(0) == 0xE220A8397B1DCDAF and sm64(GAMMA) == 0x6E789E6AA1B965F4


@given(x=st.integers(0, MASK64), c=st.integers(0, MASK64))
def test_splitmix64_and_derive_key(x, c):
    assert splitmix64(x) == sm64(x)
    assert derive_key(x, c) == sm64((x + c) & MASK64)


# -- rand_uniform / bernoulli_mask -------------------------------------------------------------
def test_first_64_uniforms_for_reference_key(device):
    out = P.rand_uniform(64, KEY, device).to_numpy()
    expected = uniform_formula(64, KEY)
    assert out.dtype == F32 and out.shape == (64,)
    assert np.array_equal(bits(out), bits(expected)), np.flatnonzero(out != expected)
    assert ((0 <= out) & (out <= 1)).all() and len(set(out.tolist())) == 64


@given(n=st.integers(0, 300), key=st.integers(0, MASK64))
def test_uniforms_follow_the_formula_for_any_key(n, key):
    assert np.array_equal(bits(P.rand_uniform(n, key).to_numpy()), bits(uniform_formula(n, key)))


def test_uniform_key_wraps_modulo_2_64():
    key = MASK64 - 3  # elements 4.. use key + i mod 2**64
    assert np.array_equal(bits(P.rand_uniform(10, key).to_numpy()), bits(uniform_formula(10, key)))
    assert np.array_equal(bits(P.rand_uniform(10, key).to_numpy()[4:]), bits(P.rand_uniform(6, 0).to_numpy()))


def test_element_index_is_the_position(device):
    """u[i] depends only on key + i: prefixes agree and shifting the key shifts the stream."""
    long = P.rand_uniform(1000, 77, device).to_numpy()
    assert np.array_equal(bits(P.rand_uniform(10, 77, device).to_numpy()), bits(long[:10]))
    assert np.array_equal(bits(P.rand_uniform(995, 82, device).to_numpy()), bits(long[5:]))
    normal = P.rand_normal(1000, 77, device).to_numpy()
    assert np.array_equal(bits(P.rand_normal(996, 79, device).to_numpy()), bits(normal[4:]))


def test_uniform_and_normal_across_cpu_chunk_boundary():
    n_pairs = cpu_rng._CHUNK + 2  # the CPU backend generates in chunks of _CHUNK elements/pairs
    u = P.rand_uniform(cpu_rng._CHUNK + 3, KEY).to_numpy()
    assert np.array_equal(bits(u[-6:]), bits(uniform_formula(6, KEY, start=cpu_rng._CHUNK - 3)))
    z = P.rand_normal(2 * n_pairs, KEY).to_numpy()
    seam = z[2 * cpu_rng._CHUNK - 4:]
    ref = box_muller_formula(8, KEY, start_pair=cpu_rng._CHUNK - 2)
    assert (np.abs(seam - ref) <= ulp_f32(ref)).all()
    assert np.array_equal(bits(seam), bits(P.rand_normal(8, KEY + cpu_rng._CHUNK - 2).to_numpy()))


def test_bernoulli_mask_is_float32_keep_prob_greater_than_u(device):
    n = 100_000
    u = P.rand_uniform(n, KEY, device).to_numpy()
    mask = P.bernoulli_mask(n, 0.35, KEY, device).to_numpy()
    assert np.array_equal(mask, (F32(0.35) > u).astype(F32))
    first = uniform_formula(64, KEY)
    assert np.array_equal(mask[:64], np.array([1.0 if F32(0.35) > v else 0.0 for v in first], F32))
    assert set(np.unique(mask).tolist()) <= {0.0, 1.0}
    assert abs(mask.mean() - 0.35) < 0.01


def test_bernoulli_keep_prob_is_rounded_to_float32():
    # 0.1 + 0.2 (float64) and float32(0.1 + 0.2) must give the same mask
    a = P.bernoulli_mask(5000, 0.1 + 0.2, 5).to_numpy()
    b = P.bernoulli_mask(5000, float(F32(0.1 + 0.2)), 5).to_numpy()
    assert np.array_equal(a, b)
    u = P.rand_uniform(5000, 5).to_numpy()
    assert np.array_equal(a, (F32(0.1 + 0.2) > u).astype(F32))


# element 0 of this key draws u = 1.0f (low32 of its SplitMix64 value rounds up to 2**32)
KEY_U_ONE = 0x25114ED53327345A


def test_bernoulli_extreme_probabilities(device):
    """Keep probability 1 keeps every element, also where a draw rounds to 1.0f; 0 keeps none."""
    assert P.rand_uniform(4, KEY_U_ONE, device).to_numpy()[0] == 1.0
    assert uniform_formula(1, KEY_U_ONE)[0] == 1.0
    for key in (3, KEY_U_ONE):
        assert not P.bernoulli_mask(1000, 0.0, key, device).to_numpy().any()
        assert not P.bernoulli_mask(1000, -1.0, key, device).to_numpy().any()
        assert P.bernoulli_mask(1000, 1.0, key, device).to_numpy().all()
        assert P.bernoulli_mask(1000, 1 - 1e-9, key, device).to_numpy().all()  # float32(keep) = 1
        assert P.bernoulli_mask(1000, 2.0, key, device).to_numpy().all()
    # just below 1 the seed's formula stands: the 1.0f draw is dropped
    below = float(np.nextafter(F32(1), F32(0)))
    mask = P.bernoulli_mask(4, below, KEY_U_ONE, device).to_numpy()
    assert mask[0] == 0.0 and mask[1:].all()


def test_dropout_p0_is_the_identity_bit_for_bit(device):
    x = np.array([1.5, -0.0, np.nan, np.inf, -np.inf, 1e-45, -3.25], F32)
    t = torchlean.tensor(x, device=device)
    key_before = runtime_rng.default_generator.get_state()
    y = torchlean.nn.functional.dropout(t, p=0.0, training=True)
    assert np.array_equal(y.numpy().view(np.uint32), x.view(np.uint32))
    assert runtime_rng.default_generator.get_state() == key_before  # no draw was spent


# -- generators ---------------------------------------------------------------------------------
def test_generator_keys_and_counter():
    g = Generator(5)
    assert g.get_state() == (5, 0)
    keys = [g.next_key() for _ in range(4)]
    assert keys == [sm64(5 + i) for i in range(4)]
    assert g.counter == 4 and g.get_state() == (5, 4)
    assert len(set(keys)) == 4


def test_same_seed_same_draws():
    a, b = Generator(2024), Generator(2024)
    for _ in range(3):
        ka, kb = a.next_key(), b.next_key()
        assert ka == kb
        assert np.array_equal(bits(P.rand_normal(33, ka).to_numpy()), bits(P.rand_normal(33, kb).to_numpy()))
    assert Generator(2025).next_key() != Generator(2024).next_key()


def test_manual_seed_resets_default_generator(restore_default_generator):
    g = manual_seed(42)
    assert g is runtime_rng.default_generator
    first = g.next_key()
    g.next_key()
    assert g.counter == 2
    assert manual_seed(42).get_state() == (42, 0)
    assert runtime_rng.default_generator.next_key() == first == sm64(42)
    g2 = Generator(1).manual_seed(42)
    assert g2.get_state() == (42, 0) and g2.next_key() == first


def test_state_round_trip(restore_default_generator):
    g = Generator(9)
    for _ in range(3):
        g.next_key()
    state = g.get_state()
    ahead = [g.next_key() for _ in range(5)]
    g.set_state(state)
    assert [g.next_key() for _ in range(5)] == ahead
    other = Generator(0)
    other.set_state(state)
    assert [other.next_key() for _ in range(5)] == ahead
    manual_seed(3)
    runtime_rng.default_generator.next_key()
    saved = runtime_rng.get_rng_state()
    k = runtime_rng.default_generator.next_key()
    runtime_rng.set_rng_state(saved)
    assert runtime_rng.default_generator.next_key() == k


def test_counter_wraps_modulo_2_64():
    g = Generator(1)
    g.set_state((1, MASK64))
    assert g.next_key() == sm64(0)
    assert g.counter == 0


@pytest.mark.parametrize("seed", [-1, 2**64, 1.0, True, "1", None])
def test_generator_rejects_bad_seed(seed):
    with pytest.raises(ArgumentError, match="seed"):
        Generator(seed)
    g = Generator(4)
    with pytest.raises(ArgumentError, match="seed"):
        g.manual_seed(seed)
    assert g.get_state() == (4, 0)


def test_set_state_with_bad_counter_leaves_state_unchanged():
    g = Generator(3)
    g.next_key()
    with pytest.raises(ArgumentError, match="counter"):
        g.set_state((5, -1))
    assert g.get_state() == (3, 1), "a rejected set_state must not change the generator"


@pytest.mark.parametrize("state", [(5,), (1, 2, 3), None, 7])
def test_set_state_with_malformed_state_raises_argument_error(state):
    g = Generator(3)
    with pytest.raises(ArgumentError):
        g.set_state(state)
    assert g.get_state() == (3, 0)


# -- rand_normal --------------------------------------------------------------------------------
def test_normal_distribution_statistics():
    n = 1_000_000
    z = P.rand_normal(n, KEY).to_numpy().astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.std() - 1.0) < 0.005
    assert scipy.stats.kstest(z, "norm").pvalue > 1e-3
    # the two halves of each Box-Muller pair are independent
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 0.005


def test_normal_within_one_ulp_of_libm_box_muller(device):
    n = 10_000
    out = P.rand_normal(n, KEY, device).to_numpy().astype(np.float64)
    ref = box_muller_formula(n, KEY)
    err = np.abs(out - ref)
    assert (err <= ulp_f32(ref)).all(), f"worst {np.max(err / ulp_f32(ref)):.3f} ulp at {int(np.argmax(err / ulp_f32(ref)))}"


@pytest.mark.parametrize("n", [0, 1, 7, 1001])
def test_normal_odd_lengths_are_prefixes(n, device):
    z = P.rand_normal(n, KEY, device).to_numpy()
    even = P.rand_normal(n + (n & 1) + 2, KEY, device).to_numpy()
    assert z.shape == (n,)
    assert np.array_equal(bits(z), bits(even[:n]))


def _u1_grid() -> np.ndarray:
    h = np.concatenate([np.random.default_rng(0).integers(0, 2**32, 200_000),
                        [0, 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1,
                         int(math.sqrt(0.5) * 2**32) - 1, int(math.sqrt(0.5) * 2**32), int(math.sqrt(0.5) * 2**32) + 1]])
    return (h.astype(np.float64) + 1.0) * 2.0**-32  # (0, 1]


def _u2_grid() -> np.ndarray:
    l = np.concatenate([np.random.default_rng(1).integers(0, 2**32, 200_000),
                        [k * 2**29 + d for k in range(8) for d in (-1, 0, 1) if 0 <= k * 2**29 + d < 2**32],
                        [2**32 - 1]])
    return l.astype(np.float64) * 2.0**-32  # [0, 1)


def test_cpu_log_unit_matches_libm():
    u = _u1_grid()
    np.testing.assert_allclose(cpu_rng.log_unit(u), np.log(u), rtol=1e-15, atol=1e-15)
    assert cpu_rng.log_unit(np.array([1.0]))[0] == 0.0


def test_cpu_cos_sin_2pi_match_libm():
    u = _u2_grid()
    cos, sin = cpu_rng.cos_sin_2pi(u)
    np.testing.assert_allclose(cos, np.cos(2 * np.pi * u), rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(sin, np.sin(2 * np.pi * u), rtol=1e-15, atol=1e-15)
    quarter = np.array([0.0, 0.25, 0.5, 0.75])
    c, s = cpu_rng.cos_sin_2pi(quarter)
    assert c.tolist() == [1.0, 0.0, -1.0, 0.0] and s.tolist() == [0.0, 1.0, 0.0, -1.0]


# -- CUDA: the same bits as the CPU -------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("key", [KEY, MASK64 - 4_000_000])
@pytest.mark.parametrize("prim", ["rand_uniform", "bernoulli_mask", "rand_normal"])
def test_cuda_random_numbers_bitwise_equal_cpu(cuda_device, prim, key):
    n = 10_000_000
    args = (n, 0.35, key) if prim == "bernoulli_mask" else (n, key)
    gpu = getattr(P, prim)(*args, cuda_device).to_numpy()
    cpu = getattr(P, prim)(*args, "cpu").to_numpy()
    mismatch = np.flatnonzero(bits(gpu) != bits(cpu))
    assert mismatch.size == 0, f"{prim}: {mismatch.size} of {n} differ, first at {mismatch[:5]}"


# -- errors -------------------------------------------------------------------------------------
RNG_CALLS = {
    "rand_uniform": lambda n, key: P.rand_uniform(n, key),
    "bernoulli_mask": lambda n, key: P.bernoulli_mask(n, 0.5, key),
    "rand_normal": lambda n, key: P.rand_normal(n, key),
}


@pytest.mark.parametrize("prim", list(RNG_CALLS))
@pytest.mark.parametrize("key", [-1, 2**64, 2**70, 1.0, "7", True, None])
def test_bad_key_is_argument_error(prim, key):
    with pytest.raises(ArgumentError, match=f"{prim}.*key"):
        RNG_CALLS[prim](4, key)


@pytest.mark.parametrize("prim", list(RNG_CALLS))
@pytest.mark.parametrize("n", [2**32, 2**40, -1])
def test_bad_length_is_shape_error(prim, n):
    with pytest.raises(ShapeError, match=f"{prim}.*argument n"):
        RNG_CALLS[prim](n, 1)


@pytest.mark.parametrize("prim", list(RNG_CALLS))
def test_numpy_integer_keys_are_accepted(prim):
    a = RNG_CALLS[prim](16, np.uint64(MASK64)).to_numpy()
    b = RNG_CALLS[prim](16, MASK64).to_numpy()
    assert np.array_equal(bits(a), bits(b))
