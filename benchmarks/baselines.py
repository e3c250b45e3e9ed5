"""The baselines of the benchmark suite: the samplers and bucketing people use today.

Each baseline is written here, in our own code, from the published description of the original
(``../shared/reference/nemo_behaviour.md`` section 5, ``llm_peers.md`` sections 1.3, 4, 5, 6, 12,
``diffusion_peers.md`` section 7). None is copied from NeMo, Megatron-LM or torch, and torch's own
``DistributedSampler`` is not re-implemented: the suite imports it.

* :class:`RandpermCyclicSampler`: the ``torch.randperm``-based Megatron "cyclic" sampler of NeMo
  Automodel. A static per-rank shard of ``(N // M) * micro_batch_size`` samples, where
  ``M = micro_batch_size * data_parallel_size``; every epoch the same
  ``torch.randperm(shard, generator seeded seed + epoch)`` on every rank, turned into a Python list
  (``.tolist()``), shifted to the rank's shard start in a second list, and cut into micro-batches.
  The last ``N mod M`` samples are never used. Resume: Megatron-LM's loop passes
  ``consumed_samples`` (the permutation is rebuilt and its head sliced off); NeMo Automodel's
  sampler has no ``state_dict``, so torchdata's ``StatefulDataLoader`` falls back to
  :func:`replay_skip`.
* :func:`replay_skip`: resume by replaying, ``islice`` over a fresh sampler's iterator, which is
  what ``StatefulDataLoader`` does for a sampler without state
  (``islice(index_sampler, yielded, None)``) and what Accelerate's ``skip_first_batches``
  (``SkipBatchSampler``) does for map-style data.
* :func:`nemo_assign_loop`: NeMo's per-image bucket assignment, a Python loop calling ``min`` over
  the buckets of ``|bucket aspect ratio - W / H|`` for each image (ties to the first bucket).
* :data:`SDXL_BUCKETS` and :func:`assign_log_nearest`: an SDXL-style table of 40 resolutions near
  1024 x 1024 in multiples of 64 (the list of the SDXL paper's appendix as it is commonly
  reproduced), with the crop-loss-optimal rule (nearest bucket in log aspect ratio).

Run it to check that the baselines do what their descriptions say (a markdown table; exit code 1
on any mismatch)::

    python benchmarks/baselines.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "SDXL_BUCKETS",
    "RandpermCyclicSampler",
    "assign_log_nearest",
    "nemo_assign_loop",
    "replay_skip",
]

T = TypeVar("T")


class RandpermCyclicSampler:
    """NeMo Automodel's ``MegatronPretrainingRandomSampler`` ("cyclic"), from its description.

    Args:
        total_samples: Samples in the dataset ``N``.
        micro_batch_size: Samples per micro-batch on each rank.
        data_parallel_rank: This rank.
        data_parallel_size: Number of data-parallel ranks.
        drop_last: Only True is possible unless ``micro_batch_size * data_parallel_size == 1``.
        seed: The generator is seeded ``seed + epoch``.

    ``consumed_samples`` is the global count of consumed positions; it grows by
    ``micro_batch_size * data_parallel_size`` before each micro-batch is handed out. Setting it
    before ``iter()`` is Megatron-LM's resume.
    """

    def __init__(
        self,
        total_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        drop_last: bool = True,
        seed: int = 0,
    ) -> None:
        if total_samples <= 0:
            raise RuntimeError(f"no sample to consume: {total_samples}")
        if micro_batch_size <= 0 or data_parallel_size <= 0:
            raise RuntimeError("micro_batch_size and data_parallel_size must be positive")
        if data_parallel_rank >= data_parallel_size:
            raise RuntimeError("data_parallel_rank must be smaller than data_parallel_size")
        block = micro_batch_size * data_parallel_size
        if not drop_last and block > 1:
            raise RuntimeError("drop_last=False needs micro_batch_size * data_parallel_size == 1")
        self.total_samples = total_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.data_parallel_size = data_parallel_size
        self.micro_batch_times_data_parallel_size = block
        self.drop_last = drop_last
        self.seed = seed
        self.last_batch_size = total_samples % block
        self.consumed_samples = 0

    def __len__(self) -> int:
        # The description's formula, off by one with drop_last=False (kept: this is the baseline).
        active = self.total_samples - (self.last_batch_size if self.drop_last else 0)
        avail = active - self.consumed_samples % active
        block = self.micro_batch_times_data_parallel_size
        return avail // block if self.drop_last else (avail - 1) // block

    def __iter__(self) -> Iterator[list[int]]:
        import torch

        block = self.micro_batch_times_data_parallel_size
        active = self.total_samples - self.last_batch_size
        epoch, offset = divmod(self.consumed_samples, active)
        if offset % block:
            raise RuntimeError(
                f"consumed_samples={self.consumed_samples} is not a multiple of "
                f"micro_batch_size x data_parallel_size = {block}"
            )
        shard = self.total_samples // block * self.micro_batch_size
        start = self.data_parallel_rank * shard
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        # The same permutation on every rank, as a Python list (about 40 bytes per entry), then a
        # second list shifted to this rank's shard; both stay alive while the epoch runs.
        random_idx = torch.randperm(shard, generator=generator).tolist()
        idx_range = [start + x for x in random_idx[offset // self.data_parallel_size :]]
        batch: list[int] = []
        for idx in idx_range:
            batch.append(idx)
            if len(batch) == self.micro_batch_size:
                self.consumed_samples += block
                yield batch
                batch = []
        if batch and not self.drop_last:
            self.consumed_samples += len(batch)
            yield batch


def replay_skip(make: Callable[[], Iterable[T]], done: int) -> Iterator[T]:
    """Resume by replaying: a fresh iterable, its first ``done`` items generated and discarded."""
    return islice(iter(make()), done, None)


def nemo_assign_loop(
    widths: Sequence[int], heights: Sequence[int], buckets: Sequence[dict[str, Any]]
) -> list[int]:
    """NeMo's rule, one image at a time: the bucket of least ``|aspect_ratio - W / H|``."""
    out = []
    for w, h in zip(widths, heights, strict=True):
        ar = w / h
        best = min(buckets, key=lambda b: abs(b["aspect_ratio"] - ar))
        out.append(best["id"])
    return out


# (height, width) rows of the SDXL table (SDXL paper, appendix I, as commonly reproduced): 20
# landscape, 1 square and 19 portrait resolutions, multiples of 64, with 90 % to 100 % of
# 1024 * 1024 pixels.
_SDXL_HW: tuple[tuple[int, int], ...] = (
    (512, 2048),
    (512, 1984),
    (512, 1920),
    (512, 1856),
    (576, 1792),
    (576, 1728),
    (576, 1664),
    (640, 1600),
    (640, 1536),
    (704, 1472),
    (704, 1408),
    (704, 1344),
    (768, 1344),
    (768, 1280),
    (832, 1216),
    (832, 1152),
    (896, 1152),
    (896, 1088),
    (960, 1088),
    (960, 1024),
    (1024, 1024),
    (1024, 960),
    (1088, 960),
    (1088, 896),
    (1152, 896),
    (1152, 832),
    (1216, 832),
    (1280, 768),
    (1344, 768),
    (1408, 704),
    (1472, 704),
    (1536, 640),
    (1600, 640),
    (1664, 576),
    (1728, 576),
    (1792, 576),
    (1856, 512),
    (1920, 512),
    (1984, 512),
    (2048, 512),
)

#: SDXL-style buckets as ``(width, height)``, ascending in aspect ratio (tallest first).
SDXL_BUCKETS: tuple[tuple[int, int], ...] = tuple(
    sorted(((w, h) for h, w in _SDXL_HW), key=lambda wh: wh[0] / wh[1])
)


def assign_log_nearest(
    widths: npt.ArrayLike, heights: npt.ArrayLike, resolutions: Sequence[tuple[int, int]]
) -> npt.NDArray[np.int64]:
    """Index of the nearest resolution in log aspect ratio (the least crop loss), vectorised.

    ``resolutions`` must be sorted by aspect ratio. Thresholds are the geometric means of
    neighbouring ratios; an image exactly on one goes to the lower index.
    """
    ar = np.array([w / h for w, h in resolutions], dtype=np.float64)
    if np.any(np.diff(ar) <= 0):
        raise ValueError("resolutions must be sorted by strictly increasing aspect ratio")
    thresholds = np.sqrt(ar[:-1] * ar[1:])
    x = np.asarray(widths, dtype=np.float64) / np.asarray(heights, dtype=np.float64)
    return np.searchsorted(thresholds, x, side="left").astype(np.int64)


# -- self-check ---------------------------------------------------------------------------------
def _cyclic_epochs(n: int, mbs: int, dp: int, seed: int, epochs: int) -> list[list[list[int]]]:
    out = []
    for rank in range(dp):
        s = RandpermCyclicSampler(n, mbs, rank, dp, seed=seed)
        batches: list[list[int]] = []
        for _ in range(epochs):
            batches.extend(s)
        out.append(batches)
    return out


def _checks(smoke: bool) -> list[tuple[str, str, bool]]:
    """(check, detail, passed) rows."""
    from dataorder.diffusion.calculators.image import MultiTierBucketCalculator
    from dataorder.llm.megatron import MegatronPretrainingRandomSampler

    rows: list[tuple[str, str, bool]] = []
    # nemo_behaviour.md section 5, worked example: N=10, mbs=2, dp=2, seed=0.
    got = _cyclic_epochs(10, 2, 2, 0, 2)
    want = [[[0, 1], [3, 2], [1, 3], [2, 0]], [[4, 5], [7, 6], [5, 7], [6, 4]]]
    rows.append(("cyclic: documented worked example (N=10, mbs=2, dp=2)", f"{got}", got == want))

    # The same sequences as dataorder's compat="nemo" mode (an independent implementation).
    configs = [(97, 3, 4, 5), (1000, 8, 8, 1234), (4096, 1, 16, 0)]
    if not smoke:
        configs.append((100_003, 4, 8, 7))
    for n, mbs, dp, seed in configs:
        ok = True
        for rank in range(dp):
            base = RandpermCyclicSampler(n, mbs, rank, dp, seed=seed)
            ours = MegatronPretrainingRandomSampler(n, mbs, rank, dp, seed=seed, compat="nemo")
            for _ in range(2):
                ok &= list(base) == list(ours)
        rows.append(
            (f"cyclic == dataorder compat='nemo' (N={n}, mbs={mbs}, dp={dp})", "2 epochs", ok)
        )

    # Megatron-LM's resume (consumed_samples set before iter) continues the order exactly.
    n, mbs, dp = 1000, 4, 2
    full = list(RandpermCyclicSampler(n, mbs, 1, dp, seed=3))
    resumed = RandpermCyclicSampler(n, mbs, 1, dp, seed=3)
    resumed.consumed_samples = 40 * mbs * dp
    skipped = list(replay_skip(lambda: RandpermCyclicSampler(n, mbs, 1, dp, seed=3), 40))
    rows.append(
        (
            "cyclic resume via consumed_samples == uninterrupted",
            "at step 40",
            list(resumed) == full[40:],
        )
    )
    rows.append(("replay_skip == uninterrupted", "at step 40", skipped == full[40:]))

    # NeMo's per-image loop == dataorder's vectorised compat="nemo" assignment.
    rng = np.random.default_rng(0)
    w = rng.integers(1, 5000, size=2000 if smoke else 50_000)
    h = rng.integers(1, 5000, size=w.size)
    for preset in ("256p", "1024p"):
        calc = MultiTierBucketCalculator.from_preset(preset, compat="nemo")
        loop = nemo_assign_loop(w.tolist(), h.tolist(), calc.get_all_buckets())
        rows.append(
            (
                f"NeMo per-image loop == assign(compat='nemo'), {preset}",
                f"{w.size} random sizes",
                loop == calc.assign(w, h).tolist(),
            )
        )

    # The SDXL-style table: 40 entries, multiples of 64, within 7 % of 1024**2 pixels; the
    # vectorised log-nearest rule equals a brute-force argmin of |log ratio|.
    res = np.array(SDXL_BUCKETS)
    px = res[:, 0] * res[:, 1] / 1024**2
    rows.append(
        (
            "SDXL table: 40 buckets, sides multiples of 64, 90-100 % of 1024^2 pixels",
            f"pixels/1024^2 in [{px.min():.3f}, {px.max():.3f}]",
            len(SDXL_BUCKETS) == 40 and not (res % 64).any() and 0.9 <= px.min() <= px.max() <= 1,
        )
    )
    brute = np.abs(
        np.log(w[:, None] / h[:, None]) - np.log(res[None, :, 0] / res[None, :, 1])
    ).argmin(axis=1)
    rows.append(
        (
            "assign_log_nearest == brute-force argmin of abs(log AR diff)",
            f"{w.size} random sizes",
            bool((assign_log_nearest(w, h, SDXL_BUCKETS) == brute).all()),
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="fewer and smaller checks, for CI")
    args = parser.parse_args()
    rows = _checks(args.smoke)
    print("| baseline check | detail | result |")
    print("|---|---|---|")
    for name, detail, ok in rows:
        shown = detail if len(detail) <= 120 else detail[:117] + "..."
        print(f"| {name} | {shown} | {'ok' if ok else 'MISMATCH'} |")
    if not all(ok for _, _, ok in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
