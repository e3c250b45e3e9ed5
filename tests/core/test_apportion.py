"""The apportionment core: exactness against a Fraction reference of the same tree, sums,
monotonicity, the deviation bound, purity in the key, quantisation and validation."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataorder.core.apportion import (
    MAX_POSITION,
    MAX_TOTAL,
    Apportionment,
    _split_floor,
    quantize_weights,
)

SETTINGS = settings(max_examples=60, deadline=None, database=None)

# -- strategies ------------------------------------------------------------------------------

# Weights spread over many scales, zeros included, at least one positive, sum <= 2**40.
_weight = st.one_of(
    st.integers(0, 3),
    st.integers(1, 2**12),
    st.integers(1, 2**30),
    st.integers(2**34, 2**36),
)
weight_lists = st.lists(_weight, min_size=1, max_size=12).filter(
    lambda ws: any(ws) and sum(ws) <= MAX_TOTAL
)
keys = st.integers(0, 2**64 - 1)
positions = st.one_of(st.integers(0, 5000), st.integers(0, MAX_POSITION))


# -- an independent reference of the same tree -----------------------------------------------


def reference_counts(ap: Apportionment, t: int) -> list[int]:
    """c_j(t) by exact Fractions over the tree the object chose (its only input from ``ap``)."""
    k = len(ap.weights)
    positive = [j for j, w in enumerate(ap.weights) if w > 0]
    counts: dict[int, int] = {}
    root = ap._num_nodes - 1
    counts[root] = t
    for v, a, b, wa, h, wv in ap._scalar_nodes:  # top-down
        ca = math.floor(Fraction(counts[v] * wa + h, wv))
        counts[a] = ca
        counts[b] = counts[v] - ca
    out = [0] * k
    for leaf, j in enumerate(positive):
        out[j] = counts[leaf]
    return out


def reference_bounds(ap: Apportionment) -> list[Fraction]:
    """Exact B_j = sum over the path (root excluded) of (w_j / w_u) * ((w_p // 2) / w_p)."""
    n = len([w for w in ap.weights if w > 0])
    weight = {}
    acc = {ap._num_nodes - 1: Fraction(0)}
    for leaf, j in enumerate(j for j, w in enumerate(ap.weights) if w > 0):
        weight[leaf] = ap.weights[j]
    for v, a, b, wa, _, wv in ap._scalar_nodes:
        weight[v] = wv
        weight[a] = wa
        weight[b] = wv - wa
        d = Fraction(wv // 2, wv)
        acc[a] = acc[v] + d / weight[a]
        acc[b] = acc[v] + d / weight[b]
    out = [Fraction(0)] * len(ap.weights)
    for leaf, j in enumerate(j for j, w in enumerate(ap.weights) if w > 0):
        out[j] = weight[leaf] * acc[leaf] if n > 1 else Fraction(0)
    return out


# -- exact arithmetic ------------------------------------------------------------------------


@SETTINGS
@given(
    c=st.lists(st.integers(0, MAX_POSITION), min_size=1, max_size=20),
    b=st.integers(1, MAX_TOTAL),
    data=st.data(),
)
def test_split_floor_matches_python_ints(c: list[int], b: int, data: st.DataObject) -> None:
    a = data.draw(st.lists(st.integers(0, b), min_size=len(c), max_size=len(c)))
    h = data.draw(st.lists(st.integers(0, b - 1), min_size=len(c), max_size=len(c)))
    arrs = [np.array(x, dtype=np.int64) for x in (c, a, h)]
    bb = np.full(len(c), b, dtype=np.int64)
    q, r = _split_floor(arrs[0], arrs[1], arrs[2], bb, fast=False)
    expected = [divmod(ci * ai + hi, b) for ci, ai, hi in zip(c, a, h, strict=True)]
    assert q.tolist() == [e[0] for e in expected]
    assert r.tolist() == [e[1] for e in expected]
    if max(ci * ai + hi for ci, ai, hi in zip(c, a, h, strict=True)) < 2**63:
        qf, rf = _split_floor(arrs[0], arrs[1], arrs[2], bb, fast=True)
        assert qf.tolist() == q.tolist()
        assert rf.tolist() == r.tolist()


def test_split_floor_extremes() -> None:
    c = np.array([MAX_POSITION, MAX_POSITION - 1, 2**62 - 12345], dtype=np.int64)
    b = np.full(3, MAX_TOTAL, dtype=np.int64)
    a = b - 1
    h = b // 2
    q, r = _split_floor(c, a, h, b, fast=False)
    for i in range(3):
        assert (int(q[i]), int(r[i])) == divmod(int(c[i]) * int(a[i]) + int(h[i]), MAX_TOTAL)


# -- counts ----------------------------------------------------------------------------------


@SETTINGS
@given(weights=weight_lists, key=keys, ts=st.lists(positions, min_size=1, max_size=8))
def test_counts_match_fraction_reference(weights: list[int], key: int, ts: list[int]) -> None:
    ap = Apportionment(weights, key=key)
    vec = ap.counts_at(np.array(ts, dtype=np.int64))
    for row, t in zip(vec.tolist(), ts, strict=True):
        ref = reference_counts(ap, t)
        assert row == ref
        assert ap.counts(t).tolist() == ref
        assert sum(ref) == t


@SETTINGS
@given(weights=weight_lists, key=keys, start=positions, n=st.integers(1, 300))
def test_sum_monotone_and_one_step_per_slot(
    weights: list[int], key: int, start: int, n: int
) -> None:
    ap = Apportionment(weights, key=key)
    start = min(start, MAX_POSITION - n)
    ts = np.arange(start, start + n + 1, dtype=np.int64)
    c = ap.counts_at(ts)
    assert (c.sum(axis=1) == ts).all()
    steps = np.diff(c, axis=0)
    assert (steps >= 0).all()  # monotone: quotas never negative
    assert (steps.sum(axis=1) == 1).all()  # each slot goes to exactly one party
    zero = np.array(weights) == 0
    assert (c[:, zero] == 0).all()  # zero-weight parties never get a slot


@SETTINGS
@given(weights=weight_lists, key=keys, start=positions, n=st.integers(0, 200))
def test_party_slots_agree_with_counts(weights: list[int], key: int, start: int, n: int) -> None:
    ap = Apportionment(weights, key=key)
    start = min(start, MAX_POSITION - n)
    parties, ordinals = ap.party_slots(start, start + n)
    assert parties.shape == ordinals.shape == (n,)
    if n == 0:
        return
    c = ap.counts_at(np.arange(start, start + n + 1, dtype=np.int64))
    expected_party = np.argmax(np.diff(c, axis=0), axis=1)
    assert parties.tolist() == expected_party.tolist()
    assert ordinals.tolist() == c[np.arange(n), expected_party].tolist()
    t = start + n // 2
    assert ap.party_at(t) == (int(parties[n // 2]), int(ordinals[n // 2]))
    assert ap.parties(start, start + n).tolist() == parties.tolist()


def test_vector_descent_on_both_arithmetic_paths() -> None:
    # W = 2**40: positions past ~2**23 must take the exact split; below, the one-product path.
    ap = Apportionment(quantize_weights([0.5, 0.3, 0.15, 0.05 - 1e-6, 1e-6]), key=3)
    for start in (0, 2**23 - 50, 10**9, MAX_POSITION - 100):
        parties, ordinals = ap.party_slots(start, start + 100)
        for i in (0, 37, 99):
            assert ap.party_at(start + i) == (int(parties[i]), int(ordinals[i]))
        ref = [reference_counts(ap, start + i) for i in (0, 100)]
        got = ap.counts_at(np.array([start, start + 100]))
        assert got.tolist() == ref


@SETTINGS
@given(weights=weight_lists, key=keys, ts=st.lists(positions, min_size=1, max_size=10))
def test_deviation_within_proven_bound(weights: list[int], key: int, ts: list[int]) -> None:
    ap = Apportionment(weights, key=key)
    bounds = reference_bounds(ap)
    assert max(bounds) < Fraction(7, 4)
    assert np.allclose(ap.deviation_bounds(), [float(b) for b in bounds])
    total = ap.total
    for t in ts:
        for j, c in enumerate(ap.counts(t).tolist()):
            assert abs(Fraction(c) - Fraction(weights[j] * t, total)) <= bounds[j]


def test_windows_carry_their_share() -> None:
    # Every window [a, b) gives party j its share within 2 * B_j: the bucket-schedule spread.
    rng = np.random.default_rng(5)
    m = rng.integers(1, 400, size=60).tolist()  # runs per bucket
    ap = Apportionment(m, key=11)
    total = ap.total
    c = ap.counts_at(np.arange(total + 1, dtype=np.int64))
    b = ap.deviation_bounds()
    share = np.array(m, dtype=np.float64) / total
    for width in (1, 7, 100, 1000):
        win = c[width:] - c[:-width]
        excess = np.abs(win - share * width)
        assert (excess <= 2 * b + 1e-9).all()


def test_bucket_schedule_counts_and_ordinals() -> None:
    m = [5, 0, 3, 1, 8, 8, 2]
    ap = Apportionment(m, key=2024)
    parties, ordinals = ap.party_slots(0, sum(m))
    assert np.bincount(parties, minlength=len(m)).tolist() == m
    for j in range(len(m)):
        assert ordinals[parties == j].tolist() == list(range(m[j]))


def test_tiny_weight_is_never_rounded_away() -> None:
    w = quantize_weights([0.999] + [1e-6] * 1000)
    ap = Apportionment(w)
    b = ap.deviation_bounds()
    # c_j(t) > w_j t / W - B_j, so every party has a slot once w_j t / W >= B_j.
    t = max(math.ceil(float(b[j]) * ap.total / w[j]) for j in range(1, 1001))
    assert (ap.counts(t)[1:] >= 1).all()
    assert t < 2_000_000


# -- keyed variety ---------------------------------------------------------------------------


@SETTINGS
@given(weights=weight_lists, key=keys)
def test_pure_function_of_weights_and_key(weights: list[int], key: int) -> None:
    a = Apportionment(weights, key=key)
    b = Apportionment(list(weights), key=key)
    ts = np.array([0, 1, 17, 10**6, 10**12 + 3, MAX_POSITION], dtype=np.int64)
    assert np.array_equal(a.counts_at(ts), b.counts_at(ts))
    assert np.array_equal(a.parties(10**9, 10**9 + 50), b.parties(10**9, 10**9 + 50))


def test_key_changes_who_goes_first_but_not_the_guarantees() -> None:
    weights = [1] * 10
    firsts = set()
    orders = set()
    for key in range(20):
        ap = Apportionment(weights, key=key)
        p = ap.parties(0, 10)
        assert sorted(p.tolist()) == list(range(10))  # uniform: everyone once per 10 slots
        firsts.add(int(p[0]))
        orders.add(tuple(p.tolist()))
        assert ap.deviation_bounds().max() < 1
    assert len(firsts) >= 5
    assert len(orders) >= 15


def test_golden_outputs() -> None:
    # Pins the construction: a change here changes every order (bump APPORTIONMENT_VERSION).
    ap = Apportionment([1, 2, 0, 1], key=7)
    assert ap.counts(8).tolist() == [2, 4, 0, 2]
    assert ap.parties(0, 8).tolist() == [0, 1, 3, 1, 0, 1, 3, 1]
    ap = Apportionment(quantize_weights([0.5, 0.25, 0.125, 0.125]), key=0)
    assert ap.parties(0, 8).tolist() == [0, 1, 0, 2, 0, 1, 0, 3]
    ap = Apportionment(quantize_weights([0.3, 0.7, 1e-6]), key=99)
    assert ap.counts(10**9).tolist() == [299999700, 699999300, 1000]


# -- quantisation ----------------------------------------------------------------------------

float_weights = st.lists(
    st.one_of(
        st.just(0.0),
        st.floats(1e-9, 1e3, allow_nan=False, allow_infinity=False),
        st.floats(1e-300, 1e-200),
    ),
    min_size=1,
    max_size=30,
).filter(lambda ws: sum(ws) > 0)


@SETTINGS
@given(weights=float_weights, total=st.one_of(st.just(MAX_TOTAL), st.integers(30, 10**6)))
def test_quantize_exact_sum_and_precision(weights: list[float], total: int) -> None:
    units = quantize_weights(weights, total=total)
    assert sum(units) == total
    fr = [Fraction(w) for w in weights]
    quotas = [f * total / sum(fr) for f in fr]
    raised = sum(1 for q in quotas if 0 < q < 1)
    takers = max(1, sum(1 for u in units if u >= 2))
    limit = 1 + -(-raised // takers) if raised else 1
    for u, q, w in zip(units, quotas, weights, strict=True):
        assert (u == 0) == (w == 0)
        assert abs(u - q) < limit


def test_quantize_deterministic_ties_and_raising() -> None:
    assert quantize_weights([1.0, 1.0, 1.0], total=10) == (4, 3, 3)  # tie to the lower index
    assert quantize_weights([1e-30, 1.0], total=1000) == (1, 999)
    assert quantize_weights([0.0, 2.0, 0.0], total=5) == (0, 5, 0)
    units = quantize_weights([0.001, 0.999])
    assert abs(units[0] / MAX_TOTAL - 0.001) < 2**-40


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "exc", "message"),
    [
        (
            ([],),
            ValueError,
            "weights must be a non-empty sequence with a positive entry; got weights=[]",
        ),
        (
            ([0, 0],),
            ValueError,
            "weights must be a non-empty sequence with a positive entry; got weights=[0, 0]",
        ),
        (([1, -1],), ValueError, "weights[1] must be a non-negative int; got weights[1]=-1"),
        (([1, True],), TypeError, "weights[1] must be a non-negative int; got weights[1]=True"),
        (([1, 2.0],), TypeError, "weights[1] must be a non-negative int; got weights[1]=2.0"),
        (("12",), TypeError, "weights must be a sequence of non-negative ints; got weights='12'"),
        (  # regression: numpy's "iteration over a 0-d array" named nothing
            (np.array(10),),
            TypeError,
            "weights must be a sequence of non-negative ints; got weights=array(10)",
        ),
        (
            ([2**40, 1],),
            ValueError,
            f"sum(weights) must be at most 2**40; got sum(weights)={2**40 + 1}",
        ),
        (([1, 2], -1), ValueError, "key must be an int in [0, 18446744073709551615]; got key=-1"),
        (([1, 2], 2**64), ValueError, "key must be an int in [0, 18446744073709551615]; got key="),
        (
            ([1, 2], False),
            TypeError,
            "key must be an int in [0, 18446744073709551615]; got key=False",
        ),
    ],
)
def test_constructor_validation(args: tuple, exc: type, message: str) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        Apportionment(*args)


def test_method_validation() -> None:
    ap = Apportionment([1, 2])
    with pytest.raises(
        ValueError, match=re.escape("t must be an int in [0, 4611686018427387904]; got t=-1")
    ):
        ap.counts(-1)
    with pytest.raises(
        TypeError, match=re.escape("t must be an int in [0, 4611686018427387904]; got t=1.0")
    ):
        ap.counts(1.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=re.escape("t must be an int in [0, 4611686018427387903]; got t=")
    ):
        ap.party_at(MAX_POSITION)
    with pytest.raises(TypeError, match=re.escape("ts must be integers; got dtype float64")):
        ap.counts_at([1.0, 2.0])
    with pytest.raises(ValueError, match=re.escape("ts must be 1-D; got shape (1, 2)")):
        ap.counts_at([[1, 2]])
    with pytest.raises(ValueError, match=re.escape("ts must lie in [0, 2**62]; got min=-3, max=2")):
        ap.counts_at([2, -3])
    with pytest.raises(
        ValueError, match=re.escape("stop must be an int in [5, 4611686018427387904]; got stop=4")
    ):
        ap.parties(5, 4)
    with pytest.raises(
        ValueError, match=re.escape("boundaries must be non-decreasing; got boundaries=[3, 2]")
    ):
        ap.quotas([3, 2])


@pytest.mark.parametrize(
    ("weights", "total", "exc", "message"),
    [
        (
            [0.5, float("nan")],
            MAX_TOTAL,
            ValueError,
            "weights[1] must be a finite non-negative real; got weights[1]=nan",
        ),
        (
            [float("inf")],
            MAX_TOTAL,
            ValueError,
            "weights[0] must be a finite non-negative real; got weights[0]=inf",
        ),
        (
            [0.5, -0.1],
            MAX_TOTAL,
            ValueError,
            "weights[1] must be a finite non-negative real; got weights[1]=-0.1",
        ),
        ([0.5, "a"], MAX_TOTAL, TypeError, "weights[1] must be a real number; got weights[1]='a'"),
        (
            [0.0],
            MAX_TOTAL,
            ValueError,
            "weights must be a non-empty sequence with a positive entry; got weights=[0.0]",
        ),
        ([1.0], 0, ValueError, "total must be an int in [1, 1099511627776]; got total=0"),
        (
            [1.0],
            2**40 + 1,
            ValueError,
            "total must be an int in [1, 1099511627776]; got total=1099511627777",
        ),
        (
            [1.0, 1.0, 1.0],
            2,
            ValueError,
            "total must be at least the number of positive weights (3); got total=2",
        ),
        (
            0.5,
            MAX_TOTAL,
            TypeError,
            "weights must be a sequence of non-negative reals; got weights=0.5",
        ),
        (
            np.array(0.5),
            MAX_TOTAL,
            TypeError,
            "weights must be a sequence of non-negative reals; got weights=array(0.5)",
        ),
    ],
)
def test_quantize_validation(weights: object, total: int, exc: type, message: str) -> None:
    with pytest.raises(exc, match=re.escape(message)):
        quantize_weights(weights, total=total)  # type: ignore[arg-type]


@pytest.mark.parametrize("start", [0, 2**23 - 3000, 10**12, MAX_POSITION - 5000])
def test_partition_path_equals_descent(start: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataorder.core.apportion as apportion

    ap = Apportionment(quantize_weights([0.4, 0.3, 0.2, 0.1 - 2e-6, 1e-6, 1e-6]), key=9)
    n = 5000
    assert n >= apportion._PARTITION_FACTOR * ap._num_nodes  # partition path by default
    by_partition = ap.party_slots(start, start + n)
    monkeypatch.setattr(apportion, "_PARTITION_FACTOR", 10**9)
    by_descent = ap.party_slots(start, start + n)
    assert np.array_equal(by_partition[0], by_descent[0])
    assert np.array_equal(by_partition[1], by_descent[1])
    c = ap.counts_at(np.array([start, start + n]))
    assert np.array_equal(np.bincount(by_partition[0], minlength=6), c[1] - c[0])
