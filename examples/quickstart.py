"""The smallest real example: a permuted epoch of a billion samples, sliced per rank, resumed."""

from __future__ import annotations

from dataorder import Permutation, derive_key, plan_epoch

N, PER_RANK, WORLD, SEED = 10**9, 4, 8, 1234

order = Permutation(N, derive_key(SEED, epoch=0, stream="quickstart", purpose="sample-order"))
layout = plan_epoch(N, per_rank=PER_RANK, dp_size=WORLD, tail="drop")
for rank in (0, WORLD - 1):
    first = order(layout.batch_positions(0, rank=rank, split="contiguous"))
    print(f"rank {rank}: first micro-batch {first.tolist()}")
step = layout.step_of(10**6 * PER_RANK * WORLD)
print(
    f"resume at step {step}: rank 0 reads",
    order(layout.batch_positions(step, rank=0, split="contiguous")).tolist(),
)
print(f"{layout.num_batches} steps per epoch, {layout.dropped} samples dropped")
