"""Hostile input against dataorder.live (the engine: tests/helpers/hostile.py): LiveBatches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dataorder import MegatronPretrainingSampler
from dataorder.live import LiveBatches
from tests.helpers.hostile import (
    Case,
    Int,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    with_partners,
)

pytestmark = needs_setitimer


def build_cases() -> list[Case]:
    cases: list[Case] = []
    live = LiveBatches(MegatronPretrainingSampler(64, 2, 0, 2, global_batch_size=8))
    cases += kwargs_case(
        "LiveBatches.items",
        live.items,
        {"step": 3, "participant": 0, "participants": 3},
        {"step": Int(0), "participant": Int(0, 2), "participants": Int(1)},
    )
    return cases


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)
