"""Megatron-LM ``--dataloader-type external`` as its loop drives it (examples/megatron_lm.py).

Megatron-LM's ``pretrain()`` needs CUDA and Megatron-LM is not on PyPI, so the example replays
its calls with a fake ``args``: the checkpoint's ``consumed_train_samples`` is restored before the
provider builds every rank's iterator, each iteration takes ``global_batch / (mbs x dp)``
micro-batches per rank and adds the global batch to the count; the job is rebuilt on DP 4 -> 2
-> 3. ``compat="megatron"`` is compared with the golden sequences taken from Megatron-LM's own
``data_samplers.py`` (tests/llm/test_compat_megatron.py), crossing epochs as its ``cyclic_iter``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from dataorder.integrations.megatron_lm import (
    BlendedData,
    EpochStream,
    MapStyleData,
    PackedData,
    external_provider,
    parse_data_path,
)
from dataorder.llm.packing import write_megatron
from dataorder.llm.packing.dataset import MegatronTokens
from tests.llm.test_compat_megatron import GOLDEN

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "megatron_lm.py"


def test_the_example_reads_every_token_of_a_packed_mixture_once_across_dp_4_2_3() -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=240, check=True
    ).stdout
    for line in (
        "DP 4: consumed_train_samples 0 -> 24 rows",
        "DP 2: consumed_train_samples 24 -> 36 rows",
        "DP 3: consumed_train_samples 36 -> 60 rows",
        "the same global batches as one uninterrupted run on DP 1 ✓",
        "none of a train document ✓",
    ):
        assert line in out
    assert out.rstrip().endswith("epoch 0: every token once ✓ (1920 of 1920)")


def _args(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(consumed_valid_samples=0, global_batch_size=None, **kw)


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_compat_megatron_is_megatrons_cyclic_order(key: tuple[int, int, int, bool, int]) -> None:
    n, mbs, dp, sharding, consumed = key
    for rank in range(dp):
        args = _args(micro_batch_size=mbs, consumed_train_samples=consumed, data_sharding=sharding)
        provider = external_provider(
            lambda _: (list(range(n)), None, None),
            compat="megatron",
            collate_fn=list,
            get_args=lambda args=args: args,
            data_parallel=lambda rank=rank: (rank, dp),
        )
        train = provider(None)[0]
        want = [b for one_pass in GOLDEN[key][rank] for b in one_pass]
        assert [next(train) for _ in want] == want


def test_the_valid_iterator_starts_at_consumed_valid_samples() -> None:
    args = _args(micro_batch_size=2, consumed_train_samples=0)
    args.consumed_valid_samples = 8
    provider = external_provider(
        lambda _: (list(range(20)), list(range(16)), None),
        order="single",
        collate_fn=list,
        get_args=lambda: args,
        data_parallel=lambda: (1, 2),
    )
    _, valid, test = provider(None)
    assert isinstance(valid, EpochStream)
    assert test is None
    assert [next(valid) for _ in range(3)] == [[10, 11], [14, 15], [2, 3]]  # into epoch 1


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="order must be one of"):
        external_provider(lambda _: (None, None, None), order="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="order must be 'cyclic' with compat='megatron'"):
        external_provider(lambda _: (None, None, None), order="single", compat="megatron")


# -- every sampler through a recipe: PackedData, BlendedData ------------------------------------
SEQ, GLOBAL = 32, 12


def write_corpus(prefix: Path, train_rows: int, n_train: int, n_valid: int, first: int) -> int:
    """A corpus whose train documents fill ``train_rows`` rows of SEQ exactly, every token id
    unique (from ``first``); returns the next free id."""
    rng = np.random.default_rng(first)
    lengths = rng.integers(5, train_rows * SEQ // n_train, n_train)
    lengths[-1] = 0
    lengths[-1] = train_rows * SEQ - lengths.sum()
    assert lengths[-1] > 0
    lengths = np.concatenate([lengths, rng.integers(5, 60, n_valid)])
    docs, at = [], first
    for n in lengths.tolist():
        docs.append(list(range(at, at + n)))
        at += n
    write_megatron(prefix, docs)
    return at


def replay(
    provider: Any, args: Any, dp: int, iterations: int, *, split: int = 0
) -> list[list[int]]:
    """Megatron's loop: every rank's iterators built after the restore, each iteration every
    rank pulls its micro-batches and the count grows by the global batch."""
    streams = [provider(rank)(None)[split] for rank in range(dp)]
    num_micro = args.global_batch_size // (args.micro_batch_size * dp)
    reads = []
    for _ in range(iterations):
        step: list[int] = []
        for stream in streams:
            for _ in range(num_micro):
                batch = next(stream)
                tokens = batch["tokens"] if isinstance(batch, dict) else batch
                step += [int(t) for t in torch.as_tensor(tokens).reshape(-1) if int(t) != 0]
        if split == 0:
            args.consumed_train_samples += args.global_batch_size
        else:
            args.consumed_valid_samples += args.global_batch_size
        reads.append(sorted(step))
    return reads


def _packed_provider(recipe: Any, args: Any, dp: int) -> Any:
    return lambda rank: external_provider(
        recipe, get_args=lambda: args, data_parallel=lambda: (rank, dp)
    )


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, int]:
    tmp = tmp_path_factory.mktemp("corpora")
    end = write_corpus(tmp / "web", 36, 27, 9, first=1)
    end = write_corpus(tmp / "code", 24, 18, 6, first=end)
    return str(tmp / "web"), str(tmp / "code"), end


def _run_args(consumed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        micro_batch_size=1,
        global_batch_size=GLOBAL,
        seq_length=SEQ,
        consumed_train_samples=consumed,
        consumed_valid_samples=0,
        rampup_batch_size=None,
    )


def test_a_packed_mixture_reads_every_token_once_across_dp_4_2_3(
    corpora: tuple[str, str, int],
) -> None:
    web, code, _ = corpora
    recipe = PackedData(f"0.6 {web} 0.4 {code}", seed=7, split="75,25,0")
    args = _run_args()
    reads = []
    for dp, iterations in ((4, 2), (2, 1), (3, 2)):  # 5 global batches of 12 rows: one epoch
        reads += replay(_packed_provider(recipe, args, dp), args, dp, iterations)
    assert args.consumed_train_samples == 60
    straight = _run_args()
    assert reads == replay(_packed_provider(recipe, straight, 1), straight, 1, 5)
    tokens = [t for step in reads for t in step]
    from dataorder.llm.packing import DocumentLengths

    train_tokens = set()
    for prefix, n_train in ((web, 27), (code, 18)):
        lens = DocumentLengths.from_megatron(prefix).slice(0, n_train)
        first = int(MegatronTokens(prefix).tokens(0, 0, 1)[0])
        train_tokens |= set(range(first, first + int(lens.sum())))
    assert sorted(tokens) == sorted(train_tokens)  # every train token once, nothing held out


def test_the_packed_valid_split_is_held_out_and_leaves_the_train_alone(
    corpora: tuple[str, str, int],
) -> None:
    web, code, _ = corpora
    recipe = PackedData([web, code], seed=7, split="75,25,0")  # no weights: each read whole
    args = _run_args()
    train_alone = replay(_packed_provider(recipe, args, 2), args, 2, 2)
    args = _run_args()
    provider = _packed_provider(recipe, args, 2)
    valid = replay(provider, args, 2, 1, split=1)
    assert args.consumed_valid_samples == GLOBAL
    assert replay(provider, args, 2, 2) == train_alone
    held = set()
    for prefix, n_train in ((web, 27), (code, 18)):
        tokens = MegatronTokens(prefix)
        for d in range(n_train, len(tokens)):
            held |= set(tokens.tokens(d, 0, tokens.length(d)).tolist())
    assert valid[0]
    assert set(valid[0]) <= held
    again = _run_args()
    again.consumed_valid_samples = 0
    assert replay(_packed_provider(recipe, again, 2), again, 2, 1, split=1) == valid


def test_a_blend_continues_exactly_across_a_data_parallel_change() -> None:
    sources = [list(range(1, 101)), list(range(1001, 1041))]
    recipe = BlendedData(sources, [0.7, 0.3], seed=5, split="90,10,0", collate_fn=list)
    args = _run_args()
    reads = []
    for dp, iterations in ((4, 3), (3, 2)):
        reads += replay(_packed_provider(recipe, args, dp), args, dp, iterations)
    straight = _run_args()
    assert reads == replay(_packed_provider(recipe, straight, 2), straight, 2, 5)
    flat = [t for step in reads for t in step]
    assert len(flat) == len(set(flat)) == 60
    assert set(flat) <= set(range(1, 91)) | set(range(1001, 1037))  # the train ranges
    valid = replay(_packed_provider(recipe, _run_args(), 2), _run_args(), 2, 1, split=1)
    assert set(valid[0]) <= set(range(91, 101)) | set(range(1037, 1041))


def test_recipes_and_data_paths_refuse_what_they_cannot_use(
    corpora: tuple[str, str, int],
) -> None:
    web, _, _ = corpora
    with pytest.raises(ValueError, match="order must be None with a recipe"):
        external_provider(PackedData(web), order="single")
    with pytest.raises(ValueError, match="collate_fn must be None with a recipe"):
        external_provider(PackedData(web), collate_fn=list)
    with pytest.raises(TypeError, match="build_datasets must be a function"):
        external_provider(3)  # type: ignore[arg-type]
    assert parse_data_path(f"0.3 {web} 0.7 {web}") == ([web, web], [0.3, 0.7])
    for bad, message in (
        (f"0.3 {web} 0.7", "an even number of items"),
        (f"{web} 0.7", "weight prefix pairs, or prefixes without weights"),
        (f"-1 {web}", "non-negative weights"),
        ("", "prefixes, or weight prefix pairs"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_data_path(bad)
    with pytest.raises(ValueError, match="packing must be one of 'overflow', 'never'"):
        PackedData(web, packing="split")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split must be up to three non-negative numbers"):
        PackedData(web, split="train")
    with pytest.raises(ValueError, match="data_path must be weight prefix pairs"):
        PackedData(f"0.5 {web} 0.5")
    with pytest.raises(TypeError, match="sources must be a non-empty sequence"):
        BlendedData([], [1.0])
    ramp = _run_args()
    ramp.rampup_batch_size = [4, 4, 100]
    provider = external_provider(
        PackedData(web), get_args=lambda: ramp, data_parallel=lambda: (0, 1)
    )
    with pytest.raises(TypeError, match=r"PackedData\(global_batch_size=\) must be a BatchSize"):
        provider(None)
    single = PackedData(web, seed=1)
    one = external_provider(single, get_args=_run_args, data_parallel=lambda: (0, 2))(None)
    assert one[1] is None
    assert one[2] is None
    assert one[0].sampler.mixture is None


def test_packed_data_reads_data_path_split_and_seed_from_megatrons_args(
    corpora: tuple[str, str, int],
) -> None:
    web, code, _ = corpora
    args = _run_args()
    args.data_path, args.split, args.seed = ["0.6", web, "0.4", code], "75,25,0", 7
    from_args = replay(_packed_provider(PackedData(), args, 2), args, 2, 2)
    given = _run_args()
    recipe = PackedData(f"0.6 {web} 0.4 {code}", seed=7, split="75,25,0")
    assert from_args == replay(_packed_provider(recipe, given, 2), given, 2, 2)
    with pytest.raises(TypeError, match=r"data_path must be given, or args.data_path"):
        external_provider(PackedData(), get_args=_run_args, data_parallel=lambda: (0, 1))(None)


def _single(consumed: int, mbs: int, rank: int, dp: int, total: int) -> list[list[int]]:
    """Megatron-LM's MegatronPretrainingSampler, written out: global blocks of ``mbs x dp`` from
    ``consumed``; rank ``r`` takes ``[r * mbs, (r + 1) * mbs)`` of each block."""
    out, start = [], consumed
    while start + mbs * dp <= total:
        out.append(list(range(start + rank * mbs, start + (rank + 1) * mbs)))
        start += mbs * dp
    return out


@pytest.mark.parametrize("order", ["single", "cyclic"])
def test_map_style_orders_read_every_sample_once_per_epoch_across_dp_4_2_3(order: str) -> None:
    n = 60

    def provider(args: Any, dp: int) -> Any:
        return lambda rank: external_provider(
            lambda _: (list(range(1, n + 1)), None, None),
            order=order,  # type: ignore[arg-type]
            seed=1234,
            collate_fn=list,
            get_args=lambda: args,
            data_parallel=lambda: (rank, dp),
        )

    args = _run_args()
    reads = []
    for dp, iterations in ((4, 3), (2, 4), (3, 3)):  # 10 iterations: 2 epochs of 60
        reads += replay(provider(args, dp), args, dp, iterations)
    flat = [i for step in reads for i in step]
    for epoch in range(2):
        assert sorted(flat[epoch * n : (epoch + 1) * n]) == list(range(1, n + 1))


def test_single_equals_megatrons_sampler_at_any_consumed_count() -> None:
    for consumed in (0, 12, 36):
        for rank in range(2):
            args = _args(micro_batch_size=2, consumed_train_samples=consumed)
            args.global_batch_size = 12
            train = external_provider(
                lambda _: (list(range(60)), None, None),
                order="single",
                collate_fn=list,
                get_args=lambda args=args: args,
                data_parallel=lambda rank=rank: (rank, 2),
            )(None)[0]
            want = _single(consumed, 2, rank, 2, 60)
            assert [next(train) for _ in want] == want


@pytest.mark.parametrize("as_recipe", [False, True])
def test_the_datasets_function_receives_megatrons_sample_counts(as_recipe: bool) -> None:
    """A bare function and the same function as a ``MapStyleData`` recipe both receive
    Megatron's ``train_val_test_num_samples`` (the recipe passed None before)."""
    seen: list[Any] = []

    def build(counts: Any) -> tuple[Any, Any, Any]:
        seen.append(counts)
        return list(range(16)), None, None

    args = SimpleNamespace(
        micro_batch_size=2, global_batch_size=4, consumed_train_samples=0, consumed_valid_samples=0
    )
    given: Any = MapStyleData(build) if as_recipe else build
    external_provider(given, get_args=lambda: args, data_parallel=lambda: (0, 1))([160, 16, 0])
    assert seen == [[160, 16, 0]]
