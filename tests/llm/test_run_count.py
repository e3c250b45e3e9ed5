"""A run-wide count (``consumed_samples=``) means one thing for every sampler that takes one.

NOTE [ The run-wide count ] in :mod:`dataorder.core.cursor`: the count is read once, by the
cursor, on the sampler's layout. Where epochs start at the same count on every layout (a blend,
a packed mixture, epochs of whole global batches, an order that pins the layout) it is exact in
every epoch and on any layout that divides it; where they do not, a count inside the first
epoch is exact and one past it is refused, naming why, instead of landing elsewhere.
"""

from __future__ import annotations

from typing import Any

import pytest

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler, MegatronPretrainingSampler
from dataorder.llm.packing import PackedSampler

TEN_ROWS = [8] * 10  # ten documents of one row of 8 tokens each


def _rows(samplers: list[Any]) -> list[Any]:
    """Every rank's rows of each step, in rank order, for what is left of the cursor's pass."""
    per_rank = [list(s) for s in samplers]
    return [row for step in zip(*per_rank, strict=True) for mb in step for row in mb]


def test_a_packed_count_past_the_first_epoch_on_padded_epochs_is_refused() -> None:
    """2 x 2 ranks, global batch 4, drop_last=False: epoch 0 is 12 rows (10 and 2 padding) and
    one more global batch makes 16; on 1 x 2 ranks an epoch is 10 rows, and 16 would be epoch 1
    row 6 (rows 4 and 5 of epoch 1 never read)."""
    kw: dict[str, Any] = {"seed": 0, "drop_last": False}
    four = [PackedSampler(TEN_ROWS, 8, 1, r, 4, 4, **kw) for r in range(4)]
    _rows(four)
    for s in four:
        s.set_epoch(1)
    it = [iter(s) for s in four]
    for i in it:
        next(i)
    assert four[0].consumed_samples == 16
    with pytest.raises(ValueError, match="consumed_samples must be inside the first epoch"):
        PackedSampler(TEN_ROWS, 8, 1, 0, 2, 4, consumed_samples=16, **kw)
    # the state names the epoch: exact on the new layout
    two = [PackedSampler(TEN_ROWS, 8, 1, r, 2, 4, **kw) for r in range(2)]
    for s in two:
        s.load_state_dict(four[0].state_dict())
    fresh = [PackedSampler(TEN_ROWS, 8, 1, r, 2, 4, **kw) for r in range(2)]
    for s in fresh:
        s.set_epoch(1)
    assert _rows(two) == _rows(fresh)[4:]


@pytest.mark.parametrize(
    "make",
    [
        lambda r, w, **kw: PackedSampler(TEN_ROWS, 8, 1, r, w, seed=0, **kw),
        lambda r, w, **kw: MegatronPretrainingSampler(10, 1, r, w, **kw),
        lambda r, w, **kw: MegatronPretrainingRandomSampler(10, 1, r, w, seed=0, **kw),
    ],
    ids=["packed", "megatron-single", "megatron-random"],
)
def test_a_count_past_the_first_epoch_of_dropped_tails_is_refused(make: Any) -> None:
    """Defaults (no global batch, drop_last=True): 4 x 1 ranks read 8 of 10 per epoch, so after
    epoch 0 and one step the count is 12; on 2 x 1 ranks (10 per epoch) it would be epoch 1
    position 2, two rows read again."""
    four = [make(r, 4) for r in range(4)]
    _rows(four)
    for s in four:
        s.set_epoch(1)
    for i in [iter(s) for s in four]:
        next(i)
    assert four[0].consumed_samples == 12
    with pytest.raises(ValueError, match=r"inside the first epoch .* drop") as info:
        make(0, 2, consumed_samples=12)
    assert "got consumed_samples=12" in str(info.value)
    inside = [make(r, 2, consumed_samples=4) for r in range(2)]  # inside epoch 0: every layout
    assert (inside[0].epoch, inside[0].progress) == (0, {"consumed": 4})


@pytest.mark.parametrize("old", [2, 4])
@pytest.mark.parametrize("new", [1, 2, 4])
def test_a_packed_count_of_whole_global_batches_is_exact_on_any_layout(old: int, new: int) -> None:
    """Global batch 4 with drop_last=True: every layout's epoch is 8 rows, so a count two
    epochs and one global batch in is the same position on every layout."""
    kw: dict[str, Any] = {"seed": 3}
    lengths = [5, 9, 3, 8, 8, 12, 4, 7, 6, 8, 2, 9, 10]
    ran = [PackedSampler(lengths, 8, 1, r, old, 4, **kw) for r in range(old)]
    per_epoch = ran[0].dealt_blocks().blocks.total_positions
    count = 2 * per_epoch + 4
    resumed = [
        PackedSampler(lengths, 8, 1, r, new, 4, consumed_samples=count, **kw) for r in range(new)
    ]
    assert {(s.epoch, s.progress["consumed"]) for s in resumed} == {(2, 4)}
    assert resumed[0].consumed_samples == count
    fresh = [PackedSampler(lengths, 8, 1, r, new, 4, **kw) for r in range(new)]
    for s in fresh:
        s.set_epoch(2)
    read = sorted(map(str, _rows(resumed)))
    whole = _rows(fresh)
    assert len(read) == len(whole) - 4
    assert set(read) <= set(map(str, whole))


def test_every_constructor_reads_the_count_as_the_cursor_does() -> None:
    cases = [
        (
            lambda **kw: MegatronPretrainingRandomSampler(50, 2, 1, 3, global_batch_size=6, **kw),
            102,
        ),
        (
            lambda **kw: BlendedSampler([6, 4], [3, 1], 2, 0, 2, 4, seed=0, total_samples=8, **kw),
            20,
        ),
        (
            lambda **kw: PackedSampler(
                None, 8, 1, 0, 2, 4, seed=1, mixture=([TEN_ROWS, TEN_ROWS], [1, 1]), **kw
            ),
            28,
        ),
    ]
    for make, count in cases:
        s = make(consumed_samples=count)
        assert (s.epoch, s.progress) == make().count_position(count)
        assert s.consumed_samples == count


def test_a_count_inside_a_step_says_where_the_epoch_starts() -> None:
    with pytest.raises(ValueError) as info:
        BlendedSampler([6, 4], [3, 1], 2, 0, 2, 4, seed=0, total_samples=8, consumed_samples=10)
    message = str(info.value)
    assert "consumed_samples must be on a step boundary of this layout" in message
    assert "epoch 1 starts at count 8 here" in message
