"""Hostile input against dataorder.parallel (the engine: tests/helpers/hostile.py):
DistributedSampler and verify_data_parallel."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dataorder import (
    DistributedSampler,
    verify_data_parallel,
)
from dataorder.core.keys import MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN
from tests.helpers.hostile import (
    MAX_DP_SIZE,
    Bool,
    Case,
    Int,
    Never,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    sampler_methods,
    use_sampler,
    with_partners,
)

pytestmark = needs_setitimer


def build_cases() -> list[Case]:
    cases: list[Case] = []

    # DistributedSampler: the dataset's length through range(n), which has a len() for any int
    def distributed_len(ctx: SimpleNamespace, v: object) -> Any:
        return DistributedSampler(range(v), num_replicas=2, rank=1)  # type: ignore[call-overload]

    cases.append(
        Case(
            "DistributedSampler",
            "len(dataset)",
            Int(0, MAX_DOMAIN, legal=10),
            distributed_len,
            use_sampler,
            names=("dataset", "len(dataset)"),
            values=("0", "np.int64", "2**62", "10**30"),
            extra=(2**62 + 1, 2**63),
        )
    )
    cases += kwargs_case(
        "DistributedSampler",
        DistributedSampler,
        {"dataset": range(10), "num_replicas": 2, "rank": 1},
        {
            "num_replicas": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
            "shuffle": Bool(),
            "seed": Int(0, MAX_SEED),
            "drop_last": Bool(),
            "compat": Never(),
        },
        use_sampler,
        extra=(2**63,),
    )
    cases += sampler_methods(
        "DistributedSampler", lambda ctx: DistributedSampler(range(10), num_replicas=2, rank=1), 2
    )

    cases += kwargs_case(
        "verify_data_parallel",
        verify_data_parallel,
        {"source": "ctx.one_rank_sampler", "raise_on_error": False},
        {
            "source": Never(),
            "num_batches": Int(1, none="accept"),
            "epoch": Int(0, none="accept"),
            "allowed_padding": Int(0, none="accept"),
            "raise_on_error": Bool(),
        },
    )

    return cases


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)
