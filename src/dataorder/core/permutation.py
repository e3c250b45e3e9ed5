"""A random-access pseudo-random permutation of ``range(n)``: O(1) memory, O(1) work per index.

:class:`Permutation` maps a position ``p`` of an epoch to the sample ``pi(p)`` without ever
materialising the permutation, so an epoch of a billion samples costs a few machine words, its
first index is ready in microseconds, and resuming at position ``p`` is just evaluating ``pi(p)``.

Construction: an unbalanced Feistel network on ``w``-bit words with cycle walking.

* ``w = max(2, (n - 1).bit_length())`` is computed with integer arithmetic, so the domain
  ``2**w`` always covers ``range(n)`` and is smaller than ``2 * n`` (for ``n >= 3``): cycle walking
  takes fewer than two encryptions per index on average. (Grain's ``index_shuffle`` sizes the word
  with a float ``log2`` and loses the top index at ``n = 2**16 + 1``.)
* Each of the 6 rounds splits the word into a low part of ``lo`` bits and a high part of
  ``w - lo`` bits, XORs the high part with a keyed 64-bit mix (the SplitMix64 finaliser) of the
  low part, and swaps the two parts; ``lo`` alternates between ``ceil(w/2)`` and ``floor(w/2)``.
  Every round is invertible, so the network is a bijection of ``range(2**w)``.
* Cycle walking re-encrypts any output ``>= n``. Because the network is a bijection of the whole
  domain, the walk from a position ``< n`` returns to ``range(n)``; the result is a bijection of
  ``range(n)`` for every ``n >= 1``.

The exact outputs are pinned by golden tests: changing any constant here changes every order,
which is why :data:`PERMUTATION_VERSION` is part of every sampler fingerprint.

Example:
    >>> from dataorder.core.permutation import Permutation
    >>> pi = Permutation(10, key=42)
    >>> sorted(pi(range(10)).tolist()) == list(range(10))
    True
    >>> int(pi.inverse(pi.index(7)))
    7
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int

__all__ = ["MAX_DOMAIN", "PERMUTATION_VERSION", "Permutation"]

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


def _mix64(x: int) -> int:
    """SplitMix64 finaliser on a Python int (scalar path)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _M1) & _MASK64
    x = ((x ^ (x >> 27)) * _M2) & _MASK64
    return x ^ (x >> 31)


def _round_keys(key: int) -> tuple[int, ...]:
    state = key
    keys = []
    for _ in range(_ROUNDS):
        state = (state + _GOLDEN) & _MASK64
        keys.append(_mix64(state))
    return tuple(keys)


class Permutation:
    """Random-access bijection of ``range(n)`` keyed by a 64-bit key.

    Args:
        n: Size of the domain, ``n >= 1``.
        key: A key in ``[0, 2**64)``, normally from :func:`dataorder.core.keys.derive_key`.

    Calling the object maps positions to values: an int gives an int, anything array-like gives a
    ``numpy.int64`` array of the same shape. :meth:`inverse` maps values back to positions.
    """

    __slots__ = (
        "_lo_bits",
        "_masks_hi",
        "_masks_lo",
        "_n",
        "_round_keys",
        "_scalar_rounds",
        "_u64_keys",
        "_w",
    )

    def __init__(self, n: int, key: int) -> None:
        self._n = check_int("n", n, min_value=1, max_value=MAX_DOMAIN)
        key = check_int("key", key, min_value=0, max_value=_MASK64)
        self._w = max(2, (self._n - 1).bit_length())
        a = (self._w + 1) // 2
        b = self._w - a
        self._lo_bits = tuple(a if i % 2 == 0 else b for i in range(_ROUNDS))
        self._masks_lo = tuple((1 << lo) - 1 for lo in self._lo_bits)
        self._masks_hi = tuple((1 << (self._w - lo)) - 1 for lo in self._lo_bits)
        self._round_keys = _round_keys(key)
        self._u64_keys = tuple(np.uint64(k) for k in self._round_keys)
        self._scalar_rounds = tuple(
            zip(
                self._lo_bits,
                (self._w - lo for lo in self._lo_bits),
                self._masks_lo,
                self._masks_hi,
                self._round_keys,
                strict=True,
            )
        )

    @property
    def n(self) -> int:
        """Size of the domain."""
        return self._n

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"Permutation(n={self._n}, width={self._w})"

    # -- scalar path -------------------------------------------------------------------------
    def _enc_scalar(self, x: int) -> int:
        # The SplitMix64 finaliser is inlined: a function call per round doubles the cost.
        for lo_bits, hi_bits, m_lo, m_hi, k in self._scalar_rounds:
            lo = x & m_lo
            f = lo ^ k
            f = ((f ^ (f >> 30)) * _M1) & _MASK64
            f = ((f ^ (f >> 27)) * _M2) & _MASK64
            x = (lo << hi_bits) | ((x >> lo_bits) ^ ((f ^ (f >> 31)) & m_hi))
        return x

    def _dec_scalar(self, x: int) -> int:
        for lo_bits, hi_bits, m_lo, m_hi, k in reversed(self._scalar_rounds):
            lo = x >> hi_bits
            f = (lo & m_lo) ^ k
            f = ((f ^ (f >> 30)) * _M1) & _MASK64
            f = ((f ^ (f >> 27)) * _M2) & _MASK64
            x = (((x & m_hi) ^ ((f ^ (f >> 31)) & m_hi)) << lo_bits) | lo
        return x

    def index(self, position: int) -> int:
        """Return ``pi(position)`` for one position (pure Python, no numpy overhead)."""
        position = check_int("position", position, min_value=0, max_value=self._n - 1)
        if self._n == 1:
            return 0
        y = self._enc_scalar(position)
        while y >= self._n:
            y = self._enc_scalar(y)
        return y

    def position(self, value: int) -> int:
        """Return ``pi^-1(value)``: where ``value`` appears in the order."""
        value = check_int("value", value, min_value=0, max_value=self._n - 1)
        if self._n == 1:
            return 0
        x = self._dec_scalar(value)
        while x >= self._n:
            x = self._dec_scalar(x)
        return x

    # -- vector path -------------------------------------------------------------------------
    def _enc_vec(self, x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        w = self._w
        for lo_bits, m_lo, m_hi, k in zip(
            self._lo_bits, self._masks_lo, self._masks_hi, self._u64_keys, strict=True
        ):
            lo = x & np.uint64(m_lo)
            f = lo ^ k
            f ^= f >> np.uint64(30)
            f *= np.uint64(_M1)
            f ^= f >> np.uint64(27)
            f *= np.uint64(_M2)
            f ^= f >> np.uint64(31)
            f &= np.uint64(m_hi)
            f ^= x >> np.uint64(lo_bits)
            lo <<= np.uint64(w - lo_bits)
            lo |= f
            x = lo
        return x

    def _dec_vec(self, x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        w = self._w
        for lo_bits, m_lo, m_hi, k in zip(
            reversed(self._lo_bits),
            reversed(self._masks_lo),
            reversed(self._masks_hi),
            reversed(self._u64_keys),
            strict=True,
        ):
            lo = x >> np.uint64(w - lo_bits)
            f = (lo & np.uint64(m_lo)) ^ k
            f ^= f >> np.uint64(30)
            f *= np.uint64(_M1)
            f ^= f >> np.uint64(27)
            f *= np.uint64(_M2)
            f ^= f >> np.uint64(31)
            f &= np.uint64(m_hi)
            f ^= x & np.uint64(m_hi)
            f <<= np.uint64(lo_bits)
            f |= lo
            x = f
        return x

    def _walk(self, values: npt.ArrayLike, inverse: bool) -> npt.NDArray[np.int64]:
        arr = np.asarray(values)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            name = "values" if inverse else "positions"
            raise TypeError(f"{name} must be integers; got dtype {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self._n):
            name = "values" if inverse else "positions"
            raise ValueError(
                f"{name} must lie in [0, {self._n - 1}]; got min={int(arr.min())}, "
                f"max={int(arr.max())}"
            )
        if self._n == 1 or arr.size == 0:
            return np.zeros(arr.shape, dtype=np.int64) if arr.size else arr.astype(np.int64)
        scalar = self._dec_scalar if inverse else self._enc_scalar
        if arr.size <= _SCALAR_CUTOFF:
            # A numpy call costs ~1 us per op whatever its size, and a round is a dozen ops;
            # small batches (a micro-batch, a bucket's first step) are faster in pure Python.
            out = []
            for v in arr.ravel().tolist():
                v = scalar(v)
                while v >= self._n:
                    v = scalar(v)
                out.append(v)
            return np.array(out, dtype=np.int64).reshape(arr.shape)
        step = self._dec_vec if inverse else self._enc_vec
        flat = arr.astype(np.uint64, copy=False).ravel()
        y = step(flat)
        n = np.uint64(self._n)
        todo = np.flatnonzero(y >= n)
        while todo.size > _STRAGGLERS:
            z = step(y[todo])
            y[todo] = z
            todo = todo[z >= n]
        # The last few cycle walks are geometric stragglers: finish them one by one rather than
        # paying a whole vectorised pass for each extra step.
        for i in todo.tolist():
            v = scalar(int(y[i]))
            while v >= self._n:
                v = scalar(v)
            y[i] = v
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
