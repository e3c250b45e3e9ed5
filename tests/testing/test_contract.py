"""The contract suite itself: a minimal correct sampler passes, and each check can fail.

A contract that cannot fail proves nothing. Every check of :mod:`dataorder.testing` is matched
here with a sampler that breaks exactly what it checks (most are bugs seen in real samplers:
a per-rank drop, NeMo's resume that works once, ``len()`` as what remains, a state after the
epoch's last batch that names the next epoch, a peek that consumes data), and that sampler must
be caught by that check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dataorder.core.blockplan import BlockPlan
from dataorder.core.cursor import CursorBatchSampler
from dataorder.core.keys import derive_key
from dataorder.core.partition import plan_epoch
from dataorder.core.permutation import Permutation
from dataorder.core.state import Scalar
from dataorder.testing import (
    ContractViolation,
    SamplerCase,
    check_batch_at,
    check_contract,
    check_determinism_across_processes,
    check_elastic_resume,
    check_epoch_partition,
    check_forgotten_set_epoch,
    check_loop_recipes,
    check_passes_and_placement,
    check_peek,
    check_repeated_resume,
    check_resume_at_every_step,
    check_state_round_trip,
)

Batch = list[int | None]


class MiniSampler(CursorBatchSampler[Batch]):
    """Shuffled micro-batches, contiguous split, the last block padded with None."""

    state_kind = "mini"

    def __init__(self, n: int, per_rank: int, rank: int, world: int, seed: int = 0) -> None:
        super().__init__()
        self.n, self.per_rank, self.rank, self.world, self.seed = n, per_rank, rank, world, seed
        self.layout = plan_epoch(n, per_rank=per_rank, dp_size=world, tail="pad")

    @property
    def dp_rank(self) -> int:
        return self.rank

    def order_config(self) -> dict[str, Scalar]:
        return {"n": self.n, "seed": self.seed}

    def layout_info(self) -> dict[str, int]:
        return {"per_rank": self.per_rank, "world": self.world}

    @property
    def samples_dropped(self) -> int:
        return self.layout.dropped

    @property
    def samples_padded(self) -> int:
        return self.layout.padded

    def _key(self, epoch: int) -> int:
        return derive_key(self.seed, epoch=epoch, stream="mini", purpose="order")

    def _make_plan(self, epoch: int, layout: Mapping[str, int]) -> BlockPlan[Batch]:
        lay = plan_epoch(self.n, per_rank=layout["per_rank"], dp_size=layout["world"], tail="pad")
        perm = Permutation(self.n, self._key(epoch))

        def rows(positions: npt.NDArray[np.int64]) -> list[Batch]:
            out: list[Batch] = []
            for row in positions:
                real = row[row < self.n]
                values: Batch = [int(x) for x in perm(real)]
                out.append(values + [None] * (len(row) - len(real)))
            return out

        return BlockPlan(lay, "contiguous", lambda rank: rows)


def _case(cls: type[MiniSampler], n: int = 23, per_rank: int = 2, world: int = 3) -> SamplerCase:
    return SamplerCase(
        name=cls.__name__,
        make=lambda r, w: cls(n, per_rank, r, w, seed=5),
        dataset_size=n,
        dp_size=world,
        elastic_dp_sizes=(1,),
    )


def test_minimal_sampler_passes_the_contract() -> None:
    ran = check_contract(_case(MiniSampler), processes=True, recipes=("stateful-0", "peek"))
    assert ran == ["stateful-0", "peek"]


# -- one broken sampler per check -------------------------------------------------------------
class PerRankDrop(MiniSampler):
    """Drops its padded tail per rank: ranks disagree on the number of steps (DDP hangs)."""

    def __iter__(self) -> Iterator[Batch]:
        for batch in super().__iter__():
            if None in batch:
                return
            yield batch


class LenIgnoresTail(MiniSampler):
    def __len__(self) -> int:
        return self.layout.full_blocks - 1


class Overlapping(MiniSampler):
    def __iter__(self) -> Iterator[Batch]:
        for batch in super().__iter__():
            yield [0 if x is not None and x % 7 == 0 else x for x in batch]


class UndeclaredPadding(MiniSampler):
    @property
    def samples_padded(self) -> int:
        return 0


class BigState(MiniSampler):
    def order_config(self) -> dict[str, Scalar]:
        return {**super().order_config(), "note": "x" * 600}


class MutatingLoad(MiniSampler):
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        state_dict["epoch"] = -1  # type: ignore[index]


class ResumeOnlyOnce(MiniSampler):
    """NeMo's B1: the position saved after a resume restarts at the resume point."""

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._skipped = self._position["consumed"]

    def state_dict(self) -> dict[str, Scalar]:
        state = super().state_dict()
        skipped = getattr(self, "_skipped", 0)
        if state["consumed"] != self.layout.total_positions:
            state["consumed"] = int(state["consumed"]) - skipped
        return state


class LenIsRemaining(MiniSampler):
    """The old rule: len() is what the next iter() yields (Lightning then cuts epochs short)."""

    def __len__(self) -> int:
        return self.remaining


class EndStateNamesTheNextEpoch(MiniSampler):
    """The old rule: reaching the end moves the state to (epoch + 1, 0) at once."""

    def state_dict(self) -> dict[str, Scalar]:
        state = super().state_dict()
        if state["consumed"] == self.layout.total_positions:
            state.update(epoch=int(state["epoch"]) + 1, consumed=0)
        return state


class PeekConsumes(MiniSampler):
    """A new pass continues where the last one stopped (a peek loses its batches)."""

    def __iter__(self) -> Iterator[Batch]:
        self._origin = dict(self._position)
        return super().__iter__()


class RepeatsEpoch(MiniSampler):
    """torch's rule: without set_epoch every pass is the same epoch."""

    def _moves_on(self) -> bool:
        return False


class LivePassIgnoresPlacement(MiniSampler):
    def _place(self, epoch: int, origin: Mapping[str, int], **kw: Any) -> None:
        placements = self._placements
        super()._place(epoch, origin, **kw)
        self._placements = placements


class NewPassEndsRunning(MiniSampler):
    """Every new pass stops the running one (a peek inside the loop cuts the epoch)."""

    def __iter__(self) -> Iterator[Batch]:
        self._placements += 1
        return super().__iter__()


class SetEpochStopsItsOwnPass(MiniSampler):
    """set_epoch of the current epoch stops the running pass: a loader that started its
    workers before the loop's set_epoch trains only what they prefetched."""

    def set_epoch(self, epoch: int) -> None:
        same = epoch == self._epoch
        super().set_epoch(epoch)
        if same:
            self._placements += 1


class RunOutLoadedEpochReplays(MiniSampler):
    """Every pass over a loaded epoch restarts at the loaded position."""

    def _start_step(self, plan: Any) -> int:
        return int(plan.step_of(self._origin))


class StateBeatsTheLoopsEpoch(MiniSampler):
    """A state loaded after the loop's set_epoch always wins, even one of an earlier epoch."""

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        owns, self._loop_owns_epoch = self._loop_owns_epoch, False
        super().load_state_dict(state_dict)
        self._loop_owns_epoch = owns


class BatchAtOffByOne(MiniSampler):
    def batch_at(self, step: int, *, rank: int | None = None, epoch: int | None = None) -> Batch:
        return super().batch_at(max(0, step - 1), rank=rank, epoch=epoch)


class ElasticSkips(MiniSampler):
    """A state loaded on another layout jumps one block ahead."""

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if state_dict["layout.world"] != self.world:
            skip = {"consumed": self._position["consumed"] + self.layout.block_size}
            self._place(self._epoch, skip)


class HashSeeded(MiniSampler):
    """Keys from Python's salted str hash: another interpreter gives another order."""

    def _key(self, epoch: int) -> int:
        return hash(f"{self.seed}-{epoch}") % 2**64


class LoadedEpochMovesOn(MiniSampler):
    """Moves on after any pass that reached the end, even in a loaded epoch of a loop that owns
    the epoch: exact when driven directly, but a loader with workers runs one pass of its own
    while it restores a finished iterator, and the loop then reads the next epoch early."""

    def _moves_on(self) -> bool:
        return self._step is not None and self._at_end()


@pytest.mark.parametrize(
    ("cls", "check", "match"),
    [
        (PerRankDrop, check_epoch_partition, "len\\(\\)=.* but yielded|unequal batch counts"),
        (LenIgnoresTail, check_epoch_partition, "len\\(\\)=.* but yielded"),
        (Overlapping, check_epoch_partition, "distinct samples read"),
        (UndeclaredPadding, check_epoch_partition, "but samples_padded=0"),
        (BigState, check_state_round_trip, "state is .* bytes"),
        (MutatingLoad, check_state_round_trip, "mutated its argument"),
        (ResumeOnlyOnce, check_repeated_resume, "repeated resume diverges"),
        (LenIsRemaining, check_resume_at_every_step, "expected a whole epoch"),
        (EndStateNamesTheNextEpoch, check_resume_at_every_step, "says epoch 1|remaining=4"),
        (PeekConsumes, check_peek, "a peek"),
        (RepeatsEpoch, check_forgotten_set_epoch, "without set_epoch is not epoch 1"),
        (LivePassIgnoresPlacement, check_passes_and_placement, "went on after set_epoch"),
        (NewPassEndsRunning, check_passes_and_placement, "did not go on after a peek"),
        (SetEpochStopsItsOwnPass, check_passes_and_placement, "did not go on after a peek"),
        (RunOutLoadedEpochReplays, check_passes_and_placement, "gave 3 more batches"),
        (StateBeatsTheLoopsEpoch, check_passes_and_placement, "did not read epoch 1"),
        (BatchAtOffByOne, check_batch_at, "differs from iteration"),
    ],
)
def test_each_check_catches_its_bug(
    cls: type[MiniSampler], check: Callable[[SamplerCase], None], match: str
) -> None:
    with pytest.raises(ContractViolation, match=match):
        check(_case(cls))
    check(_case(MiniSampler))  # and the correct sampler passes the same check


def test_elastic_check_catches_a_skip() -> None:
    with pytest.raises(ContractViolation, match="skipped across the 3->1 restart"):
        check_elastic_resume(_case(ElasticSkips), 1)
    check_elastic_resume(_case(MiniSampler), 1)


def test_process_check_catches_salted_hashes() -> None:
    with pytest.raises(ContractViolation, match="order differs across processes"):
        check_determinism_across_processes(_case(HashSeeded))


def test_recipes_catch_what_direct_checks_miss() -> None:
    case = _case(LoadedEpochMovesOn)
    check_resume_at_every_step(case)  # exact when driven directly...
    with pytest.raises(ContractViolation, match="recipe 'stateful-2'"):
        check_loop_recipes(case, ["stateful-2"])  # ...not under a loader with workers
    with pytest.raises(ContractViolation, match="Lightning"):
        check_loop_recipes(_case(LenIsRemaining), ["lightning"])
    with pytest.raises(ContractViolation, match="a peek before the loop"):
        check_loop_recipes(_case(PeekConsumes), ["peek"])
    with pytest.raises(ContractViolation, match="a peek inside the loop"):
        check_loop_recipes(_case(NewPassEndsRunning), ["peek"])
    # a loader whose workers start before the loop's set_epoch: the first epoch is cut short,
    # which the uninterrupted run shows against the sampler's own epochs
    for recipe in ("accelerate-workers", "lightning-workers"):
        with pytest.raises(ContractViolation, match="uninterrupted, does not train"):
            check_loop_recipes(_case(SetEpochStopsItsOwnPass), [recipe])
    with pytest.raises(ContractViolation, match="recipe 'snapshot-2'"):
        # 5 steps an epoch: the after-the-loop snapshot is a step before the end
        check_loop_recipes(_case(RunOutLoadedEpochReplays, n=29), ["snapshot-2"])
    with pytest.raises(ContractViolation, match="recipe 'stateful-0'"):
        check_loop_recipes(_case(StateBeatsTheLoopsEpoch), ["stateful-0"])
    with pytest.raises(ValueError, match="recipes must be names from"):
        check_loop_recipes(_case(MiniSampler), ["torchrun"])


def test_the_contract_holds_under_python_O() -> None:
    """Explicit errors, never a bare assert: ``python -O`` still catches a broken sampler."""
    root = Path(__file__).resolve().parents[2]  # the repository, for the tests package
    code = (
        f"import sys; sys.path.insert(0, {str(root)!r});"
        "from tests.testing.test_contract import _case, Overlapping;"
        "from dataorder.testing import check_epoch_partition, ContractViolation\n"
        "try:\n    check_epoch_partition(_case(Overlapping))\n"
        "except ContractViolation:\n    print('caught')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.stdout.strip() == "caught", proc.stderr[-2000:]


def test_a_copy_is_a_saved_state() -> None:
    """pickle / deepcopy / torch.save of a sampler mid-epoch continue from its position."""
    import copy
    import pickle

    s = MiniSampler(23, 2, 1, 3, seed=5)
    full = list(MiniSampler(23, 2, 1, 3, seed=5))
    it = iter(s)
    head = [next(it), next(it)]
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert head + list(clone) == full
    assert json.loads(json.dumps(s.state_dict()))["consumed"] == 2 * 6
