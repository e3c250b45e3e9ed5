"""The sampler assembly (dataorder.core.assembly): a sampler declared from parts.

A toy sampler written the way NOTE [ Adding a sampler or a compat mode ] says (one class: a
constructor, ``_make_plan`` and a ``Schema``; two compat modes registered in one ``Modes``) gets
everything else from the declaration: its state, ``from_state``, ``describe_progress``, its place
in ``dataorder.samplers()``, a foreign checkpoint of its second mode, and the whole contract suite
with the loop recipes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dataorder.core.assembly import (
    SAMPLERS,
    AssembledSampler,
    Detail,
    Extra,
    Foreign,
    Given,
    Layout,
    Mode,
    Modes,
    Schema,
    flag,
    recorded,
)
from dataorder.core.blockplan import BlockPlan
from dataorder.core.cursor import CursorBatchSampler
from dataorder.core.partition import plan_epoch
from dataorder.core.state import Scalar
from dataorder.testing import SamplerCase, check_contract


class _Forward:
    name = "forward"
    elastic = True

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def config(self) -> dict[str, Scalar]:
        return {"order_version": 1}

    def sample(self, n: int, epoch: int, p: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return (p + self.seed + epoch) % n


class _Backward(_Forward):
    name = "backward"

    def sample(self, n: int, epoch: int, p: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return (n - 1 - p - self.seed - epoch) % n


def _tally(sampler: Any, epoch: int, progress: Mapping[str, int]) -> Scalar:
    return int(progress["consumed"]) % 7


def _check_tally(sampler: Any, value: object, epoch: int, progress: Any, layout: Any) -> None:
    if value != progress["consumed"] % 7:
        raise ValueError(f"state['tally'] must be consumed mod 7; got {value!r}")


def _place_legacy(sampler: Any, state: Mapping[str, Any]) -> tuple[int, dict[str, int]]:
    return int(state["legacy_epoch"]), {"consumed": int(state["legacy_done"])}


_MODES = Modes(
    family="ToySampler",
    field="order",
    modes=(
        Mode("default", build=_Forward, records={"forward": {"compat": "default"}}, summary="a"),
        Mode(
            "backward",
            build=_Backward,
            records={"backward": {"compat": "backward"}},
            summary="the legacy order",
            extras=(Extra("tally", _tally, _check_tally, required=False),),
            foreign=(
                Foreign(
                    frozenset({"legacy_epoch", "legacy_done"}), "a legacy state", _place_legacy
                ),
            ),
        ),
    ),
)


class ToySampler(AssembledSampler[list[int]], CursorBatchSampler[list[int]]):
    """A rotation of ``range(n)`` per epoch, forward or backward: the test's sampler."""

    schema = Schema(
        kind="toy_for_tests",
        fields=(recorded("n"), flag("drop_last"), recorded("seed")),
        layout=Layout(rank="rank", size="world", others=("per_rank",)),
        modes=_MODES,
        given=(Given("note", "anything (the state holds none)", required=False),),
        details=(Detail("rotation", lambda s: f"by {s.seed}"),),
        steps="batches",
    )

    def __init__(
        self,
        n: int,
        per_rank: int,
        rank: int,
        world: int,
        *,
        seed: int = 0,
        drop_last: bool = True,
        compat: str = "default",
        note: Any = None,
    ) -> None:
        super().__init__()
        self.n, self.per_rank, self.rank, self.world = n, per_rank, rank, world
        self.seed, self.drop_last, self.note = seed, drop_last, note
        self._strategy: _Forward = _MODES.choose(compat).build(seed)

    @property
    def dp_rank(self) -> int:
        return self.rank

    @property
    def samples_dropped(self) -> int:
        return self._blocks(self.per_rank, self.world).dropped

    @property
    def samples_padded(self) -> int:
        return 0

    def _blocks(self, per_rank: int, world: int) -> Any:
        return plan_epoch(self.n, per_rank=per_rank, dp_size=world, tail="drop")

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> BlockPlan[list[int]]:
        blocks = self._blocks(layout["per_rank"], layout["world"])
        order = self._strategy

        def rows(rank: int) -> Callable[[npt.NDArray[np.int64]], list[list[int]]]:
            return lambda p: order.sample(self.n, epoch, p).tolist()  # type: ignore[no-any-return]

        return BlockPlan(blocks, "contiguous", rows)


def test_a_declared_sampler_is_registered_and_writes_its_state() -> None:
    assert SAMPLERS["toy_for_tests"] is ToySampler
    s = ToySampler(10, 2, 0, 2, seed=3, compat="backward")
    next(iter(s))
    state = s.state_dict()
    assert state["kind"] == "toy_for_tests"
    assert state["config.order"] == "backward"
    assert (state["config.n"], state["config.drop_last"], state["config.seed"]) == (10, 1, 3)
    assert (state["layout.per_rank"], state["layout.world"]) == (2, 2)
    assert state["tally"] == 4  # the mode's extra key, at the end
    assert list(state)[-1] == "tally"
    lines = dict(s.describe_progress())
    assert lines["rotation"] == "by 3"
    assert lines["batches"] == "1 of 2 done; 2 left on every rank"  # a live pass restarts


def test_from_state_rebuilds_from_the_declaration_and_refuses_unknown_keywords() -> None:
    s = ToySampler(10, 2, 0, 2, seed=3, compat="backward")
    next(iter(s))
    again = ToySampler.from_state(s.state_dict(), rank=1)
    assert (again.n, again.seed, again.rank, again.world) == (10, 3, 1, 2)
    assert again._strategy.name == "backward"
    assert next(iter(again)) == s.batch_at(1, rank=1)
    with pytest.raises(TypeError, match="unexpected keyword 'seeed'"):
        ToySampler.from_state(s.state_dict(), seeed=3)
    elastic = ToySampler.from_state(s.state_dict(), dp_size=4, per_rank=1)
    assert (elastic.world, elastic.per_rank) == (4, 1)


def test_extra_keys_and_foreign_states_follow_the_mode() -> None:
    back = ToySampler(10, 2, 0, 2, compat="backward")
    state = back.state_dict()
    with pytest.raises(ValueError, match=r"state\['tally'\] must be consumed mod 7"):
        ToySampler(10, 2, 0, 2, compat="backward").load_state_dict({**state, "tally": 5})
    forward = ToySampler(10, 2, 0, 2)
    assert "tally" not in forward.state_dict()  # only the mode that declares it records it
    legacy = {"legacy_epoch": 2, "legacy_done": 4}
    back.load_state_dict(legacy)
    assert (back.epoch, back.progress) == (2, {"consumed": 4})
    with pytest.raises(ValueError, match="build this sampler with compat='backward'"):
        forward.load_state_dict(legacy)
    with pytest.raises(ValueError, match="compat must be one of 'default', 'backward'"):
        ToySampler(10, 2, 0, 2, compat="sideways")


@pytest.mark.parametrize("compat", ["default", "backward"])
def test_the_contract_suite_passes_on_the_declared_sampler(compat: str) -> None:
    case = SamplerCase(
        name=f"toy-{compat}",
        make=lambda rank, world: ToySampler(12, 2, rank, world, seed=1, compat=compat),
        dataset_size=12,
        dp_size=2,
        elastic_dp_sizes=(1,),
    )
    check_contract(case, resume_points=8, recipes=("dataloader", "stateful-0", "peek"))
