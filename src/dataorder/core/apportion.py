"""Exact, monotone, random-access apportionment of positions among weighted parties.

:class:`Apportionment` answers "how many of the first ``t`` slots belong to party ``j``" as a pure
function ``c_j(t)`` of (weights, key, t), with O(K) memory and O(K) work for all K parties at one
``t``, and "which party holds slot ``t``, and which of its slots is it" in O(depth). Nothing is
replayed or simulated from 0, so resuming at any position is just evaluating at that position.

Guarantees, for integer weights ``w_j`` with total ``W`` and every ``t``:

* **Exact sums.** ``sum_j c_j(t) == t``.
* **Monotone.** ``c_j(t) <= c_j(t + 1)``: every party's quota in every window is non-negative.
* **Bounded deviation.** ``|c_j(t) - w_j * t / W| <= B_j`` for a per-party bound ``B_j`` that
  depends only on the tree (NOTE [ Deviation bound ] in :mod:`dataorder.core._apportion_tree`);
  ``B_j < 1.75`` for every weight set,
  and ``B_j`` is typically about 1. So every window ``[a, b)`` gives party ``j`` its share
  ``w_j * (b - a) / W`` within ``2 * B_j``, and a party of tiny weight gets its first slot by
  ``t = ceil(B_j * W / w_j)`` at the latest: it is never rounded away for a whole run.
* **Zero weights** get no slot, ever.

Construction: a binary tree over the parties of positive weight. The root's count at ``t`` is
``t``. An internal node ``v`` of weight ``w_v`` whose first child weighs ``w_a`` hands
``c_a = floor((c_v * w_a + h_v) / w_v)`` to its first child and ``c_v - c_a`` to its second, with
``h_v = w_v // 2`` (round to nearest). ``c_a`` rises by 0 or 1 when ``c_v`` rises by 1, so both
children are monotone in the parent, hence in ``t``, and the pair always sums to the parent.

Example:
    >>> ap = Apportionment([1, 2, 0, 1], key=7)
    >>> ap.counts(8).tolist()
    [2, 4, 0, 2]
    >>> sorted(ap.parties(0, 4).tolist())
    [0, 1, 1, 3]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, check_sequence, fail
from dataorder.core._apportion_tree import CONSTRUCTIONS, MAX_DEPTH, Tree
from dataorder.core.keys import derive_key
from dataorder.core.permutation import Permutation

__all__ = [
    "APPORTIONMENT_VERSION",
    "MAX_POSITION",
    "MAX_TOTAL",
    "Apportionment",
    "quantize_weights",
]

#: Version of the construction (tree choice, tie-breaks, keyed orientation, rounding offset).
#: Part of every fingerprint that depends on an apportionment: changing any of them changes
#: every order.
APPORTIONMENT_VERSION = 1

#: Largest total weight. Keeps every partial product of the exact split below 2**62.
MAX_TOTAL = 2**40

#: Largest position ``t``. Counts are int64 in the vector path.
MAX_POSITION = 2**62

# Halves of a weight for the exact split (NOTE [ Exact split in int64 ]).
_HALF_BITS = 20
_HALF_MASK = (1 << _HALF_BITS) - 1

# Up to this many slots, party lookups walk the tree in pure Python.
_SCALAR_CUTOFF = 16

# From this many slots per tree node on, party_slots partitions the range node by node (a few
# numpy calls per node) instead of descending every slot at once (a few per level).
_PARTITION_FACTOR = 64

_I64 = np.int64

# NOTE [ Exact split in int64 ]
# floor((c * a + h) / b) with c < 2**62 and a < b <= 2**40, h < b, overflows int64 if done
# naively (c * a can reach 2**102). Write c = q * b + s (0 <= s < b) and a = a1 * 2**20 + a0:
#     c * a + h = q*a*b + (s*a1) * 2**20 + s*a0 + h,
#     s*a1 = q1 * b + r1,
#     r1 * 2**20 + s*a0 + h = q2 * b + r2,
# so floor((c * a + h) / b) = q*a + q1 * 2**20 + q2 and the remainder is r2. Every intermediate
# stays below 2**62: s*a1, s*a0 < 2**60, r1 * 2**20 < 2**60, h < 2**39, and q*a <= c. When
# c_max * b_max < 2**62 (short runs, or small totals such as a bucket schedule) one product and
# one divmod suffice, and the vector paths take that shortcut.


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _ratios(items: Sequence[Any]) -> tuple[list[int], list[int]]:
    """Each weight as an exact ratio ``n_j / d_j`` of Python ints, or refuse it (naming
    ``weights[j]``)."""
    # The common case, checked in C: floats only, none negative (a NaN anywhere makes the sum
    # NaN, an inf or an overflow makes it inf: both go the long way, which names the culprit).
    if items and set(map(type, items)) == {float} and min(items) >= 0.0 and sum(items) < math.inf:
        pairs = [v.as_integer_ratio() for v in items]
        return [n for n, _ in pairs], [d for _, d in pairs]
    nums: list[int] = []
    dens: list[int] = []
    for j, value in enumerate(items):
        if type(value) is float and value >= 0.0 and value != math.inf:  # the common case
            n, d = value.as_integer_ratio()
            nums.append(n)
            dens.append(d)
            continue
        if not _is_real(value):
            fail(f"weights[{j}]", "a real number", value, TypeError)
        real: Any = value
        finite = isinstance(real, numbers.Integral) or math.isfinite(float(real))
        if not finite or real < 0:
            fail(f"weights[{j}]", "a finite non-negative real", value)
        if isinstance(real, numbers.Integral):
            n, d = int(real), 1
        elif isinstance(real, Fraction):
            n, d = real.numerator, real.denominator
        else:  # floats and numpy floats: a dyadic rational, converted exactly
            n, d = float(real).as_integer_ratio()
        nums.append(n)
        dens.append(d)
    return nums, dens


def _rounded(prod: list[int], wsum: int, total: int) -> tuple[int, ...]:
    """Quotas ``prod_j / wsum`` rounded to ints that sum to ``total``, every positive quota at
    least one (largest remainder)."""
    units = [(x // wsum) or 1 if x > 0 else 0 for x in prod]
    short = total - sum(units)
    k = len(units)
    if short >= 0:
        # Largest remainder; ties to the lower index (a reverse sort is stable: equal
        # remainders keep their index order). short < number of positive weights.
        rest = [x - u * wsum for x, u in zip(prod, units, strict=True)]
        for j in sorted(range(k), key=rest.__getitem__, reverse=True)[:short]:
            units[j] += 1
    else:
        # Only when some positive weight was raised to one unit: take units back from the most
        # over-served parties that keep at least one unit; ties to the higher index.
        while short < 0:
            order = sorted(
                (j for j in range(k) if units[j] > 1),
                key=lambda j: (prod[j] - units[j] * wsum, -j),
            )
            for j in order[:-short]:
                units[j] -= 1
                short += 1
    return tuple(units)


def quantize_weights(weights: Sequence[float], total: int = MAX_TOTAL) -> tuple[int, ...]:
    """Turn real weights into integers that sum exactly to ``total``.

    Every float is converted exactly (through :class:`fractions.Fraction`), normalised, scaled by
    ``total`` and rounded by largest remainder (ties to the lower index), after raising every
    positive weight's share to at least one unit. The result is a pure function of the inputs,
    identical on every machine.

    Precision: with ``q_j = total * w_j / sum(w)``, ``|result_j - q_j| < 1`` unit, i.e. each
    normalised weight is off by less than ``1 / total`` (``2**-40 ~ 9.1e-13`` by default): less
    than one sample over a run shorter than ``total`` samples. The only exception is a positive
    weight whose share is below one unit (``w_j / sum(w) < 1 / total``): it is raised to one
    unit, and the units that pays for are taken back, one per party per round, from the parties
    with the smallest remainders. With ``r`` weights raised, every party is then off by less
    than ``1 + ceil(r / m)`` units, ``m`` being the number of parties left with two units or
    more (so by less than 2 units unless almost all the mass sits in fewer than ``r`` parties).

    Args:
        weights: Non-negative finite reals (ints, floats, numpy scalars), at least one positive.
        total: The sum of the result, an int in ``[1, 2**40]``; at least the number of positive
            weights.

    Returns:
        A tuple of non-negative ints, one per weight, summing to ``total``; zero exactly where
        the weight is zero.

    Raises:
        TypeError: If ``weights`` is not a sequence of reals, or ``total`` is not an int.
        ValueError: If a weight is negative or not finite, all are zero, or ``total`` is out of
            range.

    Example:
        >>> quantize_weights([0.25, 0.75], total=8)
        (2, 6)
        >>> quantize_weights([1e-30, 1.0], total=1000)
        (1, 999)
    """
    total = check_int("total", total, min_value=1, max_value=MAX_TOTAL)
    items = check_sequence("weights", weights, "a sequence of non-negative reals")
    # Exact and integer-only: every weight is a ratio n_j / d_j (a float's d_j is a power of
    # two), so with D = lcm(d_j) the weights are the integers n_j * D / d_j, and every quota
    # total * w_j / sum(w) is the exact ratio prod_j / wsum of two Python ints.
    nums, dens = _ratios(items)
    common = math.lcm(*dens) if dens else 1
    ints = [n * (common // d) for n, d in zip(nums, dens, strict=True)]
    wsum = sum(ints)
    if wsum == 0:
        fail("weights", "a non-empty sequence with a positive entry", weights)
    n_pos = sum(1 for x in ints if x > 0)
    if n_pos > total:
        fail("total", f"at least the number of positive weights ({n_pos})", total)
    prod = [x * total for x in ints]  # quota_j = prod_j / wsum
    return _rounded(prod, wsum, total)


# -- exact arithmetic ------------------------------------------------------------------------


_Int64s = npt.NDArray[np.int64] | np.int64


def _split_floor(
    c: npt.NDArray[np.int64],
    a: _Int64s,
    h: _Int64s,
    b: _Int64s,
    fast: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``divmod(c * a + h, b)`` exactly in int64 (NOTE [ Exact split in int64 ]).

    ``fast`` may be set only when ``c * a + h < 2**63`` for every element.
    """
    if fast:
        return np.divmod(c * a + h, b)
    q, s = np.divmod(c, b)
    q1, r1 = np.divmod(s * (a >> _HALF_BITS), b)
    q2, r2 = np.divmod((r1 << _HALF_BITS) + s * (a & _HALF_MASK) + h, b)
    return q * a + (q1 << _HALF_BITS) + q2, r2


def _keyed_tree(leaf_weights: list[int], key: int) -> tuple[str, Tree, list[float]]:
    """The apportionment tree over the positive weights: ``(construction, tree, bounds)``, the
    candidate with the smallest worst bound, its ties and orientation decided by ``key``."""
    n = len(leaf_weights)
    # Keyed tie order among the parties of positive weight: equal weights are taken in the
    # order of a keyed permutation, so the key decides which of them the tree meets first.
    tie_key = derive_key(key, epoch=0, stream="apportionment", purpose="tie-order")
    seq = Permutation(n, tie_key)(np.arange(n)).tolist() if n > 1 else [0]

    # Build the candidates and keep the one with the smallest worst bound (first on ties).
    best: tuple[float, str, Tree, list[float]] | None = None
    for name, build in CONSTRUCTIONS:
        tree = build(leaf_weights, seq)
        if n > 1 and max(tree.depths()) > MAX_DEPTH:
            continue
        bounds = tree.bounds() if n > 1 else [0.0]
        if best is None or max(bounds) < best[0]:
            best = (max(bounds), name, tree, bounds)
    if best is None:  # unreachable: Huffman trees here are at most 58 deep
        raise RuntimeError("no tree construction stayed within the depth limit")
    _, construction, tree, leaf_bounds = best

    # Keyed orientation: which child of each split gets floor(.) (and so the half-up on an
    # exact tie). Exactly half of the internal nodes, chosen by a keyed permutation, swap.
    m = n - 1
    if m > 0:
        orient_key = derive_key(key, epoch=0, stream="apportionment", purpose="orient")
        swap = (Permutation(2 * m, orient_key)(np.arange(m)) >= m).tolist()
        for i in range(m):
            if swap[i]:
                tree.first[i], tree.second[i] = tree.second[i], tree.first[i]
    return construction, tree, leaf_bounds


class Apportionment:
    """Random-access apportionment of positions ``0, 1, 2, ...`` among K weighted parties.

    Args:
        weights: Non-negative ints (numpy ints accepted, ``bool`` refused), at least one
            positive, summing to at most ``2**40``. Float weights go through
            :func:`quantize_weights` first.
        key: A key in ``[0, 2**64)``, normally from :func:`dataorder.core.keys.derive_key`.
            It decides the order among equal weights and, at every split, which child gets the
            round-half-up; it changes which party goes first and how ties fall, never a bound.

    The result is a pure function of ``(weights, key)`` and the position: bit-identical on every
    machine. With parties of equal weight the key alone decides who comes first::

        >>> [Apportionment([1, 1, 1], key=k).parties(0, 3).tolist() for k in (0, 1)]
        [[1, 2, 0], [0, 2, 1]]
    """

    __slots__ = (
        "_bounds",
        "_construction",
        "_depth",
        "_fast_limit",
        "_key",
        "_leaf_party",
        "_levels",
        "_node_table",
        "_num_nodes",
        "_positive",
        "_scalar_nodes",
        "_total",
        "_weights",
    )

    def __init__(self, weights: Sequence[int], key: int = 0) -> None:
        items = check_sequence("weights", weights, "a sequence of non-negative ints")
        ints = []
        for j, value in enumerate(items):
            ints.append(check_int(f"weights[{j}]", value, min_value=0))
        if not ints or max(ints) == 0:
            fail("weights", "a non-empty sequence with a positive entry", weights)
        total = sum(ints)
        if total > MAX_TOTAL:
            fail("sum(weights)", "at most 2**40", total)
        self._key = check_int("key", key, min_value=0, max_value=2**64 - 1)
        self._weights = tuple(ints)
        self._total = total
        positive = [j for j, w in enumerate(ints) if w > 0]
        self._positive = np.array(positive, dtype=_I64)
        n = len(positive)
        leaf_weights = [ints[j] for j in positive]

        self._construction, tree, leaf_bounds = _keyed_tree(leaf_weights, self._key)

        self._bounds = np.zeros(len(ints), dtype=np.float64)
        self._bounds[self._positive] = leaf_bounds
        self._leaf_party = self._positive  # leaf i is party positive[i]
        self._num_nodes = len(tree.weight)
        depth = tree.depths()
        self._depth = max(depth)

        # Per internal node v (index v - n): its children and the split's integers, as arrays.
        weight = np.array(tree.weight, dtype=_I64)
        first = np.array(tree.first, dtype=_I64)
        second = np.array(tree.second, dtype=_I64)
        inner = np.arange(n, self._num_nodes, dtype=_I64)
        w_first, w_node = weight[first], weight[inner]
        half = w_node // 2

        # Scalar path: (node, first, second, w_first, h, w_node) top-down, pure Python ints.
        rows = np.stack([inner, first, second, w_first, half, w_node], axis=1)[::-1].tolist()
        self._scalar_nodes = tuple(tuple(r) for r in rows)

        # Vector counts: internal nodes grouped by depth, top-down; one numpy pass per level.
        inner_depth = np.array(depth, dtype=_I64)[n:]
        self._levels = []
        # (sorted(set(...)), not np.unique: its first call imports numpy.ma, ~6 ms)
        for d in sorted(set(inner_depth.tolist())):
            at = np.flatnonzero(inner_depth == d)
            self._levels.append(
                (inner[at], first[at], second[at], w_first[at], half[at], w_node[at])
            )

        # Vector descent: one row per node (w_first, h, w_node, first, second); a leaf is
        # absorbing (w_first = w_node = 1, h = 0: always "first", count unchanged, stays put).
        table = np.zeros((5, self._num_nodes), dtype=_I64)
        table[0, :n] = 1
        table[2, :n] = 1
        table[3, :n] = table[4, :n] = np.arange(n)
        table[:, n:] = np.stack([w_first, half, w_node, first, second])
        self._node_table = table
        # counts c with c * W + W < 2**63 can use the one-product path of _split_floor.
        self._fast_limit = (2**63 - 1) // total - 1

    # -- description -----------------------------------------------------------------------
    @property
    def weights(self) -> tuple[int, ...]:
        """The integer weights, as given."""
        return self._weights

    @property
    def total(self) -> int:
        """Sum of the weights, ``W``."""
        return self._total

    @property
    def key(self) -> int:
        """The key."""
        return self._key

    @property
    def depth(self) -> int:
        """Depth of the tree (0 when a single party has positive weight)."""
        return self._depth

    @property
    def construction(self) -> str:
        """Which candidate tree was kept: ``"huffman"`` or ``"ratio"``."""
        return self._construction

    def __len__(self) -> int:
        return len(self._weights)

    def __repr__(self) -> str:
        return (
            f"Apportionment(parties={len(self._weights)}, total={self._total}, "
            f"construction={self._construction!r}, depth={self._depth})"
        )

    def deviation_bounds(self) -> npt.NDArray[np.float64]:
        """Per-party proven bound ``B_j`` on ``|c_j(t) - w_j * t / W|``, for every ``t``.

        Zero for parties of zero weight. See NOTE [ Deviation bound ] in
        :mod:`dataorder.core._apportion_tree`.
        """
        bounds: npt.NDArray[np.float64] = self._bounds.copy()
        return bounds

    # -- counts ----------------------------------------------------------------------------
    def counts(self, t: int) -> npt.NDArray[np.int64]:
        """Return ``c_j(t)`` for every party: how many of slots ``0..t-1`` each one holds.

        Pure Python integers along the tree (exact at any size), O(K).

        Raises:
            TypeError, ValueError: If ``t`` is not an int in ``[0, 2**62]``.
        """
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION)
        c = [0] * self._num_nodes
        c[-1] = t
        for v, a, b, wa, h, wv in self._scalar_nodes:
            cv = c[v]
            ca = (cv * wa + h) // wv
            c[a] = ca
            c[b] = cv - ca
        out = np.zeros(len(self._weights), dtype=_I64)
        out[self._leaf_party] = c[: len(self._leaf_party)]
        return out

    def counts_at(self, ts: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Return ``c_j(t)`` for many positions at once: an int64 array of shape ``(n, K)``.

        Vectorised by tree levels: the number of numpy calls is O(depth), whatever ``n`` and K.

        Args:
            ts: A 1-D array-like of ints in ``[0, 2**62]``, in any order.

        Raises:
            TypeError: If ``ts`` is not integer.
            ValueError: If ``ts`` is not 1-D or a position is out of range.
        """
        arr = self._positions("ts", ts)
        n = arr.shape[0]
        out = np.zeros((n, len(self._weights)), dtype=_I64)
        if n == 0:
            return out
        c = np.empty((n, self._num_nodes), dtype=_I64)
        c[:, -1] = arr
        fast = int(arr.max()) <= self._fast_limit
        for nodes, first, second, wa, h, wv in self._levels:
            cv = c[:, nodes]
            ca, _ = _split_floor(cv, wa, h, wv, fast)
            c[:, first] = ca
            c[:, second] = cv - ca
        out[:, self._leaf_party] = c[:, : len(self._leaf_party)]
        return out

    def quotas(self, boundaries: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Return each party's share of each window between consecutive boundaries.

        ``quotas(b)[i, j] = c_j(b[i + 1]) - c_j(b[i])``: shape ``(len(b) - 1, K)``, rows summing
        to the window lengths, never negative.

        Raises:
            ValueError: If ``boundaries`` is not non-decreasing (or as for :meth:`counts_at`).
        """
        arr = self._positions("boundaries", boundaries)
        if arr.size > 1 and bool(np.any(arr[1:] < arr[:-1])):
            fail("boundaries", "non-decreasing", boundaries)
        return np.diff(self.counts_at(arr), axis=0)

    # -- slots -----------------------------------------------------------------------------
    def party_at(self, t: int) -> tuple[int, int]:
        """Return ``(party, ordinal)`` of slot ``t``: its holder and which of its slots it is.

        ``ordinal == c_party(t)``: the holder's count before this slot. O(depth), pure Python.

        Raises:
            TypeError, ValueError: If ``t`` is not an int in ``[0, 2**62 - 1]``.
        """
        t = check_int("t", t, min_value=0, max_value=MAX_POSITION - 1)
        table = self._node_table
        node, c = self._num_nodes - 1, t
        n = len(self._leaf_party)
        while node >= n:
            wa, h, wv, a, b = (int(x) for x in table[:, node])
            ca, r = divmod(c * wa + h, wv)
            # The slot goes to the first child iff its count steps up between c and c + 1.
            node, c = (a, ca) if r + wa >= wv else (b, c - ca)
        return int(self._leaf_party[node]), c

    def party_slots(
        self, start: int, stop: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Return ``(parties, ordinals)`` for slots ``start..stop-1`` (two int64 arrays).

        A vectorised descent: every slot walks the tree at once, one level per pass, so the
        number of numpy calls is O(depth). Ranges longer than 64 slots per tree node are
        partitioned node by node instead (O(K) numpy calls, each on many slots, no gathers).

        Raises:
            TypeError, ValueError: Unless ``0 <= start <= stop <= 2**62``.
        """
        start = check_int("start", start, min_value=0, max_value=MAX_POSITION)
        stop = check_int("stop", stop, min_value=start, max_value=MAX_POSITION)
        size = stop - start
        if size <= _SCALAR_CUTOFF:
            pairs = [self.party_at(t) for t in range(start, stop)]
            return (
                np.array([p for p, _ in pairs], dtype=_I64),
                np.array([o for _, o in pairs], dtype=_I64),
            )
        fast = stop <= self._fast_limit
        if size >= _PARTITION_FACTOR * self._num_nodes:
            return self._slots_by_partition(start, stop, fast)
        c = np.arange(start, stop, dtype=_I64)
        node = np.full(size, self._num_nodes - 1, dtype=_I64)
        wa_all, h_all, wv_all, a_all, b_all = self._node_table
        for _ in range(self._depth):
            wa = wa_all[node]
            wv = wv_all[node]
            ca, r = _split_floor(c, wa, h_all[node], wv, fast)
            first = r + wa >= wv
            c = np.where(first, ca, c - ca)
            node = np.where(first, a_all[node], b_all[node])
        return self._leaf_party[node], c

    def _slots_by_partition(
        self, start: int, stop: int, fast: bool
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The same answer as the descent, computed node by node for long ranges.

        Node ``v`` holds the slots of the range whose counts run ``c_v(start) ..
        c_v(stop) - 1``; its first child takes those where ``floor((c * w_a + h) / w_v)`` steps
        up. Each node costs a few numpy calls on its own slots with scalar parameters (no
        gathers), so a range much longer than the tree is about 4x faster than the descent.
        """
        size = stop - start
        counts = [0] * self._num_nodes
        counts[-1] = start
        for v, a, b, wa, h, wv in self._scalar_nodes:
            ca = (counts[v] * wa + h) // wv
            counts[a] = ca
            counts[b] = counts[v] - ca
        slots: dict[int, npt.NDArray[np.int64]] = {self._num_nodes - 1: np.arange(size)}
        for v, a, b, wa, h, wv in self._scalar_nodes:
            here = slots.pop(v)
            k = np.arange(counts[v], counts[v] + here.size, dtype=_I64)
            _, r = _split_floor(k, _I64(wa), _I64(h), _I64(wv), fast)
            first = r + wa >= wv
            slots[a] = here[first]
            slots[b] = here[~first]
        parties = np.empty(size, dtype=_I64)
        ordinals = np.empty(size, dtype=_I64)
        for leaf, here in slots.items():
            parties[here] = self._leaf_party[leaf]
            ordinals[here] = np.arange(counts[leaf], counts[leaf] + here.size, dtype=_I64)
        return parties, ordinals

    def parties(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """Return which party holds each slot in ``start..stop-1`` (int64, length stop-start)."""
        return self.party_slots(start, stop)[0]

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _positions(name: str, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        arr = np.asarray(values)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"{name} must be integers; got dtype {arr.dtype}")
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D; got shape {arr.shape}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) > MAX_POSITION):
            raise ValueError(
                f"{name} must lie in [0, 2**62]; got min={int(arr.min())}, max={int(arr.max())}"
            )
        return arr.astype(_I64, copy=False)
