"""``PackedDataset(..., style="megatron")``: the batch Megatron-LM's ``get_batch`` and
megatron-core's ``GPTModel`` take (NOTE [ Megatron rows ]).

The oracle tests need megatron-core (``pip install -c constraints/test.txt megatron-core==0.16.1``)
and skip without it: one document's items equal ``GPTDataset``'s, a row of EOD-terminated
documents equals ``GPTDataset``'s sample under the three reset flags, and a tiny ``GPTModel``
gives the same loss on packed rows as on the documents one by one
(tests/llm/packing/megatron_core_gpt.py).
A tiny torch causal model checks the same loss equality in CI, through ``cu_seqlens`` and
through ``attention_mask``.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from dataorder.llm.packing import PackedSampler, write_megatron
from dataorder.llm.packing.batch_styles import MegatronStyle, packed_seq_params
from dataorder.llm.packing.dataset import DocumentRange, PackedDataset, SequenceTokens

DOCS = [[10, 11, 12], [20, 21, 22, 23]]


def _has_megatron_core() -> bool:
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except (ImportError, ValueError):  # no parent package "megatron"
        return False


HAS_MCORE = _has_megatron_core()
needs_mcore = pytest.mark.skipif(not HAS_MCORE, reason="megatron-core is not installed")


def test_the_documented_row() -> None:
    item = PackedDataset(DOCS, 8, style="megatron").arrays(((1, 1, 4), (0, 0, 2)))
    assert item["tokens"].tolist() == [21, 22, 23, 10, 11, 0, 0, 0]
    assert item["labels"].tolist() == [22, 23, 10, 11, 12, 0, 0, 0]
    assert item["loss_mask"].tolist() == [1, 1, 0, 1, 1, 0, 0, 0]
    assert item["loss_mask"].dtype == np.float32
    assert item["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert item["cu_seqlens"].tolist() == [0, 3, 5, 8, 8, 8, 8, 8, 8]
    assert int(item["max_seqlen"]) == 3
    assert sorted(item) == [
        "cu_seqlens",
        "labels",
        "loss_mask",
        "max_seqlen",
        "position_ids",
        "tokens",
    ]


def test_every_token_but_a_documents_first_is_predicted_once_per_epoch() -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 1000, n).tolist() for n in rng.integers(1, 40, 60)]
    sampler = PackedSampler([len(d) for d in docs], 16, 2, 0, 1, seed=1, chunk=4, window=8)
    dataset = PackedDataset(docs, 16, style="megatron")
    predicted: dict[int, list[int]] = {}
    for rows in sampler:
        for row in rows:
            item = dataset.arrays(row)
            slot = 0
            for d, a, b in row:
                keep = item["loss_mask"][slot : slot + b - a] == 1
                predicted.setdefault(d, []).extend(item["labels"][slot : slot + b - a][keep])
                slot += b - a
    assert any(len(d) > 16 for d in docs)  # some documents are split across rows
    for d, doc in enumerate(docs):
        assert sorted(predicted.get(d, [])) == sorted(doc[1:]), d


def test_eod_mask_loss_position_reset_and_attention_options() -> None:
    docs = [[5, 6, 2], [7, 2, 8, 2]]  # 2 is EOD, also inside the second document
    row = ((0, 0, 3), (1, 0, 4))
    plain = PackedDataset(docs, 8, style="megatron").arrays(row)
    assert plain["loss_mask"].tolist() == [1, 1, 0, 1, 1, 1, 0, 0]
    eod = PackedDataset(docs, 8, style=MegatronStyle(eod_mask_loss=True, eod=2)).arrays(row)
    assert eod["loss_mask"].tolist() == [1, 1, 0, 1, 0, 1, 0, 0]
    flat = PackedDataset(docs, 8, style=MegatronStyle(reset_position_ids=False)).arrays(row)
    assert flat["position_ids"].tolist() == list(range(8))
    masked = PackedDataset(docs, 8, style=MegatronStyle(attention="mask")).arrays(row)
    segment = np.array([0, 0, 0, 1, 1, 1, 1, 2])
    allowed = (segment[:, None] == segment[None, :]) & np.tri(8, dtype=bool)
    assert masked["attention_mask"].shape == (1, 8, 8)
    assert (masked["attention_mask"][0] == ~allowed).all()
    assert "cu_seqlens" not in masked
    causal = PackedDataset(docs, 8, style=MegatronStyle(attention="causal")).arrays(row)
    assert sorted(causal) == ["labels", "loss_mask", "position_ids", "tokens"]


def test_a_padding_row_has_no_loss() -> None:
    item = PackedDataset(DOCS, 4, style="megatron", pad_id=9).arrays(())
    assert item["tokens"].tolist() == [9] * 4
    assert item["loss_mask"].tolist() == [0] * 4
    assert item["cu_seqlens"].tolist() == [0, 4, 4, 4, 4]


def test_collate_stacks_as_megatron_and_flattens_the_packed_seq_params() -> None:
    dataset = PackedDataset(DOCS, 8, style="megatron")
    items = [dataset[((1, 1, 4), (0, 0, 2))], dataset[((0, 0, 3),)]]
    for collate in (PackedDataset.collate, dataset.collate_fn):
        batch = collate(items)
        assert batch["tokens"].shape == (2, 8)
        assert batch["cu_seqlens"].shape == (2, 9)
        assert batch["max_seqlen"].tolist() == [3, 5]
        params = batch["packed_seq_params"]
        fields = params if isinstance(params, dict) else vars(params)
        assert fields["qkv_format"] == "thd"
        assert fields["cu_seqlens_q"].tolist() == [0, 3, 5, 8, 11, 16]
        assert fields["max_seqlen_q"] == 5
    with pytest.raises(TypeError, match=r"items\[1\] must be a dict of tokens"):
        dataset.collate_fn([items[0], {"x": 1}])
    flat = packed_seq_params(torch.tensor([[0, 4, 4, 4, 4]], dtype=torch.int32))
    assert (flat if isinstance(flat, dict) else vars(flat))["cu_seqlens_q"].tolist() == [0, 4]


def test_bad_style_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="style must be 'hf', 'megatron' or a MegatronStyle"):
        PackedDataset(DOCS, 8, style="nemo")
    with pytest.raises(ValueError, match="attention must be one of 'thd', 'mask', 'causal'"):
        MegatronStyle(attention="flash")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eod must be the end-of-document token id"):
        MegatronStyle(eod_mask_loss=True)
    with pytest.raises(TypeError, match="eod_mask_loss must be a bool"):
        MegatronStyle(eod_mask_loss=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pad_id must be a token id >= 0 with a Megatron style"):
        PackedDataset(DOCS, 8, style="megatron", pad_id=-1)
    with pytest.raises(ValueError, match="stop must be"):
        DocumentRange(SequenceTokens(DOCS), 1, 3)


# -- the loss of packed rows equals the documents' one by one ------------------------------------
class TinyCausalLM(torch.nn.Module):
    """One attention layer over learned positions: enough for position ids, masks and labels to
    matter."""

    def __init__(self, vocab: int, seq: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(vocab, 16)
        self.pos = torch.nn.Embedding(seq, 16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.out = torch.nn.Linear(16, vocab)

    def losses(self, tokens: Any, positions: Any, masked: Any, labels: Any) -> Any:
        """Per-token losses; ``masked[b, i, j]`` True where ``i`` may not attend to ``j``."""
        h = self.embed(tokens) + self.pos(positions)
        mask = masked.repeat_interleave(2, dim=0)  # per head
        h = h + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        logits = self.out(h)
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")


def _masks_from_cu_seqlens(cu_seqlens: Any, s: int) -> Any:
    """The block-diagonal causal masks a THD kernel applies, from the per-row ``cu_seqlens``."""
    out = []
    for row in cu_seqlens:
        segment = torch.zeros(s, dtype=torch.long)
        for start in row[1:].tolist():
            if start < s:
                segment[start:] += 1
        allowed = (segment[:, None] == segment[None, :]) & torch.tril(torch.ones(s, s)).bool()
        out.append(~allowed)
    return torch.stack(out)


@pytest.mark.parametrize("attention", ["thd", "mask"])
def test_packed_rows_give_the_loss_of_the_documents_one_by_one(attention: str) -> None:
    rng = np.random.default_rng(4)
    docs = [rng.integers(1, 40, n).tolist() for n in (7, 3, 12, 5, 9, 4, 16, 2, 6, 11)]
    seq = 16
    model = TinyCausalLM(40, seq).eval()
    sampler = PackedSampler(
        [len(d) for d in docs], seq, 3, 0, 1, seed=2, split="never", drop_last=False
    )
    dataset = PackedDataset(docs, seq, style=MegatronStyle(attention=attention))  # type: ignore[arg-type]
    total = count = 0.0
    read = []
    with torch.no_grad():
        for rows in sampler:
            read += [d for row in rows for d, _, _ in row]
            batch = dataset.collate_fn([dataset[row] for row in rows])
            if attention == "thd":
                masked = _masks_from_cu_seqlens(batch["cu_seqlens"], seq)
            else:
                masked = batch["attention_mask"][:, 0]
            losses = model.losses(batch["tokens"], batch["position_ids"], masked, batch["labels"])
            total += float((losses * batch["loss_mask"]).sum())
            count += float(batch["loss_mask"].sum())
        assert sorted(read) == list(range(len(docs)))
        alone = 0.0
        for doc in docs:
            n = len(doc) - 1
            causal = ~torch.tril(torch.ones(n, n, dtype=torch.bool))[None]
            alone += float(
                model.losses(
                    torch.tensor([doc[:-1]]),
                    torch.arange(n)[None],
                    causal,
                    torch.tensor([doc[1:]]),
                ).sum()
            )
    assert count == sum(len(d) - 1 for d in docs)
    assert abs(total / count - alone / count) < 1e-5


# -- oracles: megatron-core ----------------------------------------------------------------------
def _gpt_dataset(tmp_path: Path, docs: list[list[int]], seq: int, reset: bool) -> Any:
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    prefix = str(tmp_path / "corpus")
    write_megatron(prefix, docs)
    tokenizer = SimpleNamespace(
        eod=2, pad=None, vocab_size=1000, unique_identifiers={"class": "toy"}
    )
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=seq,
        blend=([prefix], None),
        split="1,0,0",
        path_to_cache=str(tmp_path / "cache"),
        tokenizer=tokenizer,
        reset_position_ids=reset,
        reset_attention_mask=reset,
        eod_mask_loss=reset,
    )
    indexed = IndexedDataset(prefix)
    ids = np.arange(len(docs), dtype=np.int32)
    return GPTDataset(indexed, prefix, ids, None, Split.train, config)


def _rows_of(gpt: Any, idx: int, lengths: list[int]) -> tuple[tuple[int, int, int], ...]:
    """The spans GPTDataset's sample ``idx`` reads (its extra label token excluded)."""
    j = int(gpt.shuffle_index[idx])
    (b, b_off), (e, e_off) = gpt.sample_index[j], gpt.sample_index[j + 1]
    spans = []
    for k in range(int(b), int(e) + 1):
        d = int(gpt.document_index[k])
        start = int(b_off) if k == b else 0
        stop = int(e_off) if k == e else lengths[d]
        if stop > start:
            spans.append((d, start, stop))
    return tuple(spans)


@needs_mcore
@pytest.mark.parametrize("reset", [False, True])
def test_one_documents_items_equal_gpt_datasets(tmp_path: Path, reset: bool) -> None:
    seq = 8
    doc = list(range(100, 100 + 3 * seq + 1))
    gpt = _gpt_dataset(tmp_path, [doc], seq, reset)
    style = MegatronStyle(attention="mask", reset_position_ids=reset, eod_mask_loss=reset, eod=2)
    ours = PackedDataset([doc], seq, style=style)
    assert len(gpt) == 3
    for idx in range(len(gpt)):
        theirs = gpt[idx]
        mine = ours[_rows_of(gpt, idx, [len(doc)])]
        assert sorted(theirs) == sorted(mine)
        for key in theirs:
            assert torch.equal(theirs[key], mine[key]), key


@needs_mcore
def test_a_row_of_eod_documents_equals_gpt_datasets_sample_under_the_reset_flags(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(7)
    docs = [[*rng.integers(3, 90, n).tolist(), 2] for n in (4, 9, 2, 6, 3, 11, 5)]
    seq = 12
    gpt = _gpt_dataset(tmp_path, docs, seq, reset=True)
    ours = PackedDataset(
        docs, seq, style=MegatronStyle(attention="mask", eod_mask_loss=True, eod=2)
    )
    lengths = [len(d) for d in docs]
    for idx in range(len(gpt)):
        theirs = gpt[idx]
        mine = ours[_rows_of(gpt, idx, lengths)]
        for key in ("tokens", "loss_mask", "position_ids", "attention_mask"):
            assert torch.equal(theirs[key], mine[key]), (idx, key)
        keep = mine["loss_mask"] == 1  # labels the loss ignores may differ (ours: pad_id)
        assert torch.equal(theirs["labels"][keep], mine["labels"][keep]), idx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_mcore
def test_a_tiny_gpt_model_gives_the_same_loss_packed_and_one_by_one() -> None:
    script = Path(__file__).with_name("megatron_core_gpt.py")
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(script), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=True,
    ).stdout.split()
    assert out[:2] == ["documents", "True"]
    packed, alone = float(out[3]), float(out[5])
    assert abs(packed - alone) < 1e-5
    assert int(out[7]) == 55
