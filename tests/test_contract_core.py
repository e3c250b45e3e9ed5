"""The contract suite itself: a minimal correct sampler passes, and known-bad samplers fail.

A contract that cannot fail proves nothing, so each classic bug (per-rank drop, resume that only
works once, len() that ignores the tail, overlapping ranks) is built here and must be caught.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from dataorder.cursor import CursorSampler
from dataorder.keys import derive_key
from dataorder.partition import plan_epoch
from dataorder.permutation import Permutation
from dataorder.state import Scalar
from dataorder.testing import SamplerCase, check_contract, check_repeated_resume


class MiniSampler(CursorSampler[list[int | None]]):
    """Shuffled micro-batches, contiguous split, last block padded with None."""

    state_kind = "mini"

    def __init__(self, n: int, per_rank: int, rank: int, world: int, seed: int = 0) -> None:
        super().__init__()
        self.n, self.per_rank, self.rank, self.world, self.seed = n, per_rank, rank, world, seed
        self.layout = plan_epoch(n, per_rank=per_rank, world=world, tail="pad")

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

    def _epoch_length(self) -> int:
        return self.layout.num_batches

    def _remaining(self, progress: Mapping[str, int]) -> int:
        return self.layout.num_batches - self.layout.batch_for_consumed(progress["consumed"])

    def _check_progress(self, epoch: int, progress: Mapping[str, int]) -> None:
        self.layout.batch_for_consumed(progress["consumed"])

    def _iterate(self, epoch: int) -> Iterator[list[int | None]]:
        perm = Permutation(self.n, derive_key(self.seed, epoch=epoch, stream="mini", purpose="o"))
        start = self.layout.batch_for_consumed(self._progress["consumed"])
        for chunk in self.layout.iter_rank_positions(
            rank=self.rank, split="contiguous", start_batch=start, chunk=4
        ):
            for row in chunk:
                real = row[row < self.n]
                values: list[int | None] = perm(real).tolist()
                values += [None] * (len(row) - len(real))
                self._progress["consumed"] += self.layout.block_size
                yield values


def _case(cls: type[MiniSampler], n: int = 23, per_rank: int = 2, world: int = 3) -> SamplerCase:
    return SamplerCase(
        name=cls.__name__,
        make=lambda r, w: cls(n, per_rank, r, w, seed=5),
        dataset_size=n,
        world=world,
        elastic_worlds=(1,),
    )


def test_minimal_sampler_passes_the_contract() -> None:
    check_contract(_case(MiniSampler), processes=True)


class PerRankDrop(MiniSampler):
    def _iterate(self, epoch: int) -> Iterator[list[int | None]]:
        for batch in super()._iterate(epoch):
            if None in batch:  # drops its padded tail per rank: ranks disagree on step counts
                return
            yield batch


class ResumeOnlyOnce(MiniSampler):
    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        super().load_state_dict(state_dict)
        self._skip, self._progress["consumed"] = self._progress["consumed"], 0

    def _iterate(self, epoch: int) -> Iterator[list[int | None]]:
        skip = getattr(self, "_skip", 0) // self.layout.block_size
        self._skip = 0
        for i, batch in enumerate(super()._iterate(epoch)):
            if i >= skip:
                # like NeMo: the saved count restarts at the resume point
                self._progress["consumed"] = (i - skip + 1) * self.layout.block_size
                yield batch


class LenIgnoresTail(MiniSampler):
    def __len__(self) -> int:
        return self.layout.full_blocks - 1


class Overlapping(MiniSampler):
    def _iterate(self, epoch: int) -> Iterator[list[int | None]]:
        for batch in super()._iterate(epoch):
            yield [0 if x is not None and x % 7 == 0 else x for x in batch]


@pytest.mark.parametrize(
    ("cls", "match"),
    [
        (PerRankDrop, "len\\(\\)=.* but yielded|unequal batch counts"),
        (ResumeOnlyOnce, "diverges|state differs after a load"),
        (LenIgnoresTail, "len\\(\\)=.* but yielded"),
        (Overlapping, "distinct samples read"),
    ],
)
def test_broken_samplers_fail_the_contract(cls: type[MiniSampler], match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check_contract(_case(cls))


def test_repeated_resume_check_catches_nemo_b1() -> None:
    # NeMo's B1: the position saved after a resume is relative to that resume, so a second
    # resume replays batches. Exact after one resume, wrong after two.
    with pytest.raises(AssertionError, match="repeated resume diverges"):
        check_repeated_resume(_case(ResumeOnlyOnce))


def test_state_loaded_while_an_iterator_is_live_stays_the_one_cursor() -> None:
    # verify_data_parallel reads a sampler and restores its state while the training loop's
    # iterator is alive; that iterator must keep advancing the restored cursor.
    s = MiniSampler(40, 2, rank=0, world=2, seed=1)
    ref = list(MiniSampler(40, 2, rank=0, world=2, seed=1))
    live = iter(s)
    got = [next(live), next(live)]
    saved = s.state_dict()
    list(s)  # someone else reads the rest of the epoch through the shared cursor...
    s.load_state_dict(saved)  # ...and puts it back
    got.append(next(live))
    assert got == ref[:3]
    assert s.state_dict()["consumed"] == 3 * 4
