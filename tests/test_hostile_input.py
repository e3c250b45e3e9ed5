"""The hostile-input sweep as a whole: every export classified, the judge, edited states, extremes.

The sweep calls every constructor and function ``dataorder`` exports with hostile values in place
of each argument (the engine and its rules: tests/helpers/hostile.py); each family's table lives
with the family's tests, in ``test_hostile_values.py`` of its folder (tests/README.md).
``test_every_export_is_classified`` keeps the tables complete: a new public name is either swept
by a family's table or listed in ``NOT_SWEPT`` with the reason. ``test_the_judge_can_fail`` shows
each verdict of the judge firing. Across the families, ``test_hostile_states`` feeds edited
checkpoints to every sampler, and ``test_states_fit_512_bytes_at_the_extremes`` builds every
sampler at the largest values it accepts.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

import dataorder
from dataorder import (
    BlendedSampler,
    DistributedSampler,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    SequentialBucketSampler,
)
from dataorder.core.keys import MAX_SEED
from dataorder.core.permutation import MAX_DOMAIN
from dataorder.diffusion.sampler.plan import MAX_INTERLEAVE_UNIT
from dataorder.llm import packing
from tests.core import test_hostile_values as core
from tests.diffusion import test_hostile_values as diffusion
from tests.helpers.hang import hang_guard
from tests.helpers.hostile import (
    HANG_SECONDS,
    MAX_BATCH_SIZE,
    MAX_DP_SIZE,
    Case,
    Int,
    make_ctx,
    needs_setitimer,
    run_one,
    state_text,
)
from tests.live import test_hostile_values as live
from tests.llm import test_hostile_values as llm
from tests.llm.packing import test_hostile_values as llm_packing
from tests.parallel import test_hostile_values as parallel

pytestmark = needs_setitimer

#: Every family's table of the sweep.
CASES = [
    *core.CASES,
    *parallel.CASES,
    *llm.CASES,
    *llm_packing.CASES,
    *diffusion.CASES,
    *live.CASES,
]

#: Exported names not in the sweep, and why.
NOT_SWEPT = {
    "__version__": "a string",
    "BaseMegatronSampler": "the base of the two Megatron samplers, swept through both",
    "held_out": "a sampler of the train's class (swept) over documents: tests/llm/test_splits.py",
    "broadcast_weights": "a torch.distributed collective: tests/llm/test_mixlog.py (2 processes)",
    "SourceDatasets": "a sequence of datasets, indexed: tests/llm/test_mixlog_corpus.py",
    "CursorSampler": "abstract base; its methods are swept on every sampler",
    "CursorBatchSampler": "abstract base; its methods are swept on every sampler",
    "EpochPlan": "returned by epoch_plan(); built by the samplers",
    "EpochBlocks": "returned by plan_epoch (swept), never built by hand",
    "SegmentPlan": "returned by plan_segments (swept)",
    "BucketEpochPlan": "returned by plan_bucket_epoch (swept)",
    "BucketTable": "built by BaseMultiresolutionDataset (swept) from checked input",
    "BucketStats": "returned by bucket_stats (swept)",
    "StepInfo": "returned by BatchSizeSchedule.at_step (swept, its fields probed)",
    "CropResult": "returned by resize_and_crop (swept)",
    "DataParallelReport": "returned by verify_data_parallel (swept)",
    "DataParallelError": "an exception raised by verify_data_parallel",
    "MixtureSchedule": "a list of (start, weights) segments, not a scalar: tests/llm/test_blend.py",
    "Ramp": "two weight vectors, not scalars: tests/llm/test_blend.py checks its errors",
    "CostModel": "exact rationals only (floats refused): tests/diffusion/calculators/test_video.py",
    "VideoScan": "returned by scan_videos",
    "scan_videos": "takes paths; tests/diffusion/scan/test_videos.py feeds it broken files",
    "manifest_from_scan": "takes a VideoScan: tests/diffusion/test_video_end_to_end.py",
    "FitResult": "returned by fit_to_data (MultiTierBucketCalculator.fit_to_data)",
    "permute_many": "arrays of sizes, keys and positions: tests/core/test_permutation.py",
    "AssembledSampler": "abstract: a sampler's base class (every concrete sampler is swept)",
    "Schema": "a declaration read by the assembly; tests/core/test_assembly.py checks it",
    "BucketSampler": "the class SequentialBucketSampler names for NeMo (swept under that name)",
    "samplers": "takes no argument",
    "ConcatTokens": "a sequence of token sources: tests/llm/packing/test_regressions.py",
}


#: Exported by dataorder.llm.packing, not in the sweep, and why.
NOT_SWEPT_PACKING = {
    "ConcatTokens": "a sequence of token sources: tests/llm/packing/test_regressions.py",
    "EpochRows": "returned by PackingPlan.epoch (swept)",
    "PackedRows": "the batching rule PackedSampler declares; built from its checked seq_len",
    "PackedWindow": "returned by pack_window (swept)",
    "PackingStats": "returned by PackingPlan.stats (swept, probed)",
    "read_index": "takes paths: tests/tools/test_hostile_files_cli.py feeds it corrupt files",
    "write_megatron": "writes files: tests/llm/packing/test_regressions.py checks its errors",
}


def test_every_export_is_classified() -> None:
    swept = {c.entry.split(".")[0].split("(")[0] for c in CASES}
    assert set(packing.__all__) - swept == set(NOT_SWEPT_PACKING)
    assert set(NOT_SWEPT_PACKING) <= set(packing.__all__)
    swept -= set(packing.__all__) - set(dataorder.__all__)
    exported = set(dataorder.__all__)
    assert exported - swept - set(NOT_SWEPT) == set(), "add these to the sweep or to NOT_SWEPT"
    assert swept & set(NOT_SWEPT) == set()
    assert swept | set(NOT_SWEPT) <= exported


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return make_ctx(tmp_path_factory)


def test_the_judge_can_fail(ctx: SimpleNamespace) -> None:
    """Each verdict of ``run_one`` fires on an entry that deserves it."""

    def accepts_anything(ctx: SimpleNamespace, v: object) -> object:
        return v

    def raises_unnamed(ctx: SimpleNamespace, v: object) -> object:
        raise ValueError("bad value")

    def escapes(ctx: SimpleNamespace, v: object) -> object:
        raise OverflowError("int too big to convert")

    def hangs(ctx: SimpleNamespace, v: object) -> object:
        while True:
            pass

    def works_later_not(result: object) -> None:
        raise OverflowError("later")

    def names_n(ctx: SimpleNamespace, v: object) -> object:
        raise ValueError(f"n must be a positive int; got n={v!r}")

    verdicts = [
        (Case("x", "n", Int(1), accepts_anything), 0, "was accepted; expected a refusal"),
        (Case("x", "n", Int(1), raises_unnamed), 0, "does not name n"),
        (Case("x", "n", Int(1), raises_unnamed), 5, "refused a legal value"),
        (Case("x", "n", Int(1), escapes), 0, "raised OverflowError"),
        (Case("x", "n", Int(1), accepts_anything, works_later_not), 10**30, "then failed"),
        (Case("x", "n", Int(1), names_n), True, "raised ValueError, expected TypeError"),
    ]  # fmt: skip
    for case, value, verdict in verdicts:
        with pytest.raises(pytest.fail.Exception, match=re.escape(verdict)):
            run_one(case, value, ctx)
    with pytest.raises(pytest.fail.Exception, match="hangs"):
        run_one(Case("x", "n", Int(1), hangs), 1, ctx, seconds=0.2)


def _samplers(ctx: SimpleNamespace) -> dict[str, Any]:
    return {
        "megatron_single": MegatronPretrainingSampler(64, 2, 1, 2),
        "megatron_random": MegatronPretrainingRandomSampler(64, 2, 1, 2, seed=3),
        "distributed": DistributedSampler(range(10), num_replicas=2, rank=1),
        "sequential_bucket": SequentialBucketSampler(
            ctx.dataset, base_batch_size=2, num_replicas=2, rank=1
        ),
    }


STATE_EDITS: dict[str, tuple[Callable[[dict[Any, Any]], None], str]] = {
    "version True": (lambda s: s.update(version=True), "state version True is not supported"),
    "version 1.0": (lambda s: s.update(version=1.0), "state version 1.0 is not supported"),
    "mixed-type extra keys": (lambda s: s.update({1: 0, "zz": 0}), "unknown keys ['zz', 1]"),
    "negative epoch": (
        lambda s: s.update(epoch=-1),
        "state['epoch'] must be an int in [0, 4294967295]",
    ),
    "epoch True": (lambda s: s.update(epoch=True), "got epoch=True"),
    "consumed -1": (lambda s: s.update(consumed=-1), "state['consumed'] must be a non-negative"),
    "a layout of 0": (lambda s: s.update({k: 0 for k in s if str(k).startswith("layout.")}),
                      "must be a positive int; got layout."),
    "a config float": (lambda s: s.update({min(k for k in s if str(k).startswith("config.")): 1.5}),
                       "state is from another configuration"),
}  # fmt: skip


@pytest.mark.parametrize(
    "kind", ["megatron_single", "megatron_random", "distributed", "sequential_bucket"]
)
@pytest.mark.parametrize("edit", list(STATE_EDITS))
def test_hostile_states(ctx: SimpleNamespace, kind: str, edit: str) -> None:
    """An edited checkpoint is refused naming the key, and is not mutated (mixed-type keys once
    raised ``'<' not supported``, ``version: True`` was accepted)."""
    sampler = _samplers(ctx)[kind]
    state: dict[Any, Any] = dict(sampler.state_dict())
    mutate, fragment = STATE_EDITS[edit]
    mutate(state)
    before = copy.deepcopy(state)
    with hang_guard(HANG_SECONDS), pytest.raises(ValueError) as info:
        sampler.load_state_dict(state)
    assert fragment in str(info.value)
    assert state == before


def _largest_epoch(s: Any) -> int:
    """Set the largest epoch the sampler says it takes, after checking it refuses the next."""
    top = int(s.max_epoch)
    assert top <= 2**32 - 1
    for beyond in (top + 1, 2**63 - 1, 2**64 - 1):
        with pytest.raises(ValueError, match="epoch must be an int in"):
            s.set_epoch(beyond)
    s.set_epoch(top)
    return top


def _extremes(ctx: SimpleNamespace) -> dict[str, Callable[[], Any]]:
    dp = MAX_DP_SIZE or 2**31
    mbs = min(MAX_BATCH_SIZE or 2**31, MAX_DOMAIN // dp)
    gbs = mbs * dp
    big = {"drop_last": False, "global_batch_size": gbs, "pad_samples_to_global_batch_size": True}
    return {
        "megatron_single": lambda: MegatronPretrainingSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, consumed_samples=gbs
        ),
        "megatron_random": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, seed=MAX_SEED, consumed_samples=gbs
        ),
        "megatron_random sharded": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, **big, seed=MAX_SEED, data_sharding=True,
            consumed_samples=gbs,
        ),
        "megatron_random nemo": lambda: MegatronPretrainingRandomSampler(
            MAX_DOMAIN, mbs, dp - 1, dp, global_batch_size=gbs, seed=2**63 - 1, compat="nemo",
            consumed_samples=gbs,
        ),
        "distributed": lambda: DistributedSampler(
            range(MAX_DOMAIN), num_replicas=dp, rank=dp - 1, seed=MAX_SEED
        ),
        "distributed torch": lambda: DistributedSampler(
            range(MAX_DOMAIN), num_replicas=dp, rank=dp - 1, seed=2**63 - 1, compat="torch"
        ),
        "sequential_bucket": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=dp, rank=dp - 1,
            seed=MAX_SEED, drop_last=False, dynamic_batch_size=True,
        ),
        "sequential_bucket nemo": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=dp, rank=dp - 1,
            seed=2**63 - 1, drop_last=False, dynamic_batch_size=True, compat="nemo",
        ),
        "blended": lambda: BlendedSampler(
            [MAX_DOMAIN - 1, 1], [1 / 3, 2 / 3], mbs, dp - 1, dp, gbs, seed=MAX_SEED,
            total_samples=MAX_DOMAIN,
        ),
        # epochs of 2**31 samples: the run-wide count, not MAX_EPOCH, limits the epoch
        "blended long run": lambda: BlendedSampler(
            [MAX_DOMAIN - 1, 1], [1 / 3, 2 / 3], 1, 0, 1, 1, seed=MAX_SEED, total_samples=2**31
        ),
        "sequential_bucket interleaved": lambda: SequentialBucketSampler(
            ctx.dataset, base_batch_size=MAX_BATCH_SIZE or 2**31, num_replicas=MAX_INTERLEAVE_UNIT,
            rank=MAX_INTERLEAVE_UNIT - 1, seed=MAX_SEED, drop_last=False, dynamic_batch_size=True,
            bucket_order="interleaved", interleave_unit=MAX_INTERLEAVE_UNIT,
        ),
    }  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "megatron_single",
        "megatron_random",
        "megatron_random sharded",
        "megatron_random nemo",
        "distributed",
        "distributed torch",
        "sequential_bucket",
        "sequential_bucket nemo",
        "sequential_bucket interleaved",
        "blended",
        "blended long run",
    ],
)
def test_states_fit_512_bytes_at_the_extremes(ctx: SimpleNamespace, name: str) -> None:
    """Regression: states exceeded the promised bound at in-range extremes. Every sampler built
    with the largest values it accepts, at the largest epoch ``set_epoch`` accepts."""
    with hang_guard(HANG_SECONDS):
        s = _extremes(ctx)[name]()
        _largest_epoch(s)
        state_text(s.state_dict())
