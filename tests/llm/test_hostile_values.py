"""Hostile input against the LLM samplers and their parts (the engine: tests/helpers/hostile.py):
the Megatron samplers and their factory, batch-size schedules, the blend, held-out splits and
the mixture log."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dataorder import (
    BatchSizeSchedule,
    BlendedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    create_megatron_sampler,
)
from dataorder.core.keys import MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.llm import MixtureLog, split_documents
from dataorder.llm.mixlog import MAX_STEP as MIX_MAX_STEP
from dataorder.llm.schedule import MAX_SAMPLES
from dataorder.llm.vsl import VariableLengthSampler
from tests.helpers.hostile import (
    MAX_BATCH_SIZE,
    MAX_DP_SIZE,
    Bool,
    Case,
    Domain,
    Int,
    Never,
    kwargs_case,
    make_ctx,
    needs_setitimer,
    params,
    run_one,
    sampler_methods,
    use_ints,
    use_sampler,
    use_schedule,
    with_partners,
)

pytestmark = needs_setitimer


def _megatron(cls: type[Any], **more: object) -> Callable[[SimpleNamespace], Any]:
    return lambda ctx: cls(64, 2, 1, 2, **more)


def build_cases() -> list[Case]:
    megatron_base = {
        "total_samples": 64,
        "micro_batch_size": 2,
        "data_parallel_rank": 1,
        "data_parallel_size": 2,
    }
    megatron_domains: dict[str, Domain] = {
        "total_samples": Int(4, MAX_DOMAIN, legal=64),
        "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
        "data_parallel_rank": Int(0, 1, none="either"),
        "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
        "drop_last": Bool(),
        "global_batch_size": Int(4, legal=8, none="accept"),
        "consumed_samples": Int(0),
    }
    cases: list[Case] = []
    for cls, extra_domains in (
        (MegatronPretrainingSampler, {}),
        (
            MegatronPretrainingRandomSampler,
            {"seed": Int(0, MAX_SEED), "data_sharding": Bool(), "compat": Never(none="accept")},
        ),
    ):
        name = cls.__name__
        cases += kwargs_case(
            name, cls, megatron_base, {**megatron_domains, **extra_domains}, use_sampler
        )
        cases += kwargs_case(
            name,
            cls,
            {**megatron_base, "drop_last": False, "global_batch_size": 8},
            {"pad_samples_to_global_batch_size": Bool(optional=True)},
            use_sampler,
        )
        cases += sampler_methods(name, _megatron(cls), dp=2)

    cases += kwargs_case(
        "create_megatron_sampler",
        create_megatron_sampler,
        {
            "dataset_len": 64,
            "micro_batch_size": 2,
            "global_batch_size": None,
            "rank": 1,
            "world_size": 2,
        },
        {
            "dataset_len": Int(4, MAX_DOMAIN, legal=64),
            "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "global_batch_size": Int(4, legal=8, none="accept"),
            "dataloader_type": Never(),
            "drop_last": Bool(),
            "rank": Int(0, 1, none="either"),
            "world_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "seed": Int(0, MAX_SEED),
        },
        use_sampler,
    )

    # schedules
    cases += kwargs_case(
        "BatchSizeSchedule.constant",
        BatchSizeSchedule.constant,
        {},
        {"global_batch_size": Int(1, MAX_SAMPLES)},
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.rampup",
        BatchSizeSchedule.rampup,
        {
            "start_batch_size": 16,
            "batch_size_increment": 8,
            "rampup_samples": 1000,
            "global_batch_size": 64,
        },
        {
            "start_batch_size": Int(1, 63, legal=16),
            "batch_size_increment": Int(1, 48, legal=8),
            "rampup_samples": Int(1, MAX_SAMPLES),
            "global_batch_size": Int(24, legal=64),
        },
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.from_step_schedule",
        BatchSizeSchedule.from_step_schedule,
        {"schedule": "0:8 100:16"},
        {"schedule": Never(), "seq_length": Int(1, none="accept")},
        use_schedule,
    )
    cases += kwargs_case(
        "BatchSizeSchedule.from_megatron_args",
        BatchSizeSchedule.from_megatron_args,
        {"global_batch_size": 64},
        {
            "global_batch_size": Int(1, MAX_SAMPLES, none_error=ValueError),  # None: missing
            "rampup_batch_size": Never(none="accept"),
        },
        use_schedule,
    )
    cases.append(
        Case(
            "BatchSizeSchedule",
            "thresholds[1][1]",
            Int(1, MAX_SAMPLES),
            lambda ctx, v: BatchSizeSchedule([(0, 8), (100, v)]),  # type: ignore[list-item]
            use_schedule,
            names=("global_batch_size", "thresholds"),
        )
    )
    schedule = BatchSizeSchedule.rampup(16, 8, 1000, global_batch_size=64)
    cases += [
        Case("BatchSizeSchedule.global_batch_size", "step", Int(0, math.inf),
             lambda ctx, v: schedule.global_batch_size(v), use_ints),  # type: ignore[arg-type]
        Case("BatchSizeSchedule.consumed_samples", "step", Int(0, math.inf),
             lambda ctx, v: schedule.consumed_samples(v), use_ints,  # type: ignore[arg-type]
             extra=(np.int64(2**60),)),  # wrapped to 0 in int64
        Case("BatchSizeSchedule.step_at", "consumed_samples", Int(0, math.inf),
             lambda ctx, v: schedule.step_at(v), use_ints),  # type: ignore[arg-type]
        Case("BatchSizeSchedule.at_step", "step", Int(0, math.inf),
             lambda ctx, v: schedule.at_step(v, micro_batch_size=1, data_parallel_size=1),  # type: ignore[arg-type]
             lambda info: use_ints(list(vars(info).values()))),
        Case("BatchSizeSchedule.at_step", "micro_batch_size", Int(1, 16, legal=1),
             lambda ctx, v: schedule.at_step(0, micro_batch_size=v, data_parallel_size=1),  # type: ignore[arg-type]
             lambda info: use_ints(list(vars(info).values()))),
        Case("BatchSizeSchedule.check_layout", "from_step", Int(0, math.inf),
             lambda ctx, v: schedule.check_layout(
                 micro_batch_size=1, data_parallel_size=1, from_step=v)),  # type: ignore[arg-type]
    ]  # fmt: skip

    # the mixture sampler
    blend_base = {
        "sizes": [20, 30, 50],
        "weights": [0.2, 0.3, 0.5],
        "micro_batch_size": 2,
        "data_parallel_rank": 1,
        "data_parallel_size": 2,
        "global_batch_size": 8,
        "seed": 3,
    }
    cases += kwargs_case(
        "BlendedSampler",
        BlendedSampler,
        blend_base,
        {
            "micro_batch_size": Int(1, MAX_BATCH_SIZE, legal=2),
            "data_parallel_rank": Int(0, 1, none="either"),
            "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2, none="either"),
            "seed": Int(0, MAX_SEED),
            "consumed_samples": Int(0, legal=8),
        },
        use_sampler,
    )
    cases += sampler_methods(
        "BlendedSampler",
        lambda ctx: BlendedSampler(**blend_base),
        dp=2,  # type: ignore[arg-type]
    )

    cases += kwargs_case(
        "split_documents",
        split_documents,
        {"split": "8,1,1", "num_documents": 100},
        {"split": Never(), "num_documents": Int(0, math.inf)},
    )
    cases.append(
        Case(
            "MixtureLog.set_weights",
            "step",
            Int(0, MIX_MAX_STEP),
            lambda ctx, v: MixtureLog([1, 1]).set_weights(v, [1, 3]),
        )
    )
    return cases + _vsl_cases()


# -- the variable sequence length sampler (dataorder.llm.vsl) ------------------------------------
VSL_DOCS = [700, 1100, 40, 300, 2000, 90, 512, 64] * 3


def use_vsl(s: VariableLengthSampler) -> None:
    use_sampler(s)
    use_ints([s.tokens_dropped, s.tokens_padded, *s.chunk_counts, *s.chunk_lengths])


def _vsl_cases() -> list[Case]:
    """VariableLengthSampler: its constructor, its lengths and the cursor methods."""
    base = {
        "lengths": VSL_DOCS, "max_seq_len": 256, "tokens_per_rank": 512,
        "data_parallel_rank": 1, "data_parallel_size": 2, "seed": 0, "min_seq_len": 32,
    }  # fmt: skip
    cases = kwargs_case(
        "VariableLengthSampler",
        VariableLengthSampler,
        base,
        {
            "lengths": Never(),
            "max_seq_len": Int(32, 2**30, legal=256),  # a power of two, at least min_seq_len
            "tokens_per_rank": Int(256, legal=512),  # a multiple of max_seq_len
            "data_parallel_rank": Int(0, 1),
            "data_parallel_size": Int(2, MAX_DP_SIZE, legal=2),
            "seed": Int(0, MAX_SEED),
            "min_seq_len": Int(1, 256, legal=32),  # a power of two
            "curriculum": Never(),
            # a multiple of data_parallel_size, at most MAX_INTERLEAVE_UNIT
            "interleave_unit": Int(2, 2**16, legal=2, none="accept"),
        },
        use_vsl,
    )
    cases.append(
        Case(
            "VariableLengthSampler",
            "lengths[0]",
            Int(0, 2**31 - 1, legal=5, element=True),
            # runs of 2**15 steps: the natural plan holds a run per interleave_unit / R steps, and
            # one document of 2**31 - 1 tokens is 2**21 steps of 2 x 2 chunks of 256
            lambda ctx, v: VariableLengthSampler(
                **{**base, "lengths": [v, *VSL_DOCS[1:]], "interleave_unit": 2**16}
            ),
            use_vsl,
            names=("lengths[0]", "lengths"),
            extra=(2**31 - 1, 2**31),  # NOTE [ Length bounds ]: the largest length, and past it
        )
    )

    def one(ctx: SimpleNamespace) -> VariableLengthSampler:
        return VariableLengthSampler(**base)  # type: ignore[arg-type]

    return cases + sampler_methods("VariableLengthSampler", one, 2)


CASES = with_partners(build_cases())


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


@pytest.mark.parametrize(("case", "value"), list(params(CASES)))
def test_hostile_value(case: Case, value: object, ctx: SimpleNamespace) -> None:
    run_one(case, value, ctx)
