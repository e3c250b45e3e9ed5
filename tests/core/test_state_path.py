"""NOTE [ The state path ]: every state is written and read by the cursor, for every sampler."""

from __future__ import annotations

from typing import Any

import pytest

from dataorder.core.assembly import SAMPLERS
from dataorder.core.cursor import CursorSampler
from dataorder.llm.blend import BlendedSampler
from dataorder.llm.mixlog import MixtureLog
from dataorder.parallel.distributed import DistributedSampler

#: The cursor's state methods: written once, in CursorSampler.
STATE_METHODS = (
    "state_dict",
    "state_at",
    "state_after",
    "state_position",
    "count_position",
    "load_state_dict",
    "describe_progress",
    "_state_at",
    "_located",
    "_checked_state",
    "_apply_state",
)


def _samplers() -> list[type[CursorSampler[Any]]]:
    """Every sampler class of the package (the registered kinds and their subclasses)."""
    # every module that defines a sampler registers it when imported
    import dataorder.diffusion.sampler.sampler
    import dataorder.llm.megatron
    import dataorder.llm.packing.sampler
    import dataorder.llm.vsl  # noqa: F401

    out: list[type[CursorSampler[Any]]] = []
    todo = list(CursorSampler.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("dataorder."):
            out.append(cls)
    names = {cls.__qualname__ for cls in out}
    # (tests register kinds of their own too: a toy sampler, a dealt blend; under xdist they may
    # have run first in this process)
    ours = {
        cls.__qualname__ for cls in SAMPLERS.values() if cls.__module__.startswith("dataorder.")
    }
    assert ours <= names
    assert {"SequentialBucketSampler", "VariableLengthSampler", "PackedSampler"} <= names
    return out


@pytest.mark.parametrize("name", STATE_METHODS)
def test_no_sampler_class_overrides_a_state_method_of_the_cursor(name: str) -> None:
    ours = getattr(CursorSampler, name)
    for cls in _samplers():
        assert getattr(cls, name) is ours, f"{cls.__qualname__}.{name} overrides the cursor's"


def _blend() -> BlendedSampler:
    log = MixtureLog([1, 1])
    log.set_weights(2, [1, 3])
    return BlendedSampler([40, 30], log, 2, 0, 1, 4, seed=0, total_samples=40)


def test_state_position_is_where_load_state_dict_puts_the_cursor_and_nothing_moves() -> None:
    ahead = _blend()
    batches = iter(ahead)
    for _ in range(5):
        next(batches)
    before = ahead.state_dict()
    state = _blend().state_at(0, 3)
    assert ahead.state_position(state) == (0, {"consumed": 6})
    assert ahead.state_dict() == before
    fresh = _blend()
    fresh.load_state_dict(state)
    assert (fresh.epoch, fresh.progress) == ahead.state_position(state)


def test_state_position_reads_a_foreign_checkpoint_and_refuses_as_load_state_dict() -> None:
    s = DistributedSampler(range(40), num_replicas=2, rank=1, seed=5, compat="torch")
    assert s.state_position({"yielded": 7}) == (0, {"consumed": 14})
    state = s.state_dict()
    with pytest.raises(ValueError, match=r"state\['yielded'\] must be consumed // "):
        s.state_position({**state, "yielded": 5})
    with pytest.raises(ValueError, match="seed is 6 in the state but 5"):
        s.state_position({**state, "config.seed": 6})
    with pytest.raises(TypeError, match="state_dict must be a dict; got list"):
        s.state_position([])  # type: ignore[arg-type]
