"""Hostile input against the core (the engine: tests/helpers/hostile.py): permutations, keys,
apportionment, partitions, topologies and the batching check."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from dataorder import (
    Apportionment,
    Permutation,
    Topology,
    check_items,
    data_parallel_dims,
    data_parallel_topology,
    derive_key,
    plan_bucket_epoch,
    plan_epoch,
    plan_segments,
    quantize_weights,
    resolve_topology,
)
from dataorder.core.apportion import MAX_TOTAL
from dataorder.core.permutation import MAX_DOMAIN
from tests.helpers.hostile import (
    MAX_BATCH_SIZE,
    MAX_DP_SIZE,
    MAX_POSITIONS,
    Bool,
    Case,
    Int,
    Never,
    Real,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    use_ints,
    use_layout,
    use_permutation,
    use_topology,
    with_partners,
)

pytestmark = needs_setitimer


def build_cases() -> list[Case]:
    cases: list[Case] = []
    # permutations, keys, apportionment, partition
    cases += kwargs_case(
        "Permutation",
        Permutation,
        {"n": 10, "key": 0},
        {"n": Int(1, MAX_DOMAIN), "key": Int(0, 2**64 - 1)},
        use_permutation,
    )
    cases += [
        Case(
            "Permutation.index", "position", Int(0, 9), lambda ctx, v: Permutation(10, 0).index(v)
        ),
        Case(
            "Permutation.position",
            "value",
            Int(0, 9),
            lambda ctx, v: Permutation(10, 0).position(v),
        ),
    ]
    cases += kwargs_case(
        "derive_key",
        derive_key,
        {"seed": 0, "epoch": 0, "stream": "s", "purpose": "p"},
        {
            "seed": Int(0, math.inf),
            "epoch": Int(0, math.inf),
            "stream": Never(),
            "purpose": Never(),
        },
        use_ints,
    )
    cases.append(
        Case(
            "derive_key",
            "extra",
            Int(0, math.inf),
            lambda ctx, v: derive_key(0, epoch=0, stream="s", purpose="p", extra=(v,)),  # type: ignore[arg-type]
            use_ints,
        )
    )
    cases += kwargs_case(
        "Apportionment",
        Apportionment,
        {"weights": [1, 2], "key": 0},
        {"key": Int(0, 2**64 - 1)},
        lambda a: a.counts_at([10]),
    )
    cases.append(
        Case(
            "Apportionment",
            "weights[1]",
            Int(0, legal=2),
            lambda ctx, v: Apportionment([1, v]),  # type: ignore[list-item]
            lambda a: a.counts_at([10]),
            names=("weights[1]", "weights"),  # a sum too large names sum(weights)
        )
    )
    cases += kwargs_case(
        "quantize_weights",
        quantize_weights,
        {"weights": [0.5, 0.5]},
        {"total": Int(2, MAX_TOTAL, legal=2**20)},
        use_ints,
    )
    cases.append(
        Case(
            "quantize_weights",
            "weights[1]",
            Real(),
            lambda ctx, v: quantize_weights([0.5, v]),  # type: ignore[list-item]
            use_ints,
        )
    )
    cases += kwargs_case(
        "plan_epoch",
        plan_epoch,
        {"n": 10, "per_rank": 2, "dp_size": 2, "tail": "drop"},
        {
            "n": Int(0, MAX_POSITIONS),
            "per_rank": Int(1, MAX_BATCH_SIZE),
            "dp_size": Int(1, MAX_DP_SIZE),
            "tail": Never(),
            "unit": Int(4, legal=4, none="accept"),
            "round_to": Int(1),
        },
        use_layout,
    )
    segments = {"n": [4, 4], "per_rank": [2, 2], "dp_size": 2, "tail": "drop"}
    cases += kwargs_case(
        "plan_segments",
        plan_segments,
        segments,
        {"dp_size": Int(1, MAX_DP_SIZE), "round_to": Int(1), "tail": Never()},
    )
    cases += [
        Case(
            "plan_segments",
            "n[0]",
            Int(0, MAX_POSITIONS, element=True),
            lambda ctx, v: plan_segments([v, 4], per_rank=[2, 2], dp_size=2, tail="drop"),
            names=("n[0]", "n"),
        ),
        Case(
            "plan_segments",
            "per_rank[0]",
            Int(1, MAX_BATCH_SIZE, element=True),
            lambda ctx, v: plan_segments([4, 4], per_rank=[v, 2], dp_size=2, tail="drop"),
            names=("per_rank[0]", "per_rank"),
        ),
    ]
    epoch = {
        "order": [0, 1],
        "sizes": [4, 4],
        "batch_sizes": [2, 2],
        "dp_size": 2,
        "drop_last": True,
    }
    cases += kwargs_case(
        "plan_bucket_epoch",
        plan_bucket_epoch,
        epoch,
        {"dp_size": Int(1, MAX_DP_SIZE), "drop_last": Bool(), "round_to": Int(1)},
    )
    cases.append(
        Case(
            "plan_bucket_epoch",
            "batch_sizes[0]",
            Int(1, MAX_BATCH_SIZE, element=True),
            lambda ctx, v: plan_bucket_epoch([0, 1], [4, 4], [v, 2], dp_size=2, drop_last=True),
            names=("batch_sizes[0]", "batch_sizes"),
        )
    )

    # topology
    cases += kwargs_case(
        "Topology",
        Topology,
        {"dp_rank": 1, "dp_size": 2},
        {
            "dp_rank": Int(0, 1),
            "dp_size": Int(2, MAX_DP_SIZE, legal=2),
            "replica_rank": Int(0, 0),
            "replica_size": Int(1),
        },
        use_topology,
    )
    cases += kwargs_case(
        "resolve_topology",
        resolve_topology,
        {"num_replicas": 2, "rank": 1},
        {
            "num_replicas": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "rank": Int(0, 1, none="either"),
        },
        use_topology,
    )
    cases += kwargs_case("data_parallel_dims", data_parallel_dims, {}, {"mesh": Never()})
    cases += kwargs_case("data_parallel_topology", data_parallel_topology, {}, {"mesh": Never()})

    # checks
    cases += kwargs_case(
        "check_items",
        check_items,
        {"items_by_dp_rank": [[0, 1], [2, 3]]},
        {"items_by_dp_rank": Never(), "allowed_padding": Int(0, none="accept"), "full": Bool()},
    )
    return cases


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)
