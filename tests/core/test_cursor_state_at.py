"""``CursorSampler.state_at``: the state a sampler writes at a position, without moving."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dataorder.llm.blend import BlendedSampler
from dataorder.llm.megatron import MegatronPretrainingRandomSampler
from dataorder.llm.mixlog import MixtureLog


def _mixture_log_blend() -> BlendedSampler:
    log = MixtureLog([1, 1])
    log.set_weights(2, [1, 3])
    return BlendedSampler([40, 30], log, 2, 0, 1, 4, seed=0, total_samples=40)


@pytest.mark.parametrize(
    "make",
    [lambda: MegatronPretrainingRandomSampler(24, 2, 0, 1, seed=3), _mixture_log_blend],
    ids=["megatron-random", "blend-mixture-log"],
)
@pytest.mark.parametrize("steps", [0, 3, 6])
def test_state_at_is_the_state_after_those_steps_and_the_cursor_stays(
    make: Callable[[], Any], steps: int
) -> None:
    ahead, trained = make(), make()
    batches = iter(ahead)
    for _ in range(7):
        next(batches)
    before = ahead.state_dict()
    batches = iter(trained)
    for _ in range(steps):
        next(batches)
    assert ahead.state_at(0, steps) == trained.state_dict()  # every key, the mixture tag too
    assert ahead.state_dict() == before


@pytest.mark.parametrize(
    ("epoch", "step", "message"),
    [
        (-1, 0, "epoch must be an int in"),
        (0, -1, "step must be an int in"),
        (0, 13, r"step must be an int in \[0, 12\]; got step=13"),
        ("0", 0, "epoch must be an int"),
    ],
)
def test_state_at_names_an_out_of_range_argument(epoch: object, step: object, message: str) -> None:
    sampler = MegatronPretrainingRandomSampler(24, 2, 0, 1, seed=3)
    with pytest.raises((TypeError, ValueError), match=message):
        sampler.state_at(epoch, step)  # type: ignore[arg-type]
