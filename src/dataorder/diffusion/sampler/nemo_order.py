"""``compat="nemo"`` of the bucket sampler: NeMo Automodel 0.7.0's sampler order.

Everything NeMo's sampler does differently lives here, behind the bucket order strategy the
default code uses (NOTE [ Bucket order strategies ] in :mod:`dataorder.core.buckets`), so
the default path reads as if no compatibility mode existed. Reproduced on purpose, from the
behaviour spec (nemo_behaviour.md section 4):

* the sampler draws every permutation from one ``torch.Generator`` seeded ``seed + epoch``
  (additive seeding: seed ``s`` in epoch ``e + 1`` replays seed ``s + 1`` in epoch ``e``):
  ``randperm(B)`` first if ``shuffle_buckets``, then one ``randperm(n_j)`` per bucket in visiting
  order if ``shuffle_within_bucket``, dropped buckets included; the orders are materialised
  (O(largest bucket) memory, and reaching bucket ``k`` draws those before it);
* each bucket is padded to a multiple of the number of ranks with its own first samples, then
  each rank drops its last short batch (``drop_last``): so the order depends on the number of
  ranks, which is recorded in the configuration (a state from another number is refused);
* the dynamic batch size is NeMo's float formula, without the upper clamp
  (:func:`~dataorder.diffusion.buckets.nemo_rule.nemo_dynamic_batch_size`).

NeMo's bucket rule (which buckets exist, which bucket an image goes to) is geometry, not order:
it is :mod:`dataorder.diffusion.buckets.nemo_rule`, chosen by the calculator's own
``compat="nemo"``. torch is imported only by this order, when it draws.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dataorder._validate import check_int, fail
from dataorder.core.assembly import Extra, Foreign, Mode
from dataorder.core.buckets import BucketEpochPlan, Within, identity
from dataorder.core.state import MAX_EPOCH, Scalar
from dataorder.diffusion.buckets.nemo_rule import nemo_dynamic_batch_size

if TYPE_CHECKING:
    import torch

__all__ = [
    "NEMO_BUCKET_MODE",
    "NemoBucketOrder",
    "nemo_bucket_order",
    "nemo_generator",
]

IntArray = npt.NDArray[np.int64]


def nemo_generator(seed: int, epoch: int) -> torch.Generator:
    """NeMo's generator of an epoch: seeded ``seed + epoch``."""
    import torch  # only this mode needs it: the default order does not

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


def _batches_yielded(sampler: Any, epoch: int, progress: Mapping[str, int]) -> Scalar:
    return int(sampler.epoch_plan(epoch).step_of(progress))


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
