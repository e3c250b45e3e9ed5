"""Megatron-LM ``--dataloader-type external``: the loop's calls, rebuilt on DP 4 -> 2 -> 3.

Run it (one process; it plays every data-parallel rank, as Megatron's loop would call them):

    python examples/megatron_lm.py

Megatron-LM's ``pretrain()`` needs CUDA, so this replays what its loop does with the provider
(megatron/training/training.py and megatron/training/datasets/data_samplers.py):

1. ``load_checkpoint`` restores ``args.consumed_train_samples`` (here: the value the previous
   "job" reached), *then* ``build_train_valid_test_data_iterators`` calls the provider on every
   rank (``provider.is_distributed``) and wraps each result in ``RerunDataIterator``, which calls
   ``next()`` on it;
2. every iteration, each rank takes ``global_batch_size / (micro_batch_size x dp)`` micro-batches
   and ``consumed_train_samples += global_batch_size``.

The job runs 3 iterations on 4 ranks, "restarts" on 2 ranks for 4 iterations, then on 3 ranks to
the end of epoch 1; every sample of each epoch is read exactly once. Then the ``single`` order is
compared with Megatron's single sampler (written out plainly below) for the same
``consumed_samples``, and ``compat="megatron"`` shows Megatron's own cyclic order.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from dataorder.integrations.megatron_lm import external_provider

N = 60  # a multiple of the global batch: every layout's epoch is the same 60 positions
GLOBAL_BATCH = 12  # divisible by micro-batch 1 x 4, 2 and 3 ranks


def datasets(train_val_test_num_samples: Any) -> tuple[Any, Any, Any]:
    """Megatron's dataset provider part: map-style datasets (here sample i is i)."""
    return list(range(N)), list(range(24)), None


def collate(batch: list[int]) -> list[int]:
    return list(batch)


def run_job(args: Any, dp: int, iterations: int, order: str) -> list[list[int]]:
    """One job: build every rank's iterators (after the checkpoint restored args), then train."""
    iterators = []
    for rank in range(dp):
        provider = external_provider(
            datasets,
            order=order,  # type: ignore[arg-type]
            seed=1234,
            collate_fn=collate,
            get_args=lambda: args,
            data_parallel=lambda rank=rank: (rank, dp),
        )
        assert provider.is_distributed  # type: ignore[attr-defined]
        train = provider([iterations * GLOBAL_BATCH, 24, 0])[0]
        iterators.append(train)
    reads = []
    num_micro = GLOBAL_BATCH // (args.micro_batch_size * dp)
    for _ in range(iterations):
        step: list[int] = []
        for it in iterators:  # every rank's forward_backward_func pulls num_micro batches
            for _ in range(num_micro):
                step += next(it)
        args.consumed_train_samples += GLOBAL_BATCH  # training.py, after each iteration
        reads.append(step)
    return reads


def megatron_single(consumed: int, mbs: int, rank: int, dp: int, total: int) -> list[list[int]]:
    """Megatron-LM's MegatronPretrainingSampler, written out: global blocks of ``mbs x dp`` from
    ``consumed``; rank ``r`` takes ``[r * mbs, (r + 1) * mbs)`` of each block; the tail is
    dropped."""
    out = []
    start = consumed
    while start + mbs * dp <= total:
        out.append(list(range(start + rank * mbs, start + (rank + 1) * mbs)))
        start += mbs * dp
    return out


def main() -> None:
    for order in ("cyclic", "single"):
        args = SimpleNamespace(
            micro_batch_size=1,
            global_batch_size=GLOBAL_BATCH,
            consumed_train_samples=0,
            consumed_valid_samples=0,
            rampup_batch_size=None,
        )
        reads: list[list[int]] = []
        for dp, iterations in ((4, 3), (2, 4), (3, 3)):  # 10 iterations: 2 epochs of 60
            before = args.consumed_train_samples
            reads += run_job(args, dp, iterations, order)
            print(
                f"{order}: DP {dp}, consumed_train_samples {before} -> "
                f"{args.consumed_train_samples}"
            )
        flat = [i for step in reads for i in step]
        for epoch in range(2):
            part = Counter(flat[epoch * N : (epoch + 1) * N])
            once = part == Counter(range(N))
            print(f"{order}: epoch {epoch}: {N} samples, each {'exactly once' if once else 'NOT'}")
            if not once:
                raise SystemExit(f"{order}: epoch {epoch} was not read exactly once")

    # the single order is Megatron's, for any consumed_samples inside the epoch
    for consumed in (0, 12, 36):
        for rank in range(2):
            args = SimpleNamespace(
                micro_batch_size=2,
                global_batch_size=12,
                consumed_train_samples=consumed,
                consumed_valid_samples=0,
            )
            provider = external_provider(
                datasets,
                order="single",
                collate_fn=collate,
                get_args=lambda args=args: args,
                data_parallel=lambda rank=rank: (rank, 2),
            )
            train = provider(None)[0]
            want = megatron_single(consumed, 2, rank, 2, N)
            got = [next(train) for _ in want]
            if got != want:
                raise SystemExit(f"single differs from Megatron's at consumed={consumed}")
    print("single: equal to Megatron's sampler at consumed_samples 0, 12, 36 on 2 ranks")

    # compat="megatron": Megatron-LM's own cyclic order (bound to the DP size, as Megatron's)
    args = SimpleNamespace(
        micro_batch_size=2,
        global_batch_size=4,
        consumed_train_samples=12,
        consumed_valid_samples=0,
        data_sharding=False,
    )
    for rank in range(2):
        provider = external_provider(
            lambda n: (list(range(10)), None, None),
            compat="megatron",
            collate_fn=collate,
            get_args=lambda: args,
            data_parallel=lambda rank=rank: (rank, 2),
        )
        train = provider(None)[0]
        print(f"compat=megatron rank {rank}: {[next(train) for _ in range(3)]}")


if __name__ == "__main__":
    main()
