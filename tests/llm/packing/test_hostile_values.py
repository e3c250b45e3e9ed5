"""Hostile input against dataorder.llm.packing (the engine: tests/helpers/hostile.py): PackedSampler
(one corpus and a mixture) and the packing functions it is built of."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dataorder.core.dealing import MAX_COST
from dataorder.core.keys import MAX_SEED
from dataorder.llm.packing import (
    DocumentLengths,
    DocumentRange,
    MegatronStyle,
    PackedDataset,
    PackedSampler,
    PackingPlan,
    deal,
    deal_bounds,
    pack_window,
)
from dataorder.llm.packing.dataset import SequenceTokens
from dataorder.llm.packing.plan import MAX_CHUNK, MAX_PASS, MAX_SEQ_LEN, MAX_WINDOW
from tests.helpers.hostile import (
    MAX_BATCH_SIZE,
    MAX_DP_SIZE,
    MAX_POSITIONS,
    Bool,
    Case,
    Domain,
    Int,
    Never,
    Real,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    sampler_methods,
    use_ints,
    use_sampler,
    with_partners,
)

pytestmark = needs_setitimer

WEB = [5, 3, 9, 2, 7, 100, 1, 40] * 4
CODE = [50, 30, 9, 20] * 4


def use_plan(plan: PackingPlan) -> None:
    stats = plan.stats()
    use_ints([stats.rows, stats.tokens_padded, int(plan.fill_histogram().sum())])
    for epoch in (plan.epoch(0), plan.epoch(MAX_PASS)):
        rows = epoch.rows([0, epoch.num_rows - 1])
        if sum(b - a for row in rows for _, a, b in row) > 2 * plan.seq_len:
            raise AssertionError(f"rows past seq_len: {rows}")
        use_ints([int(c) for c in epoch.costs([0])] + [epoch.tokens_from(0)])


def use_packed(s: PackedSampler) -> None:
    use_sampler(s)
    use_ints([s.tokens_dropped, s.tokens_padded, s.documents_split])


def build_cases() -> list[Case]:
    """PackedSampler (one corpus and a mixture) and the packing functions it is built of."""
    one_base = {
        "lengths": WEB, "seq_len": 16, "micro_batch_size": 2, "data_parallel_rank": 1,
        "data_parallel_size": 2, "seed": 0, "chunk": 4, "window": 8,
    }  # fmt: skip
    shared: dict[str, Domain] = {
        "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
        "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
        "data_parallel_rank": Int(0, 1, none="either"),
        "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
        "seed": Int(0, MAX_SEED),
        "window": Int(1, MAX_WINDOW, legal=8, none="accept"),  # None: default_window(chunk)
        "chunk": Int(1, MAX_CHUNK, legal=4),
        "split": Never(),
        "long_documents": Never(),
        "drop_last": Bool(),
    }
    cases = kwargs_case(
        "PackedSampler",
        PackedSampler,
        one_base,
        {
            **shared,
            "lengths": Never(),
            # up to 2**62, but one global batch must fit the corpus (refused naming it)
            "global_batch_size": Int(4, legal=8, none="accept"),
            "consumed_samples": Int(0),
            "total_rows": Never(none="accept"),
        },
        use_packed,
    )
    cases += kwargs_case(
        "PackedSampler",
        PackedSampler,
        {**one_base, "drop_last": False, "global_batch_size": 8},
        {"pad_samples_to_global_batch_size": Bool()},
        use_packed,
    )
    cases.append(
        Case(
            "PackedSampler",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            lambda ctx, v: PackedSampler([v, *WEB[1:]], 16, 2, 1, 2, seed=0, chunk=4, window=8),
            use_packed,
            names=("lengths[0]", "lengths"),
            extra=(2**31 - 1, 2**31),  # NOTE [ Length bounds ]: the largest length, and past it
        )
    )
    mix_base = {
        **one_base, "lengths": None, "global_batch_size": 4, "mixture": ([WEB, CODE], [2, 1]),
    }  # fmt: skip
    cases += kwargs_case(
        "PackedSampler(mixture=)",
        PackedSampler,
        mix_base,
        {
            **shared,
            # up to 2**62, but at most total_rows (refused naming global_batch_size)
            "global_batch_size": Int(4, legal=8),
            "consumed_samples": Int(0, legal=8),
            "total_rows": Int(4, MAX_POSITIONS, legal=40, none="accept"),
            "mixture": Never(),
        },
        use_packed,
    )
    cases.append(
        Case(
            "PackedSampler(mixture=)",
            "mixture[1][0]",
            Real(),
            lambda ctx, v: PackedSampler(**{**mix_base, "mixture": ([WEB, CODE], [v, 1])}),
            use_packed,
        )
    )

    def one(ctx: SimpleNamespace) -> PackedSampler:
        return PackedSampler(**one_base)  # type: ignore[arg-type]

    def mix(ctx: SimpleNamespace) -> PackedSampler:
        return PackedSampler(**mix_base)  # type: ignore[arg-type]

    cases += sampler_methods("PackedSampler", one, 2)
    cases += sampler_methods("PackedSampler(mixture=)", mix, 2)
    cases += kwargs_case(
        "PackingPlan",
        PackingPlan,
        {"lengths": WEB, "seq_len": 16, "chunk": 4, "window": 8},
        {
            "lengths": Never(),
            "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
            "window": Int(1, MAX_WINDOW, legal=8, none="accept"),  # None: default_window(chunk)
            "chunk": Int(1, MAX_CHUNK, legal=4),
            "split": Never(),
            "long_documents": Never(),
            "seed": Int(0, MAX_SEED),
        },
        use_plan,
    )
    plan = PackingPlan(WEB, 16, chunk=4, window=8)
    rows = plan.rows_per_epoch
    cases += [
        Case("PackingPlan.epoch", "epoch", Int(0, MAX_PASS), lambda ctx, v: plan.epoch(v)),
        Case(
            "PackingPlan.packed_window",
            "window",
            Int(0, plan.num_windows - 1),
            lambda ctx, v: plan.packed_window(0, v),
        ),
        Case(
            "PackingPlan.epoch.tokens_from",
            "position",
            Int(0, rows),
            lambda ctx, v: plan.epoch(1).tokens_from(v),
            use_ints,
        ),
        Case(
            "PackingPlan.epoch.rows",
            "positions[0]",
            Int(0, rows - 1, element=True),
            lambda ctx, v: plan.epoch(1).rows([v, 0]),
            names=("positions",),
        ),
    ]
    cases.append(
        Case(
            "DocumentLengths",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            # values are checked when first read (NOTE [ Length bounds ]): build, then read
            lambda ctx, v: DocumentLengths([v, 3, 9]).total_tokens,
            use_ints,
            names=("lengths[0]", "lengths"),
        )
    )
    lengths = DocumentLengths(WEB)
    cases += [
        Case(
            "DocumentLengths.block_totals", "block", Int(1), lambda ctx, v: lengths.block_totals(v)
        ),
        Case(
            "DocumentLengths.count_longer_than",
            "seq_len",
            Int(0),
            lambda ctx, v: lengths.count_longer_than(v),
            use_ints,
        ),
        Case(
            "DocumentLengths.take",
            "indices[0]",
            Int(0, len(WEB) - 1, element=True),
            lambda ctx, v: lengths.take([v]),
            names=("indices",),
        ),
        Case("DocumentLengths.slice", "stop", Int(0, len(WEB)), lambda ctx, v: lengths.slice(0, v)),
    ]
    cases += kwargs_case(
        "MegatronStyle",
        MegatronStyle,
        {"attention": "thd", "reset_position_ids": True, "eod_mask_loss": False, "eod": 2},
        {
            "attention": Never(),
            "reset_position_ids": Bool(),
            "eod_mask_loss": Bool(),
            "eod": Int(0, 2**63 - 1, none="accept"),
        },
    )
    cases += kwargs_case(
        "DocumentRange",
        DocumentRange,
        {"source": SequenceTokens([[1], [2, 3], [4, 5, 6]]), "start": 0, "stop": 3},
        {"source": Never(), "start": Int(0, 3), "stop": Int(0, 3)},
    )
    for entry, fn in (("deal", deal), ("deal_bounds", deal_bounds)):
        cases += kwargs_case(
            entry,
            fn,
            {"costs": [9, 1, 5, 5], "per_rank": 2, "dp_size": 2},
            {"costs": Never(), "per_rank": Int(2, 2, legal=2), "dp_size": Int(2, 2, legal=2)},
        )
        cases.append(
            Case(
                entry,
                "costs[0]",
                Int(0, MAX_COST, element=True),
                lambda ctx, v, fn=fn: fn([v, 1, 5, 5], 2, 2),
                names=("costs[0]", "costs"),
            )
        )
    cases += kwargs_case(
        "pack_window",
        pack_window,
        {"documents": [0, 1, 2], "lengths": [5, 40, 3], "seq_len": 16},
        {
            "seq_len": Int(1, MAX_SEQ_LEN, legal=16),
            "split": Never(),
            "long_documents": Never(),
            "tie_key": Int(0, 2**64 - 1, none="accept"),
        },
    )
    cases.append(
        Case(
            "pack_window",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            lambda ctx, v: pack_window([0, 1], [v, 3], 16),
            names=("lengths[0]", "lengths"),
            extra=(2**31 - 1,),  # 2**27 full rows: NOTE [ Full rows are not stored ]
        )
    )
    cases += kwargs_case(
        "PackedDataset",
        PackedDataset,
        {"token_source": [[1, 2, 3], [4, 5]], "seq_len": 8},
        {
            "token_source": Never(),
            "seq_len": Int(1, MAX_SEQ_LEN, legal=8),
            "pad_id": Int(-(2**63), 2**63 - 1),
        },
        lambda d: d.arrays(((1, 0, 2), (0, 0, 3))),
        extra=(2**63,),
    )
    return cases


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)
