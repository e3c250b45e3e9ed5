"""``compat="nemo"`` for diffusion: NeMo Automodel 0.7.0's bucket sampler order and bucket rule.

Everything NeMo does differently lives here, behind the strategies the default code uses
(NOTE [ Bucket order strategies ] in :mod:`dataorder.diffusion.bucket_plan`, NOTE [ Bucket rules ]
in :mod:`dataorder.diffusion.buckets`), so the default path reads as if no compatibility mode
existed. Reproduced on purpose, from the behaviour spec (nemo_behaviour.md sections 2 and 4):

* the sampler draws every permutation from one ``torch.Generator`` seeded ``seed + epoch``
  (additive seeding: seed ``s`` in epoch ``e + 1`` replays seed ``s + 1`` in epoch ``e``):
  ``randperm(B)`` first if ``shuffle_buckets``, then one ``randperm(n_j)`` per bucket in visiting
  order if ``shuffle_within_bucket``, dropped buckets included; the orders are materialised
  (O(largest bucket) memory, and reaching bucket ``k`` draws those before it);
* each bucket is padded to a multiple of the number of ranks with its own first samples, then
  each rank drops its last short batch (``drop_last``): so the order depends on the number of
  ranks, which is recorded in the configuration (a state from another number is refused);
* the dynamic batch size is NeMo's float formula, without the upper clamp.

The bucket rule (which buckets exist, which bucket an image goes to) is NeMo's too; see
:class:`NemoBucketRule`. torch is imported only by the sampler order, when it draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.assembly import Extra, Foreign, Mode
from dataorder.core.state import MAX_EPOCH, Scalar
from dataorder.diffusion.bucket_plan import BucketEpochPlan, Within, identity
from dataorder.diffusion.lookup import Lookup

if TYPE_CHECKING:
    import torch

__all__ = [
    "NEMO_ASPECT_RATIOS",
    "NEMO_BUCKET_MODE",
    "NemoBucketOrder",
    "NemoBucketRule",
    "nemo_bucket_order",
    "nemo_dynamic_batch_size",
    "nemo_generator",
]

#: NeMo's 14 nominal (w, h) ratios, in its order.
NEMO_ASPECT_RATIOS: tuple[tuple[int, int], ...] = (
    (1, 2),
    (9, 16),
    (2, 3),
    (3, 4),
    (4, 5),
    (1, 1),
    (5, 4),
    (4, 3),
    (3, 2),
    (16, 10),
    (5, 3),
    (16, 9),
    (2, 1),
    (21, 9),
)

IntArray = npt.NDArray[np.int64]


def nemo_generator(seed: int, epoch: int) -> torch.Generator:
    """NeMo's generator of an epoch: seeded ``seed + epoch``."""
    import torch  # only this mode needs it: the bucket rule and the default order do not

    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return generator


def nemo_bucket_order(num_buckets: int, *, seed: int, epoch: int, shuffle: bool) -> IntArray:
    """NeMo Automodel's bucket order: ``randperm(B)`` of a generator seeded ``seed + epoch``."""
    import torch

    if not shuffle:
        return np.arange(num_buckets, dtype=np.int64)
    order: IntArray = torch.randperm(num_buckets, generator=nemo_generator(seed, epoch)).numpy()
    return order


def _table(perm: IntArray) -> Within:
    def within(local: IntArray) -> IntArray:
        return perm[local]

    return within


class NemoBucketOrder:
    """The bucket order strategy of ``compat="nemo"`` (see the module docstring).

    ``manual_seed(seed + epoch)`` must stay below 2**64 for any epoch a run reaches: seeds are
    capped at ``MAX_SEED`` (2**63 - 1) and epochs at ``MAX_EPOCH``, as in every mode.
    """

    name = "nemo"
    elastic = False

    def __init__(self, seed: int, *, shuffle_buckets: bool, num_replicas: int) -> None:
        self.seed = seed
        self._shuffle_buckets = shuffle_buckets
        self._num_replicas = num_replicas

    def bucket_order(self, num_buckets: int, *, epoch: int, shuffle: bool) -> IntArray:
        return nemo_bucket_order(num_buckets, seed=self.seed, epoch=epoch, shuffle=shuffle)

    def round_to(self, dp_size: int) -> int:
        return dp_size

    def interleave_key(self, epoch: int) -> int:
        fail("bucket_order", "'sequential' with compat='nemo' (NeMo's order)", "interleaved")

    def within_orders(
        self, *, epoch: int, shuffle: bool
    ) -> Callable[[int, BucketEpochPlan], Within]:
        import torch

        seed = self.seed

        if not shuffle:
            return lambda k, plan: identity
        drawn: list[Within] = []
        generators: list[torch.Generator] = []

        def nemo(k: int, plan: BucketEpochPlan) -> Within:
            if not generators:
                generators.append(nemo_generator(seed, epoch))
                if self._shuffle_buckets:  # the bucket order was the stream's first draw
                    torch.randperm(plan.num_runs, generator=generators[0])
            while len(drawn) <= k:
                size = int(plan.bucket_sizes[plan.buckets[len(drawn)]])
                drawn.append(_table(torch.randperm(size, generator=generators[0]).numpy()))
            return drawn[k]

        return nemo

    def config(self) -> dict[str, Scalar]:
        # 0: the order comes from torch, not from dataorder's constructions; the number of
        # ranks, because NeMo pads each bucket to a multiple of it (not elastic)
        return {"order_version": 0, "num_replicas": self._num_replicas}

    def batch_size_fn(
        self, dataset: Any
    ) -> Callable[[tuple[int, int], int, tuple[int, int]], int] | None:
        return nemo_dynamic_batch_size


# NOTE [ NeMo bucket states ]
#     NeMo Automodel's sampler saves ``{"epoch": e, "batches_yielded": k}`` and, on load, skips
#     ``k`` batches of the next pass. In this mode (NeMo's order) such a state loads and the cursor
#     goes to step ``k`` of epoch ``e``, which is where NeMo's sampler continues in a loop that
#     calls ``set_epoch(e)`` (NeMo applies the skip to whatever epoch is set when the pass
#     starts: B2). ``k`` is taken as NeMo wrote it: after a NeMo resume its count restarts from 0
#     (B1), so such a checkpoint resumes where NeMo would, not where the run really was. Our
#     states carry ``batches_yielded`` in this mode (counted from the epoch's start), so NeMo's
#     sampler can load them too.
#     The state stays within MAX_STATE_BYTES (NOTE [ State size ] in dataorder.core.state) at
#     the largest legal values because this mode records ``config.num_replicas`` (it is not
#     elastic) and the state does not repeat it as ``layout.num_replicas`` (a state that does,
#     as older ones did, still loads).


def _batches_yielded(sampler: Any) -> Scalar:
    return int(sampler.epoch_plan().step_of(sampler.progress))


def _check_batches_yielded(
    sampler: Any, value: object, epoch: int, progress: Mapping[str, int], layout: Mapping[str, int]
) -> None:
    step = sampler.epoch_plan(epoch).step_of(progress)
    if value != step:
        raise ValueError(
            "state['batches_yielded'] must be the steps done at state['bucket'], "
            f"state['consumed'] = {step}; got {value!r}"
        )


def _place_nemo(sampler: Any, state: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    epoch = check_int("state['epoch']", state["epoch"], min_value=0, max_value=MAX_EPOCH)
    plan = sampler.epoch_plan(epoch)
    k = check_int("state['batches_yielded']", state["batches_yielded"], min_value=0)
    # NeMo skips min(k, the epoch's batches): a count past the end leaves an empty pass
    return epoch, plan.progress_at(min(k, plan.num_steps))


#: ``compat="nemo"`` of the bucket sampler (NOTE [ NeMo bucket states ]).
NEMO_BUCKET_MODE = Mode(
    "nemo",
    build=NemoBucketOrder,
    records={"nemo": {"compat": "nemo"}},
    summary="NeMo Automodel's order",
    extras=(Extra("batches_yielded", _batches_yielded, _check_batches_yielded, required=False),),
    foreign=(
        Foreign(
            frozenset({"epoch", "batches_yielded"}), "a NeMo Automodel sampler state", _place_nemo
        ),
    ),
    layout_in_config=True,
)


def nemo_dynamic_batch_size(
    resolution: tuple[int, int], base_batch_size: int, base_resolution: tuple[int, int]
) -> int:
    """NeMo's ``max(1, int(base / ((w * h) / (bw * bh))))``: float division, no upper clamp."""
    (w, h), (bw, bh) = resolution, base_resolution
    return max(1, int(base_batch_size / ((w * h) / (bw * bh))))


# -- the bucket rule ------------------------------------------------------------------------------
_NEMO_CHUNK = 1 << 16


def nemo_resolutions(budget: int, q: int) -> list[tuple[int, int]]:
    """NeMo 0.7.0's bucket generation, step by step (nemo_behaviour.md section 2)."""
    seen: dict[tuple[int, int], None] = {}
    for aw, ah in NEMO_ASPECT_RATIOS:
        r = aw / ah
        # Python's round() (half to even) on float quotients, as NeMo does.
        h = round(int(math.sqrt(budget / r)) / q) * q
        w = round(int(h * r) / q) * q
        while w * h > budget:
            if w >= h:
                w -= q
            else:
                h -= q
        if w < q or h < q:
            continue
        seen.setdefault((w, h), None)
    return sorted(seen, key=lambda wh: wh[0] / wh[1])


class _NemoTable:
    """NeMo's rule: least ``|bucket_ar - W / H|`` in float64, ties to the first bucket."""

    def __init__(self, ar: npt.NDArray[np.float64]) -> None:
        self.ar = ar
        distinct = np.unique(ar)
        self.thresholds = (distinct[:-1] + distinct[1:]) / 2

    def positions(
        self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64], x: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        out = np.empty(x.shape, dtype=np.int64)
        for s in range(0, x.size, _NEMO_CHUNK):
            part = x[s : s + _NEMO_CHUNK]
            out[s : s + _NEMO_CHUNK] = np.abs(self.ar[None, :] - part[:, None]).argmin(axis=1)
        return out


class _NemoAssigner:
    """NeMo's choice of bucket: least ``|bucket_ar - W / H|`` in float64, ties to the first."""

    def __init__(self, resolutions: Sequence[tuple[int, int]]) -> None:
        self._ar = np.array([w / h for w, h in resolutions], dtype=np.float64)
        every = np.arange(len(resolutions), dtype=np.int64)
        self._lookup = Lookup(_NemoTable(self._ar), every)

    def choose(self, w: int, h: int) -> int:
        x = w / h
        return min(range(self._ar.size), key=lambda i: abs(float(self._ar[i]) - x))

    def assign(self, w: npt.NDArray[np.int64], h: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        ids = np.empty(w.shape, dtype=np.int64)
        self._lookup.lookup(w, h, ids)
        return ids


class NemoBucketRule:
    """NeMo Automodel 0.7.0's bucket rule, behind :class:`~dataorder.diffusion.buckets.BucketRule`.

    Its 14 aspect ratios, its rounding (half to even, which makes some presets asymmetric), its
    bucket order, its image-to-bucket rule (least ``|bucket_ar - W / H|`` in floating point, ties
    to the first bucket) and its unclamped dynamic batch size.
    """

    name: ClassVar[str] = "nemo"

    def __init__(self, aspect_ratios: object = None, no_upscale: bool = False) -> None:
        if aspect_ratios is not None:
            fail(
                "aspect_ratios", "None with compat='nemo' (NeMo's ratios are fixed)", aspect_ratios
            )
        if no_upscale:
            fail("no_upscale", "False with compat='nemo' (NeMo has no such rule)", no_upscale)

    def resolutions(self, budget: int, quantization: int) -> list[tuple[int, int]]:
        return nemo_resolutions(budget, quantization)

    def assigner(self, resolutions: Sequence[tuple[int, int]], quantization: int) -> _NemoAssigner:
        return _NemoAssigner(resolutions)

    def dynamic_batch_size(
        self, w: int, h: int, base: int, bw: int, bh: int, max_batch_size: int | None
    ) -> int:
        size = nemo_dynamic_batch_size((w, h), base, (bw, bh))
        return size if max_batch_size is None else min(size, max_batch_size)

    def config(self) -> dict[str, Any]:
        return {"aspect_ratios": None, "no_upscale": False}
