"""The random-access permutation: bijection for every n, quality, golden outputs, bad input; and
``permute_many``, the same network with a size and a key per element."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.keys import derive_key
from dataorder.core.permutation import MAX_DOMAIN, Permutation, mix64, permute_many


def _is_bijection(p: Permutation) -> bool:
    values = p(np.arange(p.n))
    seen = np.zeros(p.n, dtype=bool)
    seen[values] = True
    return bool(seen.all()) and values.min() == 0 and values.max() == p.n - 1


def test_bijection_for_every_n_up_to_5000() -> None:
    for n in range(1, 5001):
        p = Permutation(n, key=n * 0x9E3779B1)
        assert _is_bijection(p), n


@pytest.mark.parametrize("k", range(1, 23))
def test_bijection_around_powers_of_two(k: int) -> None:
    for n in (2**k - 1, 2**k, 2**k + 1):
        if n >= 1:
            assert _is_bijection(Permutation(n, key=k)), n


def test_grain_edge_case_is_a_bijection() -> None:
    # grain's float log2 width loses the top index at 2**16 + 1; ours keeps it.
    p = Permutation(2**16 + 1, key=0)
    assert 2**16 in set(p(np.arange(2**16 + 1)).tolist())


def test_inverse_and_scalar_paths_agree() -> None:
    for n in (1, 2, 3, 7, 64, 65, 1000, 4097):
        p = Permutation(n, key=123 + n)
        v = p(np.arange(n))
        assert [p.index(i) for i in range(n)] == v.tolist()
        assert np.array_equal(p.inverse(v), np.arange(n))
        assert [p.position(int(x)) for x in v] == list(range(n))


@given(n=st.integers(1, 10**12), key=st.integers(0, 2**64 - 1), data=st.data())
def test_random_access_round_trip(n: int, key: int, data: st.DataObject) -> None:
    p = Permutation(n, key)
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20))
    values = p(np.array(positions, dtype=np.int64))
    assert values.min() >= 0
    assert values.max() < n
    assert p.inverse(values).tolist() == positions
    assert [p.index(x) for x in positions] == values.tolist()
    if len(set(positions)) == len(positions):
        assert len(set(values.tolist())) == len(positions)


def test_shape_and_dtype_follow_the_input() -> None:
    p = Permutation(100, key=5)
    out = p(np.arange(12).reshape(3, 4))
    assert out.shape == (3, 4)
    assert out.dtype == np.int64
    assert p(range(3)).tolist() == [p.index(i) for i in range(3)]
    assert p(np.array([], dtype=np.int64)).shape == (0,)


def test_shuffle_quality_at_one_million() -> None:
    n = 10**6
    x = np.arange(n)
    v = Permutation(n, key=derive_key(0, epoch=0, stream="test", purpose="quality"))(x)
    assert abs(np.corrcoef(x, v)[0, 1]) < 0.01
    assert abs(np.mean(np.abs(np.diff(v))) / n - 1 / 3) < 0.01
    # fixed points of a random permutation are ~Poisson(1)
    assert int(np.sum(v == x)) < 12


def test_different_keys_give_unrelated_permutations() -> None:
    n = 100_000
    x = np.arange(n)
    a = Permutation(n, key=1)(x)
    for key in (2, 3, 2**63, 2**64 - 1):
        b = Permutation(n, key=key)(x)
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.02
        assert int(np.sum(a == b)) < 12


def test_neighbouring_epochs_are_unrelated() -> None:
    n = 50_000
    keys = [derive_key(7, epoch=e, stream="s", purpose="p") for e in range(4)]
    orders = [Permutation(n, k)(np.arange(n)) for k in keys]
    for i in range(3):
        assert abs(np.corrcoef(orders[i], orders[i + 1])[0, 1]) < 0.03


# Golden outputs: changing the construction changes every order; bump PERMUTATION_VERSION then.
GOLDEN = [
    (10, 0, [7, 5, 1, 8, 6, 3, 4, 0, 9, 2]),
    (10, 42, [2, 7, 4, 0, 8, 3, 6, 9, 5, 1]),
    (1000, 2**64 - 1, [313, 516, 806, 280, 106, 72, 973, 287, 474, 720, 513, 216]),
    (65537, 7, [19561, 8099, 27428, 57242, 48469, 64634, 36719, 22264, 26272, 27088, 55526, 49522]),
]


@pytest.mark.parametrize(("n", "key", "expected"), GOLDEN)
def test_golden_outputs(n: int, key: int, expected: list[int]) -> None:
    assert Permutation(n, key)(range(len(expected))).tolist() == expected


def test_golden_billion() -> None:
    p = Permutation(10**9, derive_key(0, epoch=0, stream="g", purpose="golden"))
    assert p(range(8)).tolist() == [
        145328467,
        322471948,
        197617305,
        7673514,
        146307869,
        500429217,
        224795238,
        280905523,
    ]


def test_n_one() -> None:
    p = Permutation(1, key=9)
    assert p.index(0) == 0
    assert p(np.zeros(3, dtype=np.int64)).tolist() == [0, 0, 0]


MAX_N = r"\[1, 4611686018427387904\]"  # [1, 2**62]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n": 0, "key": 1}, ValueError, rf"n must be an int in {MAX_N}; got n=0"),
        ({"n": True, "key": 1}, TypeError, rf"n must be an int in {MAX_N}; got n=True"),
        ({"n": 5.0, "key": 1}, TypeError, rf"n must be an int in {MAX_N}; got n=5.0"),
        ({"n": 5, "key": -1}, ValueError, r"key must be an int in \[0, 18446744073709551615\]"),
        ({"n": 5, "key": 2**64}, ValueError, r"got key=18446744073709551616"),
    ],
)
def test_bad_construction(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        Permutation(**kwargs)  # type: ignore[arg-type]


def test_bad_positions() -> None:
    p = Permutation(10, key=1)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 9\]; got min=0, max=10"):
        p(np.array([0, 10]))
    with pytest.raises(ValueError, match=r"got min=-1"):
        p(np.array([-1]))
    with pytest.raises(TypeError, match="positions must be integers"):
        p(np.array([0.5]))
    with pytest.raises(ValueError, match=r"position must be an int in \[0, 9\]; got position=10"):
        p.index(10)


@pytest.mark.parametrize("size", [1, 16, 17, 63, 64, 65, 200])
def test_small_and_large_batches_agree(size: int) -> None:
    # small batches take the pure-Python path and stragglers finish one by one: same function
    p = Permutation(141_193, key=3)
    everything = p(np.arange(p.n))
    positions = np.random.default_rng(size).integers(0, p.n, size)
    assert p(positions).tolist() == everything[positions].tolist()
    assert p.inverse(everything[positions]).tolist() == positions.tolist()


# -- permute_many: Permutation(sizes[i], keys[i])(positions[i]), vectorised ---------------------


def _one_by_one(sizes: list[int], keys: list[int], positions: list[int]) -> list[int]:
    return [Permutation(n, k).index(p) for n, k, p in zip(sizes, keys, positions, strict=True)]


_size = st.one_of(
    st.integers(1, 300),
    st.integers(1, MAX_DOMAIN),
    st.sampled_from([2**k + d for k in range(1, 63) for d in (-1, 0, 1) if 2**k + d <= MAX_DOMAIN]),
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    sizes=st.lists(_size, min_size=1, max_size=40),
)
def test_permute_many_is_the_permutation_element_by_element(
    data: st.DataObject, sizes: list[int]
) -> None:
    keys = data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=len(sizes), max_size=len(sizes)))
    positions = [data.draw(st.integers(0, n - 1)) for n in sizes]
    expected = _one_by_one(sizes, keys, positions)
    assert permute_many(sizes, keys, positions).tolist() == expected  # Python ints, keys > 2**63
    arrays = (np.array(sizes), np.array(keys, dtype=np.uint64), np.array(positions))
    assert permute_many(*arrays).tolist() == expected


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.integers(17, 3000), kind=st.integers(0, 3))
def test_permute_many_agrees_on_big_batches(seed: int, m: int, kind: int) -> None:
    """Big batches take the vectorised walk (more than the stragglers left): one word width with
    no gathers, one width among domains of one, two widths, many widths; keys in runs too."""
    rng = np.random.default_rng(seed)
    choices = [[1000], [1000, 1], [1000, 3000], [1, 2, 3, 1000, 3000, 2**40 + 7, 2**62]][kind]
    sizes = rng.choice(np.array(choices, dtype=np.int64), m)
    keys = rng.integers(0, 2**64 - 1, size=m, dtype=np.uint64, endpoint=True)
    if seed % 2:  # runs of equal neighbouring keys, as a global batch's slots have
        keys = np.repeat(keys[: m // 8 + 1], 8)[:m]
    positions = (rng.random(m) * sizes).astype(np.int64)
    got = permute_many(sizes, keys, positions)
    assert got.tolist() == _one_by_one(sizes.tolist(), keys.tolist(), positions.tolist())


@pytest.mark.parametrize(("n", "key"), [(1000, 12345), (4097, 2**64 - 1), (65537, 7), (10, 0)])
def test_permute_many_over_a_whole_domain_is_the_permutation(n: int, key: int) -> None:
    whole = permute_many(n, key, np.arange(n))  # one key broadcast: one run of round keys
    assert whole.tolist() == Permutation(n, key)(np.arange(n)).tolist()
    assert sorted(whole.tolist()) == list(range(n))


def test_permute_many_shapes() -> None:
    assert permute_many([1, 1], [5, 6], [0, 0]).tolist() == [0, 0]
    out = permute_many(7, 3, np.arange(6).reshape(2, 3))
    assert out.shape == (2, 3)
    assert out.dtype == np.int64
    assert out.ravel().tolist() == Permutation(7, 3)(range(6)).tolist()
    assert permute_many([[7], [9]], [1, 2], [[0, 5]]).tolist() == [
        [Permutation(7, 1).index(0), Permutation(7, 2).index(5)],
        [Permutation(9, 1).index(0), Permutation(9, 2).index(5)],
    ]
    assert permute_many(7, 3, np.zeros(0, dtype=np.int64)).shape == (0,)
    assert permute_many([], [], []).shape == (0,)


MAX_KEY = 2**64 - 1


@pytest.mark.parametrize(
    ("args", "exc", "message"),
    [
        (([0, 3], [1, 1], [0, 0]), ValueError, f"sizes must lie in [1, {MAX_DOMAIN}]; got min=0"),
        (
            ([MAX_DOMAIN + 1], [1], [0]),
            ValueError,
            f"sizes must lie in [1, {MAX_DOMAIN}]; got min={MAX_DOMAIN + 1}",
        ),
        (([5], [-1], [0]), ValueError, f"keys must lie in [0, {MAX_KEY}]; got min=-1, max=-1"),
        (([5], [2**64], [0]), ValueError, f"keys must lie in [0, {MAX_KEY}]; got min={2**64}"),
        (
            ([5, 5], [1, 2], [0, -1]),
            ValueError,
            f"positions must lie in [0, {MAX_DOMAIN - 1}]; got min=-1, max=0",
        ),
        (
            ([5, 3], [1, 2], [4, 3]),
            ValueError,
            "positions must lie in [0, sizes) element by element; got positions[1]=3 with "
            "sizes[1]=3 (flat index)",
        ),
        (([5], [1], [0.5]), TypeError, "positions must be integers; got dtype float64"),
        (([True], [1], [0]), TypeError, "sizes must be integers; got dtype bool"),
        ((np.array([5.0]), [1], [0]), TypeError, "sizes must be integers; got dtype float64"),
        (([5], ["a"], [0]), TypeError, "keys must be integers; got dtype <U1"),
        (
            ([5, 5], [1, 2, 3], [0, 0]),
            ValueError,
            "sizes, keys and positions must broadcast together; got shapes (2,), (3,), (2,)",
        ),
    ],
)
def test_permute_many_errors_name_the_argument(
    args: tuple[object, object, object], exc: type[Exception], message: str
) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        permute_many(*args)  # type: ignore[arg-type]


def test_mix64_is_splitmix64_on_ints_and_arrays() -> None:
    # SplitMix64 seeded with 0: its first output is mix64(0 + golden ratio)
    assert mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    assert mix64(2**64 + 5) == mix64(5)  # taken mod 2**64
    xs = np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64)
    before = xs.copy()
    assert mix64(xs).tolist() == [mix64(int(x)) for x in xs.tolist()]
    assert xs.tolist() == before.tolist()  # a new array: the argument is left alone
