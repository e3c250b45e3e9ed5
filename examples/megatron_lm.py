"""Megatron-LM ``--dataloader-type external``: a packed mixture of two corpora, on DP 4 -> 2 -> 3.

Run it (one process; it plays every data-parallel rank, as Megatron's loop would call them):

    python examples/megatron_lm.py

Two ``.idx``/``.bin`` corpora ("web" and "code", megatron-core's format, written here by
``write_megatron``) replace ``GPTDataset``: ``PackedData("0.6 web 0.4 code", split="75,25,0")``
packs each corpus's train documents into rows of ``seq_length`` tokens and serves them in
Megatron's batch format (``tokens``, ``labels``, ``loss_mask``, ``position_ids``,
``cu_seqlens``, ``max_seqlen``), 60 % web and 40 % code in every global batch; the last 25 % of
each corpus's documents is the valid split. Megatron-LM's ``pretrain()`` needs CUDA, so this
replays what its loop does with the provider (megatron/training/training.py):

1. ``load_checkpoint`` restores ``args.consumed_train_samples`` (here: the value the previous
   "job" reached; for packed data it counts rows), *then* the provider is called on every rank
   (``provider.is_distributed``) and Megatron calls ``next()`` on what it returns;
2. every iteration, each rank takes ``global_batch_size / (micro_batch_size x dp)``
   micro-batches and ``consumed_train_samples += global_batch_size``.

The job runs 2 iterations on 4 ranks, restarts on 2 ranks for 1, then on 3 ranks for 2: one
epoch, 60 rows. Every token id is unique, so the check counts tokens: each train token once,
nothing from the valid documents, the same global batches as one uninterrupted run.
"""

from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from dataorder.integrations.megatron_lm import PackedData, external_provider
from dataorder.llm.packing import write_megatron

# megatron-core, when installed, warns on import that a CPU machine has no Transformer Engine
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

SEQ = 32  # --seq-length
GLOBAL = 12  # --global-batch-size: divisible by micro-batch 1 x 4, 2 and 3 ranks
SPLIT = "75,25,0"  # --split


def write_corpus(prefix: Path, train_rows: int, n_train: int, n_valid: int, first: int) -> int:
    """A corpus whose train documents hold ``train_rows x SEQ`` tokens (so one epoch of the
    0.6/0.4 mixture is one pass over each), every token id unique from ``first``."""
    rng = np.random.default_rng(first)
    lengths = rng.integers(5, train_rows * SEQ // n_train, n_train)
    lengths[-1] = train_rows * SEQ - lengths[:-1].sum()
    lengths = np.concatenate([lengths, rng.integers(5, 60, n_valid)])
    docs, at = [], first
    for n in lengths.tolist():
        docs.append(np.arange(at, at + n))
        at += n
    write_megatron(prefix, docs)
    return at


def run_job(recipe: Any, args: Any, dp: int, iterations: int, split: int = 0) -> list[list[int]]:
    """One job: every rank's iterators built after the checkpoint restored ``args``, then
    ``iterations`` of Megatron's loop; returns each global batch's token ids."""
    streams = []
    for rank in range(dp):
        provider = external_provider(
            recipe, get_args=lambda: args, data_parallel=lambda rank=rank: (rank, dp)
        )
        streams.append(provider(None)[split])
    num_micro = args.global_batch_size // (args.micro_batch_size * dp)
    reads = []
    for _ in range(iterations):
        step: list[int] = []
        for stream in streams:  # every rank's forward_backward_func pulls num_micro batches
            for _ in range(num_micro):
                batch = next(stream)  # what get_batch reads: tokens, labels, loss_mask, ...
                tokens = batch["tokens"][batch["tokens"] != 0]  # 0 is padding
                step += tokens.tolist()
        if split == 0:
            args.consumed_train_samples += args.global_batch_size  # training.py
        else:
            args.consumed_valid_samples += args.global_batch_size
        reads.append(sorted(step))
    return reads


def fresh_args() -> SimpleNamespace:
    return SimpleNamespace(
        micro_batch_size=1,
        global_batch_size=GLOBAL,
        seq_length=SEQ,
        consumed_train_samples=0,
        consumed_valid_samples=0,
        rampup_batch_size=None,
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        web, code = Path(tmp) / "web", Path(tmp) / "code"
        end = write_corpus(web, 36, 27, 9, first=1)
        write_corpus(code, 24, 18, 6, first=end)
        print("corpora: web (27 train + 9 valid documents), code (18 + 6), .idx/.bin")
        recipe = PackedData(f"0.6 {web} 0.4 {code}", seed=1234, split=SPLIT)

        args = fresh_args()
        reads: list[list[int]] = []
        for dp, iterations in ((4, 2), (2, 1), (3, 2)):
            before = args.consumed_train_samples
            reads += run_job(recipe, args, dp, iterations)
            after = args.consumed_train_samples
            print(f"DP {dp}: consumed_train_samples {before} -> {after} rows")

        straight = run_job(recipe, fresh_args(), 1, len(reads))
        same = straight == reads
        print(f"the same global batches as one uninterrupted run on DP 1 {'✓' if same else '✗'}")

        valid = run_job(recipe, args, 3, 1, split=1)[0]  # an evaluation, on the last layout
        train_ids = {t for step in straight for t in step}
        held_out = not train_ids & set(valid)
        mark = "✓" if held_out else "✗"
        print(f"valid: {len(valid)} held-out tokens, none of a train document {mark}")

        train_tokens = 36 * SEQ + 24 * SEQ
        counts = Counter(t for step in reads for t in step)
        once = len(counts) == train_tokens and set(counts.values()) == {1}
        if not (same and held_out and once):
            raise SystemExit("the packed mixture was not read exactly once across the restarts")
        print(f"epoch 0: every token once ✓ ({len(counts)} of {train_tokens})")


if __name__ == "__main__":
    main()
