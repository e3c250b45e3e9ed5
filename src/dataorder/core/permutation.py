"""A random-access pseudo-random permutation of ``range(n)``: O(1) memory, O(1) work per index.

:class:`Permutation` maps a position ``p`` of an epoch to the sample ``pi(p)`` without ever
materialising the permutation, so an epoch of a billion samples costs a few machine words, its
first index is ready in microseconds, and resuming at position ``p`` is just evaluating ``pi(p)``.
:func:`permute_many` evaluates many such permutations at once, a size and a key per element (a
source's pass per sample of a blend): the same network, element by element.

Construction: an unbalanced Feistel network on ``w``-bit words with cycle walking.

* ``w = max(2, (n - 1).bit_length())`` is computed with integer arithmetic, so the domain
  ``2**w`` always covers ``range(n)`` and is smaller than ``2 * n`` (for ``n >= 3``): cycle walking
  takes fewer than two encryptions per index on average. (Grain's ``index_shuffle`` sizes the word
  with a float ``log2`` and loses the top index at ``n = 2**16 + 1``.)
* Each of the 6 rounds splits the word into a low part of ``lo`` bits and a high part of
  ``w - lo`` bits, XORs the high part with a keyed 64-bit mix (the SplitMix64 finaliser,
  :func:`mix64`) of the low part, and swaps the two parts; ``lo`` alternates between
  ``ceil(w/2)`` and ``floor(w/2)``. Round ``r``'s key is ``mix64(key + GOLDEN (r + 1))``. Every
  round is invertible, so the network is a bijection of ``range(2**w)``.
* Cycle walking re-encrypts any output ``>= n``. Because the network is a bijection of the whole
  domain, the walk from a position ``< n`` returns to ``range(n)``; the result is a bijection of
  ``range(n)`` for every ``n >= 1``.

The network is written once per kind of number: :func:`_encrypt`/:func:`_decrypt` on numpy
words (one network for all of them, or one per element) and :func:`_encrypt_int`/
:func:`_decrypt_int` on Python ints (small batches and the last few cycle walks, where numpy's
per-call cost dominates); :func:`_cycle_walk` is the one walk. The exact outputs are pinned by
golden tests: changing any constant here changes every order, which is why
:data:`PERMUTATION_VERSION` is part of every sampler fingerprint.

Example:
    >>> from dataorder.core.permutation import Permutation, permute_many
    >>> pi = Permutation(10, key=42)
    >>> sorted(pi(range(10)).tolist()) == list(range(10))
    True
    >>> int(pi.inverse(pi.index(7)))
    7
    >>> permute_many([10, 1000], [42, 7], [7, 999]).tolist() == [
    ...     pi.index(7), Permutation(1000, 7).index(999)]
    True
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int

__all__ = ["MAX_DOMAIN", "PERMUTATION_VERSION", "Permutation", "mix64", "permute_many"]

#: Largest ``n``: positions are int64 in the vector path, so domains stay within 62 bits.
MAX_DOMAIN = 2**62

#: Version of the construction. Part of every fingerprint that depends on a permutation.
PERMUTATION_VERSION = 1

_ROUNDS = 6
_SCALAR_CUTOFF = 64  # up to this many positions the pure-Python path is faster
_STRAGGLERS = 16  # cycle walks left over after vectorised passes, finished one by one
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_U64 = np.uint64
_I64 = np.int64
# 2**0 .. 2**62: the bit length of v < 2**62 is the number of these at or below it.
_POWERS = np.left_shift(np.int64(1), np.arange(63, dtype=_I64))

U64Array = npt.NDArray[np.uint64]
# Per round: (lo_bits, hi_bits, lo_mask, hi_mask), numpy scalars for one word width or arrays
# with one entry per element.
_Shifts = tuple[tuple[np.uint64 | U64Array, ...], ...]
# Round keys: one per round shared by every word, or shape (rounds, words).
_Keys = tuple[np.uint64, ...] | U64Array
# Per round: (lo_bits, hi_bits, lo_mask, hi_mask, round key) as Python ints.
_IntRounds = tuple[tuple[int, int, int, int, int], ...]


# -- the round function: SplitMix64's finaliser ------------------------------------------------


@overload
def mix64(x: int) -> int: ...
@overload
def mix64(x: U64Array) -> U64Array: ...
def mix64(x: int | U64Array) -> int | U64Array:
    """SplitMix64's finaliser: the keyed mix of every Feistel round, and a cheap way to hash
    small tuples of ints into keys (reduced mod ``2**64``).

    Args:
        x: An int (taken mod ``2**64``), or a uint64 array (a new array is returned).

    >>> mix64(0), mix64(1) == int(mix64(np.array([1], dtype=np.uint64))[0])
    (0, True)
    """
    if isinstance(x, np.ndarray):
        return _mix_in_place(x.astype(_U64, copy=True))
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _mix_in_place(f: U64Array) -> U64Array:
    """:func:`mix64` on a uint64 array it may overwrite (uint64 arithmetic wraps mod 2**64)."""
    f ^= f >> _U64(30)
    f *= _U64(_M1)
    f ^= f >> _U64(27)
    f *= _U64(_M2)
    f ^= f >> _U64(31)
    return f


# -- keys and word widths ----------------------------------------------------------------------


def _round_keys(key: int) -> tuple[int, ...]:
    return tuple(mix64(key + _GOLDEN * (r + 1)) for r in range(_ROUNDS))


def _round_keys_of(keys: U64Array) -> U64Array:
    """:func:`_round_keys` of each key, shape ``(rounds, m)``. Runs of equal neighbouring keys
    (a global batch's slots, one whole domain) are mixed once per run."""
    heads = None
    if keys.size > 8:
        starts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        if 4 * (starts.size + 1) <= keys.size:
            heads = np.concatenate([[0], starts])
    unique = keys if heads is None else keys[heads]
    out = np.empty((_ROUNDS, unique.size), dtype=_U64)
    for r in range(_ROUNDS):
        out[r] = _mix_in_place(unique + _U64((_GOLDEN * (r + 1)) & _MASK64))
    if heads is None:
        return out
    return np.repeat(out, np.diff(np.append(heads, keys.size)), axis=1)


def _width(n: int) -> int:
    return max(2, (n - 1).bit_length())


def _widths(n: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """:func:`_width` of each size, exactly (integer comparisons, no float logarithm)."""
    return np.maximum(np.searchsorted(_POWERS, n - 1, side="right"), 2).astype(_I64)


@functools.lru_cache(maxsize=128)
def _shifts(width: int) -> _Shifts:
    first, second = (width + 1) // 2, width // 2
    even = tuple(_U64(v) for v in (first, second, (1 << first) - 1, (1 << second) - 1))
    odd = tuple(_U64(v) for v in (second, first, (1 << second) - 1, (1 << first) - 1))
    return tuple(even if r % 2 == 0 else odd for r in range(_ROUNDS))


def _shift_arrays(widths: U64Array) -> _Shifts:
    """:func:`_shifts` with one word width per element."""
    one = _U64(1)
    first = (widths + one) >> one
    second = widths - first
    even = (first, second, (one << first) - one, (one << second) - one)
    odd = (second, first, even[3], even[2])
    return tuple(even if r % 2 == 0 else odd for r in range(_ROUNDS))


def _int_rounds(width: int, round_keys: Iterable[int | np.uint64]) -> _IntRounds:
    shifts = _shifts(width)
    return tuple(
        (int(lo), int(hi), int(m_lo), int(m_hi), int(k))
        for (lo, hi, m_lo, m_hi), k in zip(shifts, round_keys, strict=True)
    )


# -- the network -------------------------------------------------------------------------------


def _encrypt(x: U64Array, keys: _Keys, shifts: _Shifts) -> U64Array:
    """One pass of the network over numpy words: ``keys`` and ``shifts`` give each round's key
    and split, shared by every word or one per word."""
    for (lo_bits, hi_bits, m_lo, m_hi), k in zip(shifts, keys, strict=True):
        lo = x & m_lo
        f = lo ^ k
        f ^= f >> _U64(30)  # the mix, inlined: calling _mix_in_place costs 15% on big arrays
        f *= _U64(_M1)
        f ^= f >> _U64(27)
        f *= _U64(_M2)
        f ^= f >> _U64(31)
        f &= m_hi
        f ^= x >> lo_bits
        lo <<= hi_bits
        lo |= f
        x = lo
    return x


def _decrypt(x: U64Array, keys: _Keys, shifts: _Shifts) -> U64Array:
    """The inverse of :func:`_encrypt`: the rounds backwards."""
    for (lo_bits, hi_bits, m_lo, m_hi), k in zip(shifts[::-1], keys[::-1], strict=True):
        lo = x >> hi_bits
        f = (lo & m_lo) ^ k
        f ^= f >> _U64(30)
        f *= _U64(_M1)
        f ^= f >> _U64(27)
        f *= _U64(_M2)
        f ^= f >> _U64(31)
        f &= m_hi
        f ^= x & m_hi
        f <<= lo_bits
        f |= lo
        x = f
    return x


def _encrypt_int(x: int, rounds: _IntRounds) -> int:
    """:func:`_encrypt` on one Python int. The mix is inlined: a call per round doubles the
    cost."""
    for lo_bits, hi_bits, m_lo, m_hi, k in rounds:
        lo = x & m_lo
        f = lo ^ k
        f = ((f ^ (f >> 30)) * _M1) & _MASK64
        f = ((f ^ (f >> 27)) * _M2) & _MASK64
        x = (lo << hi_bits) | ((x >> lo_bits) ^ ((f ^ (f >> 31)) & m_hi))
    return x


def _decrypt_int(x: int, rounds: _IntRounds) -> int:
    """:func:`_decrypt` on one Python int."""
    for lo_bits, hi_bits, m_lo, m_hi, k in reversed(rounds):
        lo = x >> hi_bits
        f = (lo & m_lo) ^ k
        f = ((f ^ (f >> 30)) * _M1) & _MASK64
        f = ((f ^ (f >> 27)) * _M2) & _MASK64
        x = (((x & m_hi) ^ ((f ^ (f >> 31)) & m_hi)) << lo_bits) | lo
    return x


class _Network:
    """A network ready to evaluate: one for every word (sizes and widths numpy scalars, keys one
    per round), or one per word (``n``, ``keys[r]`` and possibly ``width`` arrays)."""

    __slots__ = ("ints", "keys", "n", "shifts", "width")

    def __init__(
        self,
        n: np.uint64 | U64Array,
        keys: _Keys,
        width: int | U64Array,
        ints: tuple[int, _IntRounds] | None = None,
    ) -> None:
        self.n = n
        self.keys = keys
        self.width = width
        self.shifts = _shifts(width) if isinstance(width, int) else _shift_arrays(width)
        self.ints = ints  # (n, rounds) of a shared network, for its Python-int path

    def take(self, idx: npt.NDArray[np.intp]) -> _Network:
        """The networks of words ``idx`` (itself when shared)."""
        n, keys, width = self.n, self.keys, self.width
        if not isinstance(n, np.ndarray):
            return self
        return _Network(
            n[idx],
            keys[:, idx] if isinstance(keys, np.ndarray) else keys,
            width if isinstance(width, int) else width[idx],
        )

    def of_word(self, i: int) -> tuple[int, _IntRounds]:
        """``(n, rounds)`` of word ``i``, for the Python-int path."""
        if self.ints is not None:
            return self.ints
        n, keys, width = self.n, self.keys, self.width
        size = int(n[i] if isinstance(n, np.ndarray) else n)
        round_keys = keys[:, i].tolist() if isinstance(keys, np.ndarray) else keys
        return size, _int_rounds(width if isinstance(width, int) else int(width[i]), round_keys)


def _cycle_walk(x: U64Array, net: _Network, inverse: bool) -> U64Array:
    """Encrypt (or decrypt) every word of ``x``, then re-encrypt each output ``>= n`` until it
    is in its domain. Fewer than two passes per word on average (the domain is below ``2n``)."""
    step = _decrypt if inverse else _encrypt
    y = step(x, net.keys, net.shifts)
    todo = np.flatnonzero(y >= net.n)
    while todo.size > _STRAGGLERS:
        sub = net.take(todo)
        z = step(y[todo], sub.keys, sub.shifts)
        y[todo] = z
        todo = todo[z >= sub.n]
    # The last few cycle walks are geometric stragglers: finish them one by one rather than
    # paying a whole vectorised pass for each extra step.
    one = _decrypt_int if inverse else _encrypt_int
    for i in todo.tolist():
        size, rounds = net.of_word(i)
        v = one(int(y[i]), rounds)
        while v >= size:
            v = one(v, rounds)
        y[i] = v
    return y


# -- one permutation ---------------------------------------------------------------------------


class Permutation:
    """Random-access bijection of ``range(n)`` keyed by a 64-bit key.

    Args:
        n: Size of the domain, ``n >= 1``.
        key: A key in ``[0, 2**64)``, normally from :func:`dataorder.core.keys.derive_key`.

    Calling the object maps positions to values: an int gives an int, anything array-like gives a
    ``numpy.int64`` array of the same shape. :meth:`inverse` maps values back to positions.
    """

    __slots__ = ("_n", "_net", "_rounds")

    def __init__(self, n: int, key: int) -> None:
        self._n = check_int("n", n, min_value=1, max_value=MAX_DOMAIN)
        key = check_int("key", key, min_value=0, max_value=_MASK64)
        width = _width(self._n)
        round_keys = _round_keys(key)
        self._rounds = _int_rounds(width, round_keys)
        self._net = _Network(
            _U64(self._n), tuple(_U64(k) for k in round_keys), width, (self._n, self._rounds)
        )

    @property
    def n(self) -> int:
        """Size of the domain."""
        return self._n

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"Permutation(n={self._n}, width={self._net.width})"

    def index(self, position: int) -> int:
        """Return ``pi(position)`` for one position (pure Python, no numpy overhead)."""
        position = check_int("position", position, min_value=0, max_value=self._n - 1)
        if self._n == 1:
            return 0
        y = _encrypt_int(position, self._rounds)
        while y >= self._n:
            y = _encrypt_int(y, self._rounds)
        return y

    def position(self, value: int) -> int:
        """Return ``pi^-1(value)``: where ``value`` appears in the order."""
        value = check_int("value", value, min_value=0, max_value=self._n - 1)
        if self._n == 1:
            return 0
        x = _decrypt_int(value, self._rounds)
        while x >= self._n:
            x = _decrypt_int(x, self._rounds)
        return x

    def _walk(self, values: npt.ArrayLike, inverse: bool) -> npt.NDArray[np.int64]:
        arr = np.asarray(values)
        name = "values" if inverse else "positions"
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise TypeError(f"{name} must be integers; got dtype {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self._n):
            raise ValueError(
                f"{name} must lie in [0, {self._n - 1}]; got min={int(arr.min())}, "
                f"max={int(arr.max())}"
            )
        if self._n == 1 or arr.size == 0:
            return np.zeros(arr.shape, dtype=np.int64) if arr.size else arr.astype(np.int64)
        if arr.size <= _SCALAR_CUTOFF:
            # A numpy call costs ~1 us per op whatever its size, and a round is a dozen ops;
            # small batches (a micro-batch, a bucket's first step) are faster in pure Python.
            one, rounds, out = (_decrypt_int if inverse else _encrypt_int), self._rounds, []
            for v in arr.ravel().tolist():
                v = one(v, rounds)
                while v >= self._n:
                    v = one(v, rounds)
                out.append(v)
            return np.array(out, dtype=np.int64).reshape(arr.shape)
        y = _cycle_walk(arr.astype(np.uint64, copy=False).ravel(), self._net, inverse)
        return y.astype(np.int64).reshape(arr.shape)

    def __call__(self, positions: npt.ArrayLike | Iterable[int] | int) -> npt.NDArray[np.int64]:
        """Map positions to values (vectorised). Returns an int64 array shaped like the input."""
        if isinstance(positions, range):
            positions = np.arange(positions.start, positions.stop, positions.step, dtype=np.int64)
        elif not isinstance(positions, np.ndarray):
            positions = np.asarray(
                list(positions) if isinstance(positions, Iterable) else positions
            )
        return self._walk(positions, inverse=False)

    def inverse(self, values: npt.ArrayLike | int) -> npt.NDArray[np.int64]:
        """Map values back to their positions (vectorised)."""
        return self._walk(np.asarray(values), inverse=True)


# -- many permutations -------------------------------------------------------------------------


def _integers(name: str, values: object, low: int, high: int) -> npt.NDArray[Any]:
    """``values`` as an integer array within ``[low, high]``, or TypeError/ValueError naming
    ``name``. Python ints beyond int64 (keys) are kept exact, never passed through a float."""
    dtype = _U64 if high > MAX_DOMAIN else _I64
    arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    if not arr.size:
        return np.zeros(arr.shape, dtype=dtype)
    if arr.dtype.kind not in "iu":
        # np.asarray([2**64 - 1, 5]) is float64: keep a sequence's Python ints as they are
        exact = None if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
        if exact is None or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_)
            for v in exact.flat
        ):
            raise TypeError(f"{name} must be integers; got dtype {arr.dtype}")
        arr = exact
    lo, hi = int(arr.min()), int(arr.max())
    if lo < low or hi > high:
        raise ValueError(f"{name} must lie in [{low}, {high}]; got min={lo}, max={hi}")
    return arr.astype(dtype, copy=False)


def permute_many(
    sizes: npt.ArrayLike, keys: npt.ArrayLike, positions: npt.ArrayLike
) -> npt.NDArray[np.int64]:
    """``Permutation(sizes[i], keys[i])(positions[i])`` for every ``i``, vectorised.

    The same network as :class:`Permutation`, element by element (bit-identical: the same word
    widths, round keys, rounds and cycle walking), for batches where every element has its own
    domain and key, e.g. each sample of a blend drawn from the order of its source's current
    pass. Elements are grouped by word width: one or two widths run with the shifts of
    :class:`Permutation`, more in one sweep with a shift per element. Runs of equal neighbouring
    keys derive their round keys once. O(1) memory per element, no per-domain table.

    Args:
        sizes: Domain sizes, ints in ``[1, 2**62]``.
        keys: 64-bit keys, ints in ``[0, 2**64)`` (a uint64 array for keys above ``2**63``).
        positions: Positions, ``0 <= positions[i] < sizes[i]``.

    Returns:
        An int64 array, the broadcast shape of the three arguments.

    Raises:
        TypeError: If an argument is not integers.
        ValueError: If a size, a key or a position is out of range, or the shapes do not
            broadcast.

    >>> permute_many([10, 10, 1], [42, 43, 9], [7, 7, 0]).tolist() == [
    ...     Permutation(10, 42).index(7), Permutation(10, 43).index(7), 0]
    True
    """
    arrays = (
        _integers("sizes", sizes, 1, MAX_DOMAIN),
        _integers("keys", keys, 0, _MASK64),
        _integers("positions", positions, 0, MAX_DOMAIN - 1),
    )
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except ValueError:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ValueError(
            f"sizes, keys and positions must broadcast together; got shapes {shapes}"
        ) from None
    n, k, p = (np.broadcast_to(a, shape).ravel() for a in arrays)
    beyond = np.flatnonzero(p >= n)
    if beyond.size:
        i = int(beyond[0])
        raise ValueError(
            "positions must lie in [0, sizes) element by element; got "
            f"positions[{i}]={int(p[i])} with sizes[{i}]={int(n[i])} (flat index)"
        )
    return _permute_flat(n, k, p).reshape(shape)


def _permute_flat(
    n: npt.NDArray[np.int64], keys: U64Array, positions: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    out = np.zeros(positions.shape, dtype=_I64)
    live = n > 1  # a domain of one maps 0 to 0
    if not live.any():
        return out
    widths = _widths(n)
    present = np.flatnonzero(np.bincount(widths[live])).tolist()
    if len(present) == 1 and bool(live.all()):  # one width: no gathers
        net = _Network(n.astype(_U64), _round_keys_of(keys), present[0])
        return _cycle_walk(positions.astype(_U64), net, False).astype(_I64)
    groups: list[tuple[npt.NDArray[np.intp], int | None]]
    if len(present) > 2:  # many widths: one pass, a shift per element
        groups = [(np.flatnonzero(live), None)]
    else:
        groups = [(np.flatnonzero(live & (widths == w)), w) for w in present]
    for idx, width in groups:
        net = _Network(
            n[idx].astype(_U64),
            _round_keys_of(keys[idx]),
            widths[idx].astype(_U64) if width is None else width,
        )
        out[idx] = _cycle_walk(positions[idx].astype(_U64), net, False).astype(_I64)
    return out
