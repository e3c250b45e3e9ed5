"""Per-bucket batch sizes from a cost model: the largest batch that fits a reference budget.

NOTE [ Cost-model batch sizes ]
    A sample of ``t`` tokens costs ``a * t + c * t**2``: ``a`` weighs the work and memory that
    grow with every token (projections, MLP, activations), ``c`` full self-attention, whose work
    grows with the square of the sequence. A per-rank batch of ``b`` such samples costs ``b``
    times that. The budget is what a *reference* bucket of ``t_ref`` tokens costs at the batch
    size known to fit it, ``b_ref``; every bucket gets the largest batch within that budget::

        b(t) = clamp(floor(b_ref * cost(t_ref) / cost(t)), 1, max_batch_size)

    ``max_batch_size`` defaults to ``4 * b_ref`` (:data:`DEFAULT_MAX_BATCH_FACTOR`), the image
    calculator's clamp, so a tiny bucket cannot ask for a batch of thousands. A bucket dearer than
    the budget still gets 1. The coefficients are exact rationals (ints, Fractions, ``'p/q'``
    strings; floats are refused) and the division is done in Fractions, so a batch size never
    depends on float rounding and is the same on every machine.

    Which coefficients: with ``c = 0`` the batch is inversely proportional to tokens, which is
    the image calculator's pixel rule (its dynamic batch size) and what a memory budget looks
    like with memory-efficient attention. :meth:`CostModel.for_transformer` gives coefficients
    proportional to a transformer layer's forward FLOPs, for batches that take about the same
    time whatever the bucket: short clips then get larger batches than the linear rule gives,
    long ones smaller.

Example:
    >>> from dataorder.diffusion.buckets.cost import CostModel
    >>> linear = CostModel()  # 1 * t + 0 * t**2
    >>> linear.batch_sizes([1024, 4096, 256, 64], reference_tokens=1024,
    ...                    reference_batch_size=8).tolist()  # 64 tokens: 128, clamped to 32
    [8, 2, 32, 32]
    >>> clips = [32760, 7800, 1560]  # Wan 2.1 480p tokens at 81, 17 and 1 frames
    >>> linear.batch_sizes(clips, 32760, 1, max_batch_size=64).tolist()
    [1, 4, 21]
    >>> flops = CostModel.for_transformer(1536)  # Wan 2.1 1.3B's width: 6 * 1536 * t + t**2
    >>> flops.batch_sizes(clips, 32760, 1, max_batch_size=64).tolist()  # 81.8 clamped to 64
    [1, 10, 64]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import as_field, check_int, check_optional_int, fail
from dataorder.core.partition import MAX_BATCH_SIZE

__all__ = [
    "DEFAULT_MAX_BATCH_FACTOR",
    "CostModel",
    "cost_model_from_field",
    "exact_rational",
    "image_tokens",
]

#: Default upper clamp of a batch size, as a multiple of the reference batch size (as for images).
DEFAULT_MAX_BATCH_FACTOR = 4

_RATIONAL = "an int, a Fraction or a 'p/q' string"


def exact_rational(name: str, value: object, *, allow_float: bool = False) -> Fraction:
    """``value`` as an exact Fraction.

    Accepts ints (numpy ints too), :class:`fractions.Fraction` and other rationals, and strings
    such as ``'3/2'``; with ``allow_float`` also finite floats, taken at their exact binary value.
    ``bool`` is refused.

    Raises:
        TypeError: For another type.
        ValueError: For a string that is not a rational, or a float that is not finite.
    """
    what = _RATIONAL + (" or a float" if allow_float else "")
    if isinstance(value, bool):
        fail(name, what, value, TypeError)
    if isinstance(value, np.integer):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, str):
        try:
            return Fraction(value)
        except (ValueError, ZeroDivisionError):
            fail(name, what, value)
    if allow_float and isinstance(value, float | np.floating):
        if not math.isfinite(value):
            fail(name, "a finite number", value)
        return Fraction(float(value))
    fail(name, what, value, TypeError)


def _fraction_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(value)


class CostModel:
    """Per-sample cost ``token_cost * t + attention_cost * t**2`` of a sample of ``t`` tokens.

    See NOTE [ Cost-model batch sizes ] in this module for what it is for and how batch sizes
    follow from it. Instances are immutable, compare by value and round-trip through
    :meth:`config` / :meth:`from_config` as JSON.

    Args:
        token_cost: Coefficient ``a`` of ``t``, ``>= 0``: an int, a Fraction or a ``'p/q'``
            string (floats are refused, so the model is exact).
        attention_cost: Coefficient ``c`` of ``t**2``, ``>= 0``; ``a`` and ``c`` are not both 0.

    Raises:
        TypeError: If a coefficient is a float, a bool or not a number.
        ValueError: If a coefficient is negative, or both are 0.

    Example:
        >>> cm = CostModel(token_cost=6, attention_cost="1/1000")
        >>> cm.cost(1000), cm.token_cost, cm.config()
        (Fraction(7000, 1), Fraction(6, 1), {'token_cost': '6', 'attention_cost': '1/1000'})
    """

    __slots__ = ("_a", "_c")

    def __init__(
        self, token_cost: Rational | int | str = 1, attention_cost: Rational | int | str = 0
    ) -> None:
        a = exact_rational("token_cost", token_cost)
        c = exact_rational("attention_cost", attention_cost)
        if a < 0:
            fail("token_cost", "a non-negative number", token_cost)
        if c < 0:
            fail("attention_cost", "a non-negative number", attention_cost)
        if a == 0 and c == 0:
            fail("attention_cost", "positive when token_cost is 0", attention_cost)
        self._a = a
        self._c = c

    @classmethod
    def for_transformer(cls, hidden_size: int, ffn_size: int | None = None) -> CostModel:
        """Coefficients proportional to the forward FLOPs of one transformer layer.

        Per token, the attention projections cost ``8 d**2`` FLOPs and the MLP ``4 d f`` (two
        ``d x f`` matrices, 2 FLOPs per multiply-add); the attention scores and their product
        with the values cost ``4 d t``. Divided by ``4 d`` that is ``(2 d + f) * t + t**2``
        per sample: ``(6 d, 1)`` for the usual ``f = 4 d``. Cross-attention to a short text
        prompt, norms and the embedding are left out: they are small beside these terms.

        Args:
            hidden_size: The model width ``d`` (Wan 2.1: 1536 for 1.3B, 5120 for 14B).
            ffn_size: The MLP's inner width ``f``; None means ``4 * hidden_size`` (Wan 2.1 14B:
                13824).

        Example:
            >>> CostModel.for_transformer(5120, 13824)
            CostModel(token_cost=24064, attention_cost=1)
        """
        d = check_int("hidden_size", hidden_size, min_value=1)
        f = 4 * d if ffn_size is None else check_int("ffn_size", ffn_size, min_value=1)
        return cls(2 * d + f, 1)

    @property
    def token_cost(self) -> Fraction:
        """Coefficient of ``t``."""
        return self._a

    @property
    def attention_cost(self) -> Fraction:
        """Coefficient of ``t**2``."""
        return self._c

    def cost(self, tokens: int) -> Fraction:
        """Exact cost of one sample of ``tokens`` tokens.

        Raises:
            TypeError: If ``tokens`` is not an int.
            ValueError: If it is not positive.
        """
        t = check_int("tokens", tokens, min_value=1)
        return self._a * t + self._c * t * t

    def batch_size(
        self,
        tokens: int,
        reference_tokens: int,
        reference_batch_size: int,
        max_batch_size: int | None = None,
    ) -> int:
        """The largest per-rank batch of ``tokens``-token samples within the reference budget.

        ``clamp(floor(reference_batch_size * cost(reference_tokens) / cost(tokens)), 1, cap)``
        with ``cap = max_batch_size``, or ``4 * reference_batch_size`` if None; exact.

        Raises:
            TypeError: If an argument is not an int.
            ValueError: If an argument is not positive.

        Example:
            >>> CostModel().batch_size(tokens=2048, reference_tokens=4096, reference_batch_size=3)
            6
        """
        t = check_int("tokens", tokens, min_value=1)
        budget, cap = self._budget(reference_tokens, reference_batch_size, max_batch_size)
        return self._fit(t, budget, cap)

    def batch_sizes(
        self,
        tokens: npt.ArrayLike,
        reference_tokens: int,
        reference_batch_size: int,
        max_batch_size: int | None = None,
    ) -> npt.NDArray[np.int64]:
        """:meth:`batch_size` of every entry of ``tokens`` (e.g. a calculator's buckets).

        Args:
            tokens: Tokens per sample, an int array of any shape, entries ``>= 1``.
            reference_tokens: Tokens per sample of the reference bucket.
            reference_batch_size: Per-rank batch size known to fit the reference bucket, at
                most ``2**31`` (:data:`~dataorder.core.partition.MAX_BATCH_SIZE`, the largest
                per-rank batch a sampler takes).
            max_batch_size: Upper clamp, at most ``2**31``; None means
                ``4 * reference_batch_size``.

        Returns:
            int64 array of batch sizes, the shape of ``tokens``.

        Raises:
            TypeError: If ``tokens`` is not an int array or an argument is not an int.
            ValueError: If a token count or an argument is not positive, or a batch size is
                above ``2**31``.
        """
        budget, cap = self._budget(reference_tokens, reference_batch_size, max_batch_size)
        # The answers are int64 and at most the clamp: bound the clamp's operands, so a batch
        # size cannot wrap (no sampler takes a per-rank batch above MAX_BATCH_SIZE anyway).
        for name, value in (
            ("reference_batch_size", reference_batch_size),
            ("max_batch_size", max_batch_size),
        ):
            if value is not None and int(value) > MAX_BATCH_SIZE:
                fail(name, f"at most 2**31 = {MAX_BATCH_SIZE}", value)
        arr = np.asarray(tokens)
        if arr.size == 0:
            return np.zeros(arr.shape, dtype=np.int64)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            fail("tokens", "an array of ints", tokens, TypeError)
        flat = arr.astype(np.int64).ravel()
        if int(flat.min()) < 1:
            bad = int(np.flatnonzero(flat < 1)[0])
            fail(f"tokens[{bad}]", "a positive int", int(flat[bad]))
        # Few distinct token counts (one per bucket shape): exact arithmetic on each once.
        unique, inverse = np.unique(flat, return_inverse=True)
        fitted = np.array([self._fit(int(t), budget, cap) for t in unique], dtype=np.int64)
        out: npt.NDArray[np.int64] = fitted[inverse].reshape(arr.shape)
        return out

    def _budget(
        self, reference_tokens: int, reference_batch_size: int, max_batch_size: int | None
    ) -> tuple[Fraction, int]:
        rt = check_int("reference_tokens", reference_tokens, min_value=1)
        rb = check_int("reference_batch_size", reference_batch_size, min_value=1)
        cap = check_optional_int("max_batch_size", max_batch_size, min_value=1)
        return rb * (self._a * rt + self._c * rt * rt), (
            DEFAULT_MAX_BATCH_FACTOR * rb if cap is None else cap
        )

    def _fit(self, tokens: int, budget: Fraction, cap: int) -> int:
        return min(cap, max(1, math.floor(budget / (self._a * tokens + self._c * tokens * tokens))))

    def config(self) -> dict[str, str]:
        """The coefficients as exact strings (JSON-serialisable); :meth:`from_config` reverses."""
        return {"token_cost": _fraction_text(self._a), "attention_cost": _fraction_text(self._c)}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CostModel:
        """Rebuild a model from :meth:`config`.

        Raises:
            ValueError: If the keys are not exactly ``token_cost`` and ``attention_cost``.
        """
        if not isinstance(config, Mapping):
            fail("config", "a mapping", config, TypeError)
        if set(config) != {"token_cost", "attention_cost"}:
            fail("config", "a mapping with exactly token_cost and attention_cost", dict(config))
        return cls(config["token_cost"], config["attention_cost"])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CostModel):
            return NotImplemented
        return (self._a, self._c) == (other._a, other._c)

    def __hash__(self) -> int:
        return hash((self._a, self._c))

    def __repr__(self) -> str:
        a, c = _fraction_text(self._a), _fraction_text(self._c)
        a = a if self._a.denominator == 1 else repr(a)
        c = c if self._c.denominator == 1 else repr(c)
        return f"CostModel(token_cost={a}, attention_cost={c})"


def cost_model_from_field(value: object, field: str) -> CostModel:
    """:meth:`CostModel.from_config` of a calculator config's field, its errors naming it.

    Example:
        >>> cost_model_from_field({"token_cost": "x", "attention_cost": 0}, "config['cost']")
        Traceback (most recent call last):
         ...
        ValueError: config['cost']['token_cost'] must be an int, a Fraction or a 'p/q' string; \
got config['cost']['token_cost']='x'
    """
    try:
        return CostModel.from_config(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        names = {k: f"{field}[{k!r}]" for k in ("token_cost", "attention_cost")}
        names["config"] = field
        raise as_field(error, names) from None


def image_tokens(width: int, height: int, patch_side: int = 16) -> int:
    """Tokens of a ``width x height`` image: ``ceil(width / s) * ceil(height / s)``.

    ``s = patch_side`` is the pixel side of one token: the VAE's spatial compression times the
    transformer's patch (8 x 2 = 16 for SD3, Flux and most latent DiTs). A side that is not a
    multiple of ``s`` counts a partial (padded) token.

    Raises:
        TypeError: If an argument is not an int.
        ValueError: If an argument is not positive.

    Example:
        >>> image_tokens(1024, 1024), image_tokens(1344, 768), image_tokens(1000, 1000)
        (4096, 4032, 3969)
    """
    w = check_int("width", width, min_value=1)
    h = check_int("height", height, min_value=1)
    s = check_int("patch_side", patch_side, min_value=1)
    return -(-w // s) * -(-h // s)
