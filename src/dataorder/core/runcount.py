"""Where a sampler's epochs start in a run-wide count (Megatron's ``consumed_samples``).

:class:`RunCount` is what a sampler says about its epochs, and :meth:`RunCount.position` the
one reading of a count, which :meth:`~dataorder.core.cursor.CursorSampler.count_position` asks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dataorder._validate import fail

__all__ = ["RunCount"]


# NOTE [ The run-wide count ]
#     A run-wide count (Megatron's ``consumed_samples``, what Megatron-LM, NeMo and the samplers'
#     ``consumed_samples`` property report) is the number of positions, padding included, the
#     run has taken since its start: each finished epoch adds the positions it has *on the layout
#     that ran it*. One implementation reads such a count, :meth:`CursorSampler.count_position`,
#     for every sampler that takes ``consumed_samples=``; a sampler says only where its epochs
#     start (:class:`RunCount`). The count is read on this sampler's layout, and it means one
#     position whatever layout counted it when
#
#     * the epochs start at the same counts on every layout the sampler continues on (a blend's
#       epochs are stretches of the run; an epoch that ends on whole global batches every
#       layout divides; an order whose configuration pins the layout, so no other layout
#       continues it), or
#     * the count falls inside the first epoch (every layout reads the same positions there; a
#       count past a layout's dropped tail starts the next epoch, and a layout that drops less
#       reads that tail first: nothing trained is lost or repeated).
#
#     Otherwise (``drop_last=True`` without a global batch size: an epoch is ``n - n mod M``
#     positions; ``drop_last=False``: ``n`` rounded up to ``M``) a count past the first epoch
#     does not say where the run is: 12 after epoch 0 and one step of 4 x 1 ranks over 10
#     samples is epoch 1 position 4, but epoch 1 position 2 on 2 x 1. Such a count is refused,
#     naming the reason; the run's ``state_dict()`` records the epoch and has no such limit.
#     A count must also fall on a step of this layout (a multiple of the block from its epoch's
#     start): one inside a step is refused, saying where the epoch starts and why.


@dataclass(frozen=True)
class RunCount:
    """Where a sampler's epochs start in a run-wide count (NOTE [ The run-wide count ]).

    Attributes:
        start: ``start(epoch)``: the run-wide count at the start of ``epoch`` on the sampler's
            layout (non-decreasing; ``start(0) == 0``).
        epoch_of: ``epoch_of(count)``: the epoch whose positions hold ``count``; a count that
            ends an epoch is the start of the next one.
        same_on_every_layout: Whether ``start`` is the same on every layout the sampler
            continues on (then a count is exact in every epoch).
        why: When it is not, why, for the refusal (``"an epoch is n - n mod M positions"``).
        per_epoch: The positions of every epoch when they are all the same (set by
            :meth:`equal_epochs`), else None: then every epoch also has the same steps on this
            layout, which :class:`~dataorder.live.LiveBatches` uses to locate a step in O(1).
    """

    start: Callable[[int], int]
    epoch_of: Callable[[int], int]
    same_on_every_layout: bool
    why: str = ""
    per_epoch: int | None = None

    @classmethod
    def equal_epochs(cls, positions: int, *, same_on_every_layout: bool, why: str = "") -> RunCount:
        """Epochs of ``positions`` positions each (a Megatron sampler's, one corpus's rows)."""
        per = max(1, positions)
        return cls(
            lambda e: e * positions, lambda c: c // per, same_on_every_layout, why, positions
        )

    def position(
        self,
        count: int,
        *,
        name: str,
        max_epoch: int,
        layout: Mapping[str, int],
        key: str,
        step_of: Callable[[int, dict[str, int]], object],
    ) -> tuple[int, dict[str, int]]:
        """``(epoch, {key: position})`` of a non-negative ``count`` on ``layout``: what
        :meth:`~dataorder.core.cursor.CursorSampler.count_position` answers (``step_of(epoch,
        progress)`` raises ValueError for progress inside a step of the layout).

        Raises:
            ValueError: Naming ``name`` and saying why (NOTE [ The run-wide count ]).
        """
        epoch = self.epoch_of(count)
        if epoch > max_epoch:
            fail(name, f"a count within {max_epoch + 1} epochs", count)
        where = ", ".join(f"{k}={v}" for k, v in layout.items())
        if epoch and not self.same_on_every_layout:
            fail(
                name,
                f"inside the first epoch ({self.start(1)} positions on this layout: {where}) "
                f"when the positions of an epoch depend on the layout ({self.why}), which a "
                f"bare count does not record: {count} is epoch {epoch} on this layout, but "
                "another epoch or position on the layout that counted it (NOTE [ The run-wide "
                "count ]: pass the run's state_dict() instead, which resumes exactly on any "
                "layout, or set a global_batch_size whose epochs end on whole global batches)",
                count,
            )
        first = self.start(epoch)
        progress = {key: count - first}
        try:
            step_of(epoch, progress)
        except ValueError as err:
            fail(
                name,
                f"on a step boundary of this layout ({where}): {count} falls inside a step "
                f"(epoch {epoch} starts at count {first} here, and {err})",
                count,
            )
        return epoch, progress
